"""api_backups, on_backup_requested and task_backup over moto, fed the AWS-shaped samples of
events/: validation (422 naming the field), the domain errors' status codes, the
Idempotency-Key (powertools idempotency on a moto DynamoDB table), a redelivered schedule event."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from api_arrays import handler as arrays_handler
from api_backups import handler
from on_backup_requested import handler as scheduled
from on_drill_ended import handler as drill_ended
from task_backup import handler as task

from tests.unit.conftest import ACCOUNT, REGION, FakeLambdaContext, load_event
from vsa_core.api import aws_backups
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.spec import ArraySpec
from vsa_core.backups import sets
from vsa_core.backups.aws_registry import BackupRegistry, DrillRegistry
from vsa_core.settings import Loader

AMI = "ami-12c6146b"
IDEMPOTENCY_TABLE = "vsa-unit-idempotency"


@pytest.fixture
def env(
    registry_table: str, function_env: None, workflows: None, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """An array 'demo' (one io2 volume, one host with a mountpoint), the workflow, the idempotency table."""
    boto3.client("dynamodb", region_name=REGION).create_table(
        TableName=IDEMPOTENCY_TABLE,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    machine = boto3.client("stepfunctions", region_name=REGION).create_state_machine(
        name="consistent-backup-unit",
        definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
        roleArn=f"arn:aws:iam::{ACCOUNT}:role/x",
    )["stateMachineArn"]
    monkeypatch.setenv("VSA_IDEMPOTENCY_TABLE_NAME", IDEMPOTENCY_TABLE)
    monkeypatch.setenv("VSA_BACKUP_STATE_MACHINE_ARN", machine)
    Loader.clear_all()
    aws_backups._once.cache_clear()
    ec2 = boto3.client("ec2", region_name=REGION)
    volume = ec2.create_volume(
        AvailabilityZone="us-east-1a", Size=100, VolumeType="io2", Iops=3000, MultiAttachEnabled=True
    )["VolumeId"]
    host = ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    ArrayRegistry(registry_table).create(
        ArraySpec.model_validate(
            {
                "arrayId": "demo",
                "availabilityZone": "us-east-1a",
                "volumes": [{"volumeId": volume}],
                "controllers": {"instanceType": "r5b.2xlarge", "imageId": AMI},
                "minControllers": 1,
                "maxControllers": 2,
                "hosts": [{"instanceId": host, "mountpoints": ["/data"]}],
                "backup": {"schedule": "rate(1 day)", "mode": "application", "retention": 3},
            }
        )
    )
    yield {"machine": machine, "table": registry_table}
    aws_backups._once.cache_clear()


def request(
    method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """The sample POST /arrays/demo/backups event, re-aimed (API Gateway proxy integration v1)."""
    event = load_event("apigateway/create_backup.json")
    event["httpMethod"] = event["requestContext"]["httpMethod"] = method
    event["path"] = path
    event["requestContext"]["path"] = f"/v1{path}"
    event["body"] = json.dumps(body) if body is not None else None
    event["headers"] = {k: v for k, v in event["headers"].items() if k != "Idempotency-Key"} | (headers or {})
    event["multiValueHeaders"] = {k: [v] for k, v in event["headers"].items()}
    query = path.partition("?")[2]
    if query:
        event["path"] = path.partition("?")[0]
        pairs = dict(p.split("=") for p in query.split("&"))
        event["queryStringParameters"] = pairs
        event["multiValueQueryStringParameters"] = {k: [v] for k, v in pairs.items()}
    return event


def call(event: dict[str, Any]) -> tuple[int, Any]:
    reply = handler.lambda_handler(event, FakeLambdaContext())
    return reply["statusCode"], json.loads(reply["body"]) if reply.get("body") else None


def test_the_sample_request_starts_a_backup_once_per_idempotency_key(env: dict[str, Any]) -> None:
    # Given the AWS-shaped sample (POST with an Idempotency-Key), sent twice
    first = call(load_event("apigateway/create_backup.json"))
    again = call(load_event("apigateway/create_backup.json"))

    # Then one set, one workflow execution named after it; the repeat answers the same set
    assert first[0] == 202, first
    assert first[1]["state"] == "requested"
    assert first[1]["label"] == "nightly"
    assert again == first
    executions = boto3.client("stepfunctions", region_name=REGION).list_executions(
        stateMachineArn=env["machine"]
    )
    assert [e["name"] for e in executions["executions"]] == [first[1]["backupId"]]

    # When the same key comes with another body
    other = load_event("apigateway/create_backup.json")
    other["body"] = json.dumps({"mode": "crash"})
    status, answer = call(other)

    # Then it is refused, saying what to do
    assert status == 422
    assert "Idempotency-Key was used with a different body" in answer["message"]


def test_bad_requests_say_what_to_fix(env: dict[str, Any]) -> None:
    bad_mode = call(request("POST", "/arrays/demo/backups", {"mode": "snapshot"}))
    unknown_field = call(request("POST", "/arrays/demo/backups", {"mode": "crash", "when": "now"}))
    unknown_array = call(request("POST", "/arrays/nope/backups", {"mode": "crash"}))
    bad_id = call(request("GET", "/arrays/demo/backups/yesterday"))
    missing = call(request("GET", "/arrays/demo/backups/bk-20200101T000000000Z-00000000"))
    bad_key = call(request("POST", "/arrays/demo/backups", {}, {"Idempotency-Key": "has space"}))
    assert bad_mode[0] == 422
    assert "mode" in json.dumps(bad_mode[1])
    assert unknown_field[0] == 422
    assert "when" in json.dumps(unknown_field[1])
    assert unknown_array == (404, {"message": "array 'nope' is not registered"})
    assert bad_id[0] == 422
    assert missing[0] == 404
    assert "bk-20200101T000000000Z-00000000" in missing[1]["message"]
    assert bad_key[0] == 422


def test_mode_defaults_to_the_policy_s_and_list_show_delete(env: dict[str, Any]) -> None:
    status, created = call(request("POST", "/arrays/demo/backups", {}))
    assert status == 202
    assert created["mode"] == "application"
    listed = call(request("GET", "/arrays/demo/backups"))[1]
    assert [b["backupId"] for b in listed["backups"]] == [created["backupId"]]
    shown = call(request("GET", f"/arrays/demo/backups/{created['backupId']}"))
    assert shown[0] == 200
    assert shown[1]["freezeWindowSeconds"] is None
    refused = call(request("DELETE", f"/arrays/demo/backups/{created['backupId']}"))
    assert refused[0] == 409
    assert "in progress" in refused[1]["message"]
    plan = call(request("GET", "/arrays/demo/retention?keep=1"))
    assert plan[0] == 200
    assert plan[1]["plan"][0]["action"] == "keep"


def test_a_redelivered_schedule_event_makes_one_set(env: dict[str, Any]) -> None:
    event = load_event("scheduler/backup_requested.json")
    first = scheduled.lambda_handler(event, FakeLambdaContext())
    again = scheduled.lambda_handler(event, FakeLambdaContext())
    assert first["started"] is True
    assert again == {**first, "started": False}
    sets = BackupRegistry(env["table"]).sets("demo")
    assert [(s.backup_id, s.trigger, s.mode) for s in sets] == [
        (first["backupId"], "schedule", "application")
    ]


def test_a_schedule_event_of_a_forgotten_array_starts_nothing(env: dict[str, Any]) -> None:
    event = load_event("scheduler/backup_requested.json")
    event["detail"]["arrayId"] = "gone"
    assert scheduled.lambda_handler(event, FakeLambdaContext()) == {
        "started": False,
        "reason": "unknown array",
    }


def test_the_workflow_sample_input_parses_into_its_step() -> None:
    raw = load_event("stepfunctions/task_backup_snapshot.json")
    step = task.Request.model_validate(raw).root
    assert isinstance(step, task.Snapshot)
    assert step.excluded == ["vol-0fedcba9876543210"]
    with pytest.raises(ValueError, match="step"):
        task.Request.model_validate({**raw, "step": "nap"})


# ---------------------------------------------------------------- who asked


AUDITOR = "arn:aws:iam::123456789012:role/vsa-auditor"


def signed_by(event: dict[str, Any], arn: str) -> dict[str, Any]:
    """``event`` as API Gateway passes a request signed by ``arn``, with an ``X-Caller`` header
    claiming someone else (the caller writes headers; API Gateway writes the identity)."""
    event["requestContext"]["identity"]["userArn"] = arn
    event["headers"]["X-Caller"] = "arn:aws:iam::123456789012:user/someone-else"
    event["multiValueHeaders"]["X-Caller"] = [event["headers"]["X-Caller"]]
    return event


def completed_set(table: str, minutes_ago: int) -> sets.BackupSet:
    """A completed set of the array's volume, its snapshot made in moto."""
    ec2 = boto3.client("ec2", region_name=REGION)
    spec = ArrayRegistry(table).get("demo").spec
    volume = spec.volumes[0].volume_id  # type: ignore[union-attr]
    snapshot = ec2.create_snapshot(VolumeId=volume)["SnapshotId"]
    ec2.create_tags(
        Resources=[snapshot],
        Tags=[{"Key": "vsa:array", "Value": "demo"}],
    )
    at = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    backup_id = sets.new_backup_id(at)
    backup = sets.BackupSet(
        backup_id=backup_id,
        array_id="demo",
        mode="crash",
        state="completed",
        created_at=sets.backup_id_time(backup_id),
        snapshots=(
            sets.VolumeSnapshot(volume_id=volume, snapshot_id=snapshot, state="completed", iops=3000),
        ),
    )
    BackupRegistry(table).create(backup)
    return backup


