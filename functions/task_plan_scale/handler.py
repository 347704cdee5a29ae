"""ScaleArray step: plan the array's controller count (``vsa_core.scaling.aws_plan``)."""

from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.clients import client
from vsa_core.observability import logger, tracer
from vsa_core.scaling.aws_plan import plan_scale
from vsa_core.scaling.events import ScaleRequest
from vsa_core.settings import get_settings

__all__ = ["lambda_handler", "plan_scale"]


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=ScaleRequest)
def lambda_handler(event: ScaleRequest, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(array_id=event.array_id)
    registry = ArrayRegistry(get_settings().table_name)
    return plan_scale(
        event, registry, client("autoscaling"), datetime.now(UTC), client("ec2"), client("cloudwatch")
    )
