"""EventBridge ``CloudWatch Alarm State Change`` for a VSA IOPS alarm → start ScaleArray, once per
state change (the core derives the execution's name from it: a repeated delivery starts nothing)."""

import time
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from vsa_core.arrays.lock import SCALE_LEASE_SECONDS
from vsa_core.clients import client
from vsa_core.naming import match_iops_alarm_name, scale_execution_name
from vsa_core.observability import logger, metrics, tracer
from vsa_core.scaling.events import AlarmStateChangeEvent, ScaleRequest
from vsa_core.settings import AlarmRearm, Deployment, Loader, ScaleWorkflow

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient


class Settings(Deployment, ScaleWorkflow, AlarmRearm):
    """The ScaleArray workflow, when it re-arms the alarm, the deployment's name (its alarms')."""


settings = Loader(Settings)


def start_scale(event: AlarmStateChangeEvent, sfn: "SFNClient") -> dict[str, Any]:
    detail = event.detail
    parsed = match_iops_alarm_name(detail.alarm_name)
    if parsed is None:
        # not an array's IOPS alarm (a wider rule, a hand-made event): nothing to scale or retry
        logger.info("not a VSA IOPS alarm; ignored", extra={"alarm": detail.alarm_name, "event_id": event.id})
        metrics.add_metric(name="IgnoredAlarmEvents", unit=MetricUnit.Count, value=1)
        return {"started": False, "reason": f"alarm {detail.alarm_name!r} is not a VSA IOPS alarm"}
    array_id, kind = parsed
    logger.append_keys(array_id=array_id, alarm=detail.alarm_name, event_id=event.id)
    if detail.state.value != "ALARM":
        logger.info("alarm left ALARM; nothing to scale", extra={"state": detail.state.value})
        return {"started": False, "reason": f"alarm state is {detail.state.value}, not ALARM"}
    now = int(time.time())
    request = ScaleRequest(
        lock_now=now,
        lock_until=now + SCALE_LEASE_SECONDS,
        array_id=array_id,
        alarm_name=detail.alarm_name,
        alarm_kind=kind,
        demand_iops=detail.state.latest_datapoint(),
        state_timestamp=detail.state.timestamp,
        event_id=event.id,
        rearm_seconds=settings().alarm_rearm_seconds,
    )
    alarm_arn = event.resources[0] if event.resources else detail.alarm_name
    name = scale_execution_name(array_id, alarm_arn, detail.state.timestamp)
    try:
        execution = sfn.start_execution(
            stateMachineArn=settings().scale_state_machine_arn,
            name=name,
            input=request.model_dump_json(by_alias=True, exclude_none=True),
        )
    except sfn.exceptions.ExecutionAlreadyExists:
        logger.info("duplicate alarm event: execution already started", extra={"execution": name})
        metrics.add_metric(name="DuplicateAlarmEvents", unit=MetricUnit.Count, value=1)
        return {"started": False, "reason": "duplicate event", "executionName": name}
    logger.info("ScaleArray started", extra={"execution": name, "demand_iops": request.demand_iops})
    metrics.add_metric(name="ScaleWorkflowsStarted", unit=MetricUnit.Count, value=1)
    return {"started": True, "executionArn": execution["executionArn"], "executionName": name}


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
@settings.first
@event_parser(model=AlarmStateChangeEvent)
def lambda_handler(event: AlarmStateChangeEvent, context: LambdaContext) -> dict[str, Any]:
    return start_scale(event, client("stepfunctions"))
