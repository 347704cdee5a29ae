"""EC2 Auto Scaling lifecycle hooks, events and capacity as AWS documents them.

Community LocalStack has no Auto Scaling at all; moto (underneath) launches straight into
``InService``, never waits on hooks, lacks CompleteLifecycleAction, RecordLifecycleActionHeartbeat
and notification configurations, and emits no events. Every test here fails there.
"""

import contextlib
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.localcloud.conftest import assert_matches_sample

LAUNCHING, TERMINATING = "autoscaling:EC2_INSTANCE_LAUNCHING", "autoscaling:EC2_INSTANCE_TERMINATING"
ASG = {"source": ["aws.autoscaling"]}
LIFECYCLE_KEYS = {
    "LifecycleActionToken",
    "AutoScalingGroupName",
    "LifecycleHookName",
    "EC2InstanceId",
    "LifecycleTransition",
    "Origin",
    "Destination",
}


def wait_until(probe: Callable[[], Any], timeout: float = 20, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s (last: {value!r})")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def launch_template(aws: Callable[[str], Any]) -> Iterator[str]:
    name = f"lt-{uuid.uuid4().hex[:8]}"
    aws("ec2").create_launch_template(
        LaunchTemplateName=name, LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "t3.micro"}
    )
    yield name
    aws("ec2").delete_launch_template(LaunchTemplateName=name)


@pytest.fixture
def time_scale(control: Callable[..., dict[str, Any]]) -> Iterator[Callable[[float], None]]:
    yield lambda scale: control("autoscaling", "configure", time_scale=scale) and None
    control("autoscaling", "configure", time_scale=1.0)


class Group:
    def __init__(self, aws: Callable[[str], Any], name: str) -> None:
        self.asg, self.ec2, self.name = aws("autoscaling"), aws("ec2"), name

    def describe(self) -> dict[str, Any]:
        groups = self.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[self.name])["AutoScalingGroups"]
        group: dict[str, Any] = groups[0]
        return group

    def states(self) -> dict[str, str]:
        return {i["InstanceId"]: i["LifecycleState"] for i in self.describe()["Instances"]}

    def wait_states(self, expected: Callable[[dict[str, str]], bool], what: str) -> dict[str, str]:
        found: dict[str, str] = {}

        def probe() -> bool:
            found.clear()
            found.update(self.states())
            return expected(found)

        wait_until(probe, what=f"{what} (states {found})")
        return found

    def ec2_state(self, instance_id: str) -> str:
        reservations = self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        state: str = reservations[0]["Instances"][0]["State"]["Name"]
        return state

    def complete(self, hook: str, result: str = "CONTINUE", **target: str) -> None:
        self.asg.complete_lifecycle_action(
            AutoScalingGroupName=self.name, LifecycleHookName=hook, LifecycleActionResult=result, **target
        )


@pytest.fixture
def make_group(aws: Callable[[str], Any], launch_template: str) -> Iterator[Callable[..., Group]]:
    names: list[str] = []

    def make(
        desired: int = 1, hooks: tuple[tuple[str, str], ...] = (), name: str | None = None, **extra: Any
    ) -> Group:
        name = name or f"asg-{uuid.uuid4().hex[:8]}"
        specs = [{"LifecycleHookName": h, "LifecycleTransition": t, **extra.pop(h, {})} for h, t in hooks]
        aws("autoscaling").create_auto_scaling_group(
            AutoScalingGroupName=name,
            MinSize=0,
            MaxSize=5,
            DesiredCapacity=desired,
            LaunchTemplate={"LaunchTemplateName": launch_template},
            AvailabilityZones=["us-east-1a"],
            **({"LifecycleHookSpecificationList": specs} if specs else {}),
            **extra,
        )
        names.append(name)
        return Group(aws, name)

    yield make
    for name in dict.fromkeys(names):
        with contextlib.suppress(ClientError):  # unless the test deleted it
            aws("autoscaling").delete_auto_scaling_group(AutoScalingGroupName=name, ForceDelete=True)