def timeline() -> list[dict[str, Any]]:
    event = load_event("apigateway/get_array_events.json")
    event["queryStringParameters"] = event["multiValueQueryStringParameters"] = None
    reply = arrays_handler.lambda_handler(event, FakeLambdaContext())
    assert reply["statusCode"] == 200, reply
    found: list[dict[str, Any]] = json.loads(reply["body"])["events"]
    return found


def test_every_backup_change_names_the_signed_caller_and_the_timeline_shows_it(env: dict[str, Any]) -> None:
    # Given a request signed by the auditor role, claiming another caller in a header
    status, created = call(signed_by(request("POST", "/arrays/demo/backups", {"mode": "crash"}), AUDITOR))
    assert status == 202, created
    # Then the set names the signer (as API Gateway verified it), not the header
    assert created["requestedBy"] == {
        "kind": "iam",
        "arn": AUDITOR,
        "account": "123456789012",
        "accessKeyId": "AKIAIOSFODNN7EXAMPLE",
        "sourceIp": "203.0.113.10",
    }
    # And so do a restore, a deleted set and retention's deletions
    old, older, oldest = (completed_set(env["table"], m) for m in (30, 60, 90))
    restore = {"backupId": old.backup_id, "target": {"volumesOnly": True}}
    status, restored = call(signed_by(request("POST", "/arrays/demo/restores", restore), AUDITOR))
    assert status == 201, restored
    status, deleted = call(signed_by(request("DELETE", f"/arrays/demo/backups/{oldest.backup_id}"), AUDITOR))
    assert status == 200, deleted
    status, pruned = call(signed_by(request("POST", "/arrays/demo/retention", {"keep": 1}), AUDITOR))
    assert status == 200, pruned
    assert [d["backupId"] for d in pruned["deleted"]] == [older.backup_id]
    # When the timeline is read
    found = {(e["kind"], e["reference"]): e for e in timeline()}
    # Then each change is an event naming the signer
    assert found[("backup", created["backupId"])]["by"] == AUDITOR
    assert found[("restore", old.backup_id)]["by"] == AUDITOR
    assert found[("delete-backup", oldest.backup_id)]["by"] == AUDITOR
    assert found[("prune", older.backup_id)]["by"] == AUDITOR
    assert "by retention (keep 1)" in found[("prune", older.backup_id)]["what"]
    # And a set made before anyone was recorded shows no caller rather than a guess
    assert found[("backup", old.backup_id)]["by"] is None
    assert "someone-else" not in json.dumps(list(found.values()))


