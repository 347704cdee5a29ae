"""ScaleArray step: plan the array's controller count (``vsa_core.scaling.aws_plan``)."""

from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.clients import client
from vsa_core.observability import logger, tracer
from vsa_core.scaling.aws_plan import PlanSettings, plan_scale
from vsa_core.scaling.events import ScaleRequest
from vsa_core.settings import Deployment, Loader, Registry

__all__ = ["lambda_handler", "plan_scale", "settings"]


class Settings(Deployment, PlanSettings, Registry):
    """The registry, the planner's settings (``PlanSettings``), the deployment's name."""


settings = Loader(Settings)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@settings.first
@event_parser(model=ScaleRequest)
def lambda_handler(event: ScaleRequest, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(array_id=event.array_id)
    config = settings()
    registry = ArrayRegistry(config.table_name)
    return plan_scale(
        event,
        registry,
        client("autoscaling"),
        datetime.now(UTC),
        client("ec2"),
        client("cloudwatch"),
        settings=config,
    )
