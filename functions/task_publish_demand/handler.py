"""Every minute: publish ``VSA/Arrays DemandIops`` for the arrays whose alarms watch it
(``vsa_core.scaling.aws_demand.publish``)."""

from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.clients import client
from vsa_core.observability import logger, tracer
from vsa_core.scaling.aws_demand import publish
from vsa_core.settings import Deployment, Loader, Registry

__all__ = ["lambda_handler", "publish", "settings"]


class Settings(Deployment, Registry):
    """The registry and the deployment's name."""


settings = Loader(Settings)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@settings.first
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return publish(
        ArrayRegistry(settings().table_name),
        # no role: publishing reads the arrays' volumes and creates no schedule
        ArrayService(scheduler_role_arn=""),
        client("cloudwatch"),
        datetime.now(UTC),
    )
