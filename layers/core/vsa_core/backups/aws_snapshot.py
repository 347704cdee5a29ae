"""ConsistentBackup's point in time: freeze-io sent to every host at once, then ONE
CreateSnapshots across every array volume once they have frozen, and thaw-io sent to every host
the moment it returns."""

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import ClientError

from vsa_core.backups.aws_context import BackupContext, code
from vsa_core.backups.sets import (
    SnapshotTiming,
    VolumeSnapshot,
    parse_progress,
    snapshot_tags,
)
from vsa_core.errors import (
    SnapshotLimitError,
    SnapshotSetError,
)

# freeze-io / thaw-io sends in flight at once (one SendCommand per host: each has its mountpoints)
SEND_WORKERS = 8


def freeze(
    ctx: BackupContext, backup_id: str, hosts: Sequence[Mapping[str, Any]], document: str
) -> dict[str, Any]:
    """Send freeze-io to every host at once (each arms its watchdog before freezing), not
    waiting: the Snapshot step checks them. A host SSM refuses is recorded as undelivered."""

    def send(host: Mapping[str, Any]) -> dict[str, Any]:
        parameters = {
            "Mountpoints": [host["mountpoints"]],
            "TimeoutSeconds": [host["timeoutSeconds"]],
            "BackupId": [host["freezeKey"]],
        }
        command_id, error = _send(ctx, document, host["instanceId"], f"vsa {backup_id} freeze", parameters)
        return {**host, "freezeCommandId": command_id, "freezeError": error}

    # side by side: the first host's freeze does not wait on the sends to all the others
    with ThreadPoolExecutor(max_workers=max(1, min(SEND_WORKERS, len(hosts)))) as pool:
        sent = list(pool.map(send, hosts))
    return {"hosts": sent, "sentAt": ctx.clock()}


def _send(
    ctx: BackupContext, document: str, instance_id: str, comment: str, parameters: dict[str, list[str]]
) -> tuple[str, str]:
    """SendCommand to one host, not waiting: (command id, "") or ("", why SSM refused)."""
    try:
        answer = ctx.ssm.send_command(
            DocumentName=document,
            InstanceIds=[instance_id],
            Comment=comment,
            TimeoutSeconds=60,
            Parameters=parameters,
        )
    except ClientError as err:
        return "", f"{code(err)}: {err.response['Error'].get('Message', '')}"
    return str(answer["Command"]["CommandId"]), ""


def _freeze_results(
    ctx: BackupContext, freezing: Mapping[str, Any], timeout: float
) -> tuple[list[dict[str, Any]], list[str]]:
    """Each host's freeze-io outcome so far, and the hosts still freezing (within the timeout)."""
    results, waiting = [], []
    late = ctx.clock() - float(freezing.get("sentAt") or 0) > timeout
    for host in freezing.get("hosts", []):
        instance = host["instanceId"]
        if not host.get("freezeCommandId"):
            results.append(
                {
                    "instanceId": instance,
                    "status": "Undelivered",
                    "stdout": "",
                    "stderr": host.get("freezeError", ""),
                }
            )
            continue
        try:
            answer = ctx.ssm.get_command_invocation(CommandId=host["freezeCommandId"], InstanceId=instance)
            status = answer["Status"]
        except ClientError as err:
            if code(err) != "InvocationDoesNotExist":
                raise
            answer, status = {}, "Pending"
        if status in ("Pending", "InProgress", "Delayed", "Cancelling"):
            if not late:
                waiting.append(instance)
                continue
            status = "GaveUp"
        results.append(
            {
                "instanceId": instance,
                "commandId": host["freezeCommandId"],
                "status": status,
                "stdout": answer.get("StandardOutputContent", ""),
                "stderr": answer.get("StandardErrorContent", "") if status != "GaveUp" else "still freezing",
            }
        )
    return results, waiting


