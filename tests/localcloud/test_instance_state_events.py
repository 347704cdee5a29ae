"""EC2 instance state changes reach the default event bus as AWS sends them.

AWS, "State change events for Amazon EC2 instances"
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/monitoring-instance-state-changes.html):
"Amazon EC2 sends an EC2 Instance State-change Notification event to Amazon EventBridge when the
state of an instance changes", ``detail`` ``{"instance-id", "state"}``, the instance's ARN in
``resources``; a launch or start goes pending → running, a stop stopping → stopped, a
termination shutting-down → terminated. Instances an Auto Scaling group launches and terminates
are EC2 instances like any other, and announce the same transitions.

Stock LocalStack (moto) emits none of these events; every test here fails there.
"""

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.localcloud.conftest import EventCapture, assert_matches_sample

AMI = "ami-12c6146b"  # known to moto
DETAIL_TYPE = "EC2 Instance State-change Notification"
SAMPLE = "ec2/instance_state_change.json"


@pytest.fixture
def ec2(aws: Callable[[str], Any]) -> Any:
    return aws("ec2")


@pytest.fixture
def capture(event_capture: Callable[[dict[str, Any]], EventCapture]) -> EventCapture:
    return event_capture({"source": ["aws.ec2"], "detail-type": [DETAIL_TYPE]})


def states_of(capture: EventCapture, instance_id: str, count: int, timeout: float = 30) -> list[str]:
    """The first ``count`` states announced for ``instance_id``, in order of arrival. (EventBridge
    does not promise to deliver in order, so the two states of one transition are compared as a
    set; a test acts only once the previous transition's events have arrived.)"""
    mine = capture.wait_for(lambda e: e["detail"]["instance-id"] == instance_id, count=count, timeout=timeout)
    return [e["detail"]["state"] for e in mine]


def announced(capture: EventCapture, instance_id: str) -> list[dict[str, Any]]:
    return [e for e in capture.settle(2) if e["detail"]["instance-id"] == instance_id]


def test_a_launched_instance_announces_pending_then_running_in_aws_shape(ec2, capture):
    # Given / When: an instance launched through RunInstances
    instance_id = ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    try:
        # Then: pending, then running, each exactly in AWS's shape, naming the instance's ARN
        assert set(states_of(capture, instance_id, 2)) == {"pending", "running"}
        events = announced(capture, instance_id)
        assert len(events) == 2
        for event in events:
            assert_matches_sample(event, SAMPLE)
            assert event["source"] == "aws.ec2"
            assert event["detail-type"] == DETAIL_TYPE
            assert set(event["detail"]) == {"instance-id", "state"}
            assert event["resources"] == [f"arn:aws:ec2:us-east-1:{event['account']}:instance/{instance_id}"]
    finally:
        ec2.terminate_instances(InstanceIds=[instance_id])


def test_stop_start_and_terminate_each_announce_both_of_their_states(ec2, capture):
    # Given: a running instance
    instance_id = ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    assert set(states_of(capture, instance_id, 2)) == {"pending", "running"}

    # When: it is stopped, started again, then terminated
    ec2.stop_instances(InstanceIds=[instance_id])
    assert set(states_of(capture, instance_id, 4)[2:]) == {"stopping", "stopped"}
    ec2.start_instances(InstanceIds=[instance_id])
    assert set(states_of(capture, instance_id, 6)[4:]) == {"pending", "running"}
    ec2.terminate_instances(InstanceIds=[instance_id])

    # Then: shutting-down, then terminated; terminating it again changes nothing and announces nothing
    assert set(states_of(capture, instance_id, 8)[6:]) == {"shutting-down", "terminated"}
    ec2.terminate_instances(InstanceIds=[instance_id])
    assert len(announced(capture, instance_id)) == 8


def test_stopping_a_stopped_instance_or_starting_a_running_one_announces_nothing(ec2, capture):
    # Given: a running instance
    instance_id = ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    try:
        states_of(capture, instance_id, 2)
        # When: started while running
        ec2.start_instances(InstanceIds=[instance_id])
        # Then: no state changed, no event
        assert len(announced(capture, instance_id)) == 2
    finally:
        ec2.terminate_instances(InstanceIds=[instance_id])


@pytest.fixture
def group(aws: Callable[[str], Any]) -> Iterator[tuple[str, str]]:
    """(group name, launch template name): the group is created by the test."""
    template, name = f"lt-{uuid.uuid4().hex[:8]}", f"asg-{uuid.uuid4().hex[:8]}"
    aws("ec2").create_launch_template(
        LaunchTemplateName=template, LaunchTemplateData={"ImageId": AMI, "InstanceType": "t3.micro"}
    )
    yield name, template
    with contextlib.suppress(ClientError):
        aws("autoscaling").delete_auto_scaling_group(AutoScalingGroupName=name, ForceDelete=True)
    aws("ec2").delete_launch_template(LaunchTemplateName=template)