def lifecycle_events(capture: Any, group: Group, kind: str, count: int = 1) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = capture.wait_for(
        lambda e: (
            e["detail-type"] == f"EC2 Instance-{kind} Lifecycle Action"
            and e["detail"]["AutoScalingGroupName"] == group.name
        ),
        count=count,
    )
    return events


def test_launch_hook_holds_instance_in_pending_wait_and_emits_the_lifecycle_action_event(
    make_group: Callable[..., Group], event_capture: Any
) -> None:
    capture = event_capture(ASG)
    group = make_group(hooks=(("ready", LAUNCHING),), ready={"NotificationMetadata": "vsa-node"})
    (event,) = lifecycle_events(capture, group, "launch")
    (instance_id,) = group.states()
    arn = group.describe()["AutoScalingGroupARN"]
    assert re.fullmatch(
        rf"arn:aws:autoscaling:us-east-1:\d{{12}}:autoScalingGroup:[0-9a-f-]{{36}}:"
        rf"autoScalingGroupName/{group.name}",
        arn,
    )
    assert event["source"] == "aws.autoscaling"
    assert event["resources"] == [arn]
    detail = event["detail"]
    assert set(detail) == LIFECYCLE_KEYS | {"NotificationMetadata"}
    assert_matches_sample(event, "autoscaling/launch_lifecycle_action.json")
    assert uuid.UUID(detail["LifecycleActionToken"])
    assert detail["LifecycleHookName"] == "ready"
    assert detail["EC2InstanceId"] == instance_id
    assert detail["LifecycleTransition"] == LAUNCHING
    assert detail["NotificationMetadata"] == "vsa-node"
    assert (detail["Origin"], detail["Destination"]) == ("EC2", "AutoScalingGroup")
    assert group.states() == {instance_id: "Pending:Wait"}
    (described,) = group.asg.describe_auto_scaling_instances(InstanceIds=[instance_id])[
        "AutoScalingInstances"
    ]
    assert described["LifecycleState"] == "Pending:Wait"
    assert group.ec2_state(instance_id) == "running"  # a real instance, waiting for the hook


def test_continue_puts_the_instance_in_service_and_emits_launch_successful(
    make_group: Callable[..., Group], event_capture: Any
) -> None:
    capture = event_capture(ASG)
    group = make_group(hooks=(("ready", LAUNCHING),))
    (event,) = lifecycle_events(capture, group, "launch")
    group.complete("ready", LifecycleActionToken=event["detail"]["LifecycleActionToken"])
    (instance_id,) = group.states()
    assert group.states() == {instance_id: "InService"}
    (success,) = capture.wait_for(lambda e: e["detail-type"] == "EC2 Instance Launch Successful")
    detail = success["detail"]
    assert success["resources"][0] == group.describe()["AutoScalingGroupARN"]
    assert success["resources"][1].endswith(f":instance/{instance_id}")
    assert detail["EC2InstanceId"] == instance_id
    assert detail["Description"] == f"Launching a new EC2 instance: {instance_id}"
    assert detail["Details"]["Availability Zone"] == "us-east-1a"
    assert detail["Details"]["Subnet ID"].startswith("subnet-")
    assert (detail["Origin"], detail["Destination"]) == ("EC2", "AutoScalingGroup")
    assert {"StatusCode", "ActivityId", "StartTime", "EndTime", "Cause", "RequestId"} <= set(detail)
    activities = group.asg.describe_scaling_activities(AutoScalingGroupName=group.name)["Activities"]
    assert [(a["Description"], a["StatusCode"]) for a in activities] == [
        (f"Launching a new EC2 instance: {instance_id}", "Successful")
    ]


