"""Restore a completed backup set: io2 Multi-Attach volumes from its snapshots in the array's
AZ, tagged back to the set, and for a new array its spec registered. Never touches the source;
nothing half-done (the volumes made so far go again on a failure). The restore is recorded with
its caller in the source array's history (and the new array's)."""

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError
from pydantic import ValidationError

from vsa_core.arrays.callers import Caller, ChangeRecord
from vsa_core.arrays.spec import ARRAY_TAG, DEPLOYMENT_TAG, ArraySpec, ExistingVolume, RegisteredArray
from vsa_core.backups import aws_sets
from vsa_core.backups.aws_context import BackupContext
from vsa_core.backups.copies import SOURCE_VOLUME_TAG, CopiedSet, copied_sets
from vsa_core.backups.sets import (
    BackupSet,
)
from vsa_core.errors import (
    ArrayNotFoundError,
    BackupNotFoundError,
    ConflictError,
    InvalidBackupError,
    RestoreError,
)
from vsa_core.naming import deployment

RESTORED_FROM_TAG = "vsa:restored-from"


def restore(
    ctx: BackupContext, array_id: str, backup_id: str, new_array_id: str | None, by: Caller
) -> dict[str, Any]:
    """io2 Multi-Attach volumes from a completed set, in the array's AZ, tagged back to the
    set; for a new array, its spec registered (the source's, these volumes as existing
    volumes). Reads the source; never changes it."""
    array = ctx.registry.get(array_id)
    backup = aws_sets.get(ctx, array_id, backup_id)
    if backup.state != "completed":
        raise ConflictError(f"backup set {backup_id} is {backup.state}: only a completed set can be restored")
    target = new_array_id or array_id
    if new_array_id is not None:
        if new_array_id == array_id:
            raise InvalidBackupError("target arrayId is the source array: a restore never touches the source")
        try:
            ctx.registry.get(new_array_id)
        except ArrayNotFoundError:
            pass
        else:
            raise ConflictError(f"array {new_array_id!r} exists: restore into a new array id")
    created: list[dict[str, str]] = []
    try:
        spec = _restore_volumes(ctx, array, backup, target, created, new_array_id, by)
    except (ClientError, ConflictError) as error:
        # nothing half-done: the volumes made so far go again, nothing stays registered
        removed, left = _delete_volumes(ctx, [v["volumeId"] for v in created])
        leftover = (
            "; NOT deleted (delete them by hand; they carry vsa:restored-from): "
            + ", ".join(f"{volume_id} ({why})" for volume_id, why in left)
            if left
            else ""
        )
        if isinstance(error, ClientError):
            code = error.response["Error"].get("Code", "?")
            message = error.response["Error"].get("Message", "")
            raise RestoreError(
                f"restore of {backup_id} failed ({error.operation_name}: {code}: {message}); "
                f"the {len(removed)} volume(s) it had created were deleted{leftover} and nothing "
                "was registered: fix the cause and restore again"
            ) from error
        if left:
            raise RestoreError(
                f"restore of {backup_id} failed ({error}); the {len(removed)} volume(s) it had "
                f"created were deleted{leftover} and nothing was registered"
            ) from error
        raise
    into = f"new array {new_array_id}" if new_array_id else "volumes only"
    volumes = ", ".join(v["volumeId"] for v in created)
    for recorded in (array_id, new_array_id) if new_array_id else (array_id,):
        ctx.registry.history.record(
            recorded,
            ChangeRecord(
                at=datetime.now(UTC),
                kind="restore",
                what=f"backup set {backup_id} of array {array_id} restored ({into}): {volumes}",
                reference=backup_id,
                by=by,
            ),
        )
    return {
        "arrayId": array_id,
        "backupId": backup_id,
        "target": {"arrayId": new_array_id} if new_array_id else {"volumesOnly": True},
        "availabilityZone": array.spec.availability_zone,
        "volumes": created,
        "registered": spec.model_dump(by_alias=True, mode="json") if spec else None,
    }


