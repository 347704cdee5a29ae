"""Waiting for a Step Functions execution to end, or for a function's log line: on progress, not
on a count of polls.

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

A log line (``log_lines``) is awaited the same way: while the function's log group grows (on a
busy machine EventBridge's deliveries to one function queue behind each other, minutes behind
the test that put its event), failing once it has had no new event for ``STALL`` seconds.
"""

import time
from typing import TYPE_CHECKING, Any

import boto3

if TYPE_CHECKING:
    from mypy_boto3_logs import CloudWatchLogsClient
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


class Progress:
    """A wait's bound on progress: ``check`` fails once the ``marker`` it is given has not changed
    for ``STALL`` seconds, or ``LIMIT`` seconds after the wait began."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.began = self.moved = time.monotonic()
        self.marker: object = None

    def check(self, marker: object, so_far: object = None) -> None:
        now = time.monotonic()
        if marker != self.marker:
            self.marker, self.moved = marker, now
        assert now - self.moved < STALL, f"{self.what}: nothing new for {STALL:.0f} s (so far: {so_far})"
        assert now - self.began < LIMIT, f"{self.what}: still waiting after {LIMIT:.0f} s (so far: {so_far})"


def log_events(group: str, logs: "CloudWatchLogsClient | None" = None) -> list[dict[str, Any]]:
    """Every event of the log group, all pages read (none while the group does not exist)."""
    logs = logs or boto3.client("logs")
    events: list[dict[str, Any]] = []
    try:
        for page in logs.get_paginator("filter_log_events").paginate(logGroupName=group):
            events += [dict(event) for event in page["events"]]
    except logs.exceptions.ResourceNotFoundException:
        return []
    return events


def log_lines(
    group: str, term: str, logs: "CloudWatchLogsClient | None" = None, poll: float = 2.0
) -> list[str]:
    """The messages of ``group`` that contain ``term``, once at least one has arrived; waiting
    while the group grows (``Progress`` on its count of events). The match is made here, not by
    ``filterPattern``: the local cloud's CloudWatch Logs ignores filter patterns."""
    progress = Progress(f"no log line with {term!r} in {group}")
    while True:
        events = log_events(group, logs)
        lines = [event["message"] for event in events if term in event["message"]]
        if lines:
            return lines
        progress.check(len(events), f"{len(events)} event(s)")
        time.sleep(poll)
