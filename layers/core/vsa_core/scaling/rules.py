"""ScaleArray's rules around the planner (pure): which controllers count as in flight, each alarm's
window, which clock a decision moves, and the decision when demand is stale."""

from datetime import datetime, timedelta

from vsa_core.arrays.plan import HIGH_EVALUATION_PERIODS, LOW_EVALUATION_PERIODS
from vsa_core.arrays.spec import ArraySpec
from vsa_core.scaling.events import ScaleRequest
from vsa_core.scaling.planner import ScaleDecision

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
    request: ScaleRequest, spec: ArraySpec, current: int, now: datetime, age: timedelta, max_age: timedelta
) -> ScaleDecision:
    """No decision on stale data: GetMetricData found no datapoint and the alarm's is older than
    its window allows. Hold, say why, and wait (the alarm is re-armed) so a breach that still
    holds comes back as a fresh state change."""
    reason = (
        f"no fresh demand: GetMetricData found no datapoint and the alarm's state change is "
        f"{int(age.total_seconds())} s old (at most {int(max_age.total_seconds())} s): not deciding on it"
    )
    return ScaleDecision(
        array_id=spec.array_id,
        demand_iops=request.demand_iops,
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
