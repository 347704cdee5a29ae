"""ReconcileArray's rekey phase on moto (vsa_core.reconcile.aws_steps with aws_keys): after
``vsactl rotate-keys`` stored new keys, the phase goes controller by controller, each action
one start and its polls: configure-target on one controller, whose copy holds the new keys;
then connect-path on every host for that controller's address, the hosts' copies giving the new
keys for that address only; at the end the new keys are the array's and no copy holds an old
one. Run Command is moto's, whose invocations all succeed; moto does not implement
ListCommandInvocations (NotImplementedError), so ``MotoSsm`` answers it from moto's own
ListCommands: every invocation of every command sent, Success."""

import functools
import json
import time
import uuid
from typing import Any

import boto3
import pytest

from tests.unit.conftest import REGION
from vsa_core.api import aws_operations
from vsa_core.arrays import aws_keys, aws_lock, keys
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.callers import Caller
from vsa_core.arrays.spec import ArraySpec
from vsa_core.errors import ConflictError
from vsa_core.nvme import host_nqn
from vsa_core.reconcile import aws_record, aws_steps
from vsa_core.reconcile.steps import Poll, Start, Verify

OPERATOR = Caller(arn="arn:aws:iam::123456789012:user/vsa-operator")

NAMES = {"configureTarget": "ct", "connectPath": "cp", "disconnectPath": "dp"}
NODE = {
    "configfsRoot": "c",
    "deviceDir": "d",
    "modprobeCommand": "m",
    "nvmeCommand": "n",
    "nvmeConfig": "f",
    "sysfsRoot": "s",
}
COMMON = {"arrayId": "demo", "owner": "run-1"}
HOSTS = ("i-0a1b2c3d4e5f60101", "i-0a1b2c3d4e5f60102")


class MotoSsm:
    """moto's SSM client, with ListCommandInvocations (which moto lacks) read from its ListCommands."""

    def __init__(self) -> None:
        self.client = boto3.client("ssm", region_name=REGION)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def get_paginator(self, operation: str) -> Any:
        if operation != "list_command_invocations":
            return self.client.get_paginator(operation)
        commands = self.client.list_commands()["Commands"]
        invocations = [
            {
                "CommandId": c["CommandId"],
                "InstanceId": i,
                "DocumentName": c["DocumentName"],
                "Status": "Success",
                "CommandPlugins": [{"Status": "Success", "Output": ""}],
            }
            for c in commands
            for i in c["InstanceIds"]
        ]

        class Pages:
            def paginate(self, **_: Any) -> list[dict[str, Any]]:
                return [{"CommandInvocations": invocations}]

        return Pages()


def _spec(authentication: str = "dh-hmac-chap") -> ArraySpec:
    return ArraySpec.model_validate(
        {
            "arrayId": "demo",
            "availabilityZone": "us-east-1a",
            "controllers": {"launchTemplate": {"launchTemplateName": "vsa-demo-controller"}},
            "perControllerIops": 100_000,
            "minControllers": 2,
            "maxControllers": 2,
            "volumes": [{"volumeId": "vol-0a1b2c3d4e5f60001"}],
            "hosts": [{"instanceId": h} for h in HOSTS],
            "authentication": authentication,
        }
    )


@pytest.fixture
def world(registry_table: str) -> dict[str, Any]:
    ec2 = boto3.client("ec2", region_name=REGION)
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    key = boto3.client("kms", region_name=REGION).create_key(Description="keys")["KeyMetadata"]["Arn"]
    registry = ArrayRegistry(registry_table, dynamodb)
    spec = _spec()
    registry.create(spec)
    controllers = []
    for slot in range(2):
        instance_id = f"i-0c0000000000000c{slot + 1}"
        controllers.append(instance_id)
        dynamodb.put_item(
            TableName=registry_table,
            Item={
                "pk": {"S": "ARRAY#demo"},
                "sk": {"S": f"SLOT#{slot:02d}"},
                "instanceId": {"S": instance_id},
                "state": {"S": "serving"},
                "address": {"S": f"10.0.0.{slot + 1}"},
            },
        )
    service = ArrayService(scheduler_role_arn="arn:aws:iam::123456789012:role/s", keys_kms_key_id=key)
    clients = aws_keys.of(service.ctx)
    aws_keys.converge(clients, spec, [])
    for instance_id in controllers:
        aws_keys.write_controller(clients, spec, instance_id, controllers)
    aws_record.start(dynamodb, registry_table, "demo", "run-1", 1, "2026-11-27T00:00:00+00:00")
    aws_lock.acquire(dynamodb, registry_table, "demo", "run-1", 900, int(time.time()))
    ctx = aws_steps.ReconcileContext(
        registry=registry,
        arrays=service,
        dynamodb=dynamodb,
        ec2=ec2,
        ssm=MotoSsm(),
        table=registry_table,
    )
    return {"ctx": ctx, "clients": clients, "spec": spec, "controllers": controllers, "registry": registry}


