"""Workflow tier: the real ASL files run by the local cloud's Step Functions engine, with each
task's answer mocked (Step Functions Local's mock-config format, LocalStack ``SFN_MOCK_CONFIG``).

The local cloud is started with ``SFN_MOCK_CONFIG=tests/workflows/mock_config.json`` (re-read
on change). A test creates the state machine under the name the mock config keys on, from the
file in ``statemachines/`` with placeholder substitutions, and starts an execution of
``<state machine ARN>#<TestCase>``: every mocked state answers from the test case instead of
calling Lambda or DynamoDB, so catch, retry and compensation paths run on demand.
"""

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest

ROOT = Path(__file__).resolve().parents[2]
ACCOUNT = "000000000000"
REGION = "us-east-1"
SUBSTITUTIONS = {
    "Partition": "aws",
    "TableName": "vsa-wf-registry",
    "TaskReadDemandFunctionArn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:vsa-wf-read-demand",
    "TaskPlanScaleFunctionArn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:vsa-wf-plan-scale",
    "TaskSetAlarmThresholdsFunctionArn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:vsa-wf-thresholds",
    "TaskTeardownArrayFunctionArn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:vsa-wf-teardown",
    "TaskControllerFunctionArn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:vsa-wf-controller",
    "TaskReconcileFunctionArn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:vsa-wf-reconcile",
    "ConfigureTargetDocument": "vsa-wf-configure-target",
    "ConnectPathDocument": "vsa-wf-connect-path",
    "DisconnectPathDocument": "vsa-wf-disconnect-path",
    "NodeConfigfsRoot": "sys/kernel/config",
    "NodeDeviceDir": "dev/disk/by-id",
    "NodeModprobeCommand": "modprobe",
    "NodeNvmeCommand": "nvme",
    "NodeBootIdFile": "/proc/sys/kernel/random/boot_id",
    "ControllerRegistrationSeconds": "300",
    "NodeSysfsRoot": "sys",
    "NodeNvmeConfig": "etc/nvme/config.json",
    "NodeAwsCommand": "aws",
    "AlertsTopicArn": f"arn:aws:sns:{REGION}:{ACCOUNT}:vsa-wf-alerts",
    "TaskBackupFunctionArn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:vsa-wf-backup",
    "FreezeIoDocument": "vsa-wf-freeze-io",
    "ThawIoDocument": "vsa-wf-thaw-io",
    "TaskDrillFunctionArn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:vsa-wf-drill",
    "TaskCopyFunctionArn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:vsa-wf-copy",
    "CopyBackupSetStateMachineArn": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:vsa-wf-copy",
}


def render(definition_file: str) -> str:
    text = (ROOT / "statemachines" / definition_file).read_text()
    return re.sub(r"\$\{([A-Za-z0-9_]+)\}", lambda m: SUBSTITUTIONS[m.group(1)], text)


@pytest.fixture(scope="session")
def sfn() -> Any:
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    if not endpoint.startswith("http://127.0.0.1"):
        pytest.fail("workflow tests run against the local cloud: use `make test`")
    return boto3.client("stepfunctions", region_name=REGION, endpoint_url=endpoint)


@pytest.fixture
def workflow(sfn: Any) -> Callable[[str, str], str]:
    """``workflow(name, file)``: the state machine ``name`` with the file's current definition.

    Tests run side by side (pytest-xdist) and several use the same name (the mock config keys on
    it), so a state machine is never deleted under a running test: creating it again with the
    same definition returns it (CreateStateMachine is idempotent, as on AWS), and one left by an
    earlier run with another definition is updated to the current one."""

    def create(name: str, definition_file: str) -> str:
        definition, role = render(definition_file), f"arn:aws:iam::{ACCOUNT}:role/vsa-wf-test"
        try:
            return str(
                sfn.create_state_machine(name=name, definition=definition, roleArn=role)["stateMachineArn"]
            )
        except sfn.exceptions.StateMachineAlreadyExists:
            arn = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{name}"
            sfn.update_state_machine(stateMachineArn=arn, definition=definition, roleArn=role)
            return arn

    return create


def run_case(sfn: Any, state_machine_arn: str, case: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Run one mock test case to the end; the execution description plus its history events."""
    arn = sfn.start_execution(stateMachineArn=f"{state_machine_arn}#{case}", input=json.dumps(payload))[
        "executionArn"
    ]
    deadline = time.monotonic() + 60
    while (execution := sfn.describe_execution(executionArn=arn))["status"] == "RUNNING":
        assert time.monotonic() < deadline, f"{case}: still running after 60 s"
        time.sleep(0.2)
    execution["events"] = sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
    return execution


def entered(execution: dict[str, Any]) -> list[str]:
    """Names of the states the execution entered, in order."""
    return [
        e["stateEnteredEventDetails"]["name"]
        for e in execution["events"]
        if e["type"].endswith("StateEntered")
    ]


def lambda_inputs(run: dict[str, Any], step: str) -> list[dict[str, Any]]:
    """The input of every call of a task Lambda's ``step`` (e.g. ``connect``): a Task whose
    Resource is the function's ARN logs LambdaFunctionScheduled with the input it was given."""
    found = []
    for event in run["events"]:
        if event["type"] == "LambdaFunctionScheduled":
            given = json.loads(event["lambdaFunctionScheduledEventDetails"]["input"])
            if given.get("step") == step:
                found.append(given)
    return found
