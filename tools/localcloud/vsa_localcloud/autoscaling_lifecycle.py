"""Instance lifecycle of EC2 Auto Scaling groups, on top of moto's backend models.

moto launches straight into ``InService``, terminates on the spot and counts only ``InService``
instances toward capacity. Here every launch and every scale-in goes through the lifecycle AWS
documents: ``Pending`` → ``Pending:Wait`` (one lifecycle action per launch hook) → ``Pending:Proceed``
→ ``InService``; ``Terminating`` → ``Terminating:Wait`` → ``Terminating:Proceed`` → gone (the EC2
instance terminated). Events go to EventBridge (and SNS/SQS notification targets) from one worker
thread, in order, never while ``LOCK`` is held; a timer thread applies ``DefaultResult`` when a
heartbeat or the global timeout expires.
"""

import contextlib
import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from localstack.aws.api import CommonServiceException
from localstack.aws.connect import connect_to
from moto.autoscaling.models import (
    AutoScalingBackend,
    FakeAutoScalingGroup,
    InstanceState,
    autoscaling_backends,
)
from moto.ec2.exceptions import InvalidInstanceIdError

from vsa_localcloud import ec2_instances, eventbus

LOG = logging.getLogger(__name__)
LAUNCHING, TERMINATING = "autoscaling:EC2_INSTANCE_LAUNCHING", "autoscaling:EC2_INSTANCE_TERMINATING"
# Instances that count toward desired capacity, as on AWS (Standby and Terminating* do not).
COUNTED = ("Pending", "Pending:Wait", "Pending:Proceed", "InService")
GLOBAL_TIMEOUT_CAP = 172800  # 48 h; AWS: min(100 * HeartbeatTimeout, 48 h)
LOCK = threading.RLock()
CONFIG: dict[str, float] = {"time_scale": 1.0}
_offset = 0.0  # seconds the emulated clock was advanced by (control action "advance")


def clock() -> float:
    return time.monotonic() + _offset


class ValidationError(CommonServiceException):
    def __init__(self, message: str) -> None:
        super().__init__("ValidationError", message, 400, True)


@dataclass
class Hook:
    name: str
    group: str
    transition: str
    heartbeat_timeout: int = 3600
    default_result: str = "ABANDON"
    metadata: str | None = None
    target_arn: str | None = None
    role_arn: str | None = None

    def describe(self) -> dict[str, Any]:
        item = {
            "LifecycleHookName": self.name,
            "AutoScalingGroupName": self.group,
            "LifecycleTransition": self.transition,
            "NotificationTargetARN": self.target_arn,
            "RoleARN": self.role_arn,
            "NotificationMetadata": self.metadata,
            "HeartbeatTimeout": self.heartbeat_timeout,
            "GlobalTimeout": min(100 * self.heartbeat_timeout, GLOBAL_TIMEOUT_CAP),
            "DefaultResult": self.default_result,
        }
        return {k: v for k, v in item.items() if v is not None}


@dataclass
class Action:
    """One pending lifecycle action: an instance waiting on one hook."""

    group: FakeAutoScalingGroup
    hook: Hook
    instance_id: str
    deadline: float
    global_deadline: float
    token: str = field(default_factory=lambda: str(uuid.uuid4()))


ACTIONS: dict[str, Action] = {}
# Hooks by (account, region, group name), then by hook name. Not moto's ``lifecycle_hooks``: moto
# describes those with hard-coded RoleARN/NotificationTargetARN and keeps them after their group.
HOOKS: dict[tuple[str, str, str], dict[str, Hook]] = {}
CURRENT_ACTIVITY: dict[str, dict[str, Any]] = {}  # instance ID -> its launch or terminate activity
FINISHED: dict[str, str] = {}  # token -> instance ID of completed actions, for error messages
_outbox: "queue.Queue[Callable[[], None]]" = queue.Queue()


def backend(account: str, region: str) -> AutoScalingBackend:
    return autoscaling_backends[account][region]


