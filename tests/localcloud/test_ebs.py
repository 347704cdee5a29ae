"""EBS as AWS documents it: Multi-Attach, snapshot lifecycle and limits, snapshot events.

Each test would fail on stock LocalStack (moto keeps one attachment per volume and creates
snapshots ``completed``). Snapshots are made fast with the ``configure`` control action.
"""

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError, WaiterError

from tests.localcloud.conftest import assert_matches_sample

ZONE = "us-east-1a"
AMI = "ami-12c6146b"  # known to moto


@pytest.fixture
def ec2(aws: Callable[[str], Any]) -> Any:
    return aws("ec2")


@pytest.fixture(autouse=True)
def fast_snapshots(control: Callable[..., dict[str, Any]]) -> Iterator[None]:
    """Snapshots pending for 1 s and no per-volume rate window, unless a test says otherwise."""
    control("ebs", "configure", snapshot_seconds=1, snapshot_rate_seconds=0)
    yield
    control("ebs", "configure", reset=True)


@pytest.fixture
def instances(ec2: Any) -> Iterator[Callable[..., list[str]]]:
    launched: list[str] = []

    def launch(count: int = 1, zone: str = ZONE) -> list[str]:
        reply = ec2.run_instances(
            ImageId=AMI, MinCount=count, MaxCount=count, Placement={"AvailabilityZone": zone}
        )
        ids = [i["InstanceId"] for i in reply["Instances"]]
        launched.extend(ids)
        return ids

    yield launch
    if launched:
        ec2.terminate_instances(InstanceIds=launched)


@pytest.fixture
def volumes(ec2: Any) -> Iterator[Callable[..., str]]:
    created: list[str] = []

    def create(volume_type: str = "io2", multi_attach: bool = True, **extra: Any) -> str:
        params: dict[str, Any] = {"AvailabilityZone": ZONE, "Size": 10, "VolumeType": volume_type, **extra}
        if volume_type in ("io1", "io2"):
            params.setdefault("Iops", 1000)
            params["MultiAttachEnabled"] = multi_attach
        volume_id: str = ec2.create_volume(**params)["VolumeId"]
        created.append(volume_id)
        return volume_id

    yield create
    for volume_id in created:
        try:
            for attachment in _volume(ec2, volume_id)["Attachments"]:
                ec2.detach_volume(VolumeId=volume_id, InstanceId=attachment["InstanceId"], Force=True)
            ec2.delete_volume(VolumeId=volume_id)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "InvalidVolume.NotFound":
                raise


@pytest.fixture
def snapshots(ec2: Any) -> Iterator[list[str]]:
    """Snapshot ids to delete after the test."""
    ids: list[str] = []
    yield ids
    for snapshot_id in ids:
        ec2.delete_snapshot(SnapshotId=snapshot_id)


def _volume(ec2: Any, volume_id: str) -> dict[str, Any]:
    volume: dict[str, Any] = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]
    return volume


def _error_code(excinfo: pytest.ExceptionInfo[ClientError]) -> str:
    code: str = excinfo.value.response["Error"]["Code"]
    return code


def _mappings(ec2: Any, instance_id: str) -> dict[str, str]:
    reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    instance = reservations[0]["Instances"][0]
    return {m["DeviceName"]: m["Ebs"]["VolumeId"] for m in instance.get("BlockDeviceMappings", [])}


# --- Multi-Attach ---------------------------------------------------------------------------


