"""vsa_core.backups.aws_service over moto (and botocore's Stubber where the exact CreateSnapshots
request matters): the workflow's steps, the API's operations, and what they refuse."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from botocore.stub import ANY, Stubber

from tests.unit.conftest import ACCOUNT, REGION
from vsa_core.api.aws_operations import applying_status
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.callers import Caller
from vsa_core.arrays.spec import ArraySpec
from vsa_core.backups import aws_snapshot, sets
from vsa_core.backups.aws_registry import BackupRegistry
from vsa_core.backups.aws_service import BackupService
from vsa_core.backups.reports import freeze_key
from vsa_core.backups.sets import BackupSet, VolumeSnapshot
from vsa_core.errors import (
    ArrayNotFoundError,
    BackupNotFoundError,
    ConflictError,
    InvalidBackupError,
    PreflightError,
    RestoreError,
    RetentionFailedError,
    SnapshotSetError,
)
from vsa_core.naming import slot_key

OPERATOR = Caller(arn="arn:aws:iam::123456789012:user/vsa-operator")

AMI = "ami-12c6146b"


@pytest.fixture
def world(registry_table: str) -> dict[str, Any]:
    return demo_world(registry_table)


def demo_world(registry_table: str) -> dict[str, Any]:
    """An array of 2 io2 volumes, a host, a serving controller with both attached plus a stray volume."""
    ec2 = boto3.client("ec2", region_name=REGION)
    volumes = [
        ec2.create_volume(
            AvailabilityZone="us-east-1a", Size=100, VolumeType="io2", Iops=3000, MultiAttachEnabled=True
        )["VolumeId"]
        for _ in range(3)
    ]
    host, controller = (
        ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1, Placement={"AvailabilityZone": "us-east-1a"})[
            "Instances"
        ][0]["InstanceId"]
        for _ in range(2)
    )
    for volume, device in zip(volumes, ("/dev/sdf", "/dev/sdg", "/dev/sdh"), strict=True):
        ec2.attach_volume(VolumeId=volume, InstanceId=controller, Device=device)
    spec = ArraySpec.model_validate(
        {
            "arrayId": "demo",
            "availabilityZone": "us-east-1a",
            "volumes": [{"volumeId": v} for v in volumes[:2]],
            "controllers": {"instanceType": "r5b.2xlarge", "imageId": AMI},
            "minControllers": 1,
            "maxControllers": 2,
            "hosts": [{"instanceId": host, "mountpoints": ["/data"]}],
            "backup": {"schedule": "rate(1 day)", "mode": "application", "retention": 2},
        }
    )
    registry = ArrayRegistry(registry_table)
    registry.create(spec)
    boto3.client("dynamodb", region_name=REGION).put_item(
        TableName=registry_table,
        Item={
            "pk": {"S": "ARRAY#demo"},
            "sk": {"S": slot_key(0)},
            "instanceId": {"S": controller},
            "state": {"S": "serving"},
        },
    )
    return {
        "volumes": volumes[:2],
        "stray": volumes[2],
        "host": host,
        "controller": controller,
        "table": registry_table,
    }


def service(table: str, **clients: Any) -> BackupService:
    return BackupService(
        registry=ArrayRegistry(table),
        backups_registry=BackupRegistry(table),
        arrays=ArrayService(scheduler_role_arn="arn:aws:iam::123456789012:role/x"),
        **clients,
    )


def record(
    table: str, state: str = "requested", mode: str = "application", minutes_ago: int = 0, **extra: Any
) -> BackupSet:
    at = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    backup = BackupSet(
        backup_id=sets.new_backup_id(at),
        array_id="demo",
        mode=mode,  # type: ignore[arg-type]
        created_at=sets.backup_id_time(sets.new_backup_id(at)),
        state=state,  # type: ignore[arg-type]
        **extra,
    )
    BackupRegistry(table).create(backup)
    return backup


def test_preflight_finds_the_serving_controller_the_stray_volume_and_the_hosts(world: dict[str, Any]) -> None:
    # Given a requested set, an online host
    backup = record(world["table"])
    ssm = boto3.client("ssm", region_name=REGION)
    stubber = Stubber(ssm)
    stubber.add_response(
        "describe_instance_information",
        {"InstanceInformationList": [{"InstanceId": world["host"], "PingStatus": "Online"}]},
    )
    with stubber:
        ctx = service(world["table"], ssm=ssm).preflight("demo", backup.backup_id)
    # Then it starts on the controller, leaving out the stray volume, freezing the host
    assert ctx["admission"]["action"] == "start"
    assert ctx["controller"] == world["controller"]
    assert ctx["excluded"] == [world["stray"]]
    assert ctx["hosts"] == [
        {
            "instanceId": world["host"],
            "mountpoints": "/data",
            "freezeKey": freeze_key(backup.backup_id, world["host"]),
            "timeoutSeconds": "10",
            "maxPolls": 15,
            "thawMaxPolls": 30,
        }
    ]
    assert BackupRegistry(world["table"]).get("demo", backup.backup_id).state == "freezing"


def test_preflight_fails_fast_without_a_serving_controller_or_with_a_host_offline(
    world: dict[str, Any],
) -> None:
    backup = record(world["table"])
    ssm = boto3.client("ssm", region_name=REGION)
    stubber = Stubber(ssm)
    stubber.add_response("describe_instance_information", {"InstanceInformationList": []})
    with stubber, pytest.raises(PreflightError, match=f"{world['host']} \\(not a managed node\\)"):
        service(world["table"], ssm=ssm).preflight("demo", backup.backup_id)
    boto3.client("dynamodb", region_name=REGION).delete_item(
        TableName=world["table"], Key={"pk": {"S": "ARRAY#demo"}, "sk": {"S": slot_key(0)}}
    )
    with pytest.raises(PreflightError, match="no serving controller"):
        service(world["table"]).preflight("demo", backup.backup_id)


def test_preflight_waits_for_the_per_volume_snapshot_rate(world: dict[str, Any]) -> None:
    # Given a snapshot of an array volume taken just now (crash mode: no hosts to check)
    boto3.client("ec2", region_name=REGION).create_snapshot(VolumeId=world["volumes"][0])
    backup = record(world["table"], mode="crash")
    ctx = service(world["table"]).preflight("demo", backup.backup_id)
    # Then it waits (the EBS rate: one snapshot per volume every 15 s), saying why
    assert ctx["admission"]["action"] == "wait"
    assert 0 < ctx["admission"]["waitSeconds"] <= 16  # the rate and a second in hand
    assert "15 s" in ctx["admission"]["message"]
    assert BackupRegistry(world["table"]).get("demo", backup.backup_id).state == "requested"


def test_the_rate_wait_keeps_a_second_in_hand(world: dict[str, Any]) -> None:
    # Given a snapshot whose StartTime reads 14 s ago (it may have started up to 1 s later:
    # whole-second StartTime, clocks that differ)
    ec2 = boto3.client("ec2", region_name=REGION)
    snapshot = ec2.create_snapshot(VolumeId=world["volumes"][0])
    started = snapshot["StartTime"].timestamp()
    backup = record(world["table"], mode="crash")
    ctx = service(world["table"], clock=lambda: started + 14.0).preflight("demo", backup.backup_id)
    # Then it waits the 1 s the rate leaves plus a second
    assert (ctx["admission"]["action"], ctx["admission"]["waitSeconds"]) == ("wait", 2)
    # and 16 s after, it goes ahead
    later = service(world["table"], clock=lambda: started + 16.0).preflight("demo", backup.backup_id)
    assert later["admission"]["action"] != "wait"


def test_hosts_ready_names_every_host_that_cannot_freeze() -> None:
    ok = {"instanceId": "i-0000000000000000a", "status": "Success", "stdout": '{"status":"ready"}'}
    bad = {
        "instanceId": "i-0000000000000000b",
        "status": "Failed",
        "stdout": 'diag\n{"status":"failed","reason":"/data is not a mountpoint"}',
    }
    lost = {
        "instanceId": "i-0000000000000000c",
        "status": "Undelivered",
        "stdout": "",
        "stderr": "Ssm.X: gone",
    }
    svc = BackupService(registry=None, backups_registry=None, arrays=None, ec2=object(), ssm=object())  # type: ignore[arg-type]
    assert svc.hosts_ready([ok]) == {"ready": 1}
    with pytest.raises(PreflightError) as refused:
        svc.hosts_ready([ok, bad, lost])
    assert "i-0000000000000000b: freeze-io dry run: Failed: /data is not a mountpoint" in str(refused.value)
    assert "i-0000000000000000c: freeze-io dry run: Undelivered: Ssm.X: gone" in str(refused.value)


def test_snapshot_is_one_create_snapshots_call_excluding_the_other_volumes(world: dict[str, Any]) -> None:
    # Given a set in freezing
    backup = record(world["table"], state="freezing", label="nightly")
    ec2 = boto3.client("ec2", region_name=REGION)
    stubber = Stubber(ec2)
    tags = sets.snapshot_tags("demo", backup.backup_id, "nightly")
    stubber.add_response(
        "create_snapshots",
        {
            "Snapshots": [
                {
                    "SnapshotId": f"snap-0000000{i}",
                    "VolumeId": v,
                    "State": "pending",
                    "Progress": "0%",
                    "VolumeSize": 100,
                }
                for i, v in enumerate(world["volumes"])
            ]
        },
        {
            "Description": ANY,
            "InstanceSpecification": {
                "InstanceId": world["controller"],
                "ExcludeBootVolume": True,
                "ExcludeDataVolumeIds": [world["stray"]],
            },
            "TagSpecifications": [
                {"ResourceType": "snapshot", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
            ],
        },
    )
    volumes = [{"volumeId": v, "volumeSize": 100, "iops": 3000} for v in world["volumes"]]
    with stubber:
        answer = service(world["table"], ec2=ec2).snapshot(
            "demo", backup.backup_id, world["controller"], [world["stray"]], volumes
        )
    # Then the set holds one pending snapshot per volume, with the call's timing
    stored = BackupRegistry(world["table"]).get("demo", backup.backup_id)
    assert answer["snapshots"] == 2
    assert stored.state == "snapshotting"
    assert [s.volume_id for s in stored.snapshots] == sorted(world["volumes"])
    assert all(s.iops == 3000 for s in stored.snapshots)
    assert stored.snapshot_timing is not None
    assert stored.snapshot_timing.requested_at <= stored.snapshot_timing.returned_at


def test_a_create_snapshots_answer_that_is_not_the_array_is_an_error(world: dict[str, Any]) -> None:
    backup = record(world["table"], state="freezing")
    ec2 = boto3.client("ec2", region_name=REGION)
    stubber = Stubber(ec2)
    stubber.add_response(
        "create_snapshots", {"Snapshots": [{"SnapshotId": "snap-00000001", "VolumeId": world["volumes"][0]}]}
    )
    volumes = [{"volumeId": v} for v in world["volumes"]]
    with stubber, pytest.raises(SnapshotSetError, match=f"missed {world['volumes'][1]}"):
        service(world["table"], ec2=ec2).snapshot("demo", backup.backup_id, world["controller"], [], volumes)


def _snapshotted(world: dict[str, Any], state: str = "snapshotting") -> BackupSet:
    """A set whose snapshots moto took (moto completes them at once), tagged as the workflow tags."""
    ec2 = boto3.client("ec2", region_name=REGION)
    backup = record(world["table"], state=state, mode="crash")
    snapshots = []
    for volume in world["volumes"]:
        snap = ec2.create_snapshot(
            VolumeId=volume,
            TagSpecifications=[
                {
                    "ResourceType": "snapshot",
                    "Tags": [
                        {"Key": k, "Value": v}
                        for k, v in sets.snapshot_tags("demo", backup.backup_id).items()
                    ],
                }
            ],
        )
        snapshots.append(VolumeSnapshot(volume_id=volume, snapshot_id=snap["SnapshotId"]))
    return BackupRegistry(world["table"]).save(
        backup.model_copy(update={"snapshots": tuple(snapshots)}), (state,)
    )


def _completed(world: dict[str, Any]) -> BackupSet:
    backup = _snapshotted(world)
    svc = service(world["table"])
    svc.progress("demo", backup.backup_id, None)
    svc.finish("demo", backup.backup_id)
    return svc.get("demo", backup.backup_id)


def test_progress_then_finish_labels_the_set(world: dict[str, Any]) -> None:
    backup = _snapshotted(world)
    svc = service(world["table"])
    progress = svc.progress("demo", backup.backup_id, None)
    assert progress == {"state": "completed", "completed": 2, "total": 2, "waitSeconds": 2}
    assert svc.progress("demo", backup.backup_id, 20)["waitSeconds"] == 30
    finished = svc.finish("demo", backup.backup_id)
    assert finished["state"] == "completed"
    assert finished["consistency"] == "crash-consistent"
    tags = boto3.client("ec2", region_name=REGION).describe_snapshots(
        SnapshotIds=[backup.snapshots[0].snapshot_id]
    )["Snapshots"][0]["Tags"]
    assert {"Key": "vsa:consistency", "Value": "crash-consistent"} in tags


def test_a_deleted_snapshot_fails_the_set_and_its_other_snapshots_are_deleted_but_no_others(
    world: dict[str, Any],
) -> None:
    # Given a set, and a snapshot of the same volume that is not the control plane's
    backup = _snapshotted(world)
    ec2 = boto3.client("ec2", region_name=REGION)
    foreign = ec2.create_snapshot(VolumeId=world["volumes"][0])["SnapshotId"]
    ec2.delete_snapshot(SnapshotId=backup.snapshots[0].snapshot_id)
    svc = service(world["table"])
    # When its progress is read and the set finished
    assert svc.progress("demo", backup.backup_id, None)["state"] == "failed"
    finished = svc.finish("demo", backup.backup_id)
    # Then it is failed naming the snapshot; its other snapshot is gone; the foreign one stays
    assert finished["state"] == "failed"
    assert backup.snapshots[0].snapshot_id in finished["failure"]
    left = {s["SnapshotId"] for s in ec2.describe_snapshots(OwnerIds=["self"])["Snapshots"]}
    assert foreign in left
    assert backup.snapshots[1].snapshot_id not in left


def test_fail_records_the_cause_of_a_caught_lambda_error(world: dict[str, Any]) -> None:
    backup = record(world["table"], state="freezing")
    cause = json.dumps({"errorType": "SnapshotLimitError", "errorMessage": "EBS refused CreateSnapshots: x"})
    answer = service(world["table"]).fail(
        "demo", backup.backup_id, {"Error": "SnapshotLimitError", "Cause": cause}
    )
    assert answer == {"state": "failed", "failure": "SnapshotLimitError: EBS refused CreateSnapshots: x"}


def test_delete_refuses_a_set_in_progress_and_deletes_a_finished_one(world: dict[str, Any]) -> None:
    running = record(world["table"], state="snapshotting")
    svc = service(world["table"])
    with pytest.raises(ConflictError, match="in progress"):
        svc.delete("demo", running.backup_id, OPERATOR)
    done = _completed(world)
    assert done.state == "completed"
    answer = svc.delete("demo", done.backup_id, OPERATOR)
    assert answer["deletedSnapshots"] == sorted(s.snapshot_id for s in done.snapshots)
    with pytest.raises(BackupNotFoundError):
        svc.get("demo", done.backup_id)


def test_retention_keeps_the_policy_s_newest_and_applies_only_whole_sets(world: dict[str, Any]) -> None:
    svc = service(world["table"])
    made = []
    for _ in range(3):
        made.append(_completed(world))
    keep, plan = svc.retention("demo", None, 5)
    assert keep == 2
    assert [d.backup_id for d in plan.deletions] == [made[0].backup_id]
    applied = svc.apply_retention("demo", None, 5, OPERATOR)
    assert [d["backupId"] for d in applied["deleted"]] == [made[0].backup_id]
    assert [s.backup_id for s in svc.sets("demo")] == [made[2].backup_id, made[1].backup_id]


def _refuse_delete_snapshot(ec2: Any, snapshot_id: str) -> None:
    """EC2 answers DeleteSnapshot of ``snapshot_id`` as AWS does for a snapshot an AMI was
    registered from; every other call goes to moto."""

    def refuse(params: dict[str, Any], **_: Any) -> None:
        if params.get("SnapshotId") == snapshot_id:
            raise ClientError(
                {
                    "Error": {
                        "Code": "InvalidSnapshot.InUse",
                        "Message": f"The snapshot {snapshot_id} is currently in use by ami-0123456789abcdef0",
                    }
                },
                "DeleteSnapshot",
            )

    ec2.meta.events.register("before-parameter-build.ec2.DeleteSnapshot", refuse)


def test_retention_deletes_every_set_it_can_then_names_each_refused_one(world: dict[str, Any]) -> None:
    # Given 4 completed sets, a policy that keeps 2, and AWS refusing one snapshot of the oldest
    made = [_completed(world) for _ in range(4)]
    ec2 = boto3.client("ec2", region_name=REGION)
    _refuse_delete_snapshot(ec2, made[0].snapshots[1].snapshot_id)
    svc = service(world["table"], ec2=ec2)
    # When retention runs
    with pytest.raises(RetentionFailedError) as refused:
        svc.apply_retention("demo", None, 5, OPERATOR)
    # Then the error names the refused set and AWS's reason, and the other set was deleted
    message = str(refused.value)
    assert made[0].backup_id in message
    assert "InvalidSnapshot.InUse" in message
    assert f"deleted {made[1].backup_id}" in message
    left = [s.backup_id for s in svc.sets("demo")]
    assert made[1].backup_id not in left
    assert made[0].backup_id in left  # still there: the next run tries again
    assert {made[2].backup_id, made[3].backup_id} <= set(left)
    # And once AWS no longer refuses, the next run deletes it
    applied = service(world["table"]).apply_retention("demo", None, 5, OPERATOR)
    assert [d["backupId"] for d in applied["deleted"]] == [made[0].backup_id]


def test_a_retention_failure_is_counted_and_recorded_on_the_set_which_stays_completed(
    world: dict[str, Any],
) -> None:
    # Given a completed set whose retention run failed
    done = _completed(world)
    cloudwatch = boto3.client("cloudwatch", region_name=REGION)
    cause = json.dumps({"errorType": "RetentionFailedError", "errorMessage": "could not delete bk-x: InUse"})
    # When the failure is recorded
    answer = service(world["table"], cloudwatch=cloudwatch).record_retention_failure(
        "vsa-demo", "demo", done.backup_id, {"Error": "RetentionFailedError", "Cause": cause}
    )
    # Then the set is still completed, with the reason
    assert answer == {
        "state": "completed",
        "retentionFailure": "RetentionFailedError: could not delete bk-x: InUse",
    }
    recorded = service(world["table"]).get("demo", done.backup_id)
    assert recorded.state == "completed"
    assert recorded.retention_failure == answer["retentionFailure"]
    # And one failure is counted for the deployment (the alarm's metric)
    [metric] = cloudwatch.list_metrics(Namespace="VSA/Backups")["Metrics"]
    assert metric["MetricName"] == "RetentionFailures"
    assert metric["Dimensions"] == [{"Name": "Deployment", "Value": "vsa-demo"}]


def test_start_refuses_application_mode_without_mountpoints_and_is_idempotent_per_backup_id(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = ArrayRegistry(world["table"])
    array = registry.get("demo")
    bare = array.spec.model_copy(update={"hosts": (), "backup": None})
    registry.put(bare, expected_version=array.version)
    sfn = boto3.client("stepfunctions", region_name=REGION)
    machine = sfn.create_state_machine(
        name="backup-unit",
        definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
        roleArn=f"arn:aws:iam::{ACCOUNT}:role/x",
    )["stateMachineArn"]
    svc = service(world["table"], sfn=sfn, state_machine_arn=machine)
    with pytest.raises(InvalidBackupError, match="no hosts"):
        svc.start("demo", mode="application", by=OPERATOR)
    backup_id = sets.new_backup_id(datetime.now(UTC), "event-1")
    created, first = svc.start("demo", mode="crash", trigger="schedule", backup_id=backup_id)
    again, second = svc.start("demo", mode="crash", trigger="schedule", backup_id=backup_id)
    assert (created, again) == (True, False)
    assert first == second
    executions = sfn.list_executions(stateMachineArn=machine)["executions"]
    assert [e["name"] for e in executions] == [backup_id]


def test_a_set_whose_workflow_was_stopped_reads_as_failed(world: dict[str, Any]) -> None:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    machine = sfn.create_state_machine(
        name="backup-unit-stop",
        definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
        roleArn=f"arn:aws:iam::{ACCOUNT}:role/x",
    )["stateMachineArn"]
    backup = record(world["table"], state="freezing")
    arn = sfn.start_execution(stateMachineArn=machine, name=backup.backup_id)["executionArn"]
    svc = service(world["table"], sfn=sfn, state_machine_arn=machine)
    assert svc.get("demo", backup.backup_id).state == "freezing"  # moto: still RUNNING
    sfn.stop_execution(executionArn=arn)
    stopped = svc.get("demo", backup.backup_id)
    assert stopped.state == "failed"
    assert "ended ABORTED while the set was freezing" in (stopped.failure or "")


def test_restore_makes_io2_multi_attach_volumes_and_registers_a_new_array(world: dict[str, Any]) -> None:
    svc = service(world["table"])
    running = _snapshotted(world)
    with pytest.raises(ConflictError, match="only a completed set"):
        svc.restore("demo", running.backup_id, None, OPERATOR)
    backup = _completed(world)
    with pytest.raises(InvalidBackupError, match="never touches the source"):
        svc.restore("demo", backup.backup_id, "demo", OPERATOR)
    answer = svc.restore("demo", backup.backup_id, "demo-copy", OPERATOR)
    made = boto3.client("ec2", region_name=REGION).describe_volumes(
        VolumeIds=[v["volumeId"] for v in answer["volumes"]]
    )["Volumes"]
    assert {v["SnapshotId"] for v in made} == {s.snapshot_id for s in backup.snapshots}
    assert all(v["VolumeType"] == "io2" and v["MultiAttachEnabled"] for v in made)
    registered = ArrayRegistry(world["table"]).get("demo-copy")
    assert registered.spec.existing_volume_ids == tuple(v["volumeId"] for v in answer["volumes"])
    # registered, nothing made: waiting for its first apply, which no one would call stopped part way
    assert registered.restored_from == backup.backup_id
    assert registered.awaiting_first_apply()
    status = applying_status(registered)
    assert status is not None
    assert status["reason"] == "restored"
    assert backup.backup_id in status["message"]
    assert "stopped part way" not in status["message"]
    with pytest.raises(ConflictError, match="exists"):
        svc.restore("demo", backup.backup_id, "demo-copy", OPERATOR)


def test_a_restore_that_aws_refuses_midway_leaves_no_volume_and_registers_nothing(
    world: dict[str, Any],
) -> None:
    svc = service(world["table"])
    backup = _completed(world)
    ec2 = boto3.client("ec2", region_name=REGION)
    before = {v["VolumeId"] for v in ec2.describe_volumes()["Volumes"]}
    # the set's last snapshot was deleted out of band: its CreateVolume is refused
    ec2.delete_snapshot(SnapshotId=backup.snapshots[-1].snapshot_id)
    with pytest.raises(
        RestoreError, match=r"InvalidSnapshot\.NotFound.*volume\(s\) it had created were deleted"
    ):
        svc.restore("demo", backup.backup_id, "demo-copy", OPERATOR)
    assert {v["VolumeId"] for v in ec2.describe_volumes()["Volumes"]} == before
    with pytest.raises(ArrayNotFoundError):
        ArrayRegistry(world["table"]).get("demo-copy")


def test_a_failed_restore_names_each_volume_its_undo_could_not_delete(world: dict[str, Any]) -> None:
    # Given a restore whose last CreateVolume is refused, and whose undo's DeleteVolume AWS refuses
    # too (as it did before the role had ec2:DeleteVolume): the volumes stay, so the answer names them
    ec2 = boto3.client("ec2", region_name=REGION)
    backup = _completed(world)
    ec2.delete_snapshot(SnapshotId=backup.snapshots[-1].snapshot_id)

    def refuse(**_: Any) -> tuple[Any, dict[str, Any]]:
        error = {"Code": "UnauthorizedOperation", "Message": "not authorized to perform: ec2:DeleteVolume"}
        return AWSResponse("", 403, {}, None), {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 403}}

    ec2.meta.events.register("before-call.ec2.DeleteVolume", refuse)
    svc = service(world["table"], ec2=ec2)
    before = {v["VolumeId"] for v in ec2.describe_volumes()["Volumes"]}
    # When it is restored
    with pytest.raises(RestoreError) as failed:
        svc.restore("demo", backup.backup_id, "demo-copy", OPERATOR)
    # Then every volume left behind is named with AWS's reason, none is silently kept
    left = {v["VolumeId"] for v in ec2.describe_volumes()["Volumes"]} - before
    assert left
    for volume_id in left:
        assert f"{volume_id} (UnauthorizedOperation)" in str(failed.value)
    assert "NOT deleted" in str(failed.value)


def snapshots_taken(volumes: list[str]) -> dict[str, Any]:
    """CreateSnapshots' answer: one pending snapshot per volume."""
    return {"Snapshots": [{"SnapshotId": f"snap-0000000{i}", "VolumeId": v} for i, v in enumerate(volumes)]}


