"""What the arrays API does, in the order that keeps an array consistent.

Apply, a pipeline whose stages each take the value the one before made (``api.apply``, with
the stages that talk to AWS in ``api.aws_apply``): validate (reads only; an invalid spec touches
nothing) → plan → store, conditional on the version read (of two concurrent applies one wins,
the other gets 409 and touched nothing) → start: converge AWS on it (idempotent: re-applying the
same spec repairs drift and reports no change) and ReconcileArray for the data plane.

Delete: refuse while a controller bootstraps or drains → mark the array deleting (conditional on
the version read) → start the DeleteArray workflow, which tears down what the control plane
created (volumes it created only on request; never one it did not create), waits for AWS to let
go, and forgets the array. A repeated DELETE answers the same workflow.

Every change stored here names its caller (``by``, read from API Gateway's request context at
the API's edge): an apply on the SPEC item itself and in the array's history, a delete and a
keys rotation in the history (``arrays.aws_registry.ArrayHistory``).
"""

import json
from datetime import UTC, datetime
from typing import Any

from vsa_core.api import apply, aws_apply
from vsa_core.api.apply import ApplyRequest
from vsa_core.api.aws_apply import ApplyPorts
from vsa_core.arrays import aws_keys, aws_observe
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_reports import NodeDocuments
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.callers import Caller, ChangeRecord
from vsa_core.arrays.spec import Deletion, RegisteredArray
from vsa_core.backups.aws_registry import BackupRegistry
from vsa_core.errors import ConflictError
from vsa_core.naming import delete_execution_name, group_name
from vsa_core.reconcile import aws_stop
from vsa_core.reconcile import plan as reconcile_plan
from vsa_core.reconcile.aws_start import ReconcileStarter
from vsa_core.waiters import execution_arn


def apply_array(request: ApplyRequest, ports: ApplyPorts) -> tuple[bool, dict[str, Any]]:
    """Create or update; ``(created, reply)`` with the stored spec, its version, the changes
    made, and the ReconcileArray run started for what remains (``reconcile``: its execution and
    the remaining work per volume and host; null when the data plane did not change). A dry run
    answers the plan (control plane and data plane) without storing or changing anything, and
    starts nothing. The stages and their values are ``api.apply``'s; the options,
    ``ApplyRequest``'s."""
    planned = apply.plan(aws_apply.validate(request, ports))
    if request.dry_run:
        return False, aws_apply.preview(planned, ports)
    applied = aws_apply.start(aws_apply.store(planned, ports), ports)
    return applied.created, apply.reply(applied)


def applying_status(array: RegisteredArray) -> dict[str, Any] | None:
    """What GET shows of an apply of the stored version that has not finished."""
    version = array.unfinished_apply()
    if version is None:
        return None
    if array.awaiting_first_apply():
        return {
            "version": version,
            "reason": "restored",
            "message": (
                f"registered by the restore of backup set {array.restored_from}: nothing is made yet. "
                "Apply it (edit its hosts first if they should differ) to launch its controllers "
                "and export the restored volumes"
            ),
        }
    return {
        "version": version,
        "reason": "unfinished",
        "message": (
            f"version {version} is stored but its apply has not finished: under way, or stopped part "
            "way (API Gateway answered 504 after its 29 s and the function ended at its timeout). "
            "If no apply is under way, apply the same spec again: it finishes the changes and "
            "starts ReconcileArray"
        ),
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
        "status": apply.as_json(service.status(array.spec, registry.slots(array_id), documents)),
        "keptVolumes": kept_volumes(service, array),
        "decisions": registry.scale_decisions().newest(array_id, limit=10),
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


# PLR0913: the delete's collaborators (registry, service, the Step Functions and DynamoDB
# clients, both state machines' ARNs, the table) come one keyword each from the DELETE route,
# which reads them from the settings; they are not grouped in a typed object as the apply's are
# (``ApplyPorts``): the delete is one step, not a pipeline of stages sharing them.
def delete_array(  # noqa: PLR0913
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
