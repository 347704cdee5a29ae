"""ScaleArray step: move the array's IOPS alarm thresholds to the new controller count.

Without it the high alarm would stay in ALARM above the old count's threshold and never fire
again for a further surge (CloudWatch emits state changes, not levels).
"""

from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, Field

from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.spec import MULTI_ATTACH_LIMIT, ArrayId
from vsa_core.observability import logger, tracer
from vsa_core.settings import Deployment, Loader, Registry


class Settings(Deployment, Registry):
    """The registry and the deployment's name."""


settings = Loader(Settings)


class ThresholdRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    array_id: ArrayId = Field(alias="arrayId")
    desired_controllers: int = Field(alias="desiredControllers", ge=0, le=MULTI_ATTACH_LIMIT)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@settings.first
@event_parser(model=ThresholdRequest)
def lambda_handler(event: ThresholdRequest, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(array_id=event.array_id)
    array = ArrayRegistry(settings().table_name).get(event.array_id)
    if array.deleting is not None:  # DeleteArray removes the alarms: putting them back would outlive it
        logger.info("array being deleted: alarms left alone")
        return {"arrayId": event.array_id, "changes": []}
    spec = array.spec
    # no role: thresholds are the alarms' only, no schedule is created
    service = ArrayService(scheduler_role_arn="")
    changes = service.set_alarm_thresholds(spec, event.desired_controllers)
    logger.info("alarm thresholds set", extra={"changes": [c.as_dict() for c in changes]})
    return {"arrayId": event.array_id, "changes": [c.as_dict() for c in changes]}
