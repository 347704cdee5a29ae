"""ReconcileArray steps (lock, start, poll, verify): one step per invocation (``step`` in the
input), done by ``vsa_core.reconcile.aws_steps``."""

from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.clients import client
from vsa_core.observability import logger, tracer
from vsa_core.reconcile.aws_steps import ReconcileContext, Steps
from vsa_core.reconcile.steps import Request
from vsa_core.settings import get_settings


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=Request)
def lambda_handler(event: Request, context: LambdaContext) -> dict[str, Any]:
    request = event.root
    logger.append_keys(step=request.step, array_id=request.array_id, execution=request.owner)
    settings = get_settings()
    dynamodb = client("dynamodb")
    steps = Steps(
        ReconcileContext(
            registry=ArrayRegistry(settings.table_name, dynamodb),
            arrays=ArrayService(scheduler_role_arn=settings.backup_scheduler_role_arn),
            dynamodb=dynamodb,
            ec2=client("ec2"),
            ssm=client("ssm"),
            table=settings.table_name,
            autoscaling=client("autoscaling"),
        )
    )
    result = steps.run(request)
    logger.info("reconcile step", extra={"result": result})
    return result
