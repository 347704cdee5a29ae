"""api_arrays: the REST resolver over moto, fed the AWS-shaped proxy events from events/apigateway."""

import base64
import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from api_arrays import handler
from botocore.stub import Stubber

from tests.unit.conftest import (
    REGION,
    TABLE_NAME,
    FakeLambdaContext,
    an_image_id,
    hooks_keep_metadata,
    load_event,
)
from vsa_core.api import replies
from vsa_core.arrays import aws_lock
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.spec import ArraySpec
from vsa_core.clients import client
from vsa_core.settings import Loader

ROLE = "arn:aws:iam::123456789012:role/vsa-backup-scheduler"


@pytest.fixture
def api_env(
    registry_table: str, function_env: None, workflows: None, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """A registry, one existing io2 Multi-Attach volume in us-east-1a, a subnet, an AMI."""
    monkeypatch.setenv("VSA_BACKUP_SCHEDULER_ROLE_ARN", ROLE)
    ec2 = boto3.client("ec2", region_name=REGION)
    volume = ec2.create_volume(
        AvailabilityZone="us-east-1a", Size=100, VolumeType="io2", Iops=3000, MultiAttachEnabled=True
    )["VolumeId"]
    subnet = ec2.describe_subnets(Filters=[{"Name": "availability-zone", "Values": ["us-east-1a"]}])[
        "Subnets"
    ][0]["SubnetId"]
    image = an_image_id(ec2)
    hooks_keep_metadata(client("autoscaling"))  # the handler's own (cached) client
    # a ReconcileArray state machine in moto (which records executions without running them)
    reconcile = boto3.client("stepfunctions", region_name=REGION).create_state_machine(
        name="vsa-unit-reconcile-array",
        definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
        roleArn="arn:aws:iam::123456789012:role/reconcile-unit",
    )["stateMachineArn"]
    monkeypatch.setenv("VSA_RECONCILE_STATE_MACHINE_ARN", reconcile)
    Loader.clear_all()
    return {"volume": volume, "subnet": subnet, "image": image, "reconcile": reconcile}


def call(event: dict[str, Any]) -> tuple[int, Any]:
    reply = handler.lambda_handler(event, FakeLambdaContext())
    return reply["statusCode"], json.loads(reply["body"]) if reply.get("body") else None


def create_step() -> dict[str, Any]:
    """What the first step of the ReconcileArray run a PUT started does (moto records the run
    without running it): create the stored spec's owned volumes not created yet."""
    array = ArrayRegistry(TABLE_NAME).get("demo")
    service = ArrayService(scheduler_role_arn=ROLE)
    return service.create_volumes(array.spec, array.desired_controllers)


def first_apply(env: dict[str, Any]) -> tuple[int, Any]:
    """The sample PUT of a new array, and its run's create step (its owned volume data2)."""
    status, reply = call(put_event(env))
    assert status == 202, reply
    create_step()
    return status, reply


def put_event(env: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The sample PUT, aimed at this account's volume, subnet and image, without hosts (moto has
    no SSM DescribeInstanceInformation; host validation is covered in test_arrays.py)."""
    event = load_event("apigateway/put_array.json")
    spec = json.loads(event["body"])
    spec["volumes"] = [{"volumeId": env["volume"]}, spec["volumes"][1]]
    spec["controllers"] = {"instanceType": "r5b.2xlarge", "imageId": env["image"], "subnetId": env["subnet"]}
    spec["hosts"] = []
    spec["backup"]["mode"] = "crash"
    spec.update(changes)
    event["body"] = json.dumps(spec)
    return event


def test_put_creates_the_array_and_answers_202_with_its_plan_leaving_its_volume_to_the_workflow(
    api_env: dict[str, Any],
) -> None:
    status, reply = call(put_event(api_env))
    # 202: the array is stored and made, but for its owned volume, which the ReconcileArray run
    # it started creates (the PUT creates none: it answers within 29 s however many)
    assert status == 202, reply
    assert reply["version"] == 1
    resources = {c["resource"]: c["action"] for c in reply["changes"]}
    assert resources["group/vsa-demo-controllers"] == "create"
    assert resources["alarm/vsa-demo-iops-high"] == "create"
    assert resources["volume/data2"] == "create"
    assert reply["creating"] == ["data2"]
    assert reply["reconcile"]["executionName"] == "reconcile-demo-v1"
    assert reply["reconcile"]["remaining"][0].startswith("volume data2: create (io2 500 GiB, 16,000 IOPS")
    assert _executions(api_env["reconcile"]) == ["reconcile-demo-v1"]
    owned = boto3.client("ec2", region_name=REGION).describe_volumes(
        Filters=[{"Name": "tag:vsa:owned", "Values": ["true"]}]
    )["Volumes"]
    assert owned == []
    # once the run has created it, the same PUT again: 200, nothing to do
    create_step()
    status, again = call(put_event(api_env))
    assert status == 200
    assert {c["action"] for c in again["changes"]} == {"unchanged"}, [
        c for c in again["changes"] if c["action"] != "unchanged"
    ]


def test_get_and_list_answer_what_put_stored(api_env: dict[str, Any]) -> None:
    call(put_event(api_env))
    status, described = call(load_event("apigateway/get_array.json"))
    assert status == 200, described
    assert described["spec"]["arrayId"] == "demo"
    assert described["status"]["group"]["max"] == 8
    status, listed = call(load_event("apigateway/list_arrays.json"))
    assert status == 200
    assert [a["arrayId"] for a in listed["arrays"]] == ["demo"]


def test_delete_starts_the_delete_workflow_once(
    api_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an applied array and the DeleteArray state machine
    sfn = boto3.client("stepfunctions", region_name=REGION)
    machine = sfn.create_state_machine(
        name="vsa-delete-array",
        definition=json.dumps({"StartAt": "S", "States": {"S": {"Type": "Succeed"}}}),
        roleArn="arn:aws:iam::123456789012:role/sfn",
    )["stateMachineArn"]
    monkeypatch.setenv("VSA_DELETE_STATE_MACHINE_ARN", machine)
    Loader.clear_all()
    first_apply(api_env)
    # When it is deleted
    status, reply = call(load_event("apigateway/delete_array.json"))
    # Then 202 names the workflow, started with the array's input; GET shows it deleting
    assert status == 202, reply
    assert reply["executionArn"].endswith(":delete-demo-v1")
    execution = sfn.describe_execution(executionArn=reply["executionArn"])
    assert json.loads(execution["input"]) == {
        "arrayId": "demo",
        "groupName": "vsa-demo-controllers",
        "deleteVolumes": False,
    }
    status, described = call(load_event("apigateway/get_array.json"))
    assert described["deleting"]["executionName"] == "delete-demo-v1"
    # and a repeated DELETE answers the same workflow instead of starting another
    # (the run its apply started to create its volume, still running in moto, was stopped once)
    assert reply["stoppedReconcile"] == ["reconcile-demo-v1"]
    assert call(load_event("apigateway/delete_array.json")) == (202, {**reply, "stoppedReconcile": []})
    assert len(sfn.list_executions(stateMachineArn=machine)["executions"]) == 1
    # while an apply is refused until the array is gone
    status, refused = call(put_event(api_env))
    assert status == 409, refused
    assert "being deleted" in refused["message"]


@pytest.mark.parametrize(
    ("change", "status", "text"),
    [
        ({"maxControllers": 17}, 422, "maxControllers"),
        ({"arrayId": "other"}, 400, "differs from the path"),
        ({"surprise": True}, 422, "surprise"),
    ],
)
def test_bad_bodies_are_4xx_with_what_to_fix(
    api_env: dict[str, Any], change: dict[str, Any], status: int, text: str
) -> None:
    got, reply = call(put_event(api_env, **change))
    assert got == status, reply
    assert text in json.dumps(reply)
    assert call(load_event("apigateway/get_array.json"))[0] == 404


def test_body_that_is_not_json_is_4xx(api_env: dict[str, Any]) -> None:
    event = put_event(api_env)
    event["body"] = "{not json"
    status, _ = call(event)
    assert 400 <= status < 500


def test_if_match_on_a_stale_version_is_409(api_env: dict[str, Any]) -> None:
    call(put_event(api_env))
    event = put_event(api_env, maxControllers=6)
    event["headers"]["If-Match"] = "7"
    event["multiValueHeaders"]["If-Match"] = ["7"]
    status, reply = call(event)
    assert status == 409, reply
    assert "If-Match 7" in reply["message"]


def test_aws_refusing_a_step_is_502_and_the_spec_is_kept_for_a_retry(api_env: dict[str, Any]) -> None:
    # Given EventBridge Scheduler throttles the backup schedule's creation (botocore's Stubber
    # stands in for Scheduler only; everything else is moto)
    scheduler = client("scheduler")
    with Stubber(scheduler) as stub:
        for _ in ("backup", "drill"):  # neither schedule exists yet
            stub.add_client_error(
                "get_schedule", service_error_code="ResourceNotFoundException", http_status_code=404
            )
        stub.add_client_error(
            "create_schedule", service_error_code="ThrottlingException", service_message="Rate exceeded"
        )
        status, reply = call(put_event(api_env))
    # Then the answer says what happened and how to resume; the spec is stored
    assert status == 502, reply
    assert "CreateSchedule: ThrottlingException: Rate exceeded" in reply["message"]
    assert "apply again" in reply["message"]
    assert call(load_event("apigateway/get_array.json"))[0] == 200
    # and applying again (Scheduler answering) finishes the job (the owned volume still to be
    # created by the run: 202)
    status, again = call(put_event(api_env))
    assert status == 202, again
    assert {c["resource"]: c["action"] for c in again["changes"]}["schedule/vsa-demo-backup"] == "create"


class Ebs:
    """What moto's EBS never does and AWS's does (ModifyVolume, EC2 API reference): refuse a
    modification while the volume's previous one has not completed (IncorrectModificationState)
    or past four in a rolling 24 hours (VolumeModificationRateExceeded). The handler's EC2 client
    answers ModifyVolume with ``refusal`` and DescribeVolumesModifications with ``latest``."""

    def __init__(self, refusal: tuple[str, str], latest: dict[str, Any]) -> None:
        self.refusal, self.latest, self.modified = refusal, latest, 0
        events = client("ec2").meta.events
        events.register("before-call.ec2.ModifyVolume", self._modify)
        events.register("before-parameter-build.ec2.DescribeVolumesModifications", self._asked)
        events.register("before-call.ec2.DescribeVolumesModifications", self._describe)

    def _modify(self, **_: Any) -> tuple[Any, dict[str, Any]]:
        self.modified += 1
        code, message = self.refusal
        error = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": 400}}
        return type("Response", (), {"status_code": 400})(), error

    @staticmethod
    def _asked(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["volume_ids"] = params["Filters"][0]["Values"]

    def _describe(self, context: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]]:
        ids = context["volume_ids"]
        found = [{**self.latest, "VolumeId": i} for i in ids]
        return type("Response", (), {"status_code": 200})(), {"VolumesModifications": found}

    def close(self) -> None:
        events = client("ec2").meta.events
        events.unregister("before-call.ec2.ModifyVolume", self._modify)
        events.unregister("before-parameter-build.ec2.DescribeVolumesModifications", self._asked)
        events.unregister("before-call.ec2.DescribeVolumesModifications", self._describe)


@pytest.fixture
def ebs() -> Iterator[Callable[..., Ebs]]:
    made: list[Ebs] = []

    def make(refusal: tuple[str, str], **latest: Any) -> Ebs:
        made.append(Ebs(refusal, latest))
        return made[-1]

    yield make
    for fake in made:
        fake.close()


def _grown(env: dict[str, Any], size: int) -> dict[str, Any]:
    event = put_event(env)
    spec = json.loads(event["body"])
    spec["volumes"][1]["sizeGiB"] = size
    event["body"] = json.dumps(spec)
    return event


def test_growing_a_volume_ebs_cannot_modify_again_yet_is_409_saying_when_and_stores_nothing(
    api_env: dict[str, Any], ebs: Callable[..., Ebs]
) -> None:
    # Given an applied array whose owned volume data2 EBS modified four times within 24 hours
    assert first_apply(api_env)[0] == 202
    started = datetime(2026, 11, 24, 8, 0, tzinfo=UTC)
    fake = ebs(
        ("VolumeModificationRateExceeded", "You've reached the maximum modification rate per volume limit."),
        ModificationState="completed",
        StartTime=started,
        TargetSize=500,
        TargetIops=16000,
    )
    # When data2 is grown from 500 to 600 GiB
    status, reply = call(_grown(api_env, 600))
    # Then 409 names the volume, the rule and when it can be modified again
    assert status == 409, reply
    message = reply["message"]
    assert "volume data2 (vol-" in message
    assert "four modifications of a volume within a rolling 24-hour period" in message
    assert "by 2026-11-25T08:00:00+00:00 at the latest" in message
    assert "nothing was stored" in message
    assert fake.modified == 1
    # and nothing was written: the stored spec is still version 1 with 500 GiB
    described = call(load_event("apigateway/get_array.json"))[1]
    assert described["version"] == 1
    assert described["spec"]["volumes"][1]["sizeGiB"] == 500


def test_growing_a_volume_whose_previous_modification_is_unfinished_is_409_and_stores_nothing(
    api_env: dict[str, Any], ebs: Callable[..., Ebs]
) -> None:
    # Given an applied array whose volume data2 is still optimizing towards 550 GiB
    assert first_apply(api_env)[0] == 202
    fake = ebs(
        ("IncorrectModificationState", "Volume cannot be modified in modification state OPTIMIZING"),
        ModificationState="optimizing",
        Progress=40,
        StartTime=datetime(2026, 11, 24, 8, 0, tzinfo=UTC),
        TargetSize=550,
        TargetIops=16000,
    )
    # When data2 is declared at 600 GiB
    status, reply = call(_grown(api_env, 600))
    # Then 409 says it is still being modified and to apply again once that completed; no
    # ModifyVolume was even tried, nothing stored
    assert status == 409, reply
    assert "volume data2 (vol-" in reply["message"]
    assert "still being modified to 550 GiB / 16000 IOPS (optimizing, 40%" in reply["message"]
    assert "apply again once it has completed" in reply["message"]
    assert fake.modified == 0
    assert call(load_event("apigateway/get_array.json"))[1]["version"] == 1
    # And declaring what the modification is already making (550 GiB) converges without a new one
    status, reply = call(_grown(api_env, 550))
    assert status == 200, reply
    assert fake.modified == 0


def _executions(arn: str) -> list[str]:
    return [
        e["name"]
        for e in boto3.client("stepfunctions", region_name=REGION).list_executions(stateMachineArn=arn)[
            "executions"
        ]
    ]


def test_a_data_plane_change_starts_reconcile_array_once_and_the_answer_says_what_remains(
    api_env: dict[str, Any],
) -> None:
    # Given an applied array (its run v1 created its owned volume)
    first_apply(api_env)
    assert _executions(api_env["reconcile"]) == ["reconcile-demo-v1"]
    ec2 = boto3.client("ec2", region_name=REGION)
    added = ec2.create_volume(
        AvailabilityZone="us-east-1a", Size=100, VolumeType="io2", Iops=3000, MultiAttachEnabled=True
    )["VolumeId"]
    spec = json.loads(put_event(api_env)["body"])
    # When a volume is added to its spec
    event = put_event(api_env, volumes=[*spec["volumes"], {"volumeId": added}])
    status, reply = call(event)
    # Then the answer is 200 with ReconcileArray started for version 2, saying what it will do
    assert status == 200, reply
    assert reply["reconcile"]["state"] == "converging"
    assert reply["reconcile"]["executionName"] == "reconcile-demo-v2"
    assert reply["reconcile"]["remaining"] == [
        f"volume {added}: attach to every serving controller, export, connect every host"
    ]
    assert sorted(_executions(api_env["reconcile"])) == ["reconcile-demo-v1", "reconcile-demo-v2"]
    # and GET shows the array converging, waiting for the lock
    shown = call(load_event("apigateway/get_array.json"))[1]["reconcile"]
    assert (shown["state"], shown["step"], shown["version"]) == (
        "converging",
        "waiting for the array lock",
        2,
    )
    # When the same spec is applied again, nothing more starts
    status, reply = call(event)
    assert (status, reply["reconcile"]) == (200, None)
    assert sorted(_executions(api_env["reconcile"])) == ["reconcile-demo-v1", "reconcile-demo-v2"]


def _aws_state(env: dict[str, Any]) -> dict[str, Any]:
    """Everything an apply could create or modify, as AWS describes it."""
    ec2, autoscaling = client("ec2"), client("autoscaling")
    return {
        "volumes": sorted(
            (v["VolumeId"], v["Size"], v.get("Iops"), v["State"]) for v in ec2.describe_volumes()["Volumes"]
        ),
        "templates": sorted(
            t["LaunchTemplateName"] for t in ec2.describe_launch_templates()["LaunchTemplates"]
        ),
        "groups": [
            (g["AutoScalingGroupName"], g["MinSize"], g["MaxSize"], g["DesiredCapacity"])
            for g in autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"]
        ],
        "alarms": sorted(
            (a["AlarmName"], a["Threshold"]) for a in client("cloudwatch").describe_alarms()["MetricAlarms"]
        ),
        "schedules": sorted(s["Name"] for s in client("scheduler").list_schedules()["Schedules"]),
    }


def _dry_run(event: dict[str, Any]) -> dict[str, Any]:
    event["queryStringParameters"] = {"dryRun": "true"}
    event["multiValueQueryStringParameters"] = {"dryRun": ["true"]}
    return event


def test_a_dry_run_answers_the_plan_and_creates_nothing(api_env: dict[str, Any]) -> None:
    # Given no array yet, and what AWS holds
    before = _aws_state(api_env)
    # When a first apply is dry-run
    status, reply = call(_dry_run(put_event(api_env)))
    # Then it answers 200 with the plan of a first apply, and nothing was created or stored
    assert status == 200, reply
    assert reply["dryRun"] is True
    assert reply["version"] is None
    planned = {c["resource"]: c["action"] for c in reply["changes"]}
    assert planned["group/vsa-demo-controllers"] == "create"
    assert planned["alarm/vsa-demo-iops-high"] == "create"
    assert [a for r, a in planned.items() if r.startswith("volume/")] == ["create"]
    assert _aws_state(api_env) == before
    assert call(load_event("apigateway/get_array.json"))[0] == 404
    # and what an apply then does is what the dry run said
    status, applied = call(put_event(api_env))
    assert status == 202
    assert {c["resource"]: c["action"] for c in applied["changes"]} == planned


def test_a_dry_run_of_a_change_names_the_changed_fields_and_modifies_nothing(api_env: dict[str, Any]) -> None:
    # Given an applied array
    assert first_apply(api_env)[0] == 202
    before = _aws_state(api_env)
    # When a spec that raises maxControllers and grows the owned volume is dry-run
    event = put_event(api_env, maxControllers=12)
    spec = json.loads(event["body"])
    spec["volumes"][1]["sizeGiB"] += 100
    event["body"] = json.dumps(spec)
    status, reply = call(_dry_run(event))
    # Then the plan names each change's fields, and AWS and the registry are as they were
    assert status == 200, reply
    changed = {c["resource"]: c for c in reply["changes"] if c["action"] != "unchanged"}
    group = changed["group/vsa-demo-controllers"]
    assert (group["action"], [f["field"] for f in group["fields"]]) == ("update", ["MaxSize"])
    assert (group["fields"][0]["before"], group["fields"][0]["after"]) == (8, 12)
    (volume,) = [c for r, c in changed.items() if r.startswith("volume/")]
    assert [f["field"] for f in volume["fields"]] == ["Size"]
    assert _aws_state(api_env) == before
    stored = call(load_event("apigateway/get_array.json"))[1]
    assert (stored["version"], stored["spec"]["maxControllers"]) == (1, 8)
    assert client("ec2").describe_volumes_modifications()["VolumesModifications"] == []


# --- hostile input (issue #20): strict types, bounds, unreadable bodies, messages that say what to fix


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"minControllers": "1"}, "minControllers"),
        ({"minControllers": True}, "minControllers"),
        ({"maxControllers": 4.0}, "maxControllers"),
        ({"allowAnyHost": "true"}, "allowAnyHost"),
        ({"specVersion": True}, "specVersion"),
        ({"targetUtilisation": "0.5"}, "targetUtilisation"),
        ({"perControllerIops": 26 * 256_000 + 1}, "perControllerIops"),
        ({"volumes": [{"name": f"v{i}", "sizeGiB": 4, "iops": 100} for i in range(27)]}, "volumes"),
        ({"hosts": [{"instanceId": f"i-{i:017x}"} for i in range(257)]}, "hosts"),
        ({"hosts": [{"instanceId": "i-0a1b2c3d4e5f60101", "hostNqn": "nqn.٢٠١٤-08.org.x:h"}]}, "hostNqn"),
        ({"backup": {"schedule": "cron($(reboot))"}}, "schedule"),
        ({"backup": {"schedule": "cron(0 3 * * ? *) ; reboot"}}, "schedule"),
        ({"demandMetric": {"namespace": "Vsa", "metricName": "iops;reboot"}}, "metricName"),
        (
            {"demandMetric": {"namespace": "Vsa", "metricName": "iops", "dimensions": {"a": "$(x)"}}},
            "dimensions",
        ),
    ],
)
def test_a_mistyped_or_oversized_field_is_422_naming_it_and_why(
    api_env: dict[str, Any], change: dict[str, Any], field: str
) -> None:
    status, reply = call(put_event(api_env, **change))
    assert status == 422, reply
    # the message says which field and why, in words; detail lists them
    assert field in reply["message"], reply
    assert reply["message"].startswith("the request does not validate: body.")
    assert all(d["msg"] and d["loc"][0] == "body" for d in reply["detail"]), reply
    assert call(load_event("apigateway/get_array.json"))[0] == 404


@pytest.mark.parametrize(
    ("controllers", "field"),
    [
        ({"securityGroupIds": [f"sg-{i:017x}" for i in range(17)]}, "securityGroupIds"),
        ({"securityGroupIds": ["sg-0a1b2c3d4e5f6000b", "sg-0a1b2c3d4e5f6000b"]}, "more than once"),
        ({"securityGroupIds": ["sg-1;reboot"]}, "securityGroupIds"),
        ({"instanceProfile": "vsa controller"}, "instanceProfile"),
    ],
)
def test_controller_settings_are_bounded_and_patterned(
    api_env: dict[str, Any], controllers: dict[str, Any], field: str
) -> None:
    event = put_event(api_env)
    spec = json.loads(event["body"])
    spec["controllers"].update(controllers)
    event["body"] = json.dumps(spec)
    status, reply = call(event)
    assert status == 422, reply
    assert field in reply["message"], reply


def test_a_body_that_is_not_utf8_is_400_saying_so(api_env: dict[str, Any]) -> None:
    event = put_event(api_env)
    event["body"] = base64.b64encode(event["body"].encode()[:20] + b"\xff\xfe" + b"}").decode()
    event["isBase64Encoded"] = True
    status, reply = call(event)
    assert status == 400, reply
    assert "not UTF-8" in reply["message"]


def test_a_body_nested_100000_deep_is_400_not_a_crash(api_env: dict[str, Any]) -> None:
    event = put_event(api_env)
    event["body"] = "[" * 100_000 + "]" * 100_000
    status, reply = call(event)
    assert status == 400, reply
    assert "deeper than 32" in reply["message"]


def test_a_body_over_256_kib_is_413(api_env: dict[str, Any]) -> None:
    event = put_event(api_env)
    event["body"] = json.dumps({"pad": "x" * 300_000})
    status, reply = call(event)
    assert status == 413, reply
    assert "at most 262144" in reply["message"]


def test_brackets_inside_strings_do_not_count_as_depth() -> None:
    assert replies.json_depth('{"a": "[[[[{{{{\\"]]]"}') == 1
    assert replies.json_depth("[[1], [[2]]]") == 3


@pytest.mark.parametrize(
    "content_type", ["multipart/form-data", "application/x-www-form-urlencoded", "text/plain"]
)
def test_a_body_that_is_not_sent_as_json_is_415(api_env: dict[str, Any], content_type: str) -> None:
    # found by the fuzz: multipart/form-data without a boundary made powertools raise (502)
    event = put_event(api_env)
    event["headers"]["Content-Type"] = content_type
    status, reply = call(event)
    assert status == 415, reply
    assert "application/json" in reply["message"]


def test_delete_stops_the_arrays_reconcile_runs_and_lets_go_of_their_lock(
    api_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an array whose apply started a ReconcileArray run (moto keeps it RUNNING), the run
    # holding the array lock, and the DeleteArray state machine
    sfn = boto3.client("stepfunctions", region_name=REGION)
    machine = sfn.create_state_machine(
        name="vsa-delete-array",
        definition=json.dumps({"StartAt": "S", "States": {"S": {"Type": "Succeed"}}}),
        roleArn="arn:aws:iam::123456789012:role/sfn",
    )["stateMachineArn"]
    monkeypatch.setenv("VSA_DELETE_STATE_MACHINE_ARN", machine)
    Loader.clear_all()
    first_apply(api_env)
    added = boto3.client("ec2", region_name=REGION).create_volume(
        AvailabilityZone="us-east-1a", Size=100, VolumeType="io2", Iops=3000, MultiAttachEnabled=True
    )["VolumeId"]
    spec = json.loads(put_event(api_env)["body"])
    status, applied = call(put_event(api_env, volumes=[*spec["volumes"], {"volumeId": added}]))
    assert status == 200, applied
    run = applied["reconcile"]["executionName"]
    table = TABLE_NAME
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    assert aws_lock.acquire(dynamodb, table, "demo", run, 900, int(time.time()))["acquired"]
    # When the array is deleted
    status, reply = call(load_event("apigateway/delete_array.json"))
    # Then the run is stopped with the reason in its history, its lock released, its record stopped
    assert status == 202, reply
    assert reply["stoppedReconcile"] == [run]
    stopped = sfn.describe_execution(
        executionArn=f"{api_env['reconcile'].replace(':stateMachine:', ':execution:')}:{run}"
    )
    assert stopped["status"] == "ABORTED"
    assert aws_lock.read(dynamodb, table, "demo").holder is None
    status, described = call(load_event("apigateway/get_array.json"))
    assert described["reconcile"]["state"] == "stopped", described["reconcile"]
    # and a repeated DELETE stops nothing more
    status, again = call(load_event("apigateway/delete_array.json"))
    assert (status, again["stoppedReconcile"]) == (202, [])


def test_an_apply_that_stopped_after_storing_its_spec_is_finished_by_applying_it_again(
    api_env: dict[str, Any],
) -> None:
    # Given an applied array (its run v1 created its owned volume)
    first_apply(api_env)
    shown = call(load_event("apigateway/get_array.json"))[1]
    assert shown["applying"] is None
    ec2 = boto3.client("ec2", region_name=REGION)
    added = ec2.create_volume(
        AvailabilityZone="us-east-1a", Size=100, VolumeType="io2", Iops=3000, MultiAttachEnabled=True
    )["VolumeId"]
    spec = json.loads(put_event(api_env)["body"])
    event = put_event(api_env, volumes=[*spec["volumes"], {"volumeId": added}])
    # When a PUT adding a volume stores its spec and its function then ends (API Gateway's 504
    # after 29 s, the function at its timeout): the first write of the apply, and nothing after
    registry = ArrayRegistry(TABLE_NAME)
    stored = registry.put(ArraySpec.model_validate(json.loads(event["body"])), expected_version=1)
    assert stored.version == 2
    # Then GET says version 2's apply has not finished, and what to do
    shown = call(load_event("apigateway/get_array.json"))[1]
    assert shown["applying"]["version"] == 2
    assert "apply the same spec again" in shown["applying"]["message"]
    assert _executions(api_env["reconcile"]) == ["reconcile-demo-v1"]
    # When the caller applies the same spec again
    status, reply = call(event)
    # Then its run starts (the data plane change is not lost, though the spec was already stored)
    assert status == 200, reply
    assert reply["reconcile"]["executionName"] == "reconcile-demo-v2"
    assert reply["reconcile"]["remaining"][0] == "finishing the apply of version 2, which stopped part way"
    assert sorted(_executions(api_env["reconcile"])) == ["reconcile-demo-v1", "reconcile-demo-v2"]
    # and the apply is finished: GET no longer says otherwise, and a third PUT starts nothing
    assert call(load_event("apigateway/get_array.json"))[1]["applying"] is None
    status, reply = call(event)
    assert (status, reply["reconcile"]) == (200, None)


def test_an_apply_that_stopped_before_a_scale_decision_is_still_finished_by_applying_again(
    api_env: dict[str, Any],
) -> None:
    # Given an applied array, then a PUT that stored version 2 and stopped (nothing after)
    first_apply(api_env)
    event = put_event(api_env, maxControllers=6)
    registry = ArrayRegistry(TABLE_NAME)
    registry.put(ArraySpec.model_validate(json.loads(event["body"])), expected_version=1)
    # and a scale decision since, which bumps the version as ScaleArray's ASL does
    client("dynamodb").update_item(
        TableName=TABLE_NAME,
        Key={"pk": {"S": "ARRAY#demo"}, "sk": {"S": "SPEC"}},
        UpdateExpression="ADD version :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    # Then GET still says version 2's apply has not finished
    assert call(load_event("apigateway/get_array.json"))[1]["applying"]["version"] == 2
    # When the same spec is applied again, Then its run starts and the mark is gone
    status, reply = call(event)
    assert status == 200, reply
    assert reply["reconcile"]["remaining"][0] == "finishing the apply of version 2, which stopped part way"
    assert call(load_event("apigateway/get_array.json"))[1]["applying"] is None


# ---------------------------------------------------------------- who asked


OPERATOR = "arn:aws:iam::123456789012:assumed-role/vsa-operator/alice"


def signed_by(event: dict[str, Any], arn: str) -> dict[str, Any]:
    """``event`` as API Gateway passes a request signed by ``arn``, with an ``X-Caller`` header
    claiming someone else (the caller writes headers; API Gateway writes the identity)."""
    event["requestContext"]["identity"]["userArn"] = arn
    event["headers"]["X-Caller"] = "arn:aws:iam::123456789012:user/someone-else"
    event["multiValueHeaders"]["X-Caller"] = [event["headers"]["X-Caller"]]
    return event


def timeline() -> list[dict[str, Any]]:
    event = load_event("apigateway/get_array_events.json")
    event["queryStringParameters"] = event["multiValueQueryStringParameters"] = None
    status, reply = call(event)
    assert status == 200, reply
    found: list[dict[str, Any]] = reply["events"]
    return found


def test_an_apply_and_a_delete_record_the_signed_caller_and_the_timeline_shows_it(
    api_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the DeleteArray state machine
    sfn = boto3.client("stepfunctions", region_name=REGION)
    machine = sfn.create_state_machine(
        name="vsa-delete-array",
        definition=json.dumps({"StartAt": "S", "States": {"S": {"Type": "Succeed"}}}),
        roleArn="arn:aws:iam::123456789012:role/sfn",
    )["stateMachineArn"]
    monkeypatch.setenv("VSA_DELETE_STATE_MACHINE_ARN", machine)
    Loader.clear_all()
    # When the operator applies, signed, with a header claiming someone else
    status, reply = call(signed_by(put_event(api_env), OPERATOR))
    assert status == 202, reply
    # Then the stored spec names the signer in its own write
    item = boto3.client("dynamodb", region_name=REGION).get_item(
        TableName=TABLE_NAME, Key={"pk": {"S": "ARRAY#demo"}, "sk": {"S": "SPEC"}}
    )["Item"]
    applied_by = json.loads(item["appliedBy"]["S"])
    assert (applied_by["arn"], applied_by["accessKeyId"]) == (OPERATOR, "AKIAIOSFODNN7EXAMPLE")
    # And the timeline shows the apply by the signer, kept as history (the decisions' TTL)
    applies = [e for e in timeline() if e["kind"] == "apply"]
    assert [(e["what"], e["reference"], e["by"]) for e in applies] == [("spec v1 applied", "v1", OPERATOR)]
    history = boto3.client("dynamodb", region_name=REGION).query(
        TableName=TABLE_NAME,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :c)",
        ExpressionAttributeValues={":pk": {"S": "ARRAY#demo"}, ":c": {"S": "CHANGE#"}},
    )["Items"]
    days = (int(history[0]["expiresAt"]["N"]) - time.time()) / 86400
    assert 89.9 < days <= 90
    # When the operator deletes it
    status, deleted = call(signed_by(load_event("apigateway/delete_array.json"), OPERATOR))
    assert status == 202, deleted
    # Then the DeleteArray run's event names who asked for it, once
    deletes = [e for e in timeline() if e["kind"] == "delete"]
    assert [(e["reference"], e["by"]) for e in deletes] == [("delete-demo-v1", OPERATOR)]
    assert "someone-else" not in json.dumps(timeline())


def test_a_change_without_a_verified_caller_is_refused_and_nothing_is_stored(api_env: dict[str, Any]) -> None:
    event = put_event(api_env)
    del event["requestContext"]["identity"]["userArn"]
    event["headers"]["X-Caller"] = OPERATOR
    status, reply = call(event)
    assert status == 403, reply
    assert "no IAM caller" in reply["message"]
    assert call(load_event("apigateway/get_array.json"))[0] == 404
