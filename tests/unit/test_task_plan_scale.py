"""task_plan_scale: the ScaleArray step that loads the array and plans its controller count."""

import json
from typing import Any

import boto3
import pytest

from task_plan_scale import handler
from tests.specs import BASE
from tests.unit.conftest import REGION, FakeLambdaContext, load_event
from vsa_core.errors import ArrayNotFoundError
from vsa_core.events import ScaleRequest
from vsa_core.model import ArraySpec
from vsa_core.planner import plan
from vsa_core.registry import ArrayRegistry, array_key

REQUEST: dict[str, Any] = load_event("stepfunctions/task_plan_scale.json")
DEMO = ArraySpec(arrayId="demo", availabilityZone="us-east-1a", **BASE, minControllers=2, maxControllers=8)


@pytest.fixture
def registry(registry_table: str) -> ArrayRegistry:
    return ArrayRegistry(registry_table, boto3.client("dynamodb", region_name=REGION))


def set_desired(table: str, array_id: str, desired: int) -> None:
    """What the workflow's RecordDesiredCount state does after a decision."""
    boto3.client("dynamodb", region_name=REGION).update_item(
        TableName=table,
        Key=array_key(array_id),
        UpdateExpression="SET desiredControllers = :desired ADD version :one",
        ExpressionAttributeValues={":desired": {"N": str(desired)}, ":one": {"N": "1"}},
    )


def test_plan_scale_returns_the_decision_with_the_alarm_it_came_from(registry: ArrayRegistry):
    # Given array "demo" registered at its minimum of 2 controllers
    registry.create(DEMO)
    # When its high alarm asks for 612,345 IOPS
    decision = handler.plan_scale(ScaleRequest.model_validate(REQUEST), registry)
    # Then the decision is the plan from the registered count, plus the alarm and event ids
    assert decision == {
        **plan(DEMO, 612_345.0, current_controllers=2).as_dict(),
        "alarmName": "vsa-demo-iops-high",
        "eventId": "c4c1c1c9-6542-e61b-6ef0-8c4d36933a92",
    }
    assert decision["array_id"] == "demo"
    assert decision["current_controllers"] == 2
    assert decision["desired_controllers"] == 4
    assert decision["action"] == "scale-out"


def test_plan_scale_plans_from_the_count_the_workflow_last_set(registry: ArrayRegistry, registry_table: str):
    # Given array "demo" last scaled to 6 controllers
    registry.create(DEMO)
    set_desired(registry_table, "demo", 6)
    # When its low alarm reports demand only 2 controllers need
    request = ScaleRequest.model_validate({**REQUEST, "alarmName": "vsa-demo-iops-low", "alarmKind": "low",
                                           "demandIops": 200_000.0})  # fmt: skip
    decision = handler.plan_scale(request, registry)
    # Then it scales in one controller from 6
    assert (decision["current_controllers"], decision["desired_controllers"]) == (6, 5)
    assert decision["action"] == "scale-in"
    assert decision["alarmName"] == "vsa-demo-iops-low"


def test_plan_scale_of_an_unregistered_array_raises_array_not_found(registry: ArrayRegistry):
    # Given an empty registry / When planned / Then ArrayNotFoundError (the ASL's Catch matches its name)
    with pytest.raises(ArrayNotFoundError):
        handler.plan_scale(ScaleRequest.model_validate(REQUEST), registry)


def test_handler_plans_from_the_table_in_its_environment(
    registry: ArrayRegistry, function_env: None, lambda_context: FakeLambdaContext
):
    # Given array "demo" registered in the table VSA_TABLE_NAME names
    registry.create(DEMO)
    # When the workflow invokes the function with its input
    result = handler.lambda_handler(dict(REQUEST), lambda_context)
    # Then it returns the decision as the JSON the workflow records (RecordDesiredCount reads
    # $.plan.decision.desired_controllers)
    payload = json.loads(json.dumps(result))
    assert payload["desired_controllers"] == 4
    assert payload["needed_controllers"] == 4
    assert payload["eventId"] == REQUEST["eventId"]


def test_handler_error_for_an_unregistered_array_is_named_for_the_workflow(
    registry_table: str, function_env: None, lambda_context: FakeLambdaContext
):
    # Given no array registered / When invoked / Then the Lambda error type is ArrayNotFoundError
    with pytest.raises(ArrayNotFoundError) as raised:
        handler.lambda_handler(dict(REQUEST), lambda_context)
    assert type(raised.value).__name__ == "ArrayNotFoundError"
