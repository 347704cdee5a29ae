"""Consistent backups through the local cloud: the real template deployed, the real Lambda code,
the ConsistentBackup workflow on the Step Functions engine, freeze-io / thaw-io run by Run
Command on sandbox nodes whose mountpoints are real XFS filesystems (see backups_world.py)."""

import json
import os
import time
from typing import Any

import boto3
import pytest

from tests.integration.arrays_world import control, get_array, put_spec
from tests.integration.backups_world import BackupArray, backup_finished, frozen
from tests.integration.conftest import STACK, Api

# AWS's timings: volumes creating, attachments attaching, SSM agents registering after boot,
# snapshots pending (the local cloud's realistic latency profile; snapshots 10 s: backups_world).
pytestmark = pytest.mark.usefixtures("realistic_timings")


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
    assert all(s["state"] == "completed" for s in backup["snapshots"])
    assert all(s["progress"] == 100 for s in backup["snapshots"])
    tagged = snapshots_of(backup_id)
    assert sorted(s["VolumeId"] for s in tagged) == sorted(array.volumes)
    assert array.stray_volume not in {s["VolumeId"] for s in tagged}
    tags = {t["Key"]: t["Value"] for t in tagged[0]["Tags"]}
    assert tags["vsa:array"] == array.array_id
    assert tags["vsa:consistency"] == "application-consistent"
    assert tags["vsa:label"] == "nightly"
    # every host froze before the snapshot call and thawed after it returned, by thaw-io
    timing = backup["snapshotTiming"]
    assert sorted(h["instanceId"] for h in backup["hosts"]) == sorted(array.hosts)
    for host in backup["hosts"]:
        assert host["frozeAt"] <= timing["requestedAt"] < timing["returnedAt"] <= host["thawStartedAt"]
        assert not host["watchdogFired"]
        assert host["error"] is None
        assert 0 < host["windowSeconds"] < 60
    # and nothing is left frozen
    assert not any(frozen(xfs_lab, m) for mounts in array.hosts.values() for m in mounts)

    # When the same request is repeated with the same key, then with another body
    again = api.call(
        "POST", f"/arrays/{array.array_id}/backups", body, headers={"Idempotency-Key": "it-happy-1"}
    )
    other = api.call(
        "POST",
        f"/arrays/{array.array_id}/backups",
        {"mode": "crash"},
        headers={"Idempotency-Key": "it-happy-1"},
    )

    # Then the first answers the same set and starts nothing; the second is refused with why
    assert again[0] == 202, again
    assert again[1]["backupId"] == backup_id, again
    assert other[0] == 422, other
    assert "Idempotency-Key" in other[1]["message"], other
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
    assert stuck_host in backup["consistencyReason"]
    assert "freez" in backup["consistencyReason"]
    assert len(backup["snapshots"]) == 2
    # and every host was thawed (thaw-io ran on both; it thaws the pre-frozen one too)
    hosts = {h["instanceId"]: h for h in backup["hosts"]}
    assert hosts[other_host]["thawedAt"] is not None
    assert hosts[other_host]["error"] is None
    assert not any(frozen(xfs_lab, m) for mounts in array.hosts.values() for m in mounts)


def test_a_snapshot_in_error_fails_the_set_and_its_snapshots_are_deleted(
    api: Api, backup_array: Any, stack_outputs: dict[str, str], world: Any
) -> None:
    # Given a crash-mode backup whose snapshots stay pending a while (10 s: backup_array)
    array: BackupArray = backup_array(volumes=3, hosts=1, mode="crash")
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
    assert pending[0]["SnapshotId"] in backup["failure"]
    assert "error" in backup["failure"]
    assert backup["consistency"] is None
    assert snapshots_of(backup_id) == []


