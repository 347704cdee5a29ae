"""ConsistentBackup's first steps: preflight (a serving controller with every array volume
attached, every host online in SSM, the EBS limits: start, wait or refuse) and hosts_ready
(freeze-io's dry run on every host: fail fast, nothing frozen)."""

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from botocore.exceptions import ClientError

from vsa_core.arrays.aws_observe import describe_managed_nodes
from vsa_core.arrays.spec import ArraySpec, RegisteredArray
from vsa_core.backups import aws_sets
from vsa_core.backups.aws_context import BackupContext, utc_now
from vsa_core.backups.reports import command_error, freeze_key
from vsa_core.errors import (
    PreflightError,
    SnapshotLimitError,
)

SNAPSHOT_RATE_SECONDS = 15
# StartTime can read up to a second early (the local cloud reports whole seconds) and the
# Lambda's clock is not EBS's: wait a second more than the rate, or EBS refuses the set
# (SnapshotCreationPerVolumeRateExceeded) after the hosts were frozen for it
RATE_MARGIN_SECONDS = 1
"""EBS: "Wait at least 15 seconds between concurrent volume snapshots" (per volume). Preflight
applies it to the latest snapshot of each volume whatever its state, as the local cloud does
(AWS only between concurrent ones): stricter, never refused."""
MAX_QUEUE_SECONDS = 900
"""A set waits at most this long for snapshot slots, then is refused (the next schedule is near)."""
QUEUE_POLL_SECONDS = 30
THAW_MAX_POLLS = 30

Admission = Literal["start", "wait", "refuse"]


def preflight(ctx: BackupContext, array_id: str, backup_id: str) -> dict[str, Any]:
    array = ctx.registry.get(array_id)
    backup = ctx.backups.get(array_id, backup_id)
    if backup.state != "requested":
        raise PreflightError(
            f"backup set {backup_id} is {backup.state}, not requested: not starting it twice"
        )
    spec = array.spec
    volume_ids = ctx.arrays.volume_ids(spec)
    volumes = _volumes(ctx, volume_ids)
    controller, excluded = _controller(ctx, array, volume_ids, volumes)
    hosts = _hosts(ctx, spec) if backup.mode == "application" else []
    now = utc_now()
    decision = aws_sets.admission(ctx, backup_id, volume_ids, aws_sets.sets(ctx, array_id))
    waited = (now - backup.created_at).total_seconds()
    action: Admission = "start"
    message = decision.message
    wait_seconds = 0
    if decision.action != "start":
        action, wait_seconds = "wait", QUEUE_POLL_SECONDS
    else:
        rate_wait = _rate_wait(ctx, volume_ids)
        if rate_wait > 0:
            action, wait_seconds = "wait", rate_wait
            message = (
                f"waiting {rate_wait} s: a volume was snapshotted less than "
                f"{SNAPSHOT_RATE_SECONDS} s ago (EBS allows one snapshot per volume every 15 s)"
            )
    if action == "wait" and waited + wait_seconds > MAX_QUEUE_SECONDS:
        raise SnapshotLimitError(
            f"refused after waiting {waited:.0f} s for EBS snapshot slots: {message}; "
            "retry after the pending snapshots complete"
        )
    sizes = {v["VolumeId"]: v for v in volumes}
    if action == "start":
        ctx.backups.save(
            backup.model_copy(
                update={
                    "state": "freezing" if hosts else "snapshotting",
                    "controller_instance_id": controller,
                    "message": f"{len(volume_ids)} volume(s) on {controller}; {len(hosts)} host(s) to freeze",
                }
            ),
            ("requested",),
        )
    elif backup.message != message:
        ctx.backups.save(backup.model_copy(update={"message": message}), ("requested",))
    timeout = backup.freeze_timeout_seconds
    return {
        "arrayId": array_id,
        "backupId": backup_id,
        "mode": backup.mode,
        "freeze": bool(hosts),
        "freezeTimeout": timeout,
        "admission": {"action": action, "waitSeconds": wait_seconds, "message": message},
        "controller": controller,
        "excluded": excluded,
        "volumes": [
            {"volumeId": v, "volumeSize": sizes[v].get("Size"), "iops": sizes[v].get("Iops")}
            for v in volume_ids
        ],
        "hosts": [
            {
                "instanceId": h.instance_id,
                "mountpoints": ",".join(h.mountpoints),
                "freezeKey": freeze_key(backup_id, h.instance_id),
                "timeoutSeconds": str(timeout),
                # freeze-io is polled every second; past the watchdog's deadline it is moot
                "maxPolls": timeout + 5,
                "thawMaxPolls": THAW_MAX_POLLS,
            }
            for h in hosts
        ],
    }


