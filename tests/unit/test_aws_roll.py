"""ReconcileArray's roll phase on moto (vsa_core.reconcile.aws_steps with aws_roll): a group
whose controllers run the AMI its launch template's default version no longer names. The start
surges (one controller more, the surge recorded on the array, the group's maximum raised when
the array is at it); once the new one serves, the poll says another action is due; the next
start retires the oldest outdated controller with the count decremented; an apply during the
surge keeps it."""

import time
from typing import Any

import boto3
import pytest

from tests.unit.conftest import REGION, an_image_id
from vsa_core.arrays import aws_lock
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.plan import group_params
from vsa_core.arrays.spec import ArraySpec
from vsa_core.naming import group_name
from vsa_core.reconcile import aws_record, aws_steps
from vsa_core.reconcile.steps import Poll, Start

NAMES = {"configureTarget": "ct", "connectPath": "cp", "disconnectPath": "dp"}
NODE = {
    "configfsRoot": "c",
    "deviceDir": "d",
    "modprobeCommand": "m",
    "nvmeCommand": "n",
    "nvmeConfig": "f",
    "sysfsRoot": "s",
}
COMMON = {"arrayId": "demo", "owner": "run-1"}


def _spec(image: str) -> ArraySpec:
    return ArraySpec.model_validate(
        {
            "arrayId": "demo",
            "availabilityZone": "us-east-1a",
            "controllers": {"instanceType": "r5b.xlarge", "imageId": image},
            "minControllers": 2,
            "maxControllers": 2,
            "volumes": [{"volumeId": "vol-0a1b2c3d4e5f60001"}],
        }
    )


@pytest.fixture
def rolling(registry_table: str) -> dict[str, Any]:
    """Two serving controllers on the old AMI; the template's default version now names a new one."""
    ec2 = boto3.client("ec2", region_name=REGION)
    autoscaling = boto3.client("autoscaling", region_name=REGION)
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    old = an_image_id(ec2)
    new = ec2.register_image(Name="controller-v2", RootDeviceName="/dev/xvda")["ImageId"]
    ec2.create_launch_template(
        LaunchTemplateName="vsa-demo-controller",
        LaunchTemplateData={"ImageId": old, "InstanceType": "r5b.xlarge"},
    )
    name = group_name("demo")
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchTemplate={"LaunchTemplateName": "vsa-demo-controller", "Version": "$Default"},
        MinSize=2,
        MaxSize=2,
        DesiredCapacity=2,
        AvailabilityZones=["us-east-1a"],
        Tags=[{"Key": "vsa:array", "Value": "demo", "PropagateAtLaunch": True}],
    )
    registry = ArrayRegistry(registry_table, dynamodb)
    registry.create(_spec(new))
    instances = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][
        0
    ]["Instances"]
    for slot, instance in enumerate(instances):
        _serve(dynamodb, registry_table, slot, instance["InstanceId"])
    version = ec2.create_launch_template_version(
        LaunchTemplateName="vsa-demo-controller",
        LaunchTemplateData={"ImageId": new, "InstanceType": "r5b.xlarge"},
    )["LaunchTemplateVersion"]["VersionNumber"]
    ec2.modify_launch_template(LaunchTemplateName="vsa-demo-controller", DefaultVersion=str(version))
    aws_record.start(dynamodb, registry_table, "demo", "run-1", 1, "2026-11-25T00:00:00+00:00")
    aws_lock.acquire(dynamodb, registry_table, "demo", "run-1", 900, int(time.time()))
    ctx = aws_steps.ReconcileContext(
        registry=registry,
        arrays=ArrayService(scheduler_role_arn="arn:aws:iam::123456789012:role/s"),
        dynamodb=dynamodb,
        ec2=ec2,
        ssm=boto3.client("ssm", region_name=REGION),
        table=registry_table,
        autoscaling=autoscaling,
    )
    return {"ctx": ctx, "old": [i["InstanceId"] for i in instances], "new": new, "registry": registry}


