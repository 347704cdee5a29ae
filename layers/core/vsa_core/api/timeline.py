"""An array's timeline (pure: no boto3): what the control plane decided and did for the array,
oldest first, from records already read (``aws_timeline`` reads them).

Each source becomes :class:`Event` s: the registry's scale decisions and backup sets, the
workflows' executions (ScaleArray, BootstrapController, DrainController, ReconcileArray,
DeleteArray) and the controller group's failed activities. A decision and the ScaleArray
execution that recorded it are one event (the decision names its execution); a run that
recorded none (it failed, or held the lock busy) is an event of its own. :func:`timeline` keeps
what happened at or after ``since`` and the newest ``limit`` of those.

A stored change names its caller (``by``: an IAM principal's ARN, or ``schedule:<name>``): a
backup set carries who asked for it; the other changes are the array's history records
(``callers.ChangeRecord``: apply, delete, rotate-keys, restore, delete-backup, prune), each an
event of its own, but for a deletion whose DeleteArray run is listed: that run's event carries
its caller (:func:`attributed`). What the control plane does on its own (decisions, bootstraps,
drains, reconciles) has no ``by``.

Execution names say what a run is about (``naming``): ``scale-<array>-<hash>``,
``reconcile-<array>-v<version>[-r<time>]``, ``delete-<array>-v<version>[-r<time>]``,
``bootstrap-<instance>-<hash>``, ``drain-<instance>-<hash>``, ``lost-<instance>-<state>``.
"""

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from vsa_core.arrays.callers import ChangeRecord
from vsa_core.backups.sets import BackupSet

EventKind = Literal[
    "decision",
    "scale",
    "bootstrap",
    "drain",
    "lost",
    "reconcile",
    "delete",
    "backup",
    "group",
    "apply",
    "rotate-keys",
    "restore",
    "delete-backup",
    "prune",
]
MAX_LIMIT = 500
"""The most events one answer holds (the API's ``limit`` is 1..this)."""

_INSTANCE = r"i-[0-9a-f]{8,17}"
_CONTROLLER_RUN = re.compile(
    rf"(?P<kind>bootstrap|drain|lost)-(?P<instance>{_INSTANCE})-(?P<rest>[a-z0-9-]+)"
)
_INSTANCE_IN_TEXT = re.compile(rf"\b{_INSTANCE}\b")


@dataclass(frozen=True)
class Execution:
    """One workflow run as ListExecutions (and DescribeExecution, for a failure) answer it."""

    name: str
    status: str
    started_at: datetime
    stopped_at: datetime | None = None
    error: str | None = None
    cause: str | None = None


@dataclass(frozen=True, order=True)
class Event:
    """One thing that happened to the array. ``reference``: what to look up for more (the
    execution's name, the backup set's id, the group activity's id). ``by``: who asked for it,
    for a change a caller stored."""

    at: datetime
    kind: EventKind
    what: str
    outcome: str
    reference: str | None = None
    ended_at: datetime | None = field(default=None, compare=False)
    error: str | None = field(default=None, compare=False)
    cause: str | None = field(default=None, compare=False)
    by: str | None = field(default=None, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": self.at.astimezone(UTC).isoformat(),
            "kind": self.kind,
            "what": self.what,
            "outcome": self.outcome,
            "reference": self.reference,
            "endedAt": self.ended_at.astimezone(UTC).isoformat() if self.ended_at else None,
            "error": self.error,
            "cause": self.cause,
            "by": self.by,
        }


@dataclass(frozen=True)
class Timeline:
    events: tuple[Event, ...]
    truncated: bool
    """Events at or after ``since`` were left out to keep ``limit`` (the oldest of them)."""

    def as_dict(self) -> dict[str, Any]:
        return {"events": [e.as_dict() for e in self.events], "truncated": self.truncated}


# --- which runs are the array's ----------------------------------------------------------------


def is_array_run(kind: Literal["scale", "reconcile", "delete"], array_id: str, name: str) -> bool:
    """Whether ``name`` is a ScaleArray / ReconcileArray / DeleteArray run of ``array_id`` (and not
    of an array whose id merely starts the same: ``demo`` against ``demo-2``)."""
    array = re.escape(array_id)
    pattern = {
        "scale": rf"scale-{array}-[0-9a-f]{{20}}",
        "reconcile": rf"reconcile-{array}-v\d+(-r\d+)?",
        "delete": rf"delete-{array}-v\d+(-r\d+)?",
    }[kind]
    return re.fullmatch(pattern, name) is not None


def controller_run(name: str) -> tuple[Literal["bootstrap", "drain", "lost"], str, str] | None:
    """``(kind, instance, rest)`` of a BootstrapController / DrainController run's name (``rest``:
    the lifecycle token's hash, or for ``lost`` the instance state), else None."""
    match = _CONTROLLER_RUN.fullmatch(name)
    if match is None:
        return None
    kind: Literal["bootstrap", "drain", "lost"] = match["kind"]  # type: ignore[assignment]
    return kind, match["instance"], match["rest"]


def instances_in(text: str) -> set[str]:
    """Instance ids named in ``text`` (a group activity's description)."""
    return set(_INSTANCE_IN_TEXT.findall(text))


# --- events from each source -------------------------------------------------------------------


def _outcome(status: str) -> str:
    return status.lower().replace("_", "-")


