"""Event models: the AWS sample events parse, and the demand is read from the alarm's reasonData."""

import json
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import BaseModel, ValidationError
from task_backup.handler import Snapshot as BackupSnapshotRequest

from task_read_demand.handler import ReadDemandRequest
from tests.unit.conftest import EVENTS, alarm_event, load_event
from vsa_core.errors import InvalidEventError
from vsa_core.scaling.alarm_event import AlarmState, AlarmStateChangeEvent
from vsa_core.scaling.events import ScaleRequest

CLOUDWATCH_EVENTS = sorted((EVENTS / "cloudwatch").glob("*.json"))


def state(**fields: Any) -> AlarmState:
    return AlarmState.model_validate(
        {"value": "ALARM", "timestamp": "2026-11-02T17:04:40.989+0000", **fields}
    )


def test_there_are_cloudwatch_sample_events():
    assert CLOUDWATCH_EVENTS, f"no sample events in {EVENTS / 'cloudwatch'}"


@pytest.mark.parametrize("path", CLOUDWATCH_EVENTS, ids=[p.name for p in CLOUDWATCH_EVENTS])
def test_every_cloudwatch_sample_event_parses(path: Path):
    # Given a sample event exactly as AWS delivers it
    raw = json.loads(path.read_text())
    # When parsed with the trigger's model
    event = AlarmStateChangeEvent.model_validate(raw)
    # Then the envelope and the alarm detail are read
    assert event.source == "aws.cloudwatch"
    assert event.detail_type == "CloudWatch Alarm State Change"
    assert event.id == raw["id"]
    assert event.resources == raw["resources"]
    assert event.detail.alarm_name == raw["detail"]["alarmName"]
    assert event.detail.state.value == raw["detail"]["state"]["value"]
    assert event.detail.state.timestamp == raw["detail"]["state"]["timestamp"]


def test_latest_datapoint_is_the_last_recent_datapoint():
    # Given the sample high-IOPS alarm (recentDatapoints oldest first: 571,000, 598,000, 612,345)
    event = AlarmStateChangeEvent.model_validate(load_event("cloudwatch/iops_alarm_high.json"))
    # When the demand is read / Then it is the newest datapoint
    assert event.detail.state.latest_datapoint() == 612_345.0
    # And the previous state's demand is read the same way
    assert event.detail.previous_state is not None
    assert event.detail.previous_state.latest_datapoint() == 301_234.5


@pytest.mark.parametrize(
    ("sample", "newest"),
    [
        ("cloudwatch/iops_alarm_high.json", 612_345.0),
        ("cloudwatch/iops_alarm_low.json", 148_200.0),
        ("cloudwatch/iops_alarm_high_ok.json", 351_000.0),
    ],
)
def test_latest_datapoint_of_each_sample(sample: str, newest: float):
    # Given a sample alarm event / When its demand is read / Then it is the newest datapoint
    event = AlarmStateChangeEvent.model_validate(load_event(sample))
    assert event.detail.state.latest_datapoint() == newest


def test_latest_datapoint_of_integer_datapoints_is_a_float():
    event = AlarmStateChangeEvent.model_validate(alarm_event(datapoints=[1, 2, 364_001]))
    demand = event.detail.state.latest_datapoint()
    assert demand == 364_001.0
    assert isinstance(demand, float)


def test_missing_reason_data_is_no_datapoint():
    # Given an ALARM state without reasonData (SetAlarmState may send none)
    raw = load_event("cloudwatch/iops_alarm_high.json")
    del raw["detail"]["state"]["reasonData"]
    event = AlarmStateChangeEvent.model_validate(raw)
    # When the demand is read / Then there is none (ScaleArray reads the demand itself)
    assert event.detail.state.latest_datapoint() is None


def test_an_alarm_on_missing_data_has_no_datapoint():
    # Given the low alarm going to ALARM on missing data, as CloudWatch sends it
    event = AlarmStateChangeEvent.model_validate(load_event("cloudwatch/iops_alarm_low_missing_data.json"))
    assert event.detail.state.value == "ALARM"
    assert event.detail.state.latest_datapoint() is None


@pytest.mark.parametrize(
    "reason_data",
    ["", "{}", '{"recentDatapoints": []}', '{"recentDatapoints": null}'],
    ids=["empty", "no-datapoints-key", "empty-datapoints", "null-datapoints"],
)
def test_reason_data_without_datapoints_is_no_datapoint(reason_data: str):
    assert state(reasonData=reason_data).latest_datapoint() is None


