"""EC2 Auto Scaling for the local cloud: moto's backend (in this process, so group instances are the
local cloud's EC2 instances) plus lifecycle hooks as AWS documents them.

Handlers below answer first; every other operation goes to moto unchanged. The lifecycle itself
(wait states, events, timeouts, capacity counting) lives in ``autoscaling_lifecycle``.

What moto lacks or gets wrong, and what this module does instead:

* lifecycle hooks: moto stores them but never waits on them, and describes every hook with the
  same hard-coded ``RoleARN``/``NotificationTargetARN`` (``arn:aws:iam::1234567890:role/...``). Hooks
  are stored here as given (``LifecycleHookSpecificationList`` of CreateAutoScalingGroup too, which
  moto ignores) and removed with their group (moto keeps them, so a re-created group inherited them).
* ``CompleteLifecycleAction``, ``RecordLifecycleActionHeartbeat``, ``Put/Describe/Delete
  NotificationConfiguration(s)``, ``DescribeAutoScalingNotificationTypes``: missing in moto.
* ``DescribeScalingActivities``: moto answers an empty list; here the launch/terminate activities.
* ``TerminateInstanceInAutoScalingGroup`` goes through the terminate lifecycle (moto terminates at once).
* ``SuspendProcesses`` of ``Launch`` or ``Terminate``: moto records the suspension and launches
  and terminates anyway; here the desired capacity is kept without adding or removing instances
  until ``ResumeProcesses``, which then reaches it.
* ``DeleteAutoScalingGroup`` ends the group's lifecycle actions and terminates its instances
  without hooks, as ``ForceDelete`` does on AWS. (Like moto, it does not refuse a group that still
  has instances when ``ForceDelete`` is not set.)

Control actions (``POST /_localcloud/autoscaling/<action>``; AWS has no API for these):

* ``configure`` ``{"time_scale": 0.05}``: lifecycle timeouts (heartbeat and global) last
  ``time_scale`` times their AWS duration, so a 30 s ``HeartbeatTimeout`` (AWS's minimum) expires
  after 1.5 s. Applies to actions started afterwards; answers the configuration. Default 1.0.
* ``advance`` ``{"seconds": 3000}``: move the lifecycle clock forward by that many AWS seconds
  (scaled by ``time_scale``) and apply every timeout that expired; deterministic timeout tests.
* ``actions`` ``{}``: the pending lifecycle actions, with the AWS seconds left before timeout.
"""

from datetime import UTC, datetime
from typing import Any

from localstack.aws.api import RequestContext
from localstack.aws.skeleton import Skeleton
from localstack.aws.spec import load_service
from localstack.services.moto import _proxy_moto, call_moto
from localstack.services.plugins import Service

from vsa_localcloud import autoscaling_lifecycle as lc
from vsa_localcloud import ec2_instances
from vsa_localcloud.autoscaling_lifecycle import LOCK, Hook, ValidationError

Request = dict[str, Any]
NOTIFICATION_TYPES = [
    "autoscaling:EC2_INSTANCE_LAUNCH",
    "autoscaling:EC2_INSTANCE_LAUNCH_ERROR",
    "autoscaling:EC2_INSTANCE_TERMINATE",
    "autoscaling:EC2_INSTANCE_TERMINATE_ERROR",
    "autoscaling:TEST_NOTIFICATION",
]


def _put_hook(group: str, spec: Request, existing: Hook | None) -> Hook:
    transition = spec.get("LifecycleTransition") or (existing.transition if existing else None)
    if transition not in (lc.LAUNCHING, lc.TERMINATING):
        raise ValidationError(f"Invalid Lifecycle Transition: {transition}")
    hook = existing or Hook(name=spec["LifecycleHookName"], group=group, transition=transition)
    hook.transition = transition
    timeout = spec.get("HeartbeatTimeout")
    if timeout is not None:
        if not 30 <= int(timeout) <= 7200:
            raise ValidationError("Heartbeat timeout must be between 30 and 7200 seconds")
        hook.heartbeat_timeout = int(timeout)
    if spec.get("DefaultResult") is not None:
        if spec["DefaultResult"] not in ("CONTINUE", "ABANDON"):
            raise ValidationError(f"Invalid DefaultResult: {spec['DefaultResult']}")
        hook.default_result = spec["DefaultResult"]
    for key, attr in (("NotificationMetadata", "metadata"), ("NotificationTargetARN", "target_arn")):
        if key in spec:
            setattr(hook, attr, spec[key] or None)
    if "RoleARN" in spec:
        hook.role_arn = spec["RoleARN"] or None
    return hook


