"""What the arrays API does, in the order that keeps an array consistent.

Apply: read the registry → validate the spec against AWS (reads only; an invalid spec touches
nothing) → store it, conditional on the version read (of two concurrent applies one wins, the
other gets 409 and touched nothing) → converge AWS to it (idempotent: re-applying the same spec
repairs drift and reports no change).

Delete: refuse while a controller bootstraps or drains → mark the array deleting (conditional on
the version read) → start the DeleteArray workflow, which tears down what the control plane
created (volumes it created only on request; never one it did not create), waits for AWS to let
go, and forgets the array. A repeated DELETE answers the same workflow.

Every change stored here names its caller (``by``, read from API Gateway's request context at
the API's edge): an apply on the SPEC item itself and in the array's history, a delete and a
keys rotation in the history (``arrays.aws_registry.ArrayHistory``).
"""

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from vsa_core.arrays import aws_keys, aws_observe, aws_removals, dataplane, removals
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_removals import MountCheck
from vsa_core.arrays.aws_reports import NodeDocuments
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.callers import Caller, ChangeRecord
from vsa_core.arrays.plan import Change
from vsa_core.arrays.spec import ArraySpec, Deletion, RegisteredArray, keep_unsaid
from vsa_core.backups.aws_registry import BackupRegistry
from vsa_core.errors import ArrayNotFoundError, ConflictError, InvalidSpecError, ReconcileError
from vsa_core.naming import delete_execution_name, group_name
from vsa_core.reconcile import aws_stop
from vsa_core.reconcile import plan as reconcile_plan
from vsa_core.reconcile.aws_start import ReconcileStarter
from vsa_core.reconcile.plan import creation_work, left_hosts, needs_reconcile, pending_work
from vsa_core.waiters import execution_arn


