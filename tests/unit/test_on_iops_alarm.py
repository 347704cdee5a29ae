"""on_iops_alarm: an IOPS alarm entering ALARM starts exactly one ScaleArray per state change."""

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from pydantic import ValidationError

from on_iops_alarm.handler import lambda_handler, start_scale
from tests.unit.conftest import ACCOUNT, REGION, FakeLambdaContext, alarm_event, load_event
from vsa_core.errors import InvalidEventError
from vsa_core.naming import scale_execution_name
from vsa_core.scaling.events import AlarmStateChangeEvent, ScaleRequest

STATE_MACHINE_ARN = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:ScaleArray-unit"
SAMPLE_ALARM_ARN = "arn:aws:cloudwatch:us-east-1:123456789012:alarm:vsa-demo-iops-high"
SAMPLE_STATE_TIME = "2026-11-02T17:04:40.989+0000"
SAMPLE_EVENT_ID = "c4c1c1c9-6542-e61b-6ef0-8c4d36933a92"
SAMPLE_EXECUTION = scale_execution_name("demo", SAMPLE_ALARM_ARN, SAMPLE_STATE_TIME)


class JsonDocument:
    """Equal to a JSON string that decodes to ``expected`` (key order and spacing do not matter)
    plus the scaling-lock lease the trigger adds: ``lockUntil`` 600 s after ``lockNow``."""

    def __init__(self, expected: Any) -> None:
        self.expected = expected

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, str):
            return False
        decoded = json.loads(other)
        now, until = decoded.pop("lockNow", None), decoded.pop("lockUntil", None)
        lease_ok = isinstance(now, int) and isinstance(until, int) and until - now == 600
        return lease_ok and decoded == self.expected

    def __hash__(self) -> int:
        return hash(json.dumps(self.expected, sort_keys=True))

    def __repr__(self) -> str:
        return f"JsonDocument({self.expected!r})"


class AnyScaleRequestFor:
    """Equal to any valid ScaleRequest JSON for ``array_id``."""

    def __init__(self, array_id: str) -> None:
        self.array_id = array_id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and ScaleRequest.model_validate_json(other).array_id == self.array_id

    def __hash__(self) -> int:
        return hash(self.array_id)

    def __repr__(self) -> str:
        return f"AnyScaleRequestFor({self.array_id!r})"


def parse(event: dict[str, Any]) -> AlarmStateChangeEvent:
    return AlarmStateChangeEvent.model_validate(event)


@pytest.fixture
def stubbed_sfn(function_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Stubber]]:
    """A real Step Functions client whose calls are checked against the ones a test expects."""
    monkeypatch.setenv("VSA_SCALE_STATE_MACHINE_ARN", STATE_MACHINE_ARN)
    sfn = boto3.client("stepfunctions", region_name=REGION)
    with Stubber(sfn) as stubber:
        yield sfn, stubber
        # Then every call the test expected was made
        stubber.assert_no_pending_responses()


def test_alarm_starts_scale_array_with_the_demand_and_an_idempotent_name(stubbed_sfn):
    # Given the sample high-IOPS alarm entering ALARM at 612,345 IOPS
    sfn, stubber = stubbed_sfn
    execution_arn = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:ScaleArray-unit:{SAMPLE_EXECUTION}"
    stubber.add_response(
        "start_execution",
        {"executionArn": execution_arn, "startDate": datetime(2026, 11, 2, 17, 4, 41, tzinfo=UTC)},
        expected_params={
            "stateMachineArn": STATE_MACHINE_ARN,
            "name": SAMPLE_EXECUTION,
            "input": JsonDocument(
                {
                    "arrayId": "demo",
                    "alarmName": "vsa-demo-iops-high",
                    "alarmKind": "high",
                    "demandIops": 612345.0,
                    "stateTimestamp": SAMPLE_STATE_TIME,
                    "eventId": SAMPLE_EVENT_ID,
                    "rearmSeconds": 60,
                }
            ),
        },
    )
    # When the trigger handles it
    result = start_scale(parse(load_event("cloudwatch/iops_alarm_high.json")), sfn)
    # Then exactly that StartExecution was sent, and the result names the execution
    assert result == {"started": True, "executionArn": execution_arn, "executionName": SAMPLE_EXECUTION}


