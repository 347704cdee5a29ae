"""No decision on stale data: the one bound (rules.MAX_DATA_AGE) and what a stale hold says."""

from datetime import UTC, datetime, timedelta

import pytest

from vsa_core.scaling import rules

NOW = datetime(2026, 11, 2, 17, 30, tzinfo=UTC)


def test_the_bound_is_five_minutes():
    assert timedelta(minutes=5) == rules.MAX_DATA_AGE


@pytest.mark.parametrize(
    ("age", "stale"),
    [
        (timedelta(0), False),
        (timedelta(minutes=3), False),  # EBS's usual landing delay
        (timedelta(minutes=5), False),
        (timedelta(minutes=5, seconds=1), True),
        (timedelta(minutes=12), True),
        (None, True),  # no datapoint at all
    ],
)
def test_data_older_than_the_bound_is_stale(age: timedelta | None, stale: bool):
    assert rules.is_stale(age) is stale


def test_age_is_measured_from_the_datapoints_minute():
    assert rules.data_age(NOW - timedelta(minutes=12), NOW) == timedelta(minutes=12)


def test_a_stale_hold_says_how_old_the_newest_datapoint_is():
    assert rules.stale_reason(timedelta(minutes=12, seconds=30), 18).startswith(
        "stale: newest datapoint 12 min old"
    )
    assert rules.stale_reason(None, 18).startswith("stale: no datapoint in the last 18 min")
    assert "at most 5 min old" in rules.stale_reason(None, 18)
