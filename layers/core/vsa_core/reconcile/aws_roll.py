"""ReconcileArray's ``roll`` phase on AWS (``vsa_core.reconcile.roll`` decides): what the group
launches and what its controllers run, read from Auto Scaling, EC2 and the registry's slots;
the one action the roll takes next (a surge, a retire); whether the action has settled.

The surge is recorded on the array's item (``rollSurge``: 1 while the extra controller is up,
written only while this run holds the array lock), so an apply during the roll keeps the
group's desired capacity and maximum one above the array's count instead of undoing the surge
(``vsa_core.arrays.plan.group_params``)."""

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from vsa_core.arrays import lock
from vsa_core.arrays.aws_registry import array_key
from vsa_core.arrays.plan import clamp_controllers
from vsa_core.arrays.spec import MULTI_ATTACH_LIMIT, RegisteredArray
from vsa_core.errors import LockLostError
from vsa_core.naming import group_name
from vsa_core.reconcile import roll

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

SURGE_ATTRIBUTE = "rollSurge"


def observe(
    autoscaling: Any, ec2: Any, array: RegisteredArray, slots: dict[int, dict[str, str]]
) -> tuple[list[roll.Member], roll.LaunchSettings, roll.Group] | None:
    """The group's controllers, what it launches, its counts (None: no group yet)."""
    name = group_name(array.spec.array_id)
    groups = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
    if not groups:
        return None
    group = groups[0]
    instances = [i for i in group.get("Instances", []) if i.get("LifecycleState") != "Terminated"]
    described: dict[str, dict[str, Any]] = {}
    ids = [str(i["InstanceId"]) for i in instances]
    if ids:
        pages = ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "instance-id", "Values": ids}]
        )
        described = {
            i["InstanceId"]: i for page in pages for r in page["Reservations"] for i in r["Instances"]
        }
    by_instance = {item.get("instanceId"): (slot, item) for slot, item in slots.items()}
    members = []
    for instance in instances:
        instance_id = str(instance["InstanceId"])
        ec2_view = described.get(instance_id, {})
        slot, item = by_instance.get(instance_id, (None, {}))
        members.append(
            roll.Member(
                instance_id=instance_id,
                lifecycle_state=str(instance.get("LifecycleState", "")),
                image_id=str(ec2_view.get("ImageId", "")),
                instance_type=str(ec2_view.get("InstanceType", instance.get("InstanceType", ""))),
                slot=slot,
                slot_state=item.get("state"),
                launched_at=str(ec2_view.get("LaunchTime", "")),
            )
        )
    counts = roll.Group(
        target=clamp_controllers(array.spec, array.desired_controllers),
        desired=int(group["DesiredCapacity"]),
        max_size=int(group["MaxSize"]),
        min_controllers=array.spec.min_controllers,
    )
    return members, _launches(ec2, group), counts


def _launches(ec2: Any, group: dict[str, Any]) -> roll.LaunchSettings:
    """The AMI and instance type of the launch template version the group names."""
    ref = group.get("LaunchTemplate") or (group.get("MixedInstancesPolicy") or {}).get(
        "LaunchTemplate", {}
    ).get("LaunchTemplateSpecification", {})
    if not ref:
        return roll.LaunchSettings(None, None)
    selector = (
        {"LaunchTemplateId": ref["LaunchTemplateId"]}
        if ref.get("LaunchTemplateId")
        else {"LaunchTemplateName": ref["LaunchTemplateName"]}
    )
    versions = ec2.describe_launch_template_versions(
        **selector, Versions=[str(ref.get("Version") or "$Default")]
    )
    data = versions["LaunchTemplateVersions"][0].get("LaunchTemplateData", {})
    return roll.LaunchSettings(data.get("ImageId"), data.get("InstanceType"))


def act(
    autoscaling: Any,
    dynamodb: "DynamoDBClient",
    table: str,
    array: RegisteredArray,
    owner: str,
    step: roll.Step,
    group: roll.Group,
) -> None:
    """Take ``step`` (a surge or a retire; anything else is no action)."""
    name = group_name(array.spec.array_id)
    spec_max = min(array.spec.max_controllers, MULTI_ATTACH_LIMIT)
    if step.kind == "surge" and step.desired is not None:
        _record_surge(dynamodb, table, array.spec.array_id, owner, max(0, step.desired - group.target))
        if step.desired > group.max_size:
            autoscaling.update_auto_scaling_group(
                AutoScalingGroupName=name, MaxSize=step.desired, DesiredCapacity=step.desired
            )
        else:
            autoscaling.set_desired_capacity(
                AutoScalingGroupName=name, DesiredCapacity=step.desired, HonorCooldown=False
            )
    elif step.kind == "retire" and step.instance_id is not None:
        # a retried step finds the controller leaving (not outdated any more) and waits instead
        autoscaling.terminate_instance_in_auto_scaling_group(
            InstanceId=step.instance_id, ShouldDecrementDesiredCapacity=True
        )
        _record_surge(dynamodb, table, array.spec.array_id, owner, 0)
        if group.max_size > spec_max and group.desired - 1 <= spec_max:
            autoscaling.update_auto_scaling_group(AutoScalingGroupName=name, MaxSize=spec_max)


def _record_surge(dynamodb: "DynamoDBClient", table: str, array_id: str, owner: str, surge: int) -> None:
    try:
        dynamodb.update_item(
            TableName=table,
            Key=array_key(array_id),
            UpdateExpression=f"SET {SURGE_ATTRIBUTE} = :surge",
            ConditionExpression=lock.RENEW_CONDITION,
            ExpressionAttributeValues={":surge": {"N": str(surge)}, ":me": {"S": owner}},
        )
    except ClientError as error:
        if error.response["Error"]["Code"] == "ConditionalCheckFailedException":
            raise LockLostError(
                f"{owner} no longer holds the lock of array {array_id}: the roll stops"
            ) from error
        raise
