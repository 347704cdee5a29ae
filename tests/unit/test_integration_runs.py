"""The integration tests' wait for a run (tests/integration/runs.py): it waits while the run
moves, however long, and fails once it stops moving. Step Functions stubbed (botocore Stubber);
the clock is the test's own."""

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from tests.integration import runs

ARN = "arn:aws:states:us-east-1:000000000000:execution:vsa-ReconcileArray:run-1"
MACHINE = "arn:aws:states:us-east-1:000000000000:stateMachine:vsa-ReconcileArray"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(runs.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(runs.time, "sleep", clock.sleep)
    return clock


def _described(status: str) -> dict[str, Any]:
    return {
        "executionArn": ARN,
        "stateMachineArn": MACHINE,
        "status": status,
        "startDate": datetime(2026, 12, 2, tzinfo=UTC),
    }


def _history(event_id: int) -> dict[str, Any]:
    event = {"timestamp": datetime(2026, 12, 2, tzinfo=UTC), "type": "TaskStateEntered", "id": event_id}
    return {"events": [event]}


def _running(stub: Stubber, event_id: int) -> None:
    stub.add_response("describe_execution", _described("RUNNING"), {"executionArn": ARN})
    stub.add_response(
        "get_execution_history",
        _history(event_id),
        {"executionArn": ARN, "reverseOrder": True, "maxResults": 1},
    )


def test_a_run_that_keeps_moving_is_waited_for_past_any_fixed_count(clock: Clock) -> None:
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    with Stubber(sfn) as stub:
        stub.add_client_error("describe_execution", "ExecutionDoesNotExist")
        # a new event every 200 polls: far longer in all than the old 120-poll waiter allowed
        for poll in range(1, 1001):
            _running(stub, poll // 200)
        stub.add_response("describe_execution", _described("FAILED"), {"executionArn": ARN})
        run = runs.until_final(ARN, sfn)
        stub.assert_no_pending_responses()
    assert run["status"] == "FAILED"
    assert clock.now > 1000


def test_a_run_with_no_new_event_for_the_stall_limit_fails_naming_its_last(clock: Clock) -> None:
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    with Stubber(sfn) as stub:
        for _ in range(int(runs.STALL) + 1):
            _running(stub, 7)
        said = re.escape("no new event for 300 s (the last: TaskStateEntered)")
        with pytest.raises(AssertionError, match=said):
            runs.until_final(ARN, sfn)
    assert clock.now == pytest.approx(runs.STALL)


def test_a_run_that_never_starts_fails_after_the_start_limit(clock: Clock) -> None:
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    with Stubber(sfn) as stub:
        for _ in range(int(runs.START) + 1):
            stub.add_client_error("describe_execution", "ExecutionDoesNotExist")
        with pytest.raises(AssertionError, match="not started 300 s"):
            runs.until_final(ARN, sfn)


def test_succeeded_says_the_error_and_cause_of_a_run_that_failed(clock: Clock) -> None:
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    failed = _described("FAILED") | {"error": "States.Timeout", "cause": "the task timed out"}
    with Stubber(sfn) as stub:
        stub.add_response("describe_execution", failed, {"executionArn": ARN})
        with pytest.raises(AssertionError, match="the task timed out"):
            runs.succeeded(ARN, sfn)


def _limits(node: object, in_state: bool = False) -> list[tuple[str, float]]:
    """Every state's fixed TimeoutSeconds, HeartbeatSeconds and Wait Seconds, at any depth (Map
    and Parallel branches included); not the machine's own TimeoutSeconds."""
    found: list[tuple[str, float]] = []
    if isinstance(node, dict):
        if in_state:
            found += [(k, float(node[k])) for k in ("TimeoutSeconds", "HeartbeatSeconds") if k in node]
            if node.get("Type") == "Wait" and "Seconds" in node:
                found.append(("Wait", float(node["Seconds"])))
        for key, value in node.items():
            if key == "States" and isinstance(value, dict):
                for state in value.values():
                    found += _limits(state, in_state=True)
            elif isinstance(value, (dict, list)):
                found += _limits(value)
    elif isinstance(node, list):
        for item in node:
            found += _limits(item)
    return found


def test_the_stall_limit_outlasts_every_state_s_own_timeout_and_wait() -> None:
    # A run that is working adds a history event at least once per state: the wait's stall limit
    # must be longer than any one state may take, or it fails runs that are only slow
    machines = sorted((Path(__file__).resolve().parents[2] / "statemachines").glob("*.asl.json"))
    limits = [(m.name, kind, s) for m in machines for kind, s in _limits(json.loads(m.read_text()))]
    assert len(machines) >= 8
    assert limits
    assert [limit for limit in limits if limit[2] >= runs.STALL] == []


GROUP = "/aws/lambda/vsa-OnControllerEvent"


def _page(messages: list[str], token: str | None = None) -> dict[str, Any]:
    page: dict[str, Any] = {
        "events": [{"logStreamName": "s", "timestamp": 1, "message": m, "ingestionTime": 1} for m in messages]
    }
    if token:
        page["nextToken"] = token
    return page


def test_a_log_line_is_waited_for_while_the_group_grows_and_found_on_any_page(clock: Clock) -> None:
    logs = boto3.client("logs", region_name="us-east-1")
    with Stubber(logs) as stub:
        stub.add_client_error("filter_log_events", "ResourceNotFoundException")
        # the group grows by a line every 100 polls, far past any fixed count, before the line
        for poll in range(1, 601):
            growing = _page(["START"] * (1 + poll // 100))
            stub.add_response("filter_log_events", growing, {"logGroupName": GROUP})
        stub.add_response("filter_log_events", _page(["START"] * 7, "p2"), {"logGroupName": GROUP})
        line = '{"message": "duplicate controller event"}'
        stub.add_response("filter_log_events", _page([line]), {"logGroupName": GROUP, "nextToken": "p2"})
        lines = runs.log_lines(GROUP, "duplicate controller event", logs)
        stub.assert_no_pending_responses()
    assert lines == [line]
    assert clock.now > runs.STALL


def test_a_log_line_fails_once_the_group_has_been_still_for_the_stall_limit(clock: Clock) -> None:
    logs = boto3.client("logs", region_name="us-east-1")
    with Stubber(logs) as stub:
        for _ in range(int(runs.STALL / 2) + 1):
            stub.add_response("filter_log_events", _page(["START", "END"]), {"logGroupName": GROUP})
        with pytest.raises(AssertionError, match="nothing new for 300 s"):
            runs.log_lines(GROUP, "duplicate controller event", logs)
    assert clock.now == pytest.approx(runs.STALL)
