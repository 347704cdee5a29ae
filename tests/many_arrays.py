"""Many arrays in one registry (issue #16 item 5): the items N arrays leave in the table, the
events a region sends one deployment, replayed through the core functions that handle them, and
a recorder of every DynamoDB call they make (botocore's event hooks on the client).

Shared by ``tests/unit/test_many_arrays.py`` (moto: no Scan, the same reads at 3 arrays and at
40) and ``tools/bench_arrays.py`` (the local cloud's DynamoDB at 10 and 1,000 arrays).

Only DynamoDB is real here: EC2, Auto Scaling, CloudWatch and Step Functions are small fakes
that answer what the steps ask (the events' other calls are per array or per instance by
construction: DescribeAutoScalingGroups by name, DescribeInstances by id, …).
"""

import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from vsa_core.arrays.aws_registry import ArrayRegistry, expires_at
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.spec import ArraySpec
from vsa_core.backups.sets import BackupSet
from vsa_core.controllers import aws_bootstrap, aws_drain
from vsa_core.controllers.aws_context import ControllerContext
from vsa_core.controllers.aws_lifecycle import LifecycleSettings, start
from vsa_core.controllers.events import ControllerEvent
from vsa_core.controllers.steps import Locate, Prepare
from vsa_core.naming import group_name, iops_alarm_name, slot_key
from vsa_core.scaling.aws_demand import read_demand
from vsa_core.scaling.aws_plan import PlanSettings, plan_scale
from vsa_core.scaling.events import ScaleRequest
from vsa_core.scaling.planner import PlanInput, plan

ROOT = Path(__file__).resolve().parents[1]
ZONE = "us-east-1a"
CONTROLLERS = 4
"""Serving controllers per array (slots 0..3)."""
VOLUMES = 4
HOSTS = 4
DECISIONS = 30
"""Scale decisions per array: a month of a few decisions a day, within the 90-day retention."""
BACKUPS = 7
"""Backup sets per array: a week of daily backups (the example spec's retention)."""
NOW = datetime(2026, 11, 2, 17, 5, tzinfo=UTC)
WORKFLOWS = "arn:aws:states:us-east-1:000000000000:stateMachine:bench-"
"""The controller workflows' ARNs the trigger starts (the fake Step Functions records the names)."""
PLAN = PlanSettings(health_check_minutes=5, history_retention_days=90, stack_name="vsa")
"""The scale planner's settings: the template's defaults."""


