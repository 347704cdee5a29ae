"""Step Functions behaviours the workflows rely on, as the local cloud's engine provides them."""

import io
import json
import time
import uuid
import zipfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.localcloud.conftest import run_execution, run_executions

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


def test_a_jsonata_state_runs_offline(aws) -> None:
    # The local cloud evaluates JSONata on the installed JRE with the jars tools/install.sh
    # fetched (vsa_localcloud/jsonata.py). Stock LocalStack downloads a Java 21 at the first
    # JSONata expression and, offline, fails with States.Runtime ("Installation of … failed").
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Count",
        "States": {
            "Count": {
                "Type": "Pass",
                "Assign": {"polls": "{% 2 + 1 %}", "key": "{% 'ARRAY#' & 'a1' %}"},
                "Next": "Enough",
            },
            "Enough": {
                "Type": "Choice",
                "Choices": [{"Condition": "{% $polls >= 3 %}", "Next": "Out"}],
                "Default": "Out",
            },
            "Out": {
                "Type": "Pass",
                "Output": {"n": "{% $string($polls) %}", "key": "{% $key %}"},
                "End": True,
            },
        },
    }
    execution = _run(aws, definition)
    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    assert json.loads(execution["output"]) == {"n": "3", "key": "ARRAY#a1"}


def test_variables_in_jsonpath_states(aws) -> None:
    # The workflows carry context in variables (Assign) and read them as $name in JSONPath:
    # in Parameters, intrinsic functions and Choice, and a Catch assigns from the error output.
    definition = {
        "StartAt": "Init",
        "States": {
            "Init": {"Type": "Pass", "Assign": {"polls": 0, "arrayId": "a1"}, "Next": "Count"},
            "Count": {"Type": "Pass", "Assign": {"polls.$": "States.MathAdd($polls, 1)"}, "Next": "Enough"},
            "Enough": {
                "Type": "Choice",
                "Choices": [{"Variable": "$polls", "NumericGreaterThanEquals": 3, "Next": "Fail"}],
                "Default": "Count",
            },
            "Fail": {
                "Type": "Task",
                "Resource": "arn:aws:states:::aws-sdk:ec2:describeSnapshots",
                "Parameters": {"SnapshotIds": ["snap-0123456789abcdef0"]},
                "Catch": [{"ErrorEquals": ["States.ALL"], "Assign": {"error.$": "$.Error"}, "Next": "Out"}],
                "End": True,
            },
            "Out": {
                "Type": "Pass",
                "Parameters": {
                    "key.$": "States.Format('ARRAY#{}', $arrayId)",
                    "polls.$": "$polls",
                    "error.$": "$error",
                },
                "End": True,
            },
        },
    }
    execution = _run(aws, definition)
    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    assert json.loads(execution["output"]) == {
        "key": "ARRAY#a1",
        "polls": 3,
        "error": "Ec2.InvalidSnapshot.NotFoundException",
    }


def test_variable_paths_in_jsonpath_states_read_fields_and_elements(aws) -> None:
    # AWS Step Functions Developer Guide, "Passing data between states with variables": a
    # variable is referenced as $name, a field of its value as $name.field, in the places that
    # take a JSONPath. The local cloud reads these in Python (vsa_localcloud/sfn_variables.py),
    # not through LocalStack's JVM with every variable declared; the answers are the same.
    context = {"arrayId": "a1", "hosts": [{"id": "i-1"}, {"id": "i-2"}], "admission": {"action": "go"}}
    definition = {
        "StartAt": "Init",
        "States": {
            "Init": {"Type": "Pass", "Assign": {"ctx": context, "n": 3, "none": None}, "Next": "Go?"},
            "Go?": {
                "Type": "Choice",
                "Choices": [{"Variable": "$ctx.admission.action", "StringEquals": "go", "Next": "Out"}],
                "Default": "Stopped",
            },
            "Stopped": {"Type": "Fail", "Error": "Stopped"},
            "Out": {
                "Type": "Pass",
                "Parameters": {
                    "whole.$": "$ctx",
                    "field.$": "$ctx.arrayId",
                    "nested.$": "$ctx.admission.action",
                    "element.$": "$ctx.hosts[1]",
                    "elementField.$": "$ctx.hosts[0].id",
                    "number.$": "$n",
                    "null.$": "$none",
                    "mapped.$": "$ctx.hosts[*].id",
                },
                "End": True,
            },
        },
    }
    execution = _run(aws, definition)
    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    assert json.loads(execution["output"]) == {
        "whole": context,
        "field": "a1",
        "nested": "go",
        "element": {"id": "i-2"},
        "elementField": "i-1",
        "number": 3,
        "null": None,
        "mapped": ["i-1", "i-2"],
    }


