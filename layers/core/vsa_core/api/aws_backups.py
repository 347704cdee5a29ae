"""The backups REST API's routes (API Gateway, IAM auth; ``api_backups`` serves them): back an
array up, read its backup sets, delete one, apply retention (or see what it would do), restore.
Thin: the powertools resolver parses
and validates (422 naming the failing fields), ``aws_service.BackupService`` does the work, named
domain errors map to 400/404/409 here.

    POST   /arrays/{arrayId}/backups               202: a set + its ConsistentBackup workflow
    GET    /arrays/{arrayId}/backups               every set, newest first
    GET    /arrays/{arrayId}/backups/{backupId}    state, snapshots + progress, hosts' freeze/thaw,
                                                   the consistency achieved and why
    DELETE /arrays/{arrayId}/backups/{backupId}    the set and its snapshots (409 while in progress)
    GET    /arrays/{arrayId}/retention?keep=       dry run: what retention would delete, and why
    POST   /arrays/{arrayId}/retention             apply it now
    POST   /arrays/{arrayId}/restores              201: io2 Multi-Attach volumes from a set
    POST   /arrays/{arrayId}/drills                202: a restore drill of a set + its RestoreDrill workflow
    GET    /arrays/{arrayId}/drills                every drill, newest first, with RPO and RTO
    GET    /arrays/{arrayId}/drills/{drillId}      one drill: its volumes, instance, checks, verdict
    GET    /copies?arrayId=                        sets copied into this Region (disaster recovery)
    POST   /copies/{backupId}/restores             201: a copied set restored into a new array here

A POST with an ``Idempotency-Key`` header is done once: the same key with the same body answers
what the first answered (powertools idempotency, DynamoDB, 24 h); the same key with another body
is refused (422).

Each route that stores a change (a backup, a restore, a deleted set, retention) passes its caller
to the core: the IAM principal API Gateway verified (``requestContext.identity``), never anything
the request itself says; a request without one is refused (403).
"""

import json
from functools import lru_cache
from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from vsa_core.api import replies
from vsa_core.arrays.callers import Caller, CallerUnknownError, caller_of
from vsa_core.arrays.spec import ArrayId
from vsa_core.backups import drills, sets
from vsa_core.backups.aws_drill_service import DrillService, DrillStarterSettings, starter_from_settings
from vsa_core.backups.aws_service import BackupService, BackupSettings, from_settings
from vsa_core.clients import client
from vsa_core.errors import (
    ArrayNotFoundError,
    BackupNotFoundError,
    ConflictError,
    DrillNotFoundError,
    InvalidBackupError,
    RestoreError,
    RetentionFailedError,
    SnapshotLimitError,
)
from vsa_core.naming import ARRAY_ID_PATTERN
from vsa_core.observability import logger
from vsa_core.settings import BackupRetention, IdempotencyTable

app = APIGatewayRestResolver(enable_validation=True)
ArrayIdPath = Annotated[str, Path(pattern=ARRAY_ID_PATTERN, description="the array id")]
BackupIdPath = Annotated[str, Path(pattern=sets.BACKUP_ID_PATTERN, description="the backup set id")]
DrillIdPath = Annotated[str, Path(pattern=drills.DRILL_ID_PATTERN, description="the drill id")]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="idempotency-key",
        pattern=r"^[A-Za-z0-9._:-]{1,128}$",
        description="do this POST once: a repeat with the same key and body answers the first answer",
    ),
]


class _Strict(BaseModel):
    # a route's body model is built when that route first validates one (defer_build), not at import
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, defer_build=True)


class BackupRequest(_Strict):
    mode: sets.BackupMode | None = Field(
        default=None, description="crash or application; default: the array's backup policy's, else crash"
    )
    label: sets.Label | None = None


class RetentionRequest(_Strict):
    keep: StrictInt | None = Field(default=None, ge=1, le=1000, description="default: the policy's retention")
    dry_run: StrictBool = Field(default=False, alias="dryRun", description="only say what would be deleted")


class NewArrayTarget(_Strict):
    array_id: ArrayId = Field(alias="arrayId", description="a new array: registered with the volumes")


