"""Backup sets copied out of the Region (and account): the copies' tags, their progress, which
copied sets a destination keeps, and a copied set as a restore in that Region reads it.

Pure and typed, no AWS. The CopyBackupSet workflow copies each snapshot of a completed set with
``CopySnapshot`` into every destination of the policy; a disaster-recovery stack in that Region
finds the copies by these tags alone (its own registry never saw the set).

The rules, in one place:

* **One set, with its labels**: every copy carries the set's id, array, consistency label and
  label, its source volume, and how many snapshots the set has, so a partial copy is never taken
  for a set.
* **Progress** (:func:`copy_state`): a copy completes when every snapshot's copy has; one in error
  fails it (the local set is still good).
* **Retention per destination** (:func:`destination_retention`): whole copied sets, oldest first;
  the ``keep`` newest complete ones stay; one still copying is never deleted; an incomplete one
  (a copy that failed part way) goes once older than a grace.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from vsa_core.arrays.spec import ARRAY_TAG, DEPLOYMENT_TAG, OWNED_TAG
from vsa_core.backups.sets import (
    BACKUP_TAG,
    CONSISTENCY_TAG,
    LABEL_TAG,
    BackupSet,
    CopyState,
    SnapshotState,
    VolumeSnapshot,
    backup_id_time,
)
from vsa_core.naming import deployment

COPY_OF_TAG = "vsa:copy-of"
"""``<source Region>/<source snapshot id>``: what a copy was made from (and how a retried step
finds the copy it made already)."""
SOURCE_VOLUME_TAG = "vsa:source-volume"
SET_SIZE_TAG = "vsa:set-snapshots"
"""How many snapshots the whole set has: fewer copies than that is not a set."""
IOPS_TAG = "vsa:source-iops"
"""The source volume's provisioned IOPS: a restore from the copy provisions as many."""


def copy_tags(backup: BackupSet, snapshot: VolumeSnapshot, source_region: str) -> dict[str, str]:
    """The tags of the copy of one snapshot of ``backup``."""
    tags = {
        ARRAY_TAG: backup.array_id,
        DEPLOYMENT_TAG: deployment(),
        BACKUP_TAG: backup.backup_id,
        OWNED_TAG: "true",
        COPY_OF_TAG: f"{source_region}/{snapshot.snapshot_id}",
        SOURCE_VOLUME_TAG: snapshot.volume_id,
        SET_SIZE_TAG: str(len(backup.snapshots)),
        "Name": f"{deployment()}-{backup.array_id}-{backup.backup_id}",
    }
    if snapshot.iops:
        tags[IOPS_TAG] = str(snapshot.iops)
    if backup.consistency:
        tags[CONSISTENCY_TAG] = backup.consistency
    if backup.label:
        tags[LABEL_TAG] = backup.label
    return tags


def copy_state(states: Iterable[SnapshotState]) -> CopyState:
    listed = list(states)
    if any(s == "error" for s in listed):
        return "failed"
    if listed and all(s == "completed" for s in listed):
        return "completed"
    return "copying"


@dataclass(frozen=True)
class CopiedSet:
    """A set as a destination holds it: its copies, read from their tags."""

    backup_id: str
    array_id: str
    size: int
    consistency: str | None
    label: str | None
    snapshots: tuple[Mapping[str, Any], ...]  # SnapshotId, State, source volume

    @property
    def created_at(self) -> datetime:
        return backup_id_time(self.backup_id)

    @property
    def state(self) -> Literal["complete", "copying", "incomplete"]:
        states = [s["State"] for s in self.snapshots]
        if any(s == "pending" for s in states):
            return "copying"
        if len(self.snapshots) == self.size and all(s == "completed" for s in states):
            return "complete"
        return "incomplete"

    def as_dict(self) -> dict[str, Any]:
        return {
            "backupId": self.backup_id,
            "arrayId": self.array_id,
            "createdAt": self.created_at.isoformat(),
            "state": self.state,
            "consistency": self.consistency,
            "label": self.label,
            "snapshots": [
                {"snapshotId": s["SnapshotId"], "sourceVolumeId": s["SourceVolumeId"], "state": s["State"]}
                for s in self.snapshots
            ],
        }


def copied_sets(snapshots: Iterable[Mapping[str, Any]]) -> list[CopiedSet]:
    """The copied sets among a destination's snapshots (DescribeSnapshots items with ``Tags``),
    newest first: only this deployment's owned copies, grouped by set."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    tags_of: dict[str, dict[str, str]] = {}
    for snapshot in snapshots:
        tags = {t["Key"]: t["Value"] for t in snapshot.get("Tags") or ()}
        if tags.get(DEPLOYMENT_TAG) != deployment() or COPY_OF_TAG not in tags or BACKUP_TAG not in tags:
            continue
        backup_id = tags[BACKUP_TAG]
        iops = tags.get(IOPS_TAG, "")
        grouped.setdefault(backup_id, []).append(
            {
                **snapshot,
                "SourceVolumeId": tags.get(SOURCE_VOLUME_TAG, ""),
                "Iops": int(iops) if iops.isdigit() else None,
            }
        )
        tags_of[backup_id] = tags
    found = []
    for backup_id, items in grouped.items():
        tags = tags_of[backup_id]
        try:
            size = int(tags.get(SET_SIZE_TAG, "0"))
            backup_id_time(backup_id)
        except ValueError:
            continue  # not one of ours after all
        found.append(
            CopiedSet(
                backup_id=backup_id,
                array_id=tags.get(ARRAY_TAG, ""),
                size=size,
                consistency=tags.get(CONSISTENCY_TAG),
                label=tags.get(LABEL_TAG),
                snapshots=tuple(sorted(items, key=lambda s: str(s["SourceVolumeId"]))),
            )
        )
    return sorted(found, key=lambda c: c.backup_id, reverse=True)


def destination_retention(
    sets: Sequence[CopiedSet], keep: int, now: datetime, grace: timedelta = timedelta(days=1)
) -> list[tuple[CopiedSet, str]]:
    """The copied sets of one array to delete in a destination, oldest first, each with why."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1 (got {keep})")
    doomed: list[tuple[CopiedSet, str]] = []
    complete = 0
    for copied in sorted(sets, key=lambda c: c.backup_id, reverse=True):
        if copied.state == "copying":
            continue
        if copied.state == "complete":
            complete += 1
            if complete > keep:
                doomed.append((copied, f"older than the {keep} newest complete copies"))
        elif now - copied.created_at > grace:
            doomed.append(
                (
                    copied,
                    f"incomplete ({len(copied.snapshots)} of {copied.size} snapshots), older than {grace}",
                )
            )
    return sorted(doomed, key=lambda d: d[0].backup_id)
