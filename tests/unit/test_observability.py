"""The deferred tracer: no Tracer (and no X-Ray SDK work) at import, the same traces once invoked."""

from collections.abc import Iterator
from typing import Any

import aws_xray_sdk.core
import pytest
from aws_lambda_powertools import Tracer
from aws_lambda_powertools.tracing import tracer as powertools_tracer
from aws_xray_sdk import global_sdk_config
from aws_xray_sdk.core import xray_recorder

from vsa_core.observability import DeferredTracer


class RecordingEmitter:
    """Stands in for the UDP emitter to the X-Ray daemon: keeps what would have been sent."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send_entity(self, entity: Any) -> None:
        self.sent.append(entity.to_dict())

    def set_daemon_address(self, address: str) -> None:
        pass

    @property
    def ip(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        return 2000


@pytest.fixture
def tracing_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordingEmitter]:
    """Tracing active as on AWS, its output recorded; nothing patched process-wide."""
    monkeypatch.setenv("LAMBDA_TASK_ROOT", "/var/task")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "vsa-control-plane")
    monkeypatch.delenv("POWERTOOLS_TRACE_DISABLED", raising=False)
    monkeypatch.delenv("AWS_SAM_LOCAL", raising=False)
    # patch_all would patch botocore & co for the rest of the test session
    monkeypatch.setattr(aws_xray_sdk.core, "patch_all", lambda: None)
    # a fresh execution environment (an earlier test's invocation ended powertools' cold start)
    monkeypatch.setattr(powertools_tracer, "is_cold_start", True)
    emitter = RecordingEmitter()
    previous_emitter = xray_recorder.emitter
    was_enabled = global_sdk_config.sdk_enabled()
    global_sdk_config.set_sdk_enabled(True)
    xray_recorder.configure(emitter=emitter)
    Tracer._reset_config()
    yield emitter
    Tracer._reset_config()
    xray_recorder.configure(emitter=previous_emitter)
    global_sdk_config.set_sdk_enabled(was_enabled)


def test_decorating_creates_no_tracer() -> None:
    # Given a deferred tracer / When a handler is decorated (at import)
    deferred = DeferredTracer()
    deferred.capture_lambda_handler(lambda event, context: event)
    # Then no powertools Tracer exists yet
    assert deferred._tracer is None


def test_first_invocation_traces_the_handler(tracing_on: RecordingEmitter) -> None:
    # Given a handler decorated at import with the deferred tracer
    deferred = DeferredTracer()

    @deferred.capture_lambda_handler
    def lambda_handler(event: dict[str, Any], context: object) -> dict[str, Any]:
        return {"answer": event["question"] * 2}

    # When it is invoked within a trace (Lambda's facade segment)
    xray_recorder.begin_segment("vsa-control-plane", sampling=1)  # no sampler: no daemon asked
    try:
        result = lambda_handler({"question": 21}, None)
        result_again = lambda_handler({"question": 1}, None)
    finally:
        xray_recorder.end_segment()
    # Then it answers as undecorated, one Tracer serves both calls, and each call is a
    # "## lambda_handler" subsegment with powertools' annotations and the response as metadata
    assert (result, result_again) == ({"answer": 42}, {"answer": 2})
    assert isinstance(deferred._tracer, Tracer)
    assert not deferred.tracer.disabled
    subsegments = [s for s in tracing_on.sent if s["name"] == "## lambda_handler"]
    assert len(subsegments) == 2
    assert subsegments[0]["annotations"]["ColdStart"] is True
    assert subsegments[1]["annotations"]["ColdStart"] is False
    assert subsegments[0]["annotations"]["Service"] == "vsa-control-plane"
    assert subsegments[0]["metadata"]["vsa-control-plane"]["lambda_handler response"] == {"answer": 42}
