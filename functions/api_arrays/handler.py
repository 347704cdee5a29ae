"""The arrays REST API (API Gateway, IAM auth): the routes and the error mapping are
``vsa_core.api.aws_arrays``'s, the work ``vsa_core.api.aws_operations``'."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from vsa_core.api import replies
from vsa_core.api.aws_arrays import ArraysApiSettings, app
from vsa_core.observability import logger, tracer
from vsa_core.settings import Deployment, Loader

__all__ = ["app", "lambda_handler", "settings"]


class Settings(Deployment, ArraysApiSettings):
    """The routes' settings (``ArraysApiSettings``) and the deployment's name."""


settings = Loader(Settings)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@settings.first
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    app.context["settings"] = settings()  # the routes read it (cleared after each request)
    return replies.resolve(app, event, context)
