"""What the hosts and the workflow report back, read (pure): freeze-io / thaw-io's JSON report
lines, why an SSM command did not succeed, each host's freeze window, a caught workflow error as
one sentence."""

import json
from collections.abc import Mapping, Sequence
from typing import Any

from vsa_core.backups.sets import HostFreeze, host_freeze


def freeze_key(backup_id: str, instance_id: str) -> str:
    """freeze-io's BackupId on one host: names its watchdog, state and log in StateDir. The host
    is in it so two sandbox nodes of the local cloud sharing one machine never share a state
    file (and a host's log names the set and itself)."""
    return f"{backup_id}.{instance_id}"


def parse_report(stdout: str | None) -> dict[str, Any] | None:
    """The JSON report a host document prints as its last stdout line (None if there is none)."""
    for line in reversed((stdout or "").strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        return value if isinstance(value, dict) else None
    return None


def command_error(result: Mapping[str, Any] | None, what: str) -> str | None:
    """Why an SSM command of the workflow did not succeed (None when it did)."""
    if result is None:
        return f"{what}: never ran"
    status = result.get("status", "Unknown")
    if status == "Success":
        return None
    report = parse_report(result.get("stdout"))
    reason = (report or {}).get("reason") or (result.get("stderr") or "").strip()[-300:] or "no output"
    return f"{what}: {status}: {reason}"


def host_freezes(
    freezes: Sequence[Mapping[str, Any]], thaws: Sequence[Mapping[str, Any]]
) -> tuple[HostFreeze, ...]:
    thawed = {t.get("instanceId"): t for t in thaws}
    hosts = []
    for result in freezes:
        instance_id = str(result.get("instanceId"))
        thaw = thawed.get(instance_id)
        errors = [e for e in (command_error(result, "freeze-io"), command_error(thaw, "thaw-io")) if e]
        freeze_report = parse_report(result.get("stdout"))
        thaw_report = parse_report(thaw.get("stdout")) if thaw else None
        hosts.append(
            host_freeze(
                instance_id,
                freeze_report,
                thaw_report,
                # the reports say why themselves; SSM's word only when a report is missing
                error="; ".join(errors)
                if errors and (freeze_report is None or thaw_report is None)
                else None,
            )
        )
    return tuple(hosts)


def error_message(error: Mapping[str, Any] | None) -> str:
    """A Step Functions caught error ``{Error, Cause}`` as one sentence (a Lambda's Cause is JSON)."""
    if not error:
        return "the workflow failed"
    name, cause = str(error.get("Error", "Error")), error.get("Cause")
    try:
        parsed = json.loads(cause) if isinstance(cause, str) else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and parsed.get("errorMessage"):
        return f"{parsed.get('errorType', name)}: {parsed['errorMessage']}"
    return f"{name}: {cause}" if cause else name
