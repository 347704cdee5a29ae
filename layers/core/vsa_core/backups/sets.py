"""Backup sets: what one backup of an array is, how honest its label is, what retention deletes.

Pure and typed, no AWS. The ConsistentBackup workflow feeds it what it observed (the hosts'
freeze-io / thaw-io reports, the snapshots' states, the instants around ``CreateSnapshots``)
and acts on its answers; the API shows its models.

The rules, in one place:

* **Consistency** (:func:`consistency`): a set is ``application-consistent`` only if it was asked
  for, every host froze, the snapshot was taken after the last freeze and before the first thaw,
  and every host was thawed after it (on the snapshot's signal or by thaw-io, not by its watchdog's
  deadline) within the window. Anything less is
  ``crash-consistent`` (one ``CreateSnapshots`` call: one point in time across every volume),
  with the reason.
* **State** (:func:`set_state`): any snapshot in error fails the whole set; a set completes only
  when every snapshot has.
* **Retention** (:func:`retention_plan`): whole sets only, oldest first, never a set in progress,
  never more than the per-run cap, and always the ``keep`` newest completed sets. Failed sets
  are not backups: they never count towards ``keep``, and go once they are older than a grace
  period (kept that long so the failure can be looked at).
* **EBS limits** (:func:`snapshot_limits`): at most 5 pending snapshots per io2 volume; a set
  that would exceed it waits in a short queue or is refused, with a message that says why.
"""

import hashlib
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from vsa_core.arrays.callers import Caller
from vsa_core.arrays.spec import ARRAY_TAG, DEPLOYMENT_TAG, OWNED_TAG, ArrayId, InstanceId, VolumeId
from vsa_core.naming import deployment

BackupMode = Literal["crash", "application"]
SetState = Literal["requested", "freezing", "snapshotting", "completed", "failed", "deleting"]
SnapshotState = Literal["pending", "completed", "error", "recoverable", "recovering"]
"""An EBS snapshot's ``State``."""
Consistency = Literal["application-consistent", "crash-consistent"]
Progress = Literal["completed", "failed", "pending"]

IN_PROGRESS: frozenset[SetState] = frozenset({"requested", "freezing", "snapshotting"})
"""States of a set whose workflow is still running: retention never touches these."""

MAX_PENDING_SNAPSHOTS_PER_VOLUME = 5
"""EBS allows at most 5 pending snapshots of one io2 volume."""

BACKUP_TAG = "vsa:backup"
"""Every snapshot of a set carries ``vsa:backup=<backup id>`` (and ``vsa:array``, ``vsa:owned``)."""
CONSISTENCY_TAG = "vsa:consistency"
"""Set when the set is recorded: ``application-consistent`` or ``crash-consistent``."""
LABEL_TAG = "vsa:label"
"""The operator's label, when given."""

BACKUP_ID_PATTERN = r"^bk-[0-9]{8}T[0-9]{9}Z-[0-9a-f]{8}$"
_BACKUP_ID = re.compile(BACKUP_ID_PATTERN)
BackupId = Annotated[
    str, Field(pattern=BACKUP_ID_PATTERN, description="bk-<UTC yyyymmddThhmmssmmm>Z-<8 hex>")
]
SnapshotId = Annotated[str, Field(pattern=r"^snap-[0-9a-f]{8,17}$", description="an EBS snapshot id")]
Label = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9 +\-=._:/@]{1,128}$",
        description="up to 128 letters, digits, spaces and + - = . _ : / @ (an EC2 tag value)",
    ),
]


class _Strict(BaseModel):
    # built at first use, not at import (defer_build): a handler builds only the models it validates
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, defer_build=True)


# ---------------------------------------------------------------- ids and tags


