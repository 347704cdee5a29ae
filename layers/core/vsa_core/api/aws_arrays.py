"""The arrays REST API's routes (API Gateway, IAM auth; ``api_arrays`` serves them): declare
an array once, read its live state, delete it. Thin: the powertools resolver parses and
validates (422 with the failing fields),
``aws_operations`` does the work, named domain errors map to 400/404/409 here.

    PUT    /arrays/{arrayId}?dryRun=           create or update (idempotent); answers the changes
                                               (dryRun=true: the plan, nothing changed)
    GET    /arrays                             every array, one line each
    GET    /arrays/{arrayId}                   spec + live status + last decisions
    GET    /arrays/{arrayId}/events?since=&limit=  the array's timeline, oldest first
    DELETE /arrays/{arrayId}?deleteVolumes=    202: the DeleteArray workflow tears down what the
                                               control plane created, then forgets the array
    POST   /arrays/{arrayId}/rotate-keys       202: new DH-HMAC-CHAP keys, put in place by a
                                               ReconcileArray run controller by controller

Each route that stores a change passes its caller to the core: the IAM principal API Gateway
verified (``requestContext.identity``), never anything the request itself says; a request without
one is refused (403).
"""

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query
from pydantic import AfterValidator, AwareDatetime

from vsa_core.api import aws_operations, aws_timeline, replies
from vsa_core.api.apply import ApplyRequest
from vsa_core.api.aws_apply import ApplyPorts
from vsa_core.api.timeline import MAX_LIMIT
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_removals import MountCheck
from vsa_core.arrays.aws_reports import NodeDocuments
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.callers import Caller, CallerUnknownError, caller_of
from vsa_core.arrays.spec import ArraySpec
from vsa_core.backups.aws_registry import BackupRegistry
from vsa_core.clients import client
from vsa_core.errors import ArrayNotFoundError, ConflictError, InvalidSpecError, ReconcileError
from vsa_core.naming import ARRAY_ID_PATTERN
from vsa_core.observability import logger
from vsa_core.reconcile.aws_start import ReconcileStarter
from vsa_core.settings import (
    ControllerWorkflows,
    DeleteWorkflow,
    EventBus,
    HealthPeriod,
    NodeDocumentNames,
    NodeKeys,
    NodeRoles,
    ReconcileWorkflow,
    Registry,
    ScaleWorkflow,
    SchedulerRole,
)

app = APIGatewayRestResolver(enable_validation=True)
ArrayIdPath = Annotated[str, Path(pattern=ARRAY_ID_PATTERN, description="the array id")]


def _in_utc(value: datetime) -> datetime:
    """``since`` in UTC (a 422 for one that leaves datetime's range there: 9999-12-31T23:59-05:00)."""
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("the time is out of range in UTC: give one between years 1 and 9999") from None


SinceTime = Annotated[AwareDatetime, AfterValidator(_in_utc)]


class ArraysApiSettings(
    Registry,
    SchedulerRole,
    NodeKeys,
    NodeRoles,
    EventBus,
    NodeDocumentNames,
    HealthPeriod,
    ScaleWorkflow,
    ControllerWorkflows,
    ReconcileWorkflow,
    DeleteWorkflow,
):
    """What the routes read: the registry, what an apply needs (the schedules' role and bus, the
    keys' KMS key, the node role path), the node documents, the workflows the timeline reads and
    the API starts."""


def _settings() -> ArraysApiSettings:
    """The function's settings, which its handler loads and puts in the resolver's context."""
    settings = app.context.get("settings")
    if not isinstance(settings, ArraysApiSettings):
        raise TypeError("the handler gives the routes their settings in app.context")
    return settings


def _registry() -> ArrayRegistry:
    return ArrayRegistry(_settings().table_name)


def _service() -> ArrayService:
    settings = _settings()
    # Waits stay inside API Gateway's 29 s: at most 20 attempts, 1 s apart
    return ArrayService(
        scheduler_role_arn=settings.backup_scheduler_role_arn,
        keys_kms_key_id=settings.keys_kms_key_id,
        node_role_path=settings.node_role_path,
        event_bus_name=settings.event_bus_name,
        wait_delay_seconds=1,
        wait_max_attempts=20,
    )


def _caller() -> Caller:
    """Who signed the request, as API Gateway's IAM authorization verified it."""
    return caller_of(app.current_event.request_context.identity.raw_event)


def _documents() -> NodeDocuments:
    return NodeDocuments.of(_settings())


# Named domain errors → HTTP status, in one place; 422 names each failing field and why
replies.install(
    app,
    (
        (InvalidSpecError, 400),
        (CallerUnknownError, 403),
        (ArrayNotFoundError, 404),
        (ConflictError, 409),
        (ReconcileError, 502),
    ),
)


