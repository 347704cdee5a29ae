"""Run Command on local managed nodes: one invocation per node, run as the SSM agent runs it.

Per invocation a thread waits for delivery (the node ``Online``) until the command expires
(``Delivery Timed Out``), or ends it ``Undeliverable`` when the node is deregistered or its
instance terminated meanwhile. Each ``aws:runShellScript`` step is written to ``_script.sh`` in an
orchestration directory (outside the sandbox) and run as the Linux agent does, ``sh -c
<script>``, in its own process group, with the sandbox as working directory and this
environment:

* ``VSA_NODE_ROOT``       the node's sandbox directory (its "root file system"),
* ``VSA_INSTANCE_ID``     the instance id,
* ``AWS_SSM_INSTANCE_ID`` and ``AWS_SSM_REGION_NAME``, as the real agent sets them,
* ``AWS_ENDPOINT_URL``, ``AWS_REGION``/``AWS_DEFAULT_REGION``, and, when the instance has an
  instance profile, its role's credentials (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
  ``AWS_SESSION_TOKEN``; assumed for each invocation, session name = the instance id:
  ``instance_roles.deliver``), so a script calls the local cloud as the instance's programs call
  AWS, within the role's policies, its requests carrying ``ec2:SourceInstanceARN``. An instance
  without an instance profile gets no credentials (on AWS the CLI then says "Unable to locate
  credentials"); ``AWS_EC2_METADATA_DISABLED=true`` in every case (there is no instance metadata
  service here: the SDKs must not look for one at 169.254.169.254),
* ``HOME`` the sandbox, ``PATH`` the system's, ``TMPDIR`` LocalStack's.

A step that runs past its ``timeoutSeconds`` (``executionTimeout``), or is cancelled, has its
process group killed with SIGKILL and reports exit code 137, as the agent does. The first step
that does not succeed ends the invocation; later steps are reported skipped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import re
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from localstack import config

from vsa_localcloud import eventbus, instance_roles, timings
from vsa_localcloud.run_dir import data_dir
from vsa_localcloud.ssm_documents import RUN_SHELL_SCRIPT, Step
from vsa_localcloud.ssm_nodes import CHANGED, LOCK, instance_gone, node, now

LOG = logging.getLogger(__name__)

STDOUT_LIMIT = 24_000  # GetCommandInvocation StandardOutputContent: the first 24,000 characters
STDERR_LIMIT = 8_000  # StandardErrorContent: the first 8,000 characters
OUTPUT_LIMIT = 2_500  # ListCommandInvocations CommandPlugins[].Output: at most 2,500 characters
KILLED_EXIT_CODE = 137  # the Linux agent's exit code for a command stopped by timeout or cancel
POLL_SECONDS = 0.1
TERMINAL = ("Success", "Failed", "TimedOut", "Cancelled")


def iso(moment: datetime | None) -> str:
    """AWS's event and invocation timestamp format: 2016-07-10T21:51:30.049Z."""
    if moment is None:
        return ""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


instance_arn = instance_roles.instance_arn


@dataclass
class Plugin:
    name: str
    status: str = "Pending"
    details: str = "Pending"
    code: int = -1
    stdout: str = ""
    stderr: str = ""
    started: datetime | None = None
    ended: datetime | None = None

    def output(self) -> str:
        """The agent's combined plugin output, as CommandPlugins[].Output shows it."""
        text = self.stdout + (f"\n----------ERROR-------\n{self.stderr}" if self.stderr else "")
        return text[:OUTPUT_LIMIT]

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {
            "Name": self.name,
            "Status": self.status,
            "StatusDetails": self.details,
            "ResponseCode": self.code,
            "Output": self.output(),
            "StandardOutputUrl": "",
            "StandardErrorUrl": "",
            "OutputS3Region": "",
            "OutputS3BucketName": "",
            "OutputS3KeyPrefix": "",
        }
        if self.started:
            described["ResponseStartDateTime"] = self.started
        if self.ended:
            described["ResponseFinishDateTime"] = self.ended
        return described