def test_multi_attach_volume_lists_every_attachment(ec2, instances, volumes):
    first, second = instances(2)
    volume_id = volumes(
        "io2", TagSpecifications=[{"ResourceType": "volume", "Tags": [{"Key": "vsa", "Value": "ma"}]}]
    )
    ec2.attach_volume(VolumeId=volume_id, InstanceId=first, Device="/dev/sdf")
    ec2.attach_volume(VolumeId=volume_id, InstanceId=second, Device="/dev/sdf")

    volume = _volume(ec2, volume_id)
    assert volume["State"] == "in-use"
    assert volume["MultiAttachEnabled"] is True
    assert {(a["InstanceId"], a["Device"], a["State"]) for a in volume["Attachments"]} == {
        (first, "/dev/sdf", "attached"),
        (second, "/dev/sdf", "attached"),
    }
    assert all(a["DeleteOnTermination"] is False and a["AttachTime"] for a in volume["Attachments"])
    for instance_id in (first, second):
        by_instance = ec2.describe_volumes(
            Filters=[{"Name": "attachment.instance-id", "Values": [instance_id]}]
        )
        assert volume_id in {v["VolumeId"] for v in by_instance["Volumes"]}
        assert _mappings(ec2, instance_id)["/dev/sdf"] == volume_id
    in_use = ec2.describe_volumes(
        Filters=[
            {"Name": "volume-id", "Values": [volume_id]},
            {"Name": "status", "Values": ["in-use"]},
            {"Name": "attachment.status", "Values": ["attached"]},
            {"Name": "tag:vsa", "Values": ["ma"]},
        ]
    )
    assert [v["VolumeId"] for v in in_use["Volumes"]] == [volume_id]


def test_detach_with_instance_id_keeps_the_other_attachment(ec2, instances, volumes):
    first, second = instances(2)
    volume_id = volumes("io2")
    for instance_id in (first, second):
        ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")

    # "If you are detaching a Multi-Attach enabled volume, you must specify an instance ID."
    with pytest.raises(ClientError) as excinfo:
        ec2.detach_volume(VolumeId=volume_id)
    assert _error_code(excinfo) == "MissingParameter"

    ec2.detach_volume(VolumeId=volume_id, InstanceId=first)
    volume = _volume(ec2, volume_id)
    assert volume["State"] == "in-use"
    assert [a["InstanceId"] for a in volume["Attachments"]] == [second]
    assert "/dev/sdf" not in _mappings(ec2, first)
    assert _mappings(ec2, second)["/dev/sdf"] == volume_id
    tagged = ec2.describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": [first]}])
    assert volume_id not in {v["VolumeId"] for v in tagged["Volumes"]}

    ec2.detach_volume(VolumeId=volume_id, InstanceId=second, Force=True)
    assert _volume(ec2, volume_id)["State"] == "available"


def test_delete_attached_volume_is_volume_in_use(ec2, instances, volumes):
    first, second = instances(2)
    volume_id = volumes("io2")
    for instance_id in (first, second):
        ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")
    ec2.detach_volume(VolumeId=volume_id, InstanceId=first)
    # still attached to the second instance (moto's detach emptied the volume's only attachment)
    with pytest.raises(ClientError) as excinfo:
        ec2.delete_volume(VolumeId=volume_id)
    assert _error_code(excinfo) == "VolumeInUse"
    assert [a["InstanceId"] for a in _volume(ec2, volume_id)["Attachments"]] == [second]


def test_multi_attach_only_on_io1_and_io2(ec2, volumes):
    with pytest.raises(ClientError) as excinfo:
        ec2.create_volume(AvailabilityZone=ZONE, Size=10, VolumeType="gp3", MultiAttachEnabled=True)
    assert _error_code(excinfo) == "InvalidParameterCombination"
    assert _volume(ec2, volumes("io1"))["MultiAttachEnabled"] is True
    assert _volume(ec2, volumes("gp3"))["MultiAttachEnabled"] is False


def test_seventeenth_attachment_is_refused(ec2, instances, volumes):
    launched = instances(17)
    volume_id = volumes("io2")
    for instance_id in launched[:16]:
        ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")
    with pytest.raises(ClientError) as excinfo:
        ec2.attach_volume(VolumeId=volume_id, InstanceId=launched[16], Device="/dev/sdf")
    assert _error_code(excinfo) == "AttachmentLimitExceeded"
    assert len(_volume(ec2, volume_id)["Attachments"]) == 16


