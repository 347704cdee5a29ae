"""What an applied array spec should produce, and how that differs from what exists. Pure.

``desired_resources`` turns a spec into the exact request parameters of every AWS resource the
control plane owns for the array (the kwargs of CreateVolume, CreateLaunchTemplate,
CreateAutoScalingGroup, PutLifecycleHook, PutMetricAlarm, CreateSchedule). The AWS side
(``vsa_core.arrays.aws_service``) reads the same shapes back from AWS, and ``diff`` compares the two field
by field, so an update changes exactly what changed and nothing else.
"""

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from vsa_core.alarm_tuning import (
    HIGH_DATAPOINTS_TO_ALARM,
    HIGH_EVALUATION_PERIODS,
    LOW_DATAPOINTS_TO_ALARM,
    LOW_EVALUATION_PERIODS,
    SCALE_IN_HYSTERESIS,
)
from vsa_core.arrays import demand
from vsa_core.arrays.spec import (
    ARRAY_TAG,
    DEPLOYMENT_TAG,
    MULTI_ATTACH_LIMIT,
    OWNED_TAG,
    ArraySpec,
    NewVolume,
)
from vsa_core.naming import (
    backup_schedule_name,
    deployment,
    drill_schedule_name,
    group_name,
    iops_alarm_name,
    launch_hook_name,
    launch_template_name,
    owned_volume_name,
    terminate_hook_name,
)

Params = Mapping[str, Any]
Action = Literal["create", "update", "delete", "unchanged"]

HEARTBEAT_MIN_SECONDS = 30
HEARTBEAT_MAX_SECONDS = 7200
"""Auto Scaling accepts a HeartbeatTimeout of 30..7200 seconds."""

BACKUP_EVENT_SOURCE = "vsa.control-plane"
BACKUP_EVENT_DETAIL_TYPE = "Backup Requested"
DRILL_EVENT_DETAIL_TYPE = "Drill Requested"
PUT_EVENTS_TARGET = "arn:aws:scheduler:::aws-sdk:eventbridge:putEvents"


# --- thresholds and timeouts -----------------------------------------------------------------


def alarm_thresholds(spec: ArraySpec, desired_controllers: int) -> tuple[float, float]:
    """(high, low) IOPS thresholds of the array's alarms at ``desired_controllers``.

    high: the demand above which the current controllers run above the target utilisation
    (``n x perControllerIops x targetUtilisation``). low: the demand below which one controller
    fewer would still run under target, less ``SCALE_IN_HYSTERESIS``. At (or below) the minimum
    there is nothing to scale in to: low is 0, and as IOPS are never negative a
    LessThanThreshold alarm at 0 never fires (the alarm stays in place, effectively disabled, so
    the resource set does not change shape with the controller count).
    """
    n = clamp_controllers(spec, desired_controllers)
    per_controller = spec.per_controller_iops * spec.target_utilisation
    high = n * per_controller
    low = (n - 1) * per_controller * SCALE_IN_HYSTERESIS if n > spec.min_controllers else 0.0
    return high, low


def clamp_controllers(spec: ArraySpec, desired_controllers: int) -> int:
    """The registered controller count held to the spec's [min, max] (max never above 16)."""
    ceiling = min(spec.max_controllers, MULTI_ATTACH_LIMIT)
    return max(spec.min_controllers, min(desired_controllers, ceiling))


def _clamp_heartbeat(seconds: int) -> int:
    return max(HEARTBEAT_MIN_SECONDS, min(seconds, HEARTBEAT_MAX_SECONDS))


BOOTSTRAP_HEARTBEAT_SECONDS = 1200
"""The launch hook's HeartbeatTimeout. BootstrapController records a heartbeat before each phase
and once per round of every wait loop (attachments, SSM registration, configure-target,
connect-path), so the hook's timeout bounds the time between two heartbeats, not the bootstrap:
900 s on the longest path, every step at its TimeoutSeconds and every retry at its longest backoff
(five slot choices before the first heartbeat, then ABANDON), computed from the deployed ASL by
tests/infra/test_lifecycle_heartbeats.py; plus the event's delivery and the workflow's start. It
no longer grows with volumes or hosts: the workflow attaches every volume and reaches every host
in one step each. Longer would only delay the ABANDON (and the replacement launch) of a controller
whose workflow was lost; shorter would abandon controllers still bootstrapping on a slow day (the
old 300 + 30/volume + 20/host s was shorter than the attach wait plus the SSM registration wait)."""