@dataclass
class Invocation:
    command: Command
    instance_id: str
    plugins: list[Plugin]
    status: str = "Pending"
    details: str = "Pending"
    cancel: bool = False
    process: subprocess.Popen[bytes] | None = None
    credentials: dict[str, str] = field(default_factory=dict)  # the instance role's, if any

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    @property
    def code(self) -> int:
        ran = [p for p in self.plugins if p.started]
        return ran[-1].code if ran else -1

    def result(self, plugin: Plugin | None) -> dict[str, Any]:
        """GetCommandInvocation: one plugin's result, or the invocation's when it has one step or
        no plugin was named (outputs then joined in step order)."""
        plugins = [plugin] if plugin else self.plugins
        started = [p.started for p in plugins if p.started]
        ended = [p.ended for p in plugins if p.ended]
        start, end = (min(started) if started else None), (max(ended) if ended else None)
        elapsed = f"PT{(end - start).total_seconds():.3f}S" if start and end else ""
        command = self.command
        return {
            "CommandId": command.command_id,
            "InstanceId": self.instance_id,
            "Comment": command.comment,
            "DocumentName": command.document_name,
            "DocumentVersion": command.document_version,
            "PluginName": plugin.name if plugin else self.plugins[0].name,
            "ResponseCode": plugin.code if plugin else self.code,
            "ExecutionStartDateTime": iso(start),
            "ExecutionElapsedTime": elapsed,
            "ExecutionEndDateTime": iso(end),
            "Status": plugin.status if plugin else self.status,
            "StatusDetails": plugin.details if plugin else self.details,
            "StandardOutputContent": "".join(p.stdout for p in plugins)[:STDOUT_LIMIT],
            "StandardOutputUrl": "",
            "StandardErrorContent": "".join(p.stderr for p in plugins)[:STDERR_LIMIT],
            "StandardErrorUrl": "",
            "CloudWatchOutputConfig": {"CloudWatchLogGroupName": "", "CloudWatchOutputEnabled": False},
        }

    def describe(self, details: bool) -> dict[str, Any]:
        command = self.command
        described: dict[str, Any] = {
            "CommandId": command.command_id,
            "InstanceId": self.instance_id,
            "InstanceName": "",
            "Comment": command.comment,
            "DocumentName": command.document_name,
            "DocumentVersion": command.document_version,
            "RequestedDateTime": command.requested,
            "Status": self.status,
            "StatusDetails": self.details,
            "TraceOutput": "",
            "StandardOutputUrl": "",
            "StandardErrorUrl": "",
            "ServiceRole": "",
            "NotificationConfig": command.notification_config,
            "CloudWatchOutputConfig": {"CloudWatchLogGroupName": "", "CloudWatchOutputEnabled": False},
        }
        if details:
            described["CommandPlugins"] = [p.describe() for p in self.plugins]
        return described


