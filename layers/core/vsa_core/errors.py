"""Named domain errors. Step Functions ``Retry``/``Catch`` match them by class name
(``errorType`` of a Lambda error is the exception's class name), and the API maps them to
HTTP status codes in one place."""


class VsaError(Exception):
    """Base of every error the control plane raises on purpose."""


class ArrayNotFoundError(VsaError):
    """The array id is not in the registry."""


class InvalidSpecError(VsaError):
    """An array spec that cannot be applied; the message says what to fix."""


class InvalidEventError(VsaError):
    """An event that does not have the shape or content the trigger expects."""


class ConflictError(VsaError):
    """The request conflicts with the array's current state (a concurrent apply won, a bootstrap,
    drain or backup is running, maxControllers below the serving controllers); the message says
    why and what to do."""


class TeardownPendingError(VsaError):
    """A teardown step found AWS still letting go (the group still exists, an owned volume is
    still attached). Not a failure: the DeleteArray workflow retries it with backoff."""


class ReconcileError(VsaError):
    """AWS refused a step of converging on a stored spec (throttling, a limit, a permission):
    the spec is stored; applying it again resumes the convergence. The API answers 502."""