def new_backup_id(now: datetime, entropy: str | None = None) -> str:
    """``bk-<UTC yyyymmddThhmmssmmm>Z-<8 hex>``: ids sort as their sets were created.

    The suffix is random, or derived from ``entropy`` (e.g. the request's ``Idempotency-Key``
    and the array id) so that a repeated request names the same set.
    """
    if now.tzinfo is None:
        raise ValueError("new_backup_id needs an aware datetime (UTC)")
    at = now.astimezone(UTC)
    stamp = at.strftime("%Y%m%dT%H%M%S") + f"{at.microsecond // 1000:03d}Z"
    suffix = secrets.token_hex(4) if entropy is None else hashlib.sha256(entropy.encode()).hexdigest()[:8]
    return f"bk-{stamp}-{suffix}"


def backup_id_time(backup_id: str) -> datetime:
    """The UTC instant (to the millisecond) a backup id was made at."""
    if not _BACKUP_ID.fullmatch(backup_id):
        raise ValueError(f"{backup_id!r} is not a backup id (bk-<yyyymmddThhmmssmmm>Z-<8 hex>)")
    stamp = backup_id[3:21]
    return datetime.strptime(stamp[:15], "%Y%m%dT%H%M%S").replace(
        microsecond=int(stamp[15:18]) * 1000, tzinfo=UTC
    )


def snapshot_tags(array_id: str, backup_id: str, label: str | None = None) -> dict[str, str]:
    """The tags every snapshot of a set is created with (``CreateSnapshots`` TagSpecifications)."""
    tags = {
        ARRAY_TAG: array_id,
        DEPLOYMENT_TAG: deployment(),
        BACKUP_TAG: backup_id,
        OWNED_TAG: "true",
        "Name": f"{deployment()}-{array_id}-{backup_id}",
    }
    if label:
        tags[LABEL_TAG] = label
    return tags


def may_delete_snapshot(tags: Mapping[str, str], array_id: str, backup_id: str) -> bool:
    """Only a snapshot this deployment created for this array and this set may be deleted."""
    return (
        tags.get(ARRAY_TAG) == array_id
        and tags.get(DEPLOYMENT_TAG) == deployment()
        and tags.get(BACKUP_TAG) == backup_id
        and tags.get(OWNED_TAG) == "true"
    )


# ---------------------------------------------------------------- the set


class VolumeSnapshot(_Strict):
    volume_id: VolumeId = Field(alias="volumeId")
    snapshot_id: SnapshotId = Field(alias="snapshotId")
    state: SnapshotState = "pending"
    progress: int = Field(default=0, ge=0, le=100, description="percent, from the snapshot's Progress")
    state_message: str | None = Field(default=None, alias="stateMessage")
    volume_size: int | None = Field(default=None, alias="volumeSize", description="GiB, for a restore")
    iops: int | None = Field(default=None, description="the source volume's provisioned IOPS, for a restore")


def parse_progress(progress: str | None) -> int:
    """EBS reports progress as ``"45%"`` (or nothing yet)."""
    if not progress:
        return 0
    return max(0, min(100, int(progress.strip().rstrip("%") or 0)))


class HostFreeze(_Strict):
    """One host's part in an application-consistent backup, from its freeze-io and thaw-io
    reports (instants are epoch seconds, to the millisecond, on the host's clock)."""

    instance_id: InstanceId = Field(alias="instanceId")
    freeze_started_at: float | None = Field(default=None, alias="freezeStartedAt")
    froze_at: float | None = Field(default=None, alias="frozeAt", description="the last mountpoint froze")
    watchdog_deadline: float | None = Field(default=None, alias="watchdogDeadline")
    thaw_started_at: float | None = Field(default=None, alias="thawStartedAt")
    thawed_at: float | None = Field(default=None, alias="thawedAt", description="the last mountpoint thawed")
    thawed_by: Literal["signal", "thaw-io"] | None = Field(
        default=None,
        alias="thawedBy",
        description="signal: its watchdog thawed on the snapshot's thaw marker; thaw-io: the thaw-io command",
    )
    watchdog_fired: bool = Field(default=False, alias="watchdogFired")
    watchdog_fired_at: float | None = Field(default=None, alias="watchdogFiredAt")
    error: str | None = Field(default=None, description="why freezing or thawing failed")

    @property
    def window_seconds(self) -> float | None:
        """How long the host's writes were paused: first freeze started to last thaw (the
        watchdog's, when it fired before thaw-io came)."""
        if self.freeze_started_at is None:
            return None
        ends = [t for t in (self.thawed_at, self.watchdog_fired_at if self.watchdog_fired else None) if t]
        if not ends:
            return None
        return min(ends) - self.freeze_started_at