DRAIN_HEARTBEAT_SECONDS = 900
"""The terminate hook's HeartbeatTimeout: DrainController records a heartbeat per round of its
waits (another controller serving, disconnect-path, the target's teardown); its longest gap is
579 s (a drain whose disconnect-path could not be sent, then the teardown, each step at its
timeout; tests/infra/test_lifecycle_heartbeats.py), plus the event's delivery. The old
60 + 20/host s could let the group terminate a controller before its hosts had disconnected."""


def bootstrap_heartbeat_seconds(spec: ArraySpec) -> int:
    """The launch hook's HeartbeatTimeout (BOOTSTRAP_HEARTBEAT_SECONDS; the same for every array)."""
    del spec
    return _clamp_heartbeat(BOOTSTRAP_HEARTBEAT_SECONDS)


def drain_heartbeat_seconds(spec: ArraySpec) -> int:
    """The terminate hook's HeartbeatTimeout (DRAIN_HEARTBEAT_SECONDS; the same for every array)."""
    del spec
    return _clamp_heartbeat(DRAIN_HEARTBEAT_SECONDS)


# --- the desired resources -------------------------------------------------------------------


@dataclass(frozen=True)
class Resources:
    """Every resource an applied spec produces, each as its create/put request parameters.

    The same shape describes what AWS holds (``None`` for an absent resource, a volume missing
    from ``volumes``). ``volumes`` maps a NewVolume's name to its CreateVolume parameters.
    ``launch_template`` is ``None`` when the spec references its own launch template.
    Schedules take no tags (EventBridge Scheduler tags only schedule groups): the schedule
    carries the array id in its name and in the event it puts instead.
    """

    array_id: str
    volumes: Mapping[str, Params] = field(default_factory=dict)
    launch_template: Params | None = None
    group: Params | None = None
    launch_hook: Params | None = None
    terminate_hook: Params | None = None
    alarm_high: Params | None = None
    alarm_low: Params | None = None
    schedule: Params | None = None
    drill_schedule: Params | None = None


DesiredResources = Resources
ObservedResources = Resources


def array_tags(array_id: str, **extra: str) -> list[dict[str, str]]:
    """``[{Key, Value}]`` with ``vsa:array=<id>``, ``vsa:deployment`` and ``extra``, sorted by key."""
    tags = {ARRAY_TAG: array_id, DEPLOYMENT_TAG: deployment(), **extra}
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]


def owned_volume_params(spec: ArraySpec, volume: NewVolume) -> dict[str, Any]:
    """CreateVolume parameters of an owned volume (io2, Multi-Attach, tagged as owned)."""
    tags = array_tags(
        spec.array_id, **{OWNED_TAG: "true", "Name": owned_volume_name(spec.array_id, volume.name)}
    )
    return {
        "AvailabilityZone": spec.availability_zone,
        "Size": volume.size_gib,
        "Iops": volume.iops,
        "VolumeType": "io2",
        "MultiAttachEnabled": True,
        "TagSpecifications": [{"ResourceType": "volume", "Tags": tags}],
    }


def owned_volume_token(spec: ArraySpec, volume: NewVolume) -> str:
    """CreateVolume's ClientToken for an owned volume: the same for the same array, volume and
    parameters, so EC2 answers a repeated create with the volume it made (EC2 idempotency,
    https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-idempotency.html); at most 64 ASCII
    characters. The deployment is part of the key: a token is the account's, and another
    deployment's array of the same id must not be answered with this one's volume."""
    params = owned_volume_params(spec, volume)
    key = json.dumps(
        [deployment(), spec.array_id, volume.name, params["AvailabilityZone"], params["Size"], params["Iops"]]
    )
    return "vsa-" + hashlib.sha256(key.encode()).hexdigest()[:40]


def launch_template_params(spec: ArraySpec) -> dict[str, Any] | None:
    """CreateLaunchTemplate parameters, or ``None`` when the spec references a launch template."""
    settings = spec.controllers
    if settings.launch_template is not None:
        return None
    tags = array_tags(spec.array_id)
    data: dict[str, Any] = {
        "InstanceType": settings.instance_type,
        "ImageId": settings.image_id,
        "MetadataOptions": {"HttpTokens": "required"},
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags},
        ],
    }
    if settings.subnet_id is not None:
        interface: dict[str, Any] = {"DeviceIndex": 0, "SubnetId": settings.subnet_id}
        if settings.security_group_ids:
            interface["Groups"] = sorted(settings.security_group_ids)
        data["NetworkInterfaces"] = [interface]
    elif settings.security_group_ids:
        data["SecurityGroupIds"] = sorted(settings.security_group_ids)
    if settings.instance_profile is not None:
        data["IamInstanceProfile"] = {"Name": settings.instance_profile}
    return {
        "LaunchTemplateName": launch_template_name(spec.array_id),
        "LaunchTemplateData": data,
        "TagSpecifications": [{"ResourceType": "launch-template", "Tags": tags}],
    }


