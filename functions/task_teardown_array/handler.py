"""DeleteArray steps (called only by the DeleteArray workflow; one step per call):

    release  delete the backup schedule and the alarms, force-delete the controller group
    finish   once the group is gone: the launch template the control plane created and, when
             asked, the volumes it created (``TeardownPendingError`` while AWS still lets go:
             the workflow retries with backoff)
    forget   remove the array and its decisions from the registry

Waiting is the workflow's (Wait/Choice loop on the group, Retry on TeardownPendingError).
"""

from typing import Any, Literal

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, Field

from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.spec import ArrayId
from vsa_core.observability import logger, tracer
from vsa_core.settings import Deployment, Loader, NodeKeys, Registry


class Settings(Deployment, Registry, NodeKeys):
    """The registry, the KMS key of the arrays' key secrets, the deployment's name."""


settings = Loader(Settings)


class TeardownStep(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    step: Literal["release", "finish", "forget"]
    array_id: ArrayId = Field(alias="arrayId")
    delete_volumes: bool = Field(default=False, alias="deleteVolumes")


def run_step(request: TeardownStep, registry: ArrayRegistry, service: ArrayService) -> dict[str, Any]:
    if request.step == "forget":
        registry.forget(request.array_id)
        return {"step": "forget", "arrayId": request.array_id}
    spec = registry.get(request.array_id).spec
    if request.step == "release":
        changes = service.release(spec)
    else:
        changes = service.finish(spec, delete_volumes=request.delete_volumes)
    logger.info("teardown step done", extra={"step": request.step, "changes": [c.as_dict() for c in changes]})
    return {"step": request.step, "arrayId": request.array_id, "changes": [c.as_dict() for c in changes]}


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@settings.first
@event_parser(model=TeardownStep)
def lambda_handler(event: TeardownStep, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(array_id=event.array_id, step=event.step)
    config = settings()
    return run_step(
        event,
        ArrayRegistry(config.table_name),
        # no role: teardown deletes schedules and keys, creates none (the key's ARN names the account)
        ArrayService(scheduler_role_arn="", keys_kms_key_id=config.keys_kms_key_id),
    )
