"""Step Functions publishes its execution metrics to CloudWatch (namespace ``AWS/States``,
dimension ``StateMachineArn``), as the Step Functions Developer Guide lists them ("Monitoring
Step Functions metrics using Amazon CloudWatch"): one ``ExecutionsStarted`` per start, one of
``ExecutionsSucceeded`` / ``ExecutionsFailed`` / ``ExecutionsAborted`` / ``ExecutionsTimedOut``
per end (unit ``Count``), and ``ExecutionTime`` from start to close (unit ``Milliseconds``).
The deployment's workflow-failed alarms read ``ExecutionsFailed`` and ``ExecutionsTimedOut``;
without them those alarms could never fire. Stock LocalStack publishes none."""

import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

ROLE = "arn:aws:iam::000000000000:role/vsa-sfn-metrics-test"
STATISTICS = {"Sum", "SampleCount", "Maximum"}
COUNTERS = ("ExecutionsSucceeded", "ExecutionsFailed", "ExecutionsAborted", "ExecutionsTimedOut")
# A state that keeps the execution running until it is stopped or times out
LONG_WAIT: dict[str, Any] = {
    "StartAt": "Wait",
    "States": {"Wait": {"Type": "Wait", "Seconds": 120, "End": True}},
}
OUTCOMES: dict[str, tuple[str, dict[str, Any]]] = {
    "ExecutionsSucceeded": (
        "SUCCEEDED",
        {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}},
    ),
    "ExecutionsFailed": (
        "FAILED",
        {"StartAt": "Boom", "States": {"Boom": {"Type": "Fail", "Error": "Boom", "Cause": "on purpose"}}},
    ),
    "ExecutionsAborted": ("ABORTED", LONG_WAIT),
    "ExecutionsTimedOut": ("TIMED_OUT", {**LONG_WAIT, "TimeoutSeconds": 1}),
}


@contextmanager
def state_machine(aws: Callable[[str], Any], definition: dict[str, Any]) -> Iterator[str]:
    sfn = aws("stepfunctions")
    arn = sfn.create_state_machine(
        name=f"vsa-metrics-{uuid.uuid4().hex[:8]}", definition=json.dumps(definition), roleArn=ROLE
    )["stateMachineArn"]
    try:
        yield str(arn)
    finally:
        sfn.delete_state_machine(stateMachineArn=arn)


def finished(aws: Callable[[str], Any], execution_arn: str, timeout: float = 30) -> dict[str, Any]:
    sfn = aws("stepfunctions")
    deadline = time.monotonic() + timeout
    while (described := sfn.describe_execution(executionArn=execution_arn))["status"] == "RUNNING":
        assert time.monotonic() < deadline, f"{execution_arn} still running after {timeout} s"
        time.sleep(0.2)
    return dict(described)


def statistics(aws: Callable[[str], Any], machine: str, metric: str) -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    return list(
        aws("cloudwatch").get_metric_statistics(
            Namespace="AWS/States",
            MetricName=metric,
            Dimensions=[{"Name": "StateMachineArn", "Value": machine}],
            StartTime=now - timedelta(minutes=10),
            EndTime=now + timedelta(minutes=1),
            Period=3600,
            Statistics=sorted(STATISTICS),
        )["Datapoints"]
    )


def published(aws: Callable[[str], Any], machine: str, metric: str, timeout: float = 15) -> dict[str, Any]:
    """The one aggregated datapoint of ``metric`` for the state machine, once it has arrived
    (Step Functions publishes after the status change, best effort). LocalStack reads each
    statistic in a query of its own, so a datum arriving between them shows in only some: the
    datapoint is taken once it has all three."""
    deadline = time.monotonic() + timeout
    while not (points := statistics(aws, machine, metric)) or not points[0].keys() >= STATISTICS:
        assert time.monotonic() < deadline, f"no {metric} for {machine} within {timeout} s: {points}"
        time.sleep(0.2)
    [point] = points
    return point