def _group_launch_template(spec: ArraySpec, launch_template_id: str | None) -> dict[str, str]:
    ref = spec.controllers.launch_template
    if ref is None:  # the control plane's own template: each apply makes its new version the default
        return {"LaunchTemplateName": launch_template_name(spec.array_id), "Version": "$Default"}
    if launch_template_id is not None:
        return {"LaunchTemplateId": launch_template_id, "Version": ref.version}
    if ref.launch_template_id is not None:
        return {"LaunchTemplateId": ref.launch_template_id, "Version": ref.version}
    assert ref.launch_template_name is not None  # the model requires exactly one
    return {"LaunchTemplateName": ref.launch_template_name, "Version": ref.version}


def group_params(
    spec: ArraySpec, desired_controllers: int, launch_template_id: str | None, roll_surge: int = 0
) -> dict[str, Any]:
    """CreateAutoScalingGroup parameters.

    ``roll_surge`` (1 while ReconcileArray's roll has its extra controller up): the desired
    capacity and the maximum one above, within io2 Multi-Attach's 16, so an apply during a
    roll does not undo it.

    New instances are protected from scale-in: the scale workflow (not the group) chooses which
    controller leaves. DefaultCooldown is the scale-out cooldown; the group has no scaling
    policies, the ScaleArray workflow applies both cooldowns itself.
    """
    name = group_name(spec.array_id)
    count = clamp_controllers(spec, desired_controllers)
    params: dict[str, Any] = {
        "AutoScalingGroupName": name,
        "LaunchTemplate": _group_launch_template(spec, launch_template_id),
        "MinSize": spec.min_controllers,
        "MaxSize": min(max(spec.max_controllers, count + roll_surge), MULTI_ATTACH_LIMIT),
        "DesiredCapacity": min(count + roll_surge, MULTI_ATTACH_LIMIT),
        "NewInstancesProtectedFromScaleIn": True,
        "DefaultCooldown": spec.scale_out_cooldown_seconds,
        "Tags": [
            {
                "ResourceId": name,
                "ResourceType": "auto-scaling-group",
                "Key": key,
                "Value": value,
                "PropagateAtLaunch": True,
            }
            for key, value in ((ARRAY_TAG, spec.array_id), (DEPLOYMENT_TAG, deployment()))
        ],
    }
    if spec.controllers.subnet_id is not None:
        params["VPCZoneIdentifier"] = spec.controllers.subnet_id
    else:
        params["AvailabilityZones"] = [spec.availability_zone]
    return params


def hook_params(spec: ArraySpec, kind: Literal["launch", "terminate"]) -> dict[str, Any]:
    """PutLifecycleHook parameters. A launch that is not completed is abandoned (no half
    bootstrapped controller serves); a drain that dies continues (no dying instance is kept)."""
    if kind == "launch":
        name, transition = launch_hook_name(spec.array_id), "autoscaling:EC2_INSTANCE_LAUNCHING"
        timeout, result = bootstrap_heartbeat_seconds(spec), "ABANDON"
    else:
        name, transition = terminate_hook_name(spec.array_id), "autoscaling:EC2_INSTANCE_TERMINATING"
        timeout, result = drain_heartbeat_seconds(spec), "CONTINUE"
    return {
        "LifecycleHookName": name,
        "AutoScalingGroupName": group_name(spec.array_id),
        "LifecycleTransition": transition,
        "HeartbeatTimeout": timeout,
        "DefaultResult": result,
        "NotificationMetadata": json.dumps({"arrayId": spec.array_id}),
    }


