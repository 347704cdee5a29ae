"""BootstrapController's EC2 / SSM steps: prepare (volumes, address, slot, devices), attach the
volumes in one step, whether they are attached (attaching late ones), whether the controller
is an online managed node; and detach, the compensation."""

from typing import Any

from botocore.exceptions import ClientError

from vsa_core.arrays import aws_keys
from vsa_core.arrays.plan import bootstrap_heartbeat_seconds
from vsa_core.controllers import ownership, slots
from vsa_core.controllers.aws_context import ATTACHED_STATES, ControllerContext
from vsa_core.controllers.steps import (
    Attach,
    Attachment,
    Detach,
    Node,
    Prepare,
)
from vsa_core.errors import ConflictError, ControllerGoneError
from vsa_core.naming import slot_key


def array_volumes(ctx: ControllerContext, array_id: str) -> tuple[Any, tuple[str, ...], list[dict[str, Any]]]:
    spec = ctx.registry.get(array_id).spec
    ids = ctx.arrays.volume_ids(spec)
    pages = ctx.ec2.get_paginator("describe_volumes").paginate(VolumeIds=list(ids))
    return spec, ids, [dict(v) for page in pages for v in page["Volumes"]]


def prepare(ctx: ControllerContext, request: Prepare) -> dict[str, Any]:
    spec, ids, volumes = array_volumes(ctx, request.array_id)
    reservations = ctx.ec2.describe_instances(InstanceIds=[request.instance_id])["Reservations"]
    instance = reservations[0]["Instances"][0]
    address = instance.get("PrivateIpAddress")
    if not address:
        raise ConflictError(f"controller {request.instance_id} has no private IP address to listen on")
    if instance.get("Placement", {}).get("AvailabilityZone") not in (None, spec.availability_zone):
        raise ConflictError(
            f"controller {request.instance_id} is in {instance['Placement']['AvailabilityZone']}, the "
            f"array's volumes in {spec.availability_zone}: fix the group's subnets"
        )
    attached = {
        v["VolumeId"]
        for v in volumes
        for a in v.get("Attachments", [])
        if a["InstanceId"] == request.instance_id and a["State"] in ATTACHED_STATES
    }
    in_use = [m["DeviceName"] for m in instance.get("BlockDeviceMappings", [])]
    todo = [v for v in ids if v not in attached]
    devices = slots.devices_for(todo, in_use)
    held = ctx.registry.slots(request.array_id)
    slot = slots.choose_slot({s: item["instanceId"] for s, item in held.items()}, request.instance_id)
    # the controller's own copy of the keys, before configure-target reads it (an idempotent
    # write: a retried step writes the same)
    credentials = aws_keys.write_controller(
        aws_keys.of(ctx.arrays.ctx),
        spec,
        request.instance_id,
        aws_keys.in_group(ctx.arrays.ctx, request.array_id),
    )
    return {
        "arrayId": request.array_id,
        "instanceId": request.instance_id,
        "address": address,
        "keysSecretId": credentials["keysSecretId"],
        "slot": slot,
        "slotKey": slot_key(slot),
        **slots.paths(spec, ids).as_dict(),
        "attach": [{"VolumeId": v, "Device": devices[v]} for v in todo],
        "volumeCount": len(ids),
        **_fencing(ctx, request.array_id, spec.fencing, ids, held, slot),
        "heartbeatSeconds": bootstrap_heartbeat_seconds(spec),
    }


def attach(ctx: ControllerContext, request: Attach) -> dict[str, Any]:
    """Every listed volume to the controller in one step: AttachVolume only starts an
    attachment, so the calls return at once and the attachments proceed in parallel (the
    workflow then waits on ``attachment``). A volume already attaching or attached to this
    controller (a retried step) is skipped rather than refused."""
    wanted = {v.volume_id: v.device for v in request.volumes}
    if not wanted:
        return {"requested": [], "already": []}
    pages = ctx.ec2.get_paginator("describe_volumes").paginate(VolumeIds=list(wanted))
    described = [v for page in pages for v in page["Volumes"]]
    already = sorted(
        v["VolumeId"]
        for v in described
        for a in v.get("Attachments", [])
        if a["InstanceId"] == request.instance_id and a["State"] in ATTACHED_STATES
    )
    creating = sorted(v["VolumeId"] for v in described if v["State"] == "creating")
    todo = [v for v in wanted if v not in already and v not in creating]
    for volume_id in todo:
        try:
            ctx.ec2.attach_volume(
                VolumeId=volume_id, InstanceId=request.instance_id, Device=wanted[volume_id]
            )
        except ClientError as error:
            _refused_for_a_gone_controller(ctx, request.instance_id, error)
            raise
    # a volume the API created moments ago may still be ``creating`` (AttachVolume would
    # refuse it): the ``attachment`` polls attach it once it is available
    return {"requested": todo, "already": already, "creating": creating}


REFUSED_FOR_THE_INSTANCE = ("IncorrectState", "IncorrectInstanceState", "InvalidInstanceID.NotFound")
"""AttachVolume's refusals that may mean the instance is no longer running (IncorrectState also
names a volume in the wrong state): the instance's own state says which."""


