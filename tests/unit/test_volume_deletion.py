"""Deleting a removed volume only if the array created it and an apply asked: the rules
(``vsa_core.reconcile.plan``, pure) and ReconcileArray's ``detach``/``delete`` steps on moto."""

import time
from typing import Any

import boto3
import pytest

from tests.specs import CONTROLLERS
from tests.unit.conftest import REGION
from vsa_core.arrays import aws_lock
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.spec import ArraySpec
from vsa_core.reconcile import aws_record, aws_steps, plan
from vsa_core.reconcile.plan import Controller, Observed
from vsa_core.reconcile.steps import Poll, Start

KEPT, OWNED, FOREIGN = "vol-0a1b2c3d4e5f60001", "vol-0a1b2c3d4e5f60002", "vol-0a1b2c3d4e5f60003"
C1 = "i-0a1b2c3d4e5f60c01"
OWNED_TAGS = {"vsa:array": "demo", "vsa:deployment": "vsa", "vsa:owned": "true", "Name": "vsa-demo-data"}


def spec(**more: Any) -> ArraySpec:
    return ArraySpec.model_validate(
        {
            "arrayId": "demo",
            "availabilityZone": "us-east-1a",
            "controllers": CONTROLLERS,
            "minControllers": 1,
            "maxControllers": 2,
            "volumes": [{"volumeId": KEPT}],
            **more,
        }
    )


def seen(states: dict[str, str], tags: dict[str, dict[str, str]], **more: Any) -> Observed:
    return Observed(
        spec=spec(),
        volume_ids=(KEPT,),
        controllers=(Controller(C1, "10.0.0.1", 0),),
        volume_states={KEPT: "in-use", **states},
        attachments=more.pop("attachments", {KEPT: {C1: "attached"}}),
        deletions=(OWNED, FOREIGN),
        tags={KEPT: {}, **tags},
        **more,
    )


def test_only_a_volume_the_array_created_is_deleted_and_only_once_available() -> None:
    # Given an owned volume and an operator's volume (no vsa:owned), both asked to be deleted
    tags = {OWNED: OWNED_TAGS, FOREIGN: {"vsa:array": "demo"}}
    # While the owned one is still detaching, the detach phase waits for it
    detaching = seen({OWNED: "in-use", FOREIGN: "available"}, tags, attachments={KEPT: {C1: "attached"}})
    assert plan.detaching(detaching) == [f"{OWNED} is in-use (deleted once available)"]
    # Once available: only the owned one is deletable; the operator's volume is refused, never deleted
    ready = seen({OWNED: "available", FOREIGN: "available"}, tags)
    assert plan.detaching(ready) == []
    assert plan.deletable(ready) == [OWNED]
    assert plan.refused_deletions(ready) == [f"{FOREIGN}: not created by array demo, never deleted"]
    assert plan.deleting(ready) == [f"{OWNED} is available"]
    assert f"volume {OWNED} (to be deleted) still exists" in plan.remaining(ready)
    # a volume of another array, even owned, is not this array's to delete
    other = seen({OWNED: "available"}, {OWNED: {**OWNED_TAGS, "vsa:array": "other"}})
    assert plan.deletable(other) == []
    # nor one another deployment made for its array of the same id
    staged = seen({OWNED: "available"}, {OWNED: {**OWNED_TAGS, "vsa:deployment": "stage"}})
    assert plan.deletable(staged) == []
    # and once EBS has deleted it (absent from DescribeVolumes), nothing is left
    assert plan.deleting(seen({}, {})) == []


def test_a_volume_back_in_the_spec_is_never_deleted() -> None:
    back = Observed(
        spec=spec(),
        volume_ids=(KEPT, OWNED),
        controllers=(),
        volume_states={KEPT: "in-use", OWNED: "available"},
        attachments={},
        deletions=(OWNED,),
        tags={OWNED: OWNED_TAGS},
    )
    assert plan.deletable(back) == []
    assert plan.refused_deletions(back) == [f"{OWNED}: back in the spec, kept"]


