"""Unit tier: the core and the handlers in-process, AWS replaced by moto or botocore's Stubber.

Nothing here reaches a network: every test runs with throw-away credentials, no configured
endpoint (moto must intercept, not the local cloud) and fresh cached clients and settings.
"""

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.ec2.responses import EC2Response

from tests.infra.test_registry_table import create_table_arguments, time_to_live
from vsa_core.clients import client, regional_client
from vsa_core.observability import metrics
from vsa_core.reconcile.aws_start import ReconcileStarter
from vsa_core.settings import Loader

# moto implements no EBS snapshot lock (LockSnapshot, DescribeLockedSnapshots): no snapshot in a
# unit test is ever locked, and this is EC2's answer for unlocked ones (an empty snapshotSet).
# The lock itself is modelled, and tested, in the local cloud (vsa_localcloud/ebs_lock.py).
_NO_LOCKS = (
    '<DescribeLockedSnapshotsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
    "<requestId>unit</requestId><snapshotSet/></DescribeLockedSnapshotsResponse>"
)
EC2Response.describe_locked_snapshots = lambda self: _NO_LOCKS  # type: ignore[attr-defined]

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account, also the one in the sample events
TABLE_NAME = "vsa-unit-registry"


UNIT_ENVIRONMENT = {
    "VSA_DEPLOYMENT_NAME": "vsa",
    "VSA_TABLE_NAME": TABLE_NAME,
    "VSA_DEPLOYMENT": "vsa-unit",
    "VSA_EVENT_BUS_NAME": "default",
    "VSA_BACKUP_SCHEDULER_ROLE_ARN": f"arn:aws:iam::{ACCOUNT}:role/vsa-unit-backup-scheduler",
    "VSA_KEYS_KMS_KEY_ID": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/00000000-0000-4000-8000-00000000000a",
    "VSA_NODE_ROLE_PATH": "/vsa-node/",
    "VSA_SCALE_STATE_MACHINE_ARN": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:vsa-unit-scale",
    "VSA_BOOTSTRAP_STATE_MACHINE_ARN": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:vsa-unit-bootstrap",
    "VSA_DRAIN_STATE_MACHINE_ARN": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:vsa-unit-drain",
    "VSA_RECONCILE_STATE_MACHINE_ARN": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:vsa-unit-reconcile",
    "VSA_DELETE_STATE_MACHINE_ARN": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:vsa-unit-delete",
    "VSA_BACKUP_STATE_MACHINE_ARN": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:vsa-unit-backup",
    "VSA_DRILL_STATE_MACHINE_ARN": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:vsa-unit-restore-drill",
    "VSA_DRILL_CHECK_DOCUMENT": "vsa-unit-DrillCheck",
    "VSA_DRILL_INSTANCE_PROFILE_ARN": f"arn:aws:iam::{ACCOUNT}:instance-profile/vsa-drill/vsa-unit-drill",
    "VSA_NODE_DEVICE_DIR": "/dev/disk/by-id",
    "VSA_NODE_DRILL_MOUNT_DIR": "/run/vsa-drill",
    "VSA_ALARM_REARM_SECONDS": "60",
    "VSA_HEALTH_CHECK_MINUTES": "5",
    "VSA_HISTORY_RETENTION_DAYS": "90",
    "VSA_RETENTION_MAX_DELETIONS": "5",
    "VSA_IDEMPOTENCY_TABLE_NAME": "vsa-unit-idempotency",
    "VSA_CONFIGURE_TARGET_DOCUMENT": "vsa-unit-ConfigureTarget",
    "VSA_CONNECT_PATH_DOCUMENT": "vsa-unit-ConnectPath",
    "VSA_DISCONNECT_PATH_DOCUMENT": "vsa-unit-DisconnectPath",
    "VSA_REPORT_PATHS_DOCUMENT": "vsa-unit-ReportPaths",
    "VSA_REPORT_EXPORTS_DOCUMENT": "vsa-unit-ReportExports",
    "VSA_FREEZE_IO_DOCUMENT": "vsa-unit-FreezeIo",
    "VSA_THAW_IO_DOCUMENT": "vsa-unit-ThawIo",
    "VSA_SIGNALS_BUCKET": "vsa-unit-signals",
    "VSA_NODE_CONFIGFS_ROOT": "/sys/kernel/config",
    "VSA_NODE_NVME_COMMAND": "nvme",
    "VSA_NODE_SYSFS_ROOT": "/sys",
    "VSA_NODE_MOUNTS_FILE": "/proc/self/mounts",
}
"""A value for every variable a function's settings read (tests/infra/test_function_settings.py
checks the template's own); a test or fixture that sets one first keeps its value."""