def test_attach_to_instance_in_another_zone_is_zone_mismatch(ec2, instances, volumes):
    (instance_id,) = instances(1, zone="us-east-1b")
    volume_id = volumes("io2")
    with pytest.raises(ClientError) as excinfo:
        ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")
    assert _error_code(excinfo) == "InvalidVolume.ZoneMismatch"
    assert _volume(ec2, volume_id)["Attachments"] == []


def test_attach_conflicts(ec2, instances, volumes):
    first, second = instances(2)
    single = volumes("io2", multi_attach=False)
    shared = volumes("io2")
    ec2.attach_volume(VolumeId=single, InstanceId=first, Device="/dev/sdf")
    # a volume without Multi-Attach is attached to one instance at a time
    with pytest.raises(ClientError) as excinfo:
        ec2.attach_volume(VolumeId=single, InstanceId=second, Device="/dev/sdf")
    assert _error_code(excinfo) == "VolumeInUse"
    ec2.attach_volume(VolumeId=shared, InstanceId=second, Device="/dev/sdg")
    # the same instance twice
    with pytest.raises(ClientError) as excinfo:
        ec2.attach_volume(VolumeId=shared, InstanceId=second, Device="/dev/sdh")
    assert _error_code(excinfo) == "VolumeInUse"
    # a device name already in use on the instance
    with pytest.raises(ClientError) as excinfo:
        ec2.attach_volume(VolumeId=shared, InstanceId=first, Device="/dev/sdf")
    assert _error_code(excinfo) == "InvalidParameterValue"
    assert [a["InstanceId"] for a in _volume(ec2, single)["Attachments"]] == [first]
    assert [a["InstanceId"] for a in _volume(ec2, shared)["Attachments"]] == [second]


def test_terminate_keeps_other_attachments_and_deletes_root_volume(ec2, instances, volumes):
    first, second = instances(2)
    root_volume = _mappings(ec2, first)["/dev/sda1"]  # DeleteOnTermination=True
    volume_id = volumes("io2")
    for instance_id in (first, second):
        ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")

    ec2.terminate_instances(InstanceIds=[first])

    volume = _volume(ec2, volume_id)
    assert [a["InstanceId"] for a in volume["Attachments"]] == [second]
    assert volume["State"] == "in-use"
    assert ec2.describe_volumes(Filters=[{"Name": "volume-id", "Values": [root_volume]}])["Volumes"] == []
    ec2.terminate_instances(InstanceIds=[second])  # no InvalidVolume.NotFound
    assert _volume(ec2, volume_id)["State"] == "available"


# --- Snapshots ------------------------------------------------------------------------------


def test_create_snapshots_exclusions_tags_and_state(ec2, instances, volumes, snapshots):
    first, other = instances(2)
    root_volume = _mappings(ec2, first)["/dev/sda1"]
    shared = volumes(
        "io2", TagSpecifications=[{"ResourceType": "volume", "Tags": [{"Key": "Name", "Value": "shared"}]}]
    )
    excluded = volumes("gp3")
    for instance_id in (first, other):
        ec2.attach_volume(VolumeId=shared, InstanceId=instance_id, Device="/dev/sdf")
    ec2.attach_volume(VolumeId=excluded, InstanceId=first, Device="/dev/sdg")

    reply = ec2.create_snapshots(
        InstanceSpecification={
            "InstanceId": first,
            "ExcludeBootVolume": True,
            "ExcludeDataVolumeIds": [excluded],
        },
        Description="set",
        CopyTagsFromSource="volume",
        TagSpecifications=[{"ResourceType": "snapshot", "Tags": [{"Key": "set", "Value": "s1"}]}],
    )
    snapshots.extend(s["SnapshotId"] for s in reply["Snapshots"])

    assert [s["VolumeId"] for s in reply["Snapshots"]] == [shared]  # not the boot, not the excluded
    (snapshot,) = reply["Snapshots"]
    assert snapshot["State"] == "pending"
    assert snapshot["Progress"].endswith("%")
    assert snapshot["VolumeSize"] == 10
    assert snapshot["OwnerId"]
    assert snapshot["StartTime"]
    assert snapshot["SnapshotId"].startswith("snap-")
    assert {t["Key"]: t["Value"] for t in snapshot["Tags"]} == {"Name": "shared", "set": "s1"}

    everything = ec2.create_snapshots(InstanceSpecification={"InstanceId": other})
    snapshots.extend(s["SnapshotId"] for s in everything["Snapshots"])
    assert {s["VolumeId"] for s in everything["Snapshots"]} == {shared, _mappings(ec2, other)["/dev/sda1"]}
    assert root_volume not in {s["VolumeId"] for s in everything["Snapshots"]}


