"""EBS snapshot lock as AWS documents it (EC2 API reference: LockSnapshot, UnlockSnapshot,
DescribeLockedSnapshots; EBS User Guide: "Amazon EBS snapshot lock concepts", "Lock an Amazon
EBS snapshot"). Stock LocalStack answers none of these operations, and deletes a locked
snapshot."""

import contextlib
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

ZONE = "us-east-1a"


@pytest.fixture
def ec2(aws: Callable[[str], Any]) -> Any:
    return aws("ec2")


@pytest.fixture
def snapshot(ec2: Any, control: Callable[..., dict[str, Any]]) -> Iterator[Callable[[], str]]:
    """Completed snapshots of a fresh volume; each unlocked (where the lock allows) and deleted
    after the test."""
    control("ebs", "configure", snapshot_seconds=1, snapshot_rate_seconds=0)
    made: list[tuple[str, str]] = []

    def make() -> str:
        volume_id = ec2.create_volume(AvailabilityZone=ZONE, Size=1, VolumeType="gp3")["VolumeId"]
        snapshot_id = str(ec2.create_snapshot(VolumeId=volume_id)["SnapshotId"])
        made.append((snapshot_id, volume_id))
        ec2.get_waiter("snapshot_completed").wait(SnapshotIds=[snapshot_id], WaiterConfig={"Delay": 1})
        return snapshot_id

    yield make
    for snapshot_id, volume_id in made:
        for step in (ec2.unlock_snapshot, ec2.delete_snapshot):
            # not locked, or locked for good (compliance): left to the local cloud's next start
            with contextlib.suppress(ClientError):
                step(SnapshotId=snapshot_id)
        ec2.delete_volume(VolumeId=volume_id)
    control("ebs", "configure", reset=True)


def _code(excinfo: pytest.ExceptionInfo[ClientError]) -> str:
    return str(excinfo.value.response["Error"]["Code"])


def test_a_governance_lock_refuses_deletion_until_unlocked_and_is_described(ec2, snapshot):
    snapshot_id = snapshot()
    locked = ec2.lock_snapshot(SnapshotId=snapshot_id, LockMode="governance", LockDuration=7)
    assert locked["LockState"] == "governance"
    assert locked["LockDuration"] == 7
    expected = locked["LockDurationStartTime"] + timedelta(days=7)
    assert abs((locked["LockExpiresOn"] - expected).total_seconds()) < 1
    # "A locked snapshot can't be deleted"
    with pytest.raises(ClientError) as refused:
        ec2.delete_snapshot(SnapshotId=snapshot_id)
    assert "locked" in str(refused.value)
    (described,) = ec2.describe_locked_snapshots(SnapshotIds=[snapshot_id])["Snapshots"]
    assert (described["SnapshotId"], described["LockState"]) == (snapshot_id, "governance")
    filtered = ec2.describe_locked_snapshots(Filters=[{"Name": "lock-state", "Values": ["compliance"]}])
    assert snapshot_id not in {s["SnapshotId"] for s in filtered["Snapshots"]}
    # "users with appropriate IAM permissions can unlock the snapshot ... at any time"
    ec2.unlock_snapshot(SnapshotId=snapshot_id)
    assert ec2.describe_locked_snapshots(SnapshotIds=[snapshot_id])["Snapshots"] == []
    ec2.delete_snapshot(SnapshotId=snapshot_id)


def test_compliance_in_its_cooling_off_period_can_change_after_it_only_grow(ec2, snapshot):
    cooling = snapshot()
    locked = ec2.lock_snapshot(SnapshotId=cooling, LockMode="compliance", LockDuration=3, CoolOffPeriod=24)
    assert locked["LockState"] == "compliance-cooloff"
    assert locked["CoolOffPeriod"] == 24
    # within the cooling-off period: the mode may change, and it may be unlocked
    assert (
        ec2.lock_snapshot(SnapshotId=cooling, LockMode="governance", LockDuration=1)["LockState"]
        == "governance"
    )
    ec2.unlock_snapshot(SnapshotId=cooling)
    # without a cooling-off period compliance holds at once: no unlock, no shorter lock, no mode change,
    # no CoolOffPeriod; a longer duration is taken
    final = snapshot()
    assert (
        ec2.lock_snapshot(SnapshotId=final, LockMode="compliance", LockDuration=2)["LockState"]
        == "compliance"
    )
    for change in (
        {"LockMode": "compliance", "LockDuration": 1},
        {"LockMode": "governance", "LockDuration": 5},
        {"LockMode": "compliance", "LockDuration": 5, "CoolOffPeriod": 1},
    ):
        with pytest.raises(ClientError):
            ec2.lock_snapshot(SnapshotId=final, **change)
    with pytest.raises(ClientError):
        ec2.unlock_snapshot(SnapshotId=final)
    assert ec2.lock_snapshot(SnapshotId=final, LockMode="compliance", LockDuration=5)["LockDuration"] == 5


def test_the_parameters_are_checked_as_the_api_reference_says(ec2, snapshot):
    snapshot_id = snapshot()
    later = datetime.now(UTC) + timedelta(days=1)
    for wrong in (
        {"LockMode": "governance"},  # neither a duration nor a date
        {"LockMode": "governance", "LockDuration": 1, "ExpirationDate": later},  # both
        {"LockMode": "governance", "LockDuration": 36_501},  # 1-36,500 days
        {"LockMode": "governance", "LockDuration": 1, "CoolOffPeriod": 1},  # compliance only
        {"LockMode": "compliance", "LockDuration": 1, "CoolOffPeriod": 73},  # 1-72 hours
        {"LockMode": "governance", "ExpirationDate": datetime.now(UTC) - timedelta(hours=1)},
    ):
        with pytest.raises(ClientError):
            ec2.lock_snapshot(SnapshotId=snapshot_id, **wrong)
    assert ec2.describe_locked_snapshots(SnapshotIds=[snapshot_id])["Snapshots"] == []
    with pytest.raises(ClientError) as missing:
        ec2.lock_snapshot(SnapshotId="snap-0123456789abcdef0", LockMode="governance", LockDuration=1)
    assert _code(missing) == "InvalidSnapshot.NotFound"


def test_a_lock_past_its_expiry_is_expired_and_the_snapshot_can_be_deleted(ec2, snapshot):
    snapshot_id = snapshot()
    soon = datetime.now(UTC) + timedelta(seconds=2)
    assert ec2.lock_snapshot(SnapshotId=snapshot_id, LockMode="governance", ExpirationDate=soon)[
        "LockState"
    ] == ("governance")
    with pytest.raises(ClientError):
        ec2.delete_snapshot(SnapshotId=snapshot_id)
    deadline = datetime.now(UTC) + timedelta(seconds=60)
    while ec2.describe_locked_snapshots(SnapshotIds=[snapshot_id])["Snapshots"][0]["LockState"] != "expired":
        assert datetime.now(UTC) < deadline
        time.sleep(0.2)
    ec2.delete_snapshot(SnapshotId=snapshot_id)