def group_of(account: str, region: str, name: str) -> FakeAutoScalingGroup:
    group = backend(account, region).autoscaling_groups.get(name)
    if group is None:
        raise ValidationError(f"AutoScalingGroup name not found - AutoScalingGroup '{name}' not found")
    return group


def hook_table(account: str, region: str, group_name: str) -> dict[str, Hook]:
    return HOOKS.setdefault((account, region, group_name), {})


def hooks_of(group: FakeAutoScalingGroup, transition: str | None = None) -> list[Hook]:
    hooks = hook_table(group.account_id, group.region, group.name).values()
    return [h for h in hooks if transition in (None, h.transition)]


def now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


# --- events and notifications (sent by the outbox worker, in order) ----------------------------


def _send(fn: Callable[[], None]) -> None:
    _ensure_threads()
    _outbox.put(fn)


def _outbox_worker() -> None:
    while True:
        fn = _outbox.get()
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 (e.g. a hook target queue that does not exist)
            LOG.warning("auto scaling notification not delivered: %s", exc)


def _emit(group: FakeAutoScalingGroup, detail_type: str, detail: dict[str, Any], *extra: str) -> None:
    account, region, arn, moment = group.account_id, group.region, group.arn, now()
    _send(
        lambda: eventbus.emit(
            account_id=account,
            region=region,
            source="aws.autoscaling",
            detail_type=detail_type,
            detail=detail,
            resources=[arn, *extra],
            time=moment,
        )
    )


def _notify(group: FakeAutoScalingGroup, target_arn: str, subject: str, message: dict[str, Any]) -> None:
    """Publish to an SNS topic or send to an SQS queue, as lifecycle hooks and notification
    configurations do."""
    body = json.dumps(message)

    def deliver() -> None:
        parts = target_arn.split(":")
        clients = connect_to(aws_access_key_id=parts[4], region_name=parts[3])
        if parts[2] == "sqs":
            url = clients.sqs.get_queue_url(QueueName=parts[5], QueueOwnerAWSAccountId=parts[4])["QueueUrl"]
            clients.sqs.send_message(QueueUrl=url, MessageBody=body)
        elif parts[2] == "sns":
            clients.sns.publish(TopicArn=target_arn, Subject=subject, Message=body)

    _send(deliver)


def test_notification(group: FakeAutoScalingGroup, target_arn: str) -> None:
    """What AWS sends a hook's notification target, or a notification configuration's topic, when
    it is put: an ``autoscaling:TEST_NOTIFICATION`` message (consumers must skip it)."""
    message = {
        "AccountId": group.account_id,
        "RequestId": str(uuid.uuid4()),
        "AutoScalingGroupARN": group.arn,
        "AutoScalingGroupName": group.name,
        "Service": "AWS Auto Scaling",
        "Event": "autoscaling:TEST_NOTIFICATION",
        "Time": iso(now()),
    }
    _notify(group, target_arn, f'Auto Scaling: test notification for group "{group.name}"', message)


# --- activities ----------------------------------------------------------------------------------


def activities(group: FakeAutoScalingGroup) -> list[dict[str, Any]]:
    if not hasattr(group, "vsa_activities"):
        group.vsa_activities = []  # type: ignore[attr-defined]
    found: list[dict[str, Any]] = group.vsa_activities  # type: ignore[attr-defined]
    return found


def _activity(group: FakeAutoScalingGroup, description: str, cause: str) -> dict[str, Any]:
    activity = {
        "ActivityId": str(uuid.uuid4()),
        "AutoScalingGroupName": group.name,
        "AutoScalingGroupARN": group.arn,
        "Description": description,
        "Cause": cause,
        "StartTime": now(),
        "StatusCode": "InProgress",
        "Progress": 50,
        "Details": "",
    }
    activities(group).append(activity)
    return activity


def _finish(activity: dict[str, Any], status: str, message: str = "") -> None:
    activity.update(StatusCode=status, Progress=100, EndTime=now())
    if message:
        activity["StatusMessage"] = message


