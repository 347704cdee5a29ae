"""Lambda execution environment for the ``process`` executor: one Python process per environment.

Runs in the *runtime venv* (boto3 and the layers' dependencies), never in LocalStack's venv, and
uses the standard library only. Speaks LocalStack's executor protocol:

1. import the handler named by ``_HANDLER`` (an init failure is POSTed to ``status/<id>/error``
   with Lambda's error types: ``Runtime.ImportModuleError``, ``Runtime.HandlerNotFound``,
   ``Runtime.UserCodeSyntaxError``, ``Runtime.MalformedHandlerName``);
2. listen on ``127.0.0.1:$VSA_RUNTIME_PORT`` and POST ``status/<id>/ready``;
3. for each ``POST /invoke`` (answered 200 at once) run the handler, then POST the captured
   output to ``invocations/<req>/logs`` *before* ``invocations/<req>/response`` (raw result
   bytes) or ``invocations/<req>/error`` (``{errorMessage, errorType, requestId, stackTrace}``).

Output is captured at the file-descriptor level, so loggers that bound ``sys.stdout`` at import
(powertools does) are captured too, and teed to the real stdout for LocalStack's own log.
"""

from __future__ import annotations

import importlib
import json
import os
import queue
import sys
import threading
import time
import traceback
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SENTINEL = b"\x00vsa-invocation-end\x00\n"


class OutputCapture:
    """Route fds 1 and 2 through a pipe; tee to the original stdout and keep a per-invoke copy."""

    def __init__(self) -> None:
        self._original = os.dup(1)
        read_fd, write_fd = os.pipe()
        os.dup2(write_fd, 1)
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self._reader = os.fdopen(read_fd, "rb", buffering=0)
        self._buffer = bytearray()
        self._lock = threading.Lock()
        self._drained = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        pending = b""
        while chunk := self._reader.read(65536):
            pending += chunk
            while SENTINEL in pending:
                before, pending = pending.split(SENTINEL, 1)
                self._keep(before)
                self._drained.set()
            # keep a possible partial sentinel back; emit everything before it
            cut = pending.rfind(b"\x00")
            if cut == -1:
                self._keep(pending)
                pending = b""
            else:
                self._keep(pending[:cut])
                pending = pending[cut:]

    def _keep(self, data: bytes) -> None:
        if not data:
            return
        os.write(self._original, data)
        with self._lock:
            self._buffer += data

    def take(self) -> str:
        """Everything written since the last take(), once the pipe has drained."""
        sys.stdout.flush()
        sys.stderr.flush()
        self._drained.clear()
        os.write(1, SENTINEL)
        self._drained.wait(timeout=2.0)
        with self._lock:
            data, self._buffer = bytes(self._buffer), bytearray()
        return data.decode(errors="replace")


class LambdaContext:
    """The context object the Python runtime hands to handlers."""

    def __init__(self, request_id: str, function_arn: str, timeout_s: float) -> None:
        self.aws_request_id = request_id
        self.invoked_function_arn = function_arn
        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "")
        self.function_version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.memory_limit_in_mb = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        self.log_group_name = os.environ.get("AWS_LAMBDA_LOG_GROUP_NAME", "")
        self.log_stream_name = os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME", "")
        self.identity = None
        self.client_context = None
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


# Built once: on Python 3.13 each build_opener() makes its HTTPS handler's SSL context, loading
# the system's CA store (about 25 ms), and every invoke POSTs twice (logs, then the result).
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def post(url: str, body: bytes) -> None:
    """POST to LocalStack's runtime endpoint (always http://127.0.0.1:<gateway>/...)."""
    request = urllib.request.Request(url, data=body, method="POST")  # noqa: S310
    request.add_header("Content-Type", "application/json")
    with OPENER.open(request, timeout=30) as response:
        response.read()


def error_body(
    error: BaseException, error_type: str | None = None, request_id: str = "", skip_frames: int = 0
) -> dict[str, Any]:
    """Lambda's error document; ``skip_frames`` drops this bootstrap's own frames, as Lambda does."""
    return {
        "errorMessage": str(error),
        "errorType": error_type or type(error).__name__,
        "requestId": request_id,
        "stackTrace": traceback.format_tb(error.__traceback__)[skip_frames:],
    }