# One of moto's default AMIs (moto/ec2/resources/amis.json.gz), present in every region.
MOTO_IMAGE_ID = "ami-12c6146b"


def an_image_id(ec2: Any) -> str:
    """An AMI moto knows, read with DescribeImages of that one id: moto holds over a thousand
    images per region, and serializing all of them (``describe_images()`` unfiltered) was most
    of the setup of every test that needed one (about 1 s each)."""
    image_id: str = ec2.describe_images(ImageIds=[MOTO_IMAGE_ID])["Images"][0]["ImageId"]
    return image_id


def record_decision(table: str, when: str, name: str, decision: dict[str, Any]) -> None:
    """A scale decision of array "demo" as ScaleArray's RecordDecision writes it: ``when`` is
    its run's start time (``$$.Execution.StartTime``), ``name`` its run's name."""
    boto3.client("dynamodb", region_name=REGION).put_item(
        TableName=table,
        Item={
            "pk": {"S": "ARRAY#demo"},
            "sk": {"S": f"DECISION#{when}#{name}"},
            "decision": {"S": json.dumps(decision)},
        },
    )


def load_event(relative: str) -> dict[str, Any]:
    """A sample event from ``events/`` (a fresh copy: tests may edit it)."""
    return json.loads((EVENTS / relative).read_text())


def alarm_event(
    *,
    alarm_name: str = "vsa-demo-iops-high",
    state: str = "ALARM",
    datapoints: list[float] | None = None,
    state_timestamp: str | None = None,
) -> dict[str, Any]:
    """The AWS sample alarm event, re-aimed at another alarm, state, demand or state time."""
    event = load_event("cloudwatch/iops_alarm_high.json")
    event["detail"]["alarmName"] = alarm_name
    event["resources"] = [f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:{alarm_name}"]
    event["detail"]["state"]["value"] = state
    if datapoints is not None:
        reason = json.loads(event["detail"]["state"]["reasonData"])
        reason["recentDatapoints"] = datapoints
        event["detail"]["state"]["reasonData"] = json.dumps(reason)
    if state_timestamp is not None:
        event["detail"]["state"]["timestamp"] = state_timestamp
    return event


@dataclass(frozen=True)
class FakeLambdaContext:
    """The attributes Powertools' ``inject_lambda_context`` reads from a real context."""

    function_name: str = "unit-test-function"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:unit-test-function"
    aws_request_id: str = "00000000-0000-4000-8000-000000000000"

    def get_remaining_time_in_millis(self) -> int:
        return 29_000


def _clear_caches() -> None:
    client.cache_clear()
    regional_client.cache_clear()
    Loader.clear_all()


@pytest.fixture(autouse=True)
def offline_aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fake credentials and region, no endpoint override, fresh cached clients and settings."""
    for name in list(os.environ):
        if name.startswith("AWS_ENDPOINT_URL") or name in {"AWS_PROFILE", "AWS_DEFAULT_PROFILE"}:
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SECURITY_TOKEN", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    # No shared config can bring a profile or an endpoint_url back in.
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
    for name in UNIT_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    _clear_caches()
    yield
    _clear_caches()


@pytest.fixture
def function_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The functions' environment (``UNIT_ENVIRONMENT`` where a test has not set a variable
    already), with tracing off and metrics reset."""
    for name, value in UNIT_ENVIRONMENT.items():
        if name not in os.environ:
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "VSA")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "vsa-control-plane")
    # The shared Metrics object read its namespace from the environment when first imported.
    monkeypatch.setattr(metrics, "namespace", "VSA")
    metrics.clear_metrics()
    Loader.clear_all()
    yield
    metrics.clear_metrics()


