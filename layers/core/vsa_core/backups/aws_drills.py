"""Restore drills on the AWS side: start one (the API, the schedule), and each step of the
RestoreDrill workflow (``statemachines/restore_drill.asl.json``), one AWS action or look per
step; the workflow owns the waits, the bounds and the catches. The decisions are
``vsa_core.backups.drills`` (pure).

1. :func:`start` — the set (the newest completed one by default), one drill of the array at a
   time, the drill recorded, its workflow started (named after the drill: once per drill).
2. :func:`restore` — one io2 volume per snapshot of the set, in the array's AZ, tagged as the
   drill's (``ClientToken``: a retried step creates nothing twice); :func:`volumes_ready`.
3. :func:`launch` — the drill instance (``drills.launch_params``); :func:`node_ready` once it runs
   and its SSM agent is online.
4. :func:`attach` then :func:`attached`.
5. :func:`check` sends drill-check; :func:`checked` reads it, gives the verdict, counts it.
6. :func:`cleanup` — terminate the instance, delete the volumes, whatever happened before.
   :func:`fail` records a caught error first; :func:`on_ended` handles a run that was stopped or
   timed out (no catch runs then): the drill fails and a cleanup-only run is started.
"""

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from botocore.exceptions import ClientError

from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.callers import Caller
from vsa_core.backups.aws_context import code, tag_dict, utc_now
from vsa_core.backups.aws_registry import BackupRegistry, DrillRegistry
from vsa_core.backups.aws_restore import RESTORED_FROM_TAG
from vsa_core.backups.copies import SOURCE_VOLUME_TAG
from vsa_core.backups.drills import (
    DRILL_TAG,
    Drill,
    DrillVolume,
    choose_set,
    command_parameter,
    drill_tags,
    is_drill_resource,
    last_json_line,
    launch_params,
    new_drill_id,
    point_in_time,
    refuse_second,
    trimmed,
    verdict,
)
from vsa_core.controllers.slots import devices_for
from vsa_core.errors import (
    ArrayNotFoundError,
    BackupNotFoundError,
    ConflictError,
    DrillNotFoundError,
    DrillStepError,
)
from vsa_core.naming import drill_schedule_name

DRILLS_NAMESPACE = "VSA/Backups"
CHECK_DELIVERY_SECONDS = 600
"""SendCommand's TimeoutSeconds for drill-check: how long the command may wait to be delivered."""
RUN_COMMAND_ENDED = ("Success", "Failed", "Cancelled", "TimedOut", "DeliveryTimedOut", "ExecutionTimedOut")


@dataclass(frozen=True)
class DrillSettings:
    state_machine_arn: str
    document: str = ""
    instance_profile_arn: str = ""
    device_dir: str = "/dev/disk/by-id"
    mount_dir: str = "/run/vsa-drill"
    stack: str = ""
    """The metrics' ``Deployment`` dimension (the stack's name, as the alarms name it)."""


@dataclass(frozen=True)
class DrillContext:
    arrays: ArrayRegistry
    backups: BackupRegistry
    drills: DrillRegistry
    ec2: Any
    ssm: Any
    sfn: Any
    cloudwatch: Any
    settings: DrillSettings
    clock: Callable[[], Any] = field(default=utc_now)


def start(
    ctx: DrillContext,
    array_id: str,
    backup_id: str | None = None,
    *,
    trigger: Literal["api", "schedule"] = "api",
    by: Caller | None = None,
    drill_id: str | None = None,
) -> tuple[bool, Drill]:
    """Record a drill and start its workflow; ``(False, drill)`` when ``drill_id`` exists."""
    if drill_id is not None:
        try:
            return False, ctx.drills.get(array_id, drill_id)
        except DrillNotFoundError:
            pass  # a new one
    array = ctx.arrays.get(array_id)
    if array.deleting is not None:
        raise ConflictError(f"array {array_id!r} is being deleted: no drills")
    if by is None:
        if trigger != "schedule":
            raise ValueError("a drill requested through the API names its caller")
        by = Caller.schedule(drill_schedule_name(array_id))
    backup = choose_set(ctx.backups.sets(array_id), backup_id)
    refuse_second(ctx.drills.drills(array_id))
    policy = array.spec.backup.drill if array.spec.backup else None
    now = ctx.clock()
    drill = Drill(
        drill_id=drill_id or new_drill_id(now),
        array_id=array_id,
        backup_id=backup.backup_id,
        trigger=trigger,
        started_at=now,
        set_created_at=point_in_time(backup),
        max_rpo_hours=policy.max_rpo_hours if policy else None,
        message="restoring the set's volumes",
        by=by,
    )
    created, drill = ctx.drills.create(drill)
    if created:
        _start_run(ctx, drill, cleanup_only=False)
    return created, drill


