"""ScaleArray's rules around the planner (pure): which controllers count as in flight, each alarm's
window, which clock a decision moves, the decision when demand is stale, and when a run's alarm
is re-armed (``rearm_after``: the one rule, used by ScaleArray and by the simulator alike)."""

from datetime import datetime, timedelta

from vsa_core.alarm_tuning import HIGH_EVALUATION_PERIODS, LOW_EVALUATION_PERIODS
from vsa_core.arrays.spec import ArraySpec
from vsa_core.scaling.events import ScaleRequest
from vsa_core.scaling.planner import ScaleDecision

MAX_DATA_AGE = timedelta(minutes=5)
"""The oldest demand a decision uses (the newest datapoint's minute, or an alarm's state change).
EBS publishes one-minute metrics a few minutes late (the newest minute GetMetricData returns is
typically 2-4 minutes old), so 5 minutes passes every normal delay; older means the data has
stopped (a volume detached, a custom demand metric whose publisher died, CloudWatch delayed) and
a decision on it would act on a past that may no longer hold. The one bound: ScaleArray's
PlanScale applies it to GetMetricData's newest datapoint and to the alarm's own."""

STALE_NAMESPACE = "VSA/Scaling"
STALE_METRIC = "StaleDecisions"
"""One datapoint (1) per ScaleArray run that held on stale data, per deployment (dimension
``Deployment``); the ``scaling-stale-data`` alarm fires when some run held on stale data in each
of 3 consecutive 5-minute periods (template.yaml: staleness that outlasts EBS's delays)."""


def data_age(newest: datetime, now: datetime) -> timedelta:
    """How old a datapoint (its minute's start) or a state change is at ``now``."""
    return now - newest


def is_stale(age: timedelta | None) -> bool:
    """Whether demand this old (None: no datapoint at all) is too old to decide on."""
    return age is None or age > MAX_DATA_AGE


def stale_reason(age: timedelta | None, window_minutes: int) -> str:
    """What a stale hold says: how old the newest datapoint is, or that there is none."""
    bound = int(MAX_DATA_AGE.total_seconds() // 60)
    if age is None:
        seen = f"no datapoint in the last {window_minutes} min"
    else:
        seen = f"newest datapoint {int(age.total_seconds() // 60)} min old"
    return f"stale: {seen} (a decision uses data at most {bound} min old): holding, not deciding"


REARM_AT_TARGET_FACTOR = 5
"""A run that leaves the array at what its demand needs re-arms its alarm after this many times
the base pause (5 minutes at the deployed 60 s): a safety net, not a loop."""

IN_FLIGHT = (
    "Pending",
    "Pending:Wait",
    "Pending:Proceed",
    "Terminating",
    "Terminating:Wait",
    "Terminating:Proceed",
)
EVALUATION_PERIODS = {"high": HIGH_EVALUATION_PERIODS, "low": LOW_EVALUATION_PERIODS}
SCALE_FIELDS = {"scale-out": "lastScaleOutAt", "scale-in": "lastScaleInAt", "hold": "lastHoldAt"}


def stale_decision(
    request: ScaleRequest, spec: ArraySpec, current: int, now: datetime, reason: str
) -> ScaleDecision:
    """No decision on stale data (``MAX_DATA_AGE``): hold, say why, and wait (``waiting``: the
    alarm is re-armed after the base pause) so a breach that still holds comes back as a fresh
    state change."""
    return ScaleDecision(
        array_id=spec.array_id,
        demand_iops=request.demand_iops or 0.0,
        current_controllers=current,
        needed_controllers=current,
        desired_controllers=current,
        min_controllers=spec.min_controllers,
        max_controllers=spec.max_controllers,
        per_controller_iops=spec.per_controller_iops,
        target_utilisation=spec.target_utilisation,
        action="hold",
        reason=reason,
        under_provisioned=False,
        waiting=True,
        now=now.isoformat(),
    )


def at_target(decision: ScaleDecision) -> bool:
    """The decision leaves the array at what its current demand needs, as far as [min, max]
    and the volumes allow: nothing in flight, nothing changed, and desired = clamp(needed) (a
    volume-bound array at the controllers that move its volumes' IOPS is at target: more would
    add none), or the forecast floor when it is higher."""
    ceiling = decision.max_controllers
    if decision.volume_controllers is not None:
        ceiling = min(ceiling, decision.volume_controllers)
    wanted = max(decision.min_controllers, min(decision.needed_controllers, ceiling))
    # the forecast floor's count is a target too: a hold at it is not off target
    wanted = max(wanted, min(decision.forecast_floor or 0, ceiling))
    return decision.action == "hold" and not decision.waiting and decision.desired_controllers == wanted


def rearm_after(decision: ScaleDecision | None, base_seconds: int) -> int:
    """Seconds after a ScaleArray run its alarm is set back to OK (SetAlarmState): always some.

    CloudWatch sends an event only on a change of state, so an alarm left in ALARM is never
    heard from again, whatever demand does next: every run re-arms the alarm that started it,
    and a breach that persists comes back as a fresh state change at the next evaluation. The
    rule is total: a run that scaled, waits (cooldown, a controller in flight, stale data), was
    skipped (``None``: the lock busy) or failed (``None``) re-arms after ``base_seconds`` (one
    evaluation period); a hold that leaves the array at what demand needs re-arms too, after
    ``REARM_AT_TARGET_FACTOR`` x ``base_seconds``. An earlier rule (no re-arm for a hold with
    nothing to wait for) left the low alarm in ALARM after "the recent peak still needs 5", and
    the array at 4 controllers for good (issue #18). ScaleArray's workflow reads the seconds
    from PlanScale's answer (``rearmSeconds``) and uses ``base_seconds`` on its paths without a
    decision; the simulator calls this function itself."""
    if base_seconds < 1:
        raise ValueError(f"the re-arm pause must be 1 s or more, got {base_seconds}")
    if decision is not None and at_target(decision):
        return base_seconds * REARM_AT_TARGET_FACTOR
    return base_seconds
