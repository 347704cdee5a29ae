"""The backups REST API (API Gateway, IAM auth): the routes, the request models, the
idempotency of POSTs and the error mapping are ``vsa_core.api.aws_backups``'s."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from vsa_core.api import replies
from vsa_core.api.aws_backups import BackupsApiSettings, app, idempotency_config
from vsa_core.observability import logger, tracer
from vsa_core.settings import Deployment, Loader

__all__ = ["app", "lambda_handler", "settings"]


class Settings(Deployment, BackupsApiSettings):
    """The routes' settings (``BackupsApiSettings``) and the deployment's name."""


settings = Loader(Settings)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@settings.first
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    app.context["settings"] = settings()  # the routes read it (cleared after each request)
    # an in-progress record expires with the invocation, so a request that timed out can be retried
    idempotency_config().register_lambda_context(context)
    return replies.resolve(app, event, context)