def _json(value: Any) -> Any:
    """Changes (``{resource, action, fields: [{field, before, after}]}``), status, as JSON values."""
    if isinstance(value, Change):
        return _json(value.as_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _json(dataclasses.asdict(value))
    if hasattr(value, "model_dump"):
        return value.model_dump(by_alias=True, mode="json")
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    return value


def _expected_version(if_match: str | None, current: RegisteredArray | None) -> None:
    if if_match is None:
        return
    wanted = if_match.strip().strip('"')
    actual = str(current.version) if current else "none"
    if wanted != actual:
        raise ConflictError(
            f"If-Match {wanted} does not match the array's version {actual}: read the array again"
        )


def apply_array(
    array_id: str,
    spec: ArraySpec,
    *,
    by: Caller,
    registry: ArrayRegistry,
    service: ArrayService,
    if_match: str | None = None,
    reconcile: ReconcileStarter | None = None,
    dry_run: bool = False,
    mounts: MountCheck | None = None,
    force: bool = False,
    delete_removed_volumes: bool = False,
) -> tuple[bool, dict[str, Any]]:
    """Create or update; ``(created, reply)`` with the stored spec, its version, the changes
    made, and the ReconcileArray run started for what remains (``reconcile``: its execution and
    the remaining work per volume and host; null when the data plane did not change).
    ``dry_run``: validate and answer the plan (control plane and data plane) without storing or
    changing anything, and start nothing. A volume the apply removes that a host has mounted (or
    may have: its report cannot tell) is refused (409, nothing changed) unless ``force``
    (``mounts``: where the hosts' reports are; None: not checked). ``delete_removed_volumes``:
    the owned volumes the spec no longer lists are deleted once detached (else kept, and the
    answer says how to delete them); a volume the array did not create never is. ``by``: who
    asked, stored with the spec and in the array's history (a dry run stores nothing)."""
    if spec.array_id != array_id:
        raise InvalidSpecError(
            f"the body's arrayId {spec.array_id!r} differs from the path's {array_id!r}: make them equal"
        )
    try:
        current: RegisteredArray | None = registry.get(array_id)
    except ArrayNotFoundError:
        current = None
    _expected_version(if_match, current)
    if current is not None and current.deleting is not None:
        raise ConflictError(
            f"array {array_id!r} is being deleted (workflow {current.deleting.execution_name}): "
            "apply again once it is gone"
        )
    spec = keep_unsaid(current.spec if current is not None else None, spec)
    service.validate(spec, current)
    removed = aws_removals.removed_volumes(service.ctx, current.spec, spec) if current is not None else []
    forced = _check_removals(current, spec, removed, mounts, force)
    earlier = _kept_earlier(service, spec, removed) if delete_removed_volumes and current is not None else []
    deletions = tuple([r.volume_id for r in removed if r.owned] + earlier) if delete_removed_volumes else ()
    if dry_run:
        return False, dry_run_plan(spec, current, registry=registry, service=service)
    try:
        # Volume modifications first: EBS may refuse one for a while (ConflictError, 409), and
        # then nothing is stored.
        grown = service.grow_volumes(spec)
    except ClientError as error:
        code, message = error.response["Error"].get("Code", "?"), error.response["Error"].get("Message", "")
        raise ReconcileError(
            f"array {array_id!r}: AWS refused to modify a volume ({error.operation_name}: {code}: "
            f"{message}); nothing was stored: fix the cause and apply again"
        ) from error
    before = current.spec if current is not None else None
    if current is not None and current.spec == spec:
        stored = current  # nothing new to store; still converge (repairs drift)
        if deletions and reconcile is not None:
            reconcile.add_volume_deletions(array_id, current.version, deletions)
    else:
        stored = registry.put(
            spec,
            expected_version=current.version if current else None,
            left_hosts=left_hosts(before, spec),
            delete_volumes=deletions,
            by=by,
        )
    unchanged = " again, unchanged" if stored is current else ""
    registry.history.record(
        array_id,
        ChangeRecord(
            at=datetime.now(UTC),
            kind="apply",
            what=f"spec v{stored.version} applied{unchanged}"
            + (f", deleting volumes {', '.join(deletions)} once detached" if deletions else ""),
            reference=f"v{stored.version}",
            by=by,
        ),
    )
    last_state = (current.reconcile or {}).get("state") if current is not None else None
    creating = service.missing_volumes(spec)
    started = None
    # the stored version's own apply stopped part way (``applying`` still names it): what it
    # changed of the data plane is unknown, so this apply's run converges on the spec whatever
    # ``before`` says
    unfinished = current.unfinished_apply() if current is not None else None
    converge = reconcile is not None and bool(
        creating or unfinished or needs_reconcile(before, spec, last_state, deleting=bool(deletions))
    )
    try:
        applied = service.apply(spec, stored.desired_controllers, stored.roll_surge, stored.rekey_stages)
        changes = grown + [c for c in applied if c.resource not in {g.resource for g in grown}]
    except ClientError as error:
        code, message = error.response["Error"].get("Code", "?"), error.response["Error"].get("Message", "")
        raise ReconcileError(
            f"array {array_id!r} is stored (version {stored.version}) but AWS refused a step of making "
            f"it so ({error.operation_name}: {code}: {message}): fix the cause and apply again to resume"
        ) from error
    finally:
        # started after the AWS calls above, succeeded or not: the run's first step creates the
        # owned volumes and re-puts the IOPS alarms over every volume, which an apply still
        # putting them over the volumes it saw before would undo; whatever the apply left
        # undone, the run converges the data plane on the stored spec
        if converge and reconcile is not None:
            work = creation_work(before, spec, creating) + pending_work(
                before, spec, delete_removed_volumes, tuple(earlier)
            )
            if unfinished:
                work.insert(0, f"finishing the apply of version {unfinished}, which stopped part way")
            started = reconcile.start(array_id, stored.version, work)
    if stored.applying is not None:  # this apply's mark, or the one a stopped apply left
        registry.applied(array_id, stored.applying)
    return current is None, {
        "array": spec.model_dump(by_alias=True, mode="json"),
        "version": stored.version,
        "desiredControllers": stored.desired_controllers,
        "changes": _json(changes),
        "reconcile": started,
        # the owned volumes the workflow creates (the API answers 202: accepted, not yet made)
        "creating": creating if started is not None else [],
        **({"forced": forced} if forced else {}),
    }


def applying_status(array: RegisteredArray) -> dict[str, Any] | None:
    """What GET shows of an apply of the stored version that has not finished."""
    version = array.unfinished_apply()
    if version is None:
        return None
    return {
        "version": version,
        "message": (
            f"version {version} is stored but its apply has not finished: under way, or stopped part "
            "way (API Gateway answered 504 after its 29 s and the function ended at its timeout). "
            "If no apply is under way, apply the same spec again: it finishes the changes and "
            "starts ReconcileArray"
        ),
    }


def _kept_earlier(service: ArrayService, spec: ArraySpec, removed: list[removals.Removed]) -> list[str]:
    """Owned volumes of the array that an earlier apply removed and kept (by id)."""
    listed = {v.name for v in spec.new_volumes}
    now = {r.volume_id for r in removed}
    owned = aws_observe.owned_volumes(service.ctx, spec.array_id)
    return sorted(
        str(v["VolumeId"]) for n, v in owned.items() if n not in listed and v["VolumeId"] not in now
    )


def _check_removals(
    current: RegisteredArray | None,
    spec: ArraySpec,
    removed: list[removals.Removed],
    mounts: MountCheck | None,
    force: bool,
) -> list[str]:
    """Refuse (409) removing a volume a host has mounted, or may have, unless ``force``;
    forced, what was overridden, in words (the answer's ``forced``)."""
    if current is None or mounts is None:
        return []
    hosts = [h.instance_id for h in current.spec.hosts]
    found, unknown = aws_removals.mounted(mounts, spec.array_id, hosts, removed)
    message = removals.refusal(found, unknown)
    if message is None:
        return []
    if not force:
        raise ConflictError(message)
    return [
        *(f"removed although host {m.host} has {m.volume.label} mounted at {m.mountpoint}" for m in found),
        *(f"removed although host {u.host} could not tell: {u.reason}" for u in unknown),
    ]


def dry_run_plan(
    spec: ArraySpec, current: RegisteredArray | None, *, registry: ArrayRegistry, service: ArrayService
) -> dict[str, Any]:
    """What an apply of ``spec`` would change, from reads only."""
    desired_controllers = current.desired_controllers if current else spec.min_controllers
    control = service.plan(
        spec,
        desired_controllers,
        current.roll_surge if current else 0,
        current.rekey_stages if current else None,
    )
    slots = registry.slots(spec.array_id) if current else {}
    serving = [s["instanceId"] for s in slots.values() if s.get("state") == "serving" and s.get("instanceId")]
    before = dataplane.spec_volumes(current.spec.volumes) if current else []
    data = dataplane.plan_changes(
        before,
        dataplane.spec_volumes(spec.volumes),
        [h.instance_id for h in current.spec.hosts] if current else [],
        [h.instance_id for h in spec.hosts],
        serving,
    )
    template = next((c for c in control if c.resource.startswith("launch-template/")), None)
    if serving and template is not None and template.action == "update":
        data.append(
            {
                "resource": f"group/{group_name(spec.array_id)}",
                "action": "roll",
                "fields": [{"field": "controllers", "before": sorted(serving), "after": len(serving)}],
            }
        )
    if current is not None:
        old_mounts = {h.instance_id: h.mountpoints for h in current.spec.hosts}
        for host in spec.hosts:
            if host.instance_id in old_mounts and old_mounts[host.instance_id] != host.mountpoints:
                data.append(
                    {
                        "resource": f"host/{host.instance_id}",
                        "action": "update",
                        "fields": [
                            {
                                "field": "mountpoints",
                                "before": list(old_mounts[host.instance_id]),
                                "after": list(host.mountpoints),
                            }
                        ],
                    }
                )
    return {
        "dryRun": True,
        "array": spec.model_dump(by_alias=True, mode="json"),
        "version": current.version if current else None,
        "desiredControllers": desired_controllers,
        "changes": _json(control) + data,
    }


def describe_array(
    array_id: str,
    *,
    registry: ArrayRegistry,
    service: ArrayService,
    backups: BackupRegistry | None = None,
    documents: NodeDocuments | None = None,
) -> dict[str, Any]:
    """The spec, its live status (with the data plane as the nodes report it when
    ``documents`` names the node documents), the last decisions and backups."""
    array = registry.get(array_id)
    recent = backups.sets(array_id)[:5] if backups is not None else []
    return {
        "spec": array.spec.model_dump(by_alias=True, mode="json"),
        "version": array.version,
        "desiredControllers": array.desired_controllers,
        "deleting": array.deleting.model_dump(by_alias=True) if array.deleting else None,
        "deleteFailure": array.delete_failure,
        "applying": applying_status(array),
        # the forecast floor the health check last stored (PlanScale ignores it once stale)
        "forecastFloor": array.forecast_floor,
        "reconcile": reconcile_status(
            array.reconcile, array.pending_host_removals, array.pending_volume_deletions
        ),
        "status": _json(service.status(array.spec, registry.slots(array_id), documents)),
        "keptVolumes": kept_volumes(service, array),
        "decisions": registry.decisions(array_id, limit=10),
        "backups": [
            {
                "backupId": b.backup_id,
                "createdAt": b.created_at.isoformat(),
                "mode": b.mode,
                "state": b.state,
                "consistency": b.consistency,
                "message": b.failure or b.message,
            }
            for b in recent
        ],
    }


def kept_volumes(service: ArrayService, array: RegisteredArray) -> list[dict[str, Any]]:
    """Volumes the array created that its spec no longer lists and no apply asked to delete:
    kept (detached by ReconcileArray), each with how to delete it."""
    listed = {v.name for v in array.spec.new_volumes}
    return [
        {
            "name": name,
            "volumeId": v["VolumeId"],
            "state": v.get("State"),
            "sizeGiB": v.get("Size"),
            "howToDelete": reconcile_plan.KEEP_HINT.split(": ", 1)[1],
        }
        for name, v in sorted(aws_observe.owned_volumes(service.ctx, array.spec.array_id).items())
        if name not in listed and v["VolumeId"] not in array.pending_volume_deletions
    ]


def reconcile_status(
    record: dict[str, str] | None, pending_hosts: tuple[str, ...], pending_deletions: tuple[str, ...] = ()
) -> dict[str, Any] | None:
    """The last ReconcileArray run as recorded (``converging`` with its current step,
    ``converged``, or ``failed`` with the error), and hosts still to disconnect."""
    if record is None:
        return None
    return {
        "state": record.get("state"),
        "step": record.get("step"),
        "execution": record.get("execution"),
        "version": int(record["version"]) if record.get("version", "").isdigit() else None,
        "startedAt": record.get("startedAt"),
        "updatedAt": record.get("updatedAt"),
        "error": record.get("error"),
        "pendingHostRemovals": list(pending_hosts),
        "pendingVolumeDeletions": list(pending_deletions),
    }


def list_arrays(*, registry: ArrayRegistry) -> dict[str, Any]:
    return {
        "arrays": [
            {
                "arrayId": a.spec.array_id,
                "version": a.version,
                "availabilityZone": a.spec.availability_zone,
                "desiredControllers": a.desired_controllers,
                "minControllers": a.spec.min_controllers,
                "maxControllers": a.spec.max_controllers,
                "volumes": len(a.spec.volumes),
                "hosts": len(a.spec.hosts),
            }
            for a in registry.all()
        ]
    }


def delete_array(
    array_id: str,
    *,
    delete_volumes: bool,
    by: Caller,
    registry: ArrayRegistry,
    service: ArrayService,
    sfn: Any,
    state_machine_arn: str,
    reconcile_state_machine_arn: str,
    dynamodb: Any,
    table: str,
) -> dict[str, Any]:
    """Start (or answer, when already started) the DeleteArray workflow of the array, after
    stopping its ReconcileArray runs still going (``vsa_core.reconcile.aws_stop``). A request
    that starts a run records ``by`` in the array's history (one answering the run under way
    stores nothing)."""
    array = registry.get(array_id)
    requested = array.deleting is None or array.delete_failure is not None
    if array.deleting is None:
        reason = service.busy_reason(array.spec)
        if reason is not None:
            raise ConflictError(f"array {array_id!r} cannot be deleted now: {reason}; try again when it ends")
        deletion = Deletion(
            execution_name=delete_execution_name(array_id, array.version),
            delete_volumes=delete_volumes,
            requested_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        array = registry.mark_deleting(array_id, array.version, deletion)
    elif array.delete_failure is not None:  # the last DeleteArray failed: run it again
        retry = int(datetime.now(UTC).timestamp())
        deletion = Deletion(
            execution_name=f"{delete_execution_name(array_id, array.version)}-r{retry}",
            delete_volumes=delete_volumes or array.deleting.delete_volumes,
            requested_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        array = registry.retry_deleting(array_id, deletion)
    assert array.deleting is not None
    if requested:
        kept = "and the volumes it created" if array.deleting.delete_volumes else "keeping its volumes"
        registry.history.record(
            array_id,
            ChangeRecord(
                at=datetime.now(UTC),
                kind="delete",
                what=f"deletion requested, {kept}",
                reference=array.deleting.execution_name,
                by=by,
            ),
        )
    stopped = aws_stop.stop_runs(sfn, dynamodb, table, reconcile_state_machine_arn, array)
    try:
        started = sfn.start_execution(
            stateMachineArn=state_machine_arn,
            name=array.deleting.execution_name,
            input=json.dumps(
                {
                    "arrayId": array_id,
                    "groupName": group_name(array_id),
                    "deleteVolumes": array.deleting.delete_volumes,
                }
            ),
        )["executionArn"]
    except sfn.exceptions.ExecutionAlreadyExists:
        started = execution_arn(state_machine_arn, array.deleting.execution_name)
    return {
        "deleting": array_id,
        "deleteVolumes": array.deleting.delete_volumes,
        "executionArn": started,
        "requestedAt": array.deleting.requested_at,
        "stoppedReconcile": stopped,
    }


def rotate_keys(
    array_id: str, *, by: Caller, registry: ArrayRegistry, service: ArrayService, reconcile: ReconcileStarter
) -> dict[str, Any]:
    """Start a rotation of the array's DH-HMAC-CHAP keys: new keys for the controller and every
    host stored beside the current ones (``aws_keys.begin_rotation``), then a ReconcileArray run,
    whose ``rekey`` phase moves the array controller by controller (``keys.rekey_step``) and
    ends with the old keys removed. Asked while one is under way, the same rotation goes on (a
    run stopped half-way resumes where it stopped). Refused (409) without authentication, while
    the array is being deleted. ``by`` is recorded in the array's history."""
    array = registry.get(array_id)
    if array.deleting is not None:
        raise ConflictError(f"array {array_id!r} is being deleted: there are no keys to rotate")
    clients = aws_keys.of(service.ctx)
    stored = aws_keys.rotation(clients, array.spec)
    if array.rekey_stages and (stored is None or stored.rotation is None):
        reconcile.clear_rekey_stages(array_id)  # a finished rotation's progress, left behind
    began = aws_keys.begin_rotation(clients, array.spec)
    said = "new keys stored: controllers rekeyed one at a time" if began else "a rotation under way goes on"
    registry.history.record(
        array_id,
        ChangeRecord(at=datetime.now(UTC), kind="rotate-keys", what=f"keys rotation: {said}", by=by),
    )
    started = reconcile.start(array_id, array.version, [f"keys rotation: {said}"])
    return {"arrayId": array_id, "rotation": "started" if began else "resumed", "reconcile": started}
