"""DeleteArray's waiting and failure paths, run by the Step Functions engine with mocked tasks."""

from collections.abc import Callable
from typing import Any

from tests.workflows.conftest import entered, run_case

NAME = "vsa-wf-delete-array"  # the key in mock_config.json
REQUEST = {"arrayId": "wf-d", "groupName": "vsa-wf-d-controllers", "deleteVolumes": True}


def test_waits_for_the_group_then_retries_finish_until_volumes_detach(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given the group is still there at the first poll and a volume still detaching at first
    run = run_case(sfn, workflow(NAME, "delete_array.asl.json"), "GroupGoneAfterTwoPolls", REQUEST)
    # Then the workflow polls again (the waiting is the workflow's), retries Finish, forgets
    assert run["status"] == "SUCCEEDED", run.get("cause")
    states = entered(run)
    assert states.count("DescribeGroup") == 2
    assert states.count("WaitForGroup") == 2
    assert states[-3:] == ["Finish", "Forget", "Deleted"]
    finish_attempts = [
        e
        for e in run["events"]
        if e["type"] == "TaskScheduled" and "finish" in e["taskScheduledEventDetails"]["parameters"]
    ]
    assert len(finish_attempts) == 2


def test_a_failed_step_is_recorded_on_the_array_and_fails_the_workflow(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow(NAME, "delete_array.asl.json"), "ReleaseFails", REQUEST)
    assert run["status"] == "FAILED"
    assert run["error"] == "DeleteArrayFailed"
    assert "autoscaling:DeleteAutoScalingGroup" in run["cause"]
    assert entered(run) == ["Init", "Release", "RecordFailure", "DeleteFailed"]
    recorded = [
        e["taskScheduledEventDetails"]["parameters"]
        for e in run["events"]
        if e["type"] == "TaskScheduled" and "deleteFailure" in e["taskScheduledEventDetails"]["parameters"]
    ]
    assert len(recorded) == 1
    assert "AccessDeniedException" in recorded[0]
