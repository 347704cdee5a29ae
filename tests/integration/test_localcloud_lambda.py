"""The local cloud's host-process Lambda executor behaves like Lambda where our code relies on it.

These pin tools/localcloud (the ``process`` executor) to Lambda's documented behaviour: the
result and error shapes, init errors, the timeout and the fresh environment after it, and
logs captured per invocation.
"""

import base64
import io
import json
import uuid
import zipfile
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

HANDLER = """
import json, os, sys, time
import boto3

def handler(event, context):
    print("hello from", context.function_name, flush=True)
    sys.stderr.write("to stderr\\n")
    if event.get("fail"):
        raise ValueError("asked to fail")
    if event.get("exit"):
        os._exit(3)
    time.sleep(event.get("sleep", 0))
    return {
        "pid": os.getpid(),
        "endpoint": os.environ.get("AWS_ENDPOINT_URL", ""),
        "remaining_ms": context.get_remaining_time_in_millis(),
        "tables": boto3.client("dynamodb").list_tables()["TableNames"] is not None,
    }
"""


def _zip(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, body in files.items():
            archive.writestr(name, body)
    return buffer.getvalue()


@pytest.fixture
def make_function(local_env) -> Iterator[Any]:
    client = boto3.client("lambda")
    created: list[str] = []

    # A generous default: these functions answer in milliseconds, but their first invocation
    # includes the environment's start and a boto3 call to the local cloud, and on a loaded machine
    # that took over 5 s. Only the timeout test asks for a short one.
    def make(files: dict[str, str], handler: str, timeout: int = 120) -> str:
        name = f"it-exec-{uuid.uuid4().hex[:8]}"
        client.create_function(
            FunctionName=name,
            Runtime="python3.13",
            Role="arn:aws:iam::000000000000:role/it-lambda",
            Handler=handler,
            Code={"ZipFile": _zip(files)},
            Timeout=timeout,
        )
        created.append(name)
        client.get_waiter("function_active_v2").wait(FunctionName=name)
        return name

    yield make
    for name in created:
        client.delete_function(FunctionName=name)


def _invoke(name: str, payload: dict[str, Any]) -> tuple[dict[str, Any], str | None, str]:
    # read past the functions' own timeouts, never retried: an invoke retried would run twice
    client = boto3.client("lambda", config=Config(read_timeout=300, retries={"total_max_attempts": 1}))
    response = client.invoke(FunctionName=name, Payload=json.dumps(payload), LogType="Tail")
    body = json.loads(response["Payload"].read())
    return body, response.get("FunctionError"), base64.b64decode(response.get("LogResult", "")).decode()


def test_result_logs_and_environment(make_function):
    # Given a function that prints, writes stderr and calls the local cloud with boto3
    name = make_function({"app.py": HANDLER}, "app.handler")
    # When it is invoked
    body, error, logs = _invoke(name, {})
    # Then it returns its result, reached the local cloud through AWS_ENDPOINT_URL,
    assert error is None, body
    assert body["endpoint"].startswith("http://127.0.0.1:")
    assert body["tables"] is True
    assert 0 < body["remaining_ms"] <= 120_000
    # and its stdout and stderr are that invocation's logs, with Lambda's report lines
    assert f"hello from {name}" in logs
    assert "to stderr" in logs
    assert "REPORT RequestId:" in logs
    # When invoked again the same (warm) process answers, with no Init Duration this time
    again, _, warm_logs = _invoke(name, {})
    assert again["pid"] == body["pid"]
    assert "Init Duration" not in warm_logs


def test_unhandled_exception_is_a_function_error(make_function):
    name = make_function({"app.py": HANDLER}, "app.handler")
    # When the handler raises
    body, error, _ = _invoke(name, {"fail": True})
    # Then Lambda's error shape comes back, typed by the exception class
    assert error == "Unhandled"
    assert body["errorType"] == "ValueError"
    assert body["errorMessage"] == "asked to fail"
    assert isinstance(body["stackTrace"], list)


def test_timeout_kills_and_replaces_the_environment(make_function):
    # Given a 30-second function: the fresh environment's start after a timeout counts toward the
    # next invocation's timeout, as on AWS (the init is "suppressed" into the invoke), and on a
    # loaded machine that start alone has taken over 6 s
    name = make_function({"app.py": HANDLER}, "app.handler", timeout=30)
    first, _, _ = _invoke(name, {})
    # When an invocation runs past its timeout
    body, error, _ = _invoke(name, {"sleep": 90})
    # Then it fails with Lambda's own timeout error
    assert error == "Unhandled"
    assert body["errorType"] == "Sandbox.Timedout"
    assert "Task timed out after 30.00 seconds" in body["errorMessage"]
    # And the next invocation runs in a fresh process
    after, after_error, _ = _invoke(name, {})
    assert after_error is None, after
    assert after["pid"] != first["pid"]


def test_process_exit_is_a_runtime_exit_error(make_function):
    name = make_function({"app.py": HANDLER}, "app.handler")
    body, error, _ = _invoke(name, {"exit": True})
    assert error == "Unhandled"
    assert body["errorType"] == "Runtime.ExitError"
    # the next invocation starts a new environment
    after, after_error, _ = _invoke(name, {})
    assert after_error is None, after


@pytest.mark.parametrize(
    ("files", "handler", "error_type"),
    [
        ({"app.py": HANDLER}, "missing.handler", "Runtime.ImportModuleError"),
        ({"app.py": HANDLER}, "app.nothere", "Runtime.HandlerNotFound"),
        ({"app.py": "def handler(:\n"}, "app.handler", "Runtime.UserCodeSyntaxError"),
    ],
    ids=["import", "handler-missing", "syntax"],
)
def test_init_errors_have_lambda_error_types(make_function, files, handler, error_type):
    # Given broken function code / When it is invoked / Then Lambda's init error type comes back
    name = make_function(files, handler)
    body, error, _ = _invoke(name, {})
    assert error == "Unhandled"
    assert body["errorType"] == error_type, body