def expect_start(stubber: Stubber, name: str, expected: dict[str, Any]) -> None:
    """StartExecution of ScaleArray named ``name`` with the input ``expected`` (the lease added)."""
    stubber.add_response(
        "start_execution",
        {
            "executionArn": f"arn:aws:states:{REGION}:{ACCOUNT}:execution:x:{name}",
            "startDate": datetime.now(UTC),
        },
        expected_params={
            "stateMachineArn": STATE_MACHINE_ARN,
            "name": name,
            "input": JsonDocument(expected),
        },
    )


def test_low_alarm_starts_a_scale_in_request(stubbed_sfn):
    # Given the low-IOPS alarm of array "prod-db-01" entering ALARM at 90,000 IOPS
    sfn, stubber = stubbed_sfn
    alarm = "vsa-prod-db-01-iops-low"
    alarm_arn = f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:{alarm}"
    name = scale_execution_name("prod-db-01", alarm_arn, "2026-11-03T02:00:00.000+0000")
    expect_start(
        stubber,
        name,
        {
            "arrayId": "prod-db-01",
            "alarmName": alarm,
            "alarmKind": "low",
            "demandIops": 90000.0,
            "stateTimestamp": "2026-11-03T02:00:00.000+0000",
            "eventId": SAMPLE_EVENT_ID,
            "rearmSeconds": 60,
        },
    )
    event = alarm_event(
        alarm_name=alarm, datapoints=[120_000, 90_000], state_timestamp="2026-11-03T02:00:00.000+0000"
    )
    # When handled / Then the request is for that array, kind low, newest demand
    assert start_scale(parse(event), sfn)["started"] is True


def test_alarm_without_resources_is_named_after_the_alarm(stubbed_sfn):
    # Given an event whose resources list is empty
    sfn, stubber = stubbed_sfn
    event = load_event("cloudwatch/iops_alarm_high.json")
    event["resources"] = []
    name = scale_execution_name("demo", "vsa-demo-iops-high", SAMPLE_STATE_TIME)
    stubber.add_response(
        "start_execution",
        {
            "executionArn": f"arn:aws:states:{REGION}:{ACCOUNT}:execution:x:{name}",
            "startDate": datetime.now(UTC),
        },
        expected_params={
            "stateMachineArn": STATE_MACHINE_ARN,
            "name": name,
            "input": AnyScaleRequestFor("demo"),
        },
    )
    # When handled / Then the execution name is derived from the alarm name instead of its ARN
    assert start_scale(parse(event), sfn)["executionName"] == name


def test_sample_ok_event_starts_nothing(stubbed_sfn):
    # Given the sample high alarm returning to OK, and a client that expects no call
    sfn, _ = stubbed_sfn
    # When handled (any call would raise: the Stubber has no response queued)
    result = start_scale(parse(load_event("cloudwatch/iops_alarm_high_ok.json")), sfn)
    # Then nothing is started
    assert result == {"started": False, "reason": "alarm state is OK, not ALARM"}


@pytest.mark.parametrize("state", ["OK", "INSUFFICIENT_DATA"])
def test_alarm_leaving_alarm_starts_nothing(stubbed_sfn, state: str):
    # Given the alarm moving to a state other than ALARM, and a client that expects no call
    sfn, _ = stubbed_sfn
    # When handled (any call would raise: the Stubber has no response queued)
    result = start_scale(parse(alarm_event(state=state)), sfn)
    # Then nothing is started, and the result says why
    assert result["started"] is False
    assert state in result["reason"]