def _event(relative: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((ROOT / "events" / relative).read_text())
    return loaded


# --- the arrays and their items ----------------------------------------------------------------


def array_id(index: int) -> str:
    return f"arr-{index:04d}"


def controller(index: int, slot: int) -> str:
    """The instance id of array ``index``'s controller in ``slot``."""
    return f"i-{index:010x}{slot:07x}"


def launching(index: int) -> str:
    """A controller of array ``index`` that is launching (no slot yet)."""
    return f"i-{index:010x}{0xFFFFFFF:07x}"


def foreign(n: int) -> str:
    """Any other instance of the region (a host, another team's server)."""
    return f"i-f{n:016x}"


def spec(index: int) -> ArraySpec:
    base = index * 16
    return ArraySpec.model_validate(
        {
            "arrayId": array_id(index),
            "availabilityZone": ZONE,
            "volumes": [{"volumeId": f"vol-{base + v:017x}"} for v in range(VOLUMES)],
            "controllers": {"instanceType": "r5b.2xlarge", "imageId": "ami-0a1b2c3d4e5f60001"},
            "minControllers": 2,
            "maxControllers": 8,
            "perControllerIops": 260_000,
            "targetUtilisation": 0.7,
            "hosts": [
                {"instanceId": f"i-e{base + h:016x}", "mountpoints": ["/data", "/logs"]} for h in range(HOSTS)
            ],
            "backup": {"schedule": "cron(0 3 * * ? *)", "mode": "application", "retention": BACKUPS},
            # the keys are Secrets Manager's, not the registry's (whose reads this world counts)
            "authentication": "none",
        }
    )


def items(index: int) -> Iterator[dict[str, Any]]:
    """Every registry item of array ``index``, as the control plane writes them: the SPEC, a
    slot per serving controller (LeaseSlot + MarkServing), scale decisions (RecordDecision, with
    PlanScale's answer) and completed backup sets."""
    the_spec = spec(index)
    pk = {"S": f"ARRAY#{array_id(index)}"}
    yield {
        "pk": pk,
        "sk": {"S": "SPEC"},
        "spec": {"S": the_spec.model_dump_json(by_alias=True)},
        "desiredControllers": {"N": str(CONTROLLERS)},
        "version": {"N": "12"},
        "lastDecisionAt": {"S": "2026-11-02T16:01:00.000Z"},
        "lastScaleOutAt": {"S": "2026-11-01T09:30:00.000Z"},
    }
    for slot in range(CONTROLLERS):
        yield {
            "pk": pk,
            "sk": {"S": slot_key(slot)},
            "instanceId": {"S": controller(index, slot)},
            "state": {"S": "serving"},
            "address": {"S": f"10.{index // 250}.{index % 250}.{slot + 10}"},
            "since": {"S": "2026-11-01T09:31:00.000Z"},
            "servingSince": {"S": "2026-11-01T09:34:00.000Z"},
            "execution": {"S": f"bootstrap-{controller(index, slot)}-0123456789abcdef"},
        }
    for n in range(DECISIONS):
        at = NOW - timedelta(hours=7 * n + 1)
        decision = plan(
            PlanInput(the_spec, 400_000.0 + 10_000 * n, CONTROLLERS, now=at, in_flight=0)
        ).as_dict()
        outcome = {
            **decision,
            "groupName": group_name(array_id(index)),
            "leaver": None,
            "scaleField": "lastHoldAt",
            "rearmSeconds": 300,
            "alarmName": iops_alarm_name(array_id(index), "high"),
            "alarmDemandIops": 400_000.0 + 10_000 * n,
            "demandSource": "AWS/EBS",
            "eventId": f"c4c1c1c9-6542-e61b-6ef0-{index:06x}{n:06x}",
            "expiresAt": expires_at(at, 90),
        }
        stamp = at.strftime("%Y-%m-%dT%H:%M:%S.000Z")
        name = f"scale-{array_id(index)}-{index:010x}{n:010x}"
        yield {
            "pk": pk,
            "sk": {"S": f"DECISION#{stamp}#{name}"},
            "decision": {"S": json.dumps(outcome, default=str)},
            "executionArn": {"S": f"arn:aws:states:us-east-1:000000000000:execution:ScaleArray:{name}"},
            "expiresAt": {"N": str(outcome["expiresAt"])},
        }
    for n in range(BACKUPS):
        at = NOW.replace(hour=3, minute=0) - timedelta(days=n)
        backup = BackupSet.model_validate(
            {
                "backupId": f"bk-{at.strftime('%Y%m%dT%H%M%S')}000Z-{index:04x}{n:04x}",
                "arrayId": array_id(index),
                "mode": "application",
                "state": "completed",
                "createdAt": at.isoformat(),
                "completedAt": (at + timedelta(minutes=9)).isoformat(),
                "trigger": "schedule",
                "consistency": "application-consistent",
                "controllerInstanceId": controller(index, 0),
                "snapshots": [
                    {
                        "volumeId": v,
                        "snapshotId": f"snap-{index * 64 + n * 8 + i:017x}",
                        "state": "completed",
                        "progress": 100,
                        "volumeSize": 500,
                        "iops": 16_000,
                    }
                    for i, v in enumerate(the_spec.existing_volume_ids)
                ],
                "hosts": [
                    {
                        "instanceId": h.instance_id,
                        "freezeStartedAt": at.timestamp() + 1.101,
                        "frozeAt": at.timestamp() + 1.152,
                        "watchdogDeadline": at.timestamp() + 11.101,
                        "thawStartedAt": at.timestamp() + 1.702,
                        "thawedAt": at.timestamp() + 1.744,
                    }
                    for h in the_spec.hosts
                ],
                "snapshotTiming": {"requestedAt": at.timestamp() + 1.2, "returnedAt": at.timestamp() + 1.6},
            }
        )
        yield {
            "pk": pk,
            "sk": {"S": f"BACKUP#{backup.backup_id}"},
            "backup": {"S": backup.model_dump_json(by_alias=True)},
            "state": {"S": backup.state},
        }


def seed(dynamodb: Any, table: str, indexes: range) -> int:
    """Write every item of the arrays ``indexes`` (BatchWriteItem, 25 a call); the bytes written."""
    written, batch = 0, []
    for index in indexes:
        for item in items(index):
            written += item_size(item)
            batch.append({"PutRequest": {"Item": item}})
            if len(batch) == 25:
                _write(dynamodb, table, batch)
                batch = []
    if batch:
        _write(dynamodb, table, batch)
    return written


def _write(dynamodb: Any, table: str, batch: list[dict[str, Any]]) -> None:
    pending: dict[str, Any] = {table: batch}
    while pending:
        pending = dynamodb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}


