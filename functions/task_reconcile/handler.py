"""ReconcileArray steps (lock, start, poll, verify), DrainController's handover and
BootstrapController's start of one: one step per invocation (``step`` in the input), done by
``vsa_core.reconcile.aws_steps``."""

from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.clients import client
from vsa_core.observability import logger, tracer
from vsa_core.reconcile.aws_start import ReconcileStarter
from vsa_core.reconcile.aws_steps import ReconcileContext, Steps
from vsa_core.reconcile.steps import Request
from vsa_core.settings import Deployment, Loader, NodeKeys, ReconcileWorkflow, Registry


class Settings(Deployment, Registry, NodeKeys, ReconcileWorkflow):
    """The registry, the KMS key of the arrays' key secrets, the deployment's name, the
    ReconcileArray workflow (BootstrapController's handover starts it)."""


settings = Loader(Settings)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@settings.first
@event_parser(model=Request)
def lambda_handler(event: Request, context: LambdaContext) -> dict[str, Any]:
    request = event.root
    logger.append_keys(step=request.step, array_id=request.array_id, execution=request.owner)
    config = settings()
    dynamodb = client("dynamodb")
    steps = Steps(
        ReconcileContext(
            registry=ArrayRegistry(config.table_name, dynamodb),
            # no role: reconcile creates volumes and keys, never a schedule (the key's ARN names
            # the account)
            arrays=ArrayService(scheduler_role_arn="", keys_kms_key_id=config.keys_kms_key_id),
            dynamodb=dynamodb,
            ec2=client("ec2"),
            ssm=client("ssm"),
            table=config.table_name,
            autoscaling=client("autoscaling"),
            starter=ReconcileStarter(
                client("stepfunctions"), dynamodb, config.table_name, config.reconcile_state_machine_arn
            ),
        )
    )
    result = steps.run(request)
    logger.info("reconcile step", extra={"result": result})
    return result
