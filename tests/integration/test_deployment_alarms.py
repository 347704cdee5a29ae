"""Each alarm the deployment itself creates (template.yaml's ``AWS::CloudWatch::Alarm``
resources) goes to ALARM on the failure it exists for, against the deployed stack.

One row of ``FAILURES`` per alarm: how to cause its failure, which answers how to put back what
it changed. A new alarm in the template fails ``test_every_alarm_of_the_template_has_a_failure``
until its row is written. Each run:

1. reads the deployed alarm's own query (``Metrics``, or its single metric) and sums it over a
   fixed window, before the failure;
2. causes the failure, and waits (deadline) until that sum has grown: the failure reached the
   metric the alarm reads, as its service publishes it (Step Functions' ``AWS/States``, Lambda's
   ``AWS/Lambda``, SQS's ``AWS/SQS`` every minute, the product's own ``VSA`` metrics);
3. sets the alarm to OK (SetAlarmState, as AWS's alarm-testing guidance does), has the local
   cloud evaluate it now instead of at the next minute (control ``cloudwatch/evaluate``), and
   checks it is ALARM: every one of these alarms is ``> 0`` on a count or a depth, so the
   failure's own datapoint breaches, whatever else happened in the window;
4. puts back what the failure changed (the dead-letter message). Datapoints cannot be taken
   back: each alarm returns to OK by itself once its period has passed (``notBreaching``).

Rows marked ``honest=False`` publish the product's own datapoint (the name, namespace and
dimension the product's code publishes, imported from it) instead of producing the failure: the
failure needs an array world with nodes and several health-check runs (hosts short of paths, an
apply left unfinished, a backup overdue, a controller replaced), three 5-minute periods in a row
(stale scaling data) or a full backup with an AMI holding a snapshot (retention). Those tests
show the alarm reads what the product publishes; that the product publishes it on the failure
is pinned where the failure is driven (tests/integration/test_health.py,
tests/integration/test_backups.py::test_a_retention_failure_leaves_the_backup_good_and_raises_its_own_alarm,
tests/unit/test_health_publish.py, tests/unit/test_task_plan_scale.py).
"""

import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from tests.infra.test_alarms import ALARMS
from tests.integration.arrays_world import control
from tests.integration.conftest import STACK
from vsa_core.backups.aws_drills import DRILLS_NAMESPACE
from vsa_core.backups.aws_retention import RETENTION_FAILURES_METRIC, RETENTION_NAMESPACE
from vsa_core.health.aws_check import DEPLOYMENT_NAMESPACE
from vsa_core.scaling.rules import STALE_METRIC, STALE_NAMESPACE

EVENTS = Path(__file__).resolve().parents[2] / "events"
WINDOW = 1200
"""The fixed window (s) the alarm's metric is summed over, before and after the failure."""

Undo = Callable[[], None]


@dataclass(frozen=True)
class Failure:
    """How to cause an alarm's failure against the deployed stack (``cause`` answers the undo)."""

    what: str
    cause: Callable[[dict[str, str]], Undo]
    honest: bool = True
    """False: the product's datapoint is published; the failure itself is not produced."""
    timeout: float = 90
    """How long its service may take to publish the metric (SQS: every minute)."""


def nothing() -> None:
    """Nothing to put back."""


# --- the failures -------------------------------------------------------------------------------


def unknown_array() -> str:
    return f"it-{uuid.uuid4().hex[:10]}"


def workflow_fails(output: str, make_input: Callable[[], dict[str, Any]]) -> Failure:
    """An execution of the deployed state machine that fails (its trigger's input, for an array
    or instance that does not exist), run to its end."""

    def cause(stack_outputs: dict[str, str]) -> Undo:
        sfn = boto3.client("stepfunctions")
        arn = sfn.start_execution(stateMachineArn=stack_outputs[output], input=json.dumps(make_input()))[
            "executionArn"
        ]
        deadline = time.monotonic() + 120
        while (described := sfn.describe_execution(executionArn=arn))["status"] == "RUNNING":
            assert time.monotonic() < deadline, f"{arn} still running after 120 s"
            time.sleep(1)
        assert described["status"] in {"FAILED", "TIMED_OUT"}, described
        return nothing

    return Failure(f"a {output.removesuffix('StateMachineArn')} execution fails", cause)


