"""The planner's tuning: the inputs ScaleArray (``vsa_core.scaling.aws_plan``) and the simulator
(``vsa_core.scaling.simulator``, the benchmark) both give ``planner.PlanInput``, so production never
imports the simulator and both measure the same planner (pure)."""

from typing import TypedDict

from vsa_core.alarm_tuning import LOW_EVALUATION_PERIODS, SCALE_IN_HYSTERESIS
from vsa_core.arrays.spec import ArraySpec

DEFAULT_BOOT_MINUTES = 5
"""Launch, attach every volume, configure the target, connect a path from every host."""


class Tuning(TypedDict):
    """``PlanInput``'s tuning fields, by name (``PlanInput(..., **planner_inputs(spec))``)."""

    lead_minutes: float
    scale_in_headroom: float
    sustained_minutes: int


def planner_inputs(spec: ArraySpec) -> Tuning:
    """The planner's tuning inputs, the same in ScaleArray (``vsa_core.scaling.aws_plan``) and the
    simulator: a trend lead of the boot allowance + the longer of it and the scale-out cooldown
    (the product's own ``DEFAULT_BOOT_MINUTES``: it cannot know how long an instance boots, so a
    replay of another boot time keeps this lead), the low alarm's margin, and the low alarm's
    window as the minutes a scale-in must still serve."""
    boot = DEFAULT_BOOT_MINUTES
    return {
        "lead_minutes": boot + max(boot, spec.scale_out_cooldown_seconds / 60),
        "scale_in_headroom": SCALE_IN_HYSTERESIS,
        "sustained_minutes": LOW_EVALUATION_PERIODS,
    }