def host_freeze(
    instance_id: str,
    freeze_report: Mapping[str, Any] | None,
    thaw_report: Mapping[str, Any] | None,
    error: str | None = None,
) -> HostFreeze:
    """A :class:`HostFreeze` from the JSON reports freeze-io and thaw-io print last (either may be
    missing: the command failed, timed out, or was never sent); ``error`` adds what SSM said."""
    errors = [error] if error else []
    fields: dict[str, Any] = {"instanceId": instance_id}
    if freeze_report is not None:
        if freeze_report.get("status") == "frozen":
            fields |= {
                key: freeze_report.get(key) for key in ("freezeStartedAt", "frozeAt", "watchdogDeadline")
            }
        else:
            errors.append(f"freeze-io: {freeze_report.get('reason') or 'failed'}")
    if thaw_report is not None:
        fields["watchdogFired"] = bool(thaw_report.get("watchdogFired"))
        fields["watchdogFiredAt"] = thaw_report.get("watchdogFiredAt")
        if thaw_report.get("status") == "thawed":
            fields |= {key: thaw_report.get(key) for key in ("thawStartedAt", "thawedAt")}
            if thaw_report.get("thawedBy") in ("signal", "thaw-io"):
                fields["thawedBy"] = thaw_report["thawedBy"]
        else:
            errors.append(f"thaw-io: {thaw_report.get('reason') or 'failed'}")
    if errors:
        fields["error"] = "; ".join(errors)
    return HostFreeze.model_validate(fields)


class SnapshotTiming(_Strict):
    """When ``CreateSnapshots`` was called and when it returned (epoch seconds): the snapshots'
    point in time lies between the two."""

    requested_at: float = Field(alias="requestedAt")
    returned_at: float = Field(alias="returnedAt")


class SetLock(_Strict):
    """The EBS snapshot lock on a set's snapshots: its mode and when the last of them expires."""

    mode: Literal["governance", "compliance"]
    until: AwareDatetime
    cool_off_hours: int | None = Field(default=None, alias="coolOffHours")


CopyState = Literal["copying", "completed", "failed"]


class SnapshotCopy(_Strict):
    volume_id: VolumeId = Field(alias="volumeId")
    source_snapshot_id: SnapshotId = Field(alias="sourceSnapshotId")
    snapshot_id: SnapshotId | None = Field(
        default=None,
        alias="snapshotId",
        description="the copy, in the destination (none yet: waits for a slot)",
    )
    state: SnapshotState = "pending"


class SetCopy(_Strict):
    """The set copied to another Region (and account): one copy of each of its snapshots."""

    region: str
    account_id: str | None = Field(default=None, alias="accountId")
    state: CopyState = "copying"
    snapshots: tuple[SnapshotCopy, ...] = ()
    started_at: AwareDatetime = Field(alias="startedAt")
    completed_at: AwareDatetime | None = Field(default=None, alias="completedAt")
    failure: str | None = None

    @property
    def place(self) -> str:
        return f"{self.region}/{self.account_id}" if self.account_id else self.region


