"""Snapshot copies across Regions and accounts, and sharing, as AWS documents them (disaster
recovery: a backup set's snapshots copied to another Region, or account, and restored there).

* "Copy an Amazon EBS snapshot" (EBS User Guide,
  https://docs.aws.amazon.com/ebs/latest/userguide/ebs-copy-snapshot.html) and CopySnapshot (EC2
  API Reference, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CopySnapshot.html).
* "Share an Amazon EBS snapshot" (EBS User Guide,
  https://docs.aws.amazon.com/ebs/latest/userguide/ebs-modifying-snapshot-permissions.html).
* "Amazon EventBridge events for Amazon EBS" (EBS User Guide,
  https://docs.aws.amazon.com/ebs/latest/userguide/ebs-cloud-watch-events.html): copySnapshot,
  shareSnapshot.

The source snapshots are of volumes a managed node wrote through its device (us-east-1, the
default account); the copies are read back through a volume created from them in the
destination, whose data file (control ``ebs/data_file``) is what an attached node's device links
to. An account is chosen by the access key (a 12-digit key id is that account in LocalStack).
Stock LocalStack fails each test: moto's copy was ``completed`` at once with no data, of a
pending snapshot too, and a snapshot shared with another account could not be copied by it.
"""

import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, WaiterError

from tests.localcloud.conftest import EventCapture
from tests.localcloud.test_ebs_data import GIB, MIB, WAIT, Ebs, read, write

SOURCE = "us-east-1"
DEST = "us-west-2"
OWNER = "000000000000"  # the local cloud's default account (the access key "test")
DR_ACCOUNT = "111111111111"
OTHER_ACCOUNT = "222222222222"
COPIER = "333333333333"


def _code(exc: ClientError) -> str:
    return str(exc.response["Error"]["Code"])


