"""task_teardown_array: the DeleteArray steps, one call each, over moto."""

import json
from typing import Any

import boto3
import pytest
from task_set_alarm_thresholds import handler as thresholds
from task_teardown_array import handler

from tests.specs import BASE
from tests.unit.conftest import REGION, FakeLambdaContext, an_image_id, hooks_keep_metadata
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.spec import ArraySpec, Deletion
from vsa_core.errors import ArrayNotFoundError, TeardownPendingError

ROLE = "arn:aws:iam::123456789012:role/vsa-backup-scheduler"


@pytest.fixture
def applied(registry_table: str, function_env: None, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """An applied array with an owned volume, marked deleting as DELETE leaves it."""
    monkeypatch.setenv("VSA_BACKUP_SCHEDULER_ROLE_ARN", ROLE)
    ec2 = boto3.client("ec2", region_name=REGION)
    image = an_image_id(ec2)
    existing = ec2.create_volume(
        AvailabilityZone="us-east-1a", Size=100, VolumeType="io2", Iops=3000, MultiAttachEnabled=True
    )["VolumeId"]
    spec = ArraySpec.model_validate(
        {
            **BASE,
            "arrayId": "gone",
            "availabilityZone": "us-east-1a",
            "volumes": [{"volumeId": existing}, {"name": "owned", "sizeGiB": 10, "iops": 1000}],
            "controllers": {"instanceType": "r5b.2xlarge", "imageId": image},
            "minControllers": 1,
            "maxControllers": 2,
            "backup": {"schedule": "rate(1 day)"},
        }
    )
    registry = ArrayRegistry(registry_table, boto3.client("dynamodb", region_name=REGION))
    service = ArrayService(scheduler_role_arn=ROLE)
    hooks_keep_metadata(service._autoscaling)
    registered = registry.put(spec, expected_version=None)
    service.apply(spec, registered.desired_controllers)
    service.create_volumes(spec, registered.desired_controllers)  # ReconcileArray's first step
    registry.mark_deleting(
        "gone", 1, Deletion(execution_name="delete-gone-v1", delete_volumes=True, requested_at="now")
    )
    return {"registry": registry, "existing": existing, "ec2": ec2}


def step(name: str) -> dict[str, Any]:
    reply = handler.lambda_handler(
        {"step": name, "arrayId": "gone", "deleteVolumes": True}, FakeLambdaContext()
    )
    return dict(json.loads(json.dumps(reply)))


def test_release_finish_forget_remove_what_was_created_and_keep_the_rest(applied: dict[str, Any]) -> None:
    released = {c["resource"] for c in step("release")["changes"]}
    assert released == {
        "schedule/vsa-gone-backup",
        "alarm/vsa-gone-iops-high",
        "alarm/vsa-gone-iops-low",
        "group/vsa-gone-controllers",
    }
    finished = {c["resource"] for c in step("finish")["changes"]}
    # the keys: the array's secret (its spec authenticates with dh-hmac-chap, the default)
    assert finished == {"launch-template/vsa-gone-controller", "volume/owned", "secret/vsa/gone/keys"}
    step("forget")
    with pytest.raises(ArrayNotFoundError):
        applied["registry"].get("gone")
    volumes = applied["ec2"].describe_volumes()["Volumes"]
    assert [v["VolumeId"] for v in volumes if v["VolumeId"] == applied["existing"]] == [applied["existing"]]
    assert not [v for v in volumes if any(t["Key"] == "vsa:owned" for t in v.get("Tags", []))]


def test_finish_while_the_group_exists_is_pending_for_the_workflow_to_retry(applied: dict[str, Any]) -> None:
    with pytest.raises(TeardownPendingError, match="still being deleted"):
        step("finish")


def test_finish_removes_alarms_a_stopped_runs_last_step_put_back_after_release(
    applied: dict[str, Any],
) -> None:
    # Given a release, then the create step of a ReconcileArray run that DELETE stopped, which
    # had been invoked before the stop and so still ran (StopExecution ends the run, not a Lambda
    # invocation already made): it puts the alarms back
    step("release")
    array = applied["registry"].get("gone")
    ArrayService(scheduler_role_arn=ROLE).create_volumes(array.spec, array.desired_controllers)
    assert len(boto3.client("cloudwatch", region_name=REGION).describe_alarms()["MetricAlarms"]) == 2
    # When the teardown finishes, then they go with the rest
    finished = {c["resource"] for c in step("finish")["changes"]}
    assert {"alarm/vsa-gone-iops-high", "alarm/vsa-gone-iops-low"} <= finished
    assert boto3.client("cloudwatch", region_name=REGION).describe_alarms()["MetricAlarms"] == []


def test_a_scale_runs_threshold_step_after_delete_puts_no_alarm_back(applied: dict[str, Any]) -> None:
    # ScaleArray runs are not stopped by DELETE: one that reaches SetAlarmThresholds after release
    step("release")
    reply = thresholds.lambda_handler({"arrayId": "gone", "desiredControllers": 2}, FakeLambdaContext())
    assert reply["changes"] == []
    assert boto3.client("cloudwatch", region_name=REGION).describe_alarms()["MetricAlarms"] == []


def test_steps_are_idempotent(applied: dict[str, Any]) -> None:
    step("release")
    assert step("release")["changes"] == []
    step("finish")
    assert step("finish")["changes"] == []
    step("forget")
    step("forget")  # a retried forget finds nothing and succeeds