def function_errors(output: str, payload: dict[str, Any]) -> Failure:
    """The deployed function invoked with a request it refuses: it raises (a function error)."""

    def cause(stack_outputs: dict[str, str]) -> Undo:
        reply = boto3.client("lambda", config=Config(read_timeout=150, retries={"max_attempts": 0})).invoke(
            FunctionName=stack_outputs[output], Payload=json.dumps(payload).encode()
        )
        assert reply.get("FunctionError") == "Unhandled", reply
        return nothing

    return Failure(f"{output.removesuffix('FunctionName')} raises", cause)


def dead_letter(output: str) -> Failure:
    """A message left in the deployed dead-letter queue; the undo takes out only that one (other
    tests read the queue for theirs)."""

    def cause(stack_outputs: dict[str, str]) -> Undo:
        sqs, url = boto3.client("sqs"), stack_outputs[output]
        body = f"test-deployment-alarms-{uuid.uuid4().hex}"
        sqs.send_message(QueueUrl=url, MessageBody=body)

        def undo() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                messages = sqs.receive_message(
                    QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=0
                ).get("Messages", [])
                for message in messages:
                    if message["Body"] == body:
                        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
                        return

        return undo

    return Failure(f"a message in {output.removesuffix('Url')}", cause, timeout=180)


BEYOND_ANY_ARRAY = 1_000_000.0
"""More hosts, controllers, applies or drills than any test's arrays count."""


def product_metric(namespace: str, metric: str, periods: int = 1) -> Failure:
    """The product's own datapoint for the deployment, in each of the newest ``periods``
    5-minute periods (the alarm needs that many in a row). Its value is above anything the
    arrays of the tests beside it publish: an alarm on the Maximum (hosts short of paths) saw
    no change from a 1 when another test's array had 2 hosts short in the same window."""

    def cause(stack_outputs: dict[str, str]) -> Undo:
        now = datetime.now(UTC)
        boto3.client("cloudwatch").put_metric_data(
            Namespace=namespace,
            MetricData=[
                {
                    "MetricName": metric,
                    "Dimensions": [{"Name": "Deployment", "Value": STACK}],
                    "Timestamp": now - timedelta(minutes=5 * back),
                    "Value": BEYOND_ANY_ARRAY,
                    "Unit": "Count",
                }
                for back in range(periods)
            ],
        )
        return nothing

    return Failure(f"the product counts {namespace} {metric}", cause, honest=False)


def function_errors_per_minute(output: str, minutes: int) -> Failure:
    """A function error of the deployed function in each of the newest ``minutes`` minutes (the
    minute under way among them, so the alarm's datapoints-to-alarm are met whether or not its
    evaluation counts that minute), as Lambda counts them (``AWS/Lambda Errors``, published as
    Lambda does through the local cloud's control): the every-minute demand publisher ignores
    its event, so no invocation can be made to fail from outside."""

    def cause(stack_outputs: dict[str, str]) -> Undo:
        now = datetime.now(UTC)
        data = [
            {
                "MetricName": "Errors",
                "Dimensions": [{"Name": "FunctionName", "Value": stack_outputs[output]}],
                "Timestamp": (now - timedelta(minutes=back)).isoformat(),
                "Value": 1.0,
                "Unit": "Count",
            }
            for back in range(minutes)
        ]
        control(
            os.environ["AWS_ENDPOINT_URL"], "cloudwatch", "publish", Namespace="AWS/Lambda", MetricData=data
        )
        return nothing

    return Failure(f"{output.removesuffix('FunctionName')} fails {minutes} minutes", cause, honest=False)