def test_abandon_terminates_the_instance_and_the_replacement_waits_on_the_hook_again(
    make_group: Callable[..., Group], event_capture: Any
) -> None:
    capture = event_capture(ASG)
    group = make_group(hooks=(("ready", LAUNCHING),))
    (first,) = lifecycle_events(capture, group, "launch")
    first_id = first["detail"]["EC2InstanceId"]
    group.complete("ready", "ABANDON", InstanceId=first_id)
    assert group.ec2_state(first_id) == "terminated"
    (replacement,) = group.states()
    assert replacement != first_id
    assert group.states()[replacement] == "Pending:Wait"
    second = lifecycle_events(capture, group, "launch", count=2)[1]
    assert second["detail"]["EC2InstanceId"] == replacement
    (failed,) = capture.wait_for(lambda e: e["detail-type"] == "EC2 Instance Launch Unsuccessful")
    assert failed["detail"]["EC2InstanceId"] == first_id
    assert "ABANDON" in failed["detail"]["StatusMessage"]


def test_a_second_completion_or_an_unknown_action_is_a_validation_error(
    make_group: Callable[..., Group], event_capture: Any
) -> None:
    capture = event_capture(ASG)
    group = make_group(hooks=(("ready", LAUNCHING),))
    (event,) = lifecycle_events(capture, group, "launch")
    instance_id = event["detail"]["EC2InstanceId"]
    group.complete("ready", InstanceId=instance_id)
    for attempt in (
        {"InstanceId": instance_id},
        {"LifecycleActionToken": event["detail"]["LifecycleActionToken"]},
    ):
        with pytest.raises(ClientError) as error:
            group.complete("ready", **attempt)
        assert error.value.response["Error"]["Code"] == "ValidationError"
        assert error.value.response["Error"]["Message"] == (
            f"No active Lifecycle Action found with instance ID {instance_id}"
        )
    with pytest.raises(ClientError, match="No active Lifecycle Action found with instance ID i-0123"):
        group.complete("ready", InstanceId="i-0123456789abcdef0")


def test_a_heartbeat_extends_the_timeout_and_expiry_applies_the_default_result(
    make_group: Callable[..., Group], event_capture: Any, control: Callable[..., dict[str, Any]]
) -> None:
    capture = event_capture(ASG)
    hook = {"HeartbeatTimeout": 600, "DefaultResult": "CONTINUE"}
    group = make_group(hooks=(("ready", LAUNCHING),), ready=hook)
    (event,) = lifecycle_events(capture, group, "launch")
    instance_id = event["detail"]["EC2InstanceId"]
    control("autoscaling", "advance", seconds=500)
    assert group.states() == {instance_id: "Pending:Wait"}
    group.asg.record_lifecycle_action_heartbeat(
        AutoScalingGroupName=group.name,
        LifecycleHookName="ready",
        LifecycleActionToken=event["detail"]["LifecycleActionToken"],
    )
    control("autoscaling", "advance", seconds=500)  # 1000 s after launch: past the first 600 s
    assert group.states() == {instance_id: "Pending:Wait"}
    control("autoscaling", "advance", seconds=120)  # 620 s after the heartbeat
    assert group.states() == {instance_id: "InService"}


def test_advancing_one_groups_clock_times_out_its_actions_only(
    make_group: Callable[..., Group], event_capture: Any, control: Callable[..., dict[str, Any]]
) -> None:
    # (a control of the local cloud's, not an AWS API: tests that run side by side each move
    # only their own group's lifecycle clock)
    capture = event_capture(ASG)
    hook = {"HeartbeatTimeout": 600, "DefaultResult": "CONTINUE"}
    mine = make_group(hooks=(("ready", LAUNCHING),), ready=hook)
    other = make_group(hooks=(("ready", LAUNCHING),), ready=hook)
    (mine_event,) = lifecycle_events(capture, mine, "launch")
    (other_event,) = lifecycle_events(capture, other, "launch")
    control("autoscaling", "advance", seconds=620, AutoScalingGroupName=mine.name)
    assert mine.states() == {mine_event["detail"]["EC2InstanceId"]: "InService"}
    assert other.states() == {other_event["detail"]["EC2InstanceId"]: "Pending:Wait"}