def _scaling_event(
    group: FakeAutoScalingGroup, state: InstanceState, activity: dict[str, Any], kind: str
) -> None:
    """``EC2 Instance Launch Successful`` / ``... Unsuccessful`` / ``EC2 Instance Terminate Successful``
    on EventBridge, and the matching notification (``autoscaling:EC2_INSTANCE_LAUNCH`` ...) to the
    group's notification configurations."""
    launch = kind.startswith("launch")
    instance_id = state.instance.id
    # moto's InstanceState.availability_zone is an InstancePlacement object: str() gives the zone.
    detail = {
        "Origin": "EC2" if launch else "AutoScalingGroup",
        "Destination": "AutoScalingGroup" if launch else "EC2",
        "StatusCode": "InProgress" if activity["StatusCode"] == "Successful" else activity["StatusCode"],
        "Description": activity["Description"],
        "AutoScalingGroupName": group.name,
        "ActivityId": activity["ActivityId"],
        "Details": {
            "Subnet ID": state.instance.subnet_id or "",
            "Availability Zone": str(state.availability_zone),
        },
        "RequestId": activity["ActivityId"],
        "StatusMessage": activity.get("StatusMessage", ""),
        "EndTime": iso(activity.get("EndTime") or now()),
        "EC2InstanceId": instance_id,
        "StartTime": iso(activity["StartTime"]),
        "Cause": activity["Cause"],
    }
    detail_type, notification = {
        "launch": ("EC2 Instance Launch Successful", "autoscaling:EC2_INSTANCE_LAUNCH"),
        "launch-error": ("EC2 Instance Launch Unsuccessful", "autoscaling:EC2_INSTANCE_LAUNCH_ERROR"),
        "terminate": ("EC2 Instance Terminate Successful", "autoscaling:EC2_INSTANCE_TERMINATE"),
    }[kind]
    instance_arn = f"arn:aws:ec2:{group.region}:{group.account_id}:instance/{instance_id}"
    _emit(group, detail_type, detail, instance_arn)
    verb = "launch" if launch else "termination"
    for topic, types in getattr(group, "vsa_notifications", {}).items():
        if notification in types:
            message = {
                **{k: v for k, v in detail.items() if k not in ("Origin", "Destination")},
                "Progress": 50,
                "AccountId": group.account_id,
                "AutoScalingGroupARN": group.arn,
                "Service": "AWS Auto Scaling",
                "Time": iso(now()),
                "Event": notification,
            }
            failed = " error" if kind == "launch-error" else ""
            _notify(group, topic, f'Auto Scaling: {verb}{failed} for group "{group.name}"', message)


# --- the lifecycle -------------------------------------------------------------------------------


def _start_actions(group: FakeAutoScalingGroup, state: InstanceState, hooks: list[Hook]) -> None:
    launch = hooks[0].transition == LAUNCHING
    state.lifecycle_state = "Pending:Wait" if launch else "Terminating:Wait"
    scale = CONFIG["time_scale"]
    for hook in hooks:
        started = clock()
        action = Action(
            group=group,
            hook=hook,
            instance_id=state.instance.id,
            deadline=started + hook.heartbeat_timeout * scale,
            global_deadline=started + min(100 * hook.heartbeat_timeout, GLOBAL_TIMEOUT_CAP) * scale,
        )
        ACTIONS[action.token] = action
        detail = {
            "LifecycleActionToken": action.token,
            "AutoScalingGroupName": group.name,
            "LifecycleHookName": hook.name,
            "EC2InstanceId": state.instance.id,
            "LifecycleTransition": hook.transition,
            "NotificationMetadata": hook.metadata,
            "Origin": "EC2" if launch else "AutoScalingGroup",
            "Destination": "AutoScalingGroup" if launch else "EC2",
        }
        detail = {k: v for k, v in detail.items() if v is not None}
        kind = "launch" if launch else "terminate"
        _emit(group, f"EC2 Instance-{kind} Lifecycle Action", detail)
        if hook.target_arn:
            message = {
                "Origin": detail["Origin"],
                "Destination": detail["Destination"],
                "LifecycleHookName": hook.name,
                "AccountId": group.account_id,
                "RequestId": str(uuid.uuid4()),
                "LifecycleTransition": hook.transition,
                "AutoScalingGroupName": group.name,
                "Service": "AWS Auto Scaling",
                "Time": iso(now()),
                "EC2InstanceId": state.instance.id,
                "LifecycleActionToken": action.token,
                **({"NotificationMetadata": hook.metadata} if hook.metadata else {}),
            }
            what = hook.transition.rsplit("_", 1)[1]
            subject = (
                f"Auto Scaling:  Lifecycle action '{what}' for instance {state.instance.id} in progress."
            )
            _notify(group, hook.target_arn, subject, message)