def test_a_scheduled_set_and_its_retention_name_the_schedule(env: dict[str, Any]) -> None:
    # Given the schedule's event (no person behind it)
    answer = scheduled.lambda_handler(load_event("scheduler/backup_requested.json"), FakeLambdaContext())
    # Then the set names the array's schedule
    backup = BackupRegistry(env["table"]).get("demo", answer["backupId"])
    assert backup.requested_by is not None
    assert backup.requested_by.principal == "schedule:vsa-demo-backup"
    # And the retention its workflow runs deletes on the schedule's behalf
    doomed = completed_set(env["table"], 5000)
    for minutes in (10, 20, 30):
        completed_set(env["table"], minutes)
    raw = {"step": "retention", "arrayId": "demo", "backupId": answer["backupId"]}
    result = task.lambda_handler(raw, FakeLambdaContext())
    assert [d["backupId"] for d in result["deleted"]] == [doomed.backup_id]
    by = {(e["kind"], e["reference"]): e["by"] for e in timeline()}
    assert by[("backup", answer["backupId"])] == "schedule:vsa-demo-backup"
    assert by[("prune", doomed.backup_id)] == "schedule:vsa-demo-backup"


def test_a_change_without_a_verified_caller_is_refused_and_nothing_is_stored(env: dict[str, Any]) -> None:
    event = request("POST", "/arrays/demo/backups", {"mode": "crash"})
    event["requestContext"]["identity"]["userArn"] = None
    status, reply = call(event)
    assert status == 403, reply
    assert "no IAM caller" in reply["message"]
    assert BackupRegistry(env["table"]).sets("demo") == []