def test_heartbeats_cannot_extend_past_the_global_timeout(
    make_group: Callable[..., Group], event_capture: Any, control: Callable[..., dict[str, Any]]
) -> None:
    capture = event_capture(ASG)
    group = make_group(hooks=(("ready", LAUNCHING),), ready={"HeartbeatTimeout": 7200})
    (hook,) = group.asg.describe_lifecycle_hooks(AutoScalingGroupName=group.name)["LifecycleHooks"]
    assert hook["GlobalTimeout"] == 172800  # min(100 x HeartbeatTimeout, 48 h)
    (event,) = lifecycle_events(capture, group, "launch")
    instance_id, elapsed = event["detail"]["EC2InstanceId"], 0
    while group.states().get(instance_id) == "Pending:Wait":
        group.asg.record_lifecycle_action_heartbeat(
            AutoScalingGroupName=group.name, LifecycleHookName="ready", InstanceId=instance_id
        )
        control("autoscaling", "advance", seconds=7000)
        elapsed += 7000
    assert 172800 <= elapsed < 172800 + 7000
    assert group.ec2_state(instance_id) == "terminated"  # the default result, ABANDON


def test_heartbeat_timeout_applies_default_abandon(
    make_group: Callable[..., Group], event_capture: Any, time_scale: Callable[[float], None]
) -> None:
    time_scale(0.05)  # the minimum HeartbeatTimeout, 30 s, lasts 1.5 s
    capture = event_capture(ASG)
    group = make_group(hooks=(("ready", LAUNCHING),), ready={"HeartbeatTimeout": 30})
    (hook,) = group.asg.describe_lifecycle_hooks(AutoScalingGroupName=group.name)["LifecycleHooks"]
    assert hook["DefaultResult"] == "ABANDON"
    (event,) = lifecycle_events(capture, group, "launch")
    first_id = event["detail"]["EC2InstanceId"]
    wait_until(lambda: group.ec2_state(first_id) == "terminated", what="abandoned instance terminated")
    (failed,) = capture.wait_for(lambda e: e["detail-type"] == "EC2 Instance Launch Unsuccessful")
    assert failed["detail"]["EC2InstanceId"] == first_id
    assert "Heartbeat Timeout" in failed["detail"]["StatusMessage"]
    assert lifecycle_events(capture, group, "launch", count=2)[1]["detail"]["EC2InstanceId"] != first_id


def test_instances_waiting_on_a_hook_count_toward_desired_capacity(
    make_group: Callable[..., Group], event_capture: Any
) -> None:
    capture = event_capture(ASG)
    group = make_group(desired=2, hooks=(("ready", LAUNCHING),))
    lifecycle_events(capture, group, "launch", count=2)
    for desired in (2, 2, 3, 2, 2):
        group.asg.set_desired_capacity(AutoScalingGroupName=group.name, DesiredCapacity=desired)
    states = group.states()
    assert sorted(states.values()) == ["Pending:Wait", "Pending:Wait"]
    assert group.describe()["DesiredCapacity"] == 2
    launched = capture.settle(1)
    assert len([e for e in launched if e["detail-type"] == "EC2 Instance-launch Lifecycle Action"]) == 3


def test_scale_in_with_a_terminate_hook_waits_then_continue_terminates_the_ec2_instance(
    make_group: Callable[..., Group], event_capture: Any
) -> None:
    capture = event_capture(ASG)
    group = make_group(desired=1)
    (instance_id,) = group.wait_states(lambda s: list(s.values()) == ["InService"], "in service")
    group.asg.put_lifecycle_hook(
        AutoScalingGroupName=group.name, LifecycleHookName="drain", LifecycleTransition=TERMINATING
    )
    group.asg.set_desired_capacity(AutoScalingGroupName=group.name, DesiredCapacity=0)
    assert group.states() == {instance_id: "Terminating:Wait"}
    assert group.ec2_state(instance_id) == "running"
    (event,) = lifecycle_events(capture, group, "terminate")
    assert event["resources"] == [group.describe()["AutoScalingGroupARN"]]
    detail = event["detail"]
    assert set(detail) == LIFECYCLE_KEYS  # no NotificationMetadata when the hook has none
    assert_matches_sample(
        event, "autoscaling/terminate_lifecycle_action.json", optional=frozenset({"NotificationMetadata"})
    )
    assert (detail["EC2InstanceId"], detail["LifecycleTransition"]) == (instance_id, TERMINATING)
    assert (detail["Origin"], detail["Destination"]) == ("AutoScalingGroup", "EC2")
    group.complete("drain", LifecycleActionToken=detail["LifecycleActionToken"])
    assert group.states() == {}
    assert group.ec2_state(instance_id) == "terminated"
    (done,) = capture.wait_for(lambda e: e["detail-type"] == "EC2 Instance Terminate Successful")
    assert done["detail"]["EC2InstanceId"] == instance_id
    assert done["detail"]["Description"] == f"Terminating EC2 instance: {instance_id}"
    assert (done["detail"]["Origin"], done["detail"]["Destination"]) == ("AutoScalingGroup", "EC2")


