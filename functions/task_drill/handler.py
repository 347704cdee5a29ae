"""RestoreDrill steps: one step per invocation (``step`` in the input), each one call into
``vsa_core.backups.aws_drill_service.DrillService``."""

from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from vsa_core.backups.aws_drill_service import DrillService, DrillStepSettings, steps_from_settings
from vsa_core.backups.drill_steps import DrillStepRequest
from vsa_core.observability import logger, tracer
from vsa_core.settings import Deployment, Loader

__all__ = ["lambda_handler", "run", "settings"]


class Settings(Deployment, DrillStepSettings):
    """The registry table, the RestoreDrill workflow, its document and instance profile, the
    nodes' device and mount directories, the metrics' stack, the deployment's name."""


settings = Loader(Settings)


def run(request: DrillStepRequest, service: DrillService) -> dict[str, Any]:
    if request.step == "fail":
        return service.fail(request.array_id, request.drill_id, request.error)
    step = getattr(service, request.step)
    result: dict[str, Any] = step(request.array_id, request.drill_id)
    return result


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@settings.first
@event_parser(model=DrillStepRequest)
def lambda_handler(event: DrillStepRequest, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(step=event.step, array_id=event.array_id, drill_id=event.drill_id)
    result = run(event, steps_from_settings(settings()))
    logger.info("drill step", extra={"result": result})
    return result