def run_to(aws: Callable[[str], Any], machine: str, counter: str) -> dict[str, Any]:
    """Start one execution and bring it to the end ``counter`` counts (StopExecution for an abort)."""
    sfn = aws("stepfunctions")
    execution = sfn.start_execution(stateMachineArn=machine, input="{}")["executionArn"]
    if counter == "ExecutionsAborted":
        sfn.stop_execution(executionArn=execution, error="Test", cause="stopped on purpose")
    return finished(aws, execution)


@pytest.mark.parametrize("counter", sorted(OUTCOMES))
def test_each_execution_end_publishes_its_counter_and_its_time(aws, counter: str) -> None:
    status, definition = OUTCOMES[counter]
    with state_machine(aws, definition) as machine:
        # Given an execution that ends as <status>
        execution = run_to(aws, machine, counter)
        assert execution["status"] == status, execution

        # Then its ExecutionTime is published in milliseconds, from its start to its close
        took = published(aws, machine, "ExecutionTime")
        assert took["Unit"] == "Milliseconds"
        assert took["SampleCount"] == 1
        elapsed_ms = (execution["stopDate"] - execution["startDate"]).total_seconds() * 1000
        assert took["Maximum"] == pytest.approx(elapsed_ms, abs=2), (took, elapsed_ms)
        if status == "TIMED_OUT":
            assert took["Maximum"] >= 1000  # TimeoutSeconds: 1
        # ... one start and one end of its own kind, as counts
        for metric in ("ExecutionsStarted", counter):
            point = published(aws, machine, metric)
            assert (point["Sum"], point["SampleCount"], point["Unit"]) == (1, 1, "Count"), (metric, point)
        # ... and no other end
        for other in set(COUNTERS) - {counter}:
            assert statistics(aws, machine, other) == [], other


def test_the_counts_add_up_per_state_machine_and_read_through_get_metric_data(aws) -> None:
    # Given two state machines, one whose executions fail and one whose executions succeed
    fails, succeeds = OUTCOMES["ExecutionsFailed"][1], OUTCOMES["ExecutionsSucceeded"][1]
    with state_machine(aws, fails) as failing, state_machine(aws, succeeds) as succeeding:
        # When the failing one runs three times and the succeeding one once
        for _ in range(3):
            assert run_to(aws, failing, "ExecutionsFailed")["status"] == "FAILED"
        assert run_to(aws, succeeding, "ExecutionsSucceeded")["status"] == "SUCCEEDED"
        published(aws, succeeding, "ExecutionTime")
        deadline = time.monotonic() + 15
        while published(aws, failing, "ExecutionTime")["SampleCount"] < 3:
            assert time.monotonic() < deadline, "three failed executions' times never published"
            time.sleep(0.2)

        # Then GetMetricData (the alarms' own query shape) sums each state machine's own series
        def query(query_id: str, machine: str, metric: str) -> dict[str, Any]:
            dimensions = [{"Name": "StateMachineArn", "Value": machine}]
            return {
                "Id": query_id,
                "MetricStat": {
                    "Metric": {"Namespace": "AWS/States", "MetricName": metric, "Dimensions": dimensions},
                    "Period": 3600,
                    "Stat": "Sum",
                },
            }

        now = datetime.now(UTC)
        results = aws("cloudwatch").get_metric_data(
            MetricDataQueries=[
                query("failed", failing, "ExecutionsFailed"),
                query("started", failing, "ExecutionsStarted"),
                query("succeeded", succeeding, "ExecutionsSucceeded"),
                query("otherfailed", succeeding, "ExecutionsFailed"),
            ],
            StartTime=now - timedelta(minutes=10),
            EndTime=now + timedelta(minutes=1),
        )["MetricDataResults"]
        sums = {r["Id"]: sum(r["Values"]) for r in results}
        assert sums == {"failed": 3, "started": 3, "succeeded": 1, "otherfailed": 0}, results