@pytest.mark.parametrize(
    ("reason_data", "message"),
    [("not json", "not JSON"), ('{"recentDatapoints": [1.0', "not JSON")],
    ids=["text", "truncated"],
)
def test_garbled_reason_data_is_an_invalid_event(reason_data: str, message: str):
    with pytest.raises(InvalidEventError, match=message):
        state(reasonData=reason_data).latest_datapoint()


@pytest.mark.parametrize(
    "reason_data",
    [
        "[1, 2]",
        "null",
        '{"recentDatapoints": {"a": 1}}',
        '{"recentDatapoints": [null]}',
        '{"recentDatapoints": ["lots"]}',
        '{"recentDatapoints": "12"}',
    ],
    ids=["list", "null", "object-datapoints", "null-datapoint", "text-datapoint", "string-datapoints"],
)
def test_json_of_the_wrong_shape_is_an_invalid_event(reason_data: str):
    with pytest.raises(InvalidEventError):
        state(reasonData=reason_data).latest_datapoint()


def test_unknown_alarm_state_is_rejected():
    raw = load_event("cloudwatch/iops_alarm_high.json")
    raw["detail"]["state"]["value"] = "PENDING"
    with pytest.raises(ValidationError):
        AlarmStateChangeEvent.model_validate(raw)


def test_event_without_detail_is_rejected():
    raw = load_event("cloudwatch/iops_alarm_high.json")
    del raw["detail"]
    with pytest.raises(ValidationError):
        AlarmStateChangeEvent.model_validate(raw)


# ---------------------------------------------------------------- ScaleRequest (workflow input)

SCALE_REQUEST = {
    "arrayId": "demo",
    "alarmName": "vsa-demo-iops-high",
    "alarmKind": "high",
    "demandIops": 612345.0,
    "stateTimestamp": "2026-11-02T17:04:40.989+0000",
    "eventId": "c4c1c1c9-6542-e61b-6ef0-8c4d36933a92",
    "lockNow": 1793725480,
    "lockUntil": 1793726080,
    "rearmSeconds": 60,
}


STEPFUNCTIONS_EVENTS = sorted((EVENTS / "stepfunctions").glob("*.json"))
# each task's input model, by sample file (a new sample without a model fails here)
TASK_INPUTS: dict[str, type[BaseModel]] = {
    "task_plan_scale.json": ScaleRequest,
    "task_read_demand.json": ReadDemandRequest,
    "task_backup_snapshot.json": BackupSnapshotRequest,
}


@pytest.mark.parametrize("path", STEPFUNCTIONS_EVENTS, ids=[p.name for p in STEPFUNCTIONS_EVENTS])
def test_every_workflow_sample_input_parses(path: Path):
    # Given a sample workflow task input / When parsed by its task's model / Then nothing is lost
    raw = json.loads(path.read_text())
    request = TASK_INPUTS[path.name].model_validate(raw)
    assert json.loads(request.model_dump_json(by_alias=True, exclude_none=True)) == raw


def test_the_scheduled_event_sample_is_an_eventbridge_scheduled_event():
    sample = EVENTS / "eventbridge" / "scheduled_event.json"
    event = EventBridgeModel.model_validate_json(sample.read_text())
    assert (event.source, event.detail_type, event.detail) == ("aws.events", "Scheduled Event", {})


def test_scale_request_round_trips_through_its_json_by_alias():
    # Given the workflow input as on_iops_alarm writes it
    request = ScaleRequest.model_validate(SCALE_REQUEST)
    # When dumped by alias / Then it is the same camelCase document task_plan_scale reads
    assert json.loads(request.model_dump_json(by_alias=True, exclude_none=True)) == SCALE_REQUEST


@pytest.mark.parametrize(
    ("field", "value"),
    [("demandIops", -1.0), ("demandIops", float("nan")), ("alarmKind", "medium")],
)
def test_scale_request_rejects_bad_values(field: str, value: Any):
    with pytest.raises(ValidationError) as raised:
        ScaleRequest.model_validate({**SCALE_REQUEST, field: value})
    assert field in {str(part) for detail in raised.value.errors() for part in detail["loc"]}


def test_scale_request_rejects_infinite_demand():
    with pytest.raises(ValidationError):
        ScaleRequest.model_validate({**SCALE_REQUEST, "demandIops": float("inf")})
