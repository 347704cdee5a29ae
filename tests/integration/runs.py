"""Waiting for a Step Functions execution to end: on its progress, not on a count of polls.

On the local cloud a run's length follows the machine's load (its Lambdas share two cores with
the rest of the test command), so a fixed number of polls failed runs that were still moving on
a busy machine, and passed them on a quiet one. These waits fail only when a run has stopped
moving, which no load explains:

* it has not started ``START`` seconds after the wait began (runs started by an event are
  started asynchronously: EventBridge, then a Lambda, then StartExecution);
* its history has had no new event for ``STALL`` seconds: longer than any Task's
  ``TimeoutSeconds`` or fixed ``Wait`` in ``statemachines/`` (tests/unit/test_integration_runs.py
  checks it), so a run that is working adds one within it (a ``Wait`` by ``SecondsPath`` is
  not bounded here: a test that meets a long one says so);
* it has been running ``LIMIT`` seconds (a loop that keeps adding events and never ends).
"""

import time
from typing import TYPE_CHECKING, Any

import boto3

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient

START = 300.0
STALL = 300.0
LIMIT = 2400.0


def until_final(arn: str, sfn: "SFNClient | None" = None, poll: float = 1.0) -> dict[str, Any]:
    """``DescribeExecution`` of the run ``arn`` once its status is final (any final status)."""
    sfn = sfn or boto3.client("stepfunctions")
    began = time.monotonic()
    newest: int | None = None
    moved = began
    while True:
        try:
            run = sfn.describe_execution(executionArn=arn)
        except sfn.exceptions.ExecutionDoesNotExist:
            assert time.monotonic() - began < START, f"{arn}: not started {START:.0f} s after the wait began"
            time.sleep(poll)
            continue
        if run["status"] != "RUNNING":
            return dict(run)
        events = sfn.get_execution_history(executionArn=arn, reverseOrder=True, maxResults=1)["events"]
        now = time.monotonic()
        if events and events[0]["id"] != newest:
            newest, moved = events[0]["id"], now
        last = events[0]["type"] if events else "none"
        assert now - moved < STALL, f"{arn}: no new event for {STALL:.0f} s (the last: {last})"
        assert now - began < LIMIT, f"{arn}: still running after {LIMIT:.0f} s (the last event: {last})"
        time.sleep(poll)


def succeeded(arn: str, sfn: "SFNClient | None" = None) -> dict[str, Any]:
    """As ``until_final``; the run must have succeeded (its error and cause said if not)."""
    run = until_final(arn, sfn)
    assert run["status"] == "SUCCEEDED", (arn, run["status"], run.get("error"), run.get("cause"))
    return run
