"""EBS volumes hold data, and snapshots copy it, as the EBS User Guide describes:

* "Create Amazon EBS snapshots" (https://docs.aws.amazon.com/ebs/latest/userguide/ebs-creating-snapshot.html):
  "The snapshot is created immediately, but it remains in the pending state until all of data
  has been transferred to Amazon S3. [...] You can continue to use the volume during this time
  without impacting the snapshot. The snapshot includes only the data that was written to the
  volume at the time the snapshot was requested."
* "Create an Amazon EBS volume" (https://docs.aws.amazon.com/ebs/latest/userguide/ebs-creating-volume.html):
  "If you create a volume from a snapshot, the volume begins as an exact replica of the volume
  that was used to create that snapshot." (Its blocks load lazily; reads return the snapshot's.)
* "Attach an EBS volume to multiple EC2 instances using Multi-Attach"
  (https://docs.aws.amazon.com/ebs/latest/userguide/ebs-volumes-multi.html): "Each instance to
  which the volume is attached has full read and write permission to the shared volume."
* CreateSnapshots (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateSnapshots.html):
  "Each volume attached to the specified instance will produce one snapshot that is
  crash-consistent across the instance."
* CreateVolume (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateVolume.html),
  Size: "If you specify a snapshot, the default is the snapshot size, and you can specify a
  volume size that is equal to or larger than the snapshot size."

A node writes and reads a volume through its device in its sandbox
(``<sandbox>/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol<hex>``, ``register_node``
answers the sandbox); the control action ``ebs/data_file`` says where a volume's or snapshot's
data lives in the run directory. Stock LocalStack's volumes and snapshots hold no data: every test
here fails there.
"""

import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

ZONE = "us-east-1a"
AMI = "ami-12c6146b"  # known to moto
DEVICES = Path("dev/disk/by-id")
MIB = 2**20
GIB = 2**30
WAIT = {"Delay": 1, "MaxAttempts": 30}


def device_name(volume_id: str) -> str:
    return "nvme-Amazon_Elastic_Block_Store_" + volume_id.replace("-", "", 1)


def write(path: Path, offset: int, data: bytes) -> None:
    with path.open("r+b") as device:
        device.seek(offset)
        device.write(data)


def read(path: Path, offset: int, length: int) -> bytes:
    with path.open("rb") as device:
        device.seek(offset)
        return device.read(length)


@dataclass
class Node:
    instance_id: str
    root: Path

    def device(self, volume_id: str) -> Path:
        return self.root / DEVICES / device_name(volume_id)


@dataclass
class Ebs:
    """Instances (managed nodes), volumes and snapshots a test makes; all removed after it."""

    ec2: Any
    control: Callable[..., dict[str, Any]]
    instances: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    snapshots: list[str] = field(default_factory=list)

    def node(self) -> Node:
        (instance,) = self.ec2.run_instances(
            ImageId=AMI, MinCount=1, MaxCount=1, Placement={"AvailabilityZone": ZONE}
        )["Instances"]
        self.instances.append(instance["InstanceId"])
        self.ec2.get_waiter("instance_running").wait(InstanceIds=[instance["InstanceId"]], WaiterConfig=WAIT)
        root = self.control("ssm", "register_node", InstanceId=instance["InstanceId"])["Root"]
        return Node(instance["InstanceId"], Path(root))

    def volume(self, size: int = 4, **extra: Any) -> str:
        params: dict[str, Any] = {"VolumeType": "io2", "Iops": 100, "MultiAttachEnabled": True}
        volume_id: str = self.ec2.create_volume(AvailabilityZone=ZONE, Size=size, **{**params, **extra})[
            "VolumeId"
        ]
        self.volumes.append(volume_id)
        self.ec2.get_waiter("volume_available").wait(VolumeIds=[volume_id], WaiterConfig=WAIT)
        return volume_id

    def attach(self, volume_id: str, *nodes: Node, device: str = "/dev/sdf") -> None:
        for node in nodes:
            self.ec2.attach_volume(VolumeId=volume_id, InstanceId=node.instance_id, Device=device)
        self.ec2.get_waiter("volume_in_use").wait(VolumeIds=[volume_id], WaiterConfig=WAIT)

    def snapshot(self, volume_id: str) -> str:
        snapshot_id: str = self.ec2.create_snapshot(VolumeId=volume_id)["SnapshotId"]
        self.snapshots.append(snapshot_id)
        return snapshot_id

    def completed(self, *snapshot_ids: str) -> None:
        self.ec2.get_waiter("snapshot_completed").wait(SnapshotIds=list(snapshot_ids), WaiterConfig=WAIT)

    def restore(self, snapshot_id: str, size: int | None = None) -> str:
        params: dict[str, Any] = {"SnapshotId": snapshot_id, "VolumeType": "io2", "Iops": 100}
        if size is not None:
            params["Size"] = size
        volume_id: str = self.ec2.create_volume(AvailabilityZone=ZONE, MultiAttachEnabled=True, **params)[
            "VolumeId"
        ]
        self.volumes.append(volume_id)
        self.ec2.get_waiter("volume_available").wait(VolumeIds=[volume_id], WaiterConfig=WAIT)
        return volume_id

    def data_file(self, **which: str) -> dict[str, Any]:
        """``VolumeId=`` or ``SnapshotId=``: {"Path", "Exists", "Bytes", "AllocatedBytes"}."""
        return self.control("ebs", "data_file", **which)

    def clean(self) -> None:
        for instance_id in self.instances:
            self.control("ssm", "deregister_node", InstanceId=instance_id)
        if self.instances:
            self.ec2.terminate_instances(InstanceIds=self.instances)
        for snapshot_id in self.snapshots:
            try:
                self.ec2.delete_snapshot(SnapshotId=snapshot_id)
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "InvalidSnapshot.NotFound":
                    raise
        for volume_id in self.volumes:
            still = [{"Name": "volume-id", "Values": [volume_id]}]
            if not self.ec2.describe_volumes(Filters=still)["Volumes"]:
                continue  # deleted by the test
            self.ec2.get_waiter("volume_available").wait(VolumeIds=[volume_id], WaiterConfig=WAIT)
            self.ec2.delete_volume(VolumeId=volume_id)


