"""Retention on AWS: the policy's plan (``vsa_core.backups.sets.retention_plan``) applied,
whole sets, oldest first, never one in progress, capped per run.

A set that AWS refuses to delete (a DeleteSnapshot refused: ``InvalidSnapshot.InUse`` for a
snapshot an AMI was registered from, say) does not stop the others, and does not make the backup
that ran retention a failed one: the workflow's step raises ``RetentionFailedError`` naming
every refused set once all were tried, and :func:`record_failure` records it on the new set and
counts it in ``VSA/Backups RetentionFailures``, whose alarm is not the backup-failed one.

Each set retention deletes is recorded (``prune``) with who ran it: the API's caller, or after a
backup the one who asked for that set (a scheduled set: the array's schedule).
"""

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from vsa_core.arrays.callers import Caller
from vsa_core.backups import aws_sets
from vsa_core.backups.aws_context import BackupContext, dump, utc_now
from vsa_core.backups.reports import error_message
from vsa_core.backups.sets import (
    BackupSet,
    RetentionPlan,
    SetLock,
    retention_plan,
)
from vsa_core.clients import client
from vsa_core.errors import (
    BackupNotFoundError,
    ConflictError,
    InvalidBackupError,
    RetentionFailedError,
)
from vsa_core.naming import backup_schedule_name

LOCK_PAGE = 100
"""Snapshot ids per DescribeLockedSnapshots call."""

RETENTION_NAMESPACE = "VSA/Backups"
RETENTION_FAILURES_METRIC = "RetentionFailures"
"""One datapoint (1) per retention run that left a set it should have deleted, per deployment
(dimension ``Deployment``: the stack's name), so one alarm watches every array."""


def retention(
    ctx: BackupContext, array_id: str, keep: int | None, max_deletions: int
) -> tuple[int, RetentionPlan]:
    array = ctx.registry.get(array_id)
    keep = keep or (array.spec.backup.retention if array.spec.backup else None)
    if keep is None:
        raise InvalidBackupError(
            f"array {array_id!r} has no backup policy: give keep (how many completed sets to keep)"
        )
    found = _with_live_locks(ctx, aws_sets.sets(ctx, array_id))
    return keep, retention_plan(found, keep, max_deletions, utc_now())


def _with_live_locks(ctx: BackupContext, found: list[BackupSet]) -> list[BackupSet]:
    """Each set with its snapshots' locks as EC2 has them now (DescribeLockedSnapshots), not as
    its record says: a lock extended, added or removed by hand since counts, an expired one does
    not."""
    ids = [s.snapshot_id for backup in found for s in backup.snapshots]
    live: dict[str, dict[str, Any]] = {}
    for start in range(0, len(ids), LOCK_PAGE):
        answer = ctx.ec2.describe_locked_snapshots(SnapshotIds=ids[start : start + LOCK_PAGE])
        live.update(
            {str(s["SnapshotId"]): s for s in answer.get("Snapshots", []) if s.get("LockState") != "expired"}
        )
    out = []
    for backup in found:
        held = [live[s.snapshot_id] for s in backup.snapshots if s.snapshot_id in live]
        lock = None
        if held:
            last = max(held, key=lambda h: h["LockExpiresOn"])
            mode = "governance" if last["LockState"] == "governance" else "compliance"
            lock = SetLock(mode=mode, until=last["LockExpiresOn"], cool_off_hours=last.get("CoolOffPeriod"))
        out.append(backup.model_copy(update={"lock": lock}))
    return out


def apply_retention(
    ctx: BackupContext, array_id: str, keep: int | None, max_deletions: int, by: Caller
) -> dict[str, Any]:
    """Delete what the plan says; every set is tried, and any AWS refused are named at the end
    (``RetentionFailedError``), after the others were deleted. ``by``: who runs it."""
    keep, plan = retention(ctx, array_id, keep, max_deletions)
    deleted = []
    refused: dict[str, str] = {}
    for decision in plan.deletions:
        try:
            deleted.append(
                aws_sets.delete(
                    ctx, array_id, decision.backup_id, by, "prune", f" by retention (keep {keep})"
                )
            )
        except ConflictError:
            continue  # taken up meanwhile: a later run decides again
        except (ClientError, BotoCoreError) as error:
            refused[decision.backup_id] = f"{type(error).__name__}: {error}"
    if refused:
        gone = f"; deleted {', '.join(d['backupId'] for d in deleted)}" if deleted else ""
        raise RetentionFailedError(
            f"retention of array {array_id} (keep {keep}) could not delete "
            + "; ".join(f"{backup_id}: {why}" for backup_id, why in sorted(refused.items()))
            + f"{gone}. The refused sets stay and the next run tries again"
        )
    return {"keep": keep, "plan": dump(plan.decisions), "deleted": deleted}


def caller_after(ctx: BackupContext, array_id: str, backup_id: str) -> Caller:
    """Who runs the retention that follows backup set ``backup_id``: whoever asked for the set
    (a scheduled one: its schedule); a set that names no one ran from the array's schedule."""
    try:
        requested = ctx.backups.get(array_id, backup_id).requested_by
    except BackupNotFoundError:
        requested = None
    return requested or Caller.schedule(backup_schedule_name(array_id))


def record_failure(
    ctx: BackupContext,
    deployment: str,
    array_id: str,
    backup_id: str,
    error: dict[str, Any] | None,
) -> dict[str, Any]:
    """Retention failed after a good set: count it (the alarm's metric) first, then record why on
    the set that ran it. The set's state is not touched: it completed."""
    why = error_message(error)
    (ctx.cloudwatch or client("cloudwatch")).put_metric_data(
        Namespace=RETENTION_NAMESPACE,
        MetricData=[
            {
                "MetricName": RETENTION_FAILURES_METRIC,
                "Dimensions": [{"Name": "Deployment", "Value": deployment}],
                "Value": 1,
                "Unit": "Count",
            }
        ],
    )
    try:
        backup = ctx.backups.get(array_id, backup_id)
    except BackupNotFoundError:
        return {"state": "gone", "retentionFailure": why}
    ctx.backups.save(backup.model_copy(update={"retention_failure": why}), (backup.state,))
    return {"state": backup.state, "retentionFailure": why}
