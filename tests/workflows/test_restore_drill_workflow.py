"""RestoreDrill's paths, run by the Step Functions engine with mocked tasks: every path ends in
cleanup (a passed drill, failed checks, a step that fails), a cleanup-only run goes straight to
it, and a drill that did not pass fails the run (its alarm)."""

from collections.abc import Callable
from typing import Any

from tests.workflows.conftest import entered, lambda_inputs, run_case

NAME = "vsa-wf-restore-drill"  # the key in mock_config.json
REQUEST = {"arrayId": "wf-d", "drillId": "dr-20261129T050000000Z-1a2b3c4d", "cleanupOnly": False}


def test_a_passed_drill_restores_launches_attaches_checks_then_cleans_up(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow(NAME, "restore_drill.asl.json"), "Passes", REQUEST)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    steps = [s for s in entered(run) if s in ("Restore", "Launch", "Attach", "Check", "Cleanup")]
    assert steps == ["Restore", "Launch", "Attach", "Check", "Cleanup"]
    # the volumes were not ready at the first look: one wait, then a second look
    assert entered(run).count("VolumesReady") == 2
    assert entered(run).count("VolumesReadyWait") == 1
    assert lambda_inputs(run, "fail") == []
    assert all(i["drillId"] == REQUEST["drillId"] for i in lambda_inputs(run, "cleanup"))


def test_failed_checks_still_clean_up_and_fail_the_run(sfn: Any, workflow: Callable[[str, str], str]) -> None:
    run = run_case(sfn, workflow(NAME, "restore_drill.asl.json"), "ChecksFail", REQUEST)
    assert run["status"] == "FAILED"
    assert run["error"] == "DrillFailed"
    states = entered(run)
    assert states.index("Checked") < states.index("Cleanup") < states.index("DrillFailed")
    assert "RecordFailure" not in states  # the verdict was the checks', recorded by Checked


def test_a_failing_step_records_the_error_then_cleans_up_until_nothing_is_left(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow(NAME, "restore_drill.asl.json"), "InstanceGone", REQUEST)
    assert run["status"] == "FAILED"
    states = entered(run)
    assert "Attach" not in states
    assert states.index("NodeReady") < states.index("RecordFailure") < states.index("Cleanup")
    [failure] = lambda_inputs(run, "fail")
    assert failure["error"]["Error"] == "DrillStepError"
    # cleanup looked again after its wait, until nothing was left
    assert states.count("Cleanup") == 2
    assert states.count("CleanupWait") == 1
    assert states[-1] == "DrillFailed"


def test_a_cleanup_only_run_goes_straight_to_cleanup(sfn: Any, workflow: Callable[[str, str], str]) -> None:
    run = run_case(
        sfn, workflow(NAME, "restore_drill.asl.json"), "CleanupOnly", {**REQUEST, "cleanupOnly": True}
    )
    assert entered(run) == [
        "Init",
        "CleanupOnly?",
        "CleanupStart",
        "Cleanup",
        "Cleaned?",
        "Passed?",
        "DrillFailed",
    ]
