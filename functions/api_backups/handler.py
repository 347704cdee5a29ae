"""The backups REST API (API Gateway, IAM auth): the routes, the request models, the
idempotency of POSTs and the error mapping are ``vsa_core.api.aws_backups``'s."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from vsa_core.api import replies
from vsa_core.api.aws_backups import app, idempotency_config
from vsa_core.observability import logger, tracer

__all__ = ["app", "lambda_handler"]


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # an in-progress record expires with the invocation, so a request that timed out can be retried
    idempotency_config().register_lambda_context(context)
    return replies.resolve(app, event, context)
