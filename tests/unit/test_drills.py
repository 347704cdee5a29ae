"""Restore drills: the rules (vsa_core.backups.drills, pure) and the RestoreDrill steps
(vsa_core.backups.aws_drills) over moto, with botocore's Stubber for Systems Manager (moto runs
no document and has no managed nodes)."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from tests.unit.conftest import ACCOUNT, REGION
from tests.unit.test_backup_service import OPERATOR, _completed, _snapshotted, demo_world
from vsa_core.arrays.spec import ArraySpec
from vsa_core.backups import drills
from vsa_core.backups.aws_drill_service import DrillService
from vsa_core.backups.aws_drills import DrillSettings
from vsa_core.backups.drills import Drill
from vsa_core.backups.sets import BackupSet, SnapshotTiming
from vsa_core.errors import ConflictError, DrillStepError, InvalidBackupError

PROFILE = f"arn:aws:iam::{ACCOUNT}:instance-profile/vsa-drill/drill"
MACHINE = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:vsa-unit-restore-drill"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _set(backup_id_at: datetime, state: str = "completed", **extra: Any) -> BackupSet:
    from vsa_core.backups import sets

    backup_id = sets.new_backup_id(backup_id_at)
    return BackupSet(
        backup_id=backup_id,
        array_id="demo",
        mode="crash",
        created_at=sets.backup_id_time(backup_id),
        state=state,  # type: ignore[arg-type]
        **extra,
    )


def _drill(**update: Any) -> Drill:
    base = Drill(
        drill_id=drills.new_drill_id(NOW),
        array_id="demo",
        backup_id=_set(NOW - timedelta(hours=5)).backup_id,
        started_at=NOW,
        set_created_at=NOW - timedelta(hours=5),
    )
    return base.model_copy(update=update)


# ---------------------------------------------------------------- the rules


def test_a_drill_takes_the_newest_completed_set_or_the_one_asked_for_if_completed() -> None:
    old, new, failed = _set(NOW - timedelta(days=2)), _set(NOW - timedelta(days=1)), _set(NOW, "failed")
    assert drills.choose_set([old, failed, new], None) == new
    assert drills.choose_set([old, failed, new], old.backup_id) == old
    with pytest.raises(ConflictError, match="only a completed set"):
        drills.choose_set([old, failed, new], failed.backup_id)
    with pytest.raises(InvalidBackupError, match="no backup set"):
        drills.choose_set([old], new.backup_id)
    with pytest.raises(ConflictError, match="no completed backup set"):
        drills.choose_set([failed], None)


def test_rpo_is_the_set_s_age_at_the_start_and_rto_only_counts_a_passed_drill() -> None:
    drill = _drill(checks_passed_at=NOW + timedelta(minutes=7))
    assert drill.rpo_seconds == 5 * 3600
    assert drill.rto_seconds is None  # still running
    passed = drill.model_copy(update={"state": "passed"})
    assert passed.rto_seconds == 7 * 60
    assert passed.reply()["rtoSeconds"] == 420.0
    assert passed.reply()["rpoSeconds"] == 18000.0
    assert "checks" not in passed.summary()


def test_the_set_s_point_in_time_is_when_create_snapshots_was_called() -> None:
    called = NOW - timedelta(minutes=3)
    backup = _set(
        NOW - timedelta(minutes=4),
        snapshot_timing=SnapshotTiming(requested_at=called.timestamp(), returned_at=called.timestamp() + 0.2),
    )
    assert drills.point_in_time(backup) == called
    assert drills.point_in_time(_set(called)) == _set(called).created_at


@pytest.mark.parametrize(
    ("status", "report", "bound", "passed", "words"),
    [
        ("Success", {"status": "passed", "problems": []}, None, True, None),
        (
            "Failed",
            {"status": "failed", "problems": ["vol-1: xfs_repair -n found problems"]},
            None,
            False,
            "xfs_repair -n found problems",
        ),
        ("TimedOut", None, None, False, "no report"),
        ("Failed", {"status": "passed"}, None, False, "ended Failed"),
        ("Success", {"status": "passed", "problems": []}, 4, False, "over the bound of 4 h"),
        ("Success", {"status": "passed", "problems": []}, 6, True, None),
    ],
)
def test_the_verdict_passes_only_a_clean_report_within_the_rpo_bound(
    status: str, report: dict[str, Any] | None, bound: int | None, passed: bool, words: str | None
) -> None:
    ok, message = drills.verdict(_drill(max_rpo_hours=bound), status, report)
    assert ok is passed
    if words is None:
        assert message is None
    else:
        assert message is not None
        assert words in message


def test_the_report_is_the_last_json_line_of_the_output() -> None:
    output = 'checking vol-1\n{"status": "failed"}\nnoise\n{"status": "passed", "volumes": []}\n'
    assert drills.last_json_line(output) == {"status": "passed", "volumes": []}
    assert drills.last_json_line("no report here\n") is None
    assert drills.last_json_line('{"status": "pass') is None  # cut off: no report, not a crash


def test_the_operator_command_travels_as_unpadded_base64url() -> None:
    command = "pg_verifybackup /data && test \"$(cat /data/marker)\" = 'ok'"
    encoded = drills.command_parameter(command)
    assert set(encoded) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    import base64

    assert base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode() == command
    assert drills.command_parameter(None) == ""


def _spec(**drill: Any) -> ArraySpec:
    return ArraySpec.model_validate(
        {
            "arrayId": "demo",
            "availabilityZone": "us-east-1a",
            "volumes": [{"volumeId": "vol-0123456789abcdef0"}],
            "controllers": {
                "instanceType": "r5b.2xlarge",
                "imageId": "ami-12c6146b",
                "subnetId": "subnet-0abc1234",
            },
            "minControllers": 1,
            "maxControllers": 2,
            "backup": {"schedule": "rate(1 day)", "drill": drill},
        }
    )


def test_the_drill_instance_launches_from_a_template_in_the_array_s_az_with_only_the_drill_profile() -> None:
    drill = _drill()
    plain = drills.launch_params(_spec(), drill, PROFILE)
    # controllers by instanceType + imageId: the template the control plane keeps for them
    assert plain["LaunchTemplate"] == {"LaunchTemplateName": "vsa-demo-controller", "Version": "$Default"}
    assert "ImageId" not in plain
    assert plain["Placement"] == {"AvailabilityZone": "us-east-1a"}
    assert plain["IamInstanceProfile"] == {"Arn": PROFILE}
    assert plain["ClientToken"] == drill.drill_id
    tags = {t["Key"]: t["Value"] for t in plain["TagSpecifications"][0]["Tags"]}
    assert tags[drills.DRILL_TAG] == drill.drill_id
    assert tags[drills.DRILL_ARRAY_TAG] == "demo"
    assert "vsa:array" not in tags  # never mistaken for one of the array's
    templated = drills.launch_params(
        _spec(
            launchTemplate={"launchTemplateName": "drills"},
            instanceType="m7i.large",
            subnetId="subnet-0def5678",
        ),
        drill,
        PROFILE,
    )
    assert templated["LaunchTemplate"] == {"LaunchTemplateName": "drills", "Version": "$Latest"}
    assert templated["InstanceType"] == "m7i.large"
    assert templated["SubnetId"] == "subnet-0def5678"
    assert templated["IamInstanceProfile"] == {"Arn": PROFILE}


def test_the_spec_refuses_a_one_off_drill_schedule_and_a_command_too_long() -> None:
    with pytest.raises(ValueError, match="at\\(…\\) fires once, and a drill schedule recurs"):
        _spec(schedule="at(2026-12-01T00:00:00)")
    with pytest.raises(ValueError, match="at most 4000"):
        _spec(command="x" * 4001)
    assert _spec(schedule="rate(7 days)", maxRpoHours=30).backup.drill.max_rpo_hours == 30  # type: ignore[union-attr]


# ---------------------------------------------------------------- the steps, over moto


def _service(world: dict[str, Any], ssm: Any = None) -> DrillService:
    return DrillService(
        table_name=world["table"],
        settings=DrillSettings(
            state_machine_arn=MACHINE,
            document="vsa-unit-DrillCheck",
            instance_profile_arn=PROFILE,
            stack="vsa-unit",
        ),
        ssm=ssm,
    )


@pytest.fixture
def world(registry_table: str) -> dict[str, Any]:
    """The backup tests' array (2 io2 volumes, a host, a serving controller), policy and all."""
    return demo_world(registry_table)