def start_scheduled(ctx: DrillContext, array_id: str, event_id: str, at: datetime) -> dict[str, Any]:
    """A drill schedule's event: a drill named after the event (a redelivery starts nothing
    new). Skipped, not retried, for an array gone, without a completed set or with a drill still
    running: the next scheduled one tries again."""
    drill_id = new_drill_id(at, entropy=f"{event_id}|{array_id}")
    try:
        created, drill = start(ctx, array_id, trigger="schedule", drill_id=drill_id)
    except ArrayNotFoundError:
        return {"started": False, "reason": "unknown array"}
    except ConflictError as error:
        return {"started": False, "reason": str(error)}
    return {"started": created, "drillId": drill.drill_id, "backupId": drill.backup_id}


def _start_run(ctx: DrillContext, drill: Drill, *, cleanup_only: bool) -> None:
    name = f"{drill.drill_id}-cleanup" if cleanup_only else drill.drill_id
    payload = {"arrayId": drill.array_id, "drillId": drill.drill_id, "cleanupOnly": cleanup_only}
    with contextlib.suppress(ctx.sfn.exceptions.ExecutionAlreadyExists):  # started already
        ctx.sfn.start_execution(
            stateMachineArn=ctx.settings.state_machine_arn, name=name, input=json.dumps(payload)
        )


def _drill(ctx: DrillContext, array_id: str, drill_id: str) -> Drill:
    return ctx.drills.get(array_id, drill_id)


