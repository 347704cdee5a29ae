"""vsactl against a real HTTP server on 127.0.0.1 that records each request and answers as the
REST API would. Nothing in the CLI is mocked: the requests really go over TCP, and every one must
carry a SigV4 signature for ``execute-api`` that verifies (recomputed here with botocore)."""

import json
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from typer.testing import CliRunner
from vsactl.main import app

ACCESS_KEY = "AKIAVSACTLTEST000001"
SECRET_KEY = "vsactl-unit-secret"
REGION = "eu-west-3"
AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)"
    r"/aws4_request, SignedHeaders=(?P<signed>[^,]+), Signature=(?P<signature>[0-9a-f]{64})$"
)

SPEC_YAML = """\
arrayId: demo
availabilityZone: eu-west-3a
volumes:
  - volumeId: vol-0a1b2c3d4e5f60001
  - name: data2
    sizeGiB: 500
    iops: 16000
controllers:
  instanceType: r5b.2xlarge
  imageId: ami-0a1b2c3d4e5f60001
minControllers: 2
maxControllers: 8
"""

DESCRIBE_STACKS = """<DescribeStacksResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/">
<DescribeStacksResult><Stacks><member>
<StackName>vsa-control-plane</StackName>
<StackId>arn:aws:cloudformation:eu-west-3:123456789012:stack/vsa-control-plane/1</StackId>
<CreationTime>2026-01-01T00:00:00Z</CreationTime><StackStatus>CREATE_COMPLETE</StackStatus>
<Outputs>
<member><OutputKey>ApiUrl</OutputKey><OutputValue>https://a1b2c3d4e5.execute-api.eu-west-3.amazonaws.com/v1</OutputValue></member>
<member><OutputKey>ApiId</OutputKey><OutputValue>a1b2c3d4e5</OutputValue></member>
</Outputs>
</member></Stacks></DescribeStacksResult>
<ResponseMetadata><RequestId>00000000-0000-0000-0000-000000000001</RequestId></ResponseMetadata>
</DescribeStacksResponse>"""


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeApi:
    """The REST API's answers, per (method, path with query), and the requests it received."""

    port: int
    answers: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    turns: dict[tuple[str, str], list[tuple[Any, ...]]] = field(default_factory=dict)
    volume_states: list[str] = field(default_factory=lambda: ["available"])
    """EC2 DescribeVolumes: each call answers the next state for every volume asked (the last stays)."""
    described: list[list[str]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def answer(self, method: str, path: str, status: int, body: Any) -> None:
        self.answers[(method, path)] = (status, body)

    def answer_in_turn(self, method: str, path: str, *answers: tuple[Any, ...]) -> None:
        """Each request gets the next answer (status, body[, headers]); the last one stays."""
        self.turns[(method, path)] = list(answers)

    def only_request(self) -> Recorded:
        assert len(self.requests) == 1, self.requests
        return self.requests[0]


def describe_volumes(api: FakeApi, body: bytes) -> str:
    """EC2's DescribeVolumes answer (its Query protocol's XML) for the volume ids asked."""
    asked = [v for k, v in parse_qsl(body.decode()) if k.startswith("VolumeId.")]
    api.described.append(asked)
    state = api.volume_states.pop(0) if len(api.volume_states) > 1 else api.volume_states[0]
    items = "".join(
        f"<item><volumeId>{v}</volumeId><size>100</size><availabilityZone>{REGION}a</availabilityZone>"
        f"<status>{state}</status><volumeType>io2</volumeType></item>"
        for v in asked
    )
    return (
        '<DescribeVolumesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        f"<requestId>00000000-0000-0000-0000-000000000002</requestId><volumeSet>{items}</volumeSet>"
        "</DescribeVolumesResponse>"
    )


def _handler(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            if self.command == "POST" and self.path == "/" and b"Action=DescribeStacks" in body:
                self._reply(200, DESCRIBE_STACKS.encode(), "text/xml")
                return
            if self.command == "POST" and self.path == "/" and b"Action=DescribeVolumes" in body:
                self._reply(200, describe_volumes(api, body).encode(), "text/xml")
                return
            api.requests.append(Recorded(self.command, self.path, headers, body))
            turns = api.turns.get((self.command, self.path))
            extra: dict[str, str] = {}
            if turns:
                status, answer, *more = turns.pop(0) if len(turns) > 1 else turns[0]
                extra = more[0] if more else {}
            else:
                status, answer = api.answers.get((self.command, self.path), (404, {"message": "no route"}))
            self._reply(status, json.dumps(answer).encode(), "application/json", extra)

        def _reply(
            self, status: int, payload: bytes, content_type: str, extra: dict[str, str] | None = None
        ) -> None:
            self.send_response(status)
            for name, value in (extra or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_PUT = do_DELETE = do_POST = _serve  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def api() -> Iterator[FakeApi]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    fake = FakeApi(port=server.server_address[1])
    server.RequestHandlerClass = _handler(fake)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()


@pytest.fixture
def run(api: FakeApi, monkeypatch: pytest.MonkeyPatch):
    """Run vsactl against the fake API with known credentials (no session token)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_SECURITY_TOKEN", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("VSA_API_URL", raising=False)

    def invoke(*args: str, endpoint: str | None = api.url, stdin: str | None = None):
        prefix = ["--endpoint", endpoint] if endpoint else []
        return CliRunner().invoke(app, [*prefix, *args], input=stdin)

    return invoke


def assert_signed(recorded: Recorded, secret: str = SECRET_KEY) -> None:
    """The request carries a SigV4 signature for execute-api that verifies for ``secret``."""
    match = AUTH.match(recorded.headers.get("authorization", ""))
    assert match, recorded.headers.get("authorization")
    assert match["service"] == "execute-api"
    assert match["key"] == ACCESS_KEY
    assert match["region"] == REGION
    signed = match["signed"].split(";")
    assert "host" in signed
    assert "x-amz-date" in signed
    request = AWSRequest(
        method=recorded.method,
        url=f"http://{recorded.headers['host']}{recorded.path}",
        headers={name: recorded.headers[name] for name in signed},
        data=recorded.body,
    )
    request.context["timestamp"] = recorded.headers["x-amz-date"]
    assert request.context["timestamp"][:8] == match["date"]
    signer = SigV4Auth(Credentials(match["key"], secret), match["service"], match["region"])
    string_to_sign = signer.string_to_sign(request, signer.canonical_request(request))
    assert signer.signature(string_to_sign, request) == match["signature"]


def spec_file(tmp_path: Path, text: str = SPEC_YAML) -> str:
    path = tmp_path / "array.yaml"
    path.write_text(text)
    return str(path)


APPLY_ANSWER = {
    "array": {"arrayId": "demo"},
    "version": 3,
    "changes": [
        {
            "resource": "array",
            "action": "update",
            "fields": [
                {"field": "maxControllers", "before": 6, "after": 8},
                {"field": "minControllers", "before": 1, "after": 2},
            ],
        },
        {"resource": "volume data2", "action": "create", "fields": []},
    ],
}


def test_the_signature_check_of_this_test_rejects_a_wrong_secret(run, api, tmp_path):
    api.answer("GET", "/v1/arrays", 200, {"arrays": []})
    assert run("list").exit_code == 0
    with pytest.raises(AssertionError):
        assert_signed(api.only_request(), secret="not-the-secret")


def test_apply_puts_the_yaml_as_json_signed_and_shows_the_changes(run, api, tmp_path):
    api.answer("PUT", "/v1/arrays/demo", 200, APPLY_ANSWER)

    result = run("apply", "-f", spec_file(tmp_path))

    assert result.exit_code == 0, result.output
    request = api.only_request()
    assert_signed(request)
    assert request.headers["content-type"] == "application/json"
    assert "if-match" not in request.headers
    body = json.loads(request.body)
    assert body["arrayId"] == "demo"
    assert body["volumes"][1] == {"name": "data2", "sizeGiB": 500, "iops": 16000}
    assert result.output.splitlines() == [
        "array demo applied (version 3): 1 to create, 1 to update, 0 unchanged",
        "~ update     array: maxControllers 6 -> 8, minControllers 1 -> 2",
        "+ create     volume data2",
    ]


FIRST_APPLY = {
    "version": 1,
    "changes": [
        {
            "resource": "volume/data2",
            "action": "create",
            "fields": [
                {"field": "Size", "before": None, "after": 500},
                {"field": "Iops", "before": None, "after": 16000},
            ],
        },
        {
            "resource": "launch-template/vsa-demo-controller",
            "action": "update",
            "fields": [
                {
                    "field": "LaunchTemplateData.ImageId",
                    "before": "ami-0a1b2c3d4e5f60001",
                    "after": "ami-0a1b2c3d4e5f60002",
                },
                {
                    "field": "LaunchTemplateData.TagSpecifications",
                    "before": [{"Tags": ["x" * 40]}],
                    "after": [],
                },
            ],
        },
        {"resource": "alarm/vsa-demo-iops-low", "action": "unchanged", "fields": []},
        {
            "resource": "volume/data2",
            "action": "attach",
            "fields": [{"field": "controllers", "before": None, "after": ["i-1", "i-2"]}],
        },
        {
            "resource": "group/vsa-demo-controllers",
            "action": "roll",
            "fields": [{"field": "controllers", "before": ["i-1", "i-2"], "after": 2}],
        },
    ],
    "dryRun": True,
}


def test_apply_dry_run_asks_for_the_plan_and_prints_one_line_per_resource_and_action(run, api, tmp_path):
    api.answer("PUT", "/v1/arrays/demo?dryRun=true", 200, FIRST_APPLY)

    result = run("apply", "-f", spec_file(tmp_path), "--dry-run")

    assert result.exit_code == 0, result.output
    assert api.only_request().path == "/v1/arrays/demo?dryRun=true"
    assert result.output.splitlines() == [
        "array demo (version 1): dry run, nothing changed: "
        "1 to create, 1 to update, 2 node steps, 1 unchanged",
        "+ create     volume/data2",
        "~ update     launch-template/vsa-demo-controller: "
        "LaunchTemplateData.ImageId ami-0a1b2c3d4e5f60001 -> ami-0a1b2c3d4e5f60002, "
        "LaunchTemplateData.TagSpecifications",
        '> attach     volume/data2: controllers=["i-1","i-2"]',
        '> roll       group/vsa-demo-controllers: controllers ["i-1","i-2"] -> 2',
    ]
    # -o json: every value
    full = run("apply", "-f", spec_file(tmp_path), "--dry-run", "-o", "json")
    assert json.loads(full.output) == FIRST_APPLY


def test_apply_force_and_delete_removed_volumes_are_sent_as_query_flags_and_what_was_forced_shown(
    run, api, tmp_path
):
    forced = "removed although host i-1 has vol-1 mounted at /data"
    api.answer(
        "PUT",
        "/v1/arrays/demo?force=true&deleteRemovedVolumes=true",
        200,
        {"array": {}, "version": 4, "changes": [], "forced": [forced]},
    )

    result = run("apply", "-f", spec_file(tmp_path), "--force", "--delete-removed-volumes", "--yes")

    assert result.exit_code == 0, result.output
    assert api.only_request().path == "/v1/arrays/demo?force=true&deleteRemovedVolumes=true"
    assert f"! {forced}" in result.output.splitlines()


def test_apply_with_if_match_sends_the_version_and_shows_unchanged(run, api, tmp_path):
    api.answer("PUT", "/v1/arrays/demo", 200, {"array": {}, "version": 3, "changes": []})

    result = run("apply", "-f", spec_file(tmp_path), "--if-match", "3")

    assert result.exit_code == 0, result.output
    request = api.only_request()
    assert request.headers["if-match"] == "3"
    assert "if-match" in AUTH.match(request.headers["authorization"])["signed"].split(";")
    assert_signed(request)
    assert "array demo unchanged (version 3)" in result.output


def test_apply_conflict_shows_the_api_message_and_exits_3(run, api, tmp_path):
    message = "array demo is at version 4, not 3: get it again and re-apply"
    api.answer("PUT", "/v1/arrays/demo", 409, {"message": message})

    result = run("apply", "-f", spec_file(tmp_path), "--version-check", "3")

    assert result.exit_code == 3
    assert "HTTP 409" in result.output
    assert message in result.output


IOPS_TOO_HIGH = "Input should be less than or equal to 256000"


def test_apply_validation_error_shows_each_detail(run, api, tmp_path):
    api.answer(
        "PUT",
        "/v1/arrays/demo",
        422,
        {
            "statusCode": 422,
            "detail": [
                {
                    "loc": ["body", "volumes", 1, "iops"],
                    "msg": "Input should be less than or equal to 256000",
                },
                {"loc": ["body", "minControllers"], "type": "missing"},
            ],
        },
    )

    result = run("apply", "-f", spec_file(tmp_path))

    assert result.exit_code == 2
    assert "HTTP 422" in result.output
    assert f"volumes.1.iops: {IOPS_TOO_HIGH}" in result.output
    assert "minControllers: missing" in result.output


def test_bad_yaml_names_the_file_and_line_and_sends_nothing(run, api, tmp_path):
    path = spec_file(tmp_path, "arrayId: demo\nvolumes:\n  - volumeId: vol-1\n   bad: [\n")

    result = run("apply", "-f", path)

    assert result.exit_code == 2
    assert f"{path}:4:" in result.output
    assert "not valid YAML" in result.output
    assert api.requests == []


def test_a_missing_file_or_a_spec_without_array_id_is_a_usage_error(run, api, tmp_path):
    missing = run("apply", "-f", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == 2
    assert "nope.yaml: no such file" in missing.output

    no_id = run("apply", "-f", spec_file(tmp_path, "volumes: []\n"))
    assert no_id.exit_code == 2
    assert "no arrayId" in no_id.output

    a_list = run("apply", "-f", spec_file(tmp_path, "- a\n- b\n"))
    assert a_list.exit_code == 2
    assert "got a list" in a_list.output
    assert api.requests == []


GET_ANSWER = {
    "spec": {
        "arrayId": "demo",
        "availabilityZone": "eu-west-3a",
        "volumes": [{"volumeId": "vol-0a1b2c3d4e5f60001"}, {"name": "data2", "sizeGiB": 500, "iops": 16000}],
        "controllers": {"instanceType": "r5b.2xlarge", "imageId": "ami-0a1b2c3d4e5f60001"},
        "minControllers": 2,
        "maxControllers": 8,
        "backup": {"schedule": "cron(0 3 * * ? *)", "mode": "application", "retention": 7},
    },
    "version": 3,
    "desiredControllers": 2,
    "status": {
        "controllers": [
            {
                "instanceId": "i-0a1b2c3d4e5f60201",
                "lifecycleState": "InService",
                "healthStatus": "Healthy",
                "privateIp": "10.0.1.21",
                "availabilityZone": "eu-west-3a",
                "protectedFromScaleIn": True,
                "slot": 0,
            }
        ],
        "group": {"desiredCapacity": 2},
        "volumes": [
            {
                "volumeId": "vol-0a1b2c3d4e5f60001",
                "owned": False,
                "state": "in-use",
                "attachments": [{"instanceId": "i-0a1b2c3d4e5f60201", "state": "attached"}],
            }
        ],
        "alarms": [{"name": "vsa-demo-iops-high", "state": "OK", "threshold": 112000}],
        "hosts": [
            {
                "instanceId": "i-0a1b2c3d4e5f60101",
                "mountpoints": ["/data"],
                "pingStatus": "Online",
                "paths": 1,
            }
        ],
        "backupSchedule": None,
        "dataPlane": {
            "converged": False,
            "servingControllers": 2,
            "differences": [
                {
                    "node": "i-0a1b2c3d4e5f60101",
                    "kind": "no-path",
                    "volume": "vol-0a1b2c3d4e5f60001",
                    "text": "host i-0a1b2c3d4e5f60101 has no path to volume vol-0a1b2c3d4e5f60001 "
                    "through controller i-0a1b2c3d4e5f60202 (10.0.1.22)",
                }
            ],
        },
    },
    "decisions": [
        {"at": "2026-11-22T05:00:00Z", "action": "scale-out", "from": 1, "to": 2, "reason": "IOPS high"}
    ],
    "backups": [],
}


def test_get_shows_the_spec_controllers_volumes_alarms_hosts_and_decisions(run, api):
    api.answer("GET", "/v1/arrays/demo", 200, GET_ANSWER)

    result = run("get", "demo")

    assert result.exit_code == 0, result.output
    assert_signed(api.only_request())
    for text in (
        "Array demo",
        "r5b.2xlarge",
        "cron(0 3 * * ? *)",
        "i-0a1b2c3d4e5f60201",
        "InService",
        "10.0.1.21",
        "vol-0a1b2c3d4e5f60001",
        "in-use",
        "vsa-demo-iops-high",
        "112000",
        "i-0a1b2c3d4e5f60101",
        "/data",
        "Online",
        "scale-out",
        "IOPS high",
        "Data plane: 1 difference(s) from the spec (2 serving controllers)",
        "has no path to volume vol-0a1b2c3d4e5f60001",
    ):
        assert text in result.output, text


def test_get_json_prints_the_answer_and_404_shows_the_message(run, api):
    api.answer("GET", "/v1/arrays/demo", 200, GET_ANSWER)
    api.answer("GET", "/v1/arrays/nope", 404, {"message": "no array nope: vsactl list shows the arrays"})

    as_json = run("get", "demo", "-o", "json")
    assert as_json.exit_code == 0
    assert json.loads(as_json.output)["status"]["alarms"][0]["threshold"] == 112000

    missing = run("get", "nope")
    assert missing.exit_code == 4
    assert "no array nope: vsactl list shows the arrays" in missing.output


def test_list_shows_a_table_of_arrays(run, api):
    api.answer(
        "GET",
        "/v1/arrays",
        200,
        {
            "arrays": [
                {
                    "arrayId": "demo",
                    "version": 3,
                    "desiredControllers": 2,
                    "minControllers": 2,
                    "maxControllers": 8,
                    "controllers": 2,
                },
                {
                    "arrayId": "other",
                    "version": 1,
                    "desiredControllers": 4,
                    "minControllers": 1,
                    "maxControllers": 16,
                    "controllers": 3,
                },
            ]
        },
    )

    result = run("list")

    assert result.exit_code == 0, result.output
    request = api.only_request()
    assert (request.method, request.path, request.body) == ("GET", "/v1/arrays", b"")
    assert_signed(request)
    assert "demo" in result.output
    assert "other" in result.output
    assert "16" in result.output


def test_delete_asks_for_confirmation_and_a_no_sends_nothing(run, api):
    result = run("delete", "demo", "--delete-volumes", stdin="n\n")

    assert result.exit_code == 1
    assert "Delete array demo and the volumes it created?" in result.output
    assert "nothing done (not confirmed)" in result.output
    assert api.requests == []


def test_delete_confirmed_sends_delete_volumes_and_shows_the_workflow(run, api):
    workflow = "arn:aws:states:us-east-1:123456789012:execution:vsa-control-plane-delete-array:delete-demo-v3"
    api.answer(
        "DELETE",
        "/v1/arrays/demo?deleteVolumes=true",
        202,
        {"deleting": "demo", "deleteVolumes": True, "executionArn": workflow, "requestedAt": "t"},
    )

    result = run("delete", "demo", "--delete-volumes", stdin="y\n")

    assert result.exit_code == 0, result.output
    request = api.only_request()
    assert (request.method, request.path) == ("DELETE", "/v1/arrays/demo?deleteVolumes=true")
    assert_signed(request)
    assert "array demo is being deleted (deleting the volumes it created)" in result.output
    assert "delete-demo-v3" in result.output


def test_delete_yes_keeps_volumes_by_default_and_409_is_shown(run, api):
    message = "array demo is scaling (execution scale-demo-7 running): retry when it ends"
    api.answer("DELETE", "/v1/arrays/demo?deleteVolumes=false", 409, {"message": message})

    result = run("delete", "demo", "--yes")

    assert result.exit_code == 3
    assert api.only_request().path == "/v1/arrays/demo?deleteVolumes=false"
    assert "HTTP 409" in result.output
    assert message in result.output


def test_the_endpoint_comes_from_vsa_api_url(run, api, monkeypatch):
    api.answer("GET", "/v1/arrays", 200, {"arrays": []})
    monkeypatch.setenv("VSA_API_URL", api.url + "/")

    result = run("list", endpoint=None)

    assert result.exit_code == 0, result.output
    assert "no arrays" in result.output
    assert_signed(api.only_request())


def test_on_the_local_cloud_the_endpoint_is_the_path_style_url_of_the_stack_api_id(run, api, monkeypatch):
    # AWS_ENDPOINT_URL at 127.0.0.1: the stack is looked up there (DescribeStacks answered by the
    # fake), and the API is reached at LocalStack's path-style invoke URL of the output ApiId.
    monkeypatch.delenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{api.port}")
    api.answer("GET", "/restapis/a1b2c3d4e5/v1/_user_request_/arrays", 200, {"arrays": []})

    result = run("list", endpoint=None)

    assert result.exit_code == 0, result.output
    assert api.only_request().path == "/restapis/a1b2c3d4e5/v1/_user_request_/arrays"
    assert_signed(api.only_request())


def test_an_unreachable_local_endpoint_says_to_start_the_local_cloud(run):
    port = a_closed_port()
    result = run("list", endpoint=f"http://127.0.0.1:{port}/v1")

    assert result.exit_code == 1
    assert f"cannot reach the API at http://127.0.0.1:{port}/v1" in result.output
    assert "is the local cloud running (make localcloud-start)?" in result.output


def test_unknown_options_are_usage_errors(run):
    assert run("list", "--bogus").exit_code == 2
    assert run("delete").exit_code == 2


def a_closed_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_local_cloud_during_the_stack_lookup_says_to_start_it(run, monkeypatch):
    port = a_closed_port()
    monkeypatch.delenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")

    result = run("list", endpoint=None)

    assert result.exit_code == 1
    assert f"cannot reach CloudFormation (to find stack vsa-control-plane) at http://127.0.0.1:{port}" in (
        result.output
    )
    assert "is the local cloud running (make localcloud-start)?" in result.output


def test_an_unknown_profile_is_a_usage_error(run, api):
    result = run("--profile", "no-such-profile", "list")

    assert result.exit_code == 2
    assert "no-such-profile" in result.output
    assert api.requests == []


BACKUP = {
    "backupId": "bk-20261122T030000000Z-5f4c3b2a",
    "arrayId": "demo",
    "mode": "application",
    "label": "nightly",
    "state": "completed",
    "consistency": "application-consistent",
    "consistencyReason": "all 1 host(s) froze before the snapshot",
    "createdAt": "2026-11-22T03:00:00Z",
    "freezeWindowSeconds": 0.612,
    "snapshots": [
        {
            "volumeId": "vol-0a1b2c3d4e5f60001",
            "snapshotId": "snap-0a1b2c3d4e5f60001",
            "state": "completed",
            "progress": 100,
        }
    ],
    "hosts": [{"instanceId": "i-0a1b2c3d4e5f60101", "frozeAt": 1.0, "thawedAt": 1.6, "windowSeconds": 0.612}],
}


def test_backup_create_wait_posts_signed_with_a_key_and_follows_to_the_end(run, api):
    api.answer("POST", "/v1/arrays/demo/backups", 202, {**BACKUP, "state": "requested", "snapshots": []})
    api.answer("GET", f"/v1/arrays/demo/backups/{BACKUP['backupId']}", 200, BACKUP)

    result = run("backup", "create", "demo", "--mode", "application", "--label", "nightly", "--wait")

    assert result.exit_code == 0, result.output
    post, get = api.requests
    assert_signed(post)
    assert json.loads(post.body) == {"mode": "application", "label": "nightly"}
    assert post.headers["idempotency-key"].startswith("vsactl-")
    assert get.method == "GET"
    for text in ("application-consistent", "1/1 snapshots", "100%"):
        assert text in result.output
    # the host's freeze and thaw, read on its own clock, as times of day
    assert "00:00:01.000Z" in result.output
    assert "00:00:01.600Z" in result.output


def test_backup_create_wait_exits_1_when_the_set_failed(run, api):
    api.answer("POST", "/v1/arrays/demo/backups", 202, {**BACKUP, "state": "requested"})
    failed = {
        **BACKUP,
        "state": "failed",
        "consistency": None,
        "failure": "snapshot(s) failed: snap-x is in error",
    }
    api.answer("GET", f"/v1/arrays/demo/backups/{BACKUP['backupId']}", 200, failed)

    result = run("backup", "create", "demo", "--wait", "--idempotency-key", "nightly-1")

    assert result.exit_code == 1
    assert api.requests[0].headers["idempotency-key"] == "nightly-1"
    assert "snap-x is in error" in result.output


def test_backup_prune_dry_run_asks_for_the_plan_only(run, api):
    plan = {
        "arrayId": "demo",
        "keep": 2,
        "dryRun": True,
        "plan": [
            {
                "backupId": BACKUP["backupId"],
                "createdAt": "2026-11-22T03:00:00Z",
                "state": "completed",
                "action": "delete",
                "reason": "older",
            }
        ],
    }
    api.answer("GET", "/v1/arrays/demo/retention?keep=2", 200, plan)

    result = run("backup", "prune", "demo", "--keep", "2", "--dry-run")

    assert result.exit_code == 0, result.output
    assert api.only_request().method == "GET"
    assert "dry run" in result.output
    assert "delete" in result.output


def test_restore_needs_exactly_one_target(run, api):
    result = run("restore", "demo", BACKUP["backupId"])
    assert result.exit_code == 2
    assert api.requests == []


RECONCILING = {
    "array": {},
    "version": 4,
    "changes": [],
    "reconcile": {
        "state": "converging",
        "step": "waiting for the array lock",
        "executionName": "reconcile-demo-v4",
        "remaining": [
            "volume vol-0a1b2c3d4e5f60003: attach to every serving controller, export, connect every host"
        ],
    },
}


def test_apply_says_what_the_data_plane_still_converges_and_wait_follows_it_to_the_end(run, api, tmp_path):
    api.answer("PUT", "/v1/arrays/demo", 200, RECONCILING)
    api.answer(
        "GET", "/v1/arrays/demo", 200, {"reconcile": {"state": "converged", "step": "done", "version": 4}}
    )

    result = run("apply", "-f", spec_file(tmp_path), "--wait")

    assert result.exit_code == 0, result.output
    assert "data plane converging: ReconcileArray reconcile-demo-v4" in result.output
    assert "vol-0a1b2c3d4e5f60003: attach to every serving controller" in result.output
    assert "demo: converged (done)" in result.output
    assert [r.method for r in api.requests] == ["PUT", "GET"]


def test_apply_wait_exits_1_with_the_error_when_the_data_plane_did_not_converge(run, api, tmp_path):
    api.answer("PUT", "/v1/arrays/demo", 200, RECONCILING)
    failed = {"state": "failed", "step": "export", "error": "ReconcilePhaseFailed: phase export failed on 1"}
    api.answer("GET", "/v1/arrays/demo", 200, {"reconcile": failed})

    result = run("apply", "-f", spec_file(tmp_path), "--wait")

    assert result.exit_code == 1, result.output
    assert "did not converge: ReconcilePhaseFailed: phase export failed on 1" in result.output


EVENTS_ANSWER = {
    "arrayId": "demo",
    "since": None,
    "limit": 100,
    "truncated": True,
    "incomplete": ["failed runs: only the newest 20 of 25 carry their error and cause"],
    "events": [
        {"at": "2026-01-31T08:00:01.250000+00:00", "kind": "bootstrap", "outcome": "succeeded",
         "what": "controller i-0a1b2c3d4e5f60201 bootstrap",
         "reference": "bootstrap-i-0a1b2c3d4e5f60201-0a1b",
         "endedAt": None, "error": None, "cause": None},
        {"at": "2026-01-31T08:05:00+00:00", "kind": "decision", "outcome": "succeeded",
         "what": "scale-out 1 -> 2 controllers at 250,000 IOPS: demand above target",
         "reference": "scale-demo-0123", "endedAt": None, "error": None, "cause": None},
        {"at": "2026-01-31T08:09:00+00:00", "kind": "reconcile", "outcome": "failed",
         "what": "data plane converges on spec v3", "reference": "reconcile-demo-v3", "endedAt": None,
         "error": "ReconcileFailed", "cause": "connect-path failed on i-0a1b2c3d4e5f60101\nstderr: ..."},
    ],
}  # fmt: skip


def test_events_prints_one_line_per_event_oldest_first_with_failures_and_notes(run, api):
    api.answer("GET", "/v1/arrays/demo/events?limit=100", 200, EVENTS_ANSWER)

    result = run("events", "demo")

    assert result.exit_code == 0, result.output
    assert_signed(api.only_request())
    lines = result.stdout.splitlines()
    assert lines == [
        "2026-01-31 08:00:01  bootstrap succeeded  controller i-0a1b2c3d4e5f60201 bootstrap "
        "[bootstrap-i-0a1b2c3d4e5f60201-0a1b]",
        "2026-01-31 08:05:00  decision  succeeded  scale-out 1 -> 2 controllers at 250,000 IOPS: "
        "demand above target [scale-demo-0123]",
        "2026-01-31 08:09:00  reconcile failed     data plane converges on spec v3 [reconcile-demo-v3]: "
        "ReconcileFailed: connect-path failed on i-0a1b2c3d4e5f60101",
    ]
    assert "only the newest 100 events are shown" in result.stderr
    assert "note: failed runs: only the newest 20" in result.stderr


def test_events_since_is_sent_as_utc_and_json_prints_the_answer(run, api):
    api.answer("GET", "/v1/arrays/demo/events?limit=5&since=2026-01-31T07%3A00%3A00Z", 200, EVENTS_ANSWER)

    result = run("events", "demo", "--since", "2026-01-31T08:00:00+01:00", "--limit", "5", "-o", "json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["events"][2]["error"] == "ReconcileFailed"


def test_events_since_a_duration_is_that_long_before_now():
    from datetime import UTC, datetime

    from vsactl.main import since_time

    now = datetime(2026, 1, 31, 8, 0, tzinfo=UTC)
    assert since_time("90m", now) == "2026-01-31T06:30:00Z"
    assert since_time("7d", now) == "2026-01-24T08:00:00Z"


def test_events_refuses_a_since_it_cannot_read_and_sends_nothing(run, api):
    result = run("events", "demo", "--since", "2026-01-31T08:00:00")
    assert result.exit_code == 2
    assert "with its zone" in result.output
    assert api.requests == []
    missing = run("events", "nope")
    assert missing.exit_code == 4


def test_rotate_keys_posts_signed_and_wait_follows_the_run_to_its_end(run, api):
    started = {
        "arrayId": "demo",
        "rotation": "started",
        "reconcile": {
            "state": "converging",
            "executionName": "reconcile-demo-v4-r1",
            "remaining": ["keys rotation"],
        },
    }
    api.answer("POST", "/v1/arrays/demo/rotate-keys", 202, started)
    api.answer("GET", "/v1/arrays/demo", 200, {"reconcile": {"state": "converged", "step": "rekey: done"}})

    result = run("rotate-keys", "demo", "--wait")

    assert result.exit_code == 0, result.output
    assert "array demo: keys rotation started" in result.output
    assert "demo: converged (rekey: done)" in result.output
    assert [(r.method, r.path) for r in api.requests] == [
        ("POST", "/v1/arrays/demo/rotate-keys"),
        ("GET", "/v1/arrays/demo"),
    ]
    assert_signed(api.requests[0])


def test_rotate_keys_shows_the_apis_refusal_and_exits_3(run, api):
    refusal = {"message": "array 'demo' has authentication none: there are no keys to rotate"}
    api.answer("POST", "/v1/arrays/demo/rotate-keys", 409, refusal)

    result = run("rotate-keys", "demo")

    assert result.exit_code == 3, result.output
    assert "authentication none" in result.output


def test_apply_answered_504_says_the_apply_may_be_unfinished_and_to_apply_again(run, api, tmp_path):
    # API Gateway's answer past its 29 s (the integration's timeout)
    api.answer("PUT", "/v1/arrays/demo", 504, {"message": "Endpoint request timed out"})

    result = run("apply", "-f", spec_file(tmp_path))

    assert result.exit_code == 5
    assert "HTTP 504" in result.output
    assert "Endpoint request timed out" in result.output
    assert "apply the same spec again" in result.output


def test_get_shows_an_apply_that_stopped_part_way_and_what_to_do(run, api):
    message = "version 4 is stored but its apply has not finished: ... apply the same spec again"
    api.answer("GET", "/v1/arrays/demo", 200, {**GET_ANSWER, "applying": {"version": 4, "message": message}})

    result = run("get", "demo")

    assert result.exit_code == 0, result.output
    assert "Apply unfinished" in result.output
    assert "apply the same spec" in " ".join(result.output.split())


def test_get_shows_a_restored_array_waiting_for_its_first_apply_as_such(run, api):
    message = "registered by the restore of backup set bk-1: nothing is made yet. Apply it"
    applying = {"version": 1, "reason": "restored", "message": message}
    api.answer("GET", "/v1/arrays/demo", 200, {**GET_ANSWER, "applying": applying})
    result = run("get", "demo")
    assert result.exit_code == 0, result.output
    assert "Awaiting apply" in result.output
    assert "Apply unfinished" not in result.output


TIMED_OUT = (504, {"message": "Endpoint request timed out"})


def test_a_read_answered_504_or_429_is_asked_again_signed_anew(run, api, monkeypatch):
    monkeypatch.setattr("vsactl.client.RETRY_DELAYS", (0.01, 0.01))
    # Given a GET that times out at API Gateway once, is throttled once, then answers
    throttled = (429, {"message": "Too Many Requests"})
    api.answer_in_turn("GET", "/v1/arrays/demo", TIMED_OUT, throttled, (200, GET_ANSWER))
    # When vsactl reads the array
    result = run("get", "demo", "-o", "json")
    # Then it asked three times, each request signed, and shows the answer
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["spec"]["arrayId"] == "demo"
    assert [r.method for r in api.requests] == ["GET"] * 3
    for recorded in api.requests:
        assert_signed(recorded)


def test_a_read_that_keeps_timing_out_stops_after_three_and_says_where_to_look(run, api, monkeypatch):
    monkeypatch.setattr("vsactl.client.RETRY_DELAYS", (0.01, 0.01))
    api.answer("GET", "/v1/arrays/demo", *TIMED_OUT)
    result = run("get", "demo")
    assert result.exit_code == 5
    assert len(api.requests) == 3
    assert "HTTP 504" in result.output
    assert "asked 3 times" in result.output
    assert "logs" in result.output
    assert "apply the same spec again" not in result.output


def test_a_write_answered_504_is_never_repeated(run, api, tmp_path, monkeypatch):
    monkeypatch.setattr("vsactl.client.RETRY_DELAYS", (0.01, 0.01))
    api.answer_in_turn("PUT", "/v1/arrays/demo", TIMED_OUT, (200, APPLY_ANSWER))
    result = run("apply", "-f", spec_file(tmp_path))
    assert result.exit_code == 5
    assert [r.method for r in api.requests] == ["PUT"]
    assert "apply the same spec again" in result.output
    assert "asked" not in result.output


def test_an_array_delete_answered_504_is_asked_again_and_shows_the_deletion_under_way(run, api, monkeypatch):
    monkeypatch.setattr("vsactl.client.RETRY_DELAYS", (0.01, 0.01))
    # Given a DELETE whose first answer API Gateway lost (504); the second answers the deletion
    # the first started (the API's DELETE answers the run under way)
    workflow = "arn:aws:states:us-east-1:123456789012:execution:vsa-control-plane-delete-array:delete-demo-v3"
    under_way = {"deleting": "demo", "deleteVolumes": False, "executionArn": workflow, "requestedAt": "t"}
    api.answer_in_turn("DELETE", "/v1/arrays/demo?deleteVolumes=false", TIMED_OUT, (202, under_way))
    result = run("delete", "demo", "--yes")
    assert result.exit_code == 0, result.output
    assert [r.method for r in api.requests] == ["DELETE", "DELETE"]
    assert "delete-demo-v3" in result.output


def test_a_backup_set_delete_answered_504_is_not_repeated(run, api, monkeypatch):
    monkeypatch.setattr("vsactl.client.RETRY_DELAYS", (0.01, 0.01))
    # A backup set's DELETE is done when it answers: a repeat after a lost answer would say 404
    api.answer_in_turn("DELETE", "/v1/arrays/demo/backups/bk-1", TIMED_OUT, (200, {"deleted": "bk-1"}))
    result = run("backup", "delete", "demo", "bk-1", "--yes")
    assert result.exit_code == 5, result.output
    assert [r.method for r in api.requests] == ["DELETE"]


def test_a_keyed_post_answered_504_then_in_progress_is_asked_again_with_its_key(run, api, monkeypatch):
    monkeypatch.setattr("vsactl.client.KEYED_DELAYS", (0.01, 0.01, 0.01))
    # Given a backup POST whose first answer API Gateway lost (504), then told the first request
    # with its key still runs (409 with Retry-After), then answered
    in_progress = (
        409,
        {"message": "a request with this Idempotency-Key is still being done"},
        {"Retry-After": "2"},
    )
    requested = (202, {**BACKUP, "state": "requested", "snapshots": []})
    api.answer_in_turn("POST", "/v1/arrays/demo/backups", TIMED_OUT, in_progress, requested)
    # When vsactl asks for a backup
    result = run("backup", "create", "demo", "--idempotency-key", "nightly-7")
    # Then it asked three times with the same key and body, each signed, and shows the set
    assert result.exit_code == 0, result.output
    posts = api.requests
    assert [r.method for r in posts] == ["POST"] * 3
    assert {r.headers["idempotency-key"] for r in posts} == {"nightly-7"}
    assert len({r.body for r in posts}) == 1
    for recorded in posts:
        assert_signed(recorded)
    assert BACKUP["backupId"] in result.output


def test_a_conflict_without_retry_after_and_an_unkeyed_post_are_not_repeated(run, api, monkeypatch):
    monkeypatch.setattr("vsactl.client.KEYED_DELAYS", (0.01, 0.01, 0.01))
    conflict = (409, {"message": "a backup set of demo is in progress"})
    api.answer_in_turn("POST", "/v1/arrays/demo/backups", conflict, (202, BACKUP))
    result = run("backup", "create", "demo")
    assert result.exit_code == 3, result.output
    assert len(api.requests) == 1
    assert "in progress" in result.output


def test_a_keyed_post_that_keeps_timing_out_names_its_key_to_repeat(run, api, monkeypatch):
    monkeypatch.setattr("vsactl.client.KEYED_DELAYS", (0.01, 0.01))
    api.answer("POST", "/v1/arrays/demo/backups", *TIMED_OUT)
    result = run("backup", "create", "demo", "--idempotency-key", "nightly-8")
    assert result.exit_code == 5
    assert len(api.requests) == 3
    assert "asked 3 times: its Idempotency-Key has it done once" in result.output
    assert "--idempotency-key nightly-8" in result.output


def test_unkeyed_writes_are_never_repeated(monkeypatch):
    from vsactl.client import retry_delays

    assert retry_delays("POST", "/arrays/demo/backups", {}) == ()
    assert retry_delays("PUT", "/arrays/demo", {"Idempotency-Key": "k"}) == ()
    assert retry_delays("DELETE", "/arrays/demo/backups/bk-1", {}) == ()
    assert len(retry_delays("POST", "/arrays/demo/backups", {"idempotency-key": "k"})) >= 2
    assert len(retry_delays("GET", "/arrays/demo", {})) == 2


OPERATOR_ARN = "arn:aws:iam::123456789012:user/vsa-operator"
ATTRIBUTED_ANSWER = {
    **EVENTS_ANSWER,
    "truncated": False,
    "incomplete": [],
    "events": [
        EVENTS_ANSWER["events"][1],
        {"at": "2026-01-31T08:06:00+00:00", "kind": "rotate-keys", "outcome": "recorded",
         "what": "keys rotation: new keys stored", "reference": None, "endedAt": None, "error": None,
         "cause": None, "by": OPERATOR_ARN},
        {"at": "2026-01-31T08:07:00+00:00", "kind": "prune", "outcome": "recorded",
         "what": "backup set bk-1 (completed) deleted by retention (keep 3)", "reference": "bk-1",
         "endedAt": None, "error": None, "cause": None, "by": "schedule:vsa-demo-backup"},
    ],
}  # fmt: skip


def test_events_prints_who_asked_in_a_by_column_and_json_keeps_it(run, api):
    api.answer("GET", "/v1/arrays/demo/events?limit=100", 200, ATTRIBUTED_ANSWER)

    result = run("events", "demo")

    assert result.exit_code == 0, result.output
    by = " " * (len(OPERATOR_ARN) - 1)
    assert result.stdout.splitlines() == [
        f"2026-01-31 08:05:00  decision    succeeded  -{by} scale-out 1 -> 2 controllers at 250,000 IOPS: "
        "demand above target [scale-demo-0123]",
        f"2026-01-31 08:06:00  rotate-keys recorded   {OPERATOR_ARN} keys rotation: new keys stored",
        "2026-01-31 08:07:00  prune       recorded   schedule:vsa-demo-backup"
        + " " * (len(OPERATOR_ARN) - len("schedule:vsa-demo-backup"))
        + " backup set bk-1 (completed) deleted by retention (keep 3) [bk-1]",
    ]
    api.answer("GET", "/v1/arrays/demo/events?limit=100", 200, ATTRIBUTED_ANSWER)
    as_json = run("events", "demo", "-o", "json")
    assert [e.get("by") for e in json.loads(as_json.stdout)["events"]] == [
        None,
        OPERATOR_ARN,
        "schedule:vsa-demo-backup",
    ]
