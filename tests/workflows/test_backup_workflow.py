"""ConsistentBackup's paths, run by the Step Functions engine with mocked tasks: thaw on every
path out once anything may be frozen, fail fast before, wait for EBS snapshot slots."""

import json
from collections.abc import Callable
from typing import Any

from tests.workflows.conftest import entered, run_case

NAME = "vsa-wf-backup"  # the key in mock_config.json
REQUEST = {"arrayId": "wf-b", "backupId": "bk-20261122T030000000Z-5f4c3b2a"}


def scheduled(run: dict[str, Any], needle: str) -> list[dict[str, Any]]:
    """The input of every task (an SDK integration's parameters, a Lambda's input) mentioning ``needle``."""
    found = []
    for event in run["events"]:
        details = event.get("taskScheduledEventDetails", {}).get("parameters") or event.get(
            "lambdaFunctionScheduledEventDetails", {}
        ).get("input")
        if details and needle in details:
            found.append(json.loads(details))
    return found


def test_a_look_answered_with_seconds_to_wait_waits_them_then_looks_again(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    machine = workflow(NAME, "consistent_backup.asl.json")
    run = run_case(sfn, machine, "ApplicationConsistentLookLater", REQUEST)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    states = entered(run)
    # the first look said "a second from now" (the hosts' instant not yet come, or only Run
    # Command's status to go by): the second look comes after WaitFrozen, not straight back
    looks = [i for i, name in enumerate(states) if name == "Snapshot"]
    assert len(looks) == 2
    assert states[looks[0] : looks[1]].count("WaitFrozen") == 1


def test_application_consistent_path(sfn: Any, workflow: Callable[[str, str], str]) -> None:
    run = run_case(sfn, workflow(NAME, "consistent_backup.asl.json"), "ApplicationConsistent", REQUEST)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    states = entered(run)
    # dry run on both hosts, then freeze both (polled until frozen), ONE snapshot, thaw both
    assert (
        states.index("HostsReady") < states.index("Freeze") < states.index("Snapshot") < states.index("Thaw")
    )
    assert states.count("CheckSend") == 2
    # while a host is still freezing the Snapshot step looks again after the wait it answered (0:
    # at once, its frozen marker is what it waits on: straight back, no Wait state inside the
    # freeze window), given its last answer; then one snapshot
    assert states.count("Snapshot") == 2
    assert states.count("WaitFrozen") == 0
    looks = [i for i in scheduled(run, '"step": "snapshot"') if i.get("step") == "snapshot"]
    assert [look["previous"].get("ssmCheckedAt") for look in looks] == [0, 1795309200.5]
    # the Snapshot step sent thaw-io to one host; Thaw waits for that one and sends the other's
    assert states.count("ThawAlready") == 1
    assert states.count("ThawSend") == 1
    assert states.count("ThawPoll") >= 2
    dry_runs = scheduled(run, '"DryRun"')
    assert len(dry_runs) == 2
    assert all(p["Parameters"]["DryRun"] == ["true"] for p in dry_runs)
    assert states[-6:] == ["Completed?", "Finish", "Failed?", "Copies?", "Retention", "Done"]


def test_a_refused_snapshot_still_thaws_every_host_then_fails_the_set(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow(NAME, "consistent_backup.asl.json"), "SnapshotRefused", REQUEST)
    assert run["status"] == "FAILED"
    assert run["error"] == "BackupFailed"
    states = entered(run)
    assert states.count("ThawSend") == 2
    # the Snapshot step's Catch thaws every host (its $thawHosts: all of them)
    assert states.index("Snapshot") < states.index("Thaw") < states.index("RecordFailure")
    [failure] = scheduled(run, '"fail"')
    assert failure["error"]["Error"] == "SnapshotLimitError"
    assert len(failure["thaws"]) == 2
    assert "Progress" not in states


def test_a_failed_freeze_step_thaws_every_host(sfn: Any, workflow: Callable[[str, str], str]) -> None:
    run = run_case(sfn, workflow(NAME, "consistent_backup.asl.json"), "FreezeStepFails", REQUEST)
    assert run["status"] == "FAILED"
    states = entered(run)
    assert "Snapshot" not in states
    # the Freeze step's Catch thaws every host (its $thawHosts: all of them)
    assert states.index("Freeze") < states.index("Thaw") < states.index("RecordFailure")
    assert states.count("ThawSend") == 2


def test_preflight_failure_fails_fast_freezing_nothing(sfn: Any, workflow: Callable[[str, str], str]) -> None:
    run = run_case(sfn, workflow(NAME, "consistent_backup.asl.json"), "PreflightFails", REQUEST)
    assert run["status"] == "FAILED"
    assert entered(run) == ["Init", "Preflight", "RecordFailure", "BackupFailed"]


def test_waits_for_snapshot_slots_then_snapshots_a_crash_set(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow(NAME, "consistent_backup.asl.json"), "WaitsThenCrash", REQUEST)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    states = entered(run)
    assert states[:6] == ["Init", "Preflight", "Admitted?", "WaitForSnapshotSlots", "Preflight", "Admitted?"]
    assert "Freeze" not in states
    assert "CheckHosts" not in states
    assert states.count("ThawSend") == 0
    assert "Thaw" in states  # the Map over no hosts


def test_a_retention_failure_is_recorded_and_the_completed_set_still_succeeds(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given a set that completed, and a retention run that AWS refused a DeleteSnapshot
    run = run_case(sfn, workflow(NAME, "consistent_backup.asl.json"), "RetentionRefused", REQUEST)
    # Then the execution succeeds (no backup-failed alarm for a good backup) ...
    assert run["status"] == "SUCCEEDED", run.get("cause")
    states = entered(run)
    assert states[-5:] == ["Failed?", "Copies?", "Retention", "RecordRetentionFailure", "Done"]
    assert "RecordFailure" not in states
    assert "NotifyRetentionFailure" not in states
    # ... the retention failure is handed to its own step with AWS's refusal
    [recorded] = scheduled(run, '"retention_failed"')
    assert recorded["error"]["Error"] == "RetentionFailedError"
    assert "InvalidSnapshot.InUse" in recorded["error"]["Cause"]
    assert recorded["backupId"] == REQUEST["backupId"]
    # ... and the run's answer carries the set's label and the retention error
    output = json.loads(run["output"])
    assert output["result"]["state"] == "completed"
    assert output["retention"]["Error"] == "RetentionFailedError"


def test_a_retention_failure_that_cannot_be_recorded_goes_to_the_alerts_topic(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    # Given retention refused and the step that records it failing too
    run = run_case(sfn, workflow(NAME, "consistent_backup.asl.json"), "RetentionUnrecorded", REQUEST)
    # Then the alerts topic is told directly, and the good backup still succeeds
    assert run["status"] == "SUCCEEDED", run.get("cause")
    assert entered(run)[-4:] == ["Retention", "RecordRetentionFailure", "NotifyRetentionFailure", "Done"]
    [published] = scheduled(run, '"VSA: backup retention failed"')
    assert published["TopicArn"].endswith(":vsa-wf-alerts")
    assert REQUEST["backupId"] in published["Message"]
    assert "RetentionFailedError" in published["Message"]


def test_a_completed_set_with_copies_starts_its_copy_workflow_named_after_it(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow(NAME, "consistent_backup.asl.json"), "CopiesStarted", REQUEST)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    assert entered(run)[-6:] == ["Failed?", "Copies?", "CopyInput", "StartCopies", "Retention", "Done"]
    [started] = scheduled(run, "destinations")
    assert started["Name"] == REQUEST["backupId"]
    assert json.loads(started["Input"])["destinations"] == [{"region": "us-west-2", "accountId": None}]


def test_copies_that_cannot_start_are_told_to_the_alerts_topic_and_the_backup_stays_good(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow(NAME, "consistent_backup.asl.json"), "CopiesNotStarted", REQUEST)
    assert run["status"] == "SUCCEEDED", run.get("cause")
    states = entered(run)
    assert states.index("StartCopies") < states.index("NotifyCopiesNotStarted") < states.index("Retention")
    [alert] = scheduled(run, "copies not started")
    assert REQUEST["backupId"] in alert["Message"]
