"""Restore drills end to end on the local cloud, the real template deployed and the real Lambda
code run: a set of an array whose volume holds a real ext4 filesystem is restored to new
volumes, attached to a drill instance launched from the array's launch template, checked there
by drill-check (e2fsck read-only, mounted read-only, the operator's command reading the data),
recorded with its RPO and RTO, and cleaned up; a failing check, a stopped run and the drill
schedule's event. The local cloud's volumes carry data (tests/localcloud/test_ebs_data.py), so a
drill reads back exactly what the set holds."""

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.integration.arrays_world import World, control
from tests.integration.backups_world import BackupArray, backup_finished
from tests.integration.conftest import Api, events_as, load_event, put_event
from tests.prerequisites import require
from vsa_core.backups.drills import DRILL_TAG

MARKER = "drilled-and-found"


@pytest.fixture
def ext4_tools() -> None:
    missing = [t for t in ("mkfs.ext4", "e2fsck", "losetup") if shutil.which(t) is None]
    require(missing and f"a drill checks a real ext4 filesystem: install e2fsprogs/util-linux ({missing})")


def put_filesystem(world: World, volume_id: str, source: Path) -> None:
    """An ext4 filesystem holding ``source``'s files, written into the volume's blocks (its data
    file, which every attached node's device links to), as a host would have made it."""
    found = control(world.endpoint, "ebs", "data_file", VolumeId=volume_id)
    assert found["Exists"], found
    subprocess.run(
        [
            "mkfs.ext4",
            "-F",
            "-q",
            "-E",
            "lazy_itable_init=1,lazy_journal_init=1",
            "-d",
            str(source),
            found["Path"],
        ],
        check=True,
    )


def backed_up(api: Api, array: BackupArray, stack_outputs: dict[str, str]) -> str:
    status, backup = api.call("POST", f"/arrays/{array.array_id}/backups", {"mode": "crash"})
    assert status == 202, backup
    assert backup_finished(stack_outputs, backup["backupId"])["status"] == "SUCCEEDED"
    return str(backup["backupId"])


def drill_ended(api: Api, array_id: str, drill_id: str, timeout: float = 600) -> dict[str, Any]:
    """The drill once its verdict is given and its cleanup finished (or gave up)."""
    deadline = time.monotonic() + timeout
    while True:
        status, drill = api.call("GET", f"/arrays/{array_id}/drills/{drill_id}")
        assert status == 200, drill
        ended = drill["state"] != "running" and drill["cleanedUp"] is not None
        if ended and (drill["cleanedUp"] or time.monotonic() > deadline):
            return dict(drill)
        assert time.monotonic() < deadline, (
            f"drill {drill_id} still {drill['state']}/{drill['stage']}: {drill}"
        )
        time.sleep(2)


def leftovers(drill_id: str) -> list[str]:
    ec2 = boto3.client("ec2")
    tag = [{"Name": f"tag:{DRILL_TAG}", "Values": [drill_id]}]
    volumes = [v["VolumeId"] for v in ec2.describe_volumes(Filters=tag)["Volumes"]]
    instances = [
        i["InstanceId"]
        for r in ec2.describe_instances(Filters=tag)["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] != "terminated"
    ]
    return volumes + instances


def test_a_drill_restores_the_set_reads_its_data_back_and_leaves_nothing(
    api: Api, backup_array: Any, world: World, stack_outputs: dict[str, str], tmp_path: Path, ext4_tools: None
) -> None:
    # Given an array whose first volume holds an ext4 filesystem with a file, and a crash set of it
    # (the command reads the set's file and must not be able to write)
    first = "${VSA_DRILL_MOUNTS%% *}"
    command = f'test "$(cat "{first}/proof.txt")" = {MARKER} && ! touch "{first}/w"'
    array: BackupArray = backup_array(
        volumes=1, hosts=1, mode="crash", policy={"drill": {"command": command, "maxRpoHours": 24}}
    )
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "proof.txt").write_text(MARKER)
    put_filesystem(world, array.volumes[0], tmp_path / "src")
    backup_id = backed_up(api, array, stack_outputs)
    # the set's data is the filesystem: changed after the set, the drill must not see the change
    (tmp_path / "src" / "proof.txt").write_text("written after the set")
    put_filesystem(world, array.volumes[0], tmp_path / "src")

    # When a drill is asked for (the newest completed set by default)
    status, started = api.call("POST", f"/arrays/{array.array_id}/drills", {})
    assert status == 202, started
    assert started["backupId"] == backup_id
    drill = drill_ended(api, array.array_id, started["drillId"])

    # Then it passed: the filesystem mounted read-only and checked clean, the command read the
    # set's file and could not write; RPO and RTO recorded; nothing of it is left
    assert drill["state"] == "passed", drill
    [volume] = drill["checks"]["volumes"]
    [found] = volume["filesystems"]
    assert (found["type"], found["mount"], found["check"]) == ("ext4", "ok", "clean"), found
    assert drill["checks"]["command"]["exitCode"] == 0
    assert 0 < drill["rpoSeconds"] < 3600
    assert 0 < drill["rtoSeconds"] < 600
    assert drill["cleanedUp"] is True
    assert leftovers(drill["drillId"]) == []
    # the restored volumes came from the set's snapshots, and the source is untouched
    snapshots = {
        s["snapshotId"]
        for s in api.call("GET", f"/arrays/{array.array_id}/backups/{backup_id}")[1]["snapshots"]
    }
    assert {v["snapshotId"] for v in drill["volumes"]} == snapshots
    assert boto3.client("ec2").describe_volumes(VolumeIds=array.volumes)["Volumes"][0]["State"] == "in-use"
    # and the metrics the alarms watch were published
    rpo = boto3.client("cloudwatch").list_metrics(Namespace="VSA/Backups", MetricName="DrillRpoSeconds")[
        "Metrics"
    ]
    assert any({"Name": "ArrayId", "Value": array.array_id} in m["Dimensions"] for m in rpo)