def test_snapshot_pending_with_growing_progress_then_completed(ec2, control, volumes, snapshots):
    # pending for 10 s: the looks below end as soon as the progress has grown, well within it on
    # a busy machine (each look is one DescribeSnapshots)
    control("ebs", "configure", snapshot_seconds=10)
    volume_id = volumes("gp3")
    created = ec2.create_snapshot(VolumeId=volume_id)
    snapshots.append(created["SnapshotId"])
    assert created["State"] == "pending"

    seen: list[tuple[str, int]] = []
    while len(seen) < 2 or seen[-1][1] == seen[0][1]:
        described = ec2.describe_snapshots(SnapshotIds=[created["SnapshotId"]])["Snapshots"][0]
        seen.append((described["State"], int(described["Progress"].rstrip("%"))))
        if seen[-1][0] != "pending":
            break
        time.sleep(0.2)
    assert all(state == "pending" and progress < 100 for state, progress in seen), seen
    assert [p for _, p in seen] == sorted(p for _, p in seen)
    assert seen[-1][1] > seen[0][1]

    ec2.get_waiter("snapshot_completed").wait(
        SnapshotIds=[created["SnapshotId"]], WaiterConfig={"Delay": 1, "MaxAttempts": 60}
    )
    done = ec2.describe_snapshots(SnapshotIds=[created["SnapshotId"]])["Snapshots"][0]
    assert (done["State"], done["Progress"]) == ("completed", "100%")


def test_failed_snapshot_is_error_and_waiter_fails(ec2, control, volumes, snapshots):
    control("ebs", "configure", snapshot_seconds=30)
    created = ec2.create_snapshot(VolumeId=volumes("gp3"))
    snapshots.append(created["SnapshotId"])
    control("ebs", "fail_snapshot", SnapshotId=created["SnapshotId"])

    assert ec2.describe_snapshots(SnapshotIds=[created["SnapshotId"]])["Snapshots"][0]["State"] == "error"
    errored = ec2.describe_snapshots(Filters=[{"Name": "status", "Values": ["error"]}])["Snapshots"]
    assert created["SnapshotId"] in {s["SnapshotId"] for s in errored}
    with pytest.raises(WaiterError, match="terminal failure state"):
        ec2.get_waiter("snapshot_completed").wait(
            SnapshotIds=[created["SnapshotId"]], WaiterConfig={"Delay": 1, "MaxAttempts": 3}
        )


def test_concurrent_snapshot_limit_per_volume(ec2, control, volumes, snapshots):
    # "Quotas for Amazon EBS": 5 concurrent snapshots per io2 volume, 1 per sc1/st1 volume
    control("ebs", "configure", snapshot_seconds=60)
    volume_id = volumes("io2")
    for _ in range(5):
        snapshots.append(ec2.create_snapshot(VolumeId=volume_id)["SnapshotId"])
    with pytest.raises(ClientError) as excinfo:
        ec2.create_snapshot(VolumeId=volume_id)
    assert _error_code(excinfo) == "ConcurrentSnapshotLimitExceeded"

    cold = volumes("sc1", Size=125)
    snapshots.append(ec2.create_snapshot(VolumeId=cold)["SnapshotId"])
    with pytest.raises(ClientError) as excinfo:
        ec2.create_snapshot(VolumeId=cold)
    assert _error_code(excinfo) == "ConcurrentSnapshotLimitExceeded"


