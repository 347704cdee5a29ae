"""ScaleArray's PlanScale step on AWS: plan the array's controller count from its demand and
its group's state.

Called only by the ScaleArray workflow, which holds the array's scaling lock. Reads the registry
(spec, cooldown clocks), the controller group (desired capacity, controllers booting or
draining, which controller leaves on a scale-in) and the volumes' provisioned IOPS
(DescribeVolumes: what the array can deliver at most, ``vsa_core.arrays.capacity``) and the
forecast floor the health check stored on the registry item (read with the spec; ignored when
older than ``forecast.STALE_PERIODS`` health-check periods: no history is read here), and runs
the pure planner. The decision is
returned, not written: the workflow sets the capacity and records it, with the ``expiresAt``
given here (the registry's TTL attribute: the decision is history, kept ``HistoryRetentionDays``).
"""

from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from vsa_core.arrays import demand
from vsa_core.arrays.aws_registry import ArrayRegistry, expires_at
from vsa_core.arrays.capacity import owned_volume_iops
from vsa_core.arrays.spec import ARRAY_TAG, DEPLOYMENT_TAG, OWNED_TAG, ArraySpec
from vsa_core.clients import client
from vsa_core.controllers import slots
from vsa_core.errors import ArrayNotFoundError
from vsa_core.naming import deployment, group_name, owned_volume_name
from vsa_core.observability import logger
from vsa_core.scaling import forecast, rules
from vsa_core.scaling.events import ScaleRequest
from vsa_core.scaling.planner import CHURN_WINDOW_MINUTES, PlanInput, plan
from vsa_core.scaling.rules import IN_FLIGHT, SCALE_FIELDS, rearm_after
from vsa_core.scaling.tuning import planner_inputs
from vsa_core.settings import HealthPeriod, HistoryRetention, StackMetrics


def _parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def provisioned_iops(ec2: Any, spec: ArraySpec) -> int | None:
    """The array's volumes' provisioned IOPS in total (DescribeVolumes): the spec's existing
    volumes, and the volumes created for it (their declared IOPS while one is not created
    yet); with ``fencing: reservations`` each counts at most one controller's IOPS
    (``capacity.owned_volume_iops``: one owner serves it). None when a declared volume is not
    found or reports no IOPS: the planner then does not cap on the volumes, rather than cap on
    part of them."""
    found: dict[str, Any] = {}
    if spec.existing_volume_ids:
        found.update(
            {
                v["VolumeId"]: v
                for v in _describe(ec2, [{"Name": "volume-id", "Values": list(spec.existing_volume_ids)}])
            }
        )
    owned_filters = [
        {"Name": f"tag:{ARRAY_TAG}", "Values": [spec.array_id]},
        {"Name": f"tag:{DEPLOYMENT_TAG}", "Values": [deployment()]},
        {"Name": f"tag:{OWNED_TAG}", "Values": ["true"]},
    ]
    owned = {
        tag["Value"]: v
        for v in (_describe(ec2, owned_filters) if spec.new_volumes else [])
        for tag in v.get("Tags", [])
        if tag["Key"] == "Name"
    }
    each: list[int] = []
    for volume_id in spec.existing_volume_ids:
        iops = found.get(volume_id, {}).get("Iops")
        if not iops:
            logger.warning("volume IOPS unknown: no cap on the volumes", extra={"volume_id": volume_id})
            return None
        each.append(int(iops))
    for new in spec.new_volumes:
        each.append(int(owned.get(owned_volume_name(spec.array_id, new.name), {}).get("Iops") or new.iops))
    if spec.fencing == "reservations":
        # one owner controller per volume: a volume moves at most its owner's IOPS
        return owned_volume_iops(each, spec.per_controller_iops)
    return sum(each)


