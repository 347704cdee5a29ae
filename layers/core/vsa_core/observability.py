"""The one place that builds the logger, tracer and metrics every function uses.

Service name and metrics namespace come from POWERTOOLS_SERVICE_NAME and
POWERTOOLS_METRICS_NAMESPACE (set in the template's Globals). ``parses`` is the handlers'
other edge decorator: the event validated into its model."""

from collections.abc import Callable
from functools import wraps
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from pydantic import BaseModel


class DeferredTracer:
    """powertools' ``Tracer``, created at its first use rather than at import.

    Creating a ``Tracer`` imports the X-Ray SDK and, with tracing active, patches botocore and
    the other libraries the SDK supports: a cost every cold start's import paid even for a
    handler whose tracing is off. ``capture_lambda_handler`` here wraps the handler at import
    without it and hands it to the real ``Tracer.capture_lambda_handler`` on the first
    invocation, which then traces exactly as before (cold-start annotation, response and error
    metadata, botocore subsegments: the SDK patches botocore's client class, so clients made
    before that are traced too). Any other attribute is the real tracer's (created on demand).
    """

    def __init__(self) -> None:
        self._tracer: Tracer | None = None

    @property
    def tracer(self) -> Tracer:
        """The powertools ``Tracer`` (created now if not yet: reads the environment)."""
        if self._tracer is None:
            self._tracer = Tracer()
        return self._tracer

    def capture_lambda_handler[**P, R](self, handler: Callable[P, R]) -> Callable[P, R]:
        traced: Callable[..., Any] | None = None

        @wraps(handler)
        def first_use(*args: P.args, **kwargs: P.kwargs) -> R:
            nonlocal traced
            if traced is None:
                traced = self.tracer.capture_lambda_handler(handler)
            result: R = traced(*args, **kwargs)
            return result

        return first_use

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tracer, name)


logger = Logger()
tracer = DeferredTracer()
metrics = Metrics()


def parses[M: BaseModel, C, R](
    model: type[M],
) -> Callable[[Callable[[M, C], R]], Callable[[dict[str, Any] | str, C], R]]:
    """Decorates ``handler(event: Model, context)`` into ``handler(event: dict | str, context)``.

    The same as powertools' ``event_parser(model=Model)`` for a plain model and no envelope, which is
    all these handlers use: the event (a dict, or its JSON text) is validated with
    ``Model.model_validate`` and the handler receives the model; an event that does not fit raises
    pydantic's ``ValidationError``, as ``event_parser`` does.

    Why not ``event_parser`` itself: importing it costs every cold start about 18 ms (0.12x of a bare
    ``import boto3``; ``make bench-coldstart``), none of which these handlers use: its module imports
    ``pydantic.networks`` and ``pydantic.types`` (for ``IPvAnyNetwork``) and the middleware factory,
    and it wraps the model in a ``TypeAdapter`` built again on the first invocation.
    """

    def decorate(handler: Callable[[M, C], R]) -> Callable[[dict[str, Any] | str, C], R]:
        @wraps(handler)
        def parsed(event: dict[str, Any] | str, context: C) -> R:
            if isinstance(event, str):
                return handler(model.model_validate_json(event), context)
            return handler(model.model_validate(event), context)

        return parsed

    return decorate