def _read(clients: aws_keys.KeysClients, name: str) -> dict[str, Any]:
    return dict(json.loads(clients.secretsmanager.get_secret_value(SecretId=name)["SecretString"]))


def _versions(clients: aws_keys.KeysClients, name: str) -> int:
    listed = clients.secretsmanager.list_secret_version_ids(
        SecretId=name, IncludeDeprecated=True, MaxResults=100
    )
    return len(listed["Versions"])


def _run_phase(ctx: aws_steps.ReconcileContext) -> list[dict[str, Any]]:
    """The rekey phase as the workflow runs it: start, poll until done or again, start again."""
    actions = []
    for _ in range(20):
        started = aws_steps.start(
            ctx,
            Start.model_validate(
                {**COMMON, "step": "start", "phase": "rekey", "documents": NAMES, "node": NODE}
            ),
        )
        actions.append(started)
        if not started["pending"]:
            return actions
        polled = aws_steps.poll(
            ctx, Poll.model_validate({**COMMON, "step": "poll", "phase": "rekey", "started": started})
        )
        assert polled["failed"] == []
        assert polled["again"] is True
        assert polled["done"] is False
    raise AssertionError("the rekey phase did not end in 20 actions")


def test_without_a_rotation_the_phase_does_nothing(world: dict[str, Any]) -> None:
    actions = _run_phase(world["ctx"])
    assert [(a["pending"], a["rekey"]) for a in actions] == [(False, "none")]


def test_a_rotation_goes_controller_by_controller_and_leaves_no_old_key(world: dict[str, Any]) -> None:
    ctx, clients, spec = world["ctx"], world["clients"], world["spec"]
    first, second = world["controllers"]
    before = aws_keys.array_keys(clients, "demo")
    assert before is not None
    versions_before = _versions(clients, keys.array_secret_name("demo"))
    assert aws_keys.begin_rotation(clients, spec) is True
    rotating = aws_keys.array_keys(clients, "demo")
    assert rotating is not None
    assert rotating.rotation is not None
    new = rotating.rotation.keys

    actions = _run_phase(ctx)

    sent = [(a["rekey"], a.get("instanceId"), a.get("document")) for a in actions]
    # each controller in two halves (the hosts' keys, then the controller key), each into its
    # nvmet first, then through the hosts' paths to it
    assert sent == [
        ("target", first, "ct"),
        ("paths", first, "cp"),
        ("target", first, "ct"),
        ("paths", first, "cp"),
        ("target", second, "ct"),
        ("paths", second, "cp"),
        ("target", second, "ct"),
        ("paths", second, "cp"),
        ("promote", None, ""),
    ]
    assert [a.get("then") for a in actions[:4]] == ["keyed", "connected", "ctrl-keyed", "ctrl-connected"]
    # configure-target went to that controller only; connect-path to every host, for its address
    assert [c["instanceId"] for c in actions[0]["commands"]] == [first]
    assert sorted(c["instanceId"] for c in actions[1]["commands"]) == sorted(HOSTS)
    assert actions[1]["address"] == "10.0.0.1"
    after = aws_keys.array_keys(clients, "demo")
    assert after is not None
    assert after.rotation is None
    assert (after.controller_key, dict(after.hosts)) == (new.controller_key, dict(new.hosts))
    old = {before.controller_key, *before.hosts.values()}
    assert not old & {after.controller_key, *after.hosts.values()}
    for host in HOSTS:
        nqn = host_nqn(spec.hosts[HOSTS.index(host)])
        copy = _read(clients, keys.node_secret_name("demo", host))
        assert copy == {"hostKey": new.hosts[nqn], "controllerKey": new.controller_key}
    for controller in (first, second):
        copy = _read(clients, keys.node_secret_name("demo", controller))
        assert copy["controllerKey"] == new.controller_key
        assert set(copy["hosts"].values()) == set(new.hosts.values())
    # the array's secret got two versions (the new keys, then their promotion): the progress,
    # which moved 8 times, is the registry's (Secrets Manager: no more than one new version of
    # a secret every 10 minutes); each host's copy one per paths action and the promotion
    assert _versions(clients, keys.array_secret_name("demo")) == versions_before + 2
    assert world["registry"].get("demo").rekey_stages == {}
    # and no secret keeps a previous version by its stage (those held old keys)
    names = [
        keys.array_secret_name("demo"),
        *(keys.node_secret_name("demo", n) for n in [*HOSTS, first, second]),
    ]
    for name in names:
        stages = clients.secretsmanager.describe_secret(SecretId=name)["VersionIdsToStages"]
        assert not any("AWSPREVIOUS" in s for s in stages.values()), (name, stages)


