"""Names the control plane derives (alarm names, execution names), in one place.

Every name of a resource that lives in the account beside other deployments' (groups, launch
templates, hooks, alarms, schedules, secrets, metric namespaces) starts with the deployment's
name (``deployment()``), so two deployments in one account and region never share a name, a
wildcard in a policy or an event pattern. A deployment name has no hyphen, so ``<deployment>-``
is never a prefix of another deployment's names.
"""

import hashlib
import os
import re
from typing import Literal

from vsa_core.errors import InvalidEventError

# pydantic matches patterns with Rust regex, where "$" is the very end (no trailing newline)
ARRAY_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{1,30}[a-z0-9]$"
AlarmKind = Literal["high", "low"]
DEPLOYMENT_ENV = "VSA_DEPLOYMENT_NAME"
DEFAULT_DEPLOYMENT = "vsa"
DEPLOYMENT_PATTERN = re.compile(r"[a-z][a-z0-9]{0,9}")
"""The template's ``DeploymentName``: a lowercase letter, then up to 9 letters or digits. No
hyphen (see the module's docstring); short, so every name keeps inside AWS's limits (a
schedule's 64 characters: 10 + 1 + 32 + 7)."""
_ARRAY = r"(?P<array>[a-z0-9][a-z0-9-]{1,30}[a-z0-9])"


def deployment() -> str:
    """This deployment's name: the template's ``DeploymentName``, given to every function as
    ``VSA_DEPLOYMENT_NAME``.

    Inside a Lambda function (``AWS_LAMBDA_FUNCTION_NAME`` set) an unset name is an error: the
    function would otherwise act on the default deployment's arrays. Outside one it is ``vsa``,
    the default deployment's: the CLI, the tools and the tests name that deployment's resources
    without configuring it."""
    name = os.environ.get(DEPLOYMENT_ENV)
    if not name:
        if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
            raise ValueError(f"{DEPLOYMENT_ENV} is missing or empty: a function names its resources after it")
        name = DEFAULT_DEPLOYMENT
    if DEPLOYMENT_PATTERN.fullmatch(name) is None:
        raise ValueError(
            f"{DEPLOYMENT_ENV}={name!r} is not a deployment name: a lowercase letter, then up to 9 "
            "lowercase letters or digits (no hyphen)"
        )
    return name


def arrays_namespace() -> str:
    """The CloudWatch namespace of this deployment's per-array metrics (dimension ``ArrayId``):
    ``VSA/Arrays`` for the default deployment, ``VSA/<deployment>/Arrays`` for any other, so two
    deployments' arrays of the same id never feed each other's alarms. (The deployment's own
    metrics carry its stack as a ``Deployment`` dimension instead.)"""
    name = deployment()
    return "VSA/Arrays" if name == DEFAULT_DEPLOYMENT else f"VSA/{name}/Arrays"


def iops_alarm_name(array_id: str, kind: AlarmKind) -> str:
    """``<deployment>-<array>-iops-high`` (scale out) or ``…-iops-low`` (scale in)."""
    return f"{deployment()}-{array_id}-iops-{kind}"


def match_iops_alarm_name(alarm_name: str) -> tuple[str, AlarmKind] | None:
    """The array id and alarm kind encoded in an IOPS alarm name, or None for any other alarm
        (e.g. the stack's own ``<stack>-backup-failed``, which starts ``vsa-`` too), and for another
    deployment's."""
    alarm = re.compile(rf"{deployment()}-{_ARRAY}-iops-(?P<kind>high|low)")
    match = alarm.fullmatch(alarm_name)  # fullmatch: '$' would accept a trailing newline
    if match is None:
        return None
    kind: AlarmKind = "high" if match["kind"] == "high" else "low"
    return match["array"], kind


def parse_iops_alarm_name(alarm_name: str) -> tuple[str, AlarmKind]:
    """The array id and alarm kind encoded in an IOPS alarm name."""
    parsed = match_iops_alarm_name(alarm_name)
    if parsed is None:
        raise InvalidEventError(
            f"alarm {alarm_name!r} is not one of this deployment's IOPS alarms "
            f"(expected {deployment()}-<arrayId>-iops-high|low)"
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
    return f"{deployment()}-{array_id}-controllers"


def group_array_id(name: str) -> str | None:
    """The array id of a controller group's name (``group_name``), or None for any other group,
    another deployment's included."""
    match = re.compile(rf"{deployment()}-{_ARRAY}-controllers").fullmatch(name)
    return match["array"] if match else None


def launch_template_name(array_id: str) -> str:
    """The launch template the control plane creates when the spec gives instance settings."""
    return f"{deployment()}-{array_id}-controller"


def launch_hook_name(array_id: str) -> str:
    """Launch lifecycle hook: holds a new controller until it is bootstrapped (or abandoned)."""
    return f"{deployment()}-{array_id}-bootstrap"


def terminate_hook_name(array_id: str) -> str:
    """Terminate lifecycle hook: holds a leaving controller until hosts have drained it."""
    return f"{deployment()}-{array_id}-drain"


def backup_schedule_name(array_id: str) -> str:
    """The EventBridge Scheduler schedule of the array's backup policy."""
    return f"{deployment()}-{array_id}-backup"


def drill_schedule_name(array_id: str) -> str:
    """The EventBridge Scheduler schedule of the array's restore drills."""
    return f"{deployment()}-{array_id}-drill"


def owned_volume_name(array_id: str, name: str) -> str:
    """The ``Name`` tag of a volume the control plane created for the array."""
    return f"{deployment()}-{array_id}-{name}"


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