def alarm_params(
    spec: ArraySpec, desired_controllers: int, volume_ids: tuple[str, ...], kind: Literal["high", "low"]
) -> dict[str, Any]:
    """PutMetricAlarm parameters.

    Missing data: EBS publishes no datapoint for a volume without IO, so missing data means no
    demand. The high alarm treats it as not breaching (no demand never scales out); the low
    alarm treats it as breaching (an idle array shrinks towards minControllers, one controller
    at a time, and the ScaleArray workflow still never goes below what measured demand needs).
    """
    high, low = alarm_thresholds(spec, desired_controllers)
    n = clamp_controllers(spec, desired_controllers)
    if kind == "high":
        threshold, operator, missing = high, "GreaterThanThreshold", "notBreaching"
        periods, datapoints = HIGH_EVALUATION_PERIODS, HIGH_DATAPOINTS_TO_ALARM
        description = (
            f"Array {spec.array_id}: IOPS above {high:,.0f}, what {n} controller(s) serve at "
            f"{spec.target_utilisation:.0%} utilisation: scale out"
        )
    else:
        # at minControllers (threshold 0) there is nothing to scale in: missing data must not
        # hold the alarm in ALARM (ScaleArray would run, hold and re-arm every few minutes)
        threshold, operator = low, "LessThanThreshold"
        missing = "breaching" if low > 0 else "notBreaching"
        periods, datapoints = LOW_EVALUATION_PERIODS, LOW_DATAPOINTS_TO_ALARM
        description = (
            f"Array {spec.array_id}: IOPS below {low:,.0f}, what {n - 1} controller(s) serve with "
            "headroom: scale in"
            if low > 0
            else f"Array {spec.array_id}: at minControllers={spec.min_controllers}, scale-in disabled (0)"
        )
    return {
        "AlarmName": iops_alarm_name(spec.array_id, kind),
        "AlarmDescription": description,
        "ActionsEnabled": True,
        "Metrics": demand.alarm_queries(spec, volume_ids),
        "Threshold": threshold,
        "ComparisonOperator": operator,
        "EvaluationPeriods": periods,
        "DatapointsToAlarm": datapoints,
        "TreatMissingData": missing,
        "Tags": array_tags(spec.array_id),
    }


def schedule_params(spec: ArraySpec, *, scheduler_role_arn: str, event_bus: str) -> dict[str, Any] | None:
    """CreateSchedule parameters of the backup policy (``None`` without one): put a ``Backup
    Requested`` event on the deployment's own bus ``event_bus`` (only the scheduler role may put
    events there), which the backup workflow subscribes to."""
    policy = spec.backup
    if policy is None:
        return None
    detail = {
        "arrayId": spec.array_id,
        "mode": policy.mode,
        "retention": policy.retention,
        "freezeTimeoutSeconds": policy.freeze_timeout_seconds,
        "trigger": "schedule",
    }
    return _put_event_schedule(
        backup_schedule_name(spec.array_id),
        policy.schedule,
        BACKUP_EVENT_DETAIL_TYPE,
        detail,
        scheduler_role_arn,
        event_bus,
    )


def drill_schedule_params(
    spec: ArraySpec, *, scheduler_role_arn: str, event_bus: str
) -> dict[str, Any] | None:
    """CreateSchedule parameters of the drill policy's schedule (``None`` without one): a
    ``Drill Requested`` event on the deployment's own bus, which starts a restore drill."""
    drill = spec.backup.drill if spec.backup else None
    if drill is None or drill.schedule is None:
        return None
    detail = {"arrayId": spec.array_id, "trigger": "schedule"}
    return _put_event_schedule(
        drill_schedule_name(spec.array_id),
        drill.schedule,
        DRILL_EVENT_DETAIL_TYPE,
        detail,
        scheduler_role_arn,
        event_bus,
    )


def _put_event_schedule(
    name: str, expression: str, detail_type: str, detail: dict[str, Any], role_arn: str, event_bus: str
) -> dict[str, Any]:
    entry = {
        "Source": BACKUP_EVENT_SOURCE,
        "DetailType": detail_type,
        "Detail": json.dumps(detail, sort_keys=True),
        "EventBusName": event_bus,
    }
    return {
        "Name": name,
        "ScheduleExpression": expression,
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "State": "ENABLED",
        "Target": {
            "Arn": PUT_EVENTS_TARGET,
            "RoleArn": role_arn,
            "Input": json.dumps({"Entries": [entry]}, sort_keys=True),
        },
    }