class VolumesOnlyTarget(_Strict):
    volumes_only: Literal[True] = Field(alias="volumesOnly", description="only the volumes (e.g. for a host)")


class RestoreRequest(_Strict):
    backup_id: sets.BackupId = Field(alias="backupId")
    target: NewArrayTarget | VolumesOnlyTarget


class DrillRequest(_Strict):
    backup_id: sets.BackupId | None = Field(
        default=None, alias="backupId", description="the set to drill (default: the newest completed one)"
    )


class CopyRestoreRequest(_Strict):
    spec: dict[str, Any] = Field(
        description="the new array's spec in this Region (its volumes are the restored ones: any "
        "given are replaced)"
    )


class BackupsApiSettings(BackupSettings, DrillStarterSettings, IdempotencyTable, BackupRetention):
    """What the routes read: the service's table and workflows, the idempotency table of the
    POSTs, retention's bound."""

    # like this module's other models: the handler's own Settings is the one built and loaded
    model_config = ConfigDict(defer_build=True)


def _settings() -> BackupsApiSettings:
    """The function's settings, which its handler loads and puts in the resolver's context."""
    settings = app.context.get("settings")
    if not isinstance(settings, BackupsApiSettings):
        raise TypeError("the handler gives the routes their settings in app.context")
    return settings


def _service() -> BackupService:
    return from_settings(_settings())


def _drills() -> DrillService:
    return starter_from_settings(_settings())


IN_PROGRESS_RETRY_SECONDS = 2


def _json(status: int, body: Any) -> Response[Any]:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body)


replies.install(
    app,
    (
        (InvalidBackupError, 400),
        (CallerUnknownError, 403),
        (ArrayNotFoundError, 404),
        (BackupNotFoundError, 404),
        (DrillNotFoundError, 404),
        (ConflictError, 409),
        (SnapshotLimitError, 409),
        (RestoreError, 502),
        (RetentionFailedError, 502),  # AWS refused a DeleteSnapshot: the message names each set
    ),
)


def _key_reused(error: IdempotencyValidationError) -> Response[Any]:
    return _json(
        422,
        {
            "message": "this Idempotency-Key was used with a different body: repeat the first body to get "
            "its answer, or use a new key for a new request"
        },
    )


def _key_in_progress(_: IdempotencyAlreadyInProgressError) -> Response[Any]:
    # Retry-After tells a client this 409 will pass by itself (vsactl repeats it): the first
    # request with the key still runs, and ends within the function's timeout.
    return Response(
        status_code=409,
        content_type=content_types.APPLICATION_JSON,
        body={
            "message": "a request with this Idempotency-Key is still being done: repeat it in a few "
            "seconds to get its answer"
        },
        headers={"Retry-After": str(IN_PROGRESS_RETRY_SECONDS)},
    )


app.exception_handler(IdempotencyValidationError)(_key_reused)
app.exception_handler(IdempotencyAlreadyInProgressError)(_key_in_progress)


# --- what a POST does, run once per Idempotency-Key ------------------------------------------


def _caller() -> Caller:
    """Who signed the request, as API Gateway's IAM authorization verified it."""
    return caller_of(app.current_event.request_context.identity.raw_event)


def _perform(request: dict[str, Any]) -> dict[str, Any]:
    body, array_id = request["body"], request["arrayId"]
    by = Caller.model_validate(request["by"])
    service = _service()
    if request["kind"] == "backup":
        mode = body.get("mode") or _policy_mode(service, array_id)
        created, backup = service.start(array_id, mode=mode, label=body.get("label"), by=by)
        return {"created": created, "backup": backup.model_dump(by_alias=True, mode="json")}
    if request["kind"] == "copy-restore":
        return service.restore_copy(request["backupId"], body["spec"], by)
    if request["kind"] == "drill":
        _, drill = _drills().start(array_id, body.get("backupId"), trigger="api", by=by)
        return drill.reply()
    target = body["target"]
    return service.restore(array_id, body["backupId"], target.get("arrayId"), by)


def _policy_mode(service: BackupService, array_id: str) -> sets.BackupMode:
    policy = service.array(array_id).spec.backup
    return policy.mode if policy else "crash"


