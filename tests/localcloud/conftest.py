"""Local-cloud fidelity tier: each test pins one AWS behaviour the product relies on.

Every test here is written from AWS's documented semantics and runs against the project's local
cloud (``tools/localcloud.sh``); each would fail on stock LocalStack. Helpers:

* ``aws(service)`` a boto3 client for the local cloud;
* ``event_capture`` an EventBridge rule on the default bus delivering to an SQS queue, to
  assert on the events services emit;
* ``control(area, action, **body)`` the local cloud's control endpoint (``/_localcloud``), for
  what AWS has no API for (register a managed node, fail a snapshot).
"""

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import urllib3

from tests.infra.test_registry_table import create_table_arguments

REGION = "us-east-1"


@pytest.fixture(scope="session")
def endpoint() -> str:
    url = os.environ.get("AWS_ENDPOINT_URL", "")
    if not url.startswith("http://127.0.0.1"):
        pytest.fail(
            "local-cloud tests run against the local cloud: use `make test` (or start it with "
            "`tools/localcloud.sh start` and export AWS_ENDPOINT_URL=http://127.0.0.1:4566)"
        )
    return url


@pytest.fixture(scope="session")
def aws(endpoint: str) -> Callable[[str], Any]:
    clients: dict[str, Any] = {}

    def get(service: str) -> Any:
        if service not in clients:
            clients[service] = boto3.client(service, region_name=REGION, endpoint_url=endpoint)
        return clients[service]

    return get


@pytest.fixture(scope="session")
def control(endpoint: str) -> Callable[..., dict[str, Any]]:
    http = urllib3.PoolManager()

    def call(area: str, action: str, **body: Any) -> dict[str, Any]:
        reply = http.request(
            "POST",
            f"{endpoint}/_localcloud/{area}/{action}",
            body=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        payload: dict[str, Any] = json.loads(reply.data or b"{}")
        if reply.status != 200:
            raise AssertionError(f"control {area}/{action} -> {reply.status}: {payload}")
        return payload

    return call


def run_executions(
    aws: Callable[[str], Any],
    definition: dict[str, Any],
    role_arn: str,
    inputs: list[Any],
    timeout: float = 30,
) -> list[dict[str, Any]]:
    """Create a state machine, start one execution per input (all before waiting on any) and
    answer the finished executions (DescribeExecution), in order; the state machine is deleted
    again."""
    sfn = aws("stepfunctions")
    arn = sfn.create_state_machine(
        name=f"vsa-t-{uuid.uuid4().hex[:8]}", definition=json.dumps(definition), roleArn=role_arn
    )["stateMachineArn"]
    try:
        starts = [sfn.start_execution(stateMachineArn=arn, input=json.dumps(given)) for given in inputs]
        deadline = time.monotonic() + timeout
        finished = []
        for start in starts:
            execution = start["executionArn"]
            while (described := sfn.describe_execution(executionArn=execution))["status"] == "RUNNING":
                assert time.monotonic() < deadline, f"execution still running after {timeout} s"
                time.sleep(0.2)
            finished.append(described)
        return finished
    finally:
        sfn.delete_state_machine(stateMachineArn=arn)


def run_execution(
    aws: Callable[[str], Any], definition: dict[str, Any], role_arn: str, timeout: float = 30
) -> dict[str, Any]:
    """Create a state machine, run it once with ``{}`` and answer the finished execution
    (DescribeExecution); the state machine is deleted again."""
    return run_executions(aws, definition, role_arn, [{}], timeout)[0]


class EventCapture:
    """Events matching a pattern, delivered by EventBridge (default bus) to an SQS queue."""

    def __init__(self, aws: Callable[[str], Any], pattern: dict[str, Any]) -> None:
        self._sqs, self._events = aws("sqs"), aws("events")
        name = f"capture-{uuid.uuid4().hex[:8]}"
        self._rule = name
        self._queue_url = self._sqs.create_queue(QueueName=name)["QueueUrl"]
        arn = self._sqs.get_queue_attributes(QueueUrl=self._queue_url, AttributeNames=["QueueArn"])
        self._events.put_rule(Name=name, EventPattern=json.dumps(pattern), State="ENABLED")
        self._events.put_targets(Rule=name, Targets=[{"Id": "q", "Arn": arn["Attributes"]["QueueArn"]}])
        self.received: list[dict[str, Any]] = []

    def _drain(self, wait: int) -> None:
        reply = self._sqs.receive_message(
            QueueUrl=self._queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=wait
        )
        for message in reply.get("Messages", []):
            self.received.append(json.loads(message["Body"]))
            self._sqs.delete_message(QueueUrl=self._queue_url, ReceiptHandle=message["ReceiptHandle"])

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], *, count: int = 1, timeout: float = 30
    ) -> list[dict[str, Any]]:
        """The first ``count`` received events matching ``predicate``; fails after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            matching = [e for e in self.received if predicate(e)]
            if len(matching) >= count:
                return matching[:count]
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(matching)} of {count} expected events within {timeout} s; received: "
                    + json.dumps(self.received, indent=1, default=str)[:4000]
                )
            self._drain(wait=1)

    def settle(self, seconds: float = 2) -> list[dict[str, Any]]:
        """Everything received until ``seconds`` pass without a new event."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            before = len(self.received)
            self._drain(wait=1)
            if len(self.received) > before:
                deadline = time.monotonic() + seconds
        return list(self.received)

    def close(self) -> None:
        self._events.remove_targets(Rule=self._rule, Ids=["q"])
        self._events.delete_rule(Name=self._rule)
        self._sqs.delete_queue(QueueUrl=self._queue_url)


@pytest.fixture
def event_capture(aws: Callable[[str], Any]) -> Iterator[Callable[[dict[str, Any]], EventCapture]]:
    """``event_capture({"source": ["aws.autoscaling"]})`` starts capturing matching events."""
    captures: list[EventCapture] = []

    def start(pattern: dict[str, Any]) -> EventCapture:
        capture = EventCapture(aws, pattern)
        captures.append(capture)
        return capture

    yield start
    for capture in captures:
        capture.close()


EVENTS = Path(__file__).resolve().parents[2] / "events"


def _shape(value: Any, optional: frozenset[str]) -> Any:
    """The structure of a JSON value: dict keys (minus optional ones) with their shapes, the
    shape of a list's first item, the type name of a scalar."""
    if isinstance(value, dict):
        return {k: _shape(v, optional) for k, v in value.items() if k not in optional}
    if isinstance(value, list):
        return [_shape(value[0], optional)] if value else []
    return type(value).__name__


def assert_matches_sample(
    event: dict[str, Any], sample: str, *, optional: frozenset[str] = frozenset()
) -> None:
    """The event has exactly the structure of the AWS-documented sample in ``events/<sample>``:
    the same keys at every level and the same JSON types (``optional`` keys may be absent)."""
    expected = json.loads((EVENTS / sample).read_text())
    assert _shape(event, optional) == _shape(expected, optional), (
        f"event differs in shape from events/{sample}:\n{json.dumps(event, indent=1, default=str)}"
    )


@pytest.fixture
def registry_table(aws: Callable[[str], Any]) -> Iterator[str]:
    """A registry table as template.yaml declares it (pk/sk, the instances index); deleted after."""
    name = f"registry-{uuid.uuid4().hex[:8]}"
    aws("dynamodb").create_table(**create_table_arguments(name))
    yield name
    aws("dynamodb").delete_table(TableName=name)
