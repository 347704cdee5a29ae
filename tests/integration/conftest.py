"""Integration tier: the real template deployed to the local cloud, the real Lambda code run.

The session fixture builds and deploys the stack with the SAM CLI exactly as on AWS
(``sam build`` then ``tools/deploy-local.sh``: ``sam deploy --config-env local`` with the local
parameters, the controller lifecycle on), against the local cloud that
``tools/localcloud.sh`` started (``make test`` starts and stops it).
"""

import fcntl
import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import urllib3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from vsactl import client as vsactl_client

from tests.integration.runs import log_lines, until_final
from vsa_core.waiters import execution_arn

ROOT = Path(__file__).resolve().parents[2]
STACK = "vsa-control-plane"


@pytest.fixture(scope="session")
def local_env() -> dict[str, str]:
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    if not endpoint.startswith("http://127.0.0.1"):
        pytest.fail(
            "integration tests run against the local cloud: use `make test` (or start it with "
            "`tools/localcloud.sh start` and export AWS_ENDPOINT_URL=http://127.0.0.1:4566)"
        )
    return {"AWS_ENDPOINT_URL": endpoint}


DR_REGION = "us-west-2"
"""The local clouds' disaster-recovery Region: the same deployment's second stack, where the
backup copies go (deploy-local.sh's BackupCopyRegions)."""


def _deploy() -> None:
    for command in (
        ["sam", "build", "--config-env", "local"],
        ["bash", "tools/deploy-local.sh"],
        ["env", f"REGION={DR_REGION}", "bash", "tools/deploy-local.sh"],
    ):
        started = time.monotonic()
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        print(f"{' '.join(command[:2])}: {time.monotonic() - started:.1f} s")
        assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}"


@pytest.fixture(scope="session")
def stack_outputs(local_env: dict[str, str]) -> dict[str, str]:
    """Build and deploy the real template; the outputs of the deployed stack.

    One deployment per run, however many pytest-xdist workers share it: the first worker to take
    the lock deploys and records the run's id (``PYTEST_XDIST_TESTRUNUID``); the others find the
    record and only read the outputs. ``VSA_STACK_DEPLOYED=1`` says the caller (tools/test.sh)
    has built and deployed this checkout already."""
    if os.environ.get("VSA_STACK_DEPLOYED") != "1":
        run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"single-{os.getpid()}"
        marker = ROOT / ".localcloud" / f"deployed-{local_env['AWS_ENDPOINT_URL'].rsplit(':', 1)[-1]}"
        marker.parent.mkdir(parents=True, exist_ok=True)
        with (ROOT / ".localcloud" / "deploy.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the others wait here while one deploys
            if not marker.exists() or marker.read_text() != run:
                _deploy()
                marker.write_text(run)
    stack = boto3.client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]
    assert stack["StackStatus"] in {"CREATE_COMPLETE", "UPDATE_COMPLETE"}, stack["StackStatus"]
    return {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}


@pytest.fixture(scope="session")
def dr_outputs(stack_outputs: dict[str, str]) -> dict[str, str]:
    """The outputs of the deployment's stack in ``DR_REGION`` (deployed with the first one)."""
    cloudformation = boto3.client("cloudformation", region_name=DR_REGION)
    stack = cloudformation.describe_stacks(StackName=STACK)["Stacks"][0]
    assert stack["StackStatus"] in {"CREATE_COMPLETE", "UPDATE_COMPLETE"}, stack["StackStatus"]
    return {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}


REALISTIC_TIMEOUT = 1500
"""pytest-timeout's cap for a realistic test (the rest keep pyproject.toml's 600 s). The cap only
catches a hang: each test waits on conditions. A realistic test makes its array under AWS-like
delays (volumes attaching, agents registering, instances pending) before its own scenario, and
with the fast tests beside it on two cores a four-controller one passed 600 s while progressing."""


DURATIONS = Path(__file__).with_name("durations.json")
"""Each test's seconds in a test command's run (``tools/slowest_tests.py --durations``)."""


def longest_first(items: list[pytest.Item], durations: dict[str, float]) -> None:
    """Sorts the tests longest first, so that pytest-xdist, which deals them out in order (two
    at a time with ``--maxschedchunk 1``, as tools/test.sh runs them), starts the long ones at
    once and ends on short ones, instead of on one long test while the other workers idle. A
    test without a recorded time goes first (it may be long); equal times keep the collection's
    order."""
    unknown = max(durations.values(), default=0.0) + 1
    items.sort(key=lambda item: -durations.get(item.nodeid, unknown))