@pytest.fixture
def machine(world: dict[str, Any]) -> str:
    boto3.client("stepfunctions", region_name=REGION).create_state_machine(
        name="vsa-unit-restore-drill",
        definition=json.dumps({"StartAt": "x", "States": {"x": {"Type": "Succeed"}}}),
        roleArn=f"arn:aws:iam::{ACCOUNT}:role/x",
    )
    boto3.client("iam", region_name=REGION).create_instance_profile(
        InstanceProfileName="drill", Path="/vsa-drill/"
    )
    # the launch template an apply keeps for controllers declared by instanceType and imageId
    boto3.client("ec2", region_name=REGION).create_launch_template(
        LaunchTemplateName="vsa-demo-controller",
        LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "r5b.2xlarge"},
    )
    return MACHINE


def test_start_records_the_drill_starts_its_run_once_and_refuses_a_second(
    world: dict[str, Any],
    machine: str,
) -> None:
    svc = _service(world)
    with pytest.raises(ConflictError, match="no completed backup set"):
        svc.start("demo", by=OPERATOR)
    backup = _completed(world)
    created, drill = svc.start("demo", by=OPERATOR)
    assert created
    assert drill.backup_id == backup.backup_id
    assert drill.state == "running"
    runs = boto3.client("stepfunctions", region_name=REGION).list_executions(stateMachineArn=machine)[
        "executions"
    ]
    assert [r["name"] for r in runs] == [drill.drill_id]
    with pytest.raises(ConflictError, match="still running"):
        svc.start("demo", by=OPERATOR)
    again, same = svc.start("demo", trigger="schedule", drill_id=drill.drill_id)
    assert not again
    assert same == drill


