"""ReconcileArray's phase loop, lock and failure paths, run by the Step Functions engine with
mocked tasks (the deployed ASL, statemachines/reconcile_array.asl.json)."""

import json
from collections.abc import Callable
from typing import Any

from tests.workflows.conftest import entered, lambda_inputs, run_case
from vsa_core.reconcile.plan import PHASES

NAME = "vsa-wf-reconcile"  # the key in mock_config.json
REQUEST = {"arrayId": "wf-r", "version": 7}


def updates(run: dict[str, Any]) -> list[str]:
    """The UpdateExpressions of the DynamoDB writes the workflow made itself, in order."""
    out = []
    for event in run["events"]:
        if event["type"] == "TaskScheduled":
            parameters = json.loads(event["taskScheduledEventDetails"]["parameters"])
            if "UpdateExpression" in parameters:
                out.append(parameters["UpdateExpression"])
    return out


def test_the_phases_run_in_order_under_the_lock_then_it_is_released(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given the lock is free, attach/export/connect have something to do, the rest nothing
    run = run_case(sfn, workflow(NAME, "reconcile_array.asl.json"), "Converges", REQUEST)
    # Then the owned volumes are created first, before the lock is taken
    assert run["status"] == "SUCCEEDED", run.get("cause")
    assert entered(run)[:3] == ["Init", "CreateVolumes", "AcquireLock"]
    assert lambda_inputs(run, "create") == [{"step": "create", "arrayId": "wf-r", "owner": run["name"]}]
    # and every phase starts once, in plan order, with the lock's owner being the execution
    starts = lambda_inputs(run, "start")
    assert [s["phase"] for s in starts] == list(PHASES)
    assert {s["owner"] for s in starts} == {run["name"]}
    # the documents and node paths come from the deploy's substitutions
    assert starts[0]["documents"]["connectPath"] == "vsa-wf-connect-path"
    assert starts[0]["node"]["configfsRoot"] == "sys/kernel/config"
    # only the phases that started something are polled: attach once, export twice, connect once
    assert [p["phase"] for p in lambda_inputs(run, "poll")] == ["attach", "export", "export", "connect"]
    # And the outcome is recorded, then the lock released (conditional on holding it)
    assert entered(run)[-4:] == ["Converged?", "RecordConverged", "ReleaseLock", "Converged"]
    assert updates(run) == [
        "SET reconcileState = :state, reconcileUpdatedAt = :now, reconcileStep = :done REMOVE reconcileError",
        "REMOVE scalingLock, scalingLockUntil",
    ]
    assert json.loads(run["output"])["state"] == "converged"


def test_it_waits_for_the_lock_instead_of_skipping(sfn: Any, workflow: Callable[[str, str], str]) -> None:
    run = run_case(sfn, workflow(NAME, "reconcile_array.asl.json"), "WaitsForTheLock", REQUEST)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    states = entered(run)
    assert states[:6] == ["Init", "CreateVolumes", "AcquireLock", "Locked?", "WaitForLock", "AcquireLock"]
    assert len(lambda_inputs(run, "start")) == len(PHASES)


def test_a_lock_step_that_fails_records_it_and_releases_nothing(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow(NAME, "reconcile_array.asl.json"), "LockStepFails", REQUEST)
    assert run["status"] == "FAILED"
    assert run["error"] == "ReconcileFailed"
    assert "ArrayNotFoundError" in run["cause"]
    assert entered(run) == ["Init", "CreateVolumes", "AcquireLock", "FailWithoutLock", "Failed"]
    assert not any("scalingLock" in u for u in updates(run))


def test_a_failed_document_stops_the_run_recorded_and_the_lock_released(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow(NAME, "reconcile_array.asl.json"), "ExportFails", REQUEST)
    assert run["status"] == "FAILED"
    assert "phase export failed on 1 instance(s)" in run["cause"]
    assert "vol-0a1b2c3d4e5f60003 not found" in run["cause"]
    # nothing after the failed phase starts
    assert [s["phase"] for s in lambda_inputs(run, "start")] == ["settle", "attach", "disconnect", "export"]
    assert entered(run)[-3:] == ["RecordFailure", "ReleaseLockOnFailure", "Failed"]
    recorded = updates(run)
    assert recorded[0].startswith("SET reconcileState = :state")
    assert "reconcileError" in recorded[0]
    assert recorded[1] == "REMOVE scalingLock, scalingLockUntil"


def test_a_phase_past_its_bound_fails_naming_what_it_waited_for(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow(NAME, "reconcile_array.asl.json"), "AttachTimesOut", REQUEST)
    assert run["status"] == "FAILED"
    assert "phase attach not finished" in run["cause"]
    assert "vol-0a1b2c3d4e5f60003 on i-0a1b2c3d4e5f60011" in run["cause"]
    assert entered(run)[-3:] == ["RecordFailure", "ReleaseLockOnFailure", "Failed"]


def test_what_changed_under_the_run_gets_another_round(sfn: Any, workflow: Callable[[str, str], str]) -> None:
    run = run_case(sfn, workflow(NAME, "reconcile_array.asl.json"), "SecondRound", REQUEST)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    assert [s["phase"] for s in lambda_inputs(run, "start")] == list(PHASES) * 2
    assert json.loads(run["output"])["rounds"] == 2


def test_rounds_are_bounded(sfn: Any, workflow: Callable[[str, str], str]) -> None:
    run = run_case(sfn, workflow(NAME, "reconcile_array.asl.json"), "NeverConverges", REQUEST)
    assert run["status"] == "FAILED"
    assert len(lambda_inputs(run, "start")) == 3 * len(PHASES)
    assert "still not converged after 3 rounds" in run["cause"]
    assert "i-0a1b2c3d4e5f60015" in run["cause"]


def test_volumes_it_could_not_create_fail_the_run_saying_what_was_done_and_what_remains(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given EBS refuses one of the two owned volumes the stored spec declares (a quota)
    run = run_case(sfn, workflow(NAME, "reconcile_array.asl.json"), "CreateFails", REQUEST)
    # Then the run fails before taking the lock, recording the error on the array (what was
    # created, what was not and why), and no phase starts
    assert run["status"] == "FAILED"
    assert entered(run) == ["Init", "CreateVolumes", "FailWithoutLock", "Failed"]
    assert "VolumeCreationError" in run["cause"]
    assert "created data (vol-0a1b2c3d4e5f60021)" in run["cause"]
    assert "not created: logs (VolumeLimitExceeded" in run["cause"]
    assert updates(run) == [
        "SET reconcileState = :failed, reconcileError = :error, reconcileUpdatedAt = :now"
    ]
    assert lambda_inputs(run, "start") == []


def test_the_roll_phase_starts_again_for_each_action_polled_every_15_seconds(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given the roll's start takes an action (a surge) and its polls first wait, then say the
    # next action is due (again); the next start finds nothing left
    run = run_case(sfn, workflow(NAME, "reconcile_array.asl.json"), "RollsAgain", REQUEST)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    # Then the roll phase started twice, the other phases once, in order
    after_roll = PHASES.index("roll") + 1
    assert [s["phase"] for s in lambda_inputs(run, "start")] == [
        *PHASES[:after_roll],
        "roll",
        *PHASES[after_roll:],
    ]
    # and its polls waited in WaitRoll (15 s), not WaitPhase (2 s)
    states = entered(run)
    assert states.count("WaitRoll") == 2
    assert "WaitPhase" not in states


def test_a_key_rotation_starts_the_rekey_phase_again_for_each_action_polled_every_2_seconds(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given a key rotation under way: the rekey phase's start sends configure-target to the one
    # controller, its poll says the next action is due (again); the next start sends
    # connect-path to the hosts, polled again; the third start promotes the keys (no command)
    run = run_case(sfn, workflow(NAME, "reconcile_array.asl.json"), "RekeysAgain", REQUEST)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    # Then the rekey phase started three times, after every other phase, each poll's
    # "again" taking it back to its start with the poll's own answer
    assert [s["phase"] for s in lambda_inputs(run, "start")] == [*PHASES, "rekey", "rekey"]
    polls = lambda_inputs(run, "poll")
    assert [p["started"]["rekey"] for p in polls] == ["target", "paths"]
    # and polled every 2 s (WaitPhase), not the roll's 15 s
    states = entered(run)
    assert states.count("WaitPhase") == 2
    assert "WaitRoll" not in states
    assert states[-1] == "Converged"