@pytest.hookimpl(tryfirst=True)  # before -m selects on the marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that use ``realistic_timings`` are marked ``realistic``: tools/test.sh runs them in
    a phase of their own, concurrently, under a profile set once for the phase. Under
    pytest-xdist every worker sorts the same way, longest first."""
    for item in items:
        if "realistic_timings" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.realistic)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(REALISTIC_TIMEOUT))
    if os.environ.get("PYTEST_XDIST_WORKER") and DURATIONS.is_file():
        longest_first(items, json.loads(DURATIONS.read_text()))


@pytest.fixture
def realistic_timings(local_env: dict[str, str]) -> Iterator[dict[str, Any]]:
    """AWS-like latencies for the test (the local cloud's ``realistic`` profile: volumes
    creating and attaching for seconds, SSM agents registering tens of seconds after boot,
    snapshots taking half a minute; instances pending 15 s after launch and shutting down 10 s);
    back to ``fast`` afterwards.

    The profile is the local cloud's, not the test's: tests running side by side (pytest-xdist)
    share it. When the caller has set it for a whole phase (``VSA_TIMINGS_PROFILE=realistic``,
    tools/test.sh), the fixture only checks it is in force and leaves it alone."""
    url = f"{local_env['AWS_ENDPOINT_URL']}/_localcloud/timings"
    http = urllib3.PoolManager()

    def call(action: str, **body: str) -> dict[str, Any]:
        reply = http.request("POST", f"{url}/{action}", body=json.dumps(body).encode())
        assert reply.status == 200, reply.data
        return dict(json.loads(reply.data))

    def switch(profile: str) -> dict[str, Any]:
        return call("configure", profile=profile)

    if os.environ.get("VSA_TIMINGS_PROFILE") == "realistic":
        shown = call("show")
        assert shown["profile"] == "realistic", f"the phase's profile is not in force: {shown}"
        yield shown
        return
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.fail(
            "realistic_timings under pytest-xdist needs the phase's profile (VSA_TIMINGS_PROFILE="
            "realistic, set by tools/test.sh): switching the shared profile per test would change "
            "it under the tests running beside this one"
        )
    shown = switch("realistic")
    try:
        yield shown
    finally:
        switch("fast")


@pytest.fixture
def array_id() -> str:
    return f"it-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def registry(stack_outputs: dict[str, str]) -> Iterator[Any]:
    from vsa_core.arrays.aws_registry import ArrayRegistry

    table = stack_outputs["RegistryTableName"]
    dynamodb = boto3.client("dynamodb")
    created: list[str] = []

    class Tracking(ArrayRegistry):
        def create(self, spec: Any) -> Any:  # remember what to clean up
            created.append(spec.array_id)
            return super().create(spec)

    yield Tracking(table, dynamodb)
    for array in created:
        items = dynamodb.query(
            TableName=table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"ARRAY#{array}"}},
        )["Items"]
        for item in items:
            dynamodb.delete_item(TableName=table, Key={"pk": item["pk"], "sk": item["sk"]})


def load_event(relative: str) -> dict[str, Any]:
    return json.loads((ROOT / "events" / relative).read_text())


def alarm_event_for(array_id: str, demand: float, state_timestamp: str) -> dict[str, Any]:
    """The AWS sample alarm event, re-aimed at ``array_id`` with a given demand and state time."""
    event = load_event("cloudwatch/iops_alarm_high.json")
    name = f"vsa-{array_id}-iops-high"
    event["detail"]["alarmName"] = name
    event["resources"] = [f"arn:aws:cloudwatch:us-east-1:000000000000:alarm:{name}"]
    reason = json.loads(event["detail"]["state"]["reasonData"])
    reason["recentDatapoints"] = [demand * 0.9, demand]
    event["detail"]["state"]["reasonData"] = json.dumps(reason)
    event["detail"]["state"]["timestamp"] = state_timestamp
    return event


def put_event(event: dict[str, Any], bus: str = "default", events: Any = None) -> str:
    """Put ``event`` (an events/ sample's shape) on ``bus``, with ``events`` (a client; the
    test's own credentials by default); its id. An ``aws.*`` event is one only AWS's own
    services may put (EventBridge refuses that source from any principal): it is emitted as the
    service would, through the local cloud's control."""
    entry = {
        "Source": event["source"],
        "DetailType": event["detail-type"],
        "Detail": json.dumps(event["detail"]),
        "Resources": event["resources"],
        "EventBusName": bus,
    }
    if event["source"].startswith("aws."):
        endpoint = os.environ["AWS_ENDPOINT_URL"]
        # the local cloud answers once the event is on the bus (its rules matched): seconds on a
        # loaded machine, so a read bound of minutes, not urllib3.request's default 3 s
        http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=10, read=120))
        answer = http.request("POST", f"{endpoint}/_localcloud/events/emit", json={"Entries": [entry]})
        assert answer.status == 200, answer.data
        response = json.loads(answer.data)
    else:
        response = (events or boto3.client("events")).put_events(Entries=[entry])
    assert response["FailedEntryCount"] == 0, response
    return str(response["Entries"][0]["EventId"])


def events_as(role_arn: str) -> Any:
    """An EventBridge client signed with a session of ``role_arn`` (the local cloud does not
    check trust policies, so a test may act as the role a service would assume)."""
    credentials = boto3.client("sts").assume_role(RoleArn=role_arn, RoleSessionName="vsa-test")["Credentials"]
    return boto3.client(
        "events",
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
    )


