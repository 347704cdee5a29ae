"""Capacity planning: how many controllers an array needs for a given IOPS demand. Pure."""

import math
from dataclasses import asdict, dataclass
from typing import Any

from vsa_core.model import MULTI_ATTACH_LIMIT, ArraySpec


@dataclass(frozen=True)
class ScaleDecision:
    """A decision and everything it was made from, so an operator can check it."""

    array_id: str
    demand_iops: float
    current_controllers: int
    needed_controllers: int
    desired_controllers: int
    min_controllers: int
    max_controllers: int
    per_controller_iops: int
    target_utilisation: float
    action: str  # "scale-out" | "scale-in" | "hold"
    reason: str
    under_provisioned: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def controllers_needed(demand_iops: float, per_controller_iops: int, target_utilisation: float) -> int:
    """ceil(demand / (per-controller IOPS x target utilisation)); 0 for no demand."""
    if demand_iops <= 0:
        return 0
    return math.ceil(demand_iops / (per_controller_iops * target_utilisation))


def plan(spec: ArraySpec, demand_iops: float, current_controllers: int) -> ScaleDecision:
    """Desired controllers for ``demand_iops``.

    Clamped to [min, max] (max never above 16); scale-in removes one controller at a time
    (straight to max when max was lowered below the running count) and never goes below what
    current demand needs.
    """
    if not math.isfinite(demand_iops) or demand_iops < 0:
        raise ValueError(f"demand must be a non-negative number of IOPS, got {demand_iops}")
    needed = controllers_needed(demand_iops, spec.per_controller_iops, spec.target_utilisation)
    ceiling = min(spec.max_controllers, MULTI_ATTACH_LIMIT)
    target = max(spec.min_controllers, min(needed, ceiling))
    under = needed > ceiling
    if target > current_controllers:
        desired, action = target, "scale-out"
        reason = f"demand {demand_iops:,.0f} IOPS needs {needed} controller(s), {current_controllers} running"
        if under:
            reason += f"; capped at maxControllers={ceiling}, the array stays under-provisioned"
    elif target < current_controllers:
        # one controller at a time, but never above the ceiling (maxControllers may have been lowered)
        desired, action = max(target, min(current_controllers - 1, ceiling)), "scale-in"
        reason = (
            f"demand {demand_iops:,.0f} IOPS needs {needed} controller(s), {current_controllers} running; "
            "scale in one controller at a time"
        )
        if target == spec.min_controllers and needed < spec.min_controllers:
            reason += f" (floor minControllers={spec.min_controllers})"
        if under:
            reason += f"; maxControllers={ceiling} was lowered below demand: under-provisioned"
    else:
        desired, action = current_controllers, "hold"
        reason = f"demand {demand_iops:,.0f} IOPS is served by {current_controllers} controller(s)"
        if under:
            reason += f"; needs {needed} but maxControllers={ceiling}: under-provisioned"
    return ScaleDecision(
        array_id=spec.array_id,
        demand_iops=demand_iops,
        current_controllers=current_controllers,
        needed_controllers=needed,
        desired_controllers=desired,
        min_controllers=spec.min_controllers,
        max_controllers=ceiling,
        per_controller_iops=spec.per_controller_iops,
        target_utilisation=spec.target_utilisation,
        action=action,
        reason=reason,
        under_provisioned=under,
    )