def test_terminate_instance_in_group_waits_on_the_hook_and_is_replaced(
    make_group: Callable[..., Group], event_capture: Any
) -> None:
    capture = event_capture(ASG)
    group = make_group(desired=1, hooks=(("drain", TERMINATING),))
    (old,) = group.wait_states(lambda s: list(s.values()) == ["InService"], "in service")
    activity = group.asg.terminate_instance_in_auto_scaling_group(
        InstanceId=old, ShouldDecrementDesiredCapacity=False
    )["Activity"]
    assert activity["Description"] == f"Terminating EC2 instance: {old}"
    states = group.states()
    assert states.pop(old) == "Terminating:Wait"
    assert list(states.values()) == ["InService"]  # the replacement; the leaving one does not count
    lifecycle_events(capture, group, "terminate")
    group.complete("drain", "ABANDON", InstanceId=old)  # ABANDON terminates too
    assert group.ec2_state(old) == "terminated"
    assert old not in group.states()


def test_an_instance_scaled_in_while_waiting_to_launch_goes_to_the_terminate_hook(
    make_group: Callable[..., Group], event_capture: Any
) -> None:
    capture = event_capture(ASG)
    group = make_group(desired=1, hooks=(("ready", LAUNCHING), ("drain", TERMINATING)))
    (launch,) = lifecycle_events(capture, group, "launch")
    instance_id = launch["detail"]["EC2InstanceId"]
    group.asg.set_desired_capacity(AutoScalingGroupName=group.name, DesiredCapacity=0)
    assert group.states() == {instance_id: "Terminating:Wait"}
    with pytest.raises(ClientError, match="No active Lifecycle Action found"):
        group.complete("ready", LifecycleActionToken=launch["detail"]["LifecycleActionToken"])
    (terminate,) = lifecycle_events(capture, group, "terminate")
    group.complete("drain", LifecycleActionToken=terminate["detail"]["LifecycleActionToken"])
    assert group.states() == {}
    assert group.ec2_state(instance_id) == "terminated"


def test_an_instance_terminated_through_ec2_is_replaced(make_group: Callable[..., Group]) -> None:
    group = make_group(desired=1)
    (old,) = group.wait_states(lambda s: list(s.values()) == ["InService"], "in service")
    group.ec2.terminate_instances(InstanceIds=[old])
    states = group.wait_states(lambda s: len(s) == 1 and old not in s, "a replacement")
    assert list(states.values()) == ["InService"]


def test_scale_in_never_picks_an_instance_protected_from_scale_in(make_group: Callable[..., Group]) -> None:
    group = make_group(desired=2)
    states = group.wait_states(lambda s: list(s.values()) == ["InService"] * 2, "two in service")
    oldest = next(iter(states))  # the one the oldest-first choice would take
    group.asg.set_instance_protection(
        AutoScalingGroupName=group.name, InstanceIds=[oldest], ProtectedFromScaleIn=True
    )
    group.asg.set_desired_capacity(AutoScalingGroupName=group.name, DesiredCapacity=1)
    assert group.states() == {oldest: "InService"}
    protected = make_group(desired=1, NewInstancesProtectedFromScaleIn=True)
    (kept,) = protected.states()
    protected.asg.set_desired_capacity(AutoScalingGroupName=protected.name, DesiredCapacity=0)
    assert protected.states() == {kept: "InService"}