@dataclass
class Command:
    account_id: str
    region: str
    document_name: str
    document_version: str
    steps: list[Step]
    parameters: dict[str, list[str]]
    instance_ids: list[str]
    targets: list[dict[str, Any]]
    timeout_seconds: int
    comment: str = ""
    max_concurrency: str = "50"
    max_errors: str = "0"
    notification_config: dict[str, Any] = field(
        default_factory=lambda: {"NotificationArn": "", "NotificationEvents": [], "NotificationType": ""}
    )
    command_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    requested: datetime = field(default_factory=now)
    invocations: dict[str, Invocation] = field(default_factory=dict)
    status: str = "Pending"
    details: str = "Pending"
    cancel: bool = False

    @property
    def expires(self) -> datetime:
        """ExpiresAfter: the delivery timeout plus the execution timeouts. A command not delivered
        by then ends Delivery Timed Out (the documented Pending -> Delivery Timed Out rule)."""
        execution = sum(step.timeout for step in self.steps)
        return self.requested + timedelta(seconds=self.timeout_seconds + execution)

    def counts(self) -> dict[str, int]:
        invocations = list(self.invocations.values())
        return {
            "TargetCount": len(invocations),
            "CompletedCount": sum(i.done for i in invocations),
            "ErrorCount": sum(i.details in ("Failed", "Execution Timed Out") for i in invocations),
            "DeliveryTimedOutCount": sum(i.details == "Delivery Timed Out" for i in invocations),
        }

    def _allowed_errors(self) -> int:
        text = self.max_errors.strip() or "0"
        if text.endswith("%"):
            return int(len(self.invocations) * int(text[:-1]) / 100)
        return int(text)

    def aggregate(self) -> tuple[str, str]:
        """The command's Status and StatusDetails from its invocations ("Understanding command
        statuses"): errors (Failed, Execution Timed Out) beyond MaxErrors fail it; so do
        delivery timeouts beyond MaxErrors (Delivery Timed Out); otherwise Success, or
        Incomplete when some invocation did not succeed."""
        invocations = list(self.invocations.values())
        if any(not i.done for i in invocations):
            if self.cancel:
                return "Cancelling", "Cancelling"
            if all(i.status == "Pending" for i in invocations):
                return "Pending", "Pending"
            return "InProgress", "In Progress"
        if self.cancel and any(i.status == "Cancelled" for i in invocations):
            return "Cancelled", "Cancelled"
        counts = self.counts()
        allowed = self._allowed_errors()
        if counts["ErrorCount"] > allowed:
            if any(i.details == "Failed" for i in invocations):
                return "Failed", "Failed"
            return "TimedOut", "Execution Timed Out"
        if counts["DeliveryTimedOutCount"] > allowed:
            return "TimedOut", "Delivery Timed Out"
        if all(i.status == "Success" for i in invocations):
            return "Success", "Success"
        return "Success", "Incomplete"

    def describe(self) -> dict[str, Any]:
        return {
            "CommandId": self.command_id,
            "DocumentName": self.document_name,
            "DocumentVersion": self.document_version,
            "Comment": self.comment,
            "ExpiresAfter": self.expires,
            "Parameters": self.parameters,
            "InstanceIds": self.instance_ids,
            "Targets": self.targets,
            "RequestedDateTime": self.requested,
            "Status": self.status,
            "StatusDetails": self.details,
            "OutputS3Region": self.region,
            "OutputS3BucketName": "",
            "OutputS3KeyPrefix": "",
            "MaxConcurrency": self.max_concurrency,
            "MaxErrors": self.max_errors,
            **self.counts(),
            "ServiceRole": "",
            "NotificationConfig": self.notification_config,
            "CloudWatchOutputConfig": {"CloudWatchLogGroupName": "", "CloudWatchOutputEnabled": False},
            "TimeoutSeconds": self.timeout_seconds,
            "AlarmConfiguration": {"IgnorePollAlarmFailure": False, "Alarms": []},
            "TriggeredAlarms": [],
        }


COMMANDS: dict[str, Command] = {}


# --- events ---------------------------------------------------------------------------------
# Events are queued under LOCK (so they keep the order of the changes) and put on the bus by one
# thread outside it. AWS sends no event for Pending; it does for InProgress and every end state.
_EVENTS: queue.Queue[dict[str, Any]] = queue.Queue()


def _deliver_events() -> None:
    while True:
        event = _EVENTS.get()
        eventbus.emit(**event)


threading.Thread(target=_deliver_events, daemon=True, name="ssm-events").start()


def _invocation_event(invocation: Invocation) -> None:
    command = invocation.command
    _EVENTS.put(
        {
            "account_id": command.account_id,
            "region": command.region,
            "source": "aws.ssm",
            "detail_type": "EC2 Command Invocation Status-change Notification",
            "resources": [instance_arn(command.account_id, command.region, invocation.instance_id)],
            "detail": {
                "command-id": command.command_id,
                "document-name": command.document_name,
                "instance-id": invocation.instance_id,
                "requested-date-time": iso(command.requested),
                "status": invocation.status,
            },
        }
    )


def _command_event(command: Command) -> None:
    _EVENTS.put(
        {
            "account_id": command.account_id,
            "region": command.region,
            "source": "aws.ssm",
            "detail_type": "EC2 Command Status-change Notification",
            "resources": [instance_arn(command.account_id, command.region, i) for i in command.invocations],
            "detail": {
                "command-id": command.command_id,
                "document-name": command.document_name,
                "expire-after": iso(command.expires),
                "parameters": command.parameters,
                "requested-date-time": iso(command.requested),
                "status": command.status,
            },
        }
    )


def _set(invocation: Invocation, status: str, details: str | None = None) -> None:
    """Change an invocation's status (under LOCK), then its command's; emit the events."""
    if (invocation.status, invocation.details) == (status, details or status):
        return
    invocation.status, invocation.details = status, details or status
    if status != "Pending":
        _invocation_event(invocation)
    command = invocation.command
    aggregate = command.aggregate()
    if aggregate != (command.status, command.details):
        command.status, command.details = aggregate
        if command.status not in ("Pending", "Cancelling"):
            _command_event(command)
    CHANGED.notify_all()


