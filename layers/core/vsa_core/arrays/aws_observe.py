"""The read side of an array on AWS: what exists, read back into ``vsa_core.arrays.plan``'s
shapes so a diff says what to change, and the lookups every other ``aws_*`` module shares.

Clients are injected through :class:`ArrayClients` (``vsa_core.arrays.aws_service.ArrayService``
builds one from ``vsa_core.clients``). The service accounts have no mypy-boto3 stubs installed
for these five services, so the clients are typed ``Any``.
"""

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from vsa_core.arrays.plan import Params, Resources
from vsa_core.arrays.spec import ARRAY_TAG, DEPLOYMENT_TAG, OWNED_TAG, ArraySpec
from vsa_core.naming import (
    backup_schedule_name,
    deployment,
    drill_schedule_name,
    group_name,
    iops_alarm_name,
    launch_template_name,
    owned_volume_name,
)

SERVING_STATES = ("InService", "Pending", "Pending:Wait", "Pending:Proceed")
"""Instances of the group that count as serving (or about to serve) controllers."""

"""Auto Scaling ships no waiters in botocore; this one is in botocore's own format."""

_GROUP_KEYS = (
    "LaunchTemplate",
    "MinSize",
    "MaxSize",
    "DesiredCapacity",
    "NewInstancesProtectedFromScaleIn",
    "DefaultCooldown",
)
_HOOK_KEYS = (
    "LifecycleHookName",
    "AutoScalingGroupName",
    "LifecycleTransition",
    "HeartbeatTimeout",
    "DefaultResult",
    "NotificationMetadata",
)
_ALARM_KEYS = (
    "AlarmName",
    "AlarmDescription",
    "ActionsEnabled",
    "Threshold",
    "ComparisonOperator",
    "EvaluationPeriods",
    "DatapointsToAlarm",
    "TreatMissingData",
)
_LT_DATA_KEYS = (
    "InstanceType",
    "ImageId",
    "MetadataOptions",
    "TagSpecifications",
    "NetworkInterfaces",
    "SecurityGroupIds",
    "IamInstanceProfile",
)


@dataclass(frozen=True)
class ArrayClients:
    """The AWS clients an array's steps use, and the role the backup schedule runs as."""

    ec2: Any
    autoscaling: Any
    cloudwatch: Any
    scheduler: Any
    ssm: Any
    scheduler_role_arn: str
    iam: Any = None
    """Read only: validation asks whether the spec's instance profile exists."""
    secretsmanager: Any = None
    """The DH-HMAC-CHAP key secrets (``aws_keys``)."""
    keys_kms_key_id: str = ""
    """The customer-managed KMS key the key secrets are encrypted with (the stack's KeysKey;
    empty: Secrets Manager's own aws/secretsmanager key, in tests only)."""
    node_role_path: str = ""
    """The IAM path of the roles the deployment may pass to its nodes (the stack's NodeRolePath;
    empty: none, and validation refuses every instance profile)."""
    event_bus_name: str = "default"
    """Where the backup schedules put their events: the deployment's own bus (the stack's
    ControlPlaneEventBus), the default bus only in tests that deploy none."""


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def tag_dict(items: Iterable[Mapping[str, Any]] | None) -> dict[str, str]:
    return {str(t["Key"]): str(t["Value"]) for t in items or ()}


def project(source: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    return {k: source[k] for k in keys if k in source}


def describe_group(clients: ArrayClients, name: str) -> dict[str, Any] | None:
    groups = clients.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])[
        "AutoScalingGroups"
    ]
    return dict(groups[0]) if groups else None


def observe(clients: ArrayClients, spec: ArraySpec, desired: Resources) -> Resources:
    assert desired.group is not None
    return Resources(
        array_id=spec.array_id,
        group=_observe_group(clients, desired.group),
        launch_hook=_observe_hook(clients, desired.launch_hook),
        terminate_hook=_observe_hook(clients, desired.terminate_hook),
        alarm_high=observe_alarm(clients, iops_alarm_name(spec.array_id, "high")),
        alarm_low=observe_alarm(clients, iops_alarm_name(spec.array_id, "low")),
        schedule=observe_schedule(clients, backup_schedule_name(spec.array_id)),
        drill_schedule=observe_schedule(clients, drill_schedule_name(spec.array_id)),
    )


