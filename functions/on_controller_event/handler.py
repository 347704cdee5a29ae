"""Controller lifecycle events -> BootstrapController / DrainController, started once per event
(``vsa_core.controllers.events`` names the execution, ``aws_lifecycle.start`` starts it, and
nothing for an instance that holds no slot)."""

from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from vsa_core.clients import client
from vsa_core.controllers.aws_lifecycle import LifecycleSettings, start
from vsa_core.controllers.events import ControllerEvent, execution
from vsa_core.observability import logger, tracer
from vsa_core.settings import Deployment, Loader

__all__ = ["ControllerEvent", "execution", "lambda_handler", "settings", "start"]


class Settings(Deployment, LifecycleSettings):
    """The registry, the two controller workflows, the deployment's name."""


settings = Loader(Settings)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@settings.first
@event_parser(model=ControllerEvent)
def lambda_handler(event: ControllerEvent, context: LambdaContext) -> dict[str, Any]:
    raw = event.model_dump_json(by_alias=True)
    return start(event, raw, client("stepfunctions"), client("dynamodb"), settings())
