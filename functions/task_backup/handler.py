"""ConsistentBackup steps that need more than one AWS call or a decision (one step per
invocation, ``step`` in the input); the workflow owns the order, the waiting (Wait states), the
SSM commands, the retries and the thaw on every path out.

- ``preflight``: a serving controller with every volume attached, hosts online, EBS limits →
  start / wait / refuse (``SnapshotLimitError``); ``PreflightError`` names what is missing;
- ``hosts_ready``: freeze-io's dry-run results → ``PreflightError`` naming each host that
  cannot freeze (nothing frozen yet);
- ``freeze``: freeze-io sent to every host at once (not waited for);
- ``snapshot``: once every host has frozen (or failed, or is late; else ``taken: false`` and the
  workflow asks again a second later), the one ``CreateSnapshots`` call, timed, recorded;
  thaw-io sent to every host the moment it returns (the workflow's Thaw waits for those
  commands, and sends any that failed);
- ``record_hosts``: the freeze-io / thaw-io reports of every host, recorded;
- ``progress``: the snapshots' states and progress, recorded; when to look again;
- ``finish``: the honest label (or failed, snapshots deleted);
- ``fail``: a caught error → the set failed with the reason, its snapshots deleted;
- ``retention``: the array's policy applied (whole sets, oldest first, capped).
"""

from typing import Annotated, Any, Literal

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, Field, RootModel

from vsa_core.arrays.spec import ArrayId
from vsa_core.backups.aws_service import BackupService, from_settings
from vsa_core.backups.sets import BackupId
from vsa_core.observability import logger, tracer
from vsa_core.settings import Settings, get_settings


class _Step(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    array_id: ArrayId = Field(alias="arrayId")
    backup_id: BackupId = Field(alias="backupId")


class Preflight(_Step):
    step: Literal["preflight"]


class HostsReady(_Step):
    step: Literal["hosts_ready"]
    checks: list[dict[str, Any]] = Field(default_factory=list)


class Freeze(_Step):
    step: Literal["freeze"]
    hosts: list[dict[str, Any]] = Field(default_factory=list)


class Snapshot(_Step):
    step: Literal["snapshot"]
    controller: str = Field(pattern=r"^i-[0-9a-f]{8,17}$")
    excluded: list[str] = Field(default_factory=list)
    volumes: list[dict[str, Any]] = Field(default_factory=list)
    freezing: dict[str, Any] = Field(default_factory=dict)
    freeze_timeout: int = Field(default=10, alias="freezeTimeout", ge=1, le=60)


class RecordHosts(_Step):
    step: Literal["record_hosts"]
    freezes: list[dict[str, Any]] = Field(default_factory=list)
    thaws: list[dict[str, Any]] = Field(default_factory=list)


class Progress(_Step):
    step: Literal["progress"]
    last_wait: int | None = Field(default=None, alias="lastWait")


class Finish(_Step):
    step: Literal["finish"]


class Fail(_Step):
    step: Literal["fail"]
    error: dict[str, Any] | None = None
    freezes: list[dict[str, Any]] = Field(default_factory=list)
    thaws: list[dict[str, Any]] = Field(default_factory=list)


class Retention(_Step):
    step: Literal["retention"]


class Request(
    RootModel[
        Annotated[
            Preflight | HostsReady | Freeze | Snapshot | RecordHosts | Progress | Finish | Fail | Retention,
            Field(discriminator="step"),
        ]
    ]
):
    pass


def _service() -> BackupService:
    return from_settings(get_settings())


def run(request: Any, service: BackupService, settings: Settings) -> dict[str, Any]:
    """One step; the logic is ``BackupService``'s."""
    a, b = request.array_id, request.backup_id
    match request:
        case Preflight():
            return service.preflight(a, b)
        case HostsReady():
            return service.hosts_ready(request.checks)
        case Freeze():
            return service.freeze(b, request.hosts, settings.freeze_io_document)
        case Snapshot():
            return service.snapshot(
                a,
                b,
                request.controller,
                request.excluded,
                request.volumes,
                request.freezing,
                settings.thaw_io_document,
                request.freeze_timeout,
            )
        case RecordHosts():
            return service.record_hosts(a, b, request.freezes, request.thaws)
        case Progress():
            return service.progress(a, b, request.last_wait)
        case Finish():
            return service.finish(a, b)
        case Fail():
            return service.fail(a, b, request.error, request.freezes, request.thaws)
        case Retention():
            array = service.array(a)
            if array.spec.backup is None:
                return {"skipped": "no backup policy: retention runs on request only"}
            return service.apply_retention(a, None, settings.retention_max_deletions)
    raise AssertionError(f"unknown step {request!r}")  # pragma: no cover - the model is closed


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=Request)
def lambda_handler(event: Request, context: LambdaContext) -> dict[str, Any]:
    request = event.root
    logger.append_keys(step=request.step, array_id=request.array_id, backup_id=request.backup_id)
    result = run(request, _service(), get_settings())
    logger.info("backup step", extra={"result": result})
    return result