def begin_launch(group: FakeAutoScalingGroup, state: InstanceState, before: int) -> None:
    instance_id = state.instance.id
    CURRENT_ACTIVITY[state.instance.id] = _activity(
        group,
        f"Launching a new EC2 instance: {instance_id}",
        f"At {iso(now())} an instance was started in response to a difference between desired and "
        f"actual capacity, increasing the capacity from {before} to {before + 1}.",
    )
    state.lifecycle_state = "Pending"
    # "your newly launched instance completes its startup sequence and transitions to a wait
    # state" (Amazon EC2 Auto Scaling lifecycle hooks): the hooks start once the EC2 instance runs
    # (under the realistic profile it is pending a while first).
    ec2_instances.when_running(state.instance, lambda: _launched(group, state))


def _launched(group: FakeAutoScalingGroup, state: InstanceState) -> None:
    with LOCK:
        if state not in group.instance_states or state.lifecycle_state != "Pending":
            return  # scaled in, terminated or the group deleted before it ran
        hooks = hooks_of(group, LAUNCHING)
        if hooks:
            _start_actions(group, state, hooks)
        else:
            _finish_launch(group, state)


def _finish_launch(group: FakeAutoScalingGroup, state: InstanceState) -> None:
    state.lifecycle_state = "Pending:Proceed"  # nothing to do there locally (no ELB health checks)
    state.lifecycle_state = "InService"
    activity = CURRENT_ACTIVITY[state.instance.id]
    _finish(activity, "Successful")
    _scaling_event(group, state, activity, "launch")


def begin_terminate(group: FakeAutoScalingGroup, state: InstanceState, cause: str) -> dict[str, Any]:
    if state.lifecycle_state.startswith("Pending"):  # scaled in before its launch completed
        _drop_actions(state.instance.id)
        launch: dict[str, Any] = CURRENT_ACTIVITY[state.instance.id]
        _finish(launch, "Cancelled", "Instance was taken out of service before its launch completed")
    CURRENT_ACTIVITY[state.instance.id] = _activity(
        group, f"Terminating EC2 instance: {state.instance.id}", cause
    )
    state.lifecycle_state = "Terminating"
    hooks = hooks_of(group, TERMINATING)
    if hooks:
        _start_actions(group, state, hooks)
    else:
        _finish_terminate(group, state)
    activity: dict[str, Any] = CURRENT_ACTIVITY[state.instance.id]
    return activity


def _finish_terminate(group: FakeAutoScalingGroup, state: InstanceState, launch_error: str = "") -> None:
    state.lifecycle_state = "Terminating:Proceed"
    _drop_actions(state.instance.id)
    with contextlib.suppress(InvalidInstanceIdError):  # already gone from EC2
        group.ec2_backend.terminate_instances([state.instance.id])
    state.lifecycle_state = "Terminated"
    group.instance_states = [s for s in group.instance_states if s is not state]
    activity = CURRENT_ACTIVITY[state.instance.id]
    if launch_error:
        _finish(activity, "Cancelled", launch_error)
        _scaling_event(group, state, activity, "launch-error")
    else:
        _finish(activity, "Successful")
        _scaling_event(group, state, activity, "terminate")