@dataclass
class Place:
    """An account in a Region: its EC2 client, and what a test makes there (removed after)."""

    endpoint: str
    control: Callable[..., dict[str, Any]]
    account: str
    region: str
    snapshots: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)

    def client(self, service: str) -> Any:
        key = "test" if self.account == OWNER else self.account
        return boto3.client(
            service,
            region_name=self.region,
            endpoint_url=self.endpoint,
            aws_access_key_id=key,
            aws_secret_access_key="test",
        )

    @property
    def ec2(self) -> Any:
        return self.client("ec2")

    def copy(self, source: str, *, source_region: str = SOURCE, **extra: Any) -> str:
        snapshot_id: str = self.ec2.copy_snapshot(
            SourceRegion=source_region, SourceSnapshotId=source, **extra
        )["SnapshotId"]
        self.snapshots.append(snapshot_id)
        return snapshot_id

    def snapshot(self, snapshot_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.ec2.describe_snapshots(SnapshotIds=[snapshot_id])["Snapshots"][0]
        return found

    def completed(self, *snapshot_ids: str) -> None:
        self.ec2.get_waiter("snapshot_completed").wait(SnapshotIds=list(snapshot_ids), WaiterConfig=WAIT)

    def restore(self, snapshot_id: str) -> Path:
        """A volume from the snapshot, here; the file of its blocks."""
        volume_id: str = self.ec2.create_volume(
            AvailabilityZone=f"{self.region}a", SnapshotId=snapshot_id, VolumeType="gp3"
        )["VolumeId"]
        self.volumes.append(volume_id)
        self.ec2.get_waiter("volume_available").wait(VolumeIds=[volume_id], WaiterConfig=WAIT)
        return Path(self.control("ebs", "data_file", VolumeId=volume_id)["Path"])

    def clean(self) -> None:
        ec2 = self.ec2
        for volume_id in self.volumes:
            ec2.delete_volume(VolumeId=volume_id)
        for snapshot_id in self.snapshots:
            try:
                ec2.delete_snapshot(SnapshotId=snapshot_id)
            except ClientError as exc:
                if _code(exc) != "InvalidSnapshot.NotFound":
                    raise


@pytest.fixture
def ebs(aws: Callable[[str], Any], control: Callable[..., dict[str, Any]]) -> Iterator[Ebs]:
    """The source side (us-east-1, the default account). Snapshots and copies pending for 1 s."""
    control("ebs", "configure", snapshot_seconds=1, snapshot_rate_seconds=0)
    made = Ebs(aws("ec2"), control)
    yield made
    made.clean()
    control("ebs", "configure", reset=True)


@pytest.fixture
def place(endpoint: str, control: Callable[..., dict[str, Any]]) -> Iterator[Callable[..., Place]]:
    """``place(account, region)``: an account in a Region, cleaned after the test."""
    made: list[Place] = []

    def make(account: str = OWNER, region: str = DEST) -> Place:
        made.append(Place(endpoint, control, account, region))
        return made[-1]

    yield make
    for each in made:
        each.clean()


@pytest.fixture
def written(ebs: Ebs) -> tuple[str, dict[int, bytes]]:
    """A completed snapshot (tagged source=yes) of a 4 GiB volume a node wrote in three places."""
    node = ebs.node()
    volume = ebs.volume()
    ebs.attach(volume, node)
    data = {offset: os.urandom(MIB) for offset in (0, GIB, 4 * GIB - MIB)}
    for offset, chunk in data.items():
        write(node.device(volume), offset, chunk)
    snapshot = ebs.snapshot(volume)
    ebs.ec2.create_tags(Resources=[snapshot], Tags=[{"Key": "source", "Value": "yes"}])
    ebs.completed(snapshot)
    return snapshot, data


# --- CopySnapshot ----------------------------------------------------------------------------


def test_a_copy_made_in_another_region_has_the_sources_bytes_and_completes_later(
    written: tuple[str, dict[int, bytes]], place: Callable[..., Place], control: Callable[..., dict[str, Any]]
) -> None:
    # "The snapshot copy is an exact copy of the original, but it has a unique resource ID";
    # CopySnapshot: "Snapshots copies have an arbitrary source volume ID"; "User-defined tags are
    # not copied from the source snapshot to the new snapshot. You can add user-defined tags
    # during or after the copy operation."
    source, data = written
    west = place()
    # When the copy is asked for on us-west-2's endpoint, with tags for it (pending for 5 s)
    pending = control("ebs", "configure", snapshot_seconds=5)["snapshot_seconds"]
    asked = time.monotonic()
    copy = west.copy(
        source,
        Description="dr copy",
        TagSpecifications=[{"ResourceType": "snapshot", "Tags": [{"Key": "vsa:copy-of", "Value": source}]}],
    )
    # Then it is pending at first (unless this look came after its pending time, on a busy
    # machine), in us-west-2 only, then completed
    described = west.snapshot(copy)
    looked = time.monotonic() - asked
    assert described["State"] == "pending" or (described["State"] == "completed" and looked >= pending), (
        described["State"],
        looked,
    )
    assert described["OwnerId"] == OWNER
    with pytest.raises(ClientError) as elsewhere:
        place(region=SOURCE).snapshot(copy)
    assert _code(elsewhere.value) == "InvalidSnapshot.NotFound"
    west.completed(copy)
    described = west.snapshot(copy)
    assert (described["Progress"], described["Description"]) == ("100%", "dr copy")
    # with the source's size, an arbitrary volume id and its own tags only
    assert described["VolumeSize"] == 4
    assert described["VolumeId"] == "vol-ffffffff"
    assert described["Tags"] == [{"Key": "vsa:copy-of", "Value": source}]
    # and a volume created from it in us-west-2 reads what the node wrote, where it wrote it
    restored = west.restore(copy)
    assert restored.stat().st_size == 4 * GIB
    for offset, chunk in data.items():
        assert read(restored, offset, len(chunk)) == chunk


def test_only_a_completed_snapshot_is_copied(
    ebs: Ebs, place: Callable[..., Place], control: Callable[..., dict[str, Any]]
) -> None:
    # "After you create a snapshot, and it has reached the completed state, you can create a copy
    # of it." (EC2 refuses with IncorrectState; the API reference names no code of its own.)
    control("ebs", "configure", snapshot_seconds=30)
    volume = ebs.volume()
    pending, broken = ebs.snapshot(volume), ebs.snapshot(volume)
    control("ebs", "fail_snapshot", SnapshotId=broken)
    west = place()
    for source, state in ((pending, "pending"), (broken, "error")):
        with pytest.raises(ClientError) as refused:
            west.copy(source)
        assert _code(refused.value) == "IncorrectState"
        assert state in refused.value.response["Error"]["Message"]


def test_encryption_of_a_copy(
    written: tuple[str, dict[int, bytes]], ebs: Ebs, place: Callable[..., Place]
) -> None:
    # CopySnapshot: "Copies of unencrypted snapshots remain unencrypted, unless you enable
    # encryption for the snapshot copy operation. By default, encrypted snapshot copies use the
    # default KMS key; however, you can specify a different KMS key"; KmsKeyId: "If KmsKeyId is
    # specified, the encrypted state must be true."
    source, _ = written
    west = place()
    plain = west.snapshot(west.copy(source))
    assert plain["Encrypted"] is False
    assert "KmsKeyId" not in plain
    by_default = west.snapshot(west.copy(source, Encrypted=True))
    assert by_default["Encrypted"] is True
    assert by_default["KmsKeyId"].startswith(f"arn:aws:kms:{DEST}:{OWNER}:key/")
    key = f"arn:aws:kms:{DEST}:{OWNER}:key/{uuid.uuid4()}"
    chosen = west.snapshot(west.copy(source, Encrypted=True, KmsKeyId=key))
    assert (chosen["Encrypted"], chosen["KmsKeyId"]) == (True, key)
    with pytest.raises(ClientError) as refused:
        west.copy(source, KmsKeyId=key)
    assert _code(refused.value) == "InvalidParameterDependency"
    # "Copies of encrypted EBS snapshots remain encrypted", even without Encrypted
    encrypted_volume = ebs.volume(Encrypted=True)
    encrypted = ebs.snapshot(encrypted_volume)
    ebs.completed(encrypted)
    assert west.snapshot(west.copy(encrypted))["Encrypted"] is True


def test_deleting_a_copy_frees_its_data(
    written: tuple[str, dict[int, bytes]], place: Callable[..., Place]
) -> None:
    source, _ = written
    west = place()
    copy = west.copy(source)
    west.completed(copy)
    held = west.control("ebs", "data_file", SnapshotId=copy)
    assert held["Exists"]
    west.ec2.delete_snapshot(SnapshotId=copy)
    assert not Path(held["Path"]).exists()
    assert west.control("ebs", "data_file", SnapshotId=source)["Exists"]  # the source keeps its own


def test_a_source_the_caller_cannot_read_fails_the_copy_in_the_destination(
    place: Callable[..., Place], aws: Callable[[str], Any], endpoint: str
) -> None:
    # EventBridge events for EBS, copySnapshot scenario 4: "result is failed ... cause: Source
    # snapshot ID is not valid"; StateMessage: "If a snapshot copy operation fails ... this field
    # displays error state details". In the caller's own Region the source is looked up at once.
    west = place()
    capture = EventCapture(_clients(endpoint, OWNER, DEST), _copy_events())
    try:
        missing = "snap-0123456789abcdef0"
        copy = west.copy(missing)
        assert west.snapshot(copy)["State"] == "pending"
        with pytest.raises(WaiterError, match="error"):
            west.completed(copy)
        failed = west.snapshot(copy)
        assert (failed["State"], failed["StateMessage"]) == ("error", "Source snapshot ID is not valid")
        (event,) = capture.wait_for(lambda e: e["detail"]["snapshot_id"].endswith(copy))
        assert event["region"] == DEST
        assert (event["detail"]["result"], event["detail"]["cause"]) == (
            "failed",
            "Source snapshot ID is not valid",
        )
        assert event["detail"]["source"] == f"arn:aws:ec2:{SOURCE}::snapshot/{missing}"
    finally:
        capture.close()
    with pytest.raises(ClientError) as refused:
        place(region=SOURCE).copy("snap-0123456789abcdef0")
    assert _code(refused.value) == "InvalidSnapshot.NotFound"


def test_a_copy_completes_with_the_copy_snapshot_event_in_the_destination_incremental_after_the_first(
    written: tuple[str, dict[int, bytes]], ebs: Ebs, place: Callable[..., Place], endpoint: str
) -> None:
    # "If you are copying the snapshot across Regions, then the event is emitted in the
    # destination Region"; "Incremental snapshot copying": a copy is incremental when "the
    # snapshot was copied to the destination Region or account previously" and "the most recent
    # snapshot copy still exists in the destination".
    source, _ = written
    (later,) = [ebs.snapshot(v) for v in ebs.volumes[:1]]  # a later snapshot of the same volume
    ebs.completed(later)
    west = place()
    capture = EventCapture(_clients(endpoint, OWNER, DEST), _copy_events())
    try:
        first = west.copy(source)
        west.completed(first)
        second = west.copy(later)
        west.completed(second)
        for copy, what, incremental in ((first, source, "false"), (second, later, "true")):
            (event,) = capture.wait_for(lambda e, c=copy: e["detail"]["snapshot_id"].endswith(c))
            assert (event["source"], event["detail-type"], event["region"]) == (
                "aws.ec2",
                "EBS Snapshot Notification",
                DEST,
            )
            detail = event["detail"]
            assert (detail["event"], detail["result"], detail["cause"]) == ("copySnapshot", "succeeded", "")
            assert detail["snapshot_id"] == f"arn:aws:ec2:{DEST}::snapshot/{copy}"
            assert detail["source"] == f"arn:aws:ec2:{SOURCE}::snapshot/{what}"
            assert (detail["incremental"], detail["transferType"]) == (incremental, "standard")
            assert event["resources"] == [detail["snapshot_id"]]
    finally:
        capture.close()


def test_at_most_twenty_copies_are_in_progress_per_destination_region(
    written: tuple[str, dict[int, bytes]],
    ebs: Ebs,
    place: Callable[..., Place],
    control: Callable[..., dict[str, Any]],
) -> None:
    # "Each account can have up to twenty concurrent snapshot copy requests to a single
    # destination Region." (EC2: ResourceLimitExceeded, "Too many snapshot copies in progress.")
    # An account of its own (the source shared with it), so that no other test's copies count.
    source, _ = written
    ebs.ec2.modify_snapshot_attribute(
        SnapshotId=source, Attribute="createVolumePermission", OperationType="add", UserIds=[COPIER]
    )
    control("ebs", "configure", snapshot_seconds=30)
    west = place(COPIER, DEST)
    for _ in range(20):
        west.copy(source)
    with pytest.raises(ClientError) as refused:
        west.copy(source)
    assert _code(refused.value) == "ResourceLimitExceeded"
    assert "The limit is 20 for this destination region" in refused.value.response["Error"]["Message"]
    # another destination Region has twenty of its own
    place(COPIER, "eu-west-1").copy(source)


# --- sharing ------------------------------------------------------------------------------------


def test_a_snapshot_shared_with_an_account_is_copied_by_it_and_by_no_other(
    written: tuple[str, dict[int, bytes]], ebs: Ebs, place: Callable[..., Place]
) -> None:
    # "You can modify the permissions of a snapshot if you want to share it with other AWS
    # accounts ... Users that you have authorized can use the snapshots that you share";
    # "You can copy snapshots that you own and snapshots that are shared with you".
    source, data = written
    dr_west, dr_east = place(DR_ACCOUNT, DEST), place(DR_ACCOUNT, SOURCE)
    other_east = place(OTHER_ACCOUNT, SOURCE)
    # Given the snapshot not shared: the DR account cannot copy it
    with pytest.raises(ClientError) as unseen:
        dr_east.copy(source)
    assert _code(unseen.value) == "InvalidSnapshot.NotFound"
    # When it is shared with the DR account
    ebs.ec2.modify_snapshot_attribute(
        SnapshotId=source, Attribute="createVolumePermission", OperationType="add", UserIds=[DR_ACCOUNT]
    )
    permissions = ebs.ec2.describe_snapshot_attribute(SnapshotId=source, Attribute="createVolumePermission")
    assert permissions["SnapshotId"] == source
    assert permissions["CreateVolumePermissions"] == [{"UserId": DR_ACCOUNT}]
    # Then the DR account copies it into us-west-2, owns the copy, and a volume from it has the bytes
    copy = dr_west.copy(source)
    dr_west.completed(copy)
    assert dr_west.snapshot(copy)["OwnerId"] == DR_ACCOUNT
    restored = dr_west.restore(copy)
    for offset, chunk in data.items():
        assert read(restored, offset, len(chunk)) == chunk
    # and the copy is the DR account's: the owner's us-west-2 does not have it
    with pytest.raises(ClientError) as not_ours:
        place(OWNER, DEST).snapshot(copy)
    assert _code(not_ours.value) == "InvalidSnapshot.NotFound"
    # but an account it is not shared with cannot copy it
    with pytest.raises(ClientError) as refused:
        other_east.copy(source)
    assert _code(refused.value) == "InvalidSnapshot.NotFound"
    # When the share is removed (the CreateVolumePermission form of the request)
    ebs.ec2.modify_snapshot_attribute(
        SnapshotId=source, CreateVolumePermission={"Remove": [{"UserId": DR_ACCOUNT}]}
    )
    # Then the DR account can copy it no more
    assert not ebs.ec2.describe_snapshot_attribute(SnapshotId=source, Attribute="createVolumePermission")[
        "CreateVolumePermissions"
    ]
    with pytest.raises(ClientError) as removed:
        dr_east.copy(source)
    assert _code(removed.value) == "InvalidSnapshot.NotFound"


def test_a_snapshot_encrypted_with_the_default_key_cannot_be_shared(ebs: Ebs) -> None:
    # "You can't share snapshots that are encrypted with the default AWS managed key. You can
    # only share snapshots that are encrypted with a customer managed key." (EC2:
    # OperationNotPermitted, "Encrypted snapshots with EBS default key cannot be shared")
    by_default = ebs.snapshot(ebs.volume(Encrypted=True))
    key = f"arn:aws:kms:{SOURCE}:{OWNER}:key/{uuid.uuid4()}"
    customer_managed = ebs.snapshot(ebs.volume(Encrypted=True, KmsKeyId=key))
    ebs.completed(by_default, customer_managed)
    with pytest.raises(ClientError) as refused:
        ebs.ec2.modify_snapshot_attribute(
            SnapshotId=by_default,
            Attribute="createVolumePermission",
            OperationType="add",
            UserIds=[DR_ACCOUNT],
        )
    assert _code(refused.value) == "OperationNotPermitted"
    assert (
        refused.value.response["Error"]["Message"]
        == "Encrypted snapshots with EBS default key cannot be shared"
    )
    ebs.ec2.modify_snapshot_attribute(
        SnapshotId=customer_managed,
        Attribute="createVolumePermission",
        OperationType="add",
        UserIds=[DR_ACCOUNT],
    )
    shared = ebs.ec2.describe_snapshot_attribute(
        SnapshotId=customer_managed, Attribute="createVolumePermission"
    )
    assert shared["CreateVolumePermissions"] == [{"UserId": DR_ACCOUNT}]


def test_the_account_shared_with_gets_the_share_snapshot_event(
    written: tuple[str, dict[int, bytes]], ebs: Ebs, endpoint: str
) -> None:
    # "The shareSnapshot event is sent to your AWS account when another account shares a
    # snapshot with it ... the value of source is the AWS account number of the user that shared
    # the snapshot with you."
    source, _ = written
    pattern = {"source": ["aws.ec2"], "detail": {"event": ["shareSnapshot"]}}
    capture = EventCapture(_clients(endpoint, DR_ACCOUNT, SOURCE), pattern)
    try:
        ebs.ec2.modify_snapshot_attribute(
            SnapshotId=source, CreateVolumePermission={"Add": [{"UserId": DR_ACCOUNT}]}
        )
        (event,) = capture.wait_for(lambda e: e["detail"]["snapshot_id"].endswith(source))
        assert (event["account"], event["region"]) == (DR_ACCOUNT, SOURCE)
        assert event["detail"]["source"] == OWNER
        assert event["detail"]["result"] == "succeeded"
        assert event["resources"] == [f"arn:aws:ec2:{SOURCE}::snapshot/{source}"]
    finally:
        capture.close()


def _clients(endpoint: str, account: str, region: str) -> Callable[[str], Any]:
    key = "test" if account == OWNER else account
    return lambda service: boto3.client(
        service,
        region_name=region,
        endpoint_url=endpoint,
        aws_access_key_id=key,
        aws_secret_access_key="test",
    )


def _copy_events() -> dict[str, Any]:
    return {
        "source": ["aws.ec2"],
        "detail-type": ["EBS Snapshot Notification"],
        "detail": {"event": ["copySnapshot"]},
    }
