"""Step Functions behaviours the workflows rely on, as the local cloud's engine provides them."""

import json
from collections.abc import Callable
from typing import Any

from tests.localcloud.conftest import run_execution

ROLE = "arn:aws:iam::000000000000:role/vsa-sfn-test"


def _run(aws: Callable[[str], Any], definition: dict[str, Any]) -> dict[str, Any]:
    return run_execution(aws, definition, ROLE)


def test_describe_snapshots_of_an_unknown_snapshot_is_a_catchable_task_failure(aws) -> None:
    # AWS: DescribeSnapshots with an unknown id fails with InvalidSnapshot.NotFound "The snapshot
    # 'snap-…' does not exist."; in an aws-sdk task that is a TaskFailed a Catch can handle.
    # Stock LocalStack ended the execution with States.Runtime (KeyError 'Message').
    definition = {
        "StartAt": "Describe",
        "States": {
            "Describe": {
                "Type": "Task",
                "Resource": "arn:aws:states:::aws-sdk:ec2:describeSnapshots",
                "Parameters": {"SnapshotIds": ["snap-0123456789abcdef0"]},
                "Catch": [{"ErrorEquals": ["States.TaskFailed"], "Next": "Gone"}],
                "End": True,
            },
            "Gone": {"Type": "Pass", "End": True},
        },
    }
    execution = _run(aws, definition)
    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    output = json.loads(execution["output"])
    assert "snap-0123456789abcdef0" in output["Cause"]
    assert "does not exist" in output["Cause"]


def test_describe_snapshots_error_has_aws_message(aws) -> None:
    import botocore.exceptions
    import pytest

    with pytest.raises(botocore.exceptions.ClientError) as raised:
        aws("ec2").describe_snapshots(SnapshotIds=["snap-0123456789abcdef0"])
    error = raised.value.response["Error"]
    assert error["Code"] == "InvalidSnapshot.NotFound"
    assert error["Message"] == "The snapshot 'snap-0123456789abcdef0' does not exist."
