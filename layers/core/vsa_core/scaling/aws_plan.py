"""ScaleArray's PlanScale step on AWS: plan the array's controller count from its demand and
its group's state.

Called only by the ScaleArray workflow, which holds the array's scaling lock. Reads the registry
(spec, cooldown clocks) and the controller group (desired capacity, controllers booting or
draining, which controller leaves on a scale-in), and runs the pure planner. The decision is
returned, not written: the workflow sets the capacity and records it, with the ``expiresAt``
given here (the registry's TTL attribute: the decision is history, kept ``HistoryRetentionDays``).
"""

from datetime import datetime, timedelta
from typing import Any

from vsa_core.arrays.spec import ArraySpec
from vsa_core.controllers import slots
from vsa_core.errors import ArrayNotFoundError
from vsa_core.naming import group_name
from vsa_core.observability import logger
from vsa_core.registry import ArrayRegistry, expires_at
from vsa_core.scaling import demand, rules
from vsa_core.scaling.events import ScaleRequest
from vsa_core.scaling.planner import plan
from vsa_core.scaling.rules import EVALUATION_PERIODS, IN_FLIGHT, SCALE_FIELDS, rearm_after
from vsa_core.scaling.tuning import planner_inputs
from vsa_core.settings import get_settings


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
    elif request.demand_iops is not None and age <= max_age:
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
        # every run re-arms its alarm (CloudWatch sends an event only on a change of state);
        # the rule shared with the simulator says when
        "rearmSeconds": rearm_after(decision, request.rearm_seconds),
        "alarmName": request.alarm_name,
        "alarmDemandIops": request.demand_iops,
        "demandSource": source,
        "eventId": request.event_id,
        "expiresAt": expires_at(now, get_settings().history_retention_days),
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
    its window allows (or it went to ALARM on missing data). Hold, say why, and re-arm the
    alarm (``waiting``: the base pause) so a breach that still holds comes back as a fresh state
    change."""
    decision = rules.stale_decision(request, spec, current, now, age, max_age)
    logger.warning("scale decision on stale data refused", extra=decision.as_dict())
    return {
        **decision.as_dict(),
        "groupName": group,
        "leaver": None,
        "scaleField": SCALE_FIELDS["hold"],
        "rearmSeconds": rearm_after(decision, request.rearm_seconds),
        "alarmName": request.alarm_name,
        "alarmDemandIops": request.demand_iops,
        "demandSource": "stale",
        "eventId": request.event_id,
        "expiresAt": expires_at(now, get_settings().history_retention_days),
    }
