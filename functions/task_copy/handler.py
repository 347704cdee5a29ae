"""CopyBackupSet steps: one step per invocation (``step`` in the input), each one call into
``vsa_core.backups.aws_copy_service.CopyService`` for one destination."""

from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from vsa_core.backups.aws_copy_service import CopyService, CopyStepSettings, from_settings
from vsa_core.backups.copy_steps import CopyStepRequest
from vsa_core.errors import InvalidEventError
from vsa_core.observability import logger, tracer
from vsa_core.settings import Deployment, Loader

__all__ = ["lambda_handler", "run", "settings"]


class Settings(Deployment, CopyStepSettings):
    """The registry table, the Regions copies may go to, the metrics' stack, the deployment."""


settings = Loader(Settings)


def run(request: CopyStepRequest, service: CopyService) -> dict[str, Any]:
    if request.step == "summary":
        return service.summary(request.array_id, request.backup_id)
    if request.region is None:
        raise InvalidEventError(f"step {request.step} copies to one destination: give its region")
    where = (request.region, request.account_id)
    if request.step == "fail":
        return service.fail(request.array_id, request.backup_id, *where, request.error)
    if request.step == "retention":
        return service.retention(request.array_id, *where)
    step = service.start if request.step == "start" else service.progress
    return step(request.array_id, request.backup_id, *where)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@settings.first
@event_parser(model=CopyStepRequest)
def lambda_handler(event: CopyStepRequest, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(
        step=event.step, array_id=event.array_id, backup_id=event.backup_id, region=event.region
    )
    result = run(event, from_settings(settings()))
    logger.info("copy step", extra={"result": result})
    return result
