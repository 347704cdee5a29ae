"""ScaleArray step: load the array from the registry and plan its controller count.

Called only by the ScaleArray workflow. The decision is returned, not written: the workflow
records it (a conditional DynamoDB write in the ASL), so a retried step writes nothing twice.
"""

from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from vsa_core.events import ScaleRequest
from vsa_core.observability import logger, tracer
from vsa_core.planner import plan
from vsa_core.registry import ArrayRegistry
from vsa_core.settings import get_settings


def plan_scale(request: ScaleRequest, registry: ArrayRegistry) -> dict[str, Any]:
    array = registry.get(request.array_id)
    decision = plan(array.spec, request.demand_iops, array.desired_controllers)
    logger.info("scale decision", extra=decision.as_dict())
    return {**decision.as_dict(), "alarmName": request.alarm_name, "eventId": request.event_id}


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=ScaleRequest)
def lambda_handler(event: ScaleRequest, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(array_id=event.array_id)
    return plan_scale(event, ArrayRegistry(get_settings().table_name))
