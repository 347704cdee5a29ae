"""ConsistentBackup steps that need more than one AWS call or a decision: one step per
invocation (``step`` in the input), run by ``vsa_core.backups.aws_steps``."""

from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from vsa_core.backups.aws_service import BackupService, BackupSettings, from_settings
from vsa_core.backups.aws_steps import StepSettings, run
from vsa_core.backups.steps import Request, Snapshot
from vsa_core.observability import logger, tracer
from vsa_core.settings import Deployment, Loader

__all__ = ["Request", "Snapshot", "lambda_handler", "run", "settings"]


class Settings(Deployment, BackupSettings, StepSettings):
    """The backup service's table and workflow, the steps' documents, retention bound and
    metrics' stack, the deployment's name."""


settings = Loader(Settings)


def _service() -> BackupService:
    return from_settings(settings(), settings().signals_bucket, settings().freeze_lead_milliseconds / 1000)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@settings.first
@event_parser(model=Request)
def lambda_handler(event: Request, context: LambdaContext) -> dict[str, Any]:
    request = event.root
    logger.append_keys(step=request.step, array_id=request.array_id, backup_id=request.backup_id)
    result = run(request, _service(), settings())
    logger.info("backup step", extra={"result": result})
    return result