def test_snapshot_creation_rate_per_volume(ec2, control, volumes, snapshots):
    # (10 s between a volume's snapshots here: the second call below comes well within it on a
    # busy machine)
    control("ebs", "configure", snapshot_rate_seconds=10)
    volume_id = volumes("gp3")
    snapshots.append(ec2.create_snapshot(VolumeId=volume_id)["SnapshotId"])
    with pytest.raises(ClientError) as excinfo:
        ec2.create_snapshot(VolumeId=volume_id)
    assert _error_code(excinfo) == "SnapshotCreationPerVolumeRateExceeded"
    assert "15 seconds" in excinfo.value.response["Error"]["Message"]
    snapshots.append(ec2.create_snapshot(VolumeId=volumes("gp3"))["SnapshotId"])  # another volume: fine
    time.sleep(10.1)
    snapshots.append(ec2.create_snapshot(VolumeId=volume_id)["SnapshotId"])


# --- Events ---------------------------------------------------------------------------------


def test_snapshot_notification_events(ec2, control, volumes, snapshots, event_capture):
    capture = event_capture({"source": ["aws.ec2"], "detail-type": ["EBS Snapshot Notification"]})
    good = ec2.create_snapshot(VolumeId=volumes("gp3"))["SnapshotId"]
    control("ebs", "configure", snapshot_seconds=30)
    bad = ec2.create_snapshot(VolumeId=volumes("gp3"))["SnapshotId"]
    snapshots.extend([good, bad])
    control("ebs", "fail_snapshot", SnapshotId=bad)

    def about(snapshot_id: str) -> Callable[[dict[str, Any]], bool]:
        return lambda e: e["detail"]["snapshot_id"].endswith(f":snapshot/{snapshot_id}")

    (succeeded,) = capture.wait_for(about(good))
    assert succeeded["detail"]["event"] == "createSnapshot"
    assert succeeded["detail"]["result"] == "succeeded"
    assert succeeded["detail"]["source"].endswith(":volume/" + _snapshot(ec2, good)["VolumeId"])
    assert succeeded["resources"] == [succeeded["detail"]["snapshot_id"]]
    assert {"startTime", "endTime", "cause", "request-id"} <= set(succeeded["detail"])
    assert_matches_sample(succeeded, "ebs/snapshot_notification.json")
    (failed,) = capture.wait_for(about(bad))
    assert (failed["detail"]["event"], failed["detail"]["result"]) == ("createSnapshot", "failed")


def test_multi_volume_snapshots_completion_event(ec2, control, instances, volumes, snapshots, event_capture):
    capture = event_capture(
        {"source": ["aws.ec2"], "detail-type": ["EBS Multi-Volume Snapshots Completion Status"]}
    )
    first, second = instances(2)
    shared = volumes("io2")
    for instance_id in (first, second):
        ec2.attach_volume(VolumeId=shared, InstanceId=instance_id, Device="/dev/sdf")
    ok = [
        s["SnapshotId"]
        for s in ec2.create_snapshots(InstanceSpecification={"InstanceId": first})["Snapshots"]
    ]
    control("ebs", "configure", snapshot_seconds=30)
    broken = [
        s["SnapshotId"]
        for s in ec2.create_snapshots(InstanceSpecification={"InstanceId": second})["Snapshots"]
    ]
    snapshots.extend(ok + broken)
    control("ebs", "fail_snapshot", SnapshotId=broken[0])
    for snapshot_id in broken[1:]:
        control("ebs", "fail_snapshot", SnapshotId=snapshot_id)

    def about(ids: list[str]) -> Callable[[dict[str, Any]], bool]:
        return lambda e: {s["snapshot_id"].rsplit("/", 1)[1] for s in e["detail"]["snapshots"]} == set(ids)

    (succeeded,) = capture.wait_for(about(ok))
    assert (succeeded["detail"]["event"], succeeded["detail"]["result"]) == ("createSnapshots", "succeeded")
    assert {s["status"] for s in succeeded["detail"]["snapshots"]} == {"completed"}
    assert any(s["source"].endswith(f":volume/{shared}") for s in succeeded["detail"]["snapshots"])
    assert len(succeeded["resources"]) == len(ok)
    assert_matches_sample(succeeded, "ebs/multi_volume_snapshots_completion.json")
    (failed,) = capture.wait_for(about(broken))
    assert failed["detail"]["result"] == "failed"
    assert failed["detail"]["cause"] == f"Snapshot {broken[0]} is in status error"


