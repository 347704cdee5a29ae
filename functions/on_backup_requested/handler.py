"""The array's backup schedule → a backup set and its ConsistentBackup workflow, once per event;
its drill schedule → a restore drill and its RestoreDrill workflow, once per event.

EventBridge Scheduler puts ``Backup Requested`` or ``Drill Requested`` (source
``vsa.control-plane``) on the deployment's own bus at the policy's times. EventBridge delivers
at least once: the set's (or drill's) id is derived from the event's id and time, the registry
write is conditional and the execution is named after it, so a redelivered event starts
nothing new.
"""

from typing import Any, Literal

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, Field

from vsa_core.arrays.plan import DRILL_EVENT_DETAIL_TYPE
from vsa_core.arrays.spec import ArrayId
from vsa_core.backups import sets
from vsa_core.backups.aws_drill_service import DrillStarterSettings, starter_from_settings
from vsa_core.backups.aws_service import BackupService, BackupSettings, from_settings
from vsa_core.errors import ArrayNotFoundError
from vsa_core.observability import logger, tracer
from vsa_core.settings import Deployment, Loader


class Settings(Deployment, BackupSettings, DrillStarterSettings):
    """The backup service's table and workflows, and the deployment's name."""


settings = Loader(Settings)


class BackupRequestedDetail(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    array_id: ArrayId = Field(alias="arrayId")
    mode: sets.BackupMode = "crash"
    trigger: Literal["schedule", "api"] = "schedule"


class BackupRequested(EventBridgeModel):
    detail: BackupRequestedDetail


def handle(event: BackupRequested, service: BackupService) -> dict[str, Any]:
    backup_id = sets.new_backup_id(event.time, entropy=f"{event.id}|{event.detail.array_id}")
    try:
        created, backup = service.start(
            event.detail.array_id, mode=event.detail.mode, trigger="schedule", backup_id=backup_id
        )
    except ArrayNotFoundError:
        # a schedule outliving its array (deleted meanwhile): nothing to back up, nothing to retry
        logger.warning("backup requested for an unknown array", extra={"array_id": event.detail.array_id})
        return {"started": False, "reason": "unknown array"}
    return {"started": created, "backupId": backup.backup_id, "state": backup.state}


@logger.inject_lambda_context(clear_state=True, correlation_id_path="id")
@tracer.capture_lambda_handler
@settings.first
@event_parser(model=BackupRequested)
def lambda_handler(event: BackupRequested, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(array_id=event.detail.array_id)
    if event.detail_type == DRILL_EVENT_DETAIL_TYPE:
        drills = starter_from_settings(settings())
        result = drills.start_scheduled(event.detail.array_id, event.id, event.time)
        logger.info("drill requested", extra=result)
        return result
    result = handle(event, from_settings(settings()))
    logger.info("backup requested", extra=result)
    return result
