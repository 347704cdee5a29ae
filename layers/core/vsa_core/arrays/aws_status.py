"""An array's live state on AWS, JSON-able (what ``GET /arrays/{id}`` shows), and whether a
controller in flight makes it busy.

The data plane's part is what the nodes themselves last reported (``aws_reports``), next to
what the spec asks, with every difference in words (``vsa_core.arrays.dataplane``): a host's
paths are the host's own report, never inferred from the registry. For an array with
dh-hmac-chap, report-exports says which hosts nvmet holds a key for; a controller whose last
report says nothing of keys (one from a report-exports before it did) has its keyed hosts from
its last configure-target report: one more read per such controller."""

from collections.abc import Mapping
from typing import Any

from vsa_core.arrays import aws_observe, aws_reports, dataplane, keys
from vsa_core.arrays.aws_observe import ArrayClients
from vsa_core.arrays.aws_reports import NodeDocuments
from vsa_core.arrays.capacity import (
    deliverable_iops,
    owned_volume_iops,
    owner_bound_reason,
    owner_controllers,
    volume_bound_reason,
    volume_controllers,
)
from vsa_core.arrays.dataplane import Report
from vsa_core.arrays.spec import ArraySpec
from vsa_core.naming import backup_schedule_name, drill_schedule_name, group_name, iops_alarm_name
from vsa_core.nvme import host_nqn

CONFIGURE_TARGET = "configure-target"
"""The document name a configure-target report carries (its ``document``; the deployed SSM
document's name is the stack's)."""


def status(
    clients: ArrayClients,
    spec: ArraySpec,
    slots: Mapping[int, Mapping[str, str]] | None = None,
    documents: NodeDocuments | None = None,
) -> dict[str, Any]:
    """The array's live state, JSON-able. ``slots``: the registry's (slot -> instanceId, state,
    address); ``documents``: the node documents' names, whose last reports say what each node
    sees (without them the data plane is not observed: ``dataPlane`` is None)."""
    group = aws_observe.describe_group(clients, group_name(spec.array_id))
    controllers = _controllers_status(clients, group)
    volumes = _volumes_status(clients, spec)
    hosts = _hosts_status(clients, spec)
    data_plane = None
    if documents is not None:
        data_plane = _data_plane(clients, spec, slots or {}, documents, controllers, volumes, hosts)
    else:
        _with_slots(controllers, slots or {})
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
        "controllers": controllers,
        "volumes": volumes,
        "capacity": capacity_status(spec, None if group is None else int(group["DesiredCapacity"]), volumes),
        "alarms": _alarms_status(clients, spec.array_id),
        "backupSchedule": _schedule_status(clients, backup_schedule_name(spec.array_id)),
        "drillSchedule": _schedule_status(clients, drill_schedule_name(spec.array_id)),
        "hosts": hosts,
        "dataPlane": data_plane,
    }


def data_plane_differences(
    clients: ArrayClients,
    spec: ArraySpec,
    slots: Mapping[int, Mapping[str, str]],
    documents: NodeDocuments,
    host_reports: Mapping[str, Report | None] | None = None,
) -> list[dict[str, Any]]:
    """Only the data plane's differences from the spec (what ``status`` shows under
    ``dataPlane.differences``), without the alarms and the schedule: the health check's drift.
    ``host_reports``: the hosts' last reports when the caller has read them already."""
    group = aws_observe.describe_group(clients, group_name(spec.array_id))
    controllers = _controllers_status(clients, group)
    volumes = _volumes_status(clients, spec)
    hosts = _hosts_status(clients, spec)
    found: list[dict[str, Any]] = _data_plane(
        clients, spec, slots, documents, controllers, volumes, hosts, host_reports
    )["differences"]
    return found


def _with_slots(controllers: list[dict[str, Any]], slots: Mapping[int, Mapping[str, str]]) -> None:
    held = {item.get("instanceId"): (slot, item) for slot, item in slots.items()}
    for controller in controllers:
        slot, item = held.get(controller["instanceId"], (None, {}))
        controller["slot"], controller["slotState"] = slot, item.get("state")


def _data_plane(
    clients: ArrayClients,
    spec: ArraySpec,
    slots: Mapping[int, Mapping[str, str]],
    documents: NodeDocuments,
    controllers: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
    hosts: list[dict[str, Any]],
    host_reports: Mapping[str, Report | None] | None = None,
) -> dict[str, Any]:
    """Desired against observed, per controller and per host; fills each controller's slot and
    exports and each host's paths (from its own report) in place; answers the differences."""
    _with_slots(controllers, slots)
    desired = desired_data_plane(spec, volumes)
    held = {item.get("instanceId"): (slot, item) for slot, item in slots.items()}
    nodes = [
        dataplane.Controller(
            instance_id=c["instanceId"],
            address=held.get(c["instanceId"], (None, {}))[1].get("address") or c.get("privateIp"),
            slot=c.get("slot"),
            state=c.get("slotState"),
        )
        for c in controllers
    ]
    # every node's last report, read side by side: the serving controllers', and the hosts'
    # unless the caller has them
    serving = [n.instance_id for n in nodes if n.state == "serving"]
    unread = [h.instance_id for h in desired.hosts] if host_reports is None else []
    read = aws_reports.last_reports(
        clients.ssm,
        [(c, documents.controller) for c in serving] + [(h, documents.host) for h in unread],
        spec.array_id,
        documents.recent,
    )
    controller_reports = dict(zip(serving, read[: len(serving)], strict=True))
    observed = dataplane.Observed(
        controllers=nodes,
        attachments={v["volumeId"]: frozenset(v["attachments"]) for v in volumes},
        controller_reports=controller_reports,
        host_reports=dict(host_reports)
        if host_reports is not None
        else dict(zip(unread, read[len(serving) :], strict=True)),
        authentication_reports=_authentication_reports(clients, spec, documents, controller_reports),
    )
    for controller, node in zip(controllers, nodes, strict=True):
        if node.state == "serving":
            controller["observed"] = dataplane.controller_view(desired, observed, node)
    for host, wanted in zip(hosts, desired.hosts, strict=True):
        view = dataplane.host_view(desired, observed, wanted)
        host["paths"] = view["livePaths"]
        host["observed"] = view
    differences = dataplane.compare(desired, observed)
    return {
        "converged": not differences,
        "servingControllers": len(dataplane.serving(observed)),
        "differences": [d.as_dict() for d in differences],
    }