def create_auto_scaling_group(context: RequestContext, request: Request) -> Any:
    backend = lc.backend(context.account_id, context.region)
    name = request["AutoScalingGroupName"]
    specs = request.get("LifecycleHookSpecificationList") or []
    with LOCK:
        if name in backend.autoscaling_groups or not specs:
            return _without_grace_default(backend, name, request, call_moto(context))
        # Hooks first: the group's initial instances already wait on them (moto ignores the list).
        hooks = lc.hook_table(context.account_id, context.region, name)
        for spec in specs:
            hooks[spec["LifecycleHookName"]] = _put_hook(name, spec, None)
        try:
            return _without_grace_default(backend, name, request, call_moto(context))
        except Exception:
            hooks.clear()
            raise


def _without_grace_default(backend: Any, name: str, request: Request, answer: Any) -> Any:
    """AWS, CreateAutoScalingGroup: HealthCheckGracePeriod "Default: 0 seconds" (through the API,
    300 only in the console); moto defaults to 300, which would make SetInstanceHealth (respecting
    the grace period) ignore every instance of its first five minutes."""
    group = backend.autoscaling_groups.get(name)
    if group is not None and request.get("HealthCheckGracePeriod") is None:
        group.health_check_grace_period = 0
    return answer


def put_lifecycle_hook(context: RequestContext, request: Request) -> Request:
    group = lc.group_of(context.account_id, context.region, request["AutoScalingGroupName"])
    name = request["LifecycleHookName"]
    with LOCK:
        hooks = lc.hook_table(context.account_id, context.region, group.name)
        hooks[name] = _put_hook(group.name, request, hooks.get(name))
        if request.get("NotificationTargetARN"):
            lc.test_notification(group, request["NotificationTargetARN"])
    return {}


def describe_lifecycle_hooks(context: RequestContext, request: Request) -> Request:
    group = lc.group_of(context.account_id, context.region, request["AutoScalingGroupName"])
    names = request.get("LifecycleHookNames") or []
    hooks = [h.describe() for h in lc.hooks_of(group) if not names or h.name in names]
    return {"LifecycleHooks": hooks}


def delete_lifecycle_hook(context: RequestContext, request: Request) -> Request:
    group = lc.group_of(context.account_id, context.region, request["AutoScalingGroupName"])
    name = request["LifecycleHookName"]
    with LOCK:
        if lc.hook_table(context.account_id, context.region, group.name).pop(name, None) is None:
            raise ValidationError(f"No Lifecycle Hook found with name {name} for group {group.name}")
        # Outstanding actions complete first: ABANDON for launching, CONTINUE for terminating (AWS).
        for action in [a for a in lc.ACTIONS.values() if a.group is group and a.hook.name == name]:
            result = "ABANDON" if action.hook.transition == lc.LAUNCHING else "CONTINUE"
            lc.complete(action, result, "Lifecycle Hook deleted")
    return {}


def complete_lifecycle_action(context: RequestContext, request: Request) -> Request:
    result = request["LifecycleActionResult"]
    if result not in ("CONTINUE", "ABANDON"):
        raise ValidationError(f"Invalid LifecycleActionResult: {result}")
    with LOCK:
        action = lc.find_action(
            context.account_id,
            context.region,
            request["AutoScalingGroupName"],
            request["LifecycleHookName"],
            request.get("LifecycleActionToken"),
            request.get("InstanceId"),
        )
        lc.complete(action, result, f"Lifecycle Action Completed with {result} Result")
    return {}


def record_lifecycle_action_heartbeat(context: RequestContext, request: Request) -> Request:
    with LOCK:
        action = lc.find_action(
            context.account_id,
            context.region,
            request["AutoScalingGroupName"],
            request["LifecycleHookName"],
            request.get("LifecycleActionToken"),
            request.get("InstanceId"),
        )
        renewed = lc.clock() + action.hook.heartbeat_timeout * lc.CONFIG["time_scale"]
        action.deadline = min(renewed, action.global_deadline)
    return {}


def _notifications(group: Any) -> dict[str, list[str]]:
    if not hasattr(group, "vsa_notifications"):
        group.vsa_notifications = {}
    found: dict[str, list[str]] = group.vsa_notifications
    return found


