"""On a schedule: check every array's health (``vsa_core.health.aws_check.run``): the hosts'
paths from their own reports, dead controllers replaced, backups overdue, a persisting drift
of the data plane from the spec converged by ReconcileArray, metrics published; every array's
forecast floor computed from its demand history and stored for ScaleArray, which it starts
when the floor is above the desired count (the look-ahead).

Invoked with ``{"arrayIds": ["…"]}`` it checks just those arrays now (an operator, the demo,
the tests); the schedule's event (EventBridge's ``Scheduled Event``) checks every array."""

from datetime import UTC, datetime
from typing import Annotated, Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vsa_core.errors import InvalidEventError
from vsa_core.health.aws_check import HealthContext, HealthSettings, run
from vsa_core.naming import ARRAY_ID_PATTERN
from vsa_core.observability import logger, tracer
from vsa_core.settings import Deployment, Loader

__all__ = ["lambda_handler", "settings"]


class Settings(Deployment, HealthSettings):
    """The check's settings (``HealthSettings``) and the deployment's name."""


settings = Loader(Settings)


class CheckRequest(BaseModel):
    """An invocation that names the arrays to check (anything else: every array)."""

    model_config = ConfigDict(extra="ignore")
    array_ids: list[Annotated[str, Field(pattern=ARRAY_ID_PATTERN)]] | None = Field(
        default=None, alias="arrayIds", min_length=1, max_length=100
    )


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@settings.first
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    try:
        request = CheckRequest.model_validate(event if isinstance(event, dict) else {})
    except ValidationError as error:
        raise InvalidEventError(f"health check: arrayIds must be 1-100 array ids: {error}") from error
    return run(HealthContext.from_settings(settings()), datetime.now(UTC), request.array_ids)