class BackupSet(_Strict):
    """One backup of an array: every volume snapshotted by one ``CreateSnapshots`` call."""

    backup_id: BackupId = Field(alias="backupId")
    array_id: ArrayId = Field(alias="arrayId")
    mode: BackupMode
    label: Label | None = None
    state: SetState = "requested"
    created_at: AwareDatetime = Field(alias="createdAt")
    snapshots: tuple[VolumeSnapshot, ...] = ()
    hosts: tuple[HostFreeze, ...] = ()
    snapshot_timing: SnapshotTiming | None = Field(default=None, alias="snapshotTiming")
    consistency: Consistency | None = None
    consistency_reason: str | None = Field(default=None, alias="consistencyReason")
    failure: str | None = Field(default=None, description="why the set failed")
    trigger: Literal["api", "schedule"] = "api"
    requested_by: Caller | None = Field(
        default=None, alias="requestedBy", description="who asked for the set (a schedule: its name)"
    )
    freeze_timeout_seconds: int = Field(default=10, alias="freezeTimeoutSeconds", ge=1, le=60)
    controller_instance_id: InstanceId | None = Field(
        default=None,
        alias="controllerInstanceId",
        description="the serving controller CreateSnapshots ran on",
    )
    message: str | None = Field(default=None, description="what the workflow waits for, or did last")
    completed_at: AwareDatetime | None = Field(default=None, alias="completedAt")
    lock: SetLock | None = Field(
        default=None, description="the EBS snapshot lock on its snapshots (the policy's lock), if any"
    )
    copies: tuple[SetCopy, ...] = Field(
        default=(), description="its copies in other Regions (accounts), as the policy's copies asked"
    )
    retention_failure: str | None = Field(
        default=None,
        alias="retentionFailure",
        description="the retention run after this set could not delete an older set, and why "
        "(this set is good; the older one stays until a run deletes it)",
    )

    @property
    def in_progress(self) -> bool:
        return self.state in IN_PROGRESS

    @property
    def freeze_window_seconds(self) -> float | None:
        """The longest pause of any host's writes (first freeze started to last thaw)."""
        windows = [w for h in self.hosts if (w := h.window_seconds) is not None]
        return max(windows) if windows else None


# ---------------------------------------------------------------- consistency and state


def consistency(
    mode: BackupMode,
    hosts: Sequence[HostFreeze],
    window_seconds: float,
    snapshot: SnapshotTiming | None = None,
) -> tuple[Consistency, str]:
    """The honest label of a set, and why.

    ``application-consistent`` needs all of: mode ``application``; at least one host; every host
    froze (no error) and was thawed on the snapshot's signal or by thaw-io, not by its watchdog's
    deadline; each host's writes paused
    no longer than ``window_seconds`` (first freeze started to last thaw); and the snapshot taken
    between every freeze and every thaw (after the last host froze, returned before the first
    began to thaw). Otherwise ``crash-consistent``: the volumes still share one point in time.
    """
    crash_reason = "one CreateSnapshots call: every volume at one point in time, host IO not paused"
    if mode == "crash":
        return "crash-consistent", f"crash mode: {crash_reason}"
    if not hosts:
        return "crash-consistent", f"no hosts to freeze: {crash_reason}"
    problems: list[str] = []
    for host in hosts:
        who = host.instance_id
        if host.error:
            problems.append(f"{who}: {host.error}")
        elif host.froze_at is None or host.freeze_started_at is None:
            problems.append(f"{who} did not report freezing")
        elif host.watchdog_fired:
            problems.append(f"{who} was thawed by its watchdog's deadline, not after the snapshot")
        elif host.thawed_at is None or host.thaw_started_at is None:
            problems.append(f"{who} did not report thawing")
        elif (window := host.window_seconds) is not None and window > window_seconds:
            problems.append(f"{who} stayed frozen {window:.3f} s, over the {window_seconds:g} s window")
    if not problems:
        if snapshot is None:
            problems.append("no record of when the snapshot was taken")
        else:
            last_froze = max(h.froze_at for h in hosts if h.froze_at is not None)
            first_thaw = min(h.thaw_started_at for h in hosts if h.thaw_started_at is not None)
            if snapshot.requested_at < last_froze:
                problems.append(
                    f"the snapshot was requested at {snapshot.requested_at:.3f}, before the last host "
                    f"froze at {last_froze:.3f}"
                )
            if snapshot.returned_at > first_thaw:
                problems.append(
                    f"the first host began to thaw at {first_thaw:.3f}, before the snapshot call "
                    f"returned at {snapshot.returned_at:.3f}"
                )
    if problems:
        return "crash-consistent", "; ".join(problems) + f" ({crash_reason})"
    longest = max(hosts, key=lambda h: h.window_seconds or 0.0)
    return (
        "application-consistent",
        f"all {len(hosts)} host(s) froze before the snapshot and were thawed after it "
        f"({_thawed_by(hosts)}); "
        f"longest pause {longest.window_seconds or 0.0:.3f} s ({longest.instance_id}), "
        f"window {window_seconds:g} s",
    )