def put_notification_configuration(context: RequestContext, request: Request) -> Request:
    group = lc.group_of(context.account_id, context.region, request["AutoScalingGroupName"])
    types = request["NotificationTypes"]
    unknown = [t for t in types if t not in NOTIFICATION_TYPES]
    if unknown:
        raise ValidationError(f"Notification type(s) {', '.join(unknown)} not supported")
    with LOCK:
        _notifications(group)[request["TopicARN"]] = sorted(set(types))
        lc.test_notification(group, request["TopicARN"])
    return {}


def describe_notification_configurations(context: RequestContext, request: Request) -> Request:
    names = request.get("AutoScalingGroupNames") or []
    groups = lc.backend(context.account_id, context.region).autoscaling_groups.values()
    configurations = [
        {"AutoScalingGroupName": group.name, "TopicARN": topic, "NotificationType": kind}
        for group in sorted(groups, key=lambda g: g.name)
        if not names or group.name in names
        for topic, kinds in sorted(_notifications(group).items())
        for kind in kinds
    ]
    return {"NotificationConfigurations": configurations}


def delete_notification_configuration(context: RequestContext, request: Request) -> Request:
    group = lc.group_of(context.account_id, context.region, request["AutoScalingGroupName"])
    with LOCK:
        if _notifications(group).pop(request["TopicARN"], None) is None:
            raise ValidationError(f"No notification configuration found for topic {request['TopicARN']}")
    return {}


def describe_auto_scaling_notification_types(context: RequestContext, request: Request) -> Request:
    return {"AutoScalingNotificationTypes": NOTIFICATION_TYPES}


def describe_scaling_activities(context: RequestContext, request: Request) -> Request:
    backend = lc.backend(context.account_id, context.region)
    name, ids = request.get("AutoScalingGroupName"), request.get("ActivityIds") or []
    found = [
        dict(activity)
        for group in backend.autoscaling_groups.values()
        if name in (None, group.name)
        for activity in lc.activities(group)
        if not ids or activity["ActivityId"] in ids
    ]
    found.sort(key=lambda a: a["StartTime"], reverse=True)
    return {"Activities": found[: int(request.get("MaxRecords") or 100)]}


def _member(context: RequestContext, instance_id: str) -> tuple[Any, Any]:
    """The group holding the instance and its state there (under LOCK); AWS's ValidationError
    for an instance no group manages."""
    backend = lc.backend(context.account_id, context.region)
    found = [
        (g, s)
        for g in backend.autoscaling_groups.values()
        for s in g.instance_states
        if s.instance.id == instance_id
    ]
    if not found:
        raise ValidationError(
            f"Instance Id not found - No managed instance found for instance ID: {instance_id}"
        )
    return found[0]


def terminate_instance_in_auto_scaling_group(context: RequestContext, request: Request) -> Request:
    instance_id = request["InstanceId"]
    with LOCK:
        group, state = _member(context, instance_id)
        if state.lifecycle_state.startswith("Terminating"):
            return {"Activity": dict(lc.CURRENT_ACTIVITY[instance_id])}
        desired = group.desired_capacity or 0
        if request.get("ShouldDecrementDesiredCapacity"):
            if desired <= (group.min_size or 0):
                raise ValidationError(
                    f"Currently, desiredSize equals minSize ({group.min_size}). Terminating instance without "
                    "replacement will violate group's min size constraint. Either set "
                    "shouldDecrementDesiredCapacity flag to false or lower group's min size."
                )
            group.desired_capacity = desired = desired - 1
        cause = f"At {lc.iso(lc.now())} instance {instance_id}"
        cause += " was taken out of service in response to a user request"
        if request.get("ShouldDecrementDesiredCapacity"):
            cause += f", shrinking the capacity from {desired + 1} to {desired}."
        else:
            cause += "."
        activity = lc.begin_terminate(group, state, cause)
        group.set_desired_capacity(desired)  # a replacement, unless decremented
        return {"Activity": dict(activity)}


