"""The latency profile: AWS's intermediate states, and what AWS refuses while a resource is in one.

Under the ``fast`` profile (the default) the local cloud answers as before; under ``realistic``
a volume is ``creating`` before ``available``, an attachment ``attaching`` before ``attached``
and ``detaching`` before it is gone, an SSM agent comes online only a while after its instance
runs, and Run Command needs a moment to reach a node. Each test sets short delays (1-3 s) with
single overrides and goes back to ``fast`` afterwards.
"""

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

ZONE = "us-east-1a"
AMI = "ami-12c6146b"  # known to moto
EBS_DEVICE = "dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_"
WAIT = {"Delay": 1, "MaxAttempts": 30}


def until(probe: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture
def profile(control: Callable[..., dict[str, Any]]) -> Iterator[Callable[..., dict[str, Any]]]:
    """``profile(name, **overrides)`` switches the profile; back to ``fast`` after the test."""

    def switch(name: str = "realistic", **overrides: float) -> dict[str, Any]:
        return control("timings", "configure", profile=name, **overrides)

    yield switch
    control("timings", "configure", profile="fast")


@pytest.fixture
def ec2(aws: Callable[[str], Any]) -> Any:
    return aws("ec2")


@pytest.fixture
def made(ec2: Any) -> Iterator[dict[str, list[str]]]:
    things: dict[str, list[str]] = {"instances": [], "volumes": []}
    yield things
    if things["instances"]:
        ec2.terminate_instances(InstanceIds=things["instances"])
    for volume_id in things["volumes"]:
        try:
            until(
                lambda v=volume_id: ec2.describe_volumes(VolumeIds=[v])["Volumes"][0]["State"] == "available",
                what=f"{volume_id} available",
            )
            ec2.delete_volume(VolumeId=volume_id)
        except ClientError:
            pass


def _instance(ec2: Any, made: dict[str, list[str]]) -> str:
    instance_id: str = ec2.run_instances(
        ImageId=AMI, MinCount=1, MaxCount=1, Placement={"AvailabilityZone": ZONE}
    )["Instances"][0]["InstanceId"]
    made["instances"].append(instance_id)
    until(
        lambda: (
            ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"][
                "Name"
            ]
            == "running"
        ),
        what=f"{instance_id} running",
    )
    return instance_id


def _volume(ec2: Any, made: dict[str, list[str]]) -> str:
    volume_id: str = ec2.create_volume(
        AvailabilityZone=ZONE, Size=10, VolumeType="io2", Iops=1000, MultiAttachEnabled=True
    )["VolumeId"]
    made["volumes"].append(volume_id)
    return volume_id


def _state(ec2: Any, volume_id: str) -> str:
    state: str = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]["State"]
    return state


def _attachment_states(ec2: Any, volume_id: str) -> list[str]:
    return [a["State"] for a in ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]["Attachments"]]


def test_configure_names_the_profiles_and_refuses_what_it_does_not_know(
    control: Callable[..., dict[str, Any]], profile: Callable[..., dict[str, Any]]
):
    shown = profile("realistic", volume_attaching=2)
    assert shown["profile"] == "realistic"
    assert shown["seconds"]["volume_attaching"] == 2
    assert shown["seconds"]["ssm_agent_online"] > 0  # realistic: the agent takes a while
    for bad, says in (
        ({"profile": "instant"}, "unknown profile"),
        ({"volume_teleporting": 1}, "unknown timing"),
        ({"volume_attaching": -1}, ">= 0"),
    ):
        with pytest.raises(AssertionError, match=says):
            control("timings", "configure", **bad)
    assert profile("fast")["seconds"]["volume_creating"] == 0


def test_a_new_volume_is_creating_and_cannot_be_attached_until_available(
    ec2: Any, made: dict[str, list[str]], profile: Callable[..., dict[str, Any]]
):
    """ "Amazon EBS volume lifecycle": CreateVolume answers ``creating``; AttachVolume on a volume
    that is not yet ``available`` fails with ``IncorrectState`` ("vol-… is not 'available'.")."""
    instance_id = _instance(ec2, made)
    profile("fast", volume_creating=2)
    volume_id = _volume(ec2, made)
    assert _state(ec2, volume_id) == "creating"
    with pytest.raises(ClientError) as refused:
        ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")
    assert refused.value.response["Error"]["Code"] == "IncorrectState"
    assert volume_id in refused.value.response["Error"]["Message"]
    ec2.get_waiter("volume_available").wait(
        VolumeIds=[volume_id], WaiterConfig={"Delay": 1, "MaxAttempts": 30}
    )
    ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")
    assert _state(ec2, volume_id) == "in-use"