def test_mid_rotation_a_host_copy_gives_the_new_keys_for_the_rekeyed_controller_only(
    world: dict[str, Any],
) -> None:
    ctx, clients, spec = world["ctx"], world["clients"], world["spec"]
    aws_keys.begin_rotation(clients, spec)
    common = {**COMMON, "documents": NAMES, "node": NODE}
    target = aws_steps.start(ctx, Start.model_validate({**common, "step": "start", "phase": "rekey"}))
    # the controller's copy holds the hosts' new keys (with the old controller key) before its
    # configure-target reads it; the hosts' copies not yet
    rotating = aws_keys.array_keys(clients, "demo")
    assert rotating is not None
    assert rotating.rotation is not None
    new = rotating.rotation.keys
    nqn = host_nqn(spec.hosts[0])
    controller_copy = _read(clients, keys.node_secret_name("demo", world["controllers"][0]))
    assert controller_copy == {"controllerKey": rotating.controller_key, "hosts": dict(new.hosts)}
    assert "paths" not in _read(clients, keys.node_secret_name("demo", HOSTS[0]))
    aws_steps.poll(ctx, Poll.model_validate({**COMMON, "step": "poll", "phase": "rekey", "started": target}))
    aws_steps.start(ctx, Start.model_validate({**common, "step": "start", "phase": "rekey"}))
    # then the hosts' copies give that address the new host key with the old controller key
    host_copy = _read(clients, keys.node_secret_name("demo", HOSTS[0]))
    assert host_copy["paths"] == {
        "10.0.0.1": {"hostKey": new.hosts[nqn], "controllerKey": rotating.controller_key}
    }
    assert host_copy["hostKey"] == rotating.hosts[nqn]
    # the run is not converged while a rotation is under way: the verify says where it stands
    verified = aws_steps.verify(ctx, Verify.model_validate({**COMMON, "step": "verify"}))
    assert verified["converged"] is False
    assert any("keys rotation under way" in r for r in verified["remaining"])


def test_rotate_keys_is_refused_without_authentication_and_resumes_a_rotation_under_way(
    world: dict[str, Any],
) -> None:
    registry: ArrayRegistry = world["registry"]

    class Starter:
        def __init__(self) -> None:
            self.works: list[list[str]] = []

        def start(self, array_id: str, version: int, work: list[str]) -> dict[str, Any]:
            self.works.append(work)
            return {"state": "converging", "executionName": f"run-{len(self.works)}"}

        def clear_rekey_stages(self, array_id: str) -> None:
            ctx = world["ctx"]
            aws_record.set_rekey_stages(ctx.dynamodb, ctx.table, array_id, {})

    starter = Starter()
    service = world["ctx"].arrays
    rotate = functools.partial(aws_operations.rotate_keys, "demo", by=OPERATOR, registry=registry)
    first = rotate(service=service, reconcile=starter)
    again = rotate(service=service, reconcile=starter)
    assert (first["rotation"], again["rotation"]) == ("started", "resumed")
    # each request is in the array's history with who asked
    asked = [(c.kind, c.by.arn) for c in registry.history.read("demo", since=None, limit=10)]
    assert asked == [("rotate-keys", OPERATOR.arn)] * 2
    assert len(starter.works) == 2
    # a rotation's progress left behind by one that finished is cleared as a new one begins
    _run_phase(world["ctx"])
    aws_record.set_rekey_stages(
        world["ctx"].dynamodb,
        world["ctx"].table,
        "demo",
        {"i-0c0000000000000c9": {"stage": "keyed", "address": "x"}},
    )
    assert rotate(service=service, reconcile=starter)["rotation"] == "started"
    assert registry.get("demo").rekey_stages == {}
    stored = registry.get("demo")
    registry.put(_spec("none"), stored.version)
    with pytest.raises(ConflictError, match="authentication none"):
        rotate(service=service, reconcile=starter)


def test_a_rotation_whose_keys_would_not_fit_one_secret_is_refused_and_nothing_stored(
    world: dict[str, Any],
) -> None:
    # Given an array whose secret holds keys for 250 hosts (applied before hosts were measured
    # against the secret's size; one generation fits, two do not)
    clients = world["clients"]
    nqns = [f"nqn.2014-08.org.nvmexpress:uuid:{uuid.UUID(int=i)}" for i in range(250)]
    many, _ = keys.converge(None, nqns)
    name = keys.array_secret_name("demo")
    clients.secretsmanager.put_secret_value(SecretId=name, SecretString=many.as_secret())
    # When a rotation is asked for
    with pytest.raises(ConflictError) as refused:
        aws_keys.begin_rotation(clients, world["spec"])
    # Then it is refused saying why (Secrets Manager's 65,536-byte secret), and the keys are as
    # they were: no rotation begun
    assert "cannot rotate its keys" in str(refused.value)
    assert "65,536-byte secret" in str(refused.value)
    assert _read(clients, name) == json.loads(many.as_secret())