def set_instance_health(context: RequestContext, request: Request) -> Request:
    """AWS: "Set to Unhealthy to have the instance be out of service. Amazon EC2 Auto Scaling
    terminates and replaces the unhealthy instance" (API reference, SetInstanceHealth). moto
    only records the status. Here an InService instance set Unhealthy leaves through the
    terminate lifecycle (its hooks wait) and the group launches a replacement, as for
    TerminateInstanceInAutoScalingGroup without decrement. ShouldRespectGracePeriod (default
    true) ignores the call while the group's HealthCheckGracePeriod has not passed since the
    instance launched (AWS counts from InService; launch time is the nearest this model keeps)."""
    instance_id, status = request["InstanceId"], request["HealthStatus"]
    with LOCK:
        group, state = _member(context, instance_id)
        if request.get("ShouldRespectGracePeriod", True):
            launched: datetime = state.instance.launch_time  # moto: naive UTC
            launched = launched if launched.tzinfo else launched.replace(tzinfo=UTC)
            grace = int(getattr(group, "health_check_grace_period", 0) or 0)
            if (lc.now() - launched).total_seconds() < grace:
                return {}
        state.health_status = status
        if status == "Unhealthy" and state.lifecycle_state == "InService":
            cause = f"At {lc.iso(lc.now())} an instance was taken out of service in response to a user "
            cause += "health-check."
            lc.begin_terminate(group, state, cause)
            group.set_desired_capacity(group.desired_capacity)  # the replacement
    return {}


def delete_auto_scaling_group(context: RequestContext, request: Request) -> Request:
    group = lc.group_of(context.account_id, context.region, request["AutoScalingGroupName"])
    backend = group.autoscaling_backend
    with LOCK:
        for token in [t for t, a in lc.ACTIONS.items() if a.group is group]:
            del lc.ACTIONS[token]
        instance_ids = [s.instance.id for s in group.instance_states]
        group.instance_states = []
        if instance_ids:
            backend.ec2_backend.terminate_instances(instance_ids)
        group.desired_capacity = 0
        backend.autoscaling_groups.pop(group.name, None)
        lc.HOOKS.pop((context.account_id, context.region, group.name), None)
    return {}


OVERRIDES = {
    "CreateAutoScalingGroup": create_auto_scaling_group,
    "PutLifecycleHook": put_lifecycle_hook,
    "DescribeLifecycleHooks": describe_lifecycle_hooks,
    "DeleteLifecycleHook": delete_lifecycle_hook,
    "CompleteLifecycleAction": complete_lifecycle_action,
    "RecordLifecycleActionHeartbeat": record_lifecycle_action_heartbeat,
    "PutNotificationConfiguration": put_notification_configuration,
    "DescribeNotificationConfigurations": describe_notification_configurations,
    "DeleteNotificationConfiguration": delete_notification_configuration,
    "DescribeAutoScalingNotificationTypes": describe_auto_scaling_notification_types,
    "DescribeScalingActivities": describe_scaling_activities,
    "TerminateInstanceInAutoScalingGroup": terminate_instance_in_auto_scaling_group,
    "SetInstanceHealth": set_instance_health,
    "DeleteAutoScalingGroup": delete_auto_scaling_group,
}


# --- control actions -----------------------------------------------------------------------------


def _configure(body: dict[str, Any]) -> dict[str, Any]:
    if "time_scale" in body:
        scale = float(body["time_scale"])
        if scale <= 0:
            raise ValueError("time_scale must be > 0")
        lc.CONFIG["time_scale"] = scale
    return dict(lc.CONFIG)


def _advance(body: dict[str, Any]) -> dict[str, Any]:
    """``{"seconds": s}`` moves the lifecycle clock; ``{"seconds": s, "AutoScalingGroupName": g}``
    only g's pending actions' deadlines."""
    lc.advance(float(body["seconds"]), body.get("AutoScalingGroupName"))
    return _actions({})


def _actions(body: dict[str, Any]) -> dict[str, Any]:
    with LOCK:
        now, scale = lc.clock(), lc.CONFIG["time_scale"]
        return {
            "actions": [
                {
                    "LifecycleActionToken": a.token,
                    "AutoScalingGroupName": a.group.name,
                    "LifecycleHookName": a.hook.name,
                    "EC2InstanceId": a.instance_id,
                    "SecondsLeft": (min(a.deadline, a.global_deadline) - now) / scale,
                }
                for a in lc.ACTIONS.values()
            ]
        }


CONTROL = {"configure": _configure, "advance": _advance, "actions": _actions}


class AutoscalingProvider:
    service = "autoscaling"


def service() -> Service:
    lc.install()
    ec2_instances.apply_patches()  # its instances announce their state changes
    provider = AutoscalingProvider()
    model = load_service("autoscaling")
    table = {op: OVERRIDES.get(op, _proxy_moto) for op in model.operation_names}
    svc = Service(name="autoscaling", skeleton=Skeleton(model, table))
    svc._provider = provider  # type: ignore[assignment]
    return svc