def test_a_workflow_stopped_mid_freeze_leaves_the_hosts_to_their_watchdogs(
    api: Api, backup_array: Any, stack_outputs: dict[str, str], xfs_lab: Any
) -> None:
    # Given hosts whose watchdogs thaw 3 s after arming
    array: BackupArray = backup_array(volumes=2, hosts=2, mountpoints=1)
    spec = dict(array.spec, backup={**array.spec["backup"], "freezeTimeoutSeconds": 3})
    # (put_spec: on a loaded machine the apply can outlast API Gateway's 29 s; it then does what a
    # caller does after a 504)
    assert put_spec(api, spec)[0] == 200
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
    # (the hosts drop off SSM at once, so that nothing but their watchdogs can thaw them: a
    # thaw-io the workflow sent before the stop took effect is never delivered. Under load the
    # stop can land after the workflow's own thaw-io, and the freeze itself comes a moment
    # after the watchdog is armed: either would make this test pass or fail by timing)
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    for host in array.hosts:
        control(endpoint, "ssm", "set_ping", InstanceId=host, PingStatus="ConnectionLost")
    try:
        sfn = boto3.client("stepfunctions")
        arn = stack_outputs["ConsistentBackupStateMachineArn"].replace(":stateMachine:", ":execution:")
        sfn.stop_execution(executionArn=f"{arn}:{backup_id}", error="Test", cause="stopped mid-freeze")

        # Then every host is thawed within the timeout + 1 s of arming, by its own watchdog: at its
        # deadline (``.fired``), or on the set's thaw marker, which CreateSnapshots' step writes
        # once the snapshots' point in time is fixed (``.signaled``; with the signals the freeze
        # lasts a fraction of a second, so the stop often lands after it). thaw-io cannot: the
        # hosts are offline. The watchdog firing alone is pinned on real XFS in
        # tests/documents/test_freeze_thaw.py.
        def thawed_at(host: str) -> float | None:
            fired = xfs_lab.state_dir / f"{backup_id}.{host}.fired"
            if fired.exists() and fired.read_text().strip():
                return float(fired.read_text())
            signaled = xfs_lab.state_dir / f"{backup_id}.{host}.signaled"
            first = signaled.read_text().split("\n", 1)[0].split() if signaled.exists() else []
            return int(first[1]) / 1000 if len(first) == 2 else None

        while any(thawed_at(h) is None for h in array.hosts):
            assert time.time() < armed + 3 + 1 + 2, (
                "a host was never thawed by its watchdog"
            )  # + the file write
            time.sleep(0.05)
        last = max(t for h in array.hosts if (t := thawed_at(h)) is not None)
        assert last <= armed + 3 + 1, f"a watchdog thawed {last - armed:.2f} s after arming (timeout 3 s)"
        mounts = [m for ms in array.hosts.values() for m in ms]
        assert not any(frozen(xfs_lab, m) for m in mounts), "a host stayed frozen after its watchdog thawed"
    finally:
        for host in array.hosts:
            control(endpoint, "ssm", "set_ping", InstanceId=host, PingStatus="Online")
    # And the set reads as failed, its snapshots (if any were taken) deleted. (AWS ends a stopped
    # execution ABORTED; the local cloud's engine, stopped inside a Map, ends it FAILED with
    # States.Runtime "'str' object has no attribute 'get'" — a local-cloud gap; either way the
    # workflow ran none of its own failure path, which is what this checks.)
    # On AWS the execution is ABORTED when StopExecution answers (its reply carries the stopDate);
    # the local cloud's engine ends it only once the state running at the stop returns, which on
    # two busy cores can be after the watchdogs fired. Until it has
    # ended the set is, rightly, still in progress, so wait for the end before reading the set.
    ended = backup_finished(stack_outputs, backup_id)
    assert ended["status"] in ("ABORTED", "FAILED"), ended["status"]
    backup = api.call("GET", f"/arrays/{array.array_id}/backups/{backup_id}")[1]
    assert backup["state"] == "failed", backup
    assert (
        "the workflow ended ABORTED" in backup["failure"] or "the workflow ended FAILED" in backup["failure"]
    ), backup["failure"]
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
    assert gone_host in backup["failure"], backup["failure"]
    assert "is not a mountpoint" in backup["failure"], backup["failure"]
    assert backup["snapshots"] == []
    assert snapshots_of(answer["backupId"]) == []