def _refused_for_a_gone_controller(ctx: ControllerContext, instance_id: str, error: ClientError) -> None:
    """Raise ``ControllerGoneError`` when AttachVolume refused because the controller is gone
    (its lifecycle action timed out and the group terminated it while the workflow worked):
    the workflow then undoes at once, naming why, instead of failing on EC2's words."""
    if error.response["Error"]["Code"] not in REFUSED_FOR_THE_INSTANCE:
        return
    try:
        reservations = ctx.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        state = reservations[0]["Instances"][0]["State"]["Name"] if reservations else "gone"
    except ClientError as described:
        if described.response["Error"]["Code"] != "InvalidInstanceID.NotFound":
            raise
        state = "gone"
    if state not in ("pending", "running"):
        raise ControllerGoneError(
            f"controller {instance_id} is {state}: its lifecycle action has ended or it was terminated"
        ) from error


def attachment(ctx: ControllerContext, request: Attachment) -> dict[str, Any]:
    """Whether every array volume is attached to the controller; a volume that was still
    ``creating`` when the ``attach`` step ran (the API does not wait for new volumes) and is
    available now gets its attachment started here, so the workflow's wait loop covers both."""
    _, ids, volumes = array_volumes(ctx, request.array_id)
    late = [
        v["VolumeId"]
        for v in volumes
        if v["State"] in ("available", "in-use")
        and not any(a["InstanceId"] == request.instance_id for a in v.get("Attachments", []))
    ]
    if late:
        reservations = ctx.ec2.describe_instances(InstanceIds=[request.instance_id])["Reservations"]
        instance = reservations[0]["Instances"][0]
        in_use = [m["DeviceName"] for m in instance.get("BlockDeviceMappings", [])]
        in_use += [
            a["Device"]
            for v in volumes
            for a in v.get("Attachments", [])
            if a["InstanceId"] == request.instance_id and a.get("Device")
        ]
        devices = slots.devices_for(late, in_use)
        for volume_id in late:
            try:
                ctx.ec2.attach_volume(
                    VolumeId=volume_id, InstanceId=request.instance_id, Device=devices[volume_id]
                )
            except ClientError as error:
                _refused_for_a_gone_controller(ctx, request.instance_id, error)
                # an attachment the attach step started and DescribeVolumes did not show yet
                if error.response["Error"]["Code"] not in ("VolumeInUse", "IncorrectState"):
                    raise
        volumes = array_volumes(ctx, request.array_id)[2]
    states = {
        v["VolumeId"]: next(
            (a["State"] for a in v.get("Attachments", []) if a["InstanceId"] == request.instance_id),
            "detached",
        )
        for v in volumes
    }
    waiting = sorted(v for v in ids if states.get(v) != "attached")
    return {"attached": not waiting, "waiting": waiting, "count": len(ids)}


def node(ctx: ControllerContext, request: Node) -> dict[str, Any]:
    """Whether the controller is an online managed node; ``gone`` once its instance is
    shutting down or terminated (e.g. its lifecycle action timed out and the group abandoned
    it): no point waiting for it any longer."""
    reservations = ctx.ec2.describe_instances(InstanceIds=[request.instance_id])["Reservations"]
    state = next((i["State"]["Name"] for r in reservations for i in r["Instances"]), "terminated")
    found = ctx.ssm.describe_instance_information(
        Filters=[{"Key": "InstanceIds", "Values": [request.instance_id]}]
    )["InstanceInformationList"]
    ping = found[0]["PingStatus"] if found else "NotRegistered"
    gone = state in ("shutting-down", "terminated")
    return {
        "online": ping == "Online" and not gone,
        "pingStatus": ping,
        "instanceState": state,
        "gone": gone,
    }


def detach(ctx: ControllerContext, request: Detach) -> dict[str, Any]:
    _, _, volumes = array_volumes(ctx, request.array_id)
    detached = []
    for volume in volumes:
        for attachment in volume.get("Attachments", []):
            if attachment["InstanceId"] == request.instance_id and attachment["State"] in ATTACHED_STATES:
                ctx.ec2.detach_volume(VolumeId=volume["VolumeId"], InstanceId=request.instance_id)
                detached.append(volume["VolumeId"])
    return {"detached": detached}


def _fencing(
    ctx: ControllerContext,
    array_id: str,
    fencing: str,
    ids: tuple[str, ...],
    held: dict[int, dict[str, str]],
    slot: int,
) -> dict[str, str]:
    """configure-target's Fencing and Owners for a controller joining the array: with fencing,
    the owners the serving controllers hold (a volume none owns yet: an even split over them),
    so the newcomer serves nothing until a handover gives it its share (ReconcileArray's export
    phase: the givers release first); the first controllers of an array split the volumes over
    themselves."""
    if fencing != ownership.RESERVATIONS:
        return {"fencing": "none", "owners": ""}
    stored = ctx.registry.get(array_id).owners
    serving = {s for s, item in held.items() if item.get("state") == "serving"} or {
        *held,
        slot,
    }
    fill = ownership.owners([v for v in ids if v not in stored], serving) if ids else {}
    return {"fencing": ownership.RESERVATIONS, "owners": ownership.owners_parameter(ids, {**fill, **stored})}
