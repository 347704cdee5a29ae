"""The apply (PUT /arrays/{id}) as a pipeline of typed values, and its decisions. Pure: no boto3.

    ApplyRequest ─validate─▶ Validated ─plan─▶ ApplyPlan ─store─▶ Stored ─start─▶ Applied ─reply─▶ answer
                                                  └─ dry run: preview (reads only) ─▶ answer

``validate``, ``store``, ``start`` and ``preview`` talk to AWS (``api.aws_apply``); ``plan``
and every decision they act on are here: what is refused, what is stored, which volumes are
deleted, whether ReconcileArray starts and what it is told, what the answer says. Each value is
frozen and carries the one before it, so a stage reads everything decided upstream from its
single argument.
"""

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vsa_core.arrays import dataplane, removals
from vsa_core.arrays.callers import Caller, ChangeRecord
from vsa_core.arrays.plan import Change
from vsa_core.arrays.removals import Mount, Removed, Unknown
from vsa_core.arrays.spec import ArraySpec, RegisteredArray
from vsa_core.errors import ConflictError, InvalidSpecError
from vsa_core.naming import group_name
from vsa_core.reconcile.plan import creation_work, left_hosts, needs_reconcile, pending_work


@dataclass(frozen=True)
class ApplyRequest:
    """One PUT: the path's array id, the body's spec, who signed it (``by``) and the options.

    ``if_match``: apply only over this version. ``dry_run``: answer the plan, change nothing.
    ``force``: remove a volume a host has mounted (or cannot tell). ``delete_removed_volumes``:
    delete the owned volumes the spec no longer lists once detached (else kept)."""

    array_id: str
    spec: ArraySpec
    by: Caller
    if_match: str | None = None
    dry_run: bool = False
    force: bool = False
    delete_removed_volumes: bool = False


@dataclass(frozen=True)
class Validated:
    """A request AWS's reads found applicable: the array as read (``current``; None: a new
    one), the spec with the settings it leaves unsaid kept, the volumes it removes, what
    ``force`` overrode (in words), and the owned volumes an earlier apply removed and kept that
    this one deletes (by id; only when it asks to)."""

    request: ApplyRequest
    current: RegisteredArray | None
    spec: ArraySpec
    removed: tuple[Removed, ...] = ()
    forced: tuple[str, ...] = ()
    earlier: tuple[str, ...] = ()


@dataclass(frozen=True)
class ApplyPlan:
    """What the apply will do. ``kept``: the array as stored when it already holds this spec
    (nothing to store; it still converges, which repairs drift). ``deletions``: the owned
    volumes to delete once detached. ``unfinished``: the version whose own apply stopped part
    way; ``last_state``: the last ReconcileArray run's state."""

    validated: Validated
    deletions: tuple[str, ...]
    left_hosts: tuple[str, ...]
    kept: RegisteredArray | None
    unfinished: int | None
    last_state: str | None

    @property
    def request(self) -> ApplyRequest:
        return self.validated.request

    @property
    def array_id(self) -> str:
        return self.validated.request.array_id

    @property
    def spec(self) -> ArraySpec:
        return self.validated.spec

    @property
    def current(self) -> RegisteredArray | None:
        return self.validated.current

    @property
    def before(self) -> ArraySpec | None:
        return self.validated.current.spec if self.validated.current is not None else None


@dataclass(frozen=True)
class Stored:
    """The array as the apply left it in the registry (``array``: the new version, or the one
    kept), and the volume modifications it started before storing (``grown``)."""

    plan: ApplyPlan
    array: RegisteredArray
    grown: tuple[Change, ...] = ()


@dataclass(frozen=True)
class Applied:
    """An apply done: the changes AWS made, the ReconcileArray run it started (None: the data
    plane did not change) and the owned volumes that run creates."""

    stored: Stored
    changes: tuple[Change, ...]
    started: dict[str, Any] | None
    creating: tuple[str, ...]

    @property
    def created(self) -> bool:
        """Whether the apply created the array (the API's 201)."""
        return self.stored.plan.current is None


