"""BootstrapController / DrainController steps that need more than one AWS call or a decision:
one step per invocation (``step`` in the input), done by ``vsa_core.controllers.aws_steps``."""

from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.clients import client
from vsa_core.controllers.aws_steps import Steps
from vsa_core.controllers.steps import Request
from vsa_core.observability import logger, tracer
from vsa_core.settings import Deployment, Loader, NodeKeys, Registry


class Settings(Deployment, Registry, NodeKeys):
    """The registry, the KMS key of the node secrets, the deployment's name."""


settings = Loader(Settings)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@settings.first
@event_parser(model=Request)
def lambda_handler(event: Request, context: LambdaContext) -> dict[str, Any]:
    request = event.root
    logger.append_keys(step=request.step, instance_id=request.instance_id)
    config = settings()
    steps = Steps(
        ArrayRegistry(config.table_name),
        # no role: a controller's steps create no schedule, and the key's ARN names the account
        ArrayService(scheduler_role_arn="", keys_kms_key_id=config.keys_kms_key_id),
        client("ec2"),
        client("ssm"),
    )
    result = steps.run(request)
    logger.info("controller step", extra={"result": result})
    return result
