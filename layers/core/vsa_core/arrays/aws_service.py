"""The AWS side of an array as one entry point: validate a spec, converge AWS on it, report
status, set alarm thresholds, tear it down.

A facade: each call is one function of the ``aws_*`` module that owns it (``aws_validate``,
``aws_volumes``, ``aws_apply``, ``aws_observe``, ``aws_status``, ``aws_teardown``), given the
clients this object was built with. Every decision (names, parameters, thresholds, what changed) is in
``vsa_core.arrays.plan``. Clients are injected (or come from ``vsa_core.clients``).
"""

from typing import Any

from vsa_core.arrays import aws_apply, aws_observe, aws_status, aws_teardown, aws_validate, aws_volumes
from vsa_core.arrays.aws_observe import SERVING_STATES, ArrayClients
from vsa_core.clients import client
from vsa_core.steps import on_context

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
        iam: Any = None,
        secretsmanager: Any = None,
        keys_kms_key_id: str = "",
        node_role_path: str = "",
        event_bus_name: str = "default",
        wait_delay_seconds: int = 5,
        wait_max_attempts: int = 60,
    ) -> None:
        # wait_*: kept for the callers that pass them; nothing in an array's steps waits (the
        # DeleteArray workflow's Wait states do)
        self.ctx = ArrayClients(
            ec2=ec2 or client("ec2"),
            autoscaling=autoscaling or client("autoscaling"),
            cloudwatch=cloudwatch or client("cloudwatch"),
            scheduler=scheduler or client("scheduler"),
            ssm=ssm or client("ssm"),
            scheduler_role_arn=scheduler_role_arn,
            iam=iam or client("iam"),
            secretsmanager=secretsmanager or client("secretsmanager"),
            # the stack's key, node role path and bus, from the settings of the functions that
            # use them (vsa_core.settings: NodeKeys, NodeRoles, EventBus)
            keys_kms_key_id=keys_kms_key_id,
            node_role_path=node_role_path,
            event_bus_name=event_bus_name,
        )
        self._autoscaling = self.ctx.autoscaling

    validate = on_context(aws_validate.validate)
    grow_volumes = on_context(aws_volumes.grow_volumes)
    apply = on_context(aws_apply.apply)
    missing_volumes = on_context(aws_apply.missing_volumes)
    create_volumes = on_context(aws_apply.create_volumes)
    plan = on_context(aws_apply.plan_apply)
    set_alarm_thresholds = on_context(aws_apply.set_alarm_thresholds)
    volume_ids = on_context(aws_observe.volume_ids)
    status = on_context(aws_status.status)
    busy_reason = on_context(aws_status.busy_reason)
    release = on_context(aws_teardown.release)
    finish = on_context(aws_teardown.finish)