@app.put(
    "/arrays/<array_id>",
    summary="Create or update an array",
    tags=["arrays"],
    responses=replies.responses(400, 409, 502, ok=(200, 201, 202)),
)
def put_array(
    array_id: ArrayIdPath,
    spec: Annotated[ArraySpec, Body(description="the array spec (specVersion 1)")],
    if_match: Annotated[
        str | None, Header(alias="if-match", description="apply only over this version")
    ] = None,
    dry_run: Annotated[
        bool,
        Query(
            alias="dryRun",
            description="validate and answer what an apply would change (control plane and data "
            "plane), changing nothing",
        ),
    ] = False,
    force: Annotated[
        bool,
        Query(
            description="remove a volume even though a host has it mounted (or cannot tell): the "
            "hosts' disconnect then fails every IO on that mount",
        ),
    ] = False,
    delete_removed_volumes: Annotated[
        bool,
        Query(
            alias="deleteRemovedVolumes",
            description="delete the volumes the array created that the spec no longer lists, once "
            "detached from every controller (default: kept); a volume it did not create never is",
        ),
    ] = False,
) -> Response[dict[str, Any]]:
    logger.append_keys(array_id=array_id)
    settings = _settings()
    request = ApplyRequest(
        array_id=array_id,
        spec=spec,
        by=_caller(),
        if_match=if_match,
        dry_run=dry_run,
        force=force,
        delete_removed_volumes=delete_removed_volumes,
    )
    ports = ApplyPorts(
        registry=_registry(),
        service=_service(),
        reconcile=_reconcile_starter(),
        mounts=MountCheck(
            ssm=client("ssm"),
            report_paths=settings.report_paths_document,
            period=timedelta(minutes=settings.health_check_minutes),
        ),
    )
    created, reply = aws_operations.apply_array(request, ports)
    logger.info("array applied", extra={"new_array": created, "changes": len(reply["changes"])})
    # 202: owned volumes are still to be created, by the ReconcileArray run the answer names
    # (``reconcile``; GET /arrays/{id} and ``vsactl apply --wait`` follow it)
    status = 202 if reply.get("creating") else 201 if created else 200
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=reply)


@app.get("/arrays", summary="List arrays", tags=["arrays"], responses=replies.responses())
def list_arrays() -> dict[str, Any]:
    return aws_operations.list_arrays(registry=_registry())


@app.get(
    "/arrays/<array_id>",
    summary="An array's spec and live status",
    tags=["arrays"],
    responses=replies.responses(404),
)
def get_array(array_id: ArrayIdPath) -> dict[str, Any]:
    logger.append_keys(array_id=array_id)
    return aws_operations.describe_array(
        array_id,
        registry=_registry(),
        service=_service(),
        backups=BackupRegistry(_settings().table_name),
        documents=_documents(),
    )


@app.get(
    "/arrays/<array_id>/events",
    summary="An array's timeline: decisions, bootstraps, drains, reconciles, backups, failures",
    tags=["arrays"],
    responses=replies.responses(404),
)
def get_array_events(
    array_id: ArrayIdPath,
    since: Annotated[
        SinceTime | None,
        Query(description="only events at or after this time (ISO 8601 with a zone: 2025-01-31T08:00:00Z)"),
    ] = None,
    limit: Annotated[
        int,
        Query(
            ge=1,
            le=MAX_LIMIT,
            description=f"at most this many events, the newest (1-{MAX_LIMIT})",
        ),
    ] = 100,
) -> dict[str, Any]:
    logger.append_keys(array_id=array_id)
    settings = _settings()
    return aws_timeline.read_events(
        aws_timeline.EventClients(
            sfn=client("stepfunctions"),
            dynamodb=client("dynamodb"),
            autoscaling=client("autoscaling"),
            table=settings.table_name,
            workflows=aws_timeline.Workflows(
                scale=settings.scale_state_machine_arn,
                bootstrap=settings.bootstrap_state_machine_arn,
                drain=settings.drain_state_machine_arn,
                reconcile=settings.reconcile_state_machine_arn,
                delete=settings.delete_state_machine_arn,
            ),
        ),
        array_id,
        since=since,
        limit=limit,
    )


def _reconcile_starter() -> ReconcileStarter:
    settings = _settings()
    return ReconcileStarter(
        sfn=client("stepfunctions"),
        dynamodb=client("dynamodb"),
        table=settings.table_name,
        state_machine_arn=settings.reconcile_state_machine_arn,
    )


@app.post(
    "/arrays/<array_id>/rotate-keys",
    summary="Rotate the array's DH-HMAC-CHAP keys without an IO stop",
    tags=["arrays"],
    responses=replies.responses(404, 409, ok=(202,)),
)
def rotate_keys(array_id: ArrayIdPath) -> Response[dict[str, Any]]:
    logger.append_keys(array_id=array_id)
    reply = aws_operations.rotate_keys(
        array_id, by=_caller(), registry=_registry(), service=_service(), reconcile=_reconcile_starter()
    )
    logger.info("keys rotation", extra={"rotation": reply["rotation"]})
    return Response(status_code=202, content_type=content_types.APPLICATION_JSON, body=reply)


@app.delete(
    "/arrays/<array_id>",
    summary="Delete an array",
    tags=["arrays"],
    responses=replies.responses(404, 409, ok=(202,)),
)
def delete_array(
    array_id: ArrayIdPath,
    delete_volumes: Annotated[
        bool, Query(alias="deleteVolumes", description="also delete the volumes the control plane created")
    ] = False,
) -> Response[dict[str, Any]]:
    logger.append_keys(array_id=array_id)
    settings = _settings()
    reply = aws_operations.delete_array(
        array_id,
        delete_volumes=delete_volumes,
        by=_caller(),
        registry=_registry(),
        service=_service(),
        sfn=client("stepfunctions"),
        state_machine_arn=settings.delete_state_machine_arn,
        reconcile_state_machine_arn=settings.reconcile_state_machine_arn,
        dynamodb=client("dynamodb"),
        table=settings.table_name,
    )
    logger.info("array deletion started", extra={"execution": reply["executionArn"]})
    return Response(status_code=202, content_type=content_types.APPLICATION_JSON, body=reply)
