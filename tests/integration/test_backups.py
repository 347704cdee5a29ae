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


def test_a_host_that_fails_to_freeze_gives_a_crash_consistent_set_and_every_host_is_thawed(
    api: Api, backup_array: Any, stack_outputs: dict[str, str], xfs_lab: Any
) -> None:
    # Given 2 hosts, one of whose filesystems another tool has frozen already: freeze-io's dry
    # run passes (it is a freezable XFS mountpoint), its freeze fails with EBUSY
    array: BackupArray = backup_array(volumes=2, hosts=2, mountpoints=1)
    stuck_host, other_host = sorted(array.hosts)
    stuck = array.hosts[stuck_host][0]
    xfs_lab_sh = __import__("tests.documents.xfs_lab", fromlist=["sh"]).sh
    xfs_lab_sh("fsfreeze", "-f", str(stuck))

    # When an application-consistent backup runs
    status, answer = api.call("POST", f"/arrays/{array.array_id}/backups", {"mode": "application"})
    assert status == 202, answer
    execution = backup_finished(stack_outputs, answer["backupId"])

    # Then the set completed, honestly labelled crash-consistent, saying which host and why
    assert execution["status"] == "SUCCEEDED", execution
    backup = api.call("GET", f"/arrays/{array.array_id}/backups/{answer['backupId']}")[1]
    assert backup["state"] == "completed"
    assert backup["consistency"] == "crash-consistent"
    assert stuck_host in backup["consistencyReason"] and "freez" in backup["consistencyReason"]
    assert len(backup["snapshots"]) == 2
    # and every host was thawed (thaw-io ran on both; it thaws the pre-frozen one too)
    hosts = {h["instanceId"]: h for h in backup["hosts"]}
    assert hosts[other_host]["thawedAt"] is not None and hosts[other_host]["error"] is None
    assert not any(frozen(xfs_lab, m) for mounts in array.hosts.values() for m in mounts)


def test_a_snapshot_in_error_fails_the_set_and_its_snapshots_are_deleted(
    api: Api, backup_array: Any, stack_outputs: dict[str, str], world: Any
) -> None:
    # Given a crash-mode backup whose snapshots stay pending 20 s
    array: BackupArray = backup_array(volumes=3, hosts=1, mode="crash")
    control(world.endpoint, "ebs", "configure", snapshot_seconds=20)
    status, answer = api.call("POST", f"/arrays/{array.array_id}/backups", {"mode": "crash"})
    assert status == 202, answer
    backup_id = answer["backupId"]

    # When one of its snapshots goes to error while pending
    deadline = time.monotonic() + 60
    while not (pending := [s for s in snapshots_of(backup_id) if s["State"] == "pending"]):
        assert time.monotonic() < deadline, "no pending snapshot of the set"
        time.sleep(0.5)
    control(world.endpoint, "ebs", "fail_snapshot", SnapshotId=pending[0]["SnapshotId"])
    execution = backup_finished(stack_outputs, backup_id)

    # Then the workflow fails, the set is failed with the snapshot named, and none of its
    # snapshots is left
    assert execution["status"] == "FAILED", execution
    backup = api.call("GET", f"/arrays/{array.array_id}/backups/{backup_id}")[1]
    assert backup["state"] == "failed"
    assert pending[0]["SnapshotId"] in backup["failure"] and "error" in backup["failure"]
    assert backup["consistency"] is None
    assert snapshots_of(backup_id) == []
    control(world.endpoint, "ebs", "configure", snapshot_seconds=2)


def test_a_workflow_stopped_mid_freeze_leaves_the_hosts_to_their_watchdogs(
    api: Api, backup_array: Any, stack_outputs: dict[str, str], xfs_lab: Any
) -> None:
    # Given hosts whose watchdogs thaw 3 s after arming
    array: BackupArray = backup_array(volumes=2, hosts=2, mountpoints=1)
    spec = dict(array.spec, backup={**array.spec["backup"], "freezeTimeoutSeconds": 3})
    assert api.call("PUT", f"/arrays/{array.array_id}", spec)[0] == 200
    status, answer = api.call("POST", f"/arrays/{array.array_id}/backups", {"mode": "application"})
    assert status == 202, answer
    backup_id = answer["backupId"]
    pid_files = [xfs_lab.state_dir / f"{backup_id}.{host}.watchdog.pid" for host in array.hosts]

    # When the workflow is stopped as soon as every host has armed its watchdog and frozen
    deadline = time.monotonic() + 60
    while not all(p.exists() for p in pid_files):
        assert time.monotonic() < deadline, "the hosts never armed their watchdogs"
        time.sleep(0.02)
    armed = max(p.stat().st_mtime for p in pid_files)
    sfn = boto3.client("stepfunctions")
    arn = stack_outputs["ConsistentBackupStateMachineArn"].replace(":stateMachine:", ":execution:")
    sfn.stop_execution(executionArn=f"{arn}:{backup_id}", error="Test", cause="stopped mid-freeze")

    # Then every host is thawed by its watchdog within the timeout + 1 s of arming
    mounts = [m for ms in array.hosts.values() for m in ms]
    while any(frozen(xfs_lab, m) for m in mounts):
        assert time.time() < armed + 3 + 1 + 2, "a host stayed frozen past its watchdog"  # + probe time
    fired = [xfs_lab.state_dir / f"{backup_id}.{host}.fired" for host in array.hosts]
    assert all(f.exists() for f in fired), "not thawed by the watchdogs"
    assert max(float(f.read_text()) for f in fired) <= armed + 3 + 1
    # And the set reads as failed, its snapshots (if any were taken) deleted. (AWS ends a stopped
    # execution ABORTED; the local cloud's engine, stopped inside a Map, ends it FAILED with
    # States.Runtime "'str' object has no attribute 'get'" — a local-cloud gap; either way the
    # workflow ran none of its own failure path, which is what this checks.)
    backup = api.call("GET", f"/arrays/{array.array_id}/backups/{backup_id}")[1]
    assert backup["state"] == "failed", backup
    assert "the workflow ended ABORTED" in backup["failure"] or "the workflow ended FAILED" in backup["failure"]
    assert snapshots_of(backup_id) == []


def test_preflight_fails_fast_naming_a_host_that_cannot_freeze(
    api: Api, backup_array: Any, stack_outputs: dict[str, str], xfs_lab: Any
) -> None:
    # Given a host whose listed mountpoint is not mounted any more
    array: BackupArray = backup_array(volumes=1, hosts=2, mountpoints=1)
    gone_host = sorted(array.hosts)[0]
    gone = array.hosts[gone_host][0]
    __import__("tests.documents.xfs_lab", fromlist=["sh"]).sh("umount", str(gone))

    # When an application-consistent backup is asked for
    answer = api.call("POST", f"/arrays/{array.array_id}/backups", {"mode": "application"})[1]
    execution = backup_finished(stack_outputs, answer["backupId"])

    # Then it fails before freezing anything, saying which host and why; no snapshot was taken
    assert execution["status"] == "FAILED"
    backup = api.call("GET", f"/arrays/{array.array_id}/backups/{answer['backupId']}")[1]
    assert backup["state"] == "failed"
    assert gone_host in backup["failure"] and "is not a mountpoint" in backup["failure"], backup["failure"]
    assert backup["snapshots"] == [] and snapshots_of(answer["backupId"]) == []