@lru_cache(maxsize=1)
def idempotency_config() -> IdempotencyConfig:
    return IdempotencyConfig(
        event_key_jmespath="[kind, arrayId, key]",
        payload_validation_jmespath="body",
        expires_after_seconds=24 * 3600,
    )


@lru_cache(maxsize=1)
def _once() -> Any:
    """``_perform`` wrapped by powertools idempotency (built on first use: nothing at import)."""
    persistence = DynamoDBPersistenceLayer(
        table_name=_settings().idempotency_table_name, boto3_client=client("dynamodb")
    )
    return idempotent_function(
        data_keyword_argument="request", persistence_store=persistence, config=idempotency_config()
    )(_perform)


def _post(kind: str, array_id: str, key: str | None, body: BaseModel, **more: str) -> dict[str, Any]:
    request = {
        "kind": kind,
        "arrayId": array_id,
        **more,
        "key": key,
        "body": json.loads(body.model_dump_json(by_alias=True, exclude_none=True)),
        "by": _caller().model_dump(by_alias=True, mode="json"),
    }
    if key is None:
        return _perform(request)
    answer: dict[str, Any] = _once()(request=request)
    return answer


# --- routes ------------------------------------------------------------------------------------


@app.post(
    "/arrays/<array_id>/backups",
    summary="Back the array up",
    tags=["backups"],
    responses=replies.responses(400, 404, 409, ok=(202,)),
)
def create_backup(
    array_id: ArrayIdPath,
    request: Annotated[BackupRequest, Body(description="mode and an optional label")],
    idempotency_key: IdempotencyKey = None,
) -> Response[Any]:
    logger.append_keys(array_id=array_id)
    reply = _post("backup", array_id, idempotency_key, request)
    logger.info("backup requested", extra={"backup_id": reply["backup"]["backupId"], "new": reply["created"]})
    return _json(202, reply["backup"])


@app.get(
    "/arrays/<array_id>/backups",
    summary="The array's backup sets, newest first",
    tags=["backups"],
    responses=replies.responses(404),
)
def list_backups(array_id: ArrayIdPath) -> dict[str, Any]:
    found = _service().sets(array_id)
    return {"arrayId": array_id, "backups": [_summary(s) for s in found]}


def _summary(backup: sets.BackupSet) -> dict[str, Any]:
    return {
        "backupId": backup.backup_id,
        "createdAt": backup.created_at.isoformat(),
        "mode": backup.mode,
        "label": backup.label,
        "state": backup.state,
        "consistency": backup.consistency,
        "snapshots": len(backup.snapshots),
        "completedSnapshots": sum(1 for s in backup.snapshots if s.state == "completed"),
        "freezeWindowSeconds": backup.freeze_window_seconds,
        # when it was locked (EBS snapshot lock): mode and expiry, or None
        "lock": backup.lock.model_dump(by_alias=True, mode="json") if backup.lock else None,
        "message": backup.failure or backup.message,
        # where it is copied (Region, or region/account) and each copy's state
        "copies": {c.place: c.state for c in backup.copies},
    }


@app.get(
    "/arrays/<array_id>/backups/<backup_id>",
    summary="One backup set",
    tags=["backups"],
    responses=replies.responses(404),
)
def get_backup(array_id: ArrayIdPath, backup_id: BackupIdPath) -> dict[str, Any]:
    backup = _service().get(array_id, backup_id)
    reply = backup.model_dump(by_alias=True, mode="json")
    reply["freezeWindowSeconds"] = backup.freeze_window_seconds
    for host, model in zip(reply["hosts"], backup.hosts, strict=True):
        host["windowSeconds"] = model.window_seconds
    return reply


@app.delete(
    "/arrays/<array_id>/backups/<backup_id>",
    summary="Delete a backup set",
    tags=["backups"],
    responses=replies.responses(404, 409, 502),
)
def delete_backup(array_id: ArrayIdPath, backup_id: BackupIdPath) -> dict[str, Any]:
    logger.append_keys(array_id=array_id, backup_id=backup_id)
    return _service().delete(array_id, backup_id, _caller())