def test_an_attachment_is_attaching_before_the_device_appears_on_the_node(
    ec2: Any,
    made: dict[str, list[str]],
    control: Callable[..., dict[str, Any]],
    profile: Callable[..., dict[str, Any]],
):
    """AttachVolume answers ``attaching``; the volume is ``in-use`` at once and the attachment
    ``attached`` later. The OS (the node's /dev/disk/by-id) sees the device only when attached."""
    instance_id = _instance(ec2, made)
    root = Path(control("ssm", "register_node", InstanceId=instance_id)["Root"])
    volume_id = _volume(ec2, made)
    device = root / (EBS_DEVICE + volume_id.replace("-", "", 1))
    profile("fast", volume_attaching=2)
    answer = ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")
    assert answer["State"] == "attaching"
    assert _attachment_states(ec2, volume_id) == ["attaching"]
    assert _state(ec2, volume_id) == "in-use"
    assert not device.exists()
    until(lambda: _attachment_states(ec2, volume_id) == ["attached"], what="attached")
    assert device.exists()
    ec2.get_waiter("volume_in_use").wait(VolumeIds=[volume_id], WaiterConfig={"Delay": 1, "MaxAttempts": 10})


def test_a_detaching_volume_is_still_in_use_and_cannot_be_deleted(
    ec2: Any,
    made: dict[str, list[str]],
    control: Callable[..., dict[str, Any]],
    profile: Callable[..., dict[str, Any]],
):
    """DetachVolume answers ``detaching``; until the detachment completes the volume stays
    ``in-use`` (DeleteVolume: ``VolumeInUse``). The device leaves the OS at once."""
    instance_id = _instance(ec2, made)
    root = Path(control("ssm", "register_node", InstanceId=instance_id)["Root"])
    volume_id = _volume(ec2, made)
    ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")
    device = root / (EBS_DEVICE + volume_id.replace("-", "", 1))
    assert device.exists()
    profile("fast", volume_detaching=2)
    answer = ec2.detach_volume(VolumeId=volume_id, InstanceId=instance_id)
    assert answer["State"] == "detaching"
    assert _attachment_states(ec2, volume_id) == ["detaching"]
    assert _state(ec2, volume_id) == "in-use"
    assert not device.exists()
    with pytest.raises(ClientError) as refused:
        ec2.delete_volume(VolumeId=volume_id)
    assert refused.value.response["Error"]["Code"] == "VolumeInUse"
    ec2.get_waiter("volume_available").wait(
        VolumeIds=[volume_id], WaiterConfig={"Delay": 1, "MaxAttempts": 30}
    )
    assert _attachment_states(ec2, volume_id) == []


def test_the_ssm_agent_comes_online_a_while_after_the_instance_runs(
    aws: Callable[[str], Any],
    ec2: Any,
    made: dict[str, list[str]],
    control: Callable[..., dict[str, Any]],
    profile: Callable[..., dict[str, Any]],
):
    """SSM Agent registers the node after boot (tens of seconds to minutes on AWS): until then
    DescribeInstanceInformation does not list the instance and SendCommand refuses it."""
    ssm = aws("ssm")
    control("ssm", "configure", auto_register=True)
    try:
        profile("fast", ssm_agent_online=3)
        instance_id = _instance(ec2, made)

        def listed() -> bool:
            filters = [{"Key": "InstanceIds", "Values": [instance_id]}]
            return bool(ssm.describe_instance_information(Filters=filters)["InstanceInformationList"])

        assert not listed()
        with pytest.raises(ClientError) as refused:
            ssm.send_command(
                InstanceIds=[instance_id],
                DocumentName="AWS-RunShellScript",
                Parameters={"commands": ["true"]},
            )
        assert refused.value.response["Error"]["Code"] == "InvalidInstanceId"
        until(listed, what="the node registered")
    finally:
        control("ssm", "configure", reset=True)


def test_run_command_reaches_the_node_after_a_delivery_delay(
    aws: Callable[[str], Any],
    ec2: Any,
    made: dict[str, list[str]],
    control: Callable[..., dict[str, Any]],
    profile: Callable[..., dict[str, Any]],
):
    """A command sent to an online node is ``Pending`` until its agent picks it up."""
    ssm = aws("ssm")
    instance_id = _instance(ec2, made)
    control("ssm", "register_node", InstanceId=instance_id)
    profile("fast", command_delivery=3)
    command_id = ssm.send_command(
        InstanceIds=[instance_id], DocumentName="AWS-RunShellScript", Parameters={"commands": ["true"]}
    )["Command"]["CommandId"]

    def status() -> str:
        try:
            got: str = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)["Status"]
            return got
        except ClientError:  # InvocationDoesNotExist right after SendCommand, as on AWS
            return "Pending"

    assert status() == "Pending"
    until(lambda: status() == "Success", what="the command ran")