@pytest.mark.parametrize(
    "alarm_name", ["some-other-alarm", "vsa-demo-backup-failed", "vsa-demo-iops-high-backup-failed"]
)
def test_alarm_that_is_not_an_iops_alarm_is_ignored_not_failed(stubbed_sfn, alarm_name: str):
    # Given an ALARM of an alarm that is not an array's IOPS alarm (e.g. the stack's own
    # <stack>-backup-failed, which starts vsa- when the stack does), and a client expecting no call
    sfn, _ = stubbed_sfn
    # When handled
    result = start_scale(parse(alarm_event(alarm_name=alarm_name)), sfn)
    # Then nothing starts and nothing raises (a raise retries the async invoke into the DLQ)
    assert result == {"started": False, "reason": f"alarm {alarm_name!r} is not a VSA IOPS alarm"}


@pytest.mark.parametrize(
    ("sample", "without", "demand"),
    [
        ("iops_alarm_low.json", None, 148_200.0),  # the newest of its datapoints
        ("iops_alarm_low_missing_data.json", None, None),  # recentDatapoints: [], as CloudWatch sends it
        ("iops_alarm_low_missing_data.json", "reasonData", None),  # an ALARM set without reasonData
    ],
    ids=["datapoints", "missing-data", "no-reason-data"],
)
def test_a_low_alarm_starts_scale_array_with_or_without_a_datapoint(
    stubbed_sfn, sample: str, without: str | None, demand: float | None
):
    # Given the sample low-IOPS alarm of "demo" entering ALARM
    sfn, stubber = stubbed_sfn
    raw = load_event(f"cloudwatch/{sample}")
    if without:
        del raw["detail"]["state"][without]
    name = scale_execution_name("demo", raw["resources"][0], raw["detail"]["state"]["timestamp"])
    expected = {
        "arrayId": "demo",
        "alarmName": "vsa-demo-iops-low",
        "alarmKind": "low",
        "demandIops": demand,
        "stateTimestamp": raw["detail"]["state"]["timestamp"],
        "eventId": raw["id"],
        "rearmSeconds": 60,
    }
    expect_start(stubber, name, {k: v for k, v in expected.items() if v is not None})
    # When handled / Then a low-kind request is started under its own name; without a datapoint
    # too (ScaleArray reads the demand itself): the state change is not refused and dead-lettered
    result = start_scale(parse(raw), sfn)
    assert result["started"] is True
    assert name != SAMPLE_EXECUTION
    stubber.assert_no_pending_responses()


def test_an_alarm_whose_reason_data_is_not_cloudwatchs_is_refused(stubbed_sfn):
    # Given reasonData that CloudWatch never writes / Then the event is invalid, nothing starts
    sfn, _ = stubbed_sfn
    event = load_event("cloudwatch/iops_alarm_high.json")
    event["detail"]["state"]["reasonData"] = '{"recentDatapoints": "many"}'
    with pytest.raises(InvalidEventError):
        start_scale(parse(event), sfn)


def test_repeated_delivery_is_a_duplicate_not_an_error(stubbed_sfn):
    # Given Step Functions already has the execution this state change maps to
    sfn, stubber = stubbed_sfn
    stubber.add_client_error(
        "start_execution",
        service_error_code="ExecutionAlreadyExists",
        service_message=f"Execution Already Exists: '{SAMPLE_EXECUTION}'",
        http_status_code=400,
        expected_params={
            "stateMachineArn": STATE_MACHINE_ARN,
            "name": SAMPLE_EXECUTION,
            "input": AnyScaleRequestFor("demo"),
        },
    )
    # When the same event is handled again
    result = start_scale(parse(load_event("cloudwatch/iops_alarm_high.json")), sfn)
    # Then it reports a duplicate instead of failing (no retry, no dead letter)
    assert result == {"started": False, "reason": "duplicate event", "executionName": SAMPLE_EXECUTION}


