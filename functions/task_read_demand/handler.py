"""ScaleArray step: read the array's demand of the last minutes (``vsa_core.scaling.aws_demand``)."""

from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.clients import client
from vsa_core.observability import logger, tracer
from vsa_core.scaling.aws_demand import read_demand
from vsa_core.scaling.events import ReadDemandRequest
from vsa_core.settings import get_settings

__all__ = ["ReadDemandRequest", "lambda_handler", "read_demand"]


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=ReadDemandRequest)
def lambda_handler(event: ReadDemandRequest, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(array_id=event.array_id)
    settings = get_settings()
    return read_demand(
        event.array_id,
        ArrayRegistry(settings.table_name),
        ArrayService(scheduler_role_arn=settings.backup_scheduler_role_arn),
        client("cloudwatch"),
        datetime.now(UTC),
    )
