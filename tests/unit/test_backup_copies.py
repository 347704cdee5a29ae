"""Backup sets copied out of the Region (and account): the rules (vsa_core.backups.copies, pure),
the CopyBackupSet steps (vsa_core.backups.aws_copies) over moto with two Regions and a second
account, and the disaster-recovery restore of a copy into a new array in the destination."""

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from tests.unit.conftest import REGION
from tests.unit.test_backup_service import OPERATOR, _completed, _snapshotted, demo_world, service
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.spec import ArraySpec
from vsa_core.backups import copies, sets
from vsa_core.backups.aws_copy_service import CopyService, ec2_in
from vsa_core.backups.aws_registry import BackupRegistry
from vsa_core.backups.sets import BackupSet, SetCopy, VolumeSnapshot
from vsa_core.errors import BackupNotFoundError, ConflictError, CopyError, InvalidBackupError

DR = "us-west-2"
OTHER_ACCOUNT = "222222222222"
COPY_ROLE = f"arn:aws:iam::{OTHER_ACCOUNT}:role/vsa-backup-copy/dr"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


# ---------------------------------------------------------------- the rules


def _set(minutes_ago: int = 0, state: str = "completed", **extra: Any) -> BackupSet:
    backup_id = sets.new_backup_id(NOW - timedelta(minutes=minutes_ago))
    return BackupSet(
        backup_id=backup_id,
        array_id="demo",
        mode="crash",
        created_at=sets.backup_id_time(backup_id),
        state=state,  # type: ignore[arg-type]
        **extra,
    )


def _copy_snapshot(backup: BackupSet, n: int, size: int, state: str = "completed") -> dict[str, Any]:
    snapshot = VolumeSnapshot(volume_id=f"vol-{n:08x}", snapshot_id=f"snap-{n:08x}", iops=6000)
    tags = copies.copy_tags(backup.model_copy(update={"snapshots": (snapshot,) * size}), snapshot, REGION)
    return {
        "SnapshotId": f"snap-{backup.backup_id[-8:]}{n:02x}",
        "State": state,
        "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
    }


def test_a_copy_carries_its_set_labels_and_source_and_reads_back_as_a_set() -> None:
    backup = _set(consistency="application-consistent", label="nightly")
    found = copies.copied_sets(
        [
            _copy_snapshot(backup, 1, 2),
            _copy_snapshot(backup, 2, 2),
            {
                "SnapshotId": "snap-foreign0",
                "State": "completed",
                "Tags": [{"Key": "vsa:backup", "Value": "x"}],
            },
        ]
    )
    [copied] = found
    assert copied.backup_id == backup.backup_id
    assert copied.consistency == "application-consistent"
    assert copied.label == "nightly"
    assert copied.state == "complete"
    assert [s["SourceVolumeId"] for s in copied.snapshots] == ["vol-00000001", "vol-00000002"]
    assert {s["Iops"] for s in copied.snapshots} == {6000}
    # one copy of a two-snapshot set is not a set; a pending copy is still copying
    assert copies.copied_sets([_copy_snapshot(backup, 1, 2)])[0].state == "incomplete"
    assert copies.copied_sets([_copy_snapshot(backup, 1, 2, "pending")])[0].state == "copying"


def test_a_destination_keeps_its_newest_complete_sets_and_never_one_still_copying() -> None:
    made = [_set(minutes_ago=m) for m in (50, 40, 30, 20, 10)]
    held = copies.copied_sets(
        [
            _copy_snapshot(made[0], 1, 1),
            _copy_snapshot(made[1], 1, 2),
            _copy_snapshot(made[2], 1, 1, "pending"),
        ]
        + [_copy_snapshot(b, 1, 1) for b in made[3:]]
    )
    doomed = copies.destination_retention(held, keep=1, now=NOW)
    assert [(c.backup_id, why.split(" ")[0]) for c, why in doomed] == [
        (made[0].backup_id, "older"),
        (made[3].backup_id, "older"),
    ]
    # the incomplete one (a copy that failed part way) goes once older than the grace
    later = copies.destination_retention(held, keep=1, now=NOW + timedelta(days=2))
    assert [c.backup_id for c, _ in later] == [made[0].backup_id, made[1].backup_id, made[3].backup_id]
    assert made[2].backup_id not in [c.backup_id for c, _ in later]  # still copying


def test_retention_keeps_a_set_whose_copy_still_reads_its_snapshots() -> None:
    copying = SetCopy(region=DR, started_at=NOW)
    old = _set(minutes_ago=30, copies=(copying,))
    plan = sets.retention_plan(
        [old, _set(minutes_ago=20), _set(minutes_ago=10)], keep=1, max_deletions_per_run=5, now=NOW
    )
    verdict = {d.backup_id: (d.action, d.reason) for d in plan.decisions}
    assert verdict[old.backup_id][0] == "keep"
    assert DR in verdict[old.backup_id][1]