def test_a_drill_is_started_listed_and_shown_with_its_rpo_and_bad_requests_say_what_to_fix(
    env: dict[str, Any],
) -> None:
    # Given no completed set: a drill is refused, saying why
    status, reply = call(request("POST", "/arrays/demo/drills", {}))
    assert status == 409, reply
    assert "take a backup first" in reply["message"]
    older, newest = completed_set(env["table"], 120), completed_set(env["table"], 60)
    # When a drill is asked for (the newest set by default), twice with one Idempotency-Key
    key = {"Idempotency-Key": "drill-1"}
    status, started = call(signed_by(request("POST", "/arrays/demo/drills", {}, key), AUDITOR))
    again = call(signed_by(request("POST", "/arrays/demo/drills", {}, key), AUDITOR))
    assert status == 202, started
    assert again == (202, started)
    assert started["backupId"] == newest.backup_id
    assert started["state"] == "running"
    assert started["by"]["arn"] == AUDITOR
    assert 3500 < started["rpoSeconds"] < 3700  # the set's age at the start
    runs = boto3.client("stepfunctions", region_name=REGION).list_executions(
        stateMachineArn=f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:vsa-unit-restore-drill"
    )["executions"]
    assert [r["name"] for r in runs] == [started["drillId"]]
    # Then a second drill while it runs is refused, a named older set too
    status, reply = call(request("POST", "/arrays/demo/drills", {"backupId": older.backup_id}))
    assert status == 409
    assert "still running" in reply["message"]
    listed = call(request("GET", "/arrays/demo/drills"))[1]
    assert [d["drillId"] for d in listed["drills"]] == [started["drillId"]]
    assert "checks" not in listed["drills"][0]
    shown = call(request("GET", f"/arrays/demo/drills/{started['drillId']}"))
    assert shown[0] == 200
    assert shown[1]["volumes"] == []
    # And bad input is a 4xx naming what to fix, never a 5xx
    assert call(request("POST", "/arrays/demo/drills", {"backupId": "yesterday"}))[0] == 422
    assert call(request("POST", "/arrays/demo/drills", {"set": "x"}))[0] == 422
    assert call(request("GET", "/arrays/demo/drills/dr-nope"))[0] == 422
    missing = call(request("GET", "/arrays/demo/drills/dr-20200101T000000000Z-00000000"))
    assert missing[0] == 404
    assert call(request("GET", "/arrays/nope/drills"))[0] == 404