def test_a_suspended_launch_or_terminate_keeps_the_desired_capacity_until_resumed(
    make_group: Callable[..., Group],
) -> None:
    """AWS, "Suspend and resume processes for your Auto Scaling group": with Launch suspended
    the group does not add instances when it scales out, with Terminate suspended it does not
    remove them when it scales in; the desired capacity is kept and reached once resumed."""
    group = make_group(desired=1)
    (first,) = group.wait_states(lambda s: list(s.values()) == ["InService"], "in service")
    group.asg.suspend_processes(AutoScalingGroupName=group.name, ScalingProcesses=["Launch"])
    group.asg.set_desired_capacity(AutoScalingGroupName=group.name, DesiredCapacity=3)
    assert group.describe()["DesiredCapacity"] == 3
    assert group.states() == {first: "InService"}
    suspended = {p["ProcessName"] for p in group.describe()["SuspendedProcesses"]}
    assert suspended == {"Launch"}
    group.asg.resume_processes(AutoScalingGroupName=group.name, ScalingProcesses=["Launch"])
    group.wait_states(lambda s: list(s.values()) == ["InService"] * 3, "three in service")
    group.asg.suspend_processes(AutoScalingGroupName=group.name, ScalingProcesses=["Terminate"])
    group.asg.set_desired_capacity(AutoScalingGroupName=group.name, DesiredCapacity=1)
    assert len(group.states()) == 3
    group.asg.resume_processes(AutoScalingGroupName=group.name)
    group.wait_states(lambda s: list(s.values()) == ["InService"], "back to one")


def test_lifecycle_hooks_are_described_as_put_and_leave_with_their_group(
    aws: Callable[[str], Any], make_group: Callable[..., Group]
) -> None:
    group = make_group(desired=0)
    queue_arn = f"arn:aws:sqs:us-east-1:000000000000:hooks-{group.name}"
    role = "arn:aws:iam::000000000000:role/asg-hooks"
    group.asg.put_lifecycle_hook(
        AutoScalingGroupName=group.name,
        LifecycleHookName="ready",
        LifecycleTransition=LAUNCHING,
        NotificationTargetARN=queue_arn,
        RoleARN=role,
        HeartbeatTimeout=300,
        DefaultResult="CONTINUE",
    )
    group.asg.put_lifecycle_hook(
        AutoScalingGroupName=group.name, LifecycleHookName="drain", LifecycleTransition=TERMINATING
    )
    hooks = group.asg.describe_lifecycle_hooks(AutoScalingGroupName=group.name)["LifecycleHooks"]
    assert sorted(hooks, key=lambda h: h["LifecycleHookName"]) == [
        {
            "LifecycleHookName": "drain",
            "AutoScalingGroupName": group.name,
            "LifecycleTransition": TERMINATING,
            "HeartbeatTimeout": 3600,
            "GlobalTimeout": 172800,
            "DefaultResult": "ABANDON",
        },
        {
            "LifecycleHookName": "ready",
            "AutoScalingGroupName": group.name,
            "LifecycleTransition": LAUNCHING,
            "NotificationTargetARN": queue_arn,
            "RoleARN": role,
            "HeartbeatTimeout": 300,
            "GlobalTimeout": 30000,
            "DefaultResult": "CONTINUE",
        },
    ]
    with pytest.raises(ClientError, match="between 30 and 7200"):
        group.asg.put_lifecycle_hook(
            AutoScalingGroupName=group.name,
            LifecycleHookName="x",
            LifecycleTransition=LAUNCHING,
            HeartbeatTimeout=10,
        )
    group.asg.delete_auto_scaling_group(AutoScalingGroupName=group.name, ForceDelete=True)
    again = make_group(desired=0, name=group.name)  # a new group of the same name has no hooks
    assert again.asg.describe_lifecycle_hooks(AutoScalingGroupName=again.name)["LifecycleHooks"] == []