def _drop_actions(instance_id: str) -> None:
    for token in [t for t, a in ACTIONS.items() if a.instance_id == instance_id]:
        FINISHED[token] = ACTIONS.pop(token).instance_id


def _state(group: FakeAutoScalingGroup, instance_id: str) -> InstanceState | None:
    return next((s for s in group.instance_states if s.instance.id == instance_id), None)


def complete(action: Action, result: str, reason: str) -> None:
    """Apply CONTINUE or ABANDON to ``action`` (caller holds ``LOCK``)."""
    ACTIONS.pop(action.token, None)
    FINISHED[action.token] = action.instance_id
    group, state = action.group, _state(action.group, action.instance_id)
    if state is None or state.lifecycle_state not in ("Pending:Wait", "Terminating:Wait"):
        return
    waiting = [a for a in ACTIONS.values() if a.instance_id == action.instance_id]
    if state.lifecycle_state == "Terminating:Wait":
        # Both results terminate; ABANDON skips the remaining hooks, CONTINUE waits for them.
        if result == "ABANDON" or not waiting:
            _finish_terminate(group, state)
    elif result == "ABANDON":
        _finish_terminate(
            group,
            state,
            launch_error="Instance failed to complete user's Lifecycle Action: Lifecycle Action with token "
            f"{action.token} was abandoned: {reason}",
        )
        if group.name in group.autoscaling_backend.autoscaling_groups:
            group.set_desired_capacity(group.desired_capacity)  # launch a replacement
    elif not waiting:
        _finish_launch(group, state)


def find_action(
    account: str, region: str, group: str, hook: str, token: str | None, instance_id: str | None
) -> Action:
    for action in ACTIONS.values():
        if (
            action.group.account_id == account
            and action.group.region == region
            and action.group.name == group
            and action.hook.name == hook
            and (action.token == token if token else action.instance_id == instance_id)
        ):
            return action
    if not instance_id:
        known = ACTIONS.get(token or "")
        instance_id = known.instance_id if known else FINISHED.get(token or "")
    if instance_id:
        raise ValidationError(f"No active Lifecycle Action found with instance ID {instance_id}")
    raise ValidationError(f"No active Lifecycle Action found with token {token}")


def expire() -> None:
    with LOCK:
        moment = clock()
        for action in [a for a in ACTIONS.values() if min(a.deadline, a.global_deadline) <= moment]:
            if action.token in ACTIONS:
                reason = "Heartbeat Timeout" if action.deadline <= moment else "Global Timeout"
                complete(action, action.hook.default_result, reason)


_threads_started = False


def _ensure_threads() -> None:
    global _threads_started
    if _threads_started:
        return
    _threads_started = True
    threading.Thread(target=_outbox_worker, name="asg-notifications", daemon=True).start()

    def tick() -> None:
        while True:
            time.sleep(0.1)
            try:
                expire()
            except Exception:
                LOG.exception("lifecycle timeout handling failed")

    threading.Thread(target=tick, name="asg-lifecycle-timers", daemon=True).start()


def advance(seconds: float, group: str | None = None) -> None:
    """Move the emulated clock ``seconds`` (AWS seconds, scaled by time_scale) forward; with
    ``group``, only for that group's pending actions (their deadlines come ``seconds`` closer),
    so a test can time out its own group's hooks while tests beside it keep theirs."""
    global _offset
    delta = seconds * CONFIG["time_scale"]
    with LOCK:
        if group is None:
            _offset += delta
        else:
            for action in ACTIONS.values():
                if action.group.name == group:
                    action.deadline -= delta
                    action.global_deadline -= delta
    expire()


# --- capacity: replaces moto's methods ----------------------------------------------------------

_moto_replace = FakeAutoScalingGroup.replace_autoscaling_group_instances


