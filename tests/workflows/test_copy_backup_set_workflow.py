"""CopyBackupSet's paths, run by the Step Functions engine with mocked tasks: each destination
copies, waits and applies its retention on its own; one that fails is recorded and fails the run
(its alarm) without stopping the others."""

from collections.abc import Callable
from typing import Any

from tests.workflows.conftest import entered, lambda_inputs, run_case

NAME = "vsa-wf-copy"  # the key in mock_config.json
BACKUP = "bk-20261129T030000000Z-5f4c3b2a"


def request(*regions: str) -> dict[str, Any]:
    return {
        "arrayId": "wf-c",
        "backupId": BACKUP,
        "destinations": [{"region": r, "accountId": None} for r in regions],
    }


def test_a_set_is_copied_then_the_destination_s_retention_runs(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(sfn, workflow(NAME, "copy_backup_set.asl.json"), "Copied", request("us-west-2"))
    assert run["status"] == "SUCCEEDED", run.get("cause")
    states = entered(run)
    assert (
        states.index("CopyStart")
        < states.index("CopyLook")
        < states.index("CopyRetention")
        < states.index("Summary")
    )
    [start] = lambda_inputs(run, "start")
    assert (start["region"], start["accountId"], start["backupId"]) == ("us-west-2", None, BACKUP)
    assert lambda_inputs(run, "fail") == []


def test_one_destination_failing_is_recorded_and_fails_the_run_the_other_is_copied(
    sfn: Any, workflow: Callable[[str, str], str]
) -> None:
    run = run_case(
        sfn,
        workflow(NAME, "copy_backup_set.asl.json"),
        "OneDestinationFails",
        request("us-west-2", "eu-west-1"),
    )
    assert run["status"] == "FAILED"
    assert run["error"] == "CopyFailed"
    [failure] = lambda_inputs(run, "fail")
    assert failure["error"]["Error"] == "CopyError"
    assert entered(run).count("CopyRetention") == 1  # the destination that copied
    assert entered(run).count("Summary") == 1