def test_what_the_local_cloud_answers_for_variables_in_choices(aws) -> None:
    # Pinned divergences from AWS (docs/localcloud.md, "Step Functions on the local cloud"), which
    # tests/infra/test_statemachine_definitions.py::test_choices_read_variables_as_the_local_cloud_can
    # keeps out of the workflows: the local cloud reads `$name.field` through JSONata, where a
    # missing field is undefined, not an error, so IsPresent is true (AWS: false); and a `...Path`
    # comparator reads the state input only, so `$limit` compares against nothing and matches
    # (AWS: 7 < 5 is false). A count assigned with States.ArrayLength answers as AWS does.
    # Should either divergence go, this test says so.
    def flag(name: str, value: bool, then: str) -> dict[str, Any]:
        return {"Type": "Pass", "Assign": {name: value}, "Next": then}

    definition = {
        "StartAt": "Init",
        "States": {
            "Init": {
                "Type": "Pass",
                "Assign": {"ctx": {"hosts": []}, "polls": 7, "limit": 5},
                "Next": "Count",
            },
            "Count": {
                "Type": "Pass",
                "Assign": {"hostCount.$": "States.ArrayLength($ctx.hosts)"},
                "Next": "Present?",
            },
            "Present?": {
                "Type": "Choice",
                "Choices": [{"Variable": "$ctx.hosts[0]", "IsPresent": True, "Next": "Present"}],
                "Default": "Absent",
            },
            "Present": flag("present", True, "Below?"),
            "Absent": flag("present", False, "Below?"),
            "Below?": {
                "Type": "Choice",
                "Choices": [{"Variable": "$polls", "NumericLessThanPath": "$limit", "Next": "Below"}],
                "Default": "NotBelow",
            },
            "Below": flag("below", True, "Answer"),
            "NotBelow": flag("below", False, "Answer"),
            "Answer": {
                "Type": "Pass",
                "Parameters": {"present.$": "$present", "below.$": "$below", "hostCount.$": "$hostCount"},
                "End": True,
            },
        },
    }
    execution = _run(aws, definition)
    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    assert json.loads(execution["output"]) == {"present": True, "below": True, "hostCount": 0}