def _end_pending(invocation: Invocation, status: str, details: str) -> None:
    for plugin in invocation.plugins:
        plugin.status, plugin.details = status, details
    _set(invocation, status, details)


# --- subprocesses ---------------------------------------------------------------------------
def _pid_dir() -> Path:
    """Live script PIDs are noted here (as the Lambda executor does), so a stop that had to
    kill LocalStack can still end the process groups it left behind."""
    return Path(os.environ.get("TMPDIR", "/tmp")) / "vsa-ssm-pids"  # noqa: S108


def _environment(invocation: Invocation, root: Path) -> dict[str, str]:
    command = invocation.command
    port = config.GATEWAY_LISTEN[0].port
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(root),
        "LANG": "C.UTF-8",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),  # noqa: S108
        "VSA_NODE_ROOT": str(root),
        "VSA_INSTANCE_ID": invocation.instance_id,
        "AWS_SSM_INSTANCE_ID": invocation.instance_id,
        "AWS_SSM_REGION_NAME": command.region,
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_REGION": command.region,
        "AWS_DEFAULT_REGION": command.region,
        "AWS_EC2_METADATA_DISABLED": "true",
        **invocation.credentials,
    }


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the script's process group, as the agent does on timeout or cancel. Only called
    by the thread that reaps the process, before it is reaped: the group is still ours."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _run_step(invocation: Invocation, plugin: Plugin, step: Step, root: Path) -> None:
    command = invocation.command
    work = data_dir() / "ssm-orchestration" / invocation.instance_id / command.command_id
    work = work / re.sub(r"[^A-Za-z0-9_.-]", "", step.name)
    work.mkdir(parents=True, exist_ok=True)
    plugin.started = now()
    if step.action != RUN_SHELL_SCRIPT:
        plugin.status, plugin.details, plugin.code = "Failed", "Failed", 1
        plugin.stderr = f"the local cloud runs {RUN_SHELL_SCRIPT} steps only, not {step.action}\n"
        plugin.ended = now()
        return
    # workingDirectory is taken inside the sandbox ("/" is the sandbox root)
    cwd = root / step.working_directory.lstrip("/") if step.working_directory else root
    if not cwd.is_dir():
        plugin.status, plugin.details, plugin.code = "Failed", "Failed", 1
        plugin.stderr = f"working directory {step.working_directory} does not exist\n"
        plugin.ended = now()
        return
    script = work / "_script.sh"
    script.write_text("\n".join(step.commands) + "\n")
    script.chmod(0o700)
    stdout_path, stderr_path = work / "stdout", work / "stderr"
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        with LOCK:
            if invocation.cancel:
                plugin.status = plugin.details = "Cancelled"
                plugin.ended = now()
                return
            process = subprocess.Popen(  # noqa: S603 - the agent's own invocation: sh -c <script>
                ["/bin/sh", "-c", str(script)],
                cwd=cwd,
                env=_environment(invocation, root),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
            invocation.process = process
        _pid_dir().mkdir(parents=True, exist_ok=True)
        (_pid_dir() / str(process.pid)).touch()
        deadline = time.monotonic() + step.timeout
        stopped = ""
        while process.poll() is None:
            if invocation.cancel:
                stopped = "Cancelled"
            elif time.monotonic() >= deadline:
                stopped = "TimedOut"
            if stopped:
                _kill_group(process)
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=POLL_SECONDS)
        (_pid_dir() / str(process.pid)).unlink(missing_ok=True)
        invocation.process = None
    plugin.ended = now()
    plugin.stdout = stdout_path.read_text(errors="replace")
    plugin.stderr = stderr_path.read_text(errors="replace")
    if stopped == "TimedOut":
        plugin.status, plugin.details, plugin.code = "TimedOut", "Execution Timed Out", KILLED_EXIT_CODE
    elif stopped == "Cancelled":
        plugin.status, plugin.details, plugin.code = "Cancelled", "Cancelled", KILLED_EXIT_CODE
    else:
        plugin.code = process.returncode
        plugin.status = plugin.details = "Success" if process.returncode == 0 else "Failed"