class Queue:
    """An SQS queue to receive what Auto Scaling sends a notification target."""

    def __init__(self, aws: Callable[[str], Any]) -> None:
        self.sqs = aws("sqs")
        self.url = self.sqs.create_queue(QueueName=f"asg-{uuid.uuid4().hex[:8]}")["QueueUrl"]
        attributes = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["QueueArn"])
        self.arn: str = attributes["Attributes"]["QueueArn"]
        self.received: list[dict[str, Any]] = []

    def wait_for(self, event: str) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            for message in self.sqs.receive_message(QueueUrl=self.url, WaitTimeSeconds=1).get("Messages", []):
                self.received.append(json.loads(message["Body"]))
            return next(
                (m for m in self.received if m.get("Event", m.get("LifecycleTransition")) == event), None
            )

        found: dict[str, Any] = wait_until(probe, what=f"{event} message")
        return found


@pytest.fixture
def queue(aws: Callable[[str], Any]) -> Iterator[Queue]:
    created = Queue(aws)
    yield created
    created.sqs.delete_queue(QueueUrl=created.url)


def test_lifecycle_actions_are_sent_to_the_hook_notification_target(
    make_group: Callable[..., Group], queue: Queue
) -> None:
    group = make_group(desired=0)
    group.asg.put_lifecycle_hook(
        AutoScalingGroupName=group.name,
        LifecycleHookName="ready",
        LifecycleTransition=LAUNCHING,
        NotificationTargetARN=queue.arn,
        RoleARN="arn:aws:iam::000000000000:role/hooks",
        NotificationMetadata="vsa-node",
    )
    test = queue.wait_for("autoscaling:TEST_NOTIFICATION")  # sent when the hook is put
    assert test["AutoScalingGroupName"] == group.name
    group.asg.set_desired_capacity(AutoScalingGroupName=group.name, DesiredCapacity=1)
    message = queue.wait_for(LAUNCHING)
    (instance_id,) = group.states()
    assert message["EC2InstanceId"] == instance_id
    assert (message["LifecycleHookName"], message["NotificationMetadata"]) == ("ready", "vsa-node")
    assert (message["Origin"], message["Destination"]) == ("EC2", "AutoScalingGroup")
    group.complete("ready", LifecycleActionToken=message["LifecycleActionToken"])
    assert group.states() == {instance_id: "InService"}


def test_notification_configurations_round_trip_and_publish_launches(
    aws: Callable[[str], Any], make_group: Callable[..., Group], queue: Queue
) -> None:
    sns = aws("sns")
    topic = sns.create_topic(Name=f"asg-{uuid.uuid4().hex[:8]}")["TopicArn"]
    sns.subscribe(
        TopicArn=topic, Protocol="sqs", Endpoint=queue.arn, Attributes={"RawMessageDelivery": "true"}
    )
    try:
        group = make_group(desired=0)
        kinds = ["autoscaling:EC2_INSTANCE_LAUNCH", "autoscaling:EC2_INSTANCE_TERMINATE"]
        group.asg.put_notification_configuration(
            AutoScalingGroupName=group.name, TopicARN=topic, NotificationTypes=kinds
        )
        described = group.asg.describe_notification_configurations(AutoScalingGroupNames=[group.name])
        assert described["NotificationConfigurations"] == [
            {"AutoScalingGroupName": group.name, "TopicARN": topic, "NotificationType": kind}
            for kind in kinds
        ]
        queue.wait_for("autoscaling:TEST_NOTIFICATION")
        group.asg.set_desired_capacity(AutoScalingGroupName=group.name, DesiredCapacity=1)
        (instance_id,) = group.states()
        message = queue.wait_for("autoscaling:EC2_INSTANCE_LAUNCH")
        assert message["EC2InstanceId"] == instance_id
        assert message["AutoScalingGroupARN"] == group.describe()["AutoScalingGroupARN"]
        group.asg.delete_notification_configuration(AutoScalingGroupName=group.name, TopicARN=topic)
        described = group.asg.describe_notification_configurations(AutoScalingGroupNames=[group.name])
        assert described["NotificationConfigurations"] == []
    finally:
        sns.delete_topic(TopicArn=topic)


