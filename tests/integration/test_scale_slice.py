"""The scaling slice end to end: alarm event -> on_iops_alarm -> ScaleArray -> task_plan_scale -> registry.

Proved by its effects in the deployed stack (the execution's history, the decision item, the
registry's desired count), not by mocks.
"""

from typing import Any

import boto3

from tests.integration.conftest import (
    alarm_event_for,
    execution_history,
    function_logs,
    put_event,
    wait_for_execution,
)
from tests.specs import BASE
from vsa_core.model import ArraySpec
from vsa_core.naming import scale_execution_name


def _register(registry: Any, array_id: str) -> None:
    registry.create(
        ArraySpec(arrayId=array_id, availabilityZone="us-east-1a", **BASE, minControllers=2, maxControllers=8)
    )


def _execution_name(event: dict[str, Any], array_id: str) -> str:
    return scale_execution_name(array_id, event["resources"][0], event["detail"]["state"]["timestamp"])


def test_alarm_event_records_a_scale_decision(stack_outputs, registry, array_id):
    # Given a registered array at its minimum of 2 controllers
    _register(registry, array_id)
    # When its high-IOPS alarm fires with a demand of 612,345 IOPS
    event = alarm_event_for(array_id, demand=612_345.0, state_timestamp="2026-11-02T17:04:40.989+0000")
    put_event(event)
    # Then ScaleArray runs to success through the real Lambda step and the DynamoDB writes
    execution = wait_for_execution(
        stack_outputs["ScaleArrayStateMachineArn"], _execution_name(event, array_id)
    )
    assert execution["status"] == "SUCCEEDED", execution
    history = execution_history(execution["executionArn"])
    entered = [e["stateEnteredEventDetails"]["name"] for e in history if e["type"] == "TaskStateEntered"]
    assert entered == ["PlanScale", "RecordDecision", "RecordDesiredCount"]
    assert any(e["type"] == "TaskSucceeded" for e in history)
    # And the decision, with its inputs, is in the registry: ceil(612345 / (260000 * 0.7)) = 4
    decisions = registry.decisions(array_id)
    assert len(decisions) == 1
    decision = decisions[0]
    assert decision["desired_controllers"] == 4
    assert decision["current_controllers"] == 2
    assert decision["demand_iops"] == 612_345.0
    assert decision["action"] == "scale-out"
    assert execution["name"] in decision["sk"]
    # And the array's desired count moved to 4, its version with it
    array = registry.get(array_id)
    assert (array.desired_controllers, array.version) == (4, 2)


def test_repeated_alarm_event_starts_one_workflow(stack_outputs, registry, array_id):
    # Given a registered array
    _register(registry, array_id)
    event = alarm_event_for(array_id, demand=300_000.0, state_timestamp="2026-11-02T18:00:00.000+0000")
    # When EventBridge delivers the same alarm state change twice
    put_event(event)
    put_event(event)
    # Then exactly one ScaleArray execution ran for it, and one decision was recorded
    name = _execution_name(event, array_id)
    execution = wait_for_execution(stack_outputs["ScaleArrayStateMachineArn"], name)
    assert execution["status"] == "SUCCEEDED"
    duplicates = function_logs(stack_outputs["OnIopsAlarmFunctionName"], "duplicate alarm event")
    assert any(name in line for line in duplicates), duplicates
    sfn = boto3.client("stepfunctions")
    executions = sfn.list_executions(stateMachineArn=stack_outputs["ScaleArrayStateMachineArn"])["executions"]
    assert [e["name"] for e in executions].count(name) == 1
    assert len(registry.decisions(array_id)) == 1


def test_alarm_for_unregistered_array_fails_the_workflow_by_name(stack_outputs, array_id):
    # Given an array id nobody registered
    event = alarm_event_for(array_id, demand=100_000.0, state_timestamp="2026-11-02T19:00:00.000+0000")
    # When its alarm fires
    put_event(event)
    # Then the workflow fails with the named domain error, caught and surfaced by the ASL
    execution = wait_for_execution(
        stack_outputs["ScaleArrayStateMachineArn"], _execution_name(event, array_id)
    )
    assert execution["status"] == "FAILED"
    assert execution.get("error") == "ArrayNotFoundError"
    assert array_id in execution.get("cause", "")