def test_a_timestamp_wait_ends_at_or_after_its_timestamp(aws) -> None:
    # AWS: a Wait state's Timestamp (or TimestampPath) is "an absolute time to wait until"
    # (docs.aws.amazon.com/step-functions/latest/dg/state-wait.html). LocalStack waited the whole
    # seconds to it, truncated, so the state could end up to a second early (patches.py,
    # _a_timestamp_wait_ends_at_its_timestamp); ScaleArray's runs for a cycle's fall wait so.
    # (an execution first: a fresh local cloud's first one takes seconds to start its states)
    _run(aws, {"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}})
    # a due time in whole seconds (as the product writes it), asked for just after a second
    # begins: a wait truncated to whole seconds would end most of a second before it
    time.sleep(1.05 - time.time() % 1)
    due = (datetime.now(UTC) + timedelta(seconds=4)).replace(microsecond=0)
    definition = {
        "StartAt": "Due",
        "States": {
            "Due": {
                "Type": "Pass",
                "Result": due.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "ResultPath": "$.due",
                "Next": "Wait",
            },
            "Wait": {"Type": "Wait", "TimestampPath": "$.due", "Next": "After"},
            "After": {"Type": "Pass", "End": True},
        },
    }
    execution = _run(aws, definition)
    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    # the states after the wait take no time: the execution ends once the wait has
    assert execution["stopDate"] >= due


FAILS_LATE = """
import time

def handler(event, context):
    time.sleep(4)
    raise RuntimeError("the task failed after the execution was stopped")
"""


def _zip(source: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", source)
    return buffer.getvalue()


def test_a_stopped_execution_is_aborted_even_when_its_running_task_then_fails(aws) -> None:
    # AWS: StopExecution answers the "date the execution is stopped", and DescribeExecution then
    # says ABORTED; a task still running at the stop cannot turn the execution FAILED later.
    # LocalStack's engine let the running state finish, and its failure replaced the stop
    # (vsa_localcloud/patches.py: _a_stopped_execution_stays_stopped).
    lam, sfn = aws("lambda"), aws("stepfunctions")
    name = f"fails-late-{uuid.uuid4().hex[:8]}"
    function_arn = lam.create_function(
        FunctionName=name,
        Runtime="python3.13",
        Role="arn:aws:iam::000000000000:role/fails-late-test",
        Handler="app.handler",
        Code={"ZipFile": _zip(FAILS_LATE)},
        Timeout=30,
    )["FunctionArn"]
    lam.get_waiter("function_active_v2").wait(FunctionName=name)
    definition = {
        "StartAt": "Work",
        "States": {"Work": {"Type": "Task", "Resource": function_arn, "End": True}},
    }
    machine = sfn.create_state_machine(
        name=f"vsa-t-{uuid.uuid4().hex[:8]}", definition=json.dumps(definition), roleArn=ROLE
    )["stateMachineArn"]
    try:
        # Given an execution whose task is running (the function sleeps, then raises)
        execution = sfn.start_execution(stateMachineArn=machine, input="{}")["executionArn"]
        deadline = time.monotonic() + 30
        while not any(
            e["type"] == "LambdaFunctionStarted"
            for e in sfn.get_execution_history(executionArn=execution)["events"]
        ):
            assert time.monotonic() < deadline, "the task never started"
            time.sleep(0.2)
        # When it is stopped
        stopped = sfn.stop_execution(
            executionArn=execution, error="Deleted", cause="the array is being deleted"
        )
        assert "stopDate" in stopped
        # Then the execution is ABORTED, even after the task failed (the
        # local engine ends the execution only when the running task has returned)
        deadline = time.monotonic() + 30
        while (described := sfn.describe_execution(executionArn=execution))["status"] == "RUNNING":
            assert time.monotonic() < deadline, "the stopped execution never ended"
            time.sleep(0.2)
        assert described["status"] == "ABORTED", described
    finally:
        sfn.delete_state_machine(stateMachineArn=machine)
        lam.delete_function(FunctionName=name)


def test_one_definition_run_side_by_side_keeps_each_executions_own_state(aws) -> None:
    # The local cloud keeps each definition's parse tree and builds every execution's program
    # afresh from it (vsa_localcloud.patches._asl_parse_tree_reused): executions of one
    # definition at once must still each count their own loop, map their own items and retry
    # their own failures, as on AWS where every execution is its own
    definition = {
        "StartAt": "Init",
        "States": {
            "Init": {
                "Type": "Pass",
                "Assign": {"mine.$": "$.n"},
                "Parameters": {"count": 0, "n.$": "$.n", "items.$": "$.items"},
                "Next": "More",
            },
            "More": {
                "Type": "Choice",
                "Choices": [{"Variable": "$.count", "NumericLessThanPath": "$.n", "Next": "Step"}],
                "Default": "Each",
            },
            "Step": {
                "Type": "Pass",
                "Parameters": {"count.$": "States.MathAdd($.count, 1)", "n.$": "$.n", "items.$": "$.items"},
                "Next": "More",
            },
            "Each": {
                "Type": "Map",
                "ItemsPath": "$.items",
                "ItemProcessor": {
                    "StartAt": "Double",
                    "States": {
                        "Double": {"Type": "Pass", "Parameters": {"v.$": "States.MathAdd($, $)"}, "End": True}
                    },
                },
                "ResultPath": "$.doubled",
                "Next": "Flaky",
            },
            "Flaky": {
                "Type": "Parallel",
                "Branches": [{"StartAt": "Boom", "States": {"Boom": {"Type": "Fail", "Error": "Boom"}}}],
                "Retry": [{"ErrorEquals": ["Boom"], "IntervalSeconds": 1, "MaxAttempts": 1}],
                "Catch": [{"ErrorEquals": ["Boom"], "ResultPath": "$.caught", "Next": "Done"}],
                "End": True,
            },
            "Done": {
                "Type": "Pass",
                "Parameters": {
                    "count.$": "$.count",
                    "mine.$": "$mine",
                    "doubled.$": "$.doubled",
                    "error.$": "$.caught.Error",
                },
                "End": True,
            },
        },
    }
    inputs = [{"n": n, "items": list(range(n, n + n % 3 + 1))} for n in (3, 5, 8, 13)]
    finished = run_executions(aws, definition, ROLE, inputs, timeout=60)
    # Then each counted to its own n, doubled its own items and caught its own failure
    sfn = aws("stepfunctions")
    for given, described in zip(inputs, finished, strict=True):
        assert described["status"] == "SUCCEEDED", described.get("cause")
        assert json.loads(described["output"]) == {
            "count": given["n"],
            "mine": given["n"],
            "doubled": [{"v": 2 * i} for i in given["items"]],
            "error": "Boom",
        }
        # after exactly one retry (two attempts of the Parallel state) of its own
        history = sfn.get_execution_history(executionArn=described["executionArn"], maxResults=1000)
        entered = [
            e
            for e in history["events"]
            if e["type"] == "ParallelStateEntered" and e["stateEnteredEventDetails"]["name"] == "Flaky"
        ]
        starts = [e for e in history["events"] if e["type"] == "ParallelStateStarted"]
        assert (len(entered), len(starts)) == (1, 2), [e["type"] for e in history["events"]]