def _describe(ec2: Any, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    pages = ec2.get_paginator("describe_volumes").paginate(Filters=filters)
    return [dict(v) for page in pages for v in page["Volumes"]]


class PlanSettings(HistoryRetention, HealthPeriod, StackMetrics):
    """What a scale decision reads besides its request: how old a stored forecast may be, how
    long a decision is kept, the dimension of the stale-data count."""


# PLR0913: the request, the registry, the three clients it reads and writes, the settings
def plan_scale(  # noqa: PLR0913
    request: ScaleRequest,
    registry: ArrayRegistry,
    autoscaling: Any,
    now: datetime,
    ec2: Any = None,
    cloudwatch: Any = None,
    *,
    settings: PlanSettings,
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
    # no decision on stale data (rules.MAX_DATA_AGE): GetMetricData's newest datapoint, else the
    # alarm's own (its state change's age), else hold and say how old the newest data is
    newest = (
        None if read is None or read.newest_minute is None else datetime.fromisoformat(read.newest_minute)
    )
    read_age = None if newest is None else rules.data_age(newest, now)
    alarm_age = rules.data_age(datetime.fromisoformat(request.state_timestamp), now)
    if read is not None and not rules.is_stale(read_age):
        demand_iops, recent, source = read.demand_iops, tuple(read.recent_demand), read.source
    elif request.demand_iops is not None and not rules.is_stale(alarm_age):
        # GetMetricData had nothing recent: the alarm's own datapoint, while fresh
        demand_iops, recent, source = request.demand_iops, (), "alarm"
    else:
        reason = rules.stale_reason(read_age, demand.RECENT_MINUTES + demand.FRESH_MINUTES)
        if request.demand_iops is None:
            reason += "; the alarm went to ALARM on missing data (no datapoint of its own)"
        held = _stale(
            request, array.spec, current, now, reason, expires_at(now, settings.history_retention_days)
        )
        _count_stale(cloudwatch or client("cloudwatch"), settings.stack_name, now, array.spec.array_id)
        return held
    # the array's own recurring demand over the coming boot + look-ahead, as the health check
    # last stored it (off, saying why, when absent or stale)
    floor = forecast.from_stored(
        array.forecast_floor,
        now,
        max_age=forecast.STALE_PERIODS * timedelta(minutes=settings.health_check_minutes),
    ).in_force(now, demand_iops, recent)
    decision = plan(
        PlanInput(
            array.spec,
            demand_iops,
            current,
            forecast=floor,
            now=now,
            last_scale_out_at=_parse(array.last_scale_out_at),
            last_scale_in_at=_parse(array.last_scale_in_at),
            recent_scalings=registry.scale_decisions().scalings_since(
                request.array_id, now - timedelta(minutes=CHURN_WINDOW_MINUTES)
            ),
            in_flight=in_flight,
            recent_demand=recent,
            volume_iops=provisioned_iops(ec2 or client("ec2"), array.spec),
            by_high_alarm=request.by_high_alarm,
            # the same tuning the simulator and the benchmark measure
            **planner_inputs(array.spec),
        )
    )
    in_service = [i["InstanceId"] for i in instances if i["LifecycleState"] == "InService"]
    # a scale-in unprotects exactly the controllers it removes (the group's instances are
    # protected from scale-in, so the group terminates those and no other)
    leaving = current - decision.desired_controllers if decision.action == "scale-in" else 0
    leavers = slots.leavers(registry.slots(request.array_id), in_service, leaving) if leaving else []
    if len(leavers) < leaving:
        raise ArrayNotFoundError(
            f"array {request.array_id!r}: {leaving} controller(s) to remove, {len(leavers)} in service"
        )
    logger.info("scale decision", extra=decision.as_dict())
    return {
        **decision.as_dict(),
        "groupName": name,
        "leaver": leavers[0] if leavers else None,
        "leavers": leavers,
        "scaleField": SCALE_FIELDS[decision.action],
        # every run re-arms its alarm (CloudWatch sends an event only on a change of state);
        # the rule shared with the simulator says when
        "rearmSeconds": rearm_after(decision, request.rearm_seconds),
        "alarmName": request.alarm_name,
        "alarmDemandIops": request.demand_iops,
        "demandSource": source,
        # the minute whose demand the decision took (None: the alarm's own datapoint)
        "demandMinute": read.newest_minute if source != "alarm" and read is not None else None,
        "eventId": request.event_id,
        "expiresAt": expires_at(now, settings.history_retention_days),
    }


def _stale(
    request: ScaleRequest,
    spec: ArraySpec,
    current: int,
    now: datetime,
    reason: str,
    expires: int,
) -> dict[str, Any]:
    """No decision on stale data: neither GetMetricData's newest datapoint nor the alarm's is
    recent enough (``rules.MAX_DATA_AGE``). Hold, say why and re-arm the alarm (``waiting``: the
    base pause) so a breach that still holds comes back as a fresh state change."""
    decision = rules.stale_decision(request, spec, current, now, reason)
    logger.warning("scale decision on stale data refused", extra=decision.as_dict())
    return {
        **decision.as_dict(),
        "groupName": group_name(request.array_id),
        "leaver": None,
        "leavers": [],
        "scaleField": SCALE_FIELDS["hold"],
        "rearmSeconds": rearm_after(decision, request.rearm_seconds),
        "alarmName": request.alarm_name,
        "alarmDemandIops": request.demand_iops,
        "demandSource": "stale",
        "demandMinute": None,
        "eventId": request.event_id,
        "expiresAt": expires,
    }


def _count_stale(cloudwatch: Any, stack_name: str, now: datetime, array_id: str) -> None:
    """Count a refused decision (``rules.STALE_METRIC``: its alarm pages when staleness persists)."""
    try:
        cloudwatch.put_metric_data(
            Namespace=rules.STALE_NAMESPACE,
            MetricData=[
                {
                    "MetricName": rules.STALE_METRIC,
                    "Dimensions": [{"Name": "Deployment", "Value": stack_name}],
                    "Timestamp": now,
                    "Value": 1.0,
                    "Unit": "Count",
                }
            ],
        )
    except (ClientError, BotoCoreError):  # the hold stands; the count is lost and logged
        logger.exception("stale decision not counted", extra={"array_id": array_id})