def test_other_step_functions_errors_propagate(stubbed_sfn):
    # Given Step Functions refusing the start for another reason
    sfn, stubber = stubbed_sfn
    stubber.add_client_error(
        "start_execution", service_error_code="StateMachineDoesNotExist", http_status_code=400
    )
    # When handled / Then the error reaches Lambda, so the async invoke is retried or dead-lettered
    with pytest.raises(ClientError) as raised:
        start_scale(parse(load_event("cloudwatch/iops_alarm_high.json")), sfn)
    assert raised.value.response["Error"]["Code"] == "StateMachineDoesNotExist"


# ---------------------------------------------------------------- the Lambda handler end to end


def emf_metrics(stdout: str) -> dict[str, float]:
    """Metric values in the CloudWatch EMF documents the handler printed."""
    values: dict[str, float] = {}
    for line in stdout.splitlines():
        try:
            document = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(document, dict) and "_aws" in document:
            for directive in document["_aws"]["CloudWatchMetrics"]:
                assert directive["Namespace"] == "VSA"
                for metric in directive["Metrics"]:
                    value = document[metric["Name"]]
                    values[metric["Name"]] = sum(value) if isinstance(value, list) else value
    return values


def list_executions(state_machine_arn: str) -> list[dict[str, Any]]:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    return list(sfn.list_executions(stateMachineArn=state_machine_arn)["executions"])


def test_handler_starts_scale_array_with_the_workflow_input(
    scale_state_machine: str,
    function_env: None,
    lambda_context: FakeLambdaContext,
    capsys: pytest.CaptureFixture[str],
):
    # Given a state machine in (moto) Step Functions, its ARN in the function's environment
    # When EventBridge delivers the sample alarm event to the handler
    result = lambda_handler(load_event("cloudwatch/iops_alarm_high.json"), lambda_context)
    # Then one execution with the idempotent name is started, and counted
    assert result["started"] is True
    assert result["executionName"] == SAMPLE_EXECUTION
    assert emf_metrics(capsys.readouterr().out) == {"ScaleWorkflowsStarted": 1}
    executions = list_executions(scale_state_machine)
    assert [(e["name"], e["executionArn"]) for e in executions] == [
        (SAMPLE_EXECUTION, result["executionArn"])
    ]
    # And its input is the ScaleRequest task_plan_scale reads
    started = boto3.client("stepfunctions", region_name=REGION).describe_execution(
        executionArn=result["executionArn"]
    )
    request = ScaleRequest.model_validate_json(started["input"])
    assert (request.array_id, request.alarm_kind, request.demand_iops) == ("demo", "high", 612_345.0)
    assert (request.alarm_name, request.event_id) == ("vsa-demo-iops-high", SAMPLE_EVENT_ID)


def test_handler_redelivery_while_running_starts_nothing_new(
    scale_state_machine: str,
    function_env: None,
    lambda_context: FakeLambdaContext,
    monkeypatch: pytest.MonkeyPatch,
):
    # The input holds the scaling lock's lease from the handler's clock (whole seconds). A
    # redelivery within the same second sends the same input: StartExecution answers with the
    # running execution ("same name and input ... returns the same response", StartExecution's
    # idempotency); one a second later sends another input: ExecutionAlreadyExists, a duplicate.
    # Both start nothing new; time.time (the handler's clock; the patch holds process-wide for
    # this test) is pinned so each case is the one tested (unpinned, the first case turned into
    # the second when the two calls straddled a second).
    clock = [1_795_822_531.999]
    monkeypatch.setattr("on_iops_alarm.handler.time.time", lambda: clock[0])
    # Given the event was handled and its execution is still running
    event = load_event("cloudwatch/iops_alarm_high.json")
    first = lambda_handler(event, lambda_context)
    # When EventBridge delivers the very same event again, in the same second
    second = lambda_handler(event, lambda_context)
    # Then Step Functions answers with the running execution (same name and input are idempotent)
    assert second["executionArn"] == first["executionArn"]
    # When it delivers it again a second later
    clock[0] += 0.002
    third = lambda_handler(event, lambda_context)
    # Then it is a duplicate
    assert third == {"started": False, "reason": "duplicate event", "executionName": SAMPLE_EXECUTION}
    # And exactly one execution exists
    assert [e["name"] for e in list_executions(scale_state_machine)] == [SAMPLE_EXECUTION]