def _delete_volumes(ctx: BackupContext, volume_ids: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Delete what a failed restore made: (deleted, [(volume id, why not)]). A refusal is
    reported, never swallowed: the caller names each volume left behind and AWS's reason."""
    deleted: list[str] = []
    left: list[tuple[str, str]] = []
    for volume_id in volume_ids:
        try:
            ctx.ec2.delete_volume(VolumeId=volume_id)
            deleted.append(volume_id)
        except ClientError as error:
            left.append((volume_id, str(error.response["Error"].get("Code", "?"))))
    return deleted, left


def _restore_volumes(
    ctx: BackupContext,
    array: RegisteredArray,
    backup: BackupSet,
    target: str,
    created: list[dict[str, str]],
    new_array_id: str | None,
    by: Caller,
) -> ArraySpec | None:
    """One volume per snapshot (appended to ``created`` as made), then the new array's spec
    registered when there is one."""
    backup_id = backup.backup_id
    for snapshot in backup.snapshots:
        tags = {
            ARRAY_TAG: target,
            DEPLOYMENT_TAG: deployment(),
            RESTORED_FROM_TAG: backup_id,
            SOURCE_VOLUME_TAG: snapshot.volume_id,
            "Name": f"{deployment()}-{target}-restore-{snapshot.volume_id}",
        }
        volume = ctx.ec2.create_volume(
            SnapshotId=snapshot.snapshot_id,
            AvailabilityZone=array.spec.availability_zone,
            VolumeType="io2",
            Iops=snapshot.iops or 3000,
            MultiAttachEnabled=True,
            TagSpecifications=[
                {"ResourceType": "volume", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
            ],
        )
        created.append(
            {
                "sourceVolumeId": snapshot.volume_id,
                "snapshotId": snapshot.snapshot_id,
                "volumeId": volume["VolumeId"],
            }
        )
    if new_array_id is None:
        return None
    data = array.spec.model_dump(by_alias=True)
    data["arrayId"] = new_array_id
    data["volumes"] = [ExistingVolume(volume_id=v["volumeId"]).model_dump(by_alias=True) for v in created]
    spec = ArraySpec.model_validate(data)
    ctx.registry.create(spec, by, restored_from=backup_id)
    return spec


def copies_here(ctx: BackupContext, array_id: str | None = None) -> list[CopiedSet]:
    """The backup sets copied into this Region (and account), newest first, found by their
    copies' tags: a disaster-recovery stack's registry never saw them."""
    pages = ctx.ec2.get_paginator("describe_snapshots").paginate(
        OwnerIds=["self"],
        Filters=[
            {"Name": f"tag:{DEPLOYMENT_TAG}", "Values": [deployment()]},
            {"Name": "tag-key", "Values": ["vsa:copy-of"]},
        ],
    )
    found = copied_sets(s for page in pages for s in page["Snapshots"])
    return [c for c in found if array_id is None or c.array_id == array_id]


def restore_copy(ctx: BackupContext, backup_id: str, spec_data: dict[str, Any], by: Caller) -> dict[str, Any]:
    """Disaster recovery: a set copied into this Region restored into a new array here, one io2
    Multi-Attach volume per copied snapshot in the spec's AZ, and the spec registered with these
    volumes (its own ``volumes`` are replaced). Nothing half-done, as :func:`restore`."""
    copied = next((c for c in copies_here(ctx) if c.backup_id == backup_id), None)
    if copied is None:
        raise BackupNotFoundError(
            f"no copy of backup set {backup_id!r} in this Region: `GET /copies` lists the sets copied here"
        )
    if copied.state != "complete":
        raise ConflictError(
            f"the copy of {backup_id} here is {copied.state} ({len(copied.snapshots)} of {copied.size} "
            "snapshots): only a complete copy can be restored"
        )
    spec = _copy_spec(spec_data, copied)
    try:
        ctx.registry.get(spec.array_id)
    except ArrayNotFoundError:
        pass
    else:
        raise ConflictError(f"array {spec.array_id!r} exists: restore into a new array id")
    created: list[dict[str, str]] = []
    try:
        for snapshot in copied.snapshots:
            created.append(_copy_volume(ctx, spec, copied, snapshot))
    except ClientError as error:
        removed, left = _delete_volumes(ctx, [v["volumeId"] for v in created])
        kept = f"; NOT deleted: {', '.join(v for v, _ in left)}" if left else ""
        raise RestoreError(
            f"restore of the copy of {backup_id} failed ({error.operation_name}: "
            f"{error.response['Error'].get('Code', '?')}); the {len(removed)} volume(s) it had created "
            f"were deleted{kept} and nothing was registered: fix the cause and restore again"
        ) from error
    data = spec.model_dump(by_alias=True)
    data["volumes"] = [ExistingVolume(volume_id=v["volumeId"]).model_dump(by_alias=True) for v in created]
    registered = ArraySpec.model_validate(data)
    ctx.registry.create(registered, by, restored_from=backup_id)
    ctx.registry.history.record(
        registered.array_id,
        ChangeRecord(
            at=datetime.now(UTC),
            kind="restore",
            what=f"copy of backup set {backup_id} (array {copied.array_id}) restored into new array "
            f"{registered.array_id}: {', '.join(v['volumeId'] for v in created)}",
            reference=backup_id,
            by=by,
        ),
    )
    return {
        "backupId": backup_id,
        "sourceArrayId": copied.array_id,
        "target": {"arrayId": registered.array_id},
        "availabilityZone": registered.availability_zone,
        "volumes": created,
        "registered": registered.model_dump(by_alias=True, mode="json"),
    }


def _copy_spec(spec_data: dict[str, Any], copied: CopiedSet) -> ArraySpec:
    """The new array's spec as given, with one placeholder volume per copied snapshot until the
    restored ones exist (the spec is checked before anything is made)."""
    data = {**spec_data, "volumes": [{"volumeId": f"vol-{i:08x}"} for i, _ in enumerate(copied.snapshots)]}
    try:
        return ArraySpec.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors(include_url=False)
        )
        raise InvalidBackupError(f"the new array's spec: {problems}") from error


def _copy_volume(ctx: BackupContext, spec: ArraySpec, copied: CopiedSet, snapshot: Any) -> dict[str, str]:
    tags = {
        ARRAY_TAG: spec.array_id,
        DEPLOYMENT_TAG: deployment(),
        RESTORED_FROM_TAG: copied.backup_id,
        SOURCE_VOLUME_TAG: str(snapshot["SourceVolumeId"]),
        "Name": f"{deployment()}-{spec.array_id}-restore-{snapshot['SourceVolumeId']}",
    }
    volume = ctx.ec2.create_volume(
        SnapshotId=snapshot["SnapshotId"],
        AvailabilityZone=spec.availability_zone,
        VolumeType="io2",
        Iops=snapshot.get("Iops") or 3000,
        MultiAttachEnabled=True,
        TagSpecifications=[
            {"ResourceType": "volume", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )
    return {
        "sourceVolumeId": str(snapshot["SourceVolumeId"]),
        "snapshotId": str(snapshot["SnapshotId"]),
        "volumeId": str(volume["VolumeId"]),
    }