def execution_event(kind: EventKind, run: Execution, what: str) -> Event:
    return Event(
        at=run.started_at,
        kind=kind,
        what=what,
        outcome=_outcome(run.status),
        reference=run.name,
        ended_at=run.stopped_at,
        error=run.error,
        cause=run.cause,
    )


def decision_what(decision: Mapping[str, Any]) -> str:
    """``scale-out 2 -> 4 controllers at 612,345 IOPS: <reason>``."""
    action = decision.get("action", "?")
    current, desired = decision.get("current_controllers"), decision.get("desired_controllers")
    demand = decision.get("demand_iops")
    counts = f" {current} -> {desired} controllers" if current is not None and desired is not None else ""
    iops = f" at {demand:,.0f} IOPS" if isinstance(demand, int | float) else ""
    reason = decision.get("reason")
    return f"{action}{counts}{iops}" + (f": {reason}" if reason else "")


def scale_events(
    decisions: Iterable[tuple[datetime, str, Mapping[str, Any]]], runs: Iterable[Execution]
) -> list[Event]:
    """Decisions ``(when, execution name, decision)`` and ScaleArray runs, one event per run: a
    decision carries its run's outcome (``recorded`` when the run is not in ``runs``: aged out,
    or beyond what was listed); a run without a decision says how it ended."""
    by_name = {run.name: run for run in runs}
    events = []
    for at, name, decision in decisions:
        run = by_name.pop(name, None)
        events.append(
            Event(
                at=at,
                kind="decision",
                what=decision_what(decision),
                outcome=_outcome(run.status) if run else "recorded",
                reference=name,
                ended_at=run.stopped_at if run else None,
                error=run.error if run else None,
                cause=run.cause if run else None,
            )
        )
    for run in by_name.values():
        what = "scaling run, no decision recorded" if run.status != "RUNNING" else "scaling run"
        events.append(execution_event("scale", run, what))
    return events


def controller_events(runs: Iterable[Execution], instances: Iterable[str]) -> list[Event]:
    """The BootstrapController / DrainController runs of the array's ``instances``."""
    ours = set(instances)
    events = []
    for run in runs:
        parsed = controller_run(run.name)
        if parsed is None or parsed[1] not in ours:
            continue
        kind, instance, rest = parsed
        what = {
            "bootstrap": f"controller {instance} bootstrap",
            "drain": f"controller {instance} drain",
            "lost": f"controller {instance} lost ({rest}): drained",
        }[kind]
        events.append(execution_event(kind, run, what))
    return events


def reconcile_event(run: Execution) -> Event:
    version = re.search(r"-v(\d+)", run.name)
    return execution_event(
        "reconcile", run, f"data plane converges on spec v{version[1] if version else '?'}"
    )


def delete_event(run: Execution) -> Event:
    return execution_event("delete", run, "array deletion")


def backup_event(backup: BackupSet) -> Event:
    consistency = f", {backup.consistency}" if backup.consistency else ""
    label = f" {backup.label!r}" if backup.label else ""
    snapshots = len(backup.snapshots)
    return Event(
        at=backup.created_at,
        kind="backup",
        what=f"backup{label} ({backup.mode}, {backup.trigger}{consistency}, {snapshots} snapshots)",
        outcome=backup.state,
        reference=backup.backup_id,
        ended_at=backup.completed_at,
        error="BackupFailed" if backup.failure else None,
        cause=backup.failure,
        by=backup.requested_by.principal if backup.requested_by else None,
    )


def change_event(change: ChangeRecord) -> Event:
    """A change from the array's history: recorded when it was stored."""
    return Event(
        at=change.at,
        kind=change.kind,
        what=change.what,
        outcome="recorded",
        reference=change.reference,
        by=change.by.principal,
    )


def attributed(runs: Sequence[Event], changes: Iterable[ChangeRecord]) -> list[Event]:
    """``runs`` (execution events), each carrying the caller of the change that started it (the
    same kind and reference: a deletion and its DeleteArray run), and the other changes as events
    of their own."""
    by_run = {(e.kind, e.reference): e for e in runs}
    own: list[Event] = []
    for change in changes:
        run = by_run.get((change.kind, change.reference))
        if run is not None and run.by is None:
            by_run[(change.kind, change.reference)] = dataclasses.replace(run, by=change.by.principal)
        else:
            own.append(change_event(change))
    return [*by_run.values(), *own]


def group_event(activity: Mapping[str, Any]) -> Event:
    """A controller group activity (one that failed or was cancelled: the launches and
    terminations that went well are the bootstraps and drains)."""
    return Event(
        at=activity["StartTime"],
        kind="group",
        what=str(activity.get("Description", "group activity")),
        outcome=_outcome(str(activity.get("StatusCode", "?"))),
        reference=activity.get("ActivityId"),
        ended_at=activity.get("EndTime"),
        error=str(activity.get("StatusCode")),
        cause=activity.get("StatusMessage") or activity.get("Cause"),
    )


# --- the timeline ------------------------------------------------------------------------------


def timeline(sources: Iterable[Sequence[Event]], *, since: datetime | None, limit: int) -> Timeline:
    """Every event at or after ``since``, oldest first; only the newest ``limit`` of them
    (``truncated`` says some were left out). Ties are ordered by kind, then what."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit {limit} is outside 1..{MAX_LIMIT}")
    kept = sorted(e for events in sources for e in events if since is None or e.at >= since)
    return Timeline(events=tuple(kept[-limit:]), truncated=len(kept) > limit)