def _set_desired_capacity(group: FakeAutoScalingGroup, new_capacity: int | None) -> None:
    """Reach the desired capacity counting ``Pending*`` and ``InService`` instances (moto counts only
    ``InService``, so it launched again while instances waited on a hook); scale in through the
    terminate lifecycle, never picking an instance protected from scale-in. Mixed-instances weights
    are not modelled: one instance is one unit of capacity."""
    with LOCK:
        group.desired_capacity = group.min_size if new_capacity is None else new_capacity
        counted = [s for s in group.instance_states if s.lifecycle_state in COUNTED]
        delta = (group.desired_capacity or 0) - len(counted)
        # A suspended Launch or Terminate process keeps the desired capacity but neither adds nor
        # removes instances until it is resumed (AWS: "Suspend and resume processes for your Auto
        # Scaling group"; moto stores the suspension and launches anyway). Resuming reconciles.
        suspended = {p["ProcessName"] for p in group.suspended_processes}
        if (delta > 0 and "Launch" in suspended) or (delta < 0 and "Terminate" in suspended):
            delta = 0
        if delta > 0:
            group.replace_autoscaling_group_instances(delta, group.get_propagated_tags())
        elif delta < 0:
            candidates = [s for s in counted if not s.protected_from_scale_in]
            if "NewestInstance" in group.termination_policies:
                candidates.reverse()
            size = len(counted)
            for state in candidates[:-delta]:
                begin_terminate(
                    group,
                    state,
                    f"At {iso(now())} an instance was taken out of service in response to a difference "
                    f"between desired and actual capacity, shrinking the capacity from {size} to {size - 1}.",
                )
                size -= 1
        if group.name in group.autoscaling_backend.autoscaling_groups:
            group.autoscaling_backend.update_attached_elbs(group.name)
            group.autoscaling_backend.update_attached_target_groups(group.name)


def _replace_instances(
    group: FakeAutoScalingGroup, count_needed: int, propagated_tags: dict[str, str]
) -> None:
    """moto's launch, then the launch lifecycle for each new instance."""
    with LOCK:
        before = {s.instance.id for s in group.instance_states}
        size = len([s for s in group.instance_states if s.lifecycle_state in COUNTED])
        _moto_replace(group, count_needed, propagated_tags)
        for state in [s for s in group.instance_states if s.instance.id not in before]:
            begin_launch(group, state, size)
            size += 1


def _notify_terminate_instances(backend: AutoScalingBackend, instance_ids: list[str]) -> None:
    """EC2 TerminateInstances on group members: forget them, and let the group replace them."""
    with LOCK:
        for group in list(backend.autoscaling_groups.values()):
            gone = [s for s in group.instance_states if s.instance.id in instance_ids]
            if gone:
                for state in gone:
                    _drop_actions(state.instance.id)
                group.instance_states = [s for s in group.instance_states if s not in gone]
                group.set_desired_capacity(group.desired_capacity)


_moto_resume = AutoScalingBackend.resume_processes


def _resume_processes(backend: AutoScalingBackend, group_name: str, scaling_processes: list[str]) -> None:
    """moto's resume, then the group reaches its desired capacity (what a suspended Launch or
    Terminate held back)."""
    with LOCK:
        _moto_resume(backend, group_name, scaling_processes)
        group = backend.autoscaling_groups[group_name]
        group.set_desired_capacity(group.desired_capacity)


def install() -> None:
    """Replace moto's capacity logic (class attributes: every caller, e.g. Create/Update/
    SetDesiredCapacity/ExecutePolicy/Detach/Standby, goes through it)."""
    patches: list[tuple[type, str, Callable[..., None]]] = [
        (FakeAutoScalingGroup, "set_desired_capacity", _set_desired_capacity),
        (FakeAutoScalingGroup, "replace_autoscaling_group_instances", _replace_instances),
        (AutoScalingBackend, "notify_terminate_instances", _notify_terminate_instances),
        (AutoScalingBackend, "resume_processes", _resume_processes),
    ]
    for cls, name, function in patches:
        setattr(cls, name, function)