def _thawed_by(hosts: Sequence[HostFreeze]) -> str:
    signaled = sum(h.thawed_by == "signal" for h in hosts)
    if signaled == len(hosts):
        return "on the snapshot's signal"
    if signaled == 0:
        return "by thaw-io"
    return f"{signaled} on the snapshot's signal, {len(hosts) - signaled} by thaw-io"


def set_state(snapshots: Iterable[VolumeSnapshot]) -> Progress:
    """``failed`` if any snapshot is in error (or there are none: an empty set is no backup),
    ``completed`` when every one has completed, ``pending`` otherwise."""
    states = [s.state for s in snapshots]
    if not states or "error" in states:
        return "failed"
    if all(state == "completed" for state in states):
        return "completed"
    return "pending"


# ---------------------------------------------------------------- retention


class RetentionDecision(_Strict):
    backup_id: str = Field(alias="backupId")
    created_at: AwareDatetime = Field(alias="createdAt")
    state: SetState
    action: Literal["delete", "keep", "defer"]
    """``defer``: would be deleted, but the per-run cap is reached; a later run takes it."""
    reason: str


class RetentionPlan(_Strict):
    """Every set of the array with what retention does to it and why (a dry run shows this)."""

    decisions: tuple[RetentionDecision, ...]

    @property
    def deletions(self) -> tuple[RetentionDecision, ...]:
        return tuple(d for d in self.decisions if d.action == "delete")

    @property
    def deferred(self) -> tuple[RetentionDecision, ...]:
        return tuple(d for d in self.decisions if d.action == "defer")


def _age_order(backup: BackupSet) -> tuple[datetime, str]:
    return backup.created_at, backup.backup_id