def _serve(dynamodb: Any, table: str, slot: int, instance_id: str) -> None:
    dynamodb.put_item(
        TableName=table,
        Item={
            "pk": {"S": "ARRAY#demo"},
            "sk": {"S": f"SLOT#{slot:02d}"},
            "instanceId": {"S": instance_id},
            "state": {"S": "serving"},
            "address": {"S": f"10.0.0.{slot + 1}"},
        },
    )


def _group(autoscaling: Any) -> dict[str, Any]:
    return dict(
        autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group_name("demo")])[
            "AutoScalingGroups"
        ][0]
    )


def test_a_roll_surges_first_then_retires_the_oldest_outdated_controller(rolling: dict[str, Any]) -> None:
    ctx, registry = rolling["ctx"], rolling["registry"]
    # When the roll phase starts: one controller more, the maximum raised with it (the array is at 2 of 2)
    started = aws_steps.start(ctx, Start(step="start", phase="roll", documents=NAMES, node=NODE, **COMMON))
    assert started["pending"] is True
    assert started["roll"] == "surge"
    group = _group(ctx.autoscaling)
    assert (group["DesiredCapacity"], group["MaxSize"]) == (3, 3)
    assert registry.get("demo").roll_surge == 1
    assert "roll: 2 controller(s) to replace" in str(registry.get("demo").reconcile)
    # An apply now keeps the surge (the group's parameters one above the array's count)
    params = group_params(registry.get("demo").spec, 2, None, registry.get("demo").roll_surge)
    assert (params["DesiredCapacity"], params["MaxSize"]) == (3, 3)
    # While the new controller holds no serving slot, the poll waits, saying for what
    polled = aws_steps.poll(ctx, Poll(step="poll", phase="roll", started=started, **COMMON))
    assert (polled["done"], polled["again"], polled["timedOut"]) == (False, False, False)
    assert "2 of 3 controllers serve" in polled["waiting"][0]
    # Once it serves (its bootstrap leased a slot), the next action is due
    surge = next(
        i["InstanceId"] for i in _group(ctx.autoscaling)["Instances"] if i["InstanceId"] not in rolling["old"]
    )
    _serve(ctx.dynamodb, ctx.table, 2, surge)
    polled = aws_steps.poll(ctx, Poll(step="poll", phase="roll", started=started, **COMMON))
    assert polled["again"] is True
    # The phase starts again: the oldest outdated controller is drained and terminated, the count back to 2
    retired = aws_steps.start(ctx, Start(step="start", phase="roll", documents=NAMES, node=NODE, **COMMON))
    assert retired["roll"] == "retire"
    assert retired["instanceId"] in rolling["old"]
    group = _group(ctx.autoscaling)
    assert (group["DesiredCapacity"], group["MaxSize"]) == (2, 2)
    assert registry.get("demo").roll_surge == 0


def test_a_run_that_lost_the_lock_surges_nothing(rolling: dict[str, Any]) -> None:
    ctx = rolling["ctx"]
    other = {**COMMON, "owner": "run-2"}
    with pytest.raises(Exception, match="lock"):
        aws_steps.start(ctx, Start(step="start", phase="roll", documents=NAMES, node=NODE, **other))
    assert _group(ctx.autoscaling)["DesiredCapacity"] == 2


def test_nothing_outdated_is_no_action(rolling: dict[str, Any]) -> None:
    ctx = rolling["ctx"]
    ctx.ec2.modify_launch_template(LaunchTemplateName="vsa-demo-controller", DefaultVersion="1")
    started = aws_steps.start(ctx, Start(step="start", phase="roll", documents=NAMES, node=NODE, **COMMON))
    assert (started["pending"], started["roll"]) == (False, "done")
    assert _group(ctx.autoscaling)["DesiredCapacity"] == 2
