"""A service object's method that is one function of an ``aws_*`` module, called with the
object's context (its injected clients) first: ``start = on_context(aws_sets.start)``. The
facades (``ArrayService``, ``BackupService``, ``Steps``) are then a constructor and a list of
which module does each step, with the functions' own signatures."""

from collections.abc import Callable
from typing import Any, Concatenate


class on_context[C, **P, R]:  # noqa: N801 - used like a decorator: start = on_context(...)
    def __init__(self, function: Callable[Concatenate[C, P], R]) -> None:
        self.function = function
        self.__doc__ = function.__doc__

    def __get__(self, owner: Any, kind: type | None = None) -> Callable[P, R]:
        function, ctx = self.function, owner.ctx

        def bound(*args: P.args, **kwargs: P.kwargs) -> R:
            return function(ctx, *args, **kwargs)

        return bound