@pytest.fixture
def ebs(aws: Callable[[str], Any], control: Callable[..., dict[str, Any]]) -> Iterator[Ebs]:
    """Snapshots pending for 1 s and no per-volume rate window, unless a test says otherwise."""
    control("ebs", "configure", snapshot_seconds=1, snapshot_rate_seconds=0)
    made = Ebs(aws("ec2"), control)
    yield made
    made.clean()
    control("ebs", "configure", reset=True)


def test_data_written_through_a_device_is_in_a_snapshot_taken_after_and_not_in_one_taken_before(
    ebs: Ebs,
) -> None:
    # "The snapshot includes only the data that was written to the volume at the time the
    # snapshot was requested."; a volume from a snapshot "begins as an exact replica of the
    # volume that was used to create that snapshot".
    # Given a volume attached to a node, and a snapshot of it taken before anything was written
    node = ebs.node()
    volume = ebs.volume()
    ebs.attach(volume, node)
    before = ebs.snapshot(volume)
    # When the node writes through its device, and a snapshot is taken after
    data = os.urandom(MIB)
    write(node.device(volume), GIB, data)
    after = ebs.snapshot(volume)
    ebs.completed(before, after)
    # Then a volume from the later snapshot reads what was written, one from the earlier reads zeros
    restored_before, restored_after = ebs.restore(before), ebs.restore(after)
    ebs.attach(restored_before, node, device="/dev/sdg")
    ebs.attach(restored_after, node, device="/dev/sdh")
    from_before, from_after = node.device(restored_before), node.device(restored_after)
    assert read(from_before, GIB, MIB) == bytes(MIB)
    assert read(from_after, GIB, MIB) == data
    # and both are replicas of the source: its first line (a fresh volume's id) and its size
    for device in (from_before, from_after):
        assert read(device, 0, len(volume) + 1) == f"{volume}\n".encode()
        assert device.stat().st_size == 4 * GIB


def test_a_write_after_create_snapshot_returned_is_not_in_the_snapshot_even_while_it_is_pending(
    ebs: Ebs, control: Callable[..., dict[str, Any]]
) -> None:
    # "The snapshot is created immediately, but it remains in the pending state [...] You can
    # continue to use the volume during this time without impacting the snapshot."
    pending = control("ebs", "configure", snapshot_seconds=15)["snapshot_seconds"]
    # Given a volume holding data, attached to a node
    node = ebs.node()
    volume = ebs.volume()
    ebs.attach(volume, node)
    first, second = os.urandom(MIB), os.urandom(MIB)
    write(node.device(volume), 8 * MIB, first)
    # When a snapshot is taken and, once CreateSnapshot returned, the node overwrites the data
    # and writes elsewhere while the snapshot is pending
    taken = time.monotonic()
    snapshot = ebs.snapshot(volume)
    write(node.device(volume), 8 * MIB, second)
    write(node.device(volume), 16 * MIB, second)
    # (pending still, unless this look came after its pending time, on a busy machine)
    state = ebs.ec2.describe_snapshots(SnapshotIds=[snapshot])["Snapshots"][0]["State"]
    looked = time.monotonic() - taken
    assert state == "pending" or (state == "completed" and looked >= pending), (state, looked)
    # Then the snapshot holds what the volume held when the call was made, now and once completed
    held = Path(ebs.data_file(SnapshotId=snapshot)["Path"])
    assert read(held, 8 * MIB, MIB) == first
    assert read(held, 16 * MIB, MIB) == bytes(MIB)
    ebs.completed(snapshot)
    restored = ebs.restore(snapshot)
    ebs.attach(restored, node, device="/dev/sdg")
    assert read(node.device(restored), 8 * MIB, MIB) == first
    assert read(node.device(restored), 16 * MIB, MIB) == bytes(MIB)
    # and the volume itself has the later writes
    assert read(node.device(volume), 8 * MIB, MIB) == second