def test_the_answer_says_a_removed_owned_volume_is_kept_and_how_to_delete_it_or_that_it_is_deleted() -> None:
    before = spec(volumes=[{"volumeId": KEPT}, {"name": "data", "sizeGiB": 8, "iops": 3000}])
    after = spec()
    kept = plan.pending_work(before, after)
    assert kept == [
        "volume data: every host disconnects it, unexport, detach; kept, detached (the array created it): "
        "delete it with PUT /arrays/{id}?deleteRemovedVolumes=true (vsactl apply --delete-removed-volumes)"
    ]
    assert plan.pending_work(before, after, delete_removed=True) == [
        "volume data: every host disconnects it, unexport, detach; then delete it (deleteRemovedVolumes)"
    ]
    # asking later, for a volume an earlier apply kept, is a run of its own
    assert plan.pending_work(after, after, True, (OWNED,)) == [
        f"volume {OWNED}: delete (created by the array, no longer in the spec)"
    ]
    assert plan.needs_reconcile(after, after, "converged", deleting=True)
    assert not plan.needs_reconcile(after, after, "converged")


@pytest.fixture
def steps_env(registry_table: str) -> dict[str, Any]:
    """An array whose spec lists one existing volume; an owned volume removed from it and an
    operator's volume, both available and both (wrongly, for the second) asked to be deleted;
    the lock held by the run."""
    ec2 = boto3.client("ec2", region_name=REGION)

    def volume(tags: dict[str, str]) -> str:
        spec_ = {"ResourceType": "volume", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        return str(
            ec2.create_volume(
                AvailabilityZone="us-east-1a",
                Size=8,
                VolumeType="io2",
                Iops=3000,
                MultiAttachEnabled=True,
                **({"TagSpecifications": [spec_]} if tags else {}),
            )["VolumeId"]
        )

    kept = volume({})
    owned, foreign = volume(OWNED_TAGS), volume({"vsa:array": "demo"})
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    registry = ArrayRegistry(registry_table, dynamodb)
    registry.create(spec(volumes=[{"volumeId": kept}]))
    aws_record.add_volume_deletions(dynamodb, registry_table, "demo", 1, (owned, foreign))
    aws_lock.acquire(dynamodb, registry_table, "demo", "run-1", 900, int(time.time()))
    ctx = aws_steps.ReconcileContext(
        registry=registry,
        arrays=ArrayService(scheduler_role_arn="arn:aws:iam::123456789012:role/s"),
        dynamodb=dynamodb,
        ec2=ec2,
        ssm=boto3.client("ssm", region_name=REGION),
        table=registry_table,
    )
    return {"ctx": ctx, "owned": owned, "foreign": foreign, "registry": registry}


def test_the_delete_step_deletes_the_owned_volume_only_and_forgets_both_once_done(
    steps_env: dict[str, Any],
) -> None:
    ctx, owned, foreign = steps_env["ctx"], steps_env["owned"], steps_env["foreign"]
    names = {"configureTarget": "ct", "connectPath": "cp", "disconnectPath": "dp"}
    node = {
        "configfsRoot": "c",
        "deviceDir": "d",
        "modprobeCommand": "m",
        "nvmeCommand": "n",
        "nvmeConfig": "f",
        "sysfsRoot": "s",
    }
    common = {"arrayId": "demo", "owner": "run-1"}
    # When the detach phase starts: nothing attached, both available: nothing to wait for
    detach = aws_steps.start(ctx, Start(step="start", phase="detach", documents=names, node=node, **common))
    assert detach["pending"] is False
    # When the delete phase starts
    started = aws_steps.start(ctx, Start(step="start", phase="delete", documents=names, node=node, **common))
    # Then only the owned volume is deleted; the operator's is refused and no longer pending
    assert started["deleted"] == [owned]
    assert started["refused"] == [f"{foreign}: not created by array demo, never deleted"]
    ec2 = boto3.client("ec2", region_name=REGION)
    left = {v["VolumeId"] for v in ec2.describe_volumes()["Volumes"]}
    assert owned not in left
    assert foreign in left
    # and the poll sees it gone: done, and nothing is pending any more
    polled = aws_steps.poll(ctx, Poll(step="poll", phase="delete", started=started, **common))
    assert (polled["done"], polled["waiting"]) == (True, [])
    assert steps_env["registry"].get("demo").pending_volume_deletions == ()
