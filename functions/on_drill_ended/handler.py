"""A RestoreDrill run that ended FAILED, TIMED_OUT or ABORTED (Step Functions' ``Execution
Status Change`` event, which only AWS puts on the default bus): a stopped or timed-out run ran
none of its catches, so its drill fails here and a cleanup-only run deletes what it left."""

import json
from typing import Any, Literal

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, Field

from vsa_core.backups.aws_drill_service import DrillStepSettings, steps_from_settings
from vsa_core.backups.drill_steps import DrillRunInput
from vsa_core.observability import logger, tracer
from vsa_core.settings import Deployment, Loader


class Settings(Deployment, DrillStepSettings):
    """The registry table, the RestoreDrill workflow and the metrics' stack."""


settings = Loader(Settings)


class ExecutionStatusDetail(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    execution_arn: str = Field(alias="executionArn")
    state_machine_arn: str = Field(alias="stateMachineArn")
    name: str
    status: Literal["FAILED", "TIMED_OUT", "ABORTED"]
    input: str | None = None


class ExecutionStatusChange(EventBridgeModel):
    detail: ExecutionStatusDetail


def handle(event: ExecutionStatusChange) -> dict[str, Any]:
    run = DrillRunInput.model_validate(json.loads(event.detail.input or "{}"))
    if run.cleanup_only:
        # a cleanup run that itself ended early: the drill's record names what is left
        logger.warning("drill cleanup run ended early", extra={"status": event.detail.status})
        return {"drillId": run.drill_id, "cleanupStarted": False}
    return steps_from_settings(settings()).on_ended(run.array_id, run.drill_id, event.detail.status)


@logger.inject_lambda_context(clear_state=True, correlation_id_path="id")
@tracer.capture_lambda_handler
@settings.first
@event_parser(model=ExecutionStatusChange)
def lambda_handler(event: ExecutionStatusChange, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(execution=event.detail.name, status=event.detail.status)
    return handle(event)
