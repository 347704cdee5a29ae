"""Retention on AWS: the policy's plan (``vsa_core.backups.sets.retention_plan``) applied,
whole sets, oldest first, never one in progress, capped per run."""

from typing import Any

from vsa_core.backups import aws_sets
from vsa_core.backups.aws_context import BackupContext, dump, utc_now
from vsa_core.backups.sets import (
    RetentionPlan,
    retention_plan,
)
from vsa_core.errors import (
    ConflictError,
    InvalidBackupError,
)


def retention(
    ctx: BackupContext, array_id: str, keep: int | None, max_deletions: int
) -> tuple[int, RetentionPlan]:
    array = ctx.registry.get(array_id)
    keep = keep or (array.spec.backup.retention if array.spec.backup else None)
    if keep is None:
        raise InvalidBackupError(
            f"array {array_id!r} has no backup policy: give keep (how many completed sets to keep)"
        )
    return keep, retention_plan(aws_sets.sets(ctx, array_id), keep, max_deletions, utc_now())


def apply_retention(
    ctx: BackupContext, array_id: str, keep: int | None, max_deletions: int
) -> dict[str, Any]:
    keep, plan = retention(ctx, array_id, keep, max_deletions)
    deleted = []
    for decision in plan.deletions:
        try:
            deleted.append(aws_sets.delete(ctx, array_id, decision.backup_id))
        except ConflictError:
            continue  # taken up meanwhile: a later run decides again
    return {"keep": keep, "plan": dump(plan.decisions), "deleted": deleted}
