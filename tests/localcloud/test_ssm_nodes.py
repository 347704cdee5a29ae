"""Managed nodes as the product's documents need them: a Nitro instance shows each attached EBS
volume as /dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol<hex> (and loses it on detach or
termination), and instances launched with an SSM-capable instance profile (an Auto Scaling
group's controllers) become managed nodes without anyone registering them.

Stock LocalStack has neither node sandboxes nor managed nodes: every test here fails there."""

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

AZ = "us-east-1a"
DEVICES = Path("dev/disk/by-id")


def device(volume_id: str) -> str:
    return "nvme-Amazon_Elastic_Block_Store_" + volume_id.replace("-", "", 1)


def until(probe: Callable[[], Any], timeout: float = 20, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s (last: {value!r})")
        time.sleep(0.2)


@pytest.fixture
def instances(aws: Callable[[str], Any], control: Callable[..., dict[str, Any]]) -> Iterator[list[str]]:
    """Instance ids the test launched; deregistered and terminated afterwards."""
    made: list[str] = []
    yield made
    for instance_id in made:
        control("ssm", "deregister_node", InstanceId=instance_id)
    if made:
        aws("ec2").terminate_instances(InstanceIds=made)


@pytest.fixture
def auto_register(control: Callable[..., dict[str, Any]]) -> Iterator[None]:
    assert control("ssm", "configure", auto_register=True) == {"auto_register": True}
    yield
    control("ssm", "configure", reset=True)


def launch(aws: Callable[[str], Any], made: list[str], count: int = 1) -> list[dict[str, Any]]:
    reply = aws("ec2").run_instances(
        ImageId="ami-12345678", MinCount=count, MaxCount=count, Placement={"AvailabilityZone": AZ}
    )
    made.extend(i["InstanceId"] for i in reply["Instances"])
    return list(reply["Instances"])


def test_attached_volumes_appear_in_the_node_sandbox_and_go_on_detach_and_termination(
    aws: Callable[[str], Any], control: Callable[..., dict[str, Any]], instances: list[str]
):
    ec2 = aws("ec2")
    # Given two managed nodes and an io2 Multi-Attach volume
    first, second = (i["InstanceId"] for i in launch(aws, instances, 2))
    roots = {i: Path(control("ssm", "register_node", InstanceId=i)["Root"]) for i in (first, second)}
    volume = ec2.create_volume(
        AvailabilityZone=AZ, Size=4, VolumeType="io2", Iops=100, MultiAttachEnabled=True
    )["VolumeId"]
    try:
        # When it is attached to both
        for instance_id in (first, second):
            ec2.attach_volume(VolumeId=volume, InstanceId=instance_id, Device="/dev/sdf")
        # Then each node has its NVMe device by id (holding the volume id, the volume's size), next to
        # its root volume's
        for root in roots.values():
            with (root / DEVICES / device(volume)).open() as held:
                assert held.readline().strip() == volume
            assert (root / DEVICES / device(volume)).stat().st_size == 4 * 2**30  # sparse, 4 GiB
            assert len(list((root / DEVICES).glob("nvme-Amazon_Elastic_Block_Store_vol*"))) == 2
        # When it is detached from the first / Then only the first loses it
        ec2.detach_volume(VolumeId=volume, InstanceId=first)
        assert not (roots[first] / DEVICES / device(volume)).exists()
        assert (roots[second] / DEVICES / device(volume)).exists()
        # When the second instance terminates / Then its devices are gone
        ec2.terminate_instances(InstanceIds=[second])
        assert list((roots[second] / DEVICES).iterdir()) == []
    finally:
        until(lambda: ec2.describe_volumes(VolumeIds=[volume])["Volumes"][0]["State"] == "available")
        ec2.delete_volume(VolumeId=volume)


def test_a_modified_volume_grows_on_every_node_once_its_modification_is_optimizing(
    aws: Callable[[str], Any], control: Callable[..., dict[str, Any]], instances: list[str]
):
    """ "Monitor the progress of Amazon EBS volume modifications"
    (https://docs.aws.amazon.com/ebs/latest/userguide/monitoring-volume-modifications.html): the
    volume enters modifying, then optimizing, then completed; "Size increases take effect once
    the volume modification reaches the optimizing state". "Extend the file system after
    resizing an EBS volume" (https://docs.aws.amazon.com/ebs/latest/userguide/recognize-expanded-volume-linux.html):
    on a Nitro instance the NVMe device shows the new size without a detach (lsblk)."""
    ec2 = aws("ec2")
    control("timings", "configure", profile="fast", volume_modifying=3.0, volume_optimizing=3.0)
    try:
        # Given an io2 Multi-Attach volume of 4 GiB attached to two managed nodes, with data on it
        first, second = (i["InstanceId"] for i in launch(aws, instances, 2))
        roots = [Path(control("ssm", "register_node", InstanceId=i)["Root"]) for i in (first, second)]
        volume = ec2.create_volume(
            AvailabilityZone=AZ, Size=4, VolumeType="io2", Iops=100, MultiAttachEnabled=True
        )["VolumeId"]
        for instance_id in (first, second):
            ec2.attach_volume(VolumeId=volume, InstanceId=instance_id, Device="/dev/sdf")
        devices = [root / DEVICES / device(volume) for root in roots]
        # When it is modified to 8 GiB
        ec2.modify_volume(VolumeId=volume, Size=8)
        # Then while the modification is modifying, each device keeps its size
        (modification,) = ec2.describe_volumes_modifications(VolumeIds=[volume])["VolumesModifications"]
        assert modification["ModificationState"] == "modifying"
        assert [d.stat().st_size for d in devices] == [4 * 2**30] * 2

        # and once it is optimizing, each node's device is 8 GiB, what it held kept
        def optimizing() -> bool:
            found = ec2.describe_volumes_modifications(VolumeIds=[volume])["VolumesModifications"]
            return bool(found[0]["ModificationState"] in ("optimizing", "completed"))

        until(optimizing, what="optimizing")
        assert ec2.describe_volumes(VolumeIds=[volume])["Volumes"][0]["Size"] == 8
        assert [d.stat().st_size for d in devices] == [8 * 2**30] * 2
        for held in devices:
            with held.open() as data:
                assert data.readline().strip() == volume
    finally:
        control("timings", "configure", profile="fast")
        for instance_id in instances:
            ec2.detach_volume(VolumeId=volume, InstanceId=instance_id)
        until(lambda: ec2.describe_volumes(VolumeIds=[volume])["Volumes"][0]["State"] == "available")
        ec2.delete_volume(VolumeId=volume)


def test_a_node_registered_after_the_attach_already_has_the_device(
    aws: Callable[[str], Any], control: Callable[..., dict[str, Any]], instances: list[str]
):
    ec2 = aws("ec2")
    (instance,) = launch(aws, instances)
    volume = ec2.create_volume(AvailabilityZone=AZ, Size=4, VolumeType="io2", Iops=100)["VolumeId"]
    try:
        ec2.attach_volume(VolumeId=volume, InstanceId=instance["InstanceId"], Device="/dev/sdf")
        root = Path(control("ssm", "register_node", InstanceId=instance["InstanceId"])["Root"])
        assert (root / DEVICES / device(volume)).exists()
        ec2.detach_volume(VolumeId=volume, InstanceId=instance["InstanceId"])
        assert not (root / DEVICES / device(volume)).exists()
    finally:
        until(lambda: ec2.describe_volumes(VolumeIds=[volume])["Volumes"][0]["State"] == "available")
        ec2.delete_volume(VolumeId=volume)


def test_with_auto_register_every_running_instance_is_a_managed_node_with_its_private_ip(
    aws: Callable[[str], Any], instances: list[str], auto_register: None
):
    ssm = aws("ssm")
    # Given auto-registration / When instances launch (nobody registers them)
    launched = launch(aws, instances, 2)
    # Then each is an online managed node with its private IP, and runs documents
    ids = [i["InstanceId"] for i in launched]
    info = ssm.describe_instance_information(Filters=[{"Key": "InstanceIds", "Values": ids}])
    found = {i["InstanceId"]: i for i in info["InstanceInformationList"]}
    assert set(found) == set(ids)
    for instance in launched:
        assert found[instance["InstanceId"]]["PingStatus"] == "Online"
        assert found[instance["InstanceId"]]["IPAddress"] == instance["PrivateIpAddress"]
    command = ssm.send_command(
        InstanceIds=ids[:1],
        DocumentName="AWS-RunShellScript",
        Parameters={"commands": ["echo $VSA_INSTANCE_ID"]},
    )["Command"]["CommandId"]
    result = until(
        lambda: (
            (r := ssm.get_command_invocation(CommandId=command, InstanceId=ids[0]))["Status"] == "Success"
            and r
        ),
        what="the command on the auto-registered node",
    )
    assert result["StandardOutputContent"].strip() == ids[0]


def test_with_auto_register_an_auto_scaling_groups_instances_are_managed_nodes(
    aws: Callable[[str], Any], control: Callable[..., dict[str, Any]], auto_register: None
):
    ec2, asg, ssm = aws("ec2"), aws("autoscaling"), aws("ssm")
    name = f"nodes-{uuid.uuid4().hex[:8]}"
    ec2.create_launch_template(
        LaunchTemplateName=name, LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "t3.micro"}
    )
    try:
        # Given a group that launches two instances
        asg.create_auto_scaling_group(
            AutoScalingGroupName=name,
            LaunchTemplate={"LaunchTemplateName": name},
            MinSize=2,
            MaxSize=2,
            DesiredCapacity=2,
            AvailabilityZones=[AZ],
        )

        def members() -> list[str]:
            (group,) = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
            return [i["InstanceId"] for i in group["Instances"]]

        launched = until(lambda: len(members()) == 2 and members(), what="two instances in the group")
        # Then both are managed nodes, online
        info = ssm.describe_instance_information(Filters=[{"Key": "InstanceIds", "Values": launched}])
        assert sorted(i["InstanceId"] for i in info["InstanceInformationList"]) == sorted(launched)
        assert {i["PingStatus"] for i in info["InstanceInformationList"]} == {"Online"}
    finally:
        asg.delete_auto_scaling_group(AutoScalingGroupName=name, ForceDelete=True)
        ec2.delete_launch_template(LaunchTemplateName=name)


def test_without_auto_register_a_new_instance_is_not_a_managed_node(
    aws: Callable[[str], Any], control: Callable[..., dict[str, Any]], instances: list[str]
):
    assert control("ssm", "configure") == {"auto_register": False}
    (instance,) = launch(aws, instances)
    info = aws("ssm").describe_instance_information(
        Filters=[{"Key": "InstanceIds", "Values": [instance["InstanceId"]]}]
    )
    assert info["InstanceInformationList"] == []


def test_configure_refuses_unknown_settings(control: Callable[..., dict[str, Any]]):
    with pytest.raises(AssertionError, match="unknown setting"):
        control("ssm", "configure", auto_registration=True)
