"""The arrays REST API (API Gateway, IAM auth): the routes and the error mapping are
``vsa_core.arrays.aws_api``'s, the work ``vsa_core.arrays.aws_operations``'."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from vsa_core.arrays import replies
from vsa_core.arrays.aws_api import app
from vsa_core.observability import logger, tracer

__all__ = ["app", "lambda_handler"]


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return replies.resolve(app, event, context)