def test_a_volume_from_a_snapshot_has_the_snapshot_size_by_default_and_may_be_larger_never_smaller(
    ebs: Ebs,
) -> None:
    # CreateVolume, Size: "If you specify a snapshot, the default is the snapshot size, and you
    # can specify a volume size that is equal to or larger than the snapshot size."
    # Given a snapshot of a 4 GiB volume holding data near its end, and the volume grown to 8 GiB
    node = ebs.node()
    volume = ebs.volume()
    ebs.attach(volume, node)
    tail = os.urandom(MIB)
    write(node.device(volume), 4 * GIB - MIB, tail)
    snapshot = ebs.snapshot(volume)
    ebs.completed(snapshot)
    ebs.ec2.modify_volume(VolumeId=volume, Size=8)  # the fast profile: 8 GiB within the call
    assert node.device(volume).stat().st_size == 8 * GIB
    # Then the snapshot is still of a 4 GiB volume
    assert ebs.ec2.describe_snapshots(SnapshotIds=[snapshot])["Snapshots"][0]["VolumeSize"] == 4
    # When volumes are created from it without a size and with a larger one
    default, larger = ebs.restore(snapshot), ebs.restore(snapshot, size=12)
    # Then the first is 4 GiB, the second 12 GiB, both with the snapshot's bytes (zeros beyond)
    described = ebs.ec2.describe_volumes(VolumeIds=[default, larger])["Volumes"]
    sizes = {v["VolumeId"]: v["Size"] for v in described}
    assert sizes == {default: 4, larger: 12}
    ebs.attach(default, node, device="/dev/sdg")
    ebs.attach(larger, node, device="/dev/sdh")
    assert node.device(default).stat().st_size == 4 * GIB
    assert node.device(larger).stat().st_size == 12 * GIB
    for restored in (default, larger):
        assert read(node.device(restored), 4 * GIB - MIB, MIB) == tail
    assert read(node.device(larger), 4 * GIB, MIB) == bytes(MIB)
    # and a size smaller than the snapshot's is refused
    with pytest.raises(ClientError) as refused:
        ebs.restore(snapshot, size=2)
    assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert snapshot in refused.value.response["Error"]["Message"]


def test_a_multi_attach_volume_is_one_set_of_blocks_on_every_instance(ebs: Ebs) -> None:
    # Multi-Attach: "Each instance to which the volume is attached has full read and write
    # permission to the shared volume."
    # Given an io2 Multi-Attach volume attached to two nodes
    first, second = ebs.node(), ebs.node()
    volume = ebs.volume()
    ebs.attach(volume, first, second)
    # When the first writes through its device / Then the second reads it through its own
    one, two = os.urandom(MIB), os.urandom(MIB)
    write(first.device(volume), 2 * GIB, one)
    assert read(second.device(volume), 2 * GIB, MIB) == one
    # and the other way round
    write(second.device(volume), 3 * GIB, two)
    assert read(first.device(volume), 3 * GIB, MIB) == two
    # and a snapshot has what both wrote
    snapshot = Path(ebs.data_file(SnapshotId=ebs.snapshot(volume))["Path"])
    assert (read(snapshot, 2 * GIB, MIB), read(snapshot, 3 * GIB, MIB)) == (one, two)


class CountingWriter(threading.Thread):
    """Writes 1, 2, 3 … to each volume in turn (volume A's count n, then B's n), each write under a
    shared flock of the device, as an application whose second write depends on the first."""

    def __init__(self, devices: list[Path]) -> None:
        super().__init__(daemon=True)
        self.devices = devices
        self.count = 0
        self.stop = threading.Event()

    def run(self) -> None:
        handles = [path.open("r+b") for path in self.devices]
        try:
            while not self.stop.is_set():
                self.count += 1
                for handle in handles:
                    fcntl.flock(handle, fcntl.LOCK_SH)
                    os.pwrite(handle.fileno(), self.count.to_bytes(8, "big"), MIB)
                    fcntl.flock(handle, fcntl.LOCK_UN)
        finally:
            for handle in handles:
                handle.close()


