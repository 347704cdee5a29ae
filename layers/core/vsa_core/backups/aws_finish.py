"""ConsistentBackup's last steps: keep what each host reported, follow the snapshots' progress,
label the set honestly (or fail it and delete its snapshots), and fail it for a caught error."""

import math
from collections.abc import Mapping, Sequence
from typing import Any

from botocore.exceptions import ClientError

from vsa_core.backups import aws_sets
from vsa_core.backups.aws_context import BackupContext, code, utc_now
from vsa_core.backups.reports import error_message, host_freezes
from vsa_core.backups.sets import (
    CONSISTENCY_TAG,
    BackupSet,
    SetLock,
    consistency,
    parse_progress,
    set_state,
)

PROGRESS_FIRST_WAIT_SECONDS = 2
PROGRESS_MAX_WAIT_SECONDS = 30


def record_hosts(
    ctx: BackupContext,
    array_id: str,
    backup_id: str,
    freezes: Sequence[Mapping[str, Any]],
    thaws: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """Keep what each host reported of its freeze and thaw (freeze-io / thaw-io reports); the
    freeze window's signals have served (every host thawed): cleared."""
    if ctx.signals is not None:
        ctx.signals.clear(array_id, backup_id)
    backup = ctx.backups.get(array_id, backup_id)
    hosts = host_freezes(freezes, thaws)
    if hosts:
        backup = ctx.backups.save(backup.model_copy(update={"hosts": hosts}), (backup.state,))
    return {"hosts": len(hosts), "longestFreezeSeconds": backup.freeze_window_seconds}


def progress(ctx: BackupContext, array_id: str, backup_id: str, last_wait: int | None) -> dict[str, Any]:
    backup = ctx.backups.get(array_id, backup_id)
    ids = [s.snapshot_id for s in backup.snapshots]
    found: dict[str, dict[str, Any]] = {}
    for snapshot_id in ids:  # one by one: a snapshot deleted behind our back is an error, not a 400
        try:
            for s in ctx.ec2.describe_snapshots(SnapshotIds=[snapshot_id])["Snapshots"]:
                found[s["SnapshotId"]] = dict(s)
        except ClientError as error:
            if code(error) != "InvalidSnapshot.NotFound":
                raise
    snapshots = tuple(
        s.model_copy(
            update={
                "state": found[s.snapshot_id]["State"],
                "progress": parse_progress(found[s.snapshot_id].get("Progress")),
                "state_message": found[s.snapshot_id].get("StateMessage"),
            }
        )
        if s.snapshot_id in found
        else s.model_copy(update={"state": "error", "state_message": "the snapshot no longer exists"})
        for s in backup.snapshots
    )
    state = set_state(snapshots)
    done = sum(1 for s in snapshots if s.state == "completed")
    backup = ctx.backups.save(
        backup.model_copy(
            update={
                "snapshots": snapshots,
                "message": f"{done} of {len(snapshots)} snapshot(s) completed",
            }
        ),
        ("snapshotting",),
    )
    wait = (
        PROGRESS_FIRST_WAIT_SECONDS
        if not last_wait
        else min(PROGRESS_MAX_WAIT_SECONDS, math.ceil(last_wait * 1.5))
    )
    return {"state": state, "completed": done, "total": len(snapshots), "waitSeconds": wait}


def finish(ctx: BackupContext, array_id: str, backup_id: str) -> dict[str, Any]:
    backup = ctx.backups.get(array_id, backup_id)
    state = set_state(backup.snapshots)
    if state != "completed":
        broken = [s for s in backup.snapshots if s.state == "error"]
        why = (
            "; ".join(
                f"{s.snapshot_id} of {s.volume_id} is in error"
                + (f": {s.state_message}" if s.state_message else "")
                for s in broken
            )
            or "no snapshots"
        )
        backup = aws_sets.fail_set(ctx, backup, f"snapshot(s) failed: {why}", expected=("snapshotting",))
        return {"state": backup.state, "failure": backup.failure}
    label, reason = consistency(
        backup.mode, backup.hosts, backup.freeze_timeout_seconds, backup.snapshot_timing
    )
    ctx.ec2.create_tags(
        Resources=[s.snapshot_id for s in backup.snapshots],
        Tags=[{"Key": CONSISTENCY_TAG, "Value": label}],
    )
    lock = _lock(ctx, array_id, backup)
    locked = f", locked ({lock.mode}) until {lock.until.isoformat()}" if lock else ""
    backup = ctx.backups.save(
        backup.model_copy(
            update={
                "state": "completed",
                "consistency": label,
                "consistency_reason": reason,
                "completed_at": utc_now(),
                "lock": lock,
                "message": f"{len(backup.snapshots)} snapshot(s) completed{locked}",
            }
        ),
        ("snapshotting",),
    )
    policy = ctx.registry.get(array_id).spec.backup
    copies = [
        {"region": c.region, "accountId": c.account_id} for c in (policy.copies if policy is not None else ())
    ]
    # the workflow starts CopyBackupSet with these destinations (none: no copy)
    return {
        "state": backup.state,
        "consistency": label,
        "reason": reason,
        "locked": bool(lock),
        "copying": bool(copies),
        "copies": copies,
    }


def _lock(ctx: BackupContext, array_id: str, backup: BackupSet) -> SetLock | None:
    """The policy's EBS snapshot lock on every snapshot of the set (None without one); the set
    can be deleted once the last of them expires. A lock that cannot be set fails the step (the
    workflow's retry, then its failure path): a policy that asks for locked sets gets no
    unlocked one labelled good."""
    policy = ctx.registry.get(array_id).spec.backup
    wanted = policy.lock if policy is not None else None
    if wanted is None:
        return None
    cool_off = {"CoolOffPeriod": wanted.cool_off_hours} if wanted.cool_off_hours is not None else {}
    expiries = [
        ctx.ec2.lock_snapshot(
            SnapshotId=s.snapshot_id, LockMode=wanted.mode, LockDuration=wanted.days, **cool_off
        )["LockExpiresOn"]
        for s in backup.snapshots
    ]
    return SetLock(mode=wanted.mode, until=max(expiries), cool_off_hours=wanted.cool_off_hours)


def fail(
    ctx: BackupContext,
    array_id: str,
    backup_id: str,
    error: Mapping[str, Any] | None,
    freezes: Sequence[Mapping[str, Any]] = (),
    thaws: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The workflow caught an error: record the hosts' reports, fail the set, delete its
    snapshots, clear its signals (every host has been thawed by then)."""
    if ctx.signals is not None:
        ctx.signals.clear(array_id, backup_id)
    backup = ctx.backups.get(array_id, backup_id)
    hosts = host_freezes(freezes, thaws)
    if hosts:
        backup = backup.model_copy(update={"hosts": hosts})
    backup = aws_sets.fail_set(ctx, backup, error_message(error), expected=(backup.state,))
    return {"state": backup.state, "failure": backup.failure}