def launch_of_an_unknown_instance() -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / "autoscaling/launch_lifecycle_action.json").read_text())
    event["detail"]["EC2InstanceId"] = f"i-{uuid.uuid4().hex[:17]}"
    return event


def termination_without_an_instance() -> dict[str, Any]:
    """A terminate lifecycle action that names no instance. A drain of an instance that is no
    controller of ours succeeds (nothing to drain), and one that fails in a later step needs an
    array world: this run fails at its first state instead."""
    event: dict[str, Any] = json.loads((EVENTS / "autoscaling/terminate_lifecycle_action.json").read_text())
    del event["detail"]["EC2InstanceId"]
    return event


def alarm_for_an_unknown_array() -> dict[str, Any]:
    """ScaleArray's input as on_iops_alarm starts it (``vsa_core.scaling.events.ScaleRequest``),
    for an array that is not registered: ArrayNotFoundError."""
    array, now = unknown_array(), int(time.time())
    return {
        "arrayId": array,
        "alarmName": f"vsa-{array}-iops-high",
        "alarmKind": "high",
        "demandIops": 1000.0,
        "stateTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000+0000"),
        "eventId": str(uuid.uuid4()),
        "lockNow": now,
        "lockUntil": now + 600,
    }


FAILURES: dict[str, Failure] = {
    "BackupFailedAlarm": workflow_fails(
        "ConsistentBackupStateMachineArn",
        lambda: {"arrayId": unknown_array(), "backupId": "bk-20200101T000000000Z-00000000"},
    ),
    "ScaleArrayFailedAlarm": workflow_fails("ScaleArrayStateMachineArn", alarm_for_an_unknown_array),
    "DeleteArrayFailedAlarm": workflow_fails(
        "DeleteArrayStateMachineArn",
        lambda: {"arrayId": (a := unknown_array()), "groupName": f"vsa-{a}", "deleteVolumes": False},
    ),
    "BootstrapControllerFailedAlarm": workflow_fails(
        "BootstrapControllerStateMachineArn", launch_of_an_unknown_instance
    ),
    "DrainControllerFailedAlarm": workflow_fails(
        "DrainControllerStateMachineArn", termination_without_an_instance
    ),
    "ReconcileArrayFailedAlarm": workflow_fails(
        "ReconcileArrayStateMachineArn", lambda: {"arrayId": unknown_array()}
    ),
    "HealthCheckFailedAlarm": function_errors(
        "TaskHealthCheckFunctionName", {"arrayIds": ["not an array id"]}
    ),
    "DeadLetterQueueNotEmptyAlarm": dead_letter("TriggerDeadLetterQueueUrl"),
    "BackupRetentionFailedAlarm": product_metric(RETENTION_NAMESPACE, RETENTION_FAILURES_METRIC),
    "ScalingStaleDataAlarm": product_metric(STALE_NAMESPACE, STALE_METRIC, periods=3),
    "HostsShortOfPathsAlarm": product_metric(DEPLOYMENT_NAMESPACE, "HostsShortOfPaths", periods=2),
    "UnfinishedApplyAlarm": product_metric(DEPLOYMENT_NAMESPACE, "UnfinishedApplies", periods=2),
    "BackupOverdueAlarm": product_metric(DEPLOYMENT_NAMESPACE, "BackupsOverdue"),
    "ControllerReplacedAlarm": product_metric(DEPLOYMENT_NAMESPACE, "ControllersReplaced"),
    "DemandPublisherFailedAlarm": function_errors_per_minute("TaskPublishDemandFunctionName", 5),
    "DrillFailedAlarm": workflow_fails(
        "RestoreDrillStateMachineArn",
        lambda: {
            "arrayId": unknown_array(),
            "drillId": "dr-20200101T000000000Z-00000000",
            "cleanupOnly": False,
        },
    ),
    "DrillRpoAlarm": product_metric(DRILLS_NAMESPACE, "DrillRpoOverBound"),
    "CopyFailedAlarm": workflow_fails(
        "CopyBackupSetStateMachineArn",
        lambda: {
            "arrayId": unknown_array(),
            "backupId": "bk-20200101T000000000Z-00000000",
            "destinations": [{"region": "us-west-2", "accountId": None}],
        },
    ),
}