def test_a_scheduled_drill_starts_once_per_event_and_is_skipped_without_a_set(env: dict[str, Any]) -> None:
    event = load_event("scheduler/drill_requested.json")
    skipped = scheduled.lambda_handler(event, FakeLambdaContext())
    assert skipped["started"] is False
    assert "take a backup first" in skipped["reason"]
    completed_set(env["table"], 30)
    event = load_event("scheduler/drill_requested.json")
    event["id"] = "another-delivery-of-another-schedule-firing"
    first = scheduled.lambda_handler(event, FakeLambdaContext())
    again = scheduled.lambda_handler(event, FakeLambdaContext())
    assert first["started"] is True
    assert again == {**first, "started": False}
    drills = DrillRegistry(env["table"]).drills("demo")
    assert [(d.drill_id, d.trigger) for d in drills] == [(first["drillId"], "schedule")]
    assert drills[0].by is not None
    assert drills[0].by.principal == "schedule:vsa-demo-drill"


def test_a_stopped_drill_run_fails_its_drill_and_starts_its_cleanup(env: dict[str, Any]) -> None:
    completed_set(env["table"], 30)
    status, started = call(request("POST", "/arrays/demo/drills", {}))
    assert status == 202
    event = load_event("states/restore_drill_aborted.json")
    event["detail"]["name"] = started["drillId"]
    event["detail"]["input"] = json.dumps(
        {"arrayId": "demo", "drillId": started["drillId"], "cleanupOnly": False}
    )
    answer = drill_ended.lambda_handler(event, FakeLambdaContext())
    assert answer == {"state": "failed", "cleanupStarted": True}
    drill = DrillRegistry(env["table"]).get("demo", started["drillId"])
    assert drill.state == "failed"
    assert "stopped" in (drill.message or "")
    runs = boto3.client("stepfunctions", region_name=REGION).list_executions(
        stateMachineArn=f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:vsa-unit-restore-drill"
    )["executions"]
    assert sorted(r["name"] for r in runs) == sorted([started["drillId"], f"{started['drillId']}-cleanup"])
    # a cleanup-only run that ended early starts nothing more
    event["detail"]["input"] = json.dumps(
        {"arrayId": "demo", "drillId": started["drillId"], "cleanupOnly": True}
    )
    assert drill_ended.lambda_handler(event, FakeLambdaContext())["cleanupStarted"] is False


def test_a_repeat_while_the_first_request_with_its_key_runs_answers_409_with_retry_after(
    env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a backup POST whose set is being started when the same request comes again (API
    # Gateway answered the client 504 at 29 s; the first invocation still runs)
    sample = load_event("apigateway/create_backup.json")
    repeats: list[dict[str, Any]] = []
    service = aws_backups._service

    def service_and_a_repeat() -> Any:
        made = service()
        context = dict(aws_backups.app.context)  # the repeat's handler ends by clearing it
        repeats.append(handler.lambda_handler(json.loads(json.dumps(sample)), FakeLambdaContext()))
        aws_backups.app.append_context(**context)
        return made

    monkeypatch.setattr(aws_backups, "_service", service_and_a_repeat)
    first = call(json.loads(json.dumps(sample)))

    # Then the repeat is told to come back (409, Retry-After), and the first made the one set
    assert [r["statusCode"] for r in repeats] == [409]
    assert repeats[0]["multiValueHeaders"]["Retry-After"] == [str(aws_backups.IN_PROGRESS_RETRY_SECONDS)]
    assert "still being done" in json.loads(repeats[0]["body"])["message"]
    assert first[0] == 202, first
    monkeypatch.setattr(aws_backups, "_service", service)
    assert call(json.loads(json.dumps(sample))) == first
