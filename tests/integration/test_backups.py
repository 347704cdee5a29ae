"""Consistent backups through the local cloud: the real template deployed, the real Lambda code,
the ConsistentBackup workflow on the Step Functions engine, freeze-io / thaw-io run by Run
Command on sandbox nodes whose mountpoints are real XFS filesystems (see backups_world.py)."""

import time
from typing import Any

import boto3

from tests.integration.arrays_world import control
from tests.integration.backups_world import BackupArray, backup_finished, frozen
from tests.integration.conftest import Api


def snapshots_of(backup_id: str) -> list[dict[str, Any]]:
    return list(
        boto3.client("ec2").describe_snapshots(
            OwnerIds=["self"], Filters=[{"Name": "tag:vsa:backup", "Values": [backup_id]}]
        )["Snapshots"]
    )


def test_an_application_consistent_backup_of_the_whole_array(
    api: Api, backup_array: Any, stack_outputs: dict[str, str], xfs_lab: Any
) -> None:
    # Given an array of 3 volumes, 2 hosts with 2 XFS mountpoints each, a serving controller that
    # also has a volume of no array attached
    array: BackupArray = backup_array(volumes=3, hosts=2, mountpoints=2)

    # When an application-consistent backup is asked for, with an Idempotency-Key
    body = {"mode": "application", "label": "nightly"}
    status, answer = api.call(
        "POST", f"/arrays/{array.array_id}/backups", body, headers={"Idempotency-Key": "it-happy-1"}
    )
    assert status == 202, answer
    backup_id = answer["backupId"]
    execution = backup_finished(stack_outputs, backup_id)

    # Then the workflow succeeded and the set is completed and labelled application-consistent
    assert execution["status"] == "SUCCEEDED", execution
    status, backup = api.call("GET", f"/arrays/{array.array_id}/backups/{backup_id}")
    assert status == 200, backup
    assert backup["state"] == "completed", backup
    assert backup["consistency"] == "application-consistent", backup["consistencyReason"]
    # one snapshot per array volume, all completed, none of the stray volume
    assert sorted(s["volumeId"] for s in backup["snapshots"]) == sorted(array.volumes)
    assert all(s["state"] == "completed" and s["progress"] == 100 for s in backup["snapshots"])
    tagged = snapshots_of(backup_id)
    assert sorted(s["VolumeId"] for s in tagged) == sorted(array.volumes)
    assert array.stray_volume not in {s["VolumeId"] for s in tagged}
    tags = {t["Key"]: t["Value"] for t in tagged[0]["Tags"]}
    assert tags["vsa:array"] == array.array_id and tags["vsa:consistency"] == "application-consistent"
    assert tags["vsa:label"] == "nightly"
    # every host froze before the snapshot call and thawed after it returned, by thaw-io
    timing = backup["snapshotTiming"]
    assert sorted(h["instanceId"] for h in backup["hosts"]) == sorted(array.hosts)
    for host in backup["hosts"]:
        assert host["frozeAt"] <= timing["requestedAt"] < timing["returnedAt"] <= host["thawStartedAt"]
        assert not host["watchdogFired"] and host["error"] is None
        assert 0 < host["windowSeconds"] < 10
    # and nothing is left frozen
    assert not any(frozen(xfs_lab, m) for mounts in array.hosts.values() for m in mounts)

    # When the same request is repeated with the same key, then with another body
    again = api.call("POST", f"/arrays/{array.array_id}/backups", body, headers={"Idempotency-Key": "it-happy-1"})
    other = api.call(
        "POST", f"/arrays/{array.array_id}/backups", {"mode": "crash"}, headers={"Idempotency-Key": "it-happy-1"}
    )

    # Then the first answers the same set and starts nothing; the second is refused with why
    assert again[0] == 202 and again[1]["backupId"] == backup_id, again
    assert other[0] == 422 and "Idempotency-Key" in other[1]["message"], other
    status, listed = api.call("GET", f"/arrays/{array.array_id}/backups")
    assert [b["backupId"] for b in listed["backups"]] == [backup_id]