@app.get(
    "/arrays/<array_id>/retention",
    summary="What retention would delete (dry run)",
    tags=["backups"],
    responses=replies.responses(404),
)
def plan_retention(
    array_id: ArrayIdPath,
    keep: Annotated[int | None, Query(ge=1, le=1000, description="default: the policy's retention")] = None,
) -> dict[str, Any]:
    kept, plan = _service().retention(array_id, keep, _settings().retention_max_deletions)
    return {
        "arrayId": array_id,
        "keep": kept,
        "dryRun": True,
        "plan": [d.model_dump(by_alias=True, mode="json") for d in plan.decisions],
    }


@app.post(
    "/arrays/<array_id>/retention",
    summary="Apply retention now",
    tags=["backups"],
    responses=replies.responses(404, 409, 502),
)
def apply_retention(
    array_id: ArrayIdPath,
    request: Annotated[RetentionRequest, Body(description="keep (default: the policy's), dryRun")],
) -> dict[str, Any]:
    if request.dry_run:
        return plan_retention(array_id, request.keep)
    reply = _service().apply_retention(array_id, request.keep, _settings().retention_max_deletions, _caller())
    return {"arrayId": array_id, "dryRun": False, **reply}


@app.post(
    "/arrays/<array_id>/restores",
    summary="Restore a backup set to new volumes",
    tags=["backups"],
    responses=replies.responses(400, 404, 409, 502, ok=(201,)),
)
def create_restore(
    array_id: ArrayIdPath,
    request: Annotated[RestoreRequest, Body(description="the set, and a new array or volumes only")],
    idempotency_key: IdempotencyKey = None,
) -> Response[Any]:
    logger.append_keys(array_id=array_id, backup_id=request.backup_id)
    return _json(201, _post("restore", array_id, idempotency_key, request))


@app.post(
    "/arrays/<array_id>/drills",
    summary="Start a restore drill",
    tags=["drills"],
    responses=replies.responses(400, 404, 409, ok=(202,)),
)
def create_drill(
    array_id: ArrayIdPath,
    request: Annotated[DrillRequest, Body(description="the set (default: the newest completed one)")],
    idempotency_key: IdempotencyKey = None,
) -> Response[Any]:
    logger.append_keys(array_id=array_id)
    reply = _post("drill", array_id, idempotency_key, request)
    logger.info("drill requested", extra={"drill_id": reply["drillId"], "backup_id": reply["backupId"]})
    return _json(202, reply)


@app.get(
    "/arrays/<array_id>/drills",
    summary="The array's restore drills, newest first",
    tags=["drills"],
    responses=replies.responses(404),
)
def list_drills(array_id: ArrayIdPath) -> dict[str, Any]:
    return {"arrayId": array_id, "drills": [d.summary() for d in _drills().drills(array_id)]}


@app.get(
    "/arrays/<array_id>/drills/<drill_id>",
    summary="One restore drill",
    tags=["drills"],
    responses=replies.responses(404),
)
def get_drill(array_id: ArrayIdPath, drill_id: DrillIdPath) -> dict[str, Any]:
    return _drills().get(array_id, drill_id).reply()


@app.get(
    "/copies",
    summary="Backup sets copied into this Region (disaster recovery)",
    tags=["copies"],
    responses=replies.responses(),
)
def list_copies(
    array_id: Annotated[
        str | None, Query(alias="arrayId", pattern=ARRAY_ID_PATTERN, description="only this array's")
    ] = None,
) -> dict[str, Any]:
    return {"copies": [c.as_dict() for c in _service().copies_here(array_id)]}


@app.post(
    "/copies/<backup_id>/restores",
    summary="Restore a copied set into a new array in this Region",
    tags=["copies"],
    responses=replies.responses(400, 404, 409, 502, ok=(201,)),
)
def restore_copy(
    backup_id: BackupIdPath,
    request: Annotated[CopyRestoreRequest, Body(description="the new array's spec")],
    idempotency_key: IdempotencyKey = None,
) -> Response[Any]:
    logger.append_keys(backup_id=backup_id)
    target = str(request.spec.get("arrayId", ""))
    return _json(201, _post("copy-restore", target, idempotency_key, request, backupId=backup_id))