class InitError(Exception):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def load_handler(spec: str) -> Any:
    module_name, _, attribute = spec.rpartition(".")
    if not module_name or not attribute:
        raise InitError("Runtime.MalformedHandlerName", f"Bad handler '{spec}': not enough values to unpack")
    try:
        module = importlib.import_module(module_name)
    except SyntaxError as error:
        raise InitError(
            "Runtime.UserCodeSyntaxError", f"Syntax error in module '{module_name}': {error}"
        ) from error
    except ImportError as error:
        raise InitError(
            "Runtime.ImportModuleError", f"Unable to import module '{module_name}': {error}"
        ) from error
    handler = getattr(module, attribute, None)
    if handler is None:
        raise InitError("Runtime.HandlerNotFound", f"Handler '{attribute}' missing on module '{module_name}'")
    return handler


def main() -> None:
    port = int(os.environ.pop("VSA_RUNTIME_PORT"))
    endpoint = os.environ["LOCALSTACK_RUNTIME_ENDPOINT"].rstrip("/")
    runtime_id = os.environ["LOCALSTACK_RUNTIME_ID"]
    timeout_s = float(os.environ.get("AWS_LAMBDA_FUNCTION_TIMEOUT", "3"))
    capture = OutputCapture()
    init_started = time.monotonic()
    sys.path.insert(0, os.environ["LAMBDA_TASK_ROOT"])
    try:
        handler = load_handler(os.environ["_HANDLER"])
    except InitError as error:
        print(f"[ERROR] {error.error_type}: {error}", flush=True)
        post(
            f"{endpoint}/status/{runtime_id}/error", json.dumps(error_body(error, error.error_type)).encode()
        )
        sys.exit(1)
    except Exception as error:  # noqa: BLE001 - any exception at import is an init error in Lambda
        traceback.print_exc()
        post(f"{endpoint}/status/{runtime_id}/error", json.dumps(error_body(error)).encode())
        sys.exit(1)
    init_ms = (time.monotonic() - init_started) * 1000
    invocations: queue.Queue[dict[str, Any]] = queue.Queue()

    class InvokeServer(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path != "/invoke":
                self.send_response(404)
                self.end_headers()
                return
            invocations.put(body)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            """Quiet: access logs would land in the function's logs."""

    server = ThreadingHTTPServer(("127.0.0.1", port), InvokeServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    post(f"{endpoint}/status/{runtime_id}/ready", b"{}")
    capture.take()  # init output stays in the process log, not in the first invocation's

    first = True
    while True:
        invocation = invocations.get()
        request_id = invocation["invoke-id"]
        os.environ["_X_AMZN_TRACE_ID"] = invocation.get("trace-id") or ""
        context = LambdaContext(request_id, invocation.get("invoked-function-arn", ""), timeout_s)
        print(f"START RequestId: {request_id} Version: {context.function_version}", flush=True)
        started = time.monotonic()
        outcome: tuple[str, bytes]
        try:
            event = json.loads(invocation.get("payload") or "null")
            result = handler(event, context)
            outcome = ("response", json.dumps(result).encode())
        except Exception as error:  # noqa: BLE001 - an unhandled error is the function's error result
            body = error_body(error, request_id=request_id, skip_frames=1)
            print(
                json.dumps({k: body[k] for k in ("errorMessage", "errorType", "requestId", "stackTrace")}),
                flush=True,
            )
            outcome = ("error", json.dumps(body).encode())
        duration_ms = (time.monotonic() - started) * 1000
        report = f"REPORT RequestId: {request_id}\tDuration: {duration_ms:.2f} ms"
        if first:
            report += f"\tInit Duration: {init_ms:.2f} ms"
            first = False
        print(f"END RequestId: {request_id}", flush=True)
        print(report, flush=True)
        logs = capture.take()
        base = f"{endpoint}/invocations/{request_id}"
        post(f"{base}/logs", json.dumps({"logs": logs}).encode())
        post(f"{base}/{outcome[0]}", outcome[1])


if __name__ == "__main__":
    main()
