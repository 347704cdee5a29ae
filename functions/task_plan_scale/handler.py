"""ScaleArray step: plan the array's controller count from its demand and its group's state.

Called only by the ScaleArray workflow, which holds the array's scaling lock. Reads the registry
(spec, cooldown clocks) and the controller group (desired capacity, controllers booting or
draining, which controller leaves on a scale-in), and runs the pure planner. The decision is
returned, not written: the workflow sets the capacity and records it.
"""

from datetime import UTC, datetime, timedelta
from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from vsa_core.arrays.plan import HIGH_EVALUATION_PERIODS, LOW_EVALUATION_PERIODS
from vsa_core.arrays.spec import ArraySpec
from vsa_core.clients import client
from vsa_core.controllers import slots
from vsa_core.errors import ArrayNotFoundError
from vsa_core.naming import group_name
from vsa_core.observability import logger, tracer
from vsa_core.registry import ArrayRegistry
from vsa_core.scaling import demand
from vsa_core.scaling.events import ScaleRequest
from vsa_core.scaling.planner import ScaleDecision, plan
from vsa_core.scaling.simulator import planner_inputs
from vsa_core.settings import get_settings

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


def _parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def plan_scale(
    request: ScaleRequest, registry: ArrayRegistry, autoscaling: Any, now: datetime
) -> dict[str, Any]:
    array = registry.get(request.array_id)
    name = group_name(request.array_id)
    groups = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
    if not groups:
        raise ArrayNotFoundError(f"array {request.array_id!r} has no controller group {name}: apply it again")
    group = groups[0]
    instances: list[dict[str, Any]] = [dict(i) for i in group.get("Instances", [])]
    in_flight = sum(1 for i in instances if i["LifecycleState"] in IN_FLIGHT)
    read = request.demand
    current = int(group["DesiredCapacity"])
    age = demand.alarm_datapoint_age(request.state_timestamp, now)
    max_age = demand.alarm_datapoint_max_age(EVALUATION_PERIODS[request.alarm_kind])
    if read is not None and read.newest_minute is not None:
        demand_iops, recent, source = read.demand_iops, tuple(read.recent_demand), read.source
    elif age <= max_age:
        # GetMetricData had no datapoint in its window: the alarm's own datapoint, while fresh
        demand_iops, recent, source = request.demand_iops, (), "alarm"
    else:
        return _stale(request, array.spec, current, now, name, age, max_age)
    decision = plan(
        array.spec,
        demand_iops,
        current,
        now=now,
        last_scale_out_at=_parse(array.last_scale_out_at),
        last_scale_in_at=_parse(array.last_scale_in_at),
        in_flight=in_flight,
        recent_demand=recent,
        # the same tuning the simulator and the benchmark measure
        **planner_inputs(array.spec),
    )
    in_service = [i["InstanceId"] for i in instances if i["LifecycleState"] == "InService"]
    leaver = (
        slots.leaver(registry.slots(request.array_id), in_service) if decision.action == "scale-in" else None
    )
    if decision.action == "scale-in" and leaver is None:
        raise ArrayNotFoundError(f"array {request.array_id!r}: no serving controller to remove")
    logger.info("scale decision", extra=decision.as_dict())
    return {
        **decision.as_dict(),
        "groupName": name,
        "leaver": leaver,
        "scaleField": SCALE_FIELDS[decision.action],
        # a run that changed the count or waits on a cooldown / a controller in flight re-arms
        # its alarm: CloudWatch sends an event only on a change of state
        "rearm": decision.action != "hold" or decision.waiting,
        "alarmName": request.alarm_name,
        "alarmDemandIops": request.demand_iops,
        "demandSource": source,
        "eventId": request.event_id,
    }


def _stale(
    request: ScaleRequest,
    spec: ArraySpec,
    current: int,
    now: datetime,
    group: str,
    age: timedelta,
    max_age: timedelta,
) -> dict[str, Any]:
    """No decision on stale data: GetMetricData found no datapoint and the alarm's is older than
    its window allows. Hold, say why, and re-arm the alarm (``waiting``) so a breach that still
    holds comes back as a fresh state change."""
    reason = (
        f"no fresh demand: GetMetricData found no datapoint and the alarm's state change is "
        f"{int(age.total_seconds())} s old (at most {int(max_age.total_seconds())} s): not deciding on it"
    )
    decision = ScaleDecision(
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
    logger.warning("scale decision on stale data refused", extra=decision.as_dict())
    return {
        **decision.as_dict(),
        "groupName": group,
        "leaver": None,
        "scaleField": SCALE_FIELDS["hold"],
        "rearm": True,
        "alarmName": request.alarm_name,
        "alarmDemandIops": request.demand_iops,
        "demandSource": "stale",
        "eventId": request.event_id,
    }


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=ScaleRequest)
def lambda_handler(event: ScaleRequest, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(array_id=event.array_id)
    registry = ArrayRegistry(get_settings().table_name)
    return plan_scale(event, registry, client("autoscaling"), datetime.now(UTC))