# --- DynamoDB's item size and read units (AWS's rules) --------------------------------------------


def _value_size(value: dict[str, Any]) -> int:
    """A value's size as DynamoDB counts it ("Item sizes and formats", DynamoDB developer guide):
    strings and binaries their length in bytes, numbers about one byte per two significant
    digits plus one, booleans and nulls one byte, lists and maps 3 bytes + 1 per element."""
    (kind, inner), *_ = value.items()
    if kind == "S":
        return len(inner.encode())
    if kind == "N":
        digits = inner.lstrip("-").replace(".", "").strip("0") or "0"
        return (len(digits) + 1) // 2 + 1
    if kind == "B":
        return len(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "L":
        return 3 + sum(1 + _value_size(v) for v in inner)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + _value_size(v) for k, v in inner.items())
    return sum(len(x.encode()) if isinstance(x, str) else len(x) for x in inner)  # SS, NS, BS


def item_size(item: dict[str, Any]) -> int:
    """The sum of the lengths of an item's attribute names and values."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def read_units(size: int, consistent: bool) -> float:
    """Read request units of one read of ``size`` bytes: one per 4 KB (rounded up, at least one)
    for a strongly consistent read, half of that for an eventually consistent one."""
    units = max(1, math.ceil(size / 4096))
    return units if consistent else units / 2


@dataclass
class Call:
    operation: str
    index: str | None
    items_read: int
    read_units: float
    seconds: float = 0.0


@dataclass
class Recorder:
    """Every call a DynamoDB client makes, through botocore's event hooks: the operation, the
    index it queried, the items it read (a Query or Scan reads ``ScannedCount`` items, a filter
    drops them only after), its read units by AWS's rules (a Scan's filtered-out items are not
    in the answer to be measured: ``item_bytes``, the table's mean item size, stands for them)
    and its time, from the call's parameters to its parsed answer."""

    item_bytes: float = 0.0
    calls: list[Call] = field(default_factory=list)

    def attach(self, dynamodb: Any) -> "Recorder":
        dynamodb.meta.events.register("provide-client-params.dynamodb", self._params)
        dynamodb.meta.events.register("after-call.dynamodb", self._after)
        return self

    def take(self) -> list[Call]:
        calls, self.calls = self.calls, []
        return calls

    @staticmethod
    def _params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["vsa_params"] = dict(params)
        context["vsa_started"] = time.perf_counter()

    def _after(self, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        params = context.get("vsa_params", {})
        seconds = time.perf_counter() - context.get("vsa_started", time.perf_counter())
        name = model.name
        consistent = bool(params.get("ConsistentRead"))
        if name == "GetItem":
            item = parsed.get("Item")
            read, size = (1, item_size(item)) if item else (0, 0)
        elif name in ("Query", "Scan"):
            returned = parsed.get("Items", [])
            read = int(parsed.get("ScannedCount", len(returned)))
            size = sum(item_size(i) for i in returned)
            if name == "Scan" and read > len(returned):
                size = round(read * self.item_bytes)
        else:
            self.calls.append(Call(name, None, 0, 0.0, seconds))
            return
        self.calls.append(Call(name, params.get("IndexName"), read, read_units(size, consistent), seconds))


# --- the other services, faked ---------------------------------------------------------------------


class _Paginator:
    def __init__(self, pages: Callable[[dict[str, Any]], list[dict[str, Any]]]) -> None:
        self._pages = pages

    def paginate(self, **kwargs: Any) -> list[dict[str, Any]]:
        return self._pages(kwargs)


class FakeEc2:
    """The array's volumes, each attached to its serving controllers; a launching controller."""

    meta = SimpleNamespace(region_name="us-east-1")

    def get_paginator(self, name: str) -> _Paginator:
        assert name == "describe_volumes", name

        def pages(kwargs: dict[str, Any]) -> list[dict[str, Any]]:
            ids = kwargs.get("VolumeIds") or []  # by tag filter (owned volumes): none here
            return [{"Volumes": [self._volume(v) for v in ids]}]

        return _Paginator(pages)

    @staticmethod
    def _volume(volume_id: str) -> dict[str, Any]:
        index = int(volume_id.removeprefix("vol-"), 16) // 16
        return {
            "VolumeId": volume_id,
            "AvailabilityZone": ZONE,
            "State": "in-use",
            "Attachments": [
                {"InstanceId": controller(index, s), "State": "attached"} for s in range(CONTROLLERS)
            ],
        }

    @staticmethod
    def describe_instances(InstanceIds: list[str]) -> dict[str, Any]:  # noqa: N803 - boto3's name
        instance = {
            "InstanceId": InstanceIds[0],
            "PrivateIpAddress": "10.9.9.9",
            "Placement": {"AvailabilityZone": ZONE},
            "BlockDeviceMappings": [{"DeviceName": "/dev/xvda"}],
        }
        return {"Reservations": [{"Instances": [instance]}]}


class FakeAutoscaling:
    @staticmethod
    def describe_auto_scaling_groups(AutoScalingGroupNames: list[str]) -> dict[str, Any]:  # noqa: N803
        index = int(AutoScalingGroupNames[0].removeprefix("vsa-arr-").removesuffix("-controllers"))
        instances = [
            {"InstanceId": controller(index, s), "LifecycleState": "InService"} for s in range(CONTROLLERS)
        ]
        return {"AutoScalingGroups": [{"DesiredCapacity": CONTROLLERS, "Instances": instances}]}


class FakeCloudwatch:
    @staticmethod
    def get_paginator(name: str) -> _Paginator:
        assert name == "get_metric_data", name
        return _Paginator(lambda _: [{"MetricDataResults": []}])

    @staticmethod
    def put_metric_data(**_: Any) -> None:
        """A stale-data hold counts itself (nothing to record here)."""


class FakeStepFunctions:
    """Records the executions the trigger starts."""

    class exceptions:  # noqa: N801 - boto3's attribute
        class ExecutionAlreadyExists(Exception):  # noqa: N818 - boto3's name
            pass

    def __init__(self) -> None:
        self.started: list[str] = []

    def start_execution(self, *, stateMachineArn: str, name: str, input: str) -> dict[str, Any]:  # noqa: N803
        self.started.append(name)
        return {"executionArn": f"{stateMachineArn}:{name}"}


# --- the events, through the core functions that handle them -----------------------------------


@dataclass
class World:
    """The core's handlers of each event, given the registry's DynamoDB client (recorded)."""

    dynamodb: Any
    table: str
    sfn: FakeStepFunctions = field(default_factory=FakeStepFunctions)

    def __post_init__(self) -> None:
        self.registry = ArrayRegistry(self.table, self.dynamodb)
        self.arrays = ArrayService(
            scheduler_role_arn="arn:aws:iam::000000000000:role/scheduler",
            ec2=FakeEc2(),
            autoscaling=FakeAutoscaling(),
            cloudwatch=FakeCloudwatch(),
            scheduler=object(),
            ssm=object(),
        )
        self.ctx = ControllerContext(registry=self.registry, arrays=self.arrays, ec2=FakeEc2(), ssm=object())

    def _trigger(self, event: dict[str, Any]) -> dict[str, Any]:
        """on_controller_event: parse, then start the workflow (or not), with this world's table
        (the benchmark keeps two)."""
        settings = LifecycleSettings(
            table_name=self.table,
            bootstrap_state_machine_arn=f"{WORKFLOWS}bootstrap",
            drain_state_machine_arn=f"{WORKFLOWS}drain",
        )
        parsed = ControllerEvent.model_validate(event)
        raw = parsed.model_dump_json(by_alias=True)
        return start(parsed, raw, self.sfn, self.dynamodb, settings)  # type: ignore[arg-type]

    def state_change(self, instance_id: str, state: str = "terminated") -> dict[str, Any]:
        """EC2 Instance State-change Notification → on_controller_event → (a controller's)
        DrainController's Locate."""
        event = _event("ec2/instance_state_change.json")
        event["detail"] = {"instance-id": instance_id, "state": state}
        event["resources"] = [f"arn:aws:ec2:us-east-1:123456789012:instance/{instance_id}"]
        answer = self._trigger(event)
        if answer["started"]:
            aws_drain.locate(self.ctx, Locate(step="locate", instanceId=instance_id))
        return answer

    def launch(self, index: int) -> dict[str, Any]:
        """EC2 Instance-launch Lifecycle Action → on_controller_event → BootstrapController's Prepare."""
        event = _event("autoscaling/launch_lifecycle_action.json")
        instance_id = launching(index)
        event["detail"].update(
            {"EC2InstanceId": instance_id, "AutoScalingGroupName": group_name(array_id(index))}
        )
        answer = self._trigger(event)
        aws_bootstrap.prepare(
            self.ctx, Prepare(step="prepare", arrayId=array_id(index), instanceId=instance_id)
        )
        return answer

    def terminate(self, index: int) -> dict[str, Any]:
        """EC2 Instance-terminate Lifecycle Action (a scale-in's leaver) → on_controller_event →
        DrainController's Locate."""
        event = _event("autoscaling/terminate_lifecycle_action.json")
        instance_id = controller(index, CONTROLLERS - 1)
        event["detail"].update(
            {"EC2InstanceId": instance_id, "AutoScalingGroupName": group_name(array_id(index))}
        )
        answer = self._trigger(event)
        aws_drain.locate(self.ctx, Locate(step="locate", instanceId=instance_id))
        return answer

    def alarm(self, index: int) -> dict[str, Any]:
        """An array's low IOPS alarm → ScaleArray's Lambda steps: ReadDemand, then PlanScale, a
        scale-in that picks its leaver from the slots (on_iops_alarm itself reads nothing; the
        workflow's lock and records are keyed writes of its own)."""
        request = ScaleRequest.model_validate(
            {
                **_event("stepfunctions/task_plan_scale.json"),
                "arrayId": array_id(index),
                "alarmName": iops_alarm_name(array_id(index), "low"),
                "alarmKind": "low",
                "demandIops": 300_000.0,
            }
        )
        read_demand(array_id(index), self.registry, self.arrays, FakeCloudwatch(), NOW)
        return plan_scale(
            request, self.registry, FakeAutoscaling(), NOW, FakeEc2(), FakeCloudwatch(), settings=PLAN
        )

    def list_arrays(self) -> int:
        """Not an event: GET /arrays and the every-minute demand publisher read every array."""
        return len(self.registry.all())


def scan_find_slot(dynamodb: Any, table: str, instance_id: str) -> bool:
    """What finding a controller by its instance id costs without the ``instances`` index: a Scan
    of the whole registry with a filter (the bench's comparison for ``ArrayRegistry.find_slot``)."""
    for page in dynamodb.get_paginator("scan").paginate(
        TableName=table,
        FilterExpression="begins_with(sk, :slot) AND instanceId = :instance",
        ExpressionAttributeValues={":slot": {"S": "SLOT#"}, ":instance": {"S": instance_id}},
        ConsistentRead=True,
    ):
        if page.get("Items"):
            return True
    return False


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    began = time.perf_counter()
    result = action()
    return time.perf_counter() - began, result