def _snapshot(ec2: Any, snapshot_id: str) -> dict[str, Any]:
    snapshot: dict[str, Any] = ec2.describe_snapshots(SnapshotIds=[snapshot_id])["Snapshots"][0]
    return snapshot


# --- snapshots an AMI uses ------------------------------------------------------------------


def test_a_registered_ami_s_root_snapshot_cannot_be_deleted_until_the_ami_is_deregistered(
    ec2: Any, volumes: Callable[..., str], snapshots: list[str]
) -> None:
    # EC2 API Reference, DeleteSnapshot: "You cannot delete a snapshot of the root device of an
    # EBS volume used by a registered AMI. You must first deregister the AMI before you can
    # delete the snapshot." (InvalidSnapshot.InUse)
    # Given a snapshot, and an AMI registered with it as its root device
    snapshot_id = ec2.create_snapshot(VolumeId=volumes(volume_type="gp3"))["SnapshotId"]
    ec2.get_waiter("snapshot_completed").wait(SnapshotIds=[snapshot_id], WaiterConfig={"Delay": 1})
    image_id = ec2.register_image(
        Name="vsa-localcloud-in-use",
        RootDeviceName="/dev/xvda",
        BlockDeviceMappings=[{"DeviceName": "/dev/xvda", "Ebs": {"SnapshotId": snapshot_id}}],
        VirtualizationType="hvm",
        Architecture="x86_64",
    )["ImageId"]
    try:
        # When the snapshot is deleted, Then EC2 refuses it, naming the AMI
        with pytest.raises(ClientError) as refused:
            ec2.delete_snapshot(SnapshotId=snapshot_id)
        assert _error_code(refused) == "InvalidSnapshot.InUse"
        assert image_id in refused.value.response["Error"]["Message"]
    finally:
        ec2.deregister_image(ImageId=image_id)
    # And once the AMI is deregistered it can be deleted (the fixture deletes it)
    snapshots.append(snapshot_id)


def test_an_ami_registered_from_another_snapshot_leaves_this_one_deletable(
    ec2: Any, volumes: Callable[..., str]
) -> None:
    # Given two snapshots and an AMI whose root is the first
    volume = volumes(volume_type="gp3")
    used, free = (ec2.create_snapshot(VolumeId=volume)["SnapshotId"] for _ in range(2))
    ec2.get_waiter("snapshot_completed").wait(SnapshotIds=[used, free], WaiterConfig={"Delay": 1})
    image_id = ec2.register_image(
        Name="vsa-localcloud-other",
        RootDeviceName="/dev/xvda",
        BlockDeviceMappings=[{"DeviceName": "/dev/xvda", "Ebs": {"SnapshotId": used}}],
    )["ImageId"]
    try:
        # When the other snapshot is deleted, Then it goes
        ec2.delete_snapshot(SnapshotId=free)
        assert not ec2.describe_snapshots(Filters=[{"Name": "snapshot-id", "Values": [free]}])["Snapshots"]
    finally:
        ec2.deregister_image(ImageId=image_id)
        ec2.delete_snapshot(SnapshotId=used)
