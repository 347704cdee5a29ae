"""Derived names: IOPS alarm names (both ways) and idempotent execution names."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vsa_core.errors import InvalidEventError
from vsa_core.naming import ARRAY_ID_PATTERN, iops_alarm_name, parse_iops_alarm_name, scale_execution_name

array_ids = st.from_regex(ARRAY_ID_PATTERN, fullmatch=True)
kinds = st.sampled_from(["high", "low"])
STEP_FUNCTIONS_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")
ALARM_ARN = "arn:aws:cloudwatch:us-east-1:123456789012:alarm:vsa-demo-iops-high"


def test_alarm_names_follow_the_documented_shape():
    assert iops_alarm_name("demo", "high") == "vsa-demo-iops-high"
    assert iops_alarm_name("demo", "low") == "vsa-demo-iops-low"


@given(array_id=array_ids, kind=kinds)
def test_alarm_name_round_trips(array_id: str, kind: str):
    # Given any valid array id and alarm kind
    # When the alarm name is built and parsed back
    parsed = parse_iops_alarm_name(iops_alarm_name(array_id, kind))  # type: ignore[arg-type]
    # Then the same array and kind come out (even for ids like "x-iops-high")
    assert parsed == (array_id, kind)


def test_array_id_that_looks_like_an_alarm_suffix_still_round_trips():
    # Given an array id that itself contains "-iops-high"
    name = iops_alarm_name("ab-iops-high", "low")
    # When parsed / Then only the final suffix is the kind
    assert parse_iops_alarm_name(name) == ("ab-iops-high", "low")


@pytest.mark.parametrize(
    "alarm_name",
    [
        "",
        "my-alarm",
        "TargetTracking-table/orders-AlarmHigh-1a2b3c",
        "vsa-demo-iops-medium",
        "vsa-demo-iops-high-extra",
        "vsa-demo-latency-high",
        "VSA-demo-iops-high",
        "vsa-Demo-iops-high",
        "vsa-ab-iops-high",  # "ab" is not a valid array id (3 characters at least)
        "vsa--demo-iops-high",
        "vsa-demo-iops-high ",
        " vsa-demo-iops-high",
    ],
)
def test_non_vsa_alarm_names_are_rejected(alarm_name: str):
    # Given an alarm name that is not vsa-<arrayId>-iops-high|low
    # When parsed / Then it is an invalid event, with the expected shape in the message
    with pytest.raises(InvalidEventError, match=r"is not one of this deployment's IOPS alarms"):
        parse_iops_alarm_name(alarm_name)


def test_alarm_name_with_a_trailing_newline_is_rejected():
    with pytest.raises(InvalidEventError):
        parse_iops_alarm_name("vsa-demo-iops-high\n")


def test_execution_name_is_deterministic():
    # Given one alarm state change / When its execution name is derived twice
    first = scale_execution_name("demo", ALARM_ARN, "2026-11-02T17:04:40.989+0000")
    second = scale_execution_name("demo", ALARM_ARN, "2026-11-02T17:04:40.989+0000")
    # Then both deliveries map to one name, and it says which array it scales
    assert first == second
    assert first.startswith("scale-demo-")


@given(array_id=array_ids, timestamps=st.lists(st.text(), min_size=2, max_size=2, unique=True))
def test_different_state_changes_get_different_names(array_id: str, timestamps: list[str]):
    # Given two different state-change timestamps of one alarm
    # When their execution names are derived / Then they differ (a new change starts a new workflow)
    first, second = (scale_execution_name(array_id, ALARM_ARN, ts) for ts in timestamps)
    assert first != second


@given(array_id=array_ids, arns=st.lists(st.text(min_size=1), min_size=2, max_size=2, unique=True))
def test_different_alarms_at_the_same_time_get_different_names(array_id: str, arns: list[str]):
    first, second = (scale_execution_name(array_id, arn, "2026-11-02T17:04:40.989+0000") for arn in arns)
    assert first != second


@given(array_id=array_ids, alarm_arn=st.text(), state_timestamp=st.text())
def test_execution_name_is_a_valid_step_functions_name(array_id: str, alarm_arn: str, state_timestamp: str):
    # Given any valid array id and any alarm ARN and timestamp text
    name = scale_execution_name(array_id, alarm_arn, state_timestamp)
    # Then the name is at most 80 characters of [A-Za-z0-9-_]
    assert STEP_FUNCTIONS_NAME.fullmatch(name), name
    assert len(name) <= 80
