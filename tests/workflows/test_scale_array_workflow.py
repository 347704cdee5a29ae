"""ScaleArray's paths out, run by the Step Functions engine with mocked task answers."""

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.workflows.conftest import ROOT, entered, run_case

NAME = "vsa-wf-scale-array"  # the key in mock_config.json
SCALE_OUT_PATH = [
    "Scheduled",
    "AcquireLock",
    "ReadDemand",
    "PlanScale",
    "Act",
    "SetCapacity",
    "SetAlarmThresholds",
    "RecordDecision",
    "RecordDesiredCount",
    "ReleaseLock",
    "WaitBeforeRearm",
    "Rearm",
    "Done",
]
RELEASED_THEN_FAILED = [
    "ReleaseLockOnFailure",
    "WaitBeforeRearmOnFailure",
    "RearmOnFailure",
    "FailAfterRelease",
]
REQUEST = {
    **json.loads((ROOT / "events" / "stepfunctions" / "task_plan_scale.json").read_text()),
    "rearmSeconds": 1,  # the re-arm pause (60 s deployed) kept short here
}


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
    assert entered(run)[-4:] == RELEASED_THEN_FAILED  # the lock is released on the way out


def test_throttled_plan_is_retried_then_recorded(sfn: Any, workflow: Callable[[str, str], str]) -> None:
    # Given Lambda throttles the first PlanScale call / When the workflow runs
    run = run_case(sfn, workflow(NAME, "scale_array.asl.json"), "LambdaThrottledThenPlans", REQUEST)
    # Then the retry policy tries again, and the decision is recorded and returned
    assert run["status"] == "SUCCEEDED", run.get("cause")
    scheduled = [e for e in run["events"] if e["type"] == "TaskScheduled"]
    plan_attempts = [e for e in scheduled if "plan-scale" in e["taskScheduledEventDetails"]["parameters"]]
    assert len(plan_attempts) == 2
    assert entered(run) == SCALE_OUT_PATH
    assert json.loads(run["output"])["desired_controllers"] == 4


