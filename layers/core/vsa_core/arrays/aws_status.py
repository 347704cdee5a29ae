"""An array's live state on AWS, JSON-able (what ``GET /arrays/{id}`` shows), and whether a
controller in flight makes it busy."""

from collections.abc import Mapping
from typing import Any

from vsa_core.arrays import aws_observe
from vsa_core.arrays.aws_observe import ArrayClients
from vsa_core.arrays.spec import ArraySpec
from vsa_core.naming import backup_schedule_name, group_name, iops_alarm_name


def status(clients: ArrayClients, spec: ArraySpec) -> dict[str, Any]:
    """The array's live state, JSON-able."""
    group = aws_observe.describe_group(clients, group_name(spec.array_id))
    return {
        "arrayId": spec.array_id,
        "group": None
        if group is None
        else {
            "name": group["AutoScalingGroupName"],
            "desired": group["DesiredCapacity"],
            "min": group["MinSize"],
            "max": group["MaxSize"],
        },
        "controllers": _controllers_status(clients, group),
        "volumes": _volumes_status(clients, spec),
        "alarms": _alarms_status(clients, spec.array_id),
        "backupSchedule": _schedule_status(clients, spec.array_id),
        "hosts": _hosts_status(clients, spec),
    }


def _controllers_status(clients: ArrayClients, group: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    members = list(group.get("Instances", [])) if group else []
    if not members:
        return []
    ids = [m["InstanceId"] for m in members]
    pages = clients.ec2.get_paginator("describe_instances").paginate(InstanceIds=ids)
    details = {i["InstanceId"]: i for page in pages for r in page["Reservations"] for i in r["Instances"]}
    result = []
    for member in members:
        detail = details.get(member["InstanceId"], {})
        launched = detail.get("LaunchTime")
        result.append(
            {
                "instanceId": member["InstanceId"],
                "lifecycleState": member["LifecycleState"],
                "healthStatus": member.get("HealthStatus"),
                "protectedFromScaleIn": member.get("ProtectedFromScaleIn", False),
                "privateIp": detail.get("PrivateIpAddress"),
                "availabilityZone": member.get("AvailabilityZone"),
                "launchedAt": launched.isoformat() if launched is not None else None,
            }
        )
    return result


def _volumes_status(clients: ArrayClients, spec: ArraySpec) -> list[dict[str, Any]]:
    owned = {v["VolumeId"]: v for v in aws_observe.owned_volumes(clients, spec.array_id).values()}
    existing = aws_observe.describe_volumes(
        clients, [{"Name": "volume-id", "Values": list(spec.existing_volume_ids)}]
    )
    volumes = [*existing, *owned.values()]
    return [
        {
            "volumeId": v["VolumeId"],
            "owned": v["VolumeId"] in owned,
            "state": v.get("State"),
            "attachments": sorted(a["InstanceId"] for a in v.get("Attachments", [])),
        }
        for v in volumes
    ]


def _alarms_status(clients: ArrayClients, array_id: str) -> list[dict[str, Any]]:
    names = [iops_alarm_name(array_id, "high"), iops_alarm_name(array_id, "low")]
    alarms = clients.cloudwatch.describe_alarms(AlarmNames=names)["MetricAlarms"]
    return [{"name": a["AlarmName"], "state": a["StateValue"], "threshold": a["Threshold"]} for a in alarms]


def _schedule_status(clients: ArrayClients, array_id: str) -> dict[str, Any] | None:
    schedule = aws_observe.observe_schedule(clients, backup_schedule_name(array_id))
    if schedule is None:
        return None
    return {
        "name": schedule["Name"],
        "expression": schedule["ScheduleExpression"],
        "state": schedule["State"],
    }


def _hosts_status(clients: ArrayClients, spec: ArraySpec) -> list[dict[str, Any]]:
    ids = [h.instance_id for h in spec.hosts]
    nodes = aws_observe.managed_nodes(clients, ids) if ids else {}
    return [
        {
            "instanceId": h.instance_id,
            "mountpoints": list(h.mountpoints),
            "pingStatus": nodes.get(h.instance_id, {}).get("PingStatus", "NotRegistered"),
        }
        for h in spec.hosts
    ]


def busy_reason(clients: ArrayClients, spec: ArraySpec) -> str | None:
    """Why the array cannot take a change now (a controller bootstrapping or draining), or None."""
    reasons = []
    for instance in aws_observe.group_instances(clients, spec.array_id):
        state = str(instance["LifecycleState"])
        if state.startswith("Pending:"):
            reasons.append(f"controller {instance['InstanceId']} is bootstrapping ({state})")
        elif state.startswith("Terminating:"):
            reasons.append(f"controller {instance['InstanceId']} is draining ({state})")
    return "; ".join(reasons) + ": retry when it has finished" if reasons else None