def recent_stamp(seconds_ago: float = 0.0) -> str:
    """An alarm state time ``seconds_ago`` before now, in CloudWatch's format. ScaleArray decides
    on an alarm's own datapoint only while it is fresh (within the alarm's evaluation window + 3
    min): a fixed date would be a day-old event by tomorrow, which it rightly refuses."""
    at = datetime.now(UTC) - timedelta(seconds=seconds_ago)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}+0000"


def fire_alarm(array_id: str, demand: float, stamp: str, kind: str = "high", deployment: str = "vsa") -> str:
    """The array's high or low alarm (of ``deployment``'s) going off at ``stamp`` (the AWS sample
    event, re-aimed, put on the bus); the name of the ScaleArray execution it starts."""
    from vsa_core.naming import scale_execution_name

    event = alarm_event_for(array_id, demand=demand, state_timestamp=stamp)
    name = f"{deployment}-{array_id}-iops-{kind}"
    event["detail"]["alarmName"] = name
    event["resources"] = [f"arn:aws:cloudwatch:us-east-1:000000000000:alarm:{name}"]
    put_event(event)
    return scale_execution_name(array_id, event["resources"][0], stamp)


def wait_for_execution(state_machine_arn: str, name: str) -> dict[str, Any]:
    """The finished execution called ``name`` (started asynchronously after the event), waited
    for while it moves (``tests/integration/runs.py``)."""
    return until_final(execution_arn(state_machine_arn, name))


def executions_of(state_machine_arn: str) -> list[dict[str, Any]]:
    """Every execution of the state machine, all pages (tests run side by side and the burst
    test alone starts 100: one page would miss some)."""
    pages = (
        boto3.client("stepfunctions")
        .get_paginator("list_executions")
        .paginate(stateMachineArn=state_machine_arn)
    )
    return [e for page in pages for e in page["executions"]]


def execution_history(execution_arn: str) -> list[dict[str, Any]]:
    sfn = boto3.client("stepfunctions")
    return list(sfn.get_execution_history(executionArn=execution_arn, maxResults=1000)["events"])


def function_logs(function_name: str, term: str) -> list[str]:
    """Log lines of ``function_name`` containing ``term``, once at least one has arrived: waiting
    while the function's log group grows (``runs.log_lines``), every page read; a line that never
    comes fails once the group has been still for ``runs.STALL`` seconds."""
    return log_lines(f"/aws/lambda/{function_name}", term)


KEYED = re.compile(r"/(backups|restores|drills)$")
"""The POST routes vsactl gives an Idempotency-Key (a backup, a restore, a drill): done once per key."""


class Api:
    """The deployed arrays API, called as vsactl calls it: SigV4-signed (service execute-api)
    by botocore, at the local cloud's path-style URL of the stack's ``ApiId``, and asked again as
    vsactl asks (``vsactl.client.retry_delays``): a GET, an array's DELETE or a POST with an
    Idempotency-Key answered 429/5xx (API Gateway's 504 when a function starts past 29 s on a busy
    machine), or a keyed POST told its first request still runs (409 with Retry-After)."""

    def __init__(self, endpoint: str, api_id: str, region: str = "us-east-1") -> None:
        self.base = f"{endpoint}/restapis/{api_id}/v1/_user_request_"
        self.region = region
        self._http = urllib3.PoolManager()
        self._credentials = boto3.Session().get_credentials()

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        sign: bool = True,
        raw: bytes | None = None,
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        headers = dict(headers or {})
        if method == "POST" and KEYED.search(path) and "idempotency-key" not in {k.lower() for k in headers}:
            headers["Idempotency-Key"] = f"it-{uuid.uuid4()}"  # as vsactl sends one on these routes
        delays = vsactl_client.retry_delays(method, path.partition("?")[0], headers)
        for delay in (*delays, None):
            reply = self._send(method, path, data, headers, sign)
            if delay is None or not vsactl_client.worth_repeating(method, reply.status, reply.headers):
                break
            time.sleep(delay)
        try:
            payload = json.loads(reply.data) if reply.data else None
        except ValueError:
            payload = reply.data.decode(errors="replace")
        return reply.status, payload

    def _send(
        self, method: str, path: str, data: bytes | None, headers: dict[str, str], sign: bool
    ) -> urllib3.BaseHTTPResponse:
        """One request, signed anew (a signature holds its time)."""
        request = AWSRequest(method=method, url=f"{self.base}{path}", data=data, headers=dict(headers))
        if data is not None:
            request.headers["Content-Type"] = "application/json"
        if sign:
            SigV4Auth(self._credentials, "execute-api", self.region).add_auth(request)
        return self._http.request(
            method, request.url, body=data, headers=dict(request.headers.items()), timeout=60.0
        )


@pytest.fixture(scope="session")
def api(stack_outputs: dict[str, str], local_env: dict[str, str]) -> Api:
    return Api(local_env["AWS_ENDPOINT_URL"], stack_outputs["ApiId"])


# Fixtures the arrays and scaling tests share (defined next to their helpers).
from tests.integration.arrays_world import arrays, node_profile, scripted_alarms, world  # noqa: E402, F401
from tests.integration.backups_world import backup_array, xfs_lab  # noqa: E402, F401