def test_an_instance_set_unhealthy_leaves_through_the_terminate_hook_and_is_replaced(
    make_group: Callable[..., Group], event_capture: Any
) -> None:
    # AWS, SetInstanceHealth: "Set to Unhealthy to have the instance be out of service. Amazon
    # EC2 Auto Scaling terminates and replaces the unhealthy instance." (moto only records it)
    capture = event_capture(ASG)
    group = make_group(desired=2, hooks=(("drain", TERMINATING),), HealthCheckGracePeriod=0)
    states = group.wait_states(lambda s: list(s.values()) == ["InService"] * 2, "two in service")
    sick, well = list(states)
    group.asg.set_instance_health(InstanceId=sick, HealthStatus="Unhealthy", ShouldRespectGracePeriod=False)
    after = group.states()
    assert after.pop(sick) == "Terminating:Wait"
    assert after.pop(well) == "InService"
    assert list(after.values()) == ["InService"]  # the replacement, desired capacity unchanged
    assert group.describe()["DesiredCapacity"] == 2
    (terminate,) = lifecycle_events(capture, group, "terminate")
    assert terminate["detail"]["EC2InstanceId"] == sick
    group.complete("drain", InstanceId=sick)
    assert group.ec2_state(sick) == "terminated"


def test_set_instance_health_respects_the_grace_period_unless_told_not_to(
    make_group: Callable[..., Group],
) -> None:
    # AWS: "If the Auto Scaling group of the specified instance has a HealthCheckGracePeriod
    # specified for the group, by default, this call respects the grace period."
    group = make_group(desired=1, HealthCheckGracePeriod=3600)
    (instance,) = group.wait_states(lambda s: list(s.values()) == ["InService"], "in service")
    group.asg.set_instance_health(InstanceId=instance, HealthStatus="Unhealthy")
    assert group.states() == {instance: "InService"}
    group.asg.set_instance_health(
        InstanceId=instance, HealthStatus="Unhealthy", ShouldRespectGracePeriod=False
    )
    # (no terminate hook: it goes at once) and the group launches its replacement
    states = group.wait_states(lambda s: len(s) == 1 and instance not in s, "a replacement")
    assert list(states.values()) == ["InService"]


def test_a_launch_templates_default_version_is_set_by_name(aws: Callable[[str], Any]) -> None:
    """EC2 API Reference, ModifyLaunchTemplate: "You must specify either the launch template ID
    or launch template name in the request, but not both". By name, stock LocalStack failed with
    an InternalError (KeyError 'LaunchTemplateId'); an apply giving an array's controllers a new
    AMI sets its template's default version so."""
    ec2 = aws("ec2")
    name = f"lt-{uuid.uuid4().hex[:8]}"
    ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData={"ImageId": "ami-12c6146b"})
    try:
        version = ec2.create_launch_template_version(
            LaunchTemplateName=name, LaunchTemplateData={"ImageId": "ami-1e749f67"}
        )["LaunchTemplateVersion"]["VersionNumber"]
        answer = ec2.modify_launch_template(LaunchTemplateName=name, DefaultVersion=str(version))
        assert answer["LaunchTemplate"]["DefaultVersionNumber"] == version
        default = ec2.describe_launch_template_versions(LaunchTemplateName=name, Versions=["$Default"])
        assert default["LaunchTemplateVersions"][0]["LaunchTemplateData"]["ImageId"] == "ami-1e749f67"
        # by id it works as before; by an unknown name it is the provider's own refusal, not ours
        template_id = answer["LaunchTemplate"]["LaunchTemplateId"]
        ec2.modify_launch_template(LaunchTemplateId=template_id, DefaultVersion="1")
        assert (
            ec2.describe_launch_templates(LaunchTemplateIds=[template_id])["LaunchTemplates"][0][
                "DefaultVersionNumber"
            ]
            == 1
        )
    finally:
        ec2.delete_launch_template(LaunchTemplateName=name)
