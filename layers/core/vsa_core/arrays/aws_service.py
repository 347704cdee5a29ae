"""The AWS side of an array as one entry point: validate a spec, converge AWS on it, report
status, set alarm thresholds, tear it down.

A facade: each call is one function of the ``aws_*`` module that owns it (``aws_validate``,
``aws_apply``, ``aws_observe``, ``aws_status``, ``aws_teardown``), given the clients this object
was built with. Every decision (names, parameters, thresholds, what changed) is in
``vsa_core.arrays.plan``. Clients are injected (or come from ``vsa_core.clients``).
"""

from typing import Any

from vsa_core.arrays import aws_apply, aws_observe, aws_status, aws_teardown, aws_validate
from vsa_core.arrays.aws_observe import SERVING_STATES, ArrayClients
from vsa_core.arrays.plan import Change
from vsa_core.arrays.spec import ArraySpec, RegisteredArray
from vsa_core.clients import client

__all__ = ["SERVING_STATES", "ArrayClients", "ArrayService"]


class ArrayService:
    """Validates, applies, reports and tears down one array's AWS resources."""

    def __init__(
        self,
        *,
        scheduler_role_arn: str,
        ec2: Any = None,
        autoscaling: Any = None,
        cloudwatch: Any = None,
        scheduler: Any = None,
        ssm: Any = None,
        wait_delay_seconds: int = 5,
        wait_max_attempts: int = 60,
    ) -> None:
        # wait_*: kept for the callers that pass them; nothing in an array's steps waits (the
        # DeleteArray workflow's Wait states do)
        self.clients = ArrayClients(
            ec2=ec2 or client("ec2"),
            autoscaling=autoscaling or client("autoscaling"),
            cloudwatch=cloudwatch or client("cloudwatch"),
            scheduler=scheduler or client("scheduler"),
            ssm=ssm or client("ssm"),
            scheduler_role_arn=scheduler_role_arn,
        )
        self._autoscaling = self.clients.autoscaling

    def validate(self, spec: ArraySpec, current: RegisteredArray | None) -> None:
        aws_validate.validate(self.clients, spec, current)

    def apply(self, spec: ArraySpec, desired_controllers: int) -> list[Change]:
        return aws_apply.apply(self.clients, spec, desired_controllers)

    def set_alarm_thresholds(self, spec: ArraySpec, desired_controllers: int) -> list[Change]:
        return aws_apply.set_alarm_thresholds(self.clients, spec, desired_controllers)

    def volume_ids(self, spec: ArraySpec) -> tuple[str, ...]:
        return aws_observe.volume_ids(self.clients, spec)

    def status(self, spec: ArraySpec) -> dict[str, Any]:
        return aws_status.status(self.clients, spec)

    def busy_reason(self, spec: ArraySpec) -> str | None:
        return aws_status.busy_reason(self.clients, spec)

    def release(self, spec: ArraySpec) -> list[Change]:
        return aws_teardown.release(self.clients, spec)

    def finish(self, spec: ArraySpec, *, delete_volumes: bool) -> list[Change]:
        return aws_teardown.finish(self.clients, spec, delete_volumes=delete_volumes)
