"""Names the control plane derives (alarm names, execution names), in one place."""

import hashlib
import re
from typing import Literal

from vsa_core.errors import InvalidEventError

# pydantic matches patterns with Rust regex, where "$" is the very end (no trailing newline)
ARRAY_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{1,30}[a-z0-9]$"
AlarmKind = Literal["high", "low"]
_ALARM_NAME = re.compile(r"vsa-(?P<array>[a-z0-9][a-z0-9-]{1,30}[a-z0-9])-iops-(?P<kind>high|low)")


def iops_alarm_name(array_id: str, kind: AlarmKind) -> str:
    """``vsa-<array>-iops-high`` (scale out) or ``vsa-<array>-iops-low`` (scale in)."""
    return f"vsa-{array_id}-iops-{kind}"


def match_iops_alarm_name(alarm_name: str) -> tuple[str, AlarmKind] | None:
    """The array id and alarm kind encoded in an IOPS alarm name, or None for any other alarm
    (e.g. the stack's own ``<stack>-backup-failed``, which starts ``vsa-`` too)."""
    match = _ALARM_NAME.fullmatch(alarm_name)  # fullmatch: '$' would accept a trailing newline
    if match is None:
        return None
    kind: AlarmKind = "high" if match["kind"] == "high" else "low"
    return match["array"], kind


def parse_iops_alarm_name(alarm_name: str) -> tuple[str, AlarmKind]:
    """The array id and alarm kind encoded in an IOPS alarm name."""
    parsed = match_iops_alarm_name(alarm_name)
    if parsed is None:
        raise InvalidEventError(
            f"alarm {alarm_name!r} is not a VSA IOPS alarm (expected vsa-<arrayId>-iops-high|low)"
        )
    return parsed


def scale_execution_name(array_id: str, alarm_arn: str, state_timestamp: str) -> str:
    """A Step Functions execution name unique per alarm state change.

    CloudWatch may deliver one state change more than once; the same change always maps to the
    same name, and Step Functions refuses a second execution of that name, so repeated events
    start one workflow. Valid characters only, at most 80.
    """
    digest = hashlib.sha256(f"{alarm_arn}|{state_timestamp}".encode()).hexdigest()[:20]
    return f"scale-{array_id}-{digest}"


def group_name(array_id: str) -> str:
    """The array's controller Auto Scaling group."""
    return f"vsa-{array_id}-controllers"


_GROUP_NAME = re.compile(r"vsa-(?P<array>[a-z0-9][a-z0-9-]{1,30}[a-z0-9])-controllers")


def group_array_id(name: str) -> str | None:
    """The array id of a controller group's name (``group_name``), or None for any other group."""
    match = _GROUP_NAME.fullmatch(name)
    return match["array"] if match else None


def launch_template_name(array_id: str) -> str:
    """The launch template the control plane creates when the spec gives instance settings."""
    return f"vsa-{array_id}-controller"


def launch_hook_name(array_id: str) -> str:
    """Launch lifecycle hook: holds a new controller until it is bootstrapped (or abandoned)."""
    return f"vsa-{array_id}-bootstrap"


def terminate_hook_name(array_id: str) -> str:
    """Terminate lifecycle hook: holds a leaving controller until hosts have drained it."""
    return f"vsa-{array_id}-drain"


def backup_schedule_name(array_id: str) -> str:
    """The EventBridge Scheduler schedule of the array's backup policy."""
    return f"vsa-{array_id}-backup"


def owned_volume_name(array_id: str, name: str) -> str:
    """The ``Name`` tag of a volume the control plane created for the array."""
    return f"vsa-{array_id}-{name}"


def delete_execution_name(array_id: str, version: int) -> str:
    """The DeleteArray execution for one DELETE of one version of the array: a repeated DELETE
    maps to the same name, so Step Functions starts it once."""
    return f"delete-{array_id}-v{version}"


def reconcile_execution_name(array_id: str, version: int) -> str:
    """The ReconcileArray execution for one stored version of the array's spec: a retried PUT
    maps to the same name (Step Functions starts it once)."""
    return f"reconcile-{array_id}-v{version}"


SLOT_PREFIX = "SLOT#"
INSTANCE_INDEX = "instances"
"""The registry's index of controller slots by instance id (``instanceId`` → ``pk``, ``sk``)."""
SLOTS = 16
"""A controller's slot: 0..15 (io2 Multi-Attach: at most 16 controllers per array)."""


def slot_key(slot: int) -> str:
    """``SLOT#03``: the registry sort key of a controller slot."""
    if not 0 <= slot < SLOTS:
        raise ValueError(f"slot {slot} is outside 0..{SLOTS - 1}")
    return f"{SLOT_PREFIX}{slot:02d}"


def slot_of_key(key: str) -> int:
    if not key.startswith(SLOT_PREFIX):
        raise ValueError(f"{key!r} is not a slot key")
    return int(key.removeprefix(SLOT_PREFIX))