def wait_backup(api: Api, stack_outputs: dict[str, str], array_id: str, body: dict[str, Any]) -> str:
    status, answer = api.call("POST", f"/arrays/{array_id}/backups", body)
    assert status == 202, answer
    assert backup_finished(stack_outputs, answer["backupId"])["status"] == "SUCCEEDED"
    return str(answer["backupId"])


def test_retention_deletes_whole_sets_oldest_first_and_never_one_in_progress(
    api: Api, backup_array: Any, stack_outputs: dict[str, str]
) -> None:
    # Given an array whose policy keeps 2 sets, and 3 crash-consistent backups in a row
    array: BackupArray = backup_array(volumes=2, hosts=1, mode="crash", retention=2)
    first, second, third = (
        wait_backup(api, stack_outputs, array.array_id, {"mode": "crash"}) for _ in range(3)
    )

    # Then the workflow's retention step deleted the oldest set, all of its snapshots, and no other
    listed = api.call("GET", f"/arrays/{array.array_id}/backups")[1]["backups"]
    assert [b["backupId"] for b in listed] == [third, second]
    assert snapshots_of(first) == []
    assert len(snapshots_of(second)) == len(snapshots_of(third)) == 2

    # When a dry run asks what keeping 1 would delete
    status, plan = api.call("GET", f"/arrays/{array.array_id}/retention?keep=1")

    # Then it names the older set, and deletes nothing
    assert status == 200, plan
    assert [(d["backupId"], d["action"]) for d in plan["plan"]] == [(second, "delete"), (third, "keep")]
    assert len(snapshots_of(second)) == 2

    # When a backup is in progress, deleting it is refused; retention keeps it
    status, running = api.call("POST", f"/arrays/{array.array_id}/backups", {"mode": "crash"})
    assert status == 202
    refused = api.call("DELETE", f"/arrays/{array.array_id}/backups/{running['backupId']}")
    assert refused[0] == 409, refused
    assert "in progress" in refused[1]["message"], refused
    status, applied = api.call("POST", f"/arrays/{array.array_id}/retention", {"keep": 1})
    assert status == 200, applied
    assert [d["backupId"] for d in applied["deleted"]] == [second]
    in_flight = [d for d in applied["plan"] if d["backupId"] == running["backupId"]]
    assert in_flight, applied["plan"]
    assert in_flight[0]["action"] == "keep", applied["plan"]
    assert backup_finished(stack_outputs, running["backupId"])["status"] == "SUCCEEDED"

    # And a completed set is deleted on request, with exactly its snapshots
    status, deleted = api.call("DELETE", f"/arrays/{array.array_id}/backups/{third}")
    assert status == 200, deleted
    assert len(deleted["deletedSnapshots"]) == 2
    assert snapshots_of(third) == []
    assert api.call("GET", f"/arrays/{array.array_id}/backups/{third}")[0] == 404


