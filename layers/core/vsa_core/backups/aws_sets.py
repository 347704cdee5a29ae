"""A backup set's life on the AWS side outside the workflow: admit and record it and start its
ConsistentBackup execution, read sets (failing one whose workflow was stopped), delete a set
and only the snapshots this array's set created. A set records who asked for it
(``requestedBy``); a deletion is recorded in the array's history with its caller."""

import contextlib
import functools
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, Literal

from botocore.exceptions import ClientError

from vsa_core.arrays.callers import Caller, ChangeKind, ChangeRecord
from vsa_core.arrays.spec import ARRAY_TAG, DEPLOYMENT_TAG, RegisteredArray
from vsa_core.backups.aws_context import BackupContext, code, tag_dict, utc_now
from vsa_core.backups.sets import (
    BACKUP_TAG,
    BackupMode,
    BackupSet,
    SnapshotDecision,
    SnapshotRequest,
    backup_id_time,
    may_delete_snapshot,
    new_backup_id,
    snapshot_limits,
)
from vsa_core.clients import client
from vsa_core.errors import (
    BackupNotFoundError,
    ConflictError,
    InvalidBackupError,
    SnapshotLimitError,
)
from vsa_core.naming import backup_schedule_name, deployment
from vsa_core.waiters import execution_arn

DELETE_WORKERS = 8


def array(ctx: BackupContext, array_id: str) -> RegisteredArray:
    return ctx.registry.get(array_id)


def start(
    ctx: BackupContext,
    array_id: str,
    *,
    mode: BackupMode,
    label: str | None = None,
    trigger: Literal["api", "schedule"] = "api",
    backup_id: str | None = None,
    by: Caller | None = None,
) -> tuple[bool, BackupSet]:
    """Record a set and start its workflow; ``(False, set)`` if that set exists already. ``by``:
    who asked (for a scheduled set, the array's schedule when not given)."""
    if by is None:
        if trigger != "schedule":
            raise ValueError("a backup requested through the API names its caller")
        by = Caller.schedule(backup_schedule_name(array_id))
    array = ctx.registry.get(array_id)
    if array.deleting is not None:
        raise ConflictError(f"array {array_id!r} is being deleted: no new backups")
    if mode == "application":
        bare = [h.instance_id for h in array.spec.hosts if not h.mountpoints]
        if not array.spec.hosts or bare:
            raise InvalidBackupError(
                f"mode application freezes every host's mountpoints, and array {array_id!r} has "
                f"{'hosts without mountpoints: ' + ', '.join(bare) if bare else 'no hosts'}"
                ": declare the hosts' mountpoints in the spec, or ask for mode crash"
            )
    if backup_id is not None:
        try:
            return False, ctx.backups.get(array_id, backup_id)
        except BackupNotFoundError:
            pass  # a new one
    backup_id = backup_id or new_backup_id(utc_now())
    volume_ids = ctx.arrays.volume_ids(array.spec)
    decision = admission(ctx, backup_id, volume_ids, sets(ctx, array_id), max_queued=1)
    if decision.action == "refuse":
        raise SnapshotLimitError(decision.message)
    policy = array.spec.backup
    backup = BackupSet(
        backup_id=backup_id,
        array_id=array_id,
        mode=mode,
        label=label,
        created_at=backup_id_time(backup_id),
        trigger=trigger,
        requested_by=by,
        freeze_timeout_seconds=policy.freeze_timeout_seconds if policy else 10,
        message=decision.message if decision.action == "queue" else "requested",
    )
    created, backup = ctx.backups.create(backup)
    if created:
        _start_workflow(ctx, array_id, backup_id)
    return created, backup


def _start_workflow(ctx: BackupContext, array_id: str, backup_id: str) -> None:
    sfn = ctx.sfn or client("stepfunctions")
    with contextlib.suppress(sfn.exceptions.ExecutionAlreadyExists):
        sfn.start_execution(
            stateMachineArn=ctx.state_machine_arn,
            name=backup_id,
            input=json.dumps({"arrayId": array_id, "backupId": backup_id}),
        )


def admission(
    ctx: BackupContext,
    backup_id: str,
    volume_ids: Sequence[str],
    known: Sequence[BackupSet],
    max_queued: int | None = None,
) -> SnapshotDecision:
    """This set's turn under the EBS pending-snapshot limit, behind earlier waiting sets."""
    pending: dict[str, int] = {}
    for snapshot in snapshots_of_volumes(ctx, volume_ids, states=("pending", "error")):
        pending[snapshot["VolumeId"]] = pending.get(snapshot["VolumeId"], 0) + 1
    waiting = [
        SnapshotRequest(backup_id=s.backup_id, volume_ids=tuple(volume_ids))
        for s in sorted(known, key=lambda s: s.backup_id)
        if s.state == "requested" and s.backup_id < backup_id
    ]
    requests = [*waiting, SnapshotRequest(backup_id=backup_id, volume_ids=tuple(volume_ids))]
    # the workflow's own check never refuses for the queue's length (only after waiting too long)
    decisions = snapshot_limits(
        pending, requests, max_queued=len(requests) if max_queued is None else max_queued
    )
    return decisions[-1]


def snapshots_of_volumes(
    ctx: BackupContext, volume_ids: Sequence[str], states: Sequence[str] = ()
) -> list[dict[str, Any]]:
    filters: list[dict[str, Any]] = [{"Name": "volume-id", "Values": list(volume_ids)}]
    if states:
        filters.append({"Name": "status", "Values": list(states)})
    pages = ctx.ec2.get_paginator("describe_snapshots").paginate(OwnerIds=["self"], Filters=filters)
    return [dict(s) for page in pages for s in page["Snapshots"]]