def test_a_failing_check_fails_the_drill_and_a_stopped_drill_is_cleaned_up(
    api: Api, backup_array: Any, world: World, stack_outputs: dict[str, str], tmp_path: Path, ext4_tools: None
) -> None:
    # Given a set whose filesystem is there but whose application check fails
    array: BackupArray = backup_array(
        volumes=1, hosts=1, mode="crash", policy={"drill": {"command": "echo corrupt >&2; exit 3"}}
    )
    (tmp_path / "src").mkdir()
    put_filesystem(world, array.volumes[0], tmp_path / "src")
    backed_up(api, array, stack_outputs)

    # When drilled, Then the drill fails saying the command failed, and leaves nothing
    status, started = api.call("POST", f"/arrays/{array.array_id}/drills", {})
    assert status == 202, started
    drill = drill_ended(api, array.array_id, started["drillId"])
    assert drill["state"] == "failed", drill
    assert drill["rtoSeconds"] is None
    assert drill["checks"]["command"]["exitCode"] == 3
    assert "checks failed" in drill["message"]
    assert leftovers(drill["drillId"]) == []

    # When a drill's run is stopped once its instance is up (no catch runs on AWS then)
    status, started = api.call("POST", f"/arrays/{array.array_id}/drills", {})
    assert status == 202, started
    deadline = time.monotonic() + 300
    while api.call("GET", f"/arrays/{array.array_id}/drills/{started['drillId']}")[1]["instanceId"] is None:
        assert time.monotonic() < deadline, "the drill launched no instance"
        time.sleep(1)
    sfn = boto3.client("stepfunctions")
    machine = stack_outputs["RestoreDrillStateMachineArn"]
    run = f"{machine.replace(':stateMachine:', ':execution:')}:{started['drillId']}"
    sfn.stop_execution(executionArn=run, error="Test", cause="an operator stopped the drill")

    # Then on_drill_ended fails the drill and its cleanup-only run deletes the instance and volumes
    drill = drill_ended(api, array.array_id, started["drillId"])
    assert drill["state"] == "failed", drill
    assert "stopped" in drill["message"]
    assert drill["cleanedUp"] is True, drill
    assert leftovers(drill["drillId"]) == []


def test_the_drill_schedule_s_event_starts_a_drill(
    api: Api, backup_array: Any, world: World, stack_outputs: dict[str, str], tmp_path: Path, ext4_tools: None
) -> None:
    # Given an array with a drill schedule (EventBridge Scheduler, as GET shows it) and a set
    array: BackupArray = backup_array(
        volumes=1, hosts=1, mode="crash", policy={"drill": {"schedule": "rate(7 days)"}}
    )
    status, shown = api.call("GET", f"/arrays/{array.array_id}")
    assert status == 200
    assert shown["status"]["drillSchedule"]["expression"] == "rate(7 days)", shown["status"]
    (tmp_path / "src").mkdir()
    put_filesystem(world, array.volumes[0], tmp_path / "src")
    backed_up(api, array, stack_outputs)

    # When the schedule puts its "Drill Requested" event on the deployment's bus, as its role
    event = load_event("scheduler/drill_requested.json")
    event["detail"] = {**event["detail"], "arrayId": array.array_id}
    put_event(
        event, stack_outputs["ControlPlaneEventBusName"], events_as(stack_outputs["BackupSchedulerRoleArn"])
    )

    # Then a drill runs, named the schedule's, and passes
    deadline = time.monotonic() + 60
    while not (drills := api.call("GET", f"/arrays/{array.array_id}/drills")[1]["drills"]):
        assert time.monotonic() < deadline, "the schedule's event started no drill"
        time.sleep(1)
    drill = drill_ended(api, array.array_id, drills[0]["drillId"])
    assert drill["trigger"] == "schedule"
    assert drill["state"] == "passed", drill
    assert drill["by"]["kind"] == "schedule"
    assert drill["by"]["arn"].endswith(f"{array.array_id}-drill")
