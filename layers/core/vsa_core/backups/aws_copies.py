"""Backup sets copied out of the Region (and account) on the AWS side: each step of the
CopyBackupSet workflow (``statemachines/copy_backup_set.asl.json``), one destination per call,
and what a disaster-recovery stack in the destination reads. The decisions are
``vsa_core.backups.copies`` (pure).

1. :func:`start` — ``CopySnapshot`` of every snapshot of a completed set into the destination
   (called there, ``SourceRegion`` this one), tagged as one set; for another account, each
   snapshot is shared with it first and the copy is made there by the role it gives
   (``roleArn``, assumed). A retried step finds the copies it made by their ``vsa:copy-of`` tag.
2. :func:`progress` until every copy completed (or one failed); the share is then removed.
3. :func:`retention` — whole copied sets in the destination, oldest first (``copies``).
4. :func:`fail` records a caught error on the set's copy and counts it (the set itself is good).
"""

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.spec import ARRAY_TAG, DEPLOYMENT_TAG, BackupCopy
from vsa_core.backups.aws_context import code, utc_now
from vsa_core.backups.aws_registry import BackupRegistry
from vsa_core.backups.copies import (
    COPY_OF_TAG,
    CopiedSet,
    copied_sets,
    copy_state,
    copy_tags,
    destination_retention,
)
from vsa_core.backups.sets import BackupSet, SetCopy, SnapshotCopy
from vsa_core.errors import ConflictError, CopyError
from vsa_core.naming import deployment

COPIES_NAMESPACE = "VSA/Backups"
COPY_FAILURES_METRIC = "CopyFailures"


@dataclass(frozen=True)
class CopyContext:
    arrays: ArrayRegistry
    backups: BackupRegistry
    ec2: Any
    """This Region's EC2 (the source snapshots)."""
    sts: Any
    cloudwatch: Any
    region: str
    allowed_regions: tuple[str, ...]
    """The stack's ``BackupCopyRegions``: the only Regions its role may copy into."""
    allowed_accounts: tuple[str, ...]
    """The stack's ``BackupCopyAccounts``: the only other accounts it may share with."""
    stack: str
    ec2_in: Callable[[str, dict[str, str] | None], Any]
    """``ec2_in(region, credentials)``: an EC2 client there (with an assumed role's keys)."""


def _destination(ctx: CopyContext, array_id: str, region: str, account_id: str | None) -> BackupCopy:
    policy = ctx.arrays.get(array_id).spec.backup
    for copy in policy.copies if policy else ():
        if copy.region == region and copy.account_id == account_id:
            if region not in ctx.allowed_regions:
                raise CopyError(
                    f"backup copies to {region}: the stack's BackupCopyRegions "
                    f"({', '.join(ctx.allowed_regions) or 'none'}) does not name it; update the stack "
                    "with it (its role may copy only there)"
                )
            if account_id is not None and account_id not in ctx.allowed_accounts:
                raise CopyError(
                    f"backup copies to account {account_id}: the stack's BackupCopyAccounts "
                    f"({', '.join(ctx.allowed_accounts) or 'none'}) does not name it; update the stack "
                    "with it (its role shares snapshots only with those)"
                )
            return copy
    where = f"{region}/{account_id}" if account_id else region
    raise CopyError(f"array {array_id!r}'s backup policy copies nothing to {where}")


def _dest_ec2(ctx: CopyContext, dest: BackupCopy) -> Any:
    if dest.role_arn is None:
        return ctx.ec2_in(dest.region, None)
    assumed = ctx.sts.assume_role(RoleArn=dest.role_arn, RoleSessionName=f"{deployment()}-backup-copy")
    keys = assumed["Credentials"]
    return ctx.ec2_in(
        dest.region,
        {
            "aws_access_key_id": keys["AccessKeyId"],
            "aws_secret_access_key": keys["SecretAccessKey"],
            "aws_session_token": keys["SessionToken"],
        },
    )


def _place(copy: SetCopy | BackupCopy) -> tuple[str, str | None]:
    return copy.region, copy.account_id


def _with_copy(backup: BackupSet, updated: SetCopy) -> BackupSet:
    others = tuple(c for c in backup.copies if _place(c) != _place(updated))
    return backup.model_copy(update={"copies": (*others, updated)})