def test_a_scheduled_backup_then_a_restore_to_volumes_and_to_a_new_array(
    api: Api, backup_array: Any, stack_outputs: dict[str, str]
) -> None:
    # Given an array, and its schedule's "Backup Requested" event, as the scheduler puts it: on
    # the deployment's own bus, signed by the deployment's scheduler role
    from tests.integration.conftest import events_as, load_event, put_event

    array: BackupArray = backup_array(volumes=2, hosts=1, mode="crash")
    event = load_event("scheduler/backup_requested.json")
    event["detail"] = {**event["detail"], "arrayId": array.array_id, "mode": "crash"}
    put_event(
        event, stack_outputs["ControlPlaneEventBusName"], events_as(stack_outputs["BackupSchedulerRoleArn"])
    )

    # When the event arrives, a set is made and backed up by the workflow
    deadline = time.monotonic() + 60
    while not (sets := api.call("GET", f"/arrays/{array.array_id}/backups")[1]["backups"]):
        assert time.monotonic() < deadline, "the scheduled event started no backup"
        time.sleep(1)
    backup_id = sets[0]["backupId"]
    assert backup_finished(stack_outputs, backup_id)["status"] == "SUCCEEDED"
    backup = api.call("GET", f"/arrays/{array.array_id}/backups/{backup_id}")[1]
    assert backup["trigger"] == "schedule"
    assert backup["state"] == "completed"
    source_spec = get_array(api, array.array_id)["spec"]

    # When it is restored as volumes only, then into a new array
    status, volumes = api.call(
        "POST", f"/arrays/{array.array_id}/restores", {"backupId": backup_id, "target": {"volumesOnly": True}}
    )
    new_array = f"{array.array_id}-r"
    status2, restored = api.call(
        "POST",
        f"/arrays/{array.array_id}/restores",
        {"backupId": backup_id, "target": {"arrayId": new_array}},
        headers={"Idempotency-Key": f"restore-{backup_id}"},
    )

    # Then io2 Multi-Attach volumes exist in the array's AZ, from the set's snapshots, tagged back to it
    assert status == 201, volumes
    assert status2 == 201, restored
    ec2 = boto3.client("ec2")
    for answer, target in ((volumes, array.array_id), (restored, new_array)):
        made = ec2.describe_volumes(VolumeIds=[v["volumeId"] for v in answer["volumes"]])["Volumes"]
        assert {v["SnapshotId"] for v in made} == {s["snapshotId"] for s in backup["snapshots"]}
        for volume in made:
            tags = {t["Key"]: t["Value"] for t in volume["Tags"]}
            assert volume["VolumeType"] == "io2"
            assert volume["MultiAttachEnabled"]
            assert volume["AvailabilityZone"] == array.spec["availabilityZone"]
            assert tags["vsa:restored-from"] == backup_id
            assert tags["vsa:array"] == target
            assert "vsa:owned" not in tags  # the control plane never deletes restored volumes
    # the new array is registered with the restored volumes as existing volumes
    registered = get_array(api, new_array)["spec"]
    assert registered["volumes"] == [{"volumeId": v["volumeId"]} for v in restored["volumes"]]
    assert registered["hosts"] == source_spec["hosts"]
    # the source is untouched, and a repeated restore with the same key creates nothing more
    assert get_array(api, array.array_id)["spec"] == source_spec
    again = api.call(
        "POST",
        f"/arrays/{array.array_id}/restores",
        {"backupId": backup_id, "target": {"arrayId": new_array}},
        headers={"Idempotency-Key": f"restore-{backup_id}"},
    )
    assert again == (201, restored)
    boto3.client("dynamodb").delete_item(
        TableName=stack_outputs["RegistryTableName"],
        Key={"pk": {"S": f"ARRAY#{new_array}"}, "sk": {"S": "SPEC"}},
    )
    for answer in (volumes, restored):
        for v in answer["volumes"]:
            ec2.delete_volume(VolumeId=v["volumeId"])

    # And bad requests are refused saying what to fix
    unknown = api.call(
        "POST",
        f"/arrays/{array.array_id}/restores",
        {"backupId": "bk-20200101T000000000Z-00000000", "target": {"volumesOnly": True}},
    )
    both = api.call(
        "POST",
        f"/arrays/{array.array_id}/restores",
        {"backupId": backup_id, "target": {"arrayId": "x", "volumesOnly": True}},
    )
    assert unknown[0] == 404, unknown
    assert "bk-20200101T000000000Z-00000000" in unknown[1]["message"], unknown
    assert both[0] == 422, both