def _frozen_hosts(backup_id: str) -> list[dict[str, Any]]:
    return [
        {
            "instanceId": h,
            "mountpoints": "/data",
            "freezeKey": freeze_key(backup_id, h),
            "thawMaxPolls": 30,
            "freezeCommandId": f"{n}1111111-2222-3333-4444-555555555555",
        }
        for n, h in enumerate(("i-0000000000000000a", "i-0000000000000000b"))
    ]


def test_snapshot_waits_while_a_host_is_freezing_then_goes_on_without_a_late_one(
    world: dict[str, Any],
) -> None:
    backup = record(world["table"], state="freezing")
    hosts = _frozen_hosts(backup.backup_id)
    ssm = boto3.client("ssm", region_name=REGION)
    answers = Stubber(ssm)
    for status in ("Success", "InProgress"):
        answers.add_response(
            "get_command_invocation", {"Status": status, "StandardOutputContent": '{"status":"frozen"}'}
        )
    svc = service(world["table"], ssm=ssm, clock=lambda: 100.0)
    with answers:
        waiting = svc.snapshot(
            "demo", backup.backup_id, world["controller"], [], [], {"hosts": hosts, "sentAt": 95.0}
        )
    # without signals, only Run Command's status can say: a second before the next look
    assert waiting == {
        "taken": False,
        "waiting": ["i-0000000000000000b"],
        "waitSeconds": 1,
        "ssmCheckedAt": 100.0,
    }
    late, _ = aws_snapshot._freeze_results(
        service(world["table"], ssm=ssm, clock=lambda: 200.0).ctx,
        {"hosts": [{**hosts[1], "freezeCommandId": ""}], "sentAt": 95.0},
        10,
    )
    assert late[0]["status"] == "Undelivered"