def start(
    ctx: CopyContext, array_id: str, backup_id: str, region: str, account_id: str | None = None
) -> dict[str, Any]:
    """Copy every snapshot of the completed set into the destination (once each)."""
    backup = ctx.backups.get(array_id, backup_id)
    if backup.state != "completed":
        raise ConflictError(f"backup set {backup_id} is {backup.state}: only a completed set is copied")
    dest = _destination(ctx, array_id, region, account_id)
    ec2d = _dest_ec2(ctx, dest)
    if dest.account_id is not None:
        _share(ctx, backup, dest.account_id, "add")
    copies = _copy_missing(ctx, ec2d, dest, backup, {})
    record = SetCopy(region=region, account_id=account_id, snapshots=tuple(copies), started_at=utc_now())
    ctx.backups.save(_with_copy(backup, record), ("completed",))
    return {"copies": sum(1 for c in copies if c.snapshot_id), "of": len(copies), "region": region}


def _copy_missing(
    ctx: CopyContext, ec2d: Any, dest: BackupCopy, backup: BackupSet, recorded: dict[str, SnapshotCopy]
) -> list[SnapshotCopy]:
    """Every snapshot's copy: the one recorded or found (an earlier try's), else a new one, until
    the destination's limit of copies in progress (EBS: 20 per account and Region); the rest are
    copied by a later look, as earlier copies complete."""
    made = _existing_copies(ec2d, ctx.region, backup)
    copies: list[SnapshotCopy] = []
    limited = False
    for snapshot in backup.snapshots:
        have = recorded.get(snapshot.snapshot_id)
        copy_id = (have.snapshot_id if have else None) or made.get(snapshot.snapshot_id)
        if copy_id is None and not limited:
            try:
                copy_id = _copy_one(ctx, ec2d, dest, backup, snapshot)
            except ClientError as error:
                if code(error) != "ResourceLimitExceeded":
                    raise
                limited = True
        base = have or SnapshotCopy(volume_id=snapshot.volume_id, source_snapshot_id=snapshot.snapshot_id)
        copies.append(base.model_copy(update={"snapshot_id": copy_id}))
    return copies