def get(ctx: BackupContext, array_id: str, backup_id: str) -> BackupSet:
    ctx.registry.get(array_id)
    return _reconcile(ctx, ctx.backups.get(array_id, backup_id))


def sets(ctx: BackupContext, array_id: str) -> list[BackupSet]:
    ctx.registry.get(array_id)
    return [_reconcile(ctx, s) for s in ctx.backups.sets(array_id)]


def _reconcile(ctx: BackupContext, backup: BackupSet) -> BackupSet:
    """A set in progress whose workflow was stopped (StopExecution, a timeout) never reaches
    its own failure path: fail it here, delete its snapshots. The hosts were thawed by their
    watchdogs (freeze-io arms one before freezing anything)."""
    if not backup.in_progress or not ctx.state_machine_arn:
        return backup
    sfn = ctx.sfn or client("stepfunctions")
    try:
        status = sfn.describe_execution(executionArn=execution_arn(ctx.state_machine_arn, backup.backup_id))[
            "status"
        ]
    except ClientError as error:
        if code(error) != "ExecutionDoesNotExist":
            raise
        if (utc_now() - backup.created_at).total_seconds() < 300:
            return backup  # being started
        status = "NEVER STARTED"
    if status == "RUNNING":
        return backup
    return fail_set(
        ctx,
        backup,
        f"the workflow ended {status} while the set was {backup.state}: hosts were thawed by their "
        "watchdogs, if frozen",
        expected=(backup.state,),
    )


def delete(
    ctx: BackupContext,
    array_id: str,
    backup_id: str,
    by: Caller,
    kind: ChangeKind = "delete-backup",
    why: str = "",
) -> dict[str, Any]:
    """Delete a set: refuse one in progress; only the snapshots this array's set created. The
    request is recorded in the array's history with ``by`` (``kind``: ``prune`` for retention,
    ``why`` its reason) before anything is deleted."""
    backup = get(ctx, array_id, backup_id)
    if backup.in_progress:
        raise ConflictError(
            f"backup set {backup_id} is in progress ({backup.state}): delete it once it has "
            "completed or failed"
        )
    _refuse_locked(ctx, backup)
    ctx.registry.history.record(
        array_id,
        ChangeRecord(
            at=datetime.now(UTC),
            kind=kind,
            what=f"backup set {backup_id} ({backup.state}) deleted{why}",
            reference=backup_id,
            by=by,
        ),
    )
    if backup.state != "deleting":
        backup = ctx.backups.save(backup.model_copy(update={"state": "deleting"}), (backup.state,))
    deleted = _delete_snapshots(ctx, backup)
    ctx.backups.delete(array_id, backup_id)
    return {"backupId": backup_id, "deletedSnapshots": deleted}


def _refuse_locked(ctx: BackupContext, backup: BackupSet) -> None:
    """A set any of whose snapshots EC2 holds locked (EBS snapshot lock) is not deleted, nor
    marked deleting: the refusal says until when, and how a governance lock can be lifted."""
    ids = [s.snapshot_id for s in backup.snapshots]
    if not ids:
        return
    found = ctx.ec2.describe_locked_snapshots(SnapshotIds=ids).get("Snapshots", [])
    held = [lock for lock in found if lock.get("LockState") != "expired"]
    if not held:
        return
    last = max(held, key=lambda lock: lock["LockExpiresOn"])
    how = (
        "a principal allowed ec2:UnlockSnapshot can unlock its snapshots first"
        if all(lock["LockState"] == "governance" for lock in held)
        else "a compliance lock cannot be lifted"
    )
    raise ConflictError(
        f"backup set {backup.backup_id} is locked ({last['LockState']}) until "
        f"{last['LockExpiresOn'].isoformat()}: it can be deleted after that; {how}"
    )


def _delete_snapshots(ctx: BackupContext, backup: BackupSet) -> list[str]:
    """Every snapshot tagged with this array and set (and owned), recorded or not (a workflow
    that failed after CreateSnapshots returned); never another's."""
    pages = ctx.ec2.get_paginator("describe_snapshots").paginate(
        OwnerIds=["self"],
        Filters=[
            {"Name": f"tag:{BACKUP_TAG}", "Values": [backup.backup_id]},
            {"Name": f"tag:{ARRAY_TAG}", "Values": [backup.array_id]},
            {"Name": f"tag:{DEPLOYMENT_TAG}", "Values": [deployment()]},
        ],
    )
    doomed = [
        str(snapshot["SnapshotId"])
        for page in pages
        for snapshot in page["Snapshots"]
        if may_delete_snapshot(tag_dict(snapshot.get("Tags")), backup.array_id, backup.backup_id)
    ]
    # a set has up to one snapshot per volume (64 or more): delete them side by side, so the
    # API's DELETE stays well inside API Gateway's 29 s
    with ThreadPoolExecutor(max_workers=DELETE_WORKERS) as pool:
        list(pool.map(functools.partial(_delete_snapshot, ctx), doomed))
    return sorted(doomed)


def _delete_snapshot(ctx: BackupContext, snapshot_id: str) -> None:
    try:
        ctx.ec2.delete_snapshot(SnapshotId=snapshot_id)
    except ClientError as error:
        if code(error) != "InvalidSnapshot.NotFound":
            raise


def fail_set(ctx: BackupContext, backup: BackupSet, why: str, expected: tuple[str, ...]) -> BackupSet:
    if backup.state in ("failed", "completed", "deleting"):
        return backup
    deleted = _delete_snapshots(ctx, backup)
    note = f" (deleted {len(deleted)} snapshot(s))" if deleted else ""
    return ctx.backups.save(
        backup.model_copy(update={"state": "failed", "failure": why + note, "message": "failed"}),
        expected,
    )