@pytest.fixture
def lambda_context() -> FakeLambdaContext:
    return FakeLambdaContext()


@pytest.fixture
def aws() -> Iterator[None]:
    """moto in place of every AWS service for the duration of the test."""
    with mock_aws():
        yield


@pytest.fixture
def registry_table(aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The registry table as the template declares it (keys, indexes, TTL), named in VSA_TABLE_NAME."""
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    dynamodb.create_table(**create_table_arguments(TABLE_NAME))
    dynamodb.update_time_to_live(TableName=TABLE_NAME, TimeToLiveSpecification=time_to_live())
    monkeypatch.setenv("VSA_TABLE_NAME", TABLE_NAME)
    Loader.clear_all()
    yield TABLE_NAME
    dynamodb.delete_table(TableName=TABLE_NAME)


@pytest.fixture
def reconcile_starter(registry_table: str) -> Iterator[ReconcileStarter]:
    """Starting ReconcileArray over moto: a one-state machine and the registry table."""
    sfn = boto3.client("stepfunctions", region_name=REGION)
    machine = sfn.create_state_machine(
        name="vsa-unit-reconcile-array",
        definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
        roleArn="arn:aws:iam::123456789012:role/reconcile-unit",
    )["stateMachineArn"]
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    yield ReconcileStarter(sfn=sfn, dynamodb=dynamodb, table=registry_table, state_machine_arn=machine)
    sfn.delete_state_machine(stateMachineArn=machine)


@pytest.fixture
def workflows(aws: None) -> None:
    """The state machines ``UNIT_ENVIRONMENT`` names, in moto (which records executions without
    running them): the timeline lists the runs of every one."""
    sfn = boto3.client("stepfunctions", region_name=REGION)
    for name, arn in UNIT_ENVIRONMENT.items():
        if name.endswith("_STATE_MACHINE_ARN"):
            sfn.create_state_machine(
                name=arn.rsplit(":", 1)[1],
                definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
                roleArn=f"arn:aws:iam::{ACCOUNT}:role/workflow-unit",
                type="STANDARD",
            )


@pytest.fixture
def scale_state_machine(aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A ScaleArray state machine in moto (which records executions without running them)."""
    sfn = boto3.client("stepfunctions", region_name=REGION)
    arn = sfn.create_state_machine(
        name="ScaleArray-unit",
        definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
        roleArn=f"arn:aws:iam::{ACCOUNT}:role/scale-array-unit",
        type="STANDARD",
    )["stateMachineArn"]
    monkeypatch.setenv("VSA_SCALE_STATE_MACHINE_ARN", arn)
    Loader.clear_all()
    yield arn
    sfn.delete_state_machine(stateMachineArn=arn)


def hooks_keep_metadata(autoscaling: Any) -> None:
    """moto's lifecycle hooks drop ``NotificationMetadata``: remember what PutLifecycleHook and
    CreateAutoScalingGroup's LifecycleHookSpecificationList sent, and put it back into
    DescribeLifecycleHooks answers, as AWS does (without it every re-apply sees a change)."""
    sent: dict[tuple[str, str], str] = {}

    def record(params: dict[str, Any], **_: Any) -> None:
        group = params.get("AutoScalingGroupName", "")
        for hook in [params, *params.get("LifecycleHookSpecificationList", [])]:
            if "NotificationMetadata" in hook and "LifecycleHookName" in hook:
                sent[(group, hook["LifecycleHookName"])] = hook["NotificationMetadata"]

    def restore(parsed: dict[str, Any], **_: Any) -> None:
        for hook in parsed.get("LifecycleHooks", []):
            key = (hook["AutoScalingGroupName"], hook["LifecycleHookName"])
            if key in sent:
                hook["NotificationMetadata"] = sent[key]

    for operation in ("PutLifecycleHook", "CreateAutoScalingGroup"):
        autoscaling.meta.events.register(f"provide-client-params.autoscaling.{operation}", record)
    autoscaling.meta.events.register("after-call.autoscaling.DescribeLifecycleHooks", restore)