def test_a_retention_failure_leaves_the_backup_good_and_raises_its_own_alarm(
    api: Api, backup_array: Any, stack_outputs: dict[str, str]
) -> None:
    # Given an array whose policy keeps 1 set, one backup, and an AMI an operator registered
    # from one of its snapshots (EC2 then refuses DeleteSnapshot of it: InvalidSnapshot.InUse)
    array: BackupArray = backup_array(volumes=2, hosts=1, mode="crash", retention=1)
    first = wait_backup(api, stack_outputs, array.array_id, {"mode": "crash"})
    ec2 = boto3.client("ec2")
    in_use = snapshots_of(first)[0]["SnapshotId"]
    image_id = ec2.register_image(
        Name=f"from-{first}",
        RootDeviceName="/dev/xvda",
        BlockDeviceMappings=[{"DeviceName": "/dev/xvda", "Ebs": {"SnapshotId": in_use}}],
    )["ImageId"]
    try:
        # When the next backup runs, and its retention cannot delete the first set
        second = wait_backup(api, stack_outputs, array.array_id, {"mode": "crash"})  # SUCCEEDED

        # Then the new set is completed, and says why retention failed
        status, backup = api.call("GET", f"/arrays/{array.array_id}/backups/{second}")
        assert status == 200, backup
        assert backup["state"] == "completed"
        assert "RetentionFailedError" in backup["retentionFailure"], backup
        assert first in backup["retentionFailure"]
        assert "InvalidSnapshot.InUse" in backup["retentionFailure"]
        # ... the first set stays, with the snapshot EC2 refused to delete
        listed = [b["backupId"] for b in api.call("GET", f"/arrays/{array.array_id}/backups")[1]["backups"]]
        assert listed == [second, first]
        assert in_use in {s["SnapshotId"] for s in snapshots_of(first)}
        # ... and the retention alarm, not the backup-failed one, is what fires
        alarm = f"{STACK}-backup-retention-failed"
        control(os.environ["AWS_ENDPOINT_URL"], "cloudwatch", "evaluate", AlarmName=alarm)
        [state] = boto3.client("cloudwatch").describe_alarms(AlarmNames=[alarm])["MetricAlarms"]
        assert state["StateValue"] == "ALARM", state
        assert state["AlarmActions"] == [stack_outputs["AlertsTopicArn"]]
    finally:
        ec2.deregister_image(ImageId=image_id)

    # When the AMI is gone and the next backup runs
    third = wait_backup(api, stack_outputs, array.array_id, {"mode": "crash"})

    # Then its retention deletes both older sets, and records no failure
    listed = [b["backupId"] for b in api.call("GET", f"/arrays/{array.array_id}/backups")[1]["backups"]]
    assert listed == [third]
    assert snapshots_of(first) == snapshots_of(second) == []
    assert api.call("GET", f"/arrays/{array.array_id}/backups/{third}")[1].get("retentionFailure") is None


def test_a_forged_backup_event_is_refused_by_the_deployments_bus_and_ignored_on_the_default_bus(
    api: Api, backup_array: Any, stack_outputs: dict[str, str]
) -> None:
    # Given an array, and a principal of the account that may put any event (the test's own
    # credentials: the account's root on the local cloud)
    from botocore.exceptions import ClientError

    from tests.integration.conftest import load_event

    array: BackupArray = backup_array(volumes=1, hosts=1, mode="crash")
    event = load_event("scheduler/backup_requested.json")
    entry = {
        "Source": event["source"],
        "DetailType": event["detail-type"],
        "Detail": json.dumps({**event["detail"], "arrayId": array.array_id, "mode": "crash"}),
        "EventBusName": stack_outputs["ControlPlaneEventBusName"],
    }
    events = boto3.client("events")
    # When it forges the schedule's event on the deployment's bus, Then the bus's policy refuses it
    try:
        answer = events.put_events(Entries=[entry])
        refused = answer["FailedEntryCount"] == 1
        why = str(answer["Entries"][0])
    except ClientError as error:
        refused, why = True, str(error)
    assert refused, "a forged Backup Requested event was accepted on the deployment's bus"
    assert "explicit deny" in why, why
    # And on the default bus no rule listens for the product's events at all: the deployment's
    # backup rule is on its own bus only
    listening = [
        r["Name"]
        for r in events.list_rules(EventBusName="default")["Rules"]
        if "vsa.control-plane" in r.get("EventPattern", "")
    ]
    assert listening == []
    assert any(
        "vsa.control-plane" in r.get("EventPattern", "")
        for r in events.list_rules(EventBusName=stack_outputs["ControlPlaneEventBusName"])["Rules"]
    )
    assert api.call("GET", f"/arrays/{array.array_id}/backups")[1]["backups"] == []