def _observe_group(clients: ArrayClients, desired: Params) -> dict[str, Any] | None:
    group = describe_group(clients, str(desired["AutoScalingGroupName"]))
    if group is None:
        return None
    observed = {"AutoScalingGroupName": group["AutoScalingGroupName"], **project(group, _GROUP_KEYS)}
    template = group.get("LaunchTemplate", {})
    observed["LaunchTemplate"] = project(template, desired["LaunchTemplate"])
    if "VPCZoneIdentifier" in desired:
        observed["VPCZoneIdentifier"] = group.get("VPCZoneIdentifier")
    else:
        observed["AvailabilityZones"] = sorted(group.get("AvailabilityZones", []))
    observed["Tags"] = [
        project(t, ("ResourceId", "ResourceType", "Key", "Value", "PropagateAtLaunch"))
        for t in group.get("Tags", [])
        if t["Key"] in (ARRAY_TAG, DEPLOYMENT_TAG)
    ]
    return observed


def _observe_hook(clients: ArrayClients, desired: Params | None) -> dict[str, Any] | None:
    assert desired is not None
    try:
        hooks = clients.autoscaling.describe_lifecycle_hooks(
            AutoScalingGroupName=desired["AutoScalingGroupName"],
            LifecycleHookNames=[desired["LifecycleHookName"]],
        )["LifecycleHooks"]
    except ClientError as error:
        if error_code(error) != "ValidationError":  # the group does not exist (yet)
            raise
        return None
    return project(hooks[0], _HOOK_KEYS) if hooks else None


def observe_alarm(clients: ArrayClients, name: str) -> dict[str, Any] | None:
    alarms = clients.cloudwatch.describe_alarms(AlarmNames=[name])["MetricAlarms"]
    if not alarms:
        return None
    alarm = alarms[0]
    observed = project(alarm, _ALARM_KEYS)
    observed["Metrics"] = [_metric_query(q) for q in alarm.get("Metrics", [])]
    tags = clients.cloudwatch.list_tags_for_resource(ResourceARN=alarm["AlarmArn"]).get("Tags", [])
    observed["Tags"] = sorted(
        ({"Key": t["Key"], "Value": t["Value"]} for t in tags), key=lambda t: str(t["Key"])
    )
    return observed


def observe_schedule(clients: ArrayClients, name: str) -> dict[str, Any] | None:
    try:
        schedule = clients.scheduler.get_schedule(Name=name)
    except ClientError as error:
        if error_code(error) != "ResourceNotFoundException":
            raise
        return None
    return {
        "Name": schedule["Name"],
        "ScheduleExpression": schedule["ScheduleExpression"],
        "FlexibleTimeWindow": project(schedule.get("FlexibleTimeWindow", {}), ("Mode",)),
        "State": schedule.get("State"),
        "Target": project(schedule.get("Target", {}), ("Arn", "RoleArn", "Input")),
    }


def observe_launch_template(clients: ArrayClients, array_id: str) -> dict[str, Any] | None:
    name = launch_template_name(array_id)
    try:
        template = clients.ec2.describe_launch_templates(LaunchTemplateNames=[name])["LaunchTemplates"][0]
        version = clients.ec2.describe_launch_template_versions(
            LaunchTemplateName=name, Versions=["$Default"]
        )["LaunchTemplateVersions"][0]
    except ClientError as error:
        if "NotFound" not in error_code(error):
            raise
        return None
    tags = tag_dict(template.get("Tags"))
    if tags.get(ARRAY_TAG) != array_id or tags.get(DEPLOYMENT_TAG) != deployment():
        return None  # not this deployment's (validate refuses to create over it)
    data = project(version.get("LaunchTemplateData", {}), _LT_DATA_KEYS)
    if "TagSpecifications" in data:
        # A template's data cannot tag a launch template; moto copies the template's own
        # tags in there. Dropping them is a no-op on AWS.
        data["TagSpecifications"] = [
            t for t in data["TagSpecifications"] if t.get("ResourceType") != "launch-template"
        ]
    return {
        "LaunchTemplateName": name,
        "LaunchTemplateData": data,
        "TagSpecifications": [
            {
                "ResourceType": "launch-template",
                "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())],
            }
        ],
    }


def named_template(clients: ArrayClients, array_id: str) -> dict[str, Any] | None:
    """The launch template named ``vsa-<id>-controller``, ours or not (None when absent)."""
    try:
        templates = clients.ec2.describe_launch_templates(
            LaunchTemplateNames=[launch_template_name(array_id)]
        )
    except ClientError as error:
        if "NotFound" not in error_code(error):
            raise
        return None
    return dict(templates["LaunchTemplates"][0]) if templates["LaunchTemplates"] else None