@pytest.mark.parametrize(
    ("copy", "complaint"),
    [
        ({"region": "mars-1"}, "region"),
        ({"region": DR, "accountId": OTHER_ACCOUNT}, "accountId and roleArn together"),
        ({"region": DR, "accountId": "333333333333", "roleArn": COPY_ROLE}, "is not in accountId"),
        (
            {"region": DR, "kmsKeyId": "arn:aws:kms:eu-west-1:123456789012:key/abc"},
            "not a key of the destination",
        ),
        (
            {"region": DR, "roleArn": "arn:aws:iam::222222222222:role/admin", "accountId": OTHER_ACCOUNT},
            "roleArn",
        ),
    ],
)
def test_the_spec_refuses_a_copy_it_could_not_make(copy: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        ArraySpec.model_validate(_spec_data({"copies": [copy]}))


def test_the_spec_refuses_one_destination_twice() -> None:
    with pytest.raises(ValueError, match="listed more than once"):
        ArraySpec.model_validate(_spec_data({"copies": [{"region": DR}, {"region": DR}]}))


def _spec_data(backup: dict[str, Any], array_id: str = "demo", zone: str = "us-east-1a") -> dict[str, Any]:
    return {
        "arrayId": array_id,
        "availabilityZone": zone,
        "volumes": [{"volumeId": "vol-0123456789abcdef0"}],
        "controllers": {"instanceType": "r5b.2xlarge", "imageId": "ami-12c6146b"},
        "minControllers": 1,
        "maxControllers": 2,
        "backup": {"schedule": "rate(1 day)", **backup},
    }


# ---------------------------------------------------------------- the steps, over moto


@pytest.fixture
def world(registry_table: str) -> dict[str, Any]:
    made = demo_world(registry_table)
    registry = ArrayRegistry(registry_table)
    array = registry.get("demo")
    data = array.spec.model_dump(by_alias=True)
    data["backup"] = {
        **data["backup"],
        "copies": [
            {"region": DR, "retention": 1},
            {"region": DR, "accountId": OTHER_ACCOUNT, "roleArn": COPY_ROLE},
        ],
    }
    registry.put(ArraySpec.model_validate(data), expected_version=array.version)
    return made


def _copies(
    world: dict[str, Any], allowed: tuple[str, ...] = (DR,), accounts: tuple[str, ...] = (OTHER_ACCOUNT,)
) -> CopyService:
    return CopyService(
        table_name=world["table"],
        region=REGION,
        allowed_regions=allowed,
        stack="vsa-unit",
        allowed_accounts=accounts,
    )


def _there(account: str | None = None) -> Any:
    if account is None:
        return boto3.client("ec2", region_name=DR)
    keys = boto3.client("sts", region_name=REGION).assume_role(RoleArn=COPY_ROLE, RoleSessionName="t")[
        "Credentials"
    ]
    return boto3.client(
        "ec2",
        region_name=DR,
        aws_access_key_id=keys["AccessKeyId"],
        aws_secret_access_key=keys["SecretAccessKey"],
        aws_session_token=keys["SessionToken"],
    )


def test_a_set_is_copied_once_into_the_destination_as_one_set_and_completes(world: dict[str, Any]) -> None:
    backup = _completed(world)
    svc = _copies(world)
    assert svc.start("demo", backup.backup_id, DR) == {"copies": 2, "of": 2, "region": DR}
    # a retry copies nothing twice
    assert svc.start("demo", backup.backup_id, DR) == {"copies": 2, "of": 2, "region": DR}
    there = _there().describe_snapshots(
        OwnerIds=["self"], Filters=[{"Name": "tag-key", "Values": ["vsa:copy-of"]}]
    )
    [copied] = copies.copied_sets(there["Snapshots"])
    assert len(copied.snapshots) == 2
    assert copied.backup_id == backup.backup_id
    assert copied.consistency == "crash-consistent"
    assert {s["SourceVolumeId"] for s in copied.snapshots} == set(world["volumes"])
    assert svc.progress("demo", backup.backup_id, DR) == {"done": True, "state": "completed"}
    recorded = BackupRegistry(world["table"]).get("demo", backup.backup_id)
    [copy] = [c for c in recorded.copies if c.account_id is None]
    assert copy.state == "completed"
    assert copy.completed_at is not None
    assert {s.source_snapshot_id for s in copy.snapshots} == {s.snapshot_id for s in backup.snapshots}
    assert recorded.state == "completed"
    assert svc.summary("demo", backup.backup_id) == {"copies": {DR: "completed"}, "failed": []}


def test_copies_only_into_a_region_the_stack_allows_and_only_a_completed_set(world: dict[str, Any]) -> None:
    backup = _completed(world)
    with pytest.raises(CopyError, match="BackupCopyRegions"):
        _copies(world, allowed=()).start("demo", backup.backup_id, DR)
    with pytest.raises(CopyError, match="BackupCopyAccounts"):
        _copies(world, accounts=()).start("demo", backup.backup_id, DR, OTHER_ACCOUNT)
    with pytest.raises(CopyError, match="copies nothing to eu-west-1"):
        _copies(world, allowed=("eu-west-1",)).start("demo", backup.backup_id, "eu-west-1")
    running = _snapshotted(world)
    with pytest.raises(ConflictError, match="only a completed set"):
        _copies(world).start("demo", running.backup_id, DR)


def test_another_account_s_copy_is_shared_copied_there_by_its_role_then_unshared(
    world: dict[str, Any],
) -> None:
    # moto copies no snapshot shared from another account: the other account's EC2 is botocore's
    # Stubber, which pins what the step asks of it there (the local cloud copies for real:
    # tests/localcloud)
    backup = _completed(world)
    theirs = boto3.client("ec2", region_name=DR)
    given: list[tuple[str, dict[str, str] | None]] = []

    def ec2_there(region: str, credentials: dict[str, str] | None) -> Any:
        given.append((region, credentials))
        return theirs if credentials else ec2_in(region, None)

    copies_made = [f"snap-{n:017x}" for n in (1, 2)]
    with Stubber(theirs) as stub:
        stub.add_response("describe_snapshots", {"Snapshots": []}, {"OwnerIds": ["self"], "Filters": ANY})
        for source, made in zip(backup.snapshots, copies_made, strict=True):
            stub.add_response(
                "copy_snapshot",
                {"SnapshotId": made},
                {
                    "SourceRegion": REGION,
                    "SourceSnapshotId": source.snapshot_id,
                    "Description": ANY,
                    "TagSpecifications": ANY,
                },
            )
        stub.add_response(
            "describe_snapshots",
            {"Snapshots": [{"SnapshotId": m, "State": "completed"} for m in copies_made]},
            {"SnapshotIds": copies_made},
        )
        svc = CopyService(
            table_name=world["table"],
            region=REGION,
            allowed_regions=(DR,),
            stack="vsa-unit",
            allowed_accounts=(OTHER_ACCOUNT,),
            ec2_in=ec2_there,
        )
        svc.start("demo", backup.backup_id, DR, OTHER_ACCOUNT)
        ec2 = boto3.client("ec2", region_name=REGION)
        shared = ec2.describe_snapshot_attribute(
            SnapshotId=backup.snapshots[0].snapshot_id, Attribute="createVolumePermission"
        )
        assert {"UserId": OTHER_ACCOUNT} in shared["CreateVolumePermissions"]
        assert svc.progress("demo", backup.backup_id, DR, OTHER_ACCOUNT)["state"] == "completed"
    # the role that account gives was assumed for the copy (its keys, not this account's)
    assert {region for region, _ in given} == {DR}
    assert all(credentials and credentials["aws_access_key_id"] for _, credentials in given)
    unshared = ec2.describe_snapshot_attribute(
        SnapshotId=backup.snapshots[0].snapshot_id, Attribute="createVolumePermission"
    )
    assert unshared["CreateVolumePermissions"] == []
    recorded = BackupRegistry(world["table"]).get("demo", backup.backup_id)
    [copy] = recorded.copies
    assert (copy.account_id, copy.state) == (OTHER_ACCOUNT, "completed")
    assert [s.snapshot_id for s in copy.snapshots] == copies_made


def test_a_destination_s_retention_deletes_its_oldest_copied_sets_beyond_its_keep(
    world: dict[str, Any],
) -> None:
    svc = _copies(world)
    first = _completed(world)
    svc.start("demo", first.backup_id, DR)
    svc.progress("demo", first.backup_id, DR)
    second = _completed(world)
    svc.start("demo", second.backup_id, DR)
    svc.progress("demo", second.backup_id, DR)
    answer = svc.retention("demo", DR)
    assert answer["keep"] == 1
    assert [d["backupId"] for d in answer["deleted"]] == [first.backup_id]
    left = copies.copied_sets(_there().describe_snapshots(OwnerIds=["self"])["Snapshots"])
    assert [c.backup_id for c in left] == [second.backup_id]


def test_a_caught_error_fails_that_copy_only_and_is_counted(world: dict[str, Any]) -> None:
    backup = _completed(world)
    svc = _copies(world)
    error = {"Error": "CopyError", "Cause": '{"errorMessage": "KMS key not usable"}'}
    assert svc.fail("demo", backup.backup_id, DR, None, error) == {
        "state": "failed",
        "failure": "CopyError: KMS key not usable",
    }
    recorded = BackupRegistry(world["table"]).get("demo", backup.backup_id)
    assert recorded.state == "completed"  # the set is good
    assert svc.summary("demo", backup.backup_id)["failed"] == [DR]
    metrics = boto3.client("cloudwatch", region_name=REGION).list_metrics(Namespace="VSA/Backups")["Metrics"]
    assert any(m["MetricName"] == "CopyFailures" for m in metrics)


# ---------------------------------------------------------------- disaster recovery


def test_a_copied_set_restores_into_a_new_array_in_the_destination(world: dict[str, Any]) -> None:
    backup = _completed(world)
    svc = _copies(world)
    svc.start("demo", backup.backup_id, DR)
    svc.progress("demo", backup.backup_id, DR)
    # the disaster-recovery stack in the destination: its own registry never saw the set
    dr = service(world["table"], ec2=boto3.client("ec2", region_name=DR))
    [listed] = dr.copies_here()
    assert listed.backup_id == backup.backup_id
    spec = _spec_data({}, array_id="demo-dr", zone="us-west-2a")
    del spec["backup"]
    answer = dr.restore_copy(backup.backup_id, spec, OPERATOR)
    made = boto3.client("ec2", region_name=DR).describe_volumes(
        VolumeIds=[v["volumeId"] for v in answer["volumes"]]
    )
    assert {v["AvailabilityZone"] for v in made["Volumes"]} == {"us-west-2a"}
    assert all(v["VolumeType"] == "io2" and v["MultiAttachEnabled"] for v in made["Volumes"])
    registered = ArrayRegistry(world["table"]).get("demo-dr")
    assert registered.restored_from == backup.backup_id
    assert set(registered.spec.existing_volume_ids) == {v["volumeId"] for v in answer["volumes"]}
    with pytest.raises(ConflictError, match="exists"):
        dr.restore_copy(backup.backup_id, spec, OPERATOR)
    with pytest.raises(BackupNotFoundError, match="GET /copies"):
        dr.restore_copy(sets.new_backup_id(NOW), spec, OPERATOR)
    with pytest.raises(InvalidBackupError, match=r"availabilityZone|controllers"):
        dr.restore_copy(backup.backup_id, {"arrayId": "demo-dr2"}, OPERATOR)


def test_the_copy_steps_reach_the_destination_through_a_cached_client() -> None:
    assert ec2_in(DR, None) is ec2_in(DR, None)
    assert ec2_in(DR, None).meta.region_name == DR


def test_copies_beyond_the_destination_s_limit_in_progress_wait_for_a_later_look(
    world: dict[str, Any],
) -> None:
    # EBS allows 20 copies in progress per account and destination Region: the 21st is refused
    # (ResourceLimitExceeded); moto has no such limit, so the destination is botocore's Stubber
    backup = _completed(world)
    theirs = boto3.client("ec2", region_name=DR)
    first, second = backup.snapshots
    with Stubber(theirs) as stub:
        stub.add_response("describe_snapshots", {"Snapshots": []}, {"OwnerIds": ["self"], "Filters": ANY})
        stub.add_response("copy_snapshot", {"SnapshotId": "snap-00000000000000001"})
        stub.add_client_error(
            "copy_snapshot", service_error_code="ResourceLimitExceeded", http_status_code=400
        )
        # the next look copies the one left, then reads both
        stub.add_response("describe_snapshots", {"Snapshots": []}, {"OwnerIds": ["self"], "Filters": ANY})
        stub.add_response("copy_snapshot", {"SnapshotId": "snap-00000000000000002"})
        stub.add_response(
            "describe_snapshots",
            {
                "Snapshots": [
                    {"SnapshotId": "snap-00000000000000001", "State": "completed"},
                    {"SnapshotId": "snap-00000000000000002", "State": "pending"},
                ]
            },
            {"SnapshotIds": ["snap-00000000000000001", "snap-00000000000000002"]},
        )
        svc = CopyService(
            table_name=world["table"],
            region=REGION,
            allowed_regions=(DR,),
            stack="vsa-unit",
            ec2_in=lambda region, credentials: theirs,
        )
        assert svc.start("demo", backup.backup_id, DR) == {"copies": 1, "of": 2, "region": DR}
        waiting = BackupRegistry(world["table"]).get("demo", backup.backup_id).copies[0]
        assert [s.snapshot_id for s in waiting.snapshots] == ["snap-00000000000000001", None]
        assert svc.progress("demo", backup.backup_id, DR) == {"done": False, "state": "copying"}
    copied = BackupRegistry(world["table"]).get("demo", backup.backup_id).copies[0]
    assert {s.source_snapshot_id: s.snapshot_id for s in copied.snapshots} == {
        first.snapshot_id: "snap-00000000000000001",
        second.snapshot_id: "snap-00000000000000002",
    }
