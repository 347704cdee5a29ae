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
from vsa_core.settings import Deployment, Loader, Registry

__all__ = ["ReadDemandRequest", "lambda_handler", "read_demand", "settings"]


class Settings(Deployment, Registry):
    """The registry and the deployment's name."""


settings = Loader(Settings)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@settings.first
@event_parser(model=ReadDemandRequest)
def lambda_handler(event: ReadDemandRequest, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(array_id=event.array_id)
    return read_demand(
        event.array_id,
        ArrayRegistry(settings().table_name),
        # no role: reading demand reads the array's volumes and creates no schedule
        ArrayService(scheduler_role_arn=""),
        client("cloudwatch"),
        datetime.now(UTC),
    )