def _copy_one(ctx: CopyContext, ec2d: Any, dest: BackupCopy, backup: BackupSet, snapshot: Any) -> str:
    tags = copy_tags(backup, snapshot, ctx.region)
    encryption = {"Encrypted": True, "KmsKeyId": dest.kms_key_id} if dest.kms_key_id else {}
    answer = ec2d.copy_snapshot(
        SourceRegion=ctx.region,
        SourceSnapshotId=snapshot.snapshot_id,
        Description=f"{backup.backup_id} of {backup.array_id}: {snapshot.volume_id} (from {ctx.region})",
        TagSpecifications=[
            {"ResourceType": "snapshot", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
        **encryption,
    )
    return str(answer["SnapshotId"])


def _existing_copies(ec2d: Any, source_region: str, backup: BackupSet) -> dict[str, str]:
    """Copies a previous try of this step made: source snapshot id -> copy id."""
    wanted = [f"{source_region}/{s.snapshot_id}" for s in backup.snapshots]
    found = ec2d.describe_snapshots(
        OwnerIds=["self"],
        Filters=[
            {"Name": f"tag:{COPY_OF_TAG}", "Values": wanted},
            {"Name": f"tag:{DEPLOYMENT_TAG}", "Values": [deployment()]},
        ],
    )["Snapshots"]
    tags = ({t["Key"]: t["Value"] for t in s.get("Tags", [])} | {"id": s["SnapshotId"]} for s in found)
    return {t[COPY_OF_TAG].split("/", 1)[1]: t["id"] for t in tags if t.get(COPY_OF_TAG) in wanted}


def _share(ctx: CopyContext, backup: BackupSet, account_id: str, operation: str) -> None:
    """Share (``add``) or unshare (``remove``) each snapshot with the destination account."""
    for snapshot in backup.snapshots:
        ctx.ec2.modify_snapshot_attribute(
            SnapshotId=snapshot.snapshot_id,
            Attribute="createVolumePermission",
            OperationType=operation,
            UserIds=[account_id],
        )


def progress(
    ctx: CopyContext, array_id: str, backup_id: str, region: str, account_id: str | None = None
) -> dict[str, Any]:
    """The copy's state from the destination's snapshots; ``done`` once completed or failed."""
    backup = ctx.backups.get(array_id, backup_id)
    record = next((c for c in backup.copies if _place(c) == (region, account_id)), None)
    if record is None:
        raise CopyError(f"backup set {backup_id} has no copy to {region} to look at: start it first")
    dest = _destination(ctx, array_id, region, account_id)
    ec2d = _dest_ec2(ctx, dest)
    recorded = {c.source_snapshot_id: c for c in record.snapshots}
    if any(c.snapshot_id is None for c in record.snapshots):
        recorded = {c.source_snapshot_id: c for c in _copy_missing(ctx, ec2d, dest, backup, recorded)}
    ids = [c.snapshot_id for c in recorded.values() if c.snapshot_id]
    found = {s["SnapshotId"]: s for s in ec2d.describe_snapshots(SnapshotIds=ids)["Snapshots"]} if ids else {}
    snapshots = tuple(
        c.model_copy(update={"state": found[c.snapshot_id]["State"]}) if c.snapshot_id in found else c
        for c in recorded.values()
    )
    state = copy_state(s.state for s in snapshots)
    update: dict[str, Any] = {"snapshots": snapshots, "state": state}
    if state == "completed":
        update["completed_at"] = utc_now()
    if state == "failed":
        broken = [
            f"{s.snapshot_id} ({found.get(s.snapshot_id, {}).get('StateMessage', 'error')})"
            for s in snapshots
            if s.state == "error"
        ]
        update["failure"] = f"copy in error in {region}: {', '.join(broken)}"
    if state != "copying" and account_id is not None:
        _share(ctx, backup, account_id, "remove")
    ctx.backups.save(_with_copy(backup, record.model_copy(update=update)), ("completed",))
    if state == "failed":
        _count_failure(ctx)
    return {"done": state != "copying", "state": state}


def retention(ctx: CopyContext, array_id: str, region: str, account_id: str | None = None) -> dict[str, Any]:
    """Delete the destination's copied sets of this array beyond its retention, whole sets."""
    dest = _destination(ctx, array_id, region, account_id)
    policy = ctx.arrays.get(array_id).spec.backup
    keep = dest.retention or (policy.retention if policy else 7)
    ec2d = _dest_ec2(ctx, dest)
    sets = [c for c in _copies_there(ec2d) if c.array_id == array_id]
    doomed = destination_retention(sets, keep, utc_now())
    deleted = []
    for copied, why in doomed:
        for snapshot in copied.snapshots:
            try:
                ec2d.delete_snapshot(SnapshotId=snapshot["SnapshotId"])
            except ClientError as error:
                if code(error) != "InvalidSnapshot.NotFound":
                    raise
        deleted.append({"backupId": copied.backup_id, "why": why})
    return {"region": region, "keep": keep, "deleted": deleted}


def _copies_there(ec2d: Any) -> list[CopiedSet]:
    pages = ec2d.get_paginator("describe_snapshots").paginate(
        OwnerIds=["self"],
        Filters=[
            {"Name": f"tag:{DEPLOYMENT_TAG}", "Values": [deployment()]},
            {"Name": "tag-key", "Values": [COPY_OF_TAG, ARRAY_TAG]},
        ],
    )
    return copied_sets(s for page in pages for s in page["Snapshots"])


def fail(
    ctx: CopyContext,
    array_id: str,
    backup_id: str,
    region: str,
    account_id: str | None,
    error: dict[str, Any] | None,
) -> dict[str, Any]:
    """A caught error: the set's copy there failed, with why (the set itself stays good)."""
    backup = ctx.backups.get(array_id, backup_id)
    why = _error_message(error)
    record = next((c for c in backup.copies if _place(c) == (region, account_id)), None)
    record = record or SetCopy(region=region, account_id=account_id, started_at=utc_now())
    failed = record.model_copy(update={"state": "failed", "failure": why})
    ctx.backups.save(_with_copy(backup, failed), ("completed",))
    _count_failure(ctx)
    return {"state": "failed", "failure": why}


def _error_message(error: dict[str, Any] | None) -> str:
    if not error:
        return "the copy failed"
    cause = error.get("Cause") or ""
    with contextlib.suppress(TypeError, ValueError, AttributeError):
        cause = json.loads(cause).get("errorMessage") or cause
    return f"{error.get('Error', 'Error')}: {cause}".strip()


def _count_failure(ctx: CopyContext) -> None:
    ctx.cloudwatch.put_metric_data(
        Namespace=COPIES_NAMESPACE,
        MetricData=[
            {
                "MetricName": COPY_FAILURES_METRIC,
                "Dimensions": [{"Name": "Deployment", "Value": ctx.stack}],
                "Value": 1,
                "Unit": "Count",
            }
        ],
    )


def summary(ctx: CopyContext, array_id: str, backup_id: str) -> dict[str, Any]:
    """Every copy of the set and its state; ``failed`` names the destinations that failed."""
    backup = ctx.backups.get(array_id, backup_id)
    return {
        "copies": {c.place: c.state for c in backup.copies},
        "failed": [c.place for c in backup.copies if c.state == "failed"],
    }


def copies_here(ctx: CopyContext, array_id: str | None = None) -> list[dict[str, Any]]:
    """The copied sets in this Region (a disaster-recovery stack reads them by their tags)."""
    found = _copies_there(ctx.ec2)
    return [c.as_dict() for c in found if array_id is None or c.array_id == array_id]