def desired_resources(
    spec: ArraySpec,
    desired_controllers: int,
    *,
    account_id: str,
    region: str,
    launch_template_id_of_spec: str | None,
    volume_ids: tuple[str, ...],
    scheduler_role_arn: str,
    event_bus: str = "default",
    roll_surge: int = 0,
) -> DesiredResources:
    """Everything ``spec`` produces at ``desired_controllers`` (held to [min, max]).

    ``volume_ids``: the array's volumes that exist (the existing ones and the owned ones created
    so far) — the alarms watch these (none: no alarms yet, unless the spec's demand metric).
    ``launch_template_id_of_spec``: the resolved id of the launch template the spec references
    (the group then refers to it by id), if known.
    ``account_id``/``region`` are checked, not used in names: they keep the call explicit about
    which account's resources it describes, and the scheduler role must live in that account.
    """
    # no volume exists yet (a new array of owned volumes only, created by ReconcileArray's first
    # step, which then puts the alarms): nothing for the volumes' alarms to watch yet
    alarms = bool(volume_ids) or spec.demand_metric is not None
    if f":{account_id}:" not in scheduler_role_arn and spec.backup is not None:
        raise ValueError(f"scheduler role {scheduler_role_arn} is not in account {account_id} ({region})")
    return Resources(
        array_id=spec.array_id,
        volumes={v.name: owned_volume_params(spec, v) for v in spec.new_volumes},
        launch_template=launch_template_params(spec),
        group=group_params(spec, desired_controllers, launch_template_id_of_spec, roll_surge),
        launch_hook=hook_params(spec, "launch"),
        terminate_hook=hook_params(spec, "terminate"),
        alarm_high=alarm_params(spec, desired_controllers, volume_ids, "high") if alarms else None,
        alarm_low=alarm_params(spec, desired_controllers, volume_ids, "low") if alarms else None,
        schedule=schedule_params(spec, scheduler_role_arn=scheduler_role_arn, event_bus=event_bus),
        drill_schedule=drill_schedule_params(
            spec, scheduler_role_arn=scheduler_role_arn, event_bus=event_bus
        ),
    )


# --- diff ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One resource's change: ``fields`` are (dotted field, before, after), only those that differ."""

    resource: str
    action: Action
    fields: tuple[tuple[str, Any, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "action": self.action,
            "fields": [{"field": f, "before": b, "after": a} for f, b, a in self.fields],
        }


def flatten(params: Params, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted paths (``LaunchTemplateData.InstanceType``); lists stay whole."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{path}."))
        else:
            flat[path] = value
    return flat


def diff_resource(resource: str, desired: Params | None, observed: Params | None) -> Change | None:
    """The change that takes ``observed`` to ``desired`` (``None`` when both are absent)."""
    if desired is None and observed is None:
        return None
    after = flatten(desired) if desired is not None else {}
    before = flatten(observed) if observed is not None else {}
    fields = tuple(
        (key, before.get(key), after.get(key))
        for key in sorted(after.keys() | before.keys())
        if before.get(key) != after.get(key)
    )
    if observed is None:
        return Change(resource, "create", fields)
    if desired is None:
        return Change(resource, "delete", fields)
    return Change(resource, "update" if fields else "unchanged", fields)


_SINGLE = (
    ("launch-template", "launch_template"),
    ("group", "group"),
    ("lifecycle-hook", "launch_hook"),
    ("lifecycle-hook", "terminate_hook"),
    ("alarm", "alarm_high"),
    ("alarm", "alarm_low"),
    ("schedule", "schedule"),
    ("schedule", "drill_schedule"),
)


def resource_name(kind: str, params: Params) -> str:
    """The name a resource's parameters give it."""
    key = {
        "launch-template": "LaunchTemplateName",
        "group": "AutoScalingGroupName",
        "lifecycle-hook": "LifecycleHookName",
        "alarm": "AlarmName",
        "schedule": "Name",
    }[kind]
    return str(params[key])


def diff(desired: DesiredResources, observed: ObservedResources) -> list[Change]:
    """Every change from ``observed`` to ``desired``, unchanged resources included (as
    ``unchanged``, no fields). Volumes are only ever created or updated here: a volume dropped
    from the spec is not deleted by an apply (only ``DELETE`` with ``deleteVolumes`` does that)."""
    changes: list[Change] = []
    for name, params in desired.volumes.items():
        change = diff_resource(f"volume/{name}", params, observed.volumes.get(name))
        assert change is not None
        changes.append(change)
    for kind, attribute in _SINGLE:
        want, have = getattr(desired, attribute), getattr(observed, attribute)
        if want is None and have is None:
            continue
        label = resource_name(kind, want if want is not None else have)
        change = diff_resource(f"{kind}/{label}", want, have)
        assert change is not None
        changes.append(change)
    return changes


def pending(changes: list[Change]) -> list[Change]:
    """The changes that touch AWS (everything but ``unchanged``)."""
    return [c for c in changes if c.action != "unchanged"]