def _authentication_reports(
    clients: ArrayClients,
    spec: ArraySpec,
    documents: NodeDocuments,
    controller_reports: Mapping[str, Report | None],
) -> dict[str, Report | None]:
    """For an array with dh-hmac-chap, each serving controller's last configure-target report
    where its last report is another document's (report-exports, the health check's, says
    nothing of keys): which hosts it keyed. Nothing to read for an array without keys."""
    if spec.authentication != keys.DH_HMAC_CHAP or not documents.configure_target:
        return {}
    unsaid = [
        instance_id
        for instance_id, report in controller_reports.items()
        if report is not None
        and report.document != CONFIGURE_TARGET
        and dataplane.authentication_of(report) is None
    ]
    read = aws_reports.last_reports(
        clients.ssm, [(c, (documents.configure_target,)) for c in unsaid], spec.array_id
    )
    return dict(zip(unsaid, read, strict=True))


def desired_data_plane(spec: ArraySpec, volumes: list[dict[str, Any]]) -> dataplane.Desired:
    """What the spec asks of the nodes: every volume that exists (its size as EBS has it),
    every host with the NQN it connects with, how they authenticate."""
    return dataplane.Desired(
        array_id=spec.array_id,
        volumes=[
            dataplane.Volume(v["volumeId"], v.get("name") or v["volumeId"], v.get("sizeGiB")) for v in volumes
        ],
        hosts=[dataplane.Host(h.instance_id, host_nqn(h)) for h in spec.hosts],
        allow_any_host=spec.allow_any_host,
        authentication=spec.authentication,
    )


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
    found = aws_observe.owned_volumes(clients, spec.array_id)
    owned = {v["VolumeId"]: (name, v) for name, v in found.items()}
    existing = aws_observe.describe_volumes(
        clients, [{"Name": "volume-id", "Values": list(spec.existing_volume_ids)}]
    )
    volumes = [(v["VolumeId"], v) for v in existing] + [(name, v) for name, v in owned.values()]
    return [
        {
            "volumeId": v["VolumeId"],
            "name": name,
            "owned": v["VolumeId"] in owned,
            "state": v.get("State"),
            "sizeGiB": v.get("Size"),
            "iops": v.get("Iops"),
            "attachments": sorted(a["InstanceId"] for a in v.get("Attachments", [])),
        }
        for name, v in volumes
    ]


def capacity_status(spec: ArraySpec, desired: int | None, volumes: list[dict[str, Any]]) -> dict[str, Any]:
    """What the array can deliver (``vsa_core.arrays.capacity``, the planner's rule): its
    controllers' part, its volumes' provisioned IOPS in total (None while a volume is missing or
    reports none), and whether the volumes are the limit (``volumeBound``: its controllers
    already move all the volumes give, so more controllers add none) with what to raise."""
    iops = [v.get("iops") for v in volumes]
    declared = len(spec.existing_volume_ids) + len(spec.new_volumes)
    known = bool(iops) and all(iops) and len(iops) >= declared
    owners = owner_controllers(declared) if spec.fencing == "reservations" else None
    total: int | None = None
    if known:
        each = [int(i) for i in iops if i]
        # one owner per volume: each volume moves at most its owner's IOPS
        total = sum(each) if owners is None else owned_volume_iops(each, spec.per_controller_iops)
    count = desired or 0
    useful = (
        None
        if total is None
        else volume_controllers(total, spec.per_controller_iops, spec.target_utilisation)
    )
    if owners is not None:
        useful = owners if useful is None else min(useful, owners)
    bound = useful is not None and count >= useful
    carrying = count if owners is None else min(count, owners)
    message = None
    if bound and owners is not None and useful == owners:
        message = owner_bound_reason(owners)
    elif bound and total is not None and useful is not None:
        message = volume_bound_reason(total, useful)
    return {
        "perControllerIops": spec.per_controller_iops,
        "volumeIops": total,
        "controllers": count,
        "deliverableIops": deliverable_iops(carrying, spec.per_controller_iops, total),
        "volumeControllers": useful,
        "volumeBound": bound,
        "message": message,
    }


def _alarms_status(clients: ArrayClients, array_id: str) -> list[dict[str, Any]]:
    names = [iops_alarm_name(array_id, "high"), iops_alarm_name(array_id, "low")]
    alarms = clients.cloudwatch.describe_alarms(AlarmNames=names)["MetricAlarms"]
    return [{"name": a["AlarmName"], "state": a["StateValue"], "threshold": a["Threshold"]} for a in alarms]


def _schedule_status(clients: ArrayClients, name: str) -> dict[str, Any] | None:
    schedule = aws_observe.observe_schedule(clients, name)
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