def _ssm_stub(
    instance_id: str, report: dict[str, Any] | None, status: str = "Success", parameters: Any = ANY
) -> tuple[Any, Stubber]:
    ssm = boto3.client("ssm", region_name=REGION)
    stub = Stubber(ssm)
    stub.add_response(
        "describe_instance_information",
        {"InstanceInformationList": [{"InstanceId": instance_id, "PingStatus": "Online"}]},
        {"Filters": [{"Key": "InstanceIds", "Values": [instance_id]}]},
    )
    command_id = "c0ffee00-0000-4000-8000-000000000001"
    stub.add_response(
        "send_command",
        {"Command": {"CommandId": command_id}},
        {
            "DocumentName": "vsa-unit-DrillCheck",
            "InstanceIds": [instance_id],
            "Comment": ANY,
            "TimeoutSeconds": ANY,
            "Parameters": parameters,
        },
    )
    invocation = {"CommandId": command_id, "InstanceId": instance_id}
    stub.add_response("get_command_invocation", {"Status": "InProgress"}, invocation)
    output = "mounting\n" + (json.dumps(report) if report is not None else "")
    stub.add_response(
        "get_command_invocation", {"Status": status, "StandardOutputContent": output}, invocation
    )
    return ssm, stub


def _launched(world: dict[str, Any]) -> tuple[DrillService, Drill, str]:
    """A drill of the array's completed set, its volumes restored and its instance launched."""
    _completed(world)
    svc = _service(world)
    _, drill = svc.start("demo", by=OPERATOR)
    svc.restore("demo", drill.drill_id)
    return svc, drill, str(svc.launch("demo", drill.drill_id)["instanceId"])


def _run_to_checks(svc: DrillService, drill: Drill) -> str:
    """restore → volumes_ready → launch → node_ready → attach → attached, as the workflow runs them."""
    assert svc.restore("demo", drill.drill_id) == {"volumes": 2}
    assert svc.restore("demo", drill.drill_id) == {"volumes": 2}  # a retried step makes none twice
    assert svc.volumes_ready("demo", drill.drill_id)["ready"]
    instance = svc.launch("demo", drill.drill_id)["instanceId"]
    assert svc.launch("demo", drill.drill_id)["instanceId"] == instance
    assert svc.node_ready("demo", drill.drill_id)["ready"]
    svc.attach("demo", drill.drill_id)
    assert svc.attached("demo", drill.drill_id)["ready"]
    return str(instance)


