"""Locked backup sets through the local cloud (the real template and Lambda code, the local
cloud's EBS snapshot lock: tests/localcloud/test_snapshot_lock.py): a policy with a lock locks
every snapshot of each completed set, nobody can delete them, retention keeps a locked set past
its count and says until when, and the list shows the lock."""

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.integration.arrays_world import put_spec
from tests.integration.backups_world import BackupArray
from tests.integration.conftest import Api
from tests.integration.test_backups import snapshots_of, wait_backup


def test_a_locked_set_cannot_be_deleted_and_retention_keeps_it_until_its_lock_expires(
    api: Api, backup_array: Any, stack_outputs: dict[str, str]
) -> None:
    # Given an array whose policy keeps 1 set and locks each one in governance mode for 2 days
    array: BackupArray = backup_array(volumes=2, hosts=1, mode="crash", retention=1)
    spec = {**array.spec, "backup": {**array.spec["backup"], "lock": {"mode": "governance", "days": 2}}}
    status, answer = put_spec(api, spec)
    assert status in (200, 202), answer
    # When two backups run
    first = wait_backup(api, stack_outputs, array.array_id, {"mode": "crash"})
    second = wait_backup(api, stack_outputs, array.array_id, {"mode": "crash"})
    # Then each set's snapshots are locked for 2 days, as EC2 says
    ec2 = boto3.client("ec2")
    for backup_id in (first, second):
        ids = [s["SnapshotId"] for s in snapshots_of(backup_id)]
        assert len(ids) == 2
        locks = ec2.describe_locked_snapshots(SnapshotIds=ids)["Snapshots"]
        assert {(lock["LockState"], lock["LockDuration"]) for lock in locks} == {("governance", 2)}
    # and the second set's retention kept the first, past the policy's count, saying until when
    listed = {b["backupId"]: b for b in api.call("GET", f"/arrays/{array.array_id}/backups")[1]["backups"]}
    assert set(listed) == {first, second}
    until = datetime.fromisoformat(listed[first]["lock"]["until"])
    assert timedelta(days=1, hours=23) < until - datetime.now(UTC) <= timedelta(days=2)
    assert listed[first]["lock"]["mode"] == "governance"
    status, plan = api.call("GET", f"/arrays/{array.array_id}/retention?keep=1")
    assert status == 200, plan
    (older,) = [d for d in plan["plan"] if d["backupId"] == first]
    assert older["action"] == "keep"
    assert "locked (governance) until" in older["reason"]
    # and nobody deletes a locked snapshot: not the API (409, naming the lock) and not EC2 itself
    status, refused = api.call("DELETE", f"/arrays/{array.array_id}/backups/{first}")
    assert status == 409, refused
    assert "locked" in str(refused)
    with pytest.raises(ClientError):
        ec2.delete_snapshot(SnapshotId=snapshots_of(first)[0]["SnapshotId"])
    assert len(snapshots_of(first)) == 2
    # When an operator with the rights unlocks the older set by hand (governance mode allows it)
    for snapshot in snapshots_of(first):
        ec2.unlock_snapshot(SnapshotId=snapshot["SnapshotId"])
    # Then the next retention run sees it unlocked (it reads EC2, not its own record) and deletes it
    status, applied = api.call("POST", f"/arrays/{array.array_id}/retention", {"keep": 1})
    assert status == 200, applied
    assert [d["backupId"] for d in applied["deleted"]] == [first]
    assert snapshots_of(first) == []