def test_the_decision_is_recorded_with_the_expiry_plan_scale_gave(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given PlanScale answers a decision with its expiresAt (the registry's TTL attribute)
    run = run_case(sfn, workflow(NAME, "scale_array.asl.json"), "LambdaThrottledThenPlans", REQUEST)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    # Then RecordDecision puts the decision item with that expiresAt, a number, as TTL reads it
    scheduled = [
        json.loads(e["taskScheduledEventDetails"]["parameters"])
        for e in run["events"]
        if e["type"] == "TaskScheduled"
        and e["taskScheduledEventDetails"]["resourceType"] == "dynamodb"
        and e["taskScheduledEventDetails"]["resource"] == "putItem"
    ]
    assert len(scheduled) == 1
    item = scheduled[0]["Item"]
    assert item["sk"]["S"].startswith("DECISION#")
    assert item["expiresAt"] == {"N": "1801440000"}


def test_a_lookaheads_run_for_a_later_minute_waits_for_it_before_it_takes_the_lock(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given a run the look-ahead started for a cycle's fall two seconds on (notBefore, UTC)
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    request = {**REQUEST, "notBefore": due.strftime("%Y-%m-%dT%H:%M:%SZ")}
    run = run_case(sfn, workflow(NAME, "scale_array.asl.json"), "LambdaThrottledThenPlans", request)
    # Then it waits until then, and only then takes the lock and plans as any run does
    assert run["status"] == "SUCCEEDED", run.get("cause")
    assert entered(run) == [SCALE_OUT_PATH[0], "WaitUntilDue", *SCALE_OUT_PATH[1:]]
    locked = next(e for e in run["events"] if e["type"] == "TaskScheduled")
    assert locked["timestamp"] >= due
    # and a run without notBefore goes straight to the lock
    assert "WaitUntilDue" not in entered(
        run_case(sfn, workflow(NAME, "scale_array.asl.json"), "LambdaThrottledThenPlans", REQUEST)
    )


def test_decision_already_recorded_still_sets_the_desired_count(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given a redelivered alarm whose decision row already exists (the condition fails)
    run = run_case(sfn, workflow(NAME, "scale_array.asl.json"), "DecisionAlreadyRecorded", REQUEST)
    # Then the workflow carries on to the desired count instead of failing
    assert run["status"] == "SUCCEEDED", run.get("cause")
    assert entered(run) == SCALE_OUT_PATH


def test_lambda_down_for_good_fails_after_the_retry_budget(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given Lambda keeps failing / Then the workflow gives up after 1 + 3 attempts with that error
    run = run_case(sfn, workflow(NAME, "scale_array.asl.json"), "PlanFailsForGood", REQUEST)
    assert run["status"] == "FAILED"
    assert run["error"] == "Lambda.ServiceException"
    attempts = [
        e
        for e in run["events"]
        if e["type"] == "TaskScheduled" and "plan-scale" in e["taskScheduledEventDetails"]["parameters"]
    ]
    assert len(attempts) == 4
    assert entered(run)[-4:] == RELEASED_THEN_FAILED


def test_a_lock_held_by_another_run_skips_without_scaling(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given another execution holds the array's scaling lock for the whole retry budget
    run = run_case(sfn, workflow(NAME, "scale_array.asl.json"), "LockHeldElsewhere", REQUEST)
    # Then this one neither plans nor scales: it ends, saying why (the holder plans with fresh state)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    answer = json.loads(run["output"])
    assert answer["action"] == "skipped"
    assert "(a ScaleArray or ReconcileArray execution)" in answer["reason"]  # either takes the lock
    assert "PlanScale" not in entered(run)
    lock_attempts = [e for e in run["events"] if e["type"] == "TaskScheduled"]
    # the first try, six retries, the existence check, then its alarm is re-armed (the holder
    # re-arms only its own)
    assert len(lock_attempts) == 1 + 6 + 1 + 1
    rearm = json.loads(lock_attempts[-1]["taskScheduledEventDetails"]["parameters"])
    assert (rearm["AlarmName"], rearm["StateValue"]) == (REQUEST["alarmName"], "OK")
    assert entered(run)[-4:] == ["LockBusy", "WaitBeforeRearm", "Rearm", "Done"]


def test_scale_in_unprotects_the_leaver_before_lowering_capacity(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow(NAME, "scale_array.asl.json"), "ScaleInOneController", REQUEST)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    path = entered(run)
    assert path.index("ReleaseLeavers") < path.index("SetCapacity")
    protection = next(
        e["taskScheduledEventDetails"]["parameters"]
        for e in run["events"]
        if e["type"] == "TaskScheduled"
        and e["taskScheduledEventDetails"]["resource"] == "setInstanceProtection"
    )
    assert "i-0a1b2c3d4e5f60009" in protection
    assert path[-4:] == ["ReleaseLock", "WaitBeforeRearm", "Rearm", "Done"]


def test_a_collapse_unprotects_every_leaver_in_one_call_then_lowers_capacity_once(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given PlanScale sheds 3 of 6 controllers at once (its window of recent demand fits 3)
    run = run_case(sfn, workflow(NAME, "scale_array.asl.json"), "ScaleInAfterACollapse", REQUEST)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    scheduled = {
        e["taskScheduledEventDetails"]["resource"]: json.loads(e["taskScheduledEventDetails"]["parameters"])
        for e in run["events"]
        if e["type"] == "TaskScheduled"
    }
    # Then the three leavers, and only they, lose their scale-in protection, before the group's
    # capacity goes to 3 (the group then terminates exactly those)
    assert scheduled["setInstanceProtection"]["InstanceIds"] == [
        "i-0a1b2c3d4e5f60005",
        "i-0a1b2c3d4e5f60004",
        "i-0a1b2c3d4e5f60003",
    ]
    assert scheduled["setInstanceProtection"]["ProtectedFromScaleIn"] is False
    assert scheduled["setDesiredCapacity"]["DesiredCapacity"] == 3
    path = entered(run)
    assert path.index("ReleaseLeavers") < path.index("SetCapacity")


def test_capacity_refused_releases_the_lock_and_fails_with_the_cause(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow(NAME, "scale_array.asl.json"), "SetCapacityRefused", REQUEST)
    assert run["status"] == "FAILED"
    assert "above max value 16" in run["cause"]
    assert entered(run)[-4:] == RELEASED_THEN_FAILED
    assert "RecordDecision" not in entered(run)
    # and a failed run re-arms its alarm on the way out (rules.rearm_after: every run does)
    assert _rearmed(run) == [(REQUEST["alarmName"], "OK")]


def test_demand_read_reaches_the_planner_and_a_failed_read_releases_the_lock(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given GetMetricData's minutes / When the workflow plans
    arn = workflow(NAME, "scale_array.asl.json")
    run = run_case(sfn, arn, "LambdaThrottledThenPlans", REQUEST)
    scheduled = [e for e in run["events"] if e["type"] == "TaskScheduled"]
    plan_input = json.loads(
        next(e for e in scheduled if "plan-scale" in e["taskScheduledEventDetails"]["parameters"])[
            "taskScheduledEventDetails"
        ]["parameters"]
    )["Payload"]
    # Then PlanScale gets the read demand beside the alarm's request
    assert plan_input["demand"] == {
        "demandIops": 612345.0,
        "recentDemand": [500000.0, 550000.0, 600000.0],
        "newestMinute": "2026-11-02T17:04:00+00:00",
        "source": "AWS/EBS",
    }
    assert plan_input["arrayId"] == REQUEST["arrayId"]
    # And when the read fails for good, nothing is planned and the lock is released
    failed = run_case(sfn, arn, "ReadDemandFails", REQUEST)
    assert failed["status"] == "FAILED"
    assert "PlanScale" not in entered(failed)
    assert entered(failed)[-4:] == RELEASED_THEN_FAILED


def test_a_hold_at_target_still_rearms_after_the_pause_plan_scale_gave(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given PlanScale holds with nothing to wait for (at max, demand above it) and answers the
    # longer pause rules.rearm_after gives such a hold
    held = run_case(sfn, workflow(NAME, "scale_array.asl.json"), "HoldNothingToWaitFor", REQUEST)
    # Then the run still re-arms its alarm, after that pause, not the request's base pause
    assert held["status"] == "SUCCEEDED", held.get("cause")
    assert entered(held)[-4:] == ["ReleaseLock", "WaitBeforeRearm", "Rearm", "Done"]
    assert _rearmed(held) == [(REQUEST["alarmName"], "OK")]
    seconds = _seconds_between(held, "WaitBeforeRearm", "Rearm")
    assert seconds >= 2 - 0.5  # PlanHold's rearmSeconds (2), not REQUEST's (1)


def _rearmed(run: dict[str, Any]) -> list[tuple[str, str]]:
    """The (alarm, state) of every SetAlarmState the run scheduled."""
    calls = [
        json.loads(e["taskScheduledEventDetails"]["parameters"])
        for e in run["events"]
        if e["type"] == "TaskScheduled" and e["taskScheduledEventDetails"]["resource"] == "setAlarmState"
    ]
    return [(c["AlarmName"], c["StateValue"]) for c in calls]


def _seconds_between(run: dict[str, Any], first: str, second: str) -> float:
    stamps = {
        e["stateEnteredEventDetails"]["name"]: e["timestamp"]
        for e in run["events"]
        if e["type"].endswith("StateEntered")
    }
    return float((stamps[second] - stamps[first]).total_seconds())
