"""The apply's stages that talk to AWS, each taking the value the stage before made and the
adapters it drives (``ApplyPorts``); the decisions they act on are ``api.apply``'s.

- ``validate``: reads only. The registry, then the spec against AWS, the volumes it removes, the
  hosts' mount reports: an invalid spec or a refused removal touches nothing.
- ``preview``: a dry run's plan, from reads only.
- ``store``: volume modifications first (EBS may refuse one for a while, 409, and then nothing is
  stored), then the spec, conditional on the version read (of two concurrent applies one wins,
  the other gets 409 and touched nothing), then the history naming the caller.
- ``start``: converge AWS on the stored spec, start ReconcileArray for what remains, and clear
  the apply's mark (``applying``).
"""

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from vsa_core.api import apply
from vsa_core.api.apply import Applied, ApplyPlan, ApplyRequest, Stored, Validated
from vsa_core.arrays import aws_observe, aws_removals
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_removals import MountCheck
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.removals import Removed
from vsa_core.arrays.spec import ArraySpec, RegisteredArray, keep_unsaid
from vsa_core.errors import ArrayNotFoundError, ReconcileError
from vsa_core.reconcile.aws_start import ReconcileStarter


@dataclass(frozen=True)
class ApplyPorts:
    """What an apply drives: the registry (read, conditional write, history, slots), the
    array's AWS service (validate, grow, apply, plan), the ReconcileArray starter, and where the
    hosts' mount reports are (``mounts``; None: a removal is not checked against them)."""

    registry: ArrayRegistry
    service: ArrayService
    reconcile: ReconcileStarter
    mounts: MountCheck | None = None


def validate(request: ApplyRequest, ports: ApplyPorts) -> Validated:
    """The validate stage: refuse what cannot be applied, from reads only."""
    apply.check_target(request)
    current = _read(ports.registry, request.array_id)
    apply.check_current(request, current)
    spec = keep_unsaid(current.spec if current is not None else None, request.spec)
    ports.service.validate(spec, current)
    if current is None:
        return Validated(request=request, current=None, spec=spec)
    removed = tuple(aws_removals.removed_volumes(ports.service.ctx, current.spec, spec))
    return Validated(
        request=request,
        current=current,
        spec=spec,
        removed=removed,
        forced=_mounts_overridden(request, current, removed, ports.mounts),
        earlier=_kept_earlier(ports.service, spec, removed) if request.delete_removed_volumes else (),
    )


def preview(plan: ApplyPlan, ports: ApplyPorts) -> dict[str, Any]:
    """A dry run: what an apply of the plan would change, from reads only."""
    spec, current = plan.spec, plan.current
    control = ports.service.plan(
        spec,
        current.desired_controllers if current else spec.min_controllers,
        current.roll_surge if current else 0,
        current.rekey_stages if current else None,
    )
    slots = ports.registry.slots(spec.array_id) if current else {}
    return apply.preview_reply(plan, control, apply.serving(slots))


def store(plan: ApplyPlan, ports: ApplyPorts) -> Stored:
    """The store stage: start the volume modifications, then store the spec (or, unchanged,
    only the volumes to delete) and record the apply in the array's history."""
    # volume modifications first: EBS may refuse one for a while (ConflictError, 409), and then
    # nothing is stored
    try:
        grown = tuple(ports.service.grow_volumes(plan.spec))
    except ClientError as error:
        raise ReconcileError(
            f"array {plan.array_id!r}: AWS refused to modify a volume ({_refusal(error)}); nothing was "
            "stored: fix the cause and apply again"
        ) from error
    if plan.kept is not None:
        array = plan.kept
        if plan.deletions:
            ports.reconcile.add_volume_deletions(plan.array_id, array.version, plan.deletions)
    else:
        array = ports.registry.put(
            plan.spec,
            expected_version=plan.current.version if plan.current else None,
            left_hosts=plan.left_hosts,
            delete_volumes=plan.deletions,
            by=plan.request.by,
        )
    stored = Stored(plan=plan, array=array, grown=grown)
    ports.registry.history.record(plan.array_id, apply.change_record(stored, datetime.now(UTC)))
    return stored


def start(stored: Stored, ports: ApplyPorts) -> Applied:
    """The start stage: converge AWS on the stored spec and start ReconcileArray for what
    remains; then the apply is finished (its ``applying`` mark, or the one a stopped apply
    left, is cleared)."""
    plan, array = stored.plan, stored.array
    creating = tuple(ports.service.missing_volumes(plan.spec))
    converge = apply.converges(plan, creating)
    started = None
    try:
        made = ports.service.apply(plan.spec, array.desired_controllers, array.roll_surge, array.rekey_stages)
    except ClientError as error:
        raise ReconcileError(
            f"array {plan.array_id!r} is stored (version {array.version}) but AWS refused a step of "
            f"making it so ({_refusal(error)}): fix the cause and apply again to resume"
        ) from error
    finally:
        # started after the AWS calls above, succeeded or not: the run's first step creates the
        # owned volumes and re-puts the IOPS alarms over every volume, which an apply still
        # putting them over the volumes it saw before would undo; whatever the apply left
        # undone, the run converges the data plane on the stored spec
        if converge:
            started = ports.reconcile.start(plan.array_id, array.version, apply.run_work(plan, creating))
    if array.applying is not None:
        ports.registry.applied(plan.array_id, array.applying)
    return Applied(
        stored=stored, changes=apply.changes(stored.grown, made), started=started, creating=creating
    )


def _read(registry: ArrayRegistry, array_id: str) -> RegisteredArray | None:
    try:
        return registry.get(array_id)
    except ArrayNotFoundError:
        return None


def _mounts_overridden(
    request: ApplyRequest, current: RegisteredArray, removed: tuple[Removed, ...], mounts: MountCheck | None
) -> tuple[str, ...]:
    """What the hosts of the array as stored report mounted from the removed volumes, refused
    or (forced) overridden (``apply.overridden``); nothing when their reports are not read."""
    if mounts is None:
        return ()
    hosts = [h.instance_id for h in current.spec.hosts]
    found, unknown = aws_removals.mounted(mounts, request.spec.array_id, hosts, list(removed))
    return apply.overridden(found, unknown, request.force)


def _kept_earlier(service: ArrayService, spec: ArraySpec, removed: tuple[Removed, ...]) -> tuple[str, ...]:
    return apply.kept_earlier(spec, removed, aws_observe.owned_volumes(service.ctx, spec.array_id))


def _refusal(error: ClientError) -> str:
    """AWS's refusal as the answer names it: ``Operation: Code: Message``."""
    code, message = error.response["Error"].get("Code", "?"), error.response["Error"].get("Message", "")
    return f"{error.operation_name}: {code}: {message}"