def counted(path: Path) -> int:
    return int.from_bytes(read(path, MIB, 8), "big")


def test_create_snapshots_copies_every_volume_of_the_instance_at_one_instant(ebs: Ebs) -> None:
    # CreateSnapshots: "Each volume attached to the specified instance will produce one snapshot
    # that is crash-consistent across the instance."
    # Given an instance with two data volumes an application keeps writing to, a write to the
    # second always after the write to the first
    node = ebs.node()
    volumes = [ebs.volume(), ebs.volume()]
    for volume, device in zip(volumes, ("/dev/sdf", "/dev/sdg"), strict=True):
        ebs.attach(volume, node, device=device)
        # 16 MiB each, so that copying them takes a few milliseconds: enough for a writer to move
        # on between the copies of a set that is not taken at one instant
        for chunk in range(16):
            write(node.device(volume), (chunk + 1) * 64 * MIB, os.urandom(MIB))
    writer = CountingWriter([node.device(v) for v in volumes])
    writer.start()
    try:
        deadline = time.monotonic() + 30
        while writer.count < 100:
            assert time.monotonic() < deadline, "the writer did not start"
            time.sleep(0.01)
        # When the instance's volumes are snapshotted (its root volume left out)
        spec = {"InstanceId": node.instance_id, "ExcludeBootVolume": True}
        reply = ebs.ec2.create_snapshots(InstanceSpecification=spec)
        taken = {s["VolumeId"]: s["SnapshotId"] for s in reply["Snapshots"]}
        ebs.snapshots.extend(taken.values())
        after_call = writer.count
        deadline = time.monotonic() + 30
        while writer.count < after_call + 100:  # the application goes on writing
            assert time.monotonic() < deadline, "the writer stopped"
            time.sleep(0.01)
    finally:
        writer.stop.set()
        writer.join(timeout=10)
    # Then each volume has its snapshot, all taken at one instant: the second volume's count is
    # the first's or one behind (a write it had not done yet), never ahead
    assert set(taken) == set(volumes)
    paths = [Path(ebs.data_file(SnapshotId=taken[v])["Path"]) for v in volumes]
    first, second = (counted(path) for path in paths)
    assert first > 0
    assert first - second in (0, 1)
    # and none has a write made after the call returned
    assert first <= after_call
    assert [counted(node.device(v)) for v in volumes] == [writer.count] * 2
    assert [counted(path) for path in paths] == [first, second]


def test_deleting_a_snapshot_frees_its_data_and_deleting_a_volume_frees_its_own(ebs: Ebs) -> None:
    # Given a volume and a snapshot of it, each with its data in the run directory
    volume = ebs.volume()
    snapshot = ebs.snapshot(volume)
    ebs.completed(snapshot)
    snapshot_data, volume_data = ebs.data_file(SnapshotId=snapshot), ebs.data_file(VolumeId=volume)
    assert snapshot_data["Exists"]
    assert volume_data["Exists"]
    # When the snapshot is deleted / Then its data is gone, the volume's is not
    ebs.ec2.delete_snapshot(SnapshotId=snapshot)
    assert not Path(snapshot_data["Path"]).exists()
    assert Path(volume_data["Path"]).exists()
    # When the volume is deleted / Then its data is gone too
    ebs.ec2.delete_volume(VolumeId=volume)
    assert not Path(volume_data["Path"]).exists()


def test_a_snapshot_copies_what_was_written_not_the_volume_size(ebs: Ebs) -> None:
    # Given a 100 GiB volume with 6 MiB written in three places
    node = ebs.node()
    volume = ebs.volume(size=100, Iops=1000)
    ebs.attach(volume, node)
    written = {offset: os.urandom(2 * MIB) for offset in (MIB, 50 * GIB, 100 * GIB - 2 * MIB)}
    for offset, data in written.items():
        write(node.device(volume), offset, data)
    # When it is snapshotted and a 200 GiB volume is created from the snapshot
    snapshot = ebs.snapshot(volume)
    ebs.completed(snapshot)
    restored = ebs.restore(snapshot, size=200)
    # Then the snapshot and the new volume are as long as their volumes, and take on disk about
    # what was written (sparse copies: the holes were not copied as zeros)
    for found, length in (
        (ebs.data_file(VolumeId=volume), 100 * GIB),
        (ebs.data_file(SnapshotId=snapshot), 100 * GIB),
        (ebs.data_file(VolumeId=restored), 200 * GIB),
    ):
        assert found["Bytes"] == length
        assert 6 * MIB <= found["AllocatedBytes"] <= 16 * MIB, found
    # and the new volume reads the bytes written, where they were written
    ebs.attach(restored, node, device="/dev/sdg")
    for offset, data in written.items():
        assert read(node.device(restored), offset, len(data)) == data
