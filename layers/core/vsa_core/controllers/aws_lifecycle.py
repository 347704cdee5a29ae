"""Start the controller workflow an event asks for, once per event (Step Functions refuses a
second execution of a name: a redelivered event starts nothing), and none for an instance that
is not a controller (one keyed read of the registry's ``instances`` index)."""

from typing import TYPE_CHECKING, Any

from vsa_core.arrays.aws_index import slot_keys
from vsa_core.controllers.events import ControllerEvent, execution, lifecycle_group, lost_instance
from vsa_core.naming import group_array_id
from vsa_core.observability import logger
from vsa_core.settings import ControllerWorkflows, Registry

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_stepfunctions import SFNClient


class LifecycleSettings(Registry, ControllerWorkflows):
    """What starting a controller workflow reads: the registry and the two workflows."""


def start(
    event: ControllerEvent,
    raw: str,
    sfn: "SFNClient",
    dynamodb: "DynamoDBClient",
    settings: LifecycleSettings,
) -> dict[str, Any]:
    workflow, name = execution(event)
    lost = lost_instance(event)
    if lost is not None and not slot_keys(dynamodb, settings.table_name, lost.instance_id):
        # any instance of the region, or a controller drained already (a scale-in's leaver,
        # the second state change of a lost one): nothing to drain, no execution
        logger.info(
            "not a controller: no workflow started",
            extra={"instance_id": lost.instance_id, "state": lost.state, "execution": name},
        )
        return {"started": False, "execution": name, "reason": "not a controller"}
    group = lifecycle_group(event)
    if group is not None and not _registered(dynamodb, settings.table_name, group_array_id(group)):
        # another deployment's array (the rule matches every vsa-*-controllers group of the
        # account and region), or one this deployment has forgotten: its own control plane
        # answers the lifecycle action; a bootstrap here would fail and ABANDON its controller
        logger.info(
            "not an array of this deployment: no workflow started",
            extra={"group": group, "execution": name},
        )
        return {"started": False, "execution": name, "reason": "not an array of this deployment"}
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


def _registered(dynamodb: "DynamoDBClient", table: str, array_id: str | None) -> bool:
    """Whether this deployment's registry holds the array (one keyed read of its spec item)."""
    if array_id is None:
        return False
    item = dynamodb.get_item(
        TableName=table,
        Key={"pk": {"S": f"ARRAY#{array_id}"}, "sk": {"S": "SPEC"}},
        ProjectionExpression="pk",
        ConsistentRead=True,
    )
    return "Item" in item