def _await_delivery(invocation: Invocation) -> Path | None:
    """Wait (under LOCK) until the node is online: its sandbox; None once the invocation ended."""
    command = invocation.command
    while True:
        managed = node(command.account_id, command.region, invocation.instance_id)
        if invocation.cancel:
            _end_pending(invocation, "Cancelled", "Cancelled")
            return None
        if managed is None or instance_gone(command.account_id, command.region, invocation.instance_id):
            _end_pending(invocation, "Failed", "Undeliverable")
            return None
        remaining = (command.expires - now()).total_seconds()
        # the agent picks the command up command_delivery seconds (latency profile) after it was sent
        undelivered = (command.requested - now()).total_seconds() + timings.current().command_delivery
        if managed.online and undelivered <= 0:
            return managed.root
        if managed.online and remaining > 0:
            CHANGED.wait(min(undelivered, remaining))
            continue
        if remaining <= 0:
            _end_pending(invocation, "TimedOut", "Delivery Timed Out")
            return None
        CHANGED.wait(min(remaining, 1.0))  # also re-checks the EC2 instance every second


def _run(invocation: Invocation) -> None:
    try:
        with CHANGED:
            root = _await_delivery(invocation)
            if root is None:
                return
            _set(invocation, "InProgress", "In Progress")
        # the instance role's credentials, as the node's programs find them in its instance
        # metadata (an STS call: outside LOCK)
        command = invocation.command
        invocation.credentials = (
            instance_roles.deliver(command.account_id, command.region, invocation.instance_id) or {}
        )
        failed: Plugin | None = None
        for plugin, step in zip(invocation.plugins, invocation.command.steps, strict=True):
            if failed is not None:
                # the agent stops at the first step that does not succeed
                plugin.status, plugin.details = "Cancelled", "Skipped"
                continue
            with LOCK:
                plugin.status, plugin.details = "InProgress", "In Progress"
            _run_step(invocation, plugin, step, root)
            if plugin.status != "Success":
                failed = plugin
        with CHANGED:
            if failed is None:
                _set(invocation, "Success")
            else:
                _set(invocation, failed.status, failed.details)
    except Exception:
        LOG.exception("invocation %s on %s failed", invocation.command.command_id, invocation.instance_id)
        with CHANGED:
            _set(invocation, "Failed", "Failed")


def start(command: Command, undeliverable: list[str]) -> dict[str, Any]:
    """Register the command and start one thread per invocation; the command as SendCommand
    answers it (Pending: described before any invocation starts)."""
    with CHANGED:
        COMMANDS[command.command_id] = command
        for instance_id in [*command.instance_ids, *undeliverable]:
            plugins = [Plugin(step.name) for step in command.steps]
            command.invocations.setdefault(instance_id, Invocation(command, instance_id, plugins))
        command.status, command.details = command.aggregate()
        for instance_id in undeliverable:
            _end_pending(command.invocations[instance_id], "Failed", "Undeliverable")
        described = command.describe()
    for invocation in list(command.invocations.values()):
        if not invocation.done:
            threading.Thread(
                target=_run, args=(invocation,), daemon=True, name=f"ssm-{command.command_id[:8]}"
            ).start()
    return described


def cancel(command: Command, instance_ids: list[str] | None) -> None:
    """CancelCommand: pending invocations end Cancelled at once; running scripts are killed by
    the thread that runs them within POLL_SECONDS."""
    with CHANGED:
        if instance_ids is None and any(not i.done for i in command.invocations.values()):
            command.cancel = True
        for invocation in command.invocations.values():
            if instance_ids is None or invocation.instance_id in instance_ids:
                invocation.cancel = True
        status = command.aggregate()
        if status != (command.status, command.details):
            command.status, command.details = status
            if command.status != "Cancelling":
                _command_event(command)
        CHANGED.notify_all()


def stop_all() -> None:
    """LocalStack is stopping: cancel every command, so every script's process group is killed."""
    with CHANGED:
        running = [i for c in COMMANDS.values() for i in c.invocations.values() if not i.done]
        for invocation in running:
            invocation.cancel = True
        CHANGED.notify_all()
    deadline = time.monotonic() + 5
    while any(i.process is not None for i in running) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
