"""Controller lifecycle events (pure: the models and the naming) → BootstrapController /
DrainController, started once per event.

- ``EC2 Instance-launch Lifecycle Action`` (a VSA controller group's bootstrap hook) →
  BootstrapController, named after the instance and the lifecycle action token;
- ``EC2 Instance-terminate Lifecycle Action`` (the drain hook) → DrainController, same naming;
- ``EC2 Instance State-change Notification`` (stopped, shutting-down, terminated: a controller
  lost without a lifecycle action) → DrainController, named after the instance and the state.
  EC2 announces every instance of the region and the event names only the instance: the
  trigger starts the drain only for an instance that holds a slot (``lost_instance`` here, the
  registry's ``instances`` index in ``aws_lifecycle``); any other starts nothing.

EventBridge delivers at least once: the same event always maps to the same execution name, and
Step Functions refuses a second execution of a name (``ExecutionAlreadyExists``), so a
redelivered event starts nothing.
"""

import hashlib
from typing import Any, Literal

from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import BaseModel, ConfigDict, Field

from vsa_core.errors import InvalidEventError

LAUNCH = "EC2 Instance-launch Lifecycle Action"
TERMINATE = "EC2 Instance-terminate Lifecycle Action"
STATE_CHANGE = "EC2 Instance State-change Notification"


class LifecycleDetail(BaseModel):
    # each event validates one of the two details: built at first use (defer_build), not at import
    model_config = ConfigDict(extra="allow", defer_build=True)

    instance_id: str = Field(alias="EC2InstanceId", pattern=r"^i-[0-9a-f]{8,17}$")
    token: str = Field(alias="LifecycleActionToken", min_length=1)
    hook: str = Field(alias="LifecycleHookName", min_length=1)
    group: str = Field(alias="AutoScalingGroupName", min_length=1)


class StateChangeDetail(BaseModel):
    model_config = ConfigDict(extra="allow", defer_build=True)

    instance_id: str = Field(alias="instance-id", pattern=r"^i-[0-9a-f]{8,17}$")
    state: str


class ControllerEvent(EventBridgeModel):
    detail: dict[str, Any]


def execution(event: ControllerEvent) -> tuple[Literal["bootstrap", "drain"], str]:
    """Which workflow and the execution name for ``event`` (same event, same name)."""
    kind = event.detail_type
    if kind in (LAUNCH, TERMINATE):
        lifecycle = LifecycleDetail.model_validate(event.detail)
        digest = hashlib.sha256(lifecycle.token.encode()).hexdigest()[:16]
        workflow: Literal["bootstrap", "drain"] = "bootstrap" if kind == LAUNCH else "drain"
        return workflow, f"{workflow}-{lifecycle.instance_id}-{digest}"
    if kind == STATE_CHANGE:
        change = StateChangeDetail.model_validate(event.detail)
        return "drain", f"lost-{change.instance_id}-{change.state}"
    raise InvalidEventError(f"not a controller event: detail-type {kind!r}")


def lost_instance(event: ControllerEvent) -> StateChangeDetail | None:
    """The instance and state of an EC2 state change (a controller lost, or not ours at all);
    None for a lifecycle action (which EventBridge matched by our groups' names already)."""
    if event.detail_type != STATE_CHANGE:
        return None
    return StateChangeDetail.model_validate(event.detail)


def lifecycle_group(event: ControllerEvent) -> str | None:
    """The Auto Scaling group of a lifecycle action, or None for an EC2 state change."""
    if event.detail_type not in (LAUNCH, TERMINATE):
        return None
    return LifecycleDetail.model_validate(event.detail).group