# --- reading the alarm -------------------------------------------------------------------------


def alarm_name(resource: str) -> str:
    return str(ALARMS[resource]["AlarmName"]["Sub"]).replace("${AWS::StackName}", STACK)


def described(name: str) -> dict[str, Any]:
    [alarm] = boto3.client("cloudwatch").describe_alarms(AlarmNames=[name])["MetricAlarms"]
    return dict(alarm)


def alarm_queries(alarm: dict[str, Any]) -> list[dict[str, Any]]:
    """The deployed alarm's own metric data queries (its single metric as one query)."""
    if alarm.get("Metrics"):
        return [
            {k: v for k, v in q.items() if k in {"Id", "MetricStat", "Expression", "ReturnData"}}
            for q in alarm["Metrics"]
        ]
    metric = {k: alarm[k] for k in ("Namespace", "MetricName", "Dimensions")}
    stat = {"Metric": metric, "Period": alarm["Period"], "Stat": alarm["Statistic"]}
    return [{"Id": "alarm", "MetricStat": stat, "ReturnData": True}]


def window_value(alarm: dict[str, Any], start: datetime) -> float:
    """What the alarm's query returns over ``[start, start + WINDOW)`` as one period: the
    statistic over every datapoint in it (Sum for the counts, Maximum for the queue's depth)."""
    queries = []
    for query in alarm_queries(alarm):
        query = json.loads(json.dumps(query, default=str))
        if "MetricStat" in query:
            query["MetricStat"]["Period"] = WINDOW
        queries.append(query)
    [returned] = [q["Id"] for q in queries if q.get("ReturnData", True)]
    results = boto3.client("cloudwatch").get_metric_data(
        MetricDataQueries=queries, StartTime=start, EndTime=start + timedelta(seconds=WINDOW)
    )["MetricDataResults"]
    return float(sum(v for r in results if r["Id"] == returned for v in r["Values"]))


# --- the tests -------------------------------------------------------------------------------------


def test_every_alarm_of_the_template_has_a_failure() -> None:
    assert sorted(FAILURES) == sorted(ALARMS)


@pytest.mark.parametrize("resource", sorted(FAILURES))
def test_the_alarm_goes_to_alarm_on_its_failure(resource: str, stack_outputs: dict[str, str]) -> None:
    failure, name = FAILURES[resource], alarm_name(resource)
    alarm = described(name)
    # A fixed window around the failure: older datapoints (periods=3 rows go back 10 minutes)
    # and the failure's own all fall inside it
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=15)
    before = window_value(alarm, start)

    # When the failure happens
    undo = failure.cause(stack_outputs)
    try:
        # Then the metric the alarm reads counts it
        deadline = time.monotonic() + failure.timeout
        while (after := window_value(alarm, start)) <= before:
            assert time.monotonic() < deadline, f"{failure.what}: {name}'s metric unchanged ({before})"
            time.sleep(2)
        # ... and the alarm, evaluated from OK, goes to ALARM
        cloudwatch = boto3.client("cloudwatch")
        cloudwatch.set_alarm_state(
            AlarmName=name, StateValue="OK", StateReason=f"test: before {failure.what}"
        )
        # Evaluated now, as CloudWatch evaluates every minute: the window slides ("Alarm
        # evaluation window", CloudWatch User Guide), so the failure counted in the last minutes
        # is in its newest period whatever the clock's 5-minute boundaries
        control(os.environ["AWS_ENDPOINT_URL"], "cloudwatch", "evaluate", AlarmName=name)
        state = described(name)
        assert state["StateValue"] == "ALARM", (failure.what, before, after, state)
        assert state["AlarmActions"] == [stack_outputs["AlertsTopicArn"]]
    finally:
        undo()