def check_target(request: ApplyRequest) -> None:
    """The body names the array the path does (before anything is read)."""
    if request.spec.array_id != request.array_id:
        raise InvalidSpecError(
            f"the body's arrayId {request.spec.array_id!r} differs from the path's "
            f"{request.array_id!r}: make them equal"
        )


def check_current(request: ApplyRequest, current: RegisteredArray | None) -> None:
    """Refuse (409) an apply over another version than If-Match names, or over an array being
    deleted."""
    if request.if_match is not None:
        wanted = request.if_match.strip().strip('"')
        actual = str(current.version) if current else "none"
        if wanted != actual:
            raise ConflictError(
                f"If-Match {wanted} does not match the array's version {actual}: read the array again"
            )
    if current is not None and current.deleting is not None:
        raise ConflictError(
            f"array {request.array_id!r} is being deleted (workflow {current.deleting.execution_name}): "
            "apply again once it is gone"
        )


def overridden(found: Sequence[Mount], unknown: Sequence[Unknown], force: bool) -> tuple[str, ...]:
    """Refuse (409) removing a volume a host has mounted, or may have, unless ``force``; forced,
    what was overridden, in words (the answer's ``forced``)."""
    message = removals.refusal(list(found), list(unknown))
    if message is None:
        return ()
    if not force:
        raise ConflictError(message)
    return (
        *(f"removed although host {m.host} has {m.volume.label} mounted at {m.mountpoint}" for m in found),
        *(f"removed although host {u.host} could not tell: {u.reason}" for u in unknown),
    )


def kept_earlier(
    spec: ArraySpec, removed: Sequence[Removed], owned: Mapping[str, Mapping[str, Any]]
) -> tuple[str, ...]:
    """Owned volumes of the array (``owned``: by spec name) that an earlier apply removed and
    kept: neither listed by ``spec`` nor removed by this apply (by id)."""
    listed = {v.name for v in spec.new_volumes}
    now = {r.volume_id for r in removed}
    return tuple(
        sorted(str(v["VolumeId"]) for n, v in owned.items() if n not in listed and v["VolumeId"] not in now)
    )


def plan(validated: Validated) -> ApplyPlan:
    """The plan stage: what to store and delete, from the validated request alone."""
    current, spec = validated.current, validated.spec
    deleting = validated.request.delete_removed_volumes
    owned = tuple(r.volume_id for r in validated.removed if r.owned)
    return ApplyPlan(
        validated=validated,
        deletions=owned + validated.earlier if deleting else (),
        left_hosts=left_hosts(current.spec if current is not None else None, spec),
        kept=current if current is not None and current.spec == spec else None,
        unfinished=current.unfinished_apply() if current is not None else None,
        last_state=(current.reconcile or {}).get("state") if current is not None else None,
    )


def change_record(stored: Stored, at: datetime) -> ChangeRecord:
    """The apply as the array's history keeps it, naming its caller."""
    plan, version = stored.plan, stored.array.version
    again = " again, unchanged" if plan.kept is not None else ""
    deleting = f", deleting volumes {', '.join(plan.deletions)} once detached" if plan.deletions else ""
    return ChangeRecord(
        at=at,
        kind="apply",
        what=f"spec v{version} applied{again}{deleting}",
        reference=f"v{version}",
        by=plan.request.by,
    )


def converges(plan: ApplyPlan, creating: Sequence[str]) -> bool:
    """Whether the apply starts ReconcileArray: owned volumes to create, the stored version's
    own apply stopped part way (what it changed of the data plane is unknown, so the run
    converges on the spec whatever ``before`` says), or ``needs_reconcile``."""
    return bool(
        creating
        or plan.unfinished
        or needs_reconcile(plan.before, plan.spec, plan.last_state, deleting=bool(plan.deletions))
    )


def run_work(plan: ApplyPlan, creating: Sequence[str]) -> list[str]:
    """What the ReconcileArray run is told it will do (the answer's ``reconcile.remaining``)."""
    work = creation_work(plan.before, plan.spec, list(creating)) + pending_work(
        plan.before, plan.spec, plan.request.delete_removed_volumes, plan.validated.earlier
    )
    if plan.unfinished:
        work.insert(0, f"finishing the apply of version {plan.unfinished}, which stopped part way")
    return work