def retention_plan(
    sets: Sequence[BackupSet],
    keep: int,
    max_deletions_per_run: int,
    now: datetime,
    failed_grace: timedelta = timedelta(days=1),
) -> RetentionPlan:
    """Which of one array's sets to delete now, oldest first, each with the reason.

    * never a set in progress (requested, freezing, snapshotting), nor one being copied out;
    * the ``keep`` newest completed sets stay;
    * failed sets never count towards ``keep``; each goes once older than ``failed_grace``;
    * a set already ``deleting`` (an interrupted run) is taken up again;
    * a set whose snapshots are locked stays until its lock expires, and says until when;
    * at most ``max_deletions_per_run`` sets, the oldest candidates first; the rest are deferred.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1 (got {keep}): retention never deletes every backup")
    if max_deletions_per_run < 0:
        raise ValueError(f"max_deletions_per_run must be 0 or more (got {max_deletions_per_run})")
    if now.tzinfo is None:
        raise ValueError("retention_plan needs an aware datetime (UTC) for now")
    arrays = {s.array_id for s in sets}
    if len(arrays) > 1:
        raise ValueError(f"retention is per array; got sets of {', '.join(sorted(arrays))}")
    ids = [s.backup_id for s in sets]
    if len(ids) != len(set(ids)):
        raise ValueError("a backup set is listed twice")

    newest_first = sorted(sets, key=_age_order, reverse=True)
    completed_seen = 0
    verdicts: dict[str, tuple[Literal["delete", "keep"], str]] = {}
    for backup in newest_first:
        copying = [c.place for c in backup.copies if c.state == "copying"]
        if backup.in_progress:
            verdicts[backup.backup_id] = ("keep", f"in progress ({backup.state}): never deleted")
        elif backup.state == "completed":
            completed_seen += 1
            if completed_seen <= keep:
                verdicts[backup.backup_id] = ("keep", f"one of the {keep} newest completed sets")
            elif copying:
                # a copy reads its source snapshots until it completes
                verdicts[backup.backup_id] = (
                    "keep",
                    f"being copied to {', '.join(copying)}: kept until done",
                )
            else:
                verdicts[backup.backup_id] = ("delete", f"completed, older than the {keep} newest completed")
        elif backup.state == "failed":
            age = now - backup.created_at
            if age > failed_grace:
                verdicts[backup.backup_id] = ("delete", f"failed, and older than the {failed_grace} grace")
            else:
                verdicts[backup.backup_id] = ("keep", f"failed; kept for {failed_grace} to look at")
        else:  # deleting
            verdicts[backup.backup_id] = ("delete", "its deletion was interrupted: resuming it")

    decisions: list[RetentionDecision] = []
    deleted = 0
    for backup in sorted(sets, key=_age_order):
        action, reason = verdicts[backup.backup_id]
        if action == "delete" and backup.lock is not None and backup.lock.until > now:
            action, reason = (
                "keep",
                (
                    f"{reason}, but locked ({backup.lock.mode}) until {backup.lock.until.isoformat()}: "
                    "deleted by the first run after that"
                ),
            )
        final: Literal["delete", "keep", "defer"] = action
        if action == "delete":
            if deleted < max_deletions_per_run:
                deleted += 1
            else:
                final = "defer"
                reason = f"{reason}; over this run's cap of {max_deletions_per_run} deletions"
        decisions.append(
            RetentionDecision(
                backup_id=backup.backup_id,
                created_at=backup.created_at,
                state=backup.state,
                action=final,
                reason=reason,
            )
        )
    return RetentionPlan(decisions=tuple(decisions))


# ---------------------------------------------------------------- EBS limits


class SnapshotRequest(_Strict):
    """A set waiting to call ``CreateSnapshots`` on these volumes (in arrival order)."""

    backup_id: str = Field(alias="backupId")
    volume_ids: tuple[VolumeId, ...] = Field(alias="volumeIds", min_length=1)


class SnapshotDecision(_Strict):
    backup_id: str = Field(alias="backupId")
    action: Literal["start", "queue", "refuse"]
    message: str


def snapshot_limits(
    pending_per_volume: Mapping[str, int],
    requests: Sequence[SnapshotRequest],
    max_queued: int = 1,
    limit: int = MAX_PENDING_SNAPSHOTS_PER_VOLUME,
) -> tuple[SnapshotDecision, ...]:
    """Which waiting sets may call ``CreateSnapshots`` now, in arrival order.

    A set starts when every one of its volumes has fewer than ``limit`` pending snapshots
    (counting those of sets started before it in this call) and no earlier set waits (first
    come, first served). Otherwise it waits, up to ``max_queued`` sets (the pending snapshots
    will complete), and beyond that it is refused: a longer queue only makes backups later than
    the next schedule's.
    """
    pending = dict(pending_per_volume)
    decisions: list[SnapshotDecision] = []
    queued = 0
    first_waiting = ""
    for request in requests:
        full = sorted(v for v in set(request.volume_ids) if pending.get(v, 0) >= limit)
        if not full and not queued:
            for volume in set(request.volume_ids):
                pending[volume] = pending.get(volume, 0) + 1
            decisions.append(
                SnapshotDecision(
                    backup_id=request.backup_id,
                    action="start",
                    message=f"{len(set(request.volume_ids))} volume(s), each under {limit} pending snapshots",
                )
            )
            continue
        if full:
            why = (
                f"{', '.join(f'{v} has {pending.get(v, 0)}' for v in full)} pending snapshot(s); "
                f"EBS allows {limit} per io2 volume"
            )
        else:
            why = f"behind {first_waiting}, which waits for snapshot slots"
        if queued < max_queued:
            queued += 1
            first_waiting = first_waiting or request.backup_id
            decisions.append(
                SnapshotDecision(
                    backup_id=request.backup_id,
                    action="queue",
                    message=f"waiting: {why}; it starts when earlier snapshots complete",
                )
            )
        else:
            decisions.append(
                SnapshotDecision(
                    backup_id=request.backup_id,
                    action="refuse",
                    message=(
                        f"refused: {why}, and {queued} set(s) already wait; retry after the pending "
                        "snapshots complete"
                    ),
                )
            )
    return tuple(decisions)
