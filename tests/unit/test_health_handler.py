"""What the health-check handler takes: EventBridge's scheduled event (every array) or an
operator's ``{"arrayIds": [...]}`` (those only); anything else names what to fix."""

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from task_health_check.handler import CheckRequest

SCHEDULED = Path(__file__).resolve().parents[2] / "events" / "eventbridge" / "scheduled_event.json"


def test_the_schedules_event_checks_every_array() -> None:
    event = json.loads(SCHEDULED.read_text())
    assert event["detail-type"] == "Scheduled Event"
    assert CheckRequest.model_validate(event).array_ids is None


def test_named_arrays_are_checked_alone() -> None:
    assert CheckRequest.model_validate({"arrayIds": ["demo", "it-0a1b2c3d"]}).array_ids == [
        "demo",
        "it-0a1b2c3d",
    ]


@pytest.mark.parametrize(
    "ids",
    [[], ["Bad_Id"], ["demo; rm -rf /"], ["x" * 40], "demo", [f"a{i:03d}" for i in range(101)]],
)
def test_bad_array_ids_are_refused(ids: object) -> None:
    with pytest.raises(ValidationError):
        CheckRequest.model_validate({"arrayIds": ids})
