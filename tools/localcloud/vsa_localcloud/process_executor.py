"""A LocalStack Lambda runtime executor that runs execution environments as host processes.

Community LocalStack ships only a Docker executor, and our machines have no Docker engine.
This executor keeps LocalStack's own executor protocol, so the rest of LocalStack's Lambda
service (versions, concurrency, async invokes, event source mappings, logs) is unchanged:

* each execution environment is one subprocess of ``runtime_bootstrap.py``, started with the
  Python of a *runtime venv* (``VSA_LAMBDA_PYTHON``) that holds what the Lambda runtime holds
  (boto3) and the layers' dependencies, never LocalStack's own venv;
* the subprocess POSTs ``.../status/<id>/ready`` (or ``.../error``), receives ``POST /invoke``
  on a loopback port, and POSTs ``.../invocations/<req>/logs`` then ``.../response`` or
  ``.../error`` back to LocalStack's gateway;
* the function timeout is enforced here: the process is killed and restarted and the invoke
  answers with Lambda's own ``Sandbox.Timedout`` error;
* a process that dies mid-invoke answers ``Runtime.ExitError`` and is restarted lazily.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import signal
import subprocess
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

import requests
from localstack import config
from localstack.services.lambda_.invocation.executor_endpoint import (
    ExecutorEndpoint,
    StatusErrorException,
)
from localstack.services.lambda_.invocation.lambda_models import (
    FunctionVersion,
    InvocationResult,
)
from localstack.services.lambda_.invocation.runtime_executor import (
    LambdaRuntimeException,
    RuntimeExecutor,
)
from localstack.utils.net import get_free_tcp_port

LOG = logging.getLogger(__name__)

BOOTSTRAP = Path(__file__).with_name("runtime_bootstrap.py")
LOOPBACK = "127.0.0.1"
MAX_LOG_LINES = 5000
STOP_GRACE_SECONDS = 3.0


def _runtime_python() -> str:
    python = os.environ.get("VSA_LAMBDA_PYTHON", "")
    if not python or not Path(python).is_file():
        raise LambdaRuntimeException(
            "VSA_LAMBDA_PYTHON must name the Python of the Lambda runtime venv "
            f"(got {python!r}); the project's local-cloud script sets it."
        )
    return python


def _pid_dir() -> Path:
    """Where live environment PIDs are noted, so ``localcloud.sh stop`` can end any that
    outlive a LocalStack that had to be killed (they run in their own process groups)."""
    return Path(os.environ.get("TMPDIR", "/tmp")) / "vsa-lambda-pids"  # noqa: S108


def _remember(pid: int) -> None:
    _pid_dir().mkdir(parents=True, exist_ok=True)
    (_pid_dir() / str(pid)).touch()


def _forget(pid: int) -> None:
    (_pid_dir() / str(pid)).unlink(missing_ok=True)


def _error_payload(error_type: str, message: str, request_id: str = "") -> bytes:
    return json.dumps(
        {"errorType": error_type, "errorMessage": message, "requestId": request_id, "stackTrace": []}
    ).encode()


class ProcessRuntimeExecutor(RuntimeExecutor):
    """One Lambda execution environment = one host subprocess."""

    def __init__(self, id: str, function_version: FunctionVersion) -> None:
        super().__init__(id, function_version)
        self.executor_endpoint = ExecutorEndpoint(self.id, container_address=LOOPBACK)
        self._process: subprocess.Popen[bytes] | None = None
        self._env: dict[str, str] = {}
        self._log_lines: collections.deque[str] = collections.deque(maxlen=MAX_LOG_LINES)
        self._log_lock = threading.Lock()
        self._invoke_lock = threading.Lock()
        self._stopping = False

    # --- lifecycle -------------------------------------------------------------------------
    def start(self, env_vars: dict[str, str]) -> None:
        runtime = str(self.function_version.config.runtime or "")
        if not runtime.startswith("python"):
            raise LambdaRuntimeException(f"the process executor runs Python runtimes only, not {runtime!r}")
        self._env = self._build_env(env_vars)
        self._spawn()

    def _build_env(self, env_vars: dict[str, str]) -> dict[str, str]:
        code_dir = self.function_version.config.code.get_unzipped_code_location()
        python_path = [str(code_dir)]
        for layer in self.function_version.config.layers or []:
            if layer.code is None:
                continue
            layer_root = Path(layer.code.get_unzipped_code_location())
            # Lambda puts /opt/python and /opt/python/lib/pythonX.Y/site-packages on sys.path
            python_path.append(str(layer_root / "python"))
            site = sorted((layer_root / "python" / "lib").glob("python3*/site-packages"))
            python_path.extend(str(path) for path in site)
        python = _runtime_python()
        env = {key: str(value) for key, value in env_vars.items()}  # some values arrive as ints
        env.update(
            {
                "PYTHONPATH": os.pathsep.join(python_path),
                "LAMBDA_TASK_ROOT": str(code_dir),
                "PATH": os.pathsep.join([str(Path(python).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
                # Lambda's only writable directory; the local cloud points TMPDIR into its state dir
                "TMPDIR": os.environ.get("TMPDIR", "/tmp"),  # noqa: S108
                "HOME": os.environ.get("TMPDIR", "/tmp"),  # noqa: S108
                "LANG": "en_US.UTF-8",
                "PYTHONUNBUFFERED": "1",
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        return env

    def _spawn(self) -> None:
        endpoint = self.executor_endpoint
        endpoint.start()  # registers the routes and arms a fresh startup future
        endpoint.container_port = get_free_tcp_port()
        env = dict(self._env, VSA_RUNTIME_PORT=str(endpoint.container_port))
        LOG.debug("starting process execution environment %s on port %s", self.id, env["VSA_RUNTIME_PORT"])
        process = subprocess.Popen(  # noqa: S603 - fixed interpreter and script, no shell
            [_runtime_python(), str(BOOTSTRAP)],
            env=env,
            cwd=self._env["LAMBDA_TASK_ROOT"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._process = process
        _remember(process.pid)
        threading.Thread(
            target=self._pump,
            args=(process, endpoint.startup_future),
            daemon=True,
            name=f"lambda-process-{self.id}",
        ).start()
        endpoint.wait_for_startup()

    def _pump(self, process: subprocess.Popen[bytes], startup: Future[bool] | None) -> None:
        """Collect the process's output; report a death the protocol would otherwise miss."""
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            with self._log_lock:
                self._log_lines.append(line)
            LOG.debug("[lambda %s] %s", self.id, line)
        code = process.wait()
        if self._stopping or process is not self._process:
            return
        message = f"Runtime exited with error: exit status {code}"
        if startup is not None and not startup.done():
            startup.set_exception(
                StatusErrorException(
                    "Environment startup failed",
                    payload=_error_payload("Runtime.ExitError", message),
                )
            )
            return
        pending = self.executor_endpoint.invocation_future
        if pending is not None and not pending.done():
            pending.set_result(
                InvocationResult(
                    request_id="",
                    payload=_error_payload("Runtime.ExitError", f"Error: {message}"),
                    is_error=True,
                    logs=self._recent_logs(),
                )
            )

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        _forget(process.pid)
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        self._stopping = True
        self._kill()
        try:
            self.executor_endpoint.shutdown()
        except Exception as error:  # noqa: BLE001 - mirrors the Docker executor: stop must not raise
            LOG.debug("error while stopping executor endpoint %s: %s", self.id, error)

    # --- invoke ----------------------------------------------------------------------------
    def invoke(self, payload: dict[str, str]) -> InvocationResult:
        with self._invoke_lock:
            if self._process is None or self._process.poll() is not None:
                self._spawn()  # died after its last invoke: cold start again, as Lambda does
            endpoint = self.executor_endpoint
            endpoint.invocation_future = Future()
            endpoint.logs = None
            request_id = payload["invoke-id"]
            timeout = float(self.function_version.config.timeout)
            with self._log_lock:
                mark = len(self._log_lines)
            response = requests.post(
                f"http://{LOOPBACK}:{endpoint.container_port}/invoke",
                json=payload,
                proxies={"http": "", "https": ""},
                timeout=10,
            )
            if not response.ok:
                raise LambdaRuntimeException(
                    f"execution environment {self.id} refused the invoke: HTTP {response.status_code}"
                )
            started = time.monotonic()
            try:
                result = endpoint.invocation_future.result(timeout=timeout)
            except FutureTimeout:
                elapsed = time.monotonic() - started
                LOG.info("lambda %s timed out after %.2f s; restarting its process", self.id, elapsed)
                with self._log_lock:
                    partial = list(self._log_lines)[mark:]
                message = f"RequestId: {request_id} Error: Task timed out after {timeout:.2f} seconds"
                self._kill()
                try:
                    self._spawn()  # a fresh environment for the next invoke, as Lambda does
                except Exception as error:  # noqa: BLE001 - the next invoke retries the spawn
                    LOG.warning("lambda %s did not restart after its timeout: %s", self.id, error)
                logs = "\n".join([*partial, f"{message}", ""])
                return InvocationResult(
                    request_id=request_id,
                    payload=_error_payload("Sandbox.Timedout", message),
                    is_error=True,
                    logs=logs,
                )
            if not result.request_id:
                result.request_id = request_id
            return result

    # --- addresses and logs ----------------------------------------------------------------
    def get_address(self) -> str:
        return LOOPBACK

    def get_endpoint_from_executor(self) -> str:
        return LOOPBACK

    def get_runtime_endpoint(self) -> str:
        port = config.GATEWAY_LISTEN[0].port
        return f"http://{LOOPBACK}:{port}{self.executor_endpoint.get_endpoint_prefix()}"

    def _recent_logs(self) -> str:
        with self._log_lock:
            return "\n".join(self._log_lines)

    def get_logs(self) -> str:
        return self._recent_logs()

    # --- versions --------------------------------------------------------------------------
    @classmethod
    def prepare_version(cls, function_version: FunctionVersion) -> None:
        if function_version.config.code:
            function_version.config.code.prepare_for_execution()
        for layer in function_version.config.layers or []:
            if layer.code:
                layer.code.prepare_for_execution()

    @classmethod
    def cleanup_version(cls, function_version: FunctionVersion) -> None:
        """Nothing to clean: the unzipped code belongs to LocalStack's code store."""

    @classmethod
    def validate_environment(cls) -> bool:
        try:
            _runtime_python()
        except LambdaRuntimeException as error:
            LOG.warning("process executor: %s", error)
            return False
        return True