def snapshot(
    ctx: BackupContext,
    array_id: str,
    backup_id: str,
    controller: str,
    excluded: Sequence[str],
    volumes: Sequence[Mapping[str, Any]],
    freezing: Mapping[str, Any] | None = None,
    thaw_document: str = "",
    freeze_timeout: float = 10,
) -> dict[str, Any]:
    """Once every host has frozen (or failed to, or is late): ONE CreateSnapshots call, every
    array volume at one point in time; then, at once, thaw-io sent to every host
    (``thawHosts``: each host with the command id, ``""`` when sending failed — the
    workflow's Thaw sends those again and waits for every one). While a host is still
    freezing it answers ``taken: false`` and the workflow asks again a second later."""
    freezes, waiting = _freeze_results(ctx, freezing or {}, freeze_timeout)
    if waiting:
        return {"taken": False, "waiting": waiting}
    backup = ctx.backups.get(array_id, backup_id)
    tags = snapshot_tags(array_id, backup_id, backup.label)
    requested_at = ctx.clock()
    try:
        answer = ctx.ec2.create_snapshots(
            Description=f"VSA array {array_id} backup {backup_id}",
            InstanceSpecification={
                "InstanceId": controller,
                "ExcludeBootVolume": True,
                **({"ExcludeDataVolumeIds": list(excluded)} if excluded else {}),
            },
            TagSpecifications=[
                {"ResourceType": "snapshot", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
            ],
        )
    except ClientError as error:
        if code(error) in ("ConcurrentSnapshotLimitExceeded", "SnapshotCreationPerVolumeRateExceeded"):
            raise SnapshotLimitError(f"EBS refused CreateSnapshots: {error}") from None
        raise
    returned_at = ctx.clock()
    thaw_hosts = _send_thaws(ctx, backup_id, (freezing or {}).get("hosts", []), thaw_document)
    known = {v["volumeId"]: v for v in volumes}
    taken = {s["VolumeId"]: s for s in answer["Snapshots"]}
    snapshots = tuple(
        VolumeSnapshot(
            volume_id=volume,
            snapshot_id=taken[volume]["SnapshotId"],
            state=taken[volume].get("State", "pending"),
            progress=parse_progress(taken[volume].get("Progress")),
            volume_size=known.get(volume, {}).get("volumeSize") or taken[volume].get("VolumeSize"),
            iops=known.get(volume, {}).get("iops"),
        )
        for volume in sorted(taken)
    )
    timing = SnapshotTiming(requested_at=requested_at, returned_at=returned_at)
    ctx.backups.save(
        backup.model_copy(
            update={
                "state": "snapshotting",
                "snapshots": snapshots,
                "snapshot_timing": timing,
                "message": f"CreateSnapshots returned {len(snapshots)} snapshot(s) in "
                f"{returned_at - requested_at:.3f} s",
            }
        ),
        ("freezing", "snapshotting"),
    )
    extra, missing = sorted(set(taken) - set(known)), sorted(set(known) - set(taken))
    if extra or missing:
        raise SnapshotSetError(
            f"CreateSnapshots on {controller} took {', '.join(extra) or 'no other volume'} beyond "
            f"the array and missed {', '.join(missing) or 'none'}: the set is not the array"
        )
    return {
        "taken": True,
        "freezes": freezes,
        "snapshots": len(snapshots),
        "requestedAt": requested_at,
        "returnedAt": returned_at,
        "thawHosts": thaw_hosts,
    }


def _send_thaws(
    ctx: BackupContext, backup_id: str, hosts: Sequence[Mapping[str, Any]], document: str
) -> list[dict[str, Any]]:
    """thaw-io to each host, not waiting for it (the workflow polls); a host whose command
    could not be sent is left to the workflow's Thaw (it sends again) and its watchdog."""

    def send(host: Mapping[str, Any]) -> dict[str, Any]:
        parameters = {"Mountpoints": [host["mountpoints"]], "BackupId": [host["freezeKey"]]}
        command_id = ""
        if document:
            command_id, _ = _send(ctx, document, host["instanceId"], f"vsa {backup_id} thaw", parameters)
        return {
            k: host[k] for k in ("instanceId", "mountpoints", "freezeKey", "thawMaxPolls") if k in host
        } | {"thawCommandId": command_id}

    # side by side: the last host's thaw does not wait on the sends to all the others
    with ThreadPoolExecutor(max_workers=max(1, min(SEND_WORKERS, len(hosts)))) as pool:
        return list(pool.map(send, hosts))