def spec_launch_template_id(clients: ArrayClients, spec: ArraySpec) -> str | None:
    ref = spec.controllers.launch_template
    if ref is None or ref.launch_template_id is not None:
        return None if ref is None else ref.launch_template_id
    templates = clients.ec2.describe_launch_templates(LaunchTemplateNames=[ref.launch_template_name])
    return str(templates["LaunchTemplates"][0]["LaunchTemplateId"])


def describe_volumes(clients: ArrayClients, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    pages = clients.ec2.get_paginator("describe_volumes").paginate(Filters=filters)
    return [dict(v) for page in pages for v in page["Volumes"]]


def owned_volumes(clients: ArrayClients, array_id: str) -> dict[str, dict[str, Any]]:
    """The array's owned volumes by spec name, as CreateVolume parameters plus VolumeId."""
    prefix = owned_volume_name(array_id, "")
    found: dict[str, dict[str, Any]] = {}
    for volume in describe_volumes(clients, _owned_filters(array_id)):
        tags = tag_dict(volume.get("Tags"))
        name = tags.get("Name", "")
        if not name.startswith(prefix):
            continue
        found[name.removeprefix(prefix)] = {
            "VolumeId": volume["VolumeId"],
            "AvailabilityZone": volume["AvailabilityZone"],
            "Size": volume["Size"],
            "Iops": volume.get("Iops"),
            "VolumeType": volume.get("VolumeType"),
            "MultiAttachEnabled": volume.get("MultiAttachEnabled", False),
            "State": volume.get("State"),
            "Attachments": volume.get("Attachments", []),
            "TagSpecifications": [
                {
                    "ResourceType": "volume",
                    "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())],
                }
            ],
        }
    return found


def group_instances(clients: ArrayClients, array_id: str) -> list[dict[str, Any]]:
    group = describe_group(clients, group_name(array_id))
    return list(group.get("Instances", [])) if group else []


SSM_FILTER_VALUES = 100
"""DescribeInstanceInformation takes at most 100 values in a filter (SSM API reference,
InstanceInformationStringFilter: Values, "Maximum number of 100 items"; botocore's model says so
and does not check it: AWS answers ValidationException). A spec holds up to 256 hosts."""


def managed_nodes(clients: ArrayClients, instance_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Each of ``instance_ids`` that is an SSM managed node, by id: its instance information."""
    return describe_managed_nodes(clients.ssm, instance_ids)


def describe_managed_nodes(ssm: Any, instance_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``managed_nodes`` through an SSM client."""
    found: dict[str, dict[str, Any]] = {}
    for batch in itertools.batched(instance_ids, SSM_FILTER_VALUES, strict=False):
        pages = ssm.get_paginator("describe_instance_information").paginate(
            Filters=[{"Key": "InstanceIds", "Values": list(batch)}]
        )
        found.update((n["InstanceId"], dict(n)) for page in pages for n in page["InstanceInformationList"])
    return found


def volume_ids(clients: ArrayClients, spec: ArraySpec) -> tuple[str, ...]:
    """Every volume of the array: the spec's existing ones, then the ones created for it that
    the spec still lists (one an apply removed and kept is no longer the array's: no controller
    attaches it, no backup includes it, no alarm counts it)."""
    owned = owned_volumes(clients, spec.array_id)
    return spec.existing_volume_ids + tuple(
        str(owned[v.name]["VolumeId"]) for v in spec.new_volumes if v.name in owned
    )


def _owned_filters(array_id: str) -> list[dict[str, Any]]:
    return [
        {"Name": f"tag:{ARRAY_TAG}", "Values": [array_id]},
        {"Name": f"tag:{DEPLOYMENT_TAG}", "Values": [deployment()]},
        {"Name": f"tag:{OWNED_TAG}", "Values": ["true"]},
    ]


def _metric_query(query: Mapping[str, Any]) -> dict[str, Any]:
    """A metric data query as PutMetricAlarm takes it (AWS may add defaults on the way back)."""
    shaped: dict[str, Any] = {"Id": query["Id"]}
    if "MetricStat" in query:
        stat = query["MetricStat"]
        metric = stat["Metric"]
        shaped["MetricStat"] = {
            "Metric": {
                "Namespace": metric["Namespace"],
                "MetricName": metric["MetricName"],
                "Dimensions": [
                    {"Name": d["Name"], "Value": d["Value"]} for d in metric.get("Dimensions", [])
                ],
            },
            "Period": stat["Period"],
            "Stat": stat["Stat"],
        }
    if "Expression" in query:
        shaped["Expression"] = query["Expression"]
    if "Label" in query:
        shaped["Label"] = query["Label"]
    shaped["ReturnData"] = bool(query.get("ReturnData", True))
    return shaped
