"""Start the controller workflow an event asks for, once per event (Step Functions refuses a
second execution of a name: a redelivered event starts nothing)."""

from typing import TYPE_CHECKING, Any

from vsa_core.controllers.events import ControllerEvent, execution
from vsa_core.observability import logger
from vsa_core.settings import get_settings

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient


def start(event: ControllerEvent, raw: str, sfn: "SFNClient") -> dict[str, Any]:
    workflow, name = execution(event)
    settings = get_settings()
    arn = (
        settings.bootstrap_state_machine_arn if workflow == "bootstrap" else settings.drain_state_machine_arn
    )
    try:
        started = sfn.start_execution(stateMachineArn=arn, name=name, input=raw)
    except sfn.exceptions.ExecutionAlreadyExists:
        logger.info("duplicate controller event", extra={"execution": name})
        return {"started": False, "execution": name, "reason": "duplicate event"}
    logger.info("controller workflow started", extra={"execution": name, "workflow": workflow})
    return {"started": True, "execution": name, "executionArn": started["executionArn"]}