def _drill_resources(drill_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ec2 = boto3.client("ec2", region_name=REGION)
    tag = [{"Name": f"tag:{drills.DRILL_TAG}", "Values": [drill_id]}]
    volumes = ec2.describe_volumes(Filters=tag)["Volumes"]
    instances = [i for r in ec2.describe_instances(Filters=tag)["Reservations"] for i in r["Instances"]]
    return volumes, instances


def test_a_drill_restores_launches_attaches_checks_passes_and_leaves_nothing(
    world: dict[str, Any],
    machine: str,
) -> None:
    backup = _completed(world)
    svc = _service(world)
    _, drill = svc.start("demo", by=OPERATOR)
    ec2 = boto3.client("ec2", region_name=REGION)
    # restore and launch first (the stub needs the instance), then the whole run: retried steps
    svc.restore("demo", drill.drill_id)
    instance = svc.launch("demo", drill.drill_id)["instanceId"]
    volumes = [v.volume_id for v in svc.get("demo", drill.drill_id).volumes]
    report = {"status": "passed", "volumes": [{"volumeId": v} for v in volumes], "problems": []}
    sent = {
        "Volumes": [",".join(volumes)],
        "DeviceDir": ["/dev/disk/by-id"],
        "MountDir": ["/run/vsa-drill"],
        "Command": [""],
        "CommandTimeoutSeconds": ["300"],
    }
    ssm, stub = _ssm_stub(instance, report, parameters=sent)
    with stub:
        svc = _service(world, ssm)
        assert _run_to_checks(svc, drill) == instance
        made = ec2.describe_volumes(VolumeIds=[v.volume_id for v in svc.get("demo", drill.drill_id).volumes])
        assert {v["SnapshotId"] for v in made["Volumes"]} == {s.snapshot_id for s in backup.snapshots}
        assert all(a["InstanceId"] == instance for v in made["Volumes"] for a in v["Attachments"])
        svc.check("demo", drill.drill_id)
        svc.check("demo", drill.drill_id)  # a retried step sends nothing twice (one send stubbed)
        assert svc.checked("demo", drill.drill_id) == {"done": False, "status": "InProgress"}
        assert svc.checked("demo", drill.drill_id) == {"done": True, "state": "passed"}
    ended = svc.get("demo", drill.drill_id)
    assert ended.state == "passed"
    assert ended.rto_seconds is not None
    assert ended.checks == report
    # cleanup: the instance terminates (moto at once), then the volumes (detached) go
    looks = [svc.cleanup("demo", drill.drill_id) for _ in range(3)]
    assert looks[-1]["done"], looks
    left_volumes, left_instances = _drill_resources(drill.drill_id)
    assert left_volumes == []
    assert all(i["State"]["Name"] == "terminated" for i in left_instances)
    final = svc.get("demo", drill.drill_id)
    assert final.cleaned_up is True
    assert final.stage == "done"
    assert final.state == "passed"
    # the source set and the array's volumes are untouched
    assert len(ec2.describe_volumes(VolumeIds=world["volumes"])["Volumes"]) == 2


def test_a_failed_check_fails_the_drill_counts_it_and_a_later_fail_changes_nothing(
    world: dict[str, Any],
    machine: str,
) -> None:
    svc, drill, instance = _launched(world)
    report = {"status": "failed", "problems": ["vol-x: mount -o ro failed: wrong fs type"]}
    ssm, stub = _ssm_stub(instance, report, status="Failed")
    with stub:
        svc = _service(world, ssm)
        _run_to_checks(svc, drill)
        svc.check("demo", drill.drill_id)
        svc.checked("demo", drill.drill_id)
        assert svc.checked("demo", drill.drill_id) == {"done": True, "state": "failed"}
    failed = svc.get("demo", drill.drill_id)
    assert failed.state == "failed"
    assert "wrong fs type" in (failed.message or "")
    assert failed.rto_seconds is None
    # the workflow's catch after the verdict (a later step failing) keeps the verdict
    assert svc.fail("demo", drill.drill_id, {"Error": "X", "Cause": "y"}) == {"state": "failed"}
    assert svc.get("demo", drill.drill_id).message == failed.message


def test_a_caught_error_fails_the_drill_and_cleanup_removes_what_it_made(
    world: dict[str, Any],
    machine: str,
) -> None:
    _completed(world)
    svc = _service(world)
    _, drill = svc.start("demo", by=OPERATOR)
    svc.restore("demo", drill.drill_id)
    svc.launch("demo", drill.drill_id)
    cause = json.dumps(
        {"errorMessage": "the drill instance i-1 is terminated", "errorType": "DrillStepError"}
    )
    assert svc.fail("demo", drill.drill_id, {"Error": "DrillStepError", "Cause": cause}) == {
        "state": "failed"
    }
    failed = svc.get("demo", drill.drill_id)
    assert failed.message == "launching: DrillStepError: the drill instance i-1 is terminated"
    for _ in range(3):
        if svc.cleanup("demo", drill.drill_id)["done"]:
            break
    volumes, instances = _drill_resources(drill.drill_id)
    assert volumes == []
    assert all(i["State"]["Name"] == "terminated" for i in instances)


def test_a_stopped_run_fails_its_drill_and_starts_a_cleanup_only_run(
    world: dict[str, Any],
    machine: str,
) -> None:
    _completed(world)
    svc = _service(world)
    _, drill = svc.start("demo", by=OPERATOR)
    svc.restore("demo", drill.drill_id)
    answer = svc.on_ended("demo", drill.drill_id, "ABORTED")
    assert answer == {"state": "failed", "cleanupStarted": True}
    assert "stopped before the drill finished" in (svc.get("demo", drill.drill_id).message or "")
    runs = boto3.client("stepfunctions", region_name=REGION).list_executions(stateMachineArn=machine)[
        "executions"
    ]
    cleanup = [r for r in runs if r["name"] == f"{drill.drill_id}-cleanup"]
    assert len(cleanup) == 1
    started = boto3.client("stepfunctions", region_name=REGION).describe_execution(
        executionArn=cleanup[0]["executionArn"]
    )
    assert json.loads(started["input"]) == {"arrayId": "demo", "drillId": drill.drill_id, "cleanupOnly": True}
    # a second event for the same run starts nothing more
    svc.on_ended("demo", drill.drill_id, "ABORTED")
    runs = boto3.client("stepfunctions", region_name=REGION).list_executions(stateMachineArn=machine)[
        "executions"
    ]
    assert len([r for r in runs if r["name"] == f"{drill.drill_id}-cleanup"]) == 1


def test_a_vanished_drill_instance_fails_the_step(
    world: dict[str, Any],
    machine: str,
) -> None:
    svc, drill, instance = _launched(world)
    boto3.client("ec2", region_name=REGION).terminate_instances(InstanceIds=[instance])
    with pytest.raises(DrillStepError, match=r"is terminated|is shutting-down"):
        svc.node_ready("demo", drill.drill_id)


def test_cleanup_never_touches_what_is_not_this_drill_s(world: dict[str, Any], machine: str) -> None:
    _completed(world)
    svc = _service(world)
    _, drill = svc.start("demo", by=OPERATOR)
    ec2 = boto3.client("ec2", region_name=REGION)
    # a volume someone tagged with the drill's id but not this deployment's: left alone
    foreign = ec2.create_volume(
        AvailabilityZone="us-east-1a",
        Size=1,
        TagSpecifications=[
            {
                "ResourceType": "volume",
                "Tags": [
                    {"Key": drills.DRILL_TAG, "Value": drill.drill_id},
                    {"Key": "vsa:deployment", "Value": "other"},
                ],
            }
        ],
    )["VolumeId"]
    assert svc.cleanup("demo", drill.drill_id)["done"]
    assert ec2.describe_volumes(VolumeIds=[foreign])["Volumes"][0]["State"] == "available"
    # an unfinished snapshot set is never drilled
    running = _snapshotted(world, state="snapshotting")
    with pytest.raises(ConflictError):
        svc.start("demo", running.backup_id, by=OPERATOR)


def test_a_run_for_a_drill_never_recorded_fails_nothing_and_still_cleans_up_by_tag(
    world: dict[str, Any],
    machine: str,
) -> None:
    svc = _service(world)
    unknown = drills.new_drill_id(NOW)
    ec2 = boto3.client("ec2", region_name=REGION)
    tagged = ec2.create_volume(
        AvailabilityZone="us-east-1a",
        Size=1,
        TagSpecifications=[
            {
                "ResourceType": "volume",
                "Tags": [
                    {"Key": drills.DRILL_TAG, "Value": unknown},
                    {"Key": "vsa:deployment", "Value": "vsa"},
                ],
            }
        ],
    )["VolumeId"]
    assert svc.fail("demo", unknown, {"Error": "X"}) == {"state": "unknown"}
    assert svc.on_ended("demo", unknown, "FAILED") == {"state": "unknown", "cleanupStarted": False}
    assert svc.cleanup("demo", unknown) == {"done": True, "left": [], "state": "failed"}
    assert ec2.describe_volumes(Filters=[{"Name": "volume-id", "Values": [tagged]}])["Volumes"] == []