def _volumes(ctx: BackupContext, volume_ids: Sequence[str]) -> list[dict[str, Any]]:
    if not volume_ids:
        raise PreflightError("the array has no volumes")
    try:
        pages = ctx.ec2.get_paginator("describe_volumes").paginate(VolumeIds=list(volume_ids))
        return [dict(v) for page in pages for v in page["Volumes"]]
    except ClientError as error:
        raise PreflightError(f"the array's volumes cannot be read: {error}") from None


def _controller(
    ctx: BackupContext,
    array: RegisteredArray,
    volume_ids: Sequence[str],
    volumes: Sequence[Mapping[str, Any]],
) -> tuple[str, list[str]]:
    """A serving controller with every array volume attached, and the other data volumes
    attached to it (CreateSnapshots must leave them out)."""
    slots = ctx.registry.slots(array.spec.array_id)
    serving = [item["instanceId"] for _, item in sorted(slots.items()) if item.get("state") == "serving"]
    if not serving:
        states = ", ".join(f"slot {s}: {item.get('state')}" for s, item in sorted(slots.items())) or "none"
        raise PreflightError(
            f"no serving controller (controllers: {states}): a backup snapshots the volumes through a "
            "serving controller; wait for one to finish bootstrapping"
        )
    attached_to: dict[str, set[str]] = {
        v["VolumeId"]: {a["InstanceId"] for a in v.get("Attachments", []) if a.get("State") == "attached"}
        for v in volumes
    }
    problems = []
    for instance_id in serving:
        missing = sorted(v for v in volume_ids if instance_id not in attached_to.get(v, set()))
        if missing:
            problems.append(f"{instance_id} lacks {', '.join(missing)}")
            continue
        instance = ctx.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
        root = instance.get("RootDeviceName")
        excluded = sorted(
            m["Ebs"]["VolumeId"]
            for m in instance.get("BlockDeviceMappings", [])
            if "Ebs" in m
            and m["DeviceName"] not in (root, "/dev/sda1")
            and m["Ebs"]["VolumeId"] not in volume_ids
        )
        return instance_id, excluded
    raise PreflightError(
        "no serving controller has every array volume attached (" + "; ".join(problems) + ")"
    )


def _hosts(ctx: BackupContext, spec: ArraySpec) -> list[Any]:
    ids = [h.instance_id for h in spec.hosts]
    ping = {i: n.get("PingStatus") for i, n in describe_managed_nodes(ctx.ssm, ids).items()}
    offline = [f"{i} ({ping.get(i) or 'not a managed node'})" for i in ids if ping.get(i) != "Online"]
    if offline:
        raise PreflightError(
            f"host(s) not online in SSM: {', '.join(offline)}: they cannot be frozen; bring them back "
            "or ask for mode crash"
        )
    return list(spec.hosts)


def _rate_wait(ctx: BackupContext, volume_ids: Sequence[str]) -> int:
    latest: dict[str, float] = {}
    for snapshot in aws_sets.snapshots_of_volumes(ctx, volume_ids):
        started = snapshot["StartTime"].timestamp()
        latest[snapshot["VolumeId"]] = max(latest.get(snapshot["VolumeId"], 0.0), started)
    if not latest:
        return 0
    since = ctx.clock() - max(latest.values())
    return max(0, math.ceil(SNAPSHOT_RATE_SECONDS + RATE_MARGIN_SECONDS - since))


def hosts_ready(ctx: BackupContext, checks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """After freeze-io's dry run on every host: fail fast, naming each host that cannot freeze."""
    problems = [
        f"{c.get('instanceId')}: {why}"
        for c in checks
        if (why := command_error(c, "freeze-io dry run")) is not None
    ]
    if problems:
        raise PreflightError("host(s) cannot be frozen, nothing was: " + "; ".join(problems))
    return {"ready": len(checks)}