def changes(grown: Sequence[Change], applied: Sequence[Change]) -> tuple[Change, ...]:
    """The answer's changes: the volume modifications, then every other resource's change."""
    resized = {g.resource for g in grown}
    return (*grown, *(c for c in applied if c.resource not in resized))


def reply(applied: Applied) -> dict[str, Any]:
    """The answer: the stored spec, its version, the changes made, and the ReconcileArray run
    started for what remains (null when the data plane did not change)."""
    plan, array = applied.stored.plan, applied.stored.array
    return {
        "array": plan.spec.model_dump(by_alias=True, mode="json"),
        "version": array.version,
        "desiredControllers": array.desired_controllers,
        "changes": as_json(list(applied.changes)),
        "reconcile": applied.started,
        # the owned volumes the workflow creates (the API answers 202: accepted, not yet made)
        "creating": list(applied.creating) if applied.started is not None else [],
        **({"forced": list(plan.validated.forced)} if plan.validated.forced else {}),
    }


def serving(slots: Mapping[int, Mapping[str, str]]) -> list[str]:
    """The serving controllers of the array's slots (instance ids)."""
    return [s["instanceId"] for s in slots.values() if s.get("state") == "serving" and s.get("instanceId")]


def preview_reply(plan: ApplyPlan, control: Sequence[Change], controllers: Sequence[str]) -> dict[str, Any]:
    """A dry run's answer: the control plane's changes (``control``, as AWS was read) and the
    data plane's (``controllers``: the serving ones), nothing stored."""
    current = plan.current
    return {
        "dryRun": True,
        "array": plan.spec.model_dump(by_alias=True, mode="json"),
        "version": current.version if current else None,
        "desiredControllers": current.desired_controllers if current else plan.spec.min_controllers,
        "changes": as_json(list(control)) + data_plane_preview(plan, control, controllers),
    }


def data_plane_preview(
    plan: ApplyPlan, control: Sequence[Change], controllers: Sequence[str]
) -> list[dict[str, Any]]:
    """The data plane's changes a dry run answers: volumes and hosts, the roll new launch
    settings cause, and hosts' new mountpoints."""
    spec, before = plan.spec, plan.before
    data = dataplane.plan_changes(
        dataplane.spec_volumes(before.volumes) if before else [],
        dataplane.spec_volumes(spec.volumes),
        [h.instance_id for h in before.hosts] if before else [],
        [h.instance_id for h in spec.hosts],
        list(controllers),
    )
    template = next((c for c in control if c.resource.startswith("launch-template/")), None)
    if controllers and template is not None and template.action == "update":
        data.append(
            {
                "resource": f"group/{group_name(spec.array_id)}",
                "action": "roll",
                "fields": [
                    {"field": "controllers", "before": sorted(controllers), "after": len(controllers)}
                ],
            }
        )
    return data + _mountpoint_changes(before, spec)


def _mountpoint_changes(before: ArraySpec | None, spec: ArraySpec) -> list[dict[str, Any]]:
    old = {h.instance_id: h.mountpoints for h in before.hosts} if before is not None else {}
    return [
        {
            "resource": f"host/{host.instance_id}",
            "action": "update",
            "fields": [
                {
                    "field": "mountpoints",
                    "before": list(old[host.instance_id]),
                    "after": list(host.mountpoints),
                }
            ],
        }
        for host in spec.hosts
        if host.instance_id in old and old[host.instance_id] != host.mountpoints
    ]


def as_json(value: Any) -> Any:
    """Changes (``{resource, action, fields: [{field, before, after}]}``), status, as JSON values."""
    if isinstance(value, Change):
        return as_json(value.as_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return as_json(dataclasses.asdict(value))
    if hasattr(value, "model_dump"):
        return value.model_dump(by_alias=True, mode="json")
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_json(v) for v in value]
    return value