def test_snapshot_sends_thaw_io_to_every_host_the_moment_it_returns(world: dict[str, Any]) -> None:
    backup = record(world["table"], state="freezing")
    hosts = _frozen_hosts(backup.backup_id)
    ec2, ssm = boto3.client("ec2", region_name=REGION), boto3.client("ssm", region_name=REGION)
    snapshots, commands = Stubber(ec2), Stubber(ssm)
    snapshots.add_response("create_snapshots", snapshots_taken(world["volumes"]))
    for _ in hosts:
        commands.add_response("get_command_invocation", {"Status": "Success", "StandardOutputContent": "{}"})
    commands.add_response(
        "send_command",
        {"Command": {"CommandId": "11111111-2222-3333-4444-555555555555"}},
        {
            "DocumentName": "vsa-thaw-io",
            "InstanceIds": ["i-0000000000000000a"],
            "Comment": ANY,
            "TimeoutSeconds": 60,
            "Parameters": {"Mountpoints": ["/data"], "BackupId": [hosts[0]["freezeKey"]]},
        },
    )
    commands.add_client_error("send_command", "InvalidInstanceId", "not a managed node")
    volumes = [{"volumeId": v} for v in world["volumes"]]
    with snapshots, commands, pytest.MonkeyPatch.context() as patch:
        patch.setattr("vsa_core.backups.aws_snapshot.SEND_WORKERS", 1)  # the Stubber answers in call order
        answer = service(world["table"], ec2=ec2, ssm=ssm).snapshot(
            "demo",
            backup.backup_id,
            world["controller"],
            [],
            volumes,
            {"hosts": hosts, "sentAt": 0},
            "vsa-thaw-io",
        )
    # both froze; one thaw sent, the host it could not reach is left for the workflow's Thaw
    assert answer["taken"] is True
    assert [f["status"] for f in answer["freezes"]] == ["Success", "Success"]
    assert [h["thawCommandId"] for h in answer["thawHosts"]] == ["11111111-2222-3333-4444-555555555555", ""]


def test_a_host_is_late_counting_from_the_common_instant_not_from_the_sends(world: dict[str, Any]) -> None:
    # Given hosts sent at 100 and told to freeze at 101.5, a 10 s timeout, one still freezing
    backup = record(world["table"], state="freezing")
    hosts = _frozen_hosts(backup.backup_id)[:1]
    freezing = {"hosts": hosts, "sentAt": 100.0, "freezeAt": 101.5}
    ssm = boto3.client("ssm", region_name=REGION)
    answers = Stubber(ssm)
    for _ in range(2):
        answers.add_response("get_command_invocation", {"Status": "InProgress"})
    with answers:
        # When Run Command still says InProgress 10.5 s after the sends (9 s after the instant)
        soon, waiting = aws_snapshot._freeze_results(
            service(world["table"], ssm=ssm, clock=lambda: 110.5).ctx, freezing, 10
        )
        # and 11.6 s after the instant
        later, _ = aws_snapshot._freeze_results(
            service(world["table"], ssm=ssm, clock=lambda: 113.1).ctx, freezing, 10
        )
    # Then it is still waited for at first (its watchdog's window began at the instant), then late
    assert (soon, waiting) == ([], [hosts[0]["instanceId"]])
    assert later[0]["status"] == "GaveUp"