def restore(ctx: DrillContext, array_id: str, drill_id: str) -> dict[str, Any]:
    """One io2 volume per snapshot of the set, in the array's AZ (those made by an earlier try
    are found by their tags and client tokens, not made again)."""
    drill = _drill(ctx, array_id, drill_id)
    try:
        backup = ctx.backups.get(array_id, drill.backup_id)
    except BackupNotFoundError as error:
        raise DrillStepError(
            f"backup set {drill.backup_id} was deleted before its drill restored it"
        ) from error
    zone = ctx.arrays.get(array_id).spec.availability_zone
    made = {v.source_volume_id: v for v in drill.volumes}
    for snapshot in backup.snapshots:
        if snapshot.volume_id in made:
            continue
        tags = drill_tags(
            drill, **{SOURCE_VOLUME_TAG: snapshot.volume_id, RESTORED_FROM_TAG: backup.backup_id}
        )
        volume = ctx.ec2.create_volume(
            SnapshotId=snapshot.snapshot_id,
            AvailabilityZone=zone,
            VolumeType="io2",
            Iops=snapshot.iops or 3000,
            ClientToken=f"{drill_id}-{snapshot.volume_id}",
            TagSpecifications=[
                {"ResourceType": "volume", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
            ],
        )
        made[snapshot.volume_id] = DrillVolume(
            source_volume_id=snapshot.volume_id,
            snapshot_id=snapshot.snapshot_id,
            volume_id=volume["VolumeId"],
        )
    volumes = tuple(made[s.volume_id] for s in backup.snapshots)
    ctx.drills.save(drill.model_copy(update={"volumes": volumes, "message": "waiting for the volumes"}))
    return {"volumes": len(volumes)}


def volumes_ready(ctx: DrillContext, array_id: str, drill_id: str) -> dict[str, Any]:
    """Every restored volume available, or one in error (the drill fails)."""
    drill = _drill(ctx, array_id, drill_id)
    ids = [v.volume_id for v in drill.volumes]
    found = ctx.ec2.describe_volumes(VolumeIds=ids)["Volumes"] if ids else []
    broken = [v["VolumeId"] for v in found if v["State"] == "error"]
    if broken:
        raise DrillStepError(
            f"restored volume(s) {', '.join(broken)} are in error: EBS could not restore the set"
        )
    return {"ready": len(found) == len(ids) and all(v["State"] == "available" for v in found)}


def launch(ctx: DrillContext, array_id: str, drill_id: str) -> dict[str, Any]:
    """The drill instance (once: the drill id is the client token)."""
    drill = _drill(ctx, array_id, drill_id)
    if drill.instance_id is None:
        spec = ctx.arrays.get(array_id).spec
        reservation = ctx.ec2.run_instances(**launch_params(spec, drill, ctx.settings.instance_profile_arn))
        instance_id = reservation["Instances"][0]["InstanceId"]
        drill = ctx.drills.save(
            drill.model_copy(
                update={
                    "instance_id": instance_id,
                    "stage": "launching",
                    "message": "waiting for the drill instance",
                }
            )
        )
    return {"instanceId": drill.instance_id}


def node_ready(ctx: DrillContext, array_id: str, drill_id: str) -> dict[str, Any]:
    """The drill instance running and its SSM agent online; gone or stopped, the drill fails."""
    drill = _drill(ctx, array_id, drill_id)
    instance = _instance(ctx, drill.instance_id)
    state = instance["State"]["Name"] if instance else "gone"
    if state in ("shutting-down", "terminated", "stopping", "stopped", "gone"):
        reason = (instance or {}).get("StateReason", {}).get("Message", "")
        raise DrillStepError(
            f"the drill instance {drill.instance_id} is {state}{': ' + reason if reason else ''}"
        )
    if state != "running":
        return {"ready": False, "state": state}
    found = ctx.ssm.describe_instance_information(
        Filters=[{"Key": "InstanceIds", "Values": [drill.instance_id]}]
    )["InstanceInformationList"]
    online = bool(found) and found[0].get("PingStatus") == "Online"
    return {"ready": online, "state": "online" if online else "agent not online"}


def _instance(ctx: DrillContext, instance_id: str | None) -> dict[str, Any] | None:
    if instance_id is None:
        return None
    try:
        reservations = ctx.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    except ClientError as error:
        if code(error) == "InvalidInstanceID.NotFound":
            return None
        raise
    instances = [i for r in reservations for i in r["Instances"]]
    return instances[0] if instances else None


def attach(ctx: DrillContext, array_id: str, drill_id: str) -> dict[str, Any]:
    """Attach every restored volume not attached yet, each under a free device name."""
    drill = _drill(ctx, array_id, drill_id)
    instance = _instance(ctx, drill.instance_id) or {}
    in_use = [m["DeviceName"] for m in instance.get("BlockDeviceMappings", [])]
    attached = {m["Ebs"]["VolumeId"] for m in instance.get("BlockDeviceMappings", []) if "Ebs" in m}
    wanted = [v.volume_id for v in drill.volumes if v.volume_id not in attached]
    for volume_id, device in devices_for(wanted, in_use).items():
        try:
            ctx.ec2.attach_volume(VolumeId=volume_id, InstanceId=drill.instance_id, Device=device)
        except ClientError as error:
            if code(error) != "VolumeInUse":  # attached by an earlier try of this step
                raise
    ctx.drills.save(drill.model_copy(update={"stage": "attaching", "message": "attaching the volumes"}))
    return {"attaching": len(wanted)}


def attached(ctx: DrillContext, array_id: str, drill_id: str) -> dict[str, Any]:
    drill = _drill(ctx, array_id, drill_id)
    found = ctx.ec2.describe_volumes(VolumeIds=[v.volume_id for v in drill.volumes])["Volumes"]
    done = all(
        any(
            a["InstanceId"] == drill.instance_id and a["State"] == "attached"
            for a in v.get("Attachments", [])
        )
        for v in found
    )
    return {"ready": done and len(found) == len(drill.volumes)}


def check(ctx: DrillContext, array_id: str, drill_id: str) -> dict[str, Any]:
    """Send drill-check to the drill instance (once: a retry finds the command recorded)."""
    drill = _drill(ctx, array_id, drill_id)
    if drill.command_id is None:
        spec = ctx.arrays.get(array_id).spec
        policy = spec.backup.drill if spec.backup else None
        answer = ctx.ssm.send_command(
            DocumentName=ctx.settings.document,
            InstanceIds=[drill.instance_id],
            Comment=f"vsa drill {drill_id}",
            TimeoutSeconds=CHECK_DELIVERY_SECONDS,
            Parameters={
                "Volumes": [",".join(v.volume_id for v in drill.volumes)],
                "DeviceDir": [ctx.settings.device_dir],
                "MountDir": [ctx.settings.mount_dir],
                "Command": [command_parameter(policy.command if policy else None)],
                "CommandTimeoutSeconds": [str(policy.command_timeout_seconds if policy else 300)],
            },
        )
        drill = ctx.drills.save(
            drill.model_copy(
                update={
                    "command_id": answer["Command"]["CommandId"],
                    "stage": "checking",
                    "message": "drill-check runs on the drill instance",
                }
            )
        )
    return {"commandId": drill.command_id}


def checked(ctx: DrillContext, array_id: str, drill_id: str) -> dict[str, Any]:
    """drill-check's outcome once it ended: the verdict recorded and counted."""
    drill = _drill(ctx, array_id, drill_id)
    try:
        invocation = ctx.ssm.get_command_invocation(CommandId=drill.command_id, InstanceId=drill.instance_id)
    except ClientError as error:
        if code(error) == "InvocationDoesNotExist":
            return {"done": False}
        raise
    status = invocation["Status"]
    if status not in RUN_COMMAND_ENDED:
        return {"done": False, "status": status}
    report = last_json_line(invocation.get("StandardOutputContent", ""))
    passed, message = verdict(drill, status, report, invocation.get("StatusDetails", ""))
    now = ctx.clock()
    ended = drill.model_copy(
        update={
            "state": "passed" if passed else "failed",
            "stage": "cleaning",
            "checks": trimmed(report),
            "checks_passed_at": now if passed else None,
            "ended_at": now,
            "message": message,
        }
    )
    ctx.drills.save(ended, ending=True)
    _count(ctx, ended)
    return {"done": True, "state": ended.state}


def fail(ctx: DrillContext, array_id: str, drill_id: str, error: dict[str, Any] | None) -> dict[str, Any]:
    """A step's error caught by the workflow: the drill fails with it (unless it ended already)."""
    try:
        drill = _drill(ctx, array_id, drill_id)
    except DrillNotFoundError:
        return {"state": "unknown"}  # nothing recorded to fail; cleanup still runs
    if drill.state != "running":
        return {"state": drill.state}
    why = _error_message(error)
    ended = drill.model_copy(
        update={
            "state": "failed",
            "stage": "cleaning",
            "ended_at": ctx.clock(),
            "message": f"{drill.stage}: {why}",
        }
    )
    try:
        ctx.drills.save(ended, ending=True)
    except ConflictError:
        return {"state": _drill(ctx, array_id, drill_id).state}
    _count(ctx, ended)
    return {"state": "failed"}


def _error_message(error: dict[str, Any] | None) -> str:
    if not error:
        return "the workflow stopped the drill"
    cause = error.get("Cause") or ""
    try:
        parsed = json.loads(cause)
        cause = parsed.get("errorMessage") or cause
    except (TypeError, ValueError):
        pass
    return f"{error.get('Error', 'Error')}: {cause}".strip()


def cleanup(ctx: DrillContext, array_id: str, drill_id: str) -> dict[str, Any]:
    """Terminate the drill instance, delete its volumes (each once it is detached): everything
    tagged as this drill's and this deployment's, whatever the record says. ``done`` once
    nothing is left; what is still there is recorded as ``leftovers`` either way."""
    filters = [{"Name": f"tag:{DRILL_TAG}", "Values": [drill_id]}]
    left = _end_instances(ctx, drill_id, filters) + _delete_volumes(ctx, drill_id, filters)
    done = not left
    try:
        drill = _drill(ctx, array_id, drill_id)
    except DrillNotFoundError:
        # no record (a run started for a drill that was never recorded): what carries its tag
        # goes all the same
        return {"done": done, "left": left, "state": "failed"}
    update: dict[str, Any] = {"leftovers": tuple(left), "cleaned_up": done}
    if done:
        update["stage"] = "done"
    with contextlib.suppress(ConflictError):  # its verdict was given meanwhile: the next look records this
        ctx.drills.save(drill.model_copy(update=update))
    return {"done": done, "left": left, "state": drill.state}


def _end_instances(ctx: DrillContext, drill_id: str, filters: list[dict[str, Any]]) -> list[str]:
    """Terminate the drill's instances; those not terminated yet."""
    left: list[str] = []
    for page in ctx.ec2.get_paginator("describe_instances").paginate(Filters=filters):
        for instance in (i for r in page["Reservations"] for i in r["Instances"]):
            state = instance["State"]["Name"]
            if state == "terminated" or not is_drill_resource(tag_dict(instance.get("Tags")), drill_id):
                continue
            if state != "shutting-down":
                ctx.ec2.terminate_instances(InstanceIds=[instance["InstanceId"]])
            left.append(instance["InstanceId"])
    return left


def _delete_volumes(ctx: DrillContext, drill_id: str, filters: list[dict[str, Any]]) -> list[str]:
    """Delete the drill's detached volumes; those still there (attached to a terminating
    instance: EC2 detaches them as it terminates)."""
    left: list[str] = []
    for page in ctx.ec2.get_paginator("describe_volumes").paginate(Filters=filters):
        for volume in page["Volumes"]:
            if volume["State"] == "deleted" or not is_drill_resource(tag_dict(volume.get("Tags")), drill_id):
                continue
            if volume["State"] == "available" and _deleted(ctx, volume["VolumeId"]):
                continue
            left.append(volume["VolumeId"])
    return left


def _deleted(ctx: DrillContext, volume_id: str) -> bool:
    try:
        ctx.ec2.delete_volume(VolumeId=volume_id)
    except ClientError as error:
        if code(error) == "InvalidVolume.NotFound":
            return True
        if code(error) != "VolumeInUse":
            raise
        return False
    return True


def on_ended(ctx: DrillContext, array_id: str, drill_id: str, status: str) -> dict[str, Any]:
    """A RestoreDrill run ended FAILED, TIMED_OUT or ABORTED. A stopped or timed-out run ran no
    catch: the drill fails with that reason, and a cleanup-only run deletes what it left (a
    run's own failure path has cleaned up already: nothing is started for it)."""
    try:
        drill = _drill(ctx, array_id, drill_id)
    except DrillNotFoundError:
        return {"state": "unknown", "cleanupStarted": False}  # a run for no recorded drill: nothing to fail
    result = fail(
        ctx, array_id, drill_id, {"Error": f"Execution{status.title()}", "Cause": _ended_cause(status)}
    )
    if drill.cleaned_up is not True:
        _start_run(ctx, drill, cleanup_only=True)
    return {**result, "cleanupStarted": drill.cleaned_up is not True}


def _ended_cause(status: str) -> str:
    return {
        "ABORTED": "the RestoreDrill run was stopped before the drill finished",
        "TIMED_OUT": "the RestoreDrill run timed out before the drill finished",
    }.get(status, "the RestoreDrill run failed before the drill finished")


def _count(ctx: DrillContext, drill: Drill) -> None:
    """The drill's metrics: failed (0/1), its RPO, its RTO when passed, and whether the RPO was
    over the policy's bound; per deployment (the alarms') and per array."""
    stack = ctx.settings.stack
    both = (
        [{"Name": "Deployment", "Value": stack}],
        [{"Name": "Deployment", "Value": stack}, {"Name": "ArrayId", "Value": drill.array_id}],
    )
    data: list[dict[str, Any]] = []
    over = drill.max_rpo_hours is not None and drill.rpo_seconds > drill.max_rpo_hours * 3600
    values = {
        "DrillsFailed": (1.0 if drill.state == "failed" else 0.0, "Count"),
        "DrillRpoSeconds": (drill.rpo_seconds, "Seconds"),
        "DrillRpoOverBound": (1.0 if over else 0.0, "Count"),
    }
    if drill.rto_seconds is not None:
        values["DrillRtoSeconds"] = (drill.rto_seconds, "Seconds")
    for name, (value, unit) in values.items():
        data.extend({"MetricName": name, "Dimensions": d, "Value": value, "Unit": unit} for d in both)
    ctx.cloudwatch.put_metric_data(Namespace=DRILLS_NAMESPACE, MetricData=data)


def drills(ctx: DrillContext, array_id: str) -> list[Drill]:
    ctx.arrays.get(array_id)  # 404 for an unknown array
    return ctx.drills.drills(array_id)


def get(ctx: DrillContext, array_id: str, drill_id: str) -> Drill:
    ctx.arrays.get(array_id)
    return ctx.drills.get(array_id, drill_id)