def test_instances_an_auto_scaling_group_launches_and_scales_in_announce_their_states(aws, capture, group):
    asg, (name, template) = aws("autoscaling"), group
    # Given: a group without hooks launching one instance
    asg.create_auto_scaling_group(
        AutoScalingGroupName=name,
        MinSize=0,
        MaxSize=2,
        DesiredCapacity=1,
        LaunchTemplate={"LaunchTemplateName": template},
        AvailabilityZones=["us-east-1a"],
    )
    instance_id = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0][
        "Instances"
    ][0]["InstanceId"]
    # Then: its launch is announced as any EC2 launch
    assert set(states_of(capture, instance_id, 2)) == {"pending", "running"}

    # When: the group scales in to zero
    asg.set_desired_capacity(AutoScalingGroupName=name, DesiredCapacity=0)

    # Then: the termination is announced too
    assert set(states_of(capture, instance_id, 4)[2:]) == {"shutting-down", "terminated"}


# --- the latency profile: pending and shutting-down take a while ---------------------------------


@pytest.fixture
def profile(control: Callable[..., dict[str, Any]]) -> Iterator[Callable[..., dict[str, Any]]]:
    """``profile(**overrides)`` on top of ``fast``; back to ``fast`` after the test."""
    yield lambda **overrides: control("timings", "configure", profile="fast", **overrides)
    control("timings", "configure", profile="fast")


def _state(ec2: Any, instance_id: str) -> str:
    reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    state: str = reservations[0]["Instances"][0]["State"]["Name"]
    return state


def test_an_instance_is_pending_before_running_and_shutting_down_before_terminated(ec2, capture, profile):
    # Given launches take 2 s and terminations 2 s ("Instance lifecycle")
    # (pending 8 s, not 2: at load average 15 on 2 cores over 2 s can pass between RunInstances
    # and the AttachVolume below, and the instance would already be running)
    profile(instance_pending=8, instance_shutting_down=2)
    # When an instance is launched
    launched = ec2.run_instances(
        ImageId=AMI, MinCount=1, MaxCount=1, Placement={"AvailabilityZone": "us-east-1a"}
    )
    instance_id = launched["Instances"][0]["InstanceId"]
    # Then RunInstances answers it pending, and it is pending until it runs (a volume cannot be
    # attached meanwhile), announcing each state as it enters it
    assert launched["Instances"][0]["State"] == {"Code": 0, "Name": "pending"}
    assert _state(ec2, instance_id) == "pending"
    volume_id = ec2.create_volume(AvailabilityZone="us-east-1a", Size=10)["VolumeId"]
    try:
        with pytest.raises(ClientError) as refused:
            ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")
        assert refused.value.response["Error"]["Code"] == "IncorrectState"
    finally:
        ec2.delete_volume(VolumeId=volume_id)
    assert states_of(capture, instance_id, 1) == ["pending"]
    ec2.get_waiter("instance_running").wait(InstanceIds=[instance_id], WaiterConfig={"Delay": 1})
    assert states_of(capture, instance_id, 2)[1] == "running"
    # When it is terminated: shutting-down first, terminated after
    ec2.terminate_instances(InstanceIds=[instance_id])
    assert _state(ec2, instance_id) == "shutting-down"
    assert states_of(capture, instance_id, 3)[2] == "shutting-down"
    ec2.terminate_instances(InstanceIds=[instance_id])  # again: nothing changes
    ec2.get_waiter("instance_terminated").wait(InstanceIds=[instance_id], WaiterConfig={"Delay": 1})
    assert states_of(capture, instance_id, 4)[3] == "terminated"
    assert len(announced(capture, instance_id)) == 4


def test_a_group_starts_an_instances_launch_lifecycle_only_once_it_runs(aws, group, profile, event_capture):
    # Given launches take 2 s and a group with a launch hook
    profile(instance_pending=2)
    asg, (name, template) = aws("autoscaling"), group
    lifecycle = event_capture(
        {"source": ["aws.autoscaling"], "detail-type": ["EC2 Instance-launch Lifecycle Action"]}
    )
    asg.create_auto_scaling_group(
        AutoScalingGroupName=name,
        MinSize=0,
        MaxSize=2,
        DesiredCapacity=1,
        LaunchTemplate={"LaunchTemplateName": template},
        AvailabilityZones=["us-east-1a"],
        LifecycleHookSpecificationList=[
            {"LifecycleHookName": "boot", "LifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING"}
        ],
    )
    instance = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0][
        "Instances"
    ][0]
    # Then the instance is Pending (not yet waiting on the hook) while EC2 has it pending
    assert instance["LifecycleState"] == "Pending"
    # and the lifecycle action comes once it runs ("completes its startup sequence and
    # transitions to a wait state")
    lifecycle.wait_for(lambda e: e["detail"]["EC2InstanceId"] == instance["InstanceId"])
    assert _state(aws("ec2"), instance["InstanceId"]) == "running"
    states = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0][
        "Instances"
    ]
    assert states[0]["LifecycleState"] == "Pending:Wait"
