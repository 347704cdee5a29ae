"""ScaleArray's paths out, run by the Step Functions engine with mocked task answers."""

import json
from collections.abc import Callable
from typing import Any

from tests.workflows.conftest import ROOT, entered, run_case

NAME = "vsa-wf-scale-array"  # the key in mock_config.json
REQUEST = json.loads((ROOT / "events" / "stepfunctions" / "task_plan_scale.json").read_text())


def test_unregistered_array_ends_in_the_fail_state_without_recording(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given PlanScale answers ArrayNotFoundError / When the workflow runs
    run = run_case(sfn, workflow(NAME, "scale_array.asl.json"), "ArrayNotRegistered", REQUEST)
    # Then it fails with that error and its cause, and writes nothing
    assert run["status"] == "FAILED"
    assert run["error"] == "ArrayNotFoundError"
    assert run["cause"] == "array wf-missing is not registered"
    assert "RecordDecision" not in entered(run)


def test_throttled_plan_is_retried_then_recorded(sfn: Any, workflow: Callable[[str, str], str]) -> None:
    # Given Lambda throttles the first PlanScale call / When the workflow runs
    run = run_case(sfn, workflow(NAME, "scale_array.asl.json"), "LambdaThrottledThenPlans", REQUEST)
    # Then the retry policy tries again, and the decision is recorded and returned
    assert run["status"] == "SUCCEEDED", run.get("cause")
    scheduled = [e for e in run["events"] if e["type"] == "TaskScheduled"]
    plan_attempts = [e for e in scheduled if e["taskScheduledEventDetails"]["resource"] == "invoke"]
    assert len(plan_attempts) == 2
    assert entered(run) == ["PlanScale", "RecordDecision", "RecordDesiredCount"]
    assert json.loads(run["output"])["desired_controllers"] == 4


def test_decision_already_recorded_still_sets_the_desired_count(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given a redelivered alarm whose decision row already exists (the condition fails)
    run = run_case(sfn, workflow(NAME, "scale_array.asl.json"), "DecisionAlreadyRecorded", REQUEST)
    # Then the workflow carries on to the desired count instead of failing
    assert run["status"] == "SUCCEEDED", run.get("cause")
    assert entered(run) == ["PlanScale", "RecordDecision", "RecordDesiredCount"]


def test_lambda_down_for_good_fails_after_the_retry_budget(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given Lambda keeps failing / Then the workflow gives up after 1 + 3 attempts with that error
    run = run_case(sfn, workflow(NAME, "scale_array.asl.json"), "PlanFailsForGood", REQUEST)
    assert run["status"] == "FAILED"
    assert run["error"] == "Lambda.ServiceException"
    attempts = [e for e in run["events"] if e["type"] == "TaskScheduled"]
    assert len(attempts) == 4