def test_handler_redelivery_after_the_execution_finished_is_a_duplicate(
    scale_state_machine: str,
    function_env: None,
    lambda_context: FakeLambdaContext,
    capsys: pytest.CaptureFixture[str],
):
    # Given the event was handled and its execution has finished
    event = load_event("cloudwatch/iops_alarm_high.json")
    first = lambda_handler(event, lambda_context)
    boto3.client("stepfunctions", region_name=REGION).stop_execution(executionArn=first["executionArn"])
    capsys.readouterr()
    # When the same state change is delivered again
    second = lambda_handler(event, lambda_context)
    # Then it is reported and counted as a duplicate, and still one execution exists
    assert second == {"started": False, "reason": "duplicate event", "executionName": SAMPLE_EXECUTION}
    assert emf_metrics(capsys.readouterr().out) == {"DuplicateAlarmEvents": 1}
    assert [e["name"] for e in list_executions(scale_state_machine)] == [SAMPLE_EXECUTION]


def test_handler_same_state_change_in_a_second_event_is_a_duplicate(
    scale_state_machine: str, function_env: None, lambda_context: FakeLambdaContext
):
    # Given the state change was handled from one event
    event = load_event("cloudwatch/iops_alarm_high.json")
    lambda_handler(event, lambda_context)
    # When the same alarm state change arrives in another event (another id, so another input)
    event["id"] = "d5d2d2da-7653-f72c-7fa0-9d5e47a44b03"
    second = lambda_handler(event, lambda_context)
    # Then it maps to the same execution name and starts nothing
    assert second == {"started": False, "reason": "duplicate event", "executionName": SAMPLE_EXECUTION}
    assert len(list_executions(scale_state_machine)) == 1


def test_handler_starts_a_new_execution_for_a_new_state_change(
    scale_state_machine: str, function_env: None, lambda_context: FakeLambdaContext
):
    # Given one alarm entering ALARM twice, at different state-change times
    earlier = alarm_event(state_timestamp="2026-11-02T17:04:40.989+0000")
    later = alarm_event(state_timestamp="2026-11-02T18:30:12.001+0000")
    # When both are handled
    results = [lambda_handler(earlier, lambda_context), lambda_handler(later, lambda_context)]
    # Then each starts its own workflow
    assert [r["started"] for r in results] == [True, True]
    assert len(list_executions(scale_state_machine)) == 2


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_handler_rejects_an_event_that_is_not_an_alarm_state_change(
    scale_state_machine: str, function_env: None, lambda_context: FakeLambdaContext
):
    # Given an event without the alarm detail
    event = load_event("cloudwatch/iops_alarm_high.json")
    del event["detail"]["state"]
    # When handled / Then parsing fails and no workflow starts
    with pytest.raises(ValidationError) as raised:
        lambda_handler(event, lambda_context)
    assert ("detail", "state") in [error["loc"] for error in raised.value.errors()]
    assert list_executions(scale_state_machine) == []


def test_handler_ignores_the_stacks_backup_failed_alarm(
    scale_state_machine: str,
    function_env: None,
    lambda_context: FakeLambdaContext,
    capsys: pytest.CaptureFixture[str],
):
    # Given the sample ALARM of stack vsa-demo's own backup-failed alarm (a single-metric alarm)
    event = load_event("cloudwatch/backup_failed_alarm.json")
    # When it reaches the trigger anyway (an old rule, a replay)
    result = lambda_handler(event, lambda_context)
    # Then it is ignored and counted, and no ScaleArray starts
    assert result == {"started": False, "reason": "alarm 'vsa-demo-backup-failed' is not a VSA IOPS alarm"}
    assert emf_metrics(capsys.readouterr().out) == {"IgnoredAlarmEvents": 1}
    assert list_executions(scale_state_machine) == []
