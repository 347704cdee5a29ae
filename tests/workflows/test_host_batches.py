"""A host fan-out reaches an array of more than 50 hosts: one SendCommand per batch of at most 50.

AWS Systems Manager API Reference, SendCommand
(https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_SendCommand.html):
InstanceIds "Array Members: Minimum number of 0 items. Maximum number of 50 items." The local cloud
refuses more as SSM does (tests/localcloud/test_ssm_limits.py), so this test fails on a workflow
that sends one command to every host.

Unlike the other workflow tests nothing here is mocked: DrainController's disconnect states, as
rendered from statemachines/drain_controller.asl.json, run on the local cloud's Step Functions
engine against 60 real managed nodes, with the hosts batched by the core as the ``locate`` step
batches them (``vsa_core.controllers.slots.paths``), and a stand-in document with disconnect-path's
parameters (what the document does is tests/documents' concern). The states after the disconnect
(teardown, slot, lifecycle) are cut off: ``Teardown?`` ends the run.
"""

import json
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import urllib3

from tests.specs import BASE
from tests.workflows.conftest import REGION, render
from vsa_core.arrays.spec import ArraySpec
from vsa_core.controllers import slots

HOSTS = 60
DISCONNECT_STATES = ("DisconnectPaths", "AllDisconnected?", "DisconnectFailed")
STAND_IN = {
    "schemaVersion": "2.2",
    "description": "disconnect-path's parameters; prints what it was asked",
    "parameters": {
        name: {"type": "String"} for name in ("ArrayId", "Volumes", "Address", "AllowLastPath", "NvmeCommand")
    },
    "mainSteps": [
        {
            "action": "aws:runShellScript",
            "name": "disconnect",
            "inputs": {"runCommand": ["echo disconnect {{ ArrayId }} {{ Address }}"], "timeoutSeconds": 60},
        }
    ],
}


def client(service: str) -> Any:
    return boto3.client(service, region_name=REGION, endpoint_url=os.environ["AWS_ENDPOINT_URL"])


def control(area: str, action: str, **body: Any) -> dict[str, Any]:
    reply = urllib3.PoolManager().request(
        "POST",
        f"{os.environ['AWS_ENDPOINT_URL']}/_localcloud/{area}/{action}",
        body=json.dumps(body).encode(),
    )
    assert reply.status == 200, reply.data
    return json.loads(reply.data or b"{}")  # type: ignore[no-any-return]


@pytest.fixture
def hosts(sfn: Any) -> Iterator[list[str]]:
    """60 running instances, each an SSM managed node; gone afterwards."""
    ec2 = client("ec2")
    ids = [
        i["InstanceId"]
        for i in ec2.run_instances(ImageId="ami-12345678", MinCount=HOSTS, MaxCount=HOSTS)["Instances"]
    ]
    try:
        for instance_id in ids:
            control("ssm", "register_node", InstanceId=instance_id)
        yield ids
    finally:
        for instance_id in ids:
            control("ssm", "deregister_node", InstanceId=instance_id)
        ec2.terminate_instances(InstanceIds=ids)


@pytest.fixture
def document() -> Iterator[str]:
    name = f"vsa-wf-disconnect-{uuid.uuid4().hex[:8]}"
    ssm = client("ssm")
    ssm.create_document(
        Name=name, Content=json.dumps(STAND_IN), DocumentType="Command", DocumentFormat="JSON"
    )
    yield name
    ssm.delete_document(Name=name)


@pytest.fixture
def role() -> Iterator[str]:
    """The role the states run with: SendCommand and ListCommands, as the drain's role grants them."""
    iam = client("iam")
    name = f"vsa-wf-batches-{uuid.uuid4().hex[:8]}"
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "states.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": ["ssm:SendCommand", "ssm:ListCommands"], "Resource": "*"}
        ],
    }
    iam.put_role_policy(RoleName=name, PolicyName="disconnect", PolicyDocument=json.dumps(policy))
    yield arn
    iam.delete_role_policy(RoleName=name, PolicyName="disconnect")
    iam.delete_role(RoleName=name)


def disconnect_only(document: str, ctx: dict[str, Any]) -> dict[str, Any]:
    """The drain's disconnect states as deployed, started with the variables Locate would leave
    (``ctx``; a lost instance: no lifecycle action to keep alive) and ended where the teardown
    would begin, answering what the disconnect left in ``$outcomes`` and ``$pathsKept``."""
    drain = json.loads(render("drain_controller.asl.json"))
    states = {name: drain["States"][name] for name in DISCONNECT_STATES}
    send = states["DisconnectPaths"]["ItemProcessor"]["States"]["SendDisconnect"]
    assert send["Parameters"]["DocumentName"] == "vsa-wf-disconnect-path"
    send["Parameters"]["DocumentName"] = document
    return {
        "StartAt": "Given",
        "States": {
            "Given": {
                "Type": "Pass",
                "Assign": {
                    "ctx": ctx,
                    "planned": False,
                    "lifecycle": {},
                    "instanceId": "i-0a1b2c3d4e5f69999",
                    "pathsKept": None,
                },
                "Next": "DisconnectPaths",
            },
            **states,
            "Teardown?": {
                "Type": "Pass",
                "Parameters": {"outcomes.$": "$outcomes", "pathsKept.$": "$pathsKept"},
                "End": True,
            },
        },
    }


def test_a_drain_disconnects_sixty_hosts_with_one_command_per_batch_of_50(
    sfn: Any, hosts: list[str], document: str, role: str
) -> None:
    # Given an array with 60 hosts, batched as the locate step batches them
    spec = ArraySpec.model_validate(
        {
            **BASE,
            "arrayId": "wf-batches",
            "availabilityZone": "us-east-1a",
            "minControllers": 1,
            "maxControllers": 2,
            "hosts": [{"instanceId": i} for i in hosts],
        }
    )
    paths = slots.paths(spec, ("vol-0a1b2c3d4e5f60001",)).as_dict()
    ctx = {
        "arrayId": "wf-batches",
        "address": "10.0.1.9",
        "allowLastPath": "false",
        "volumes": paths["volumes"],
        "hosts": paths["hosts"],
        "hostBatches": paths["hostBatches"],
    }
    started = time.time()
    # When the drain's disconnect states run for real
    arn = sfn.create_state_machine(
        name=f"vsa-wf-batches-{uuid.uuid4().hex[:8]}",
        definition=json.dumps(disconnect_only(document, ctx)),
        roleArn=role,
    )["stateMachineArn"]
    try:
        execution = sfn.start_execution(stateMachineArn=arn, input="{}")["executionArn"]
        deadline = time.monotonic() + 240
        while (described := sfn.describe_execution(executionArn=execution))["status"] == "RUNNING":
            assert time.monotonic() < deadline, "the disconnect still runs after 240 s"
            time.sleep(1)
    finally:
        sfn.delete_state_machine(stateMachineArn=arn)
    # Then it succeeded with every batch disconnected (SSM took every command: none over 50)
    assert described["status"] == "SUCCEEDED", described.get("cause")
    output = json.loads(described["output"])
    assert output["outcomes"] == ["Success"], output
    assert output["pathsKept"] is None
    # And SSM received one command per batch: 50 hosts and 10, each host once
    commands = [
        c
        for c in client("ssm").list_commands(Filters=[{"key": "DocumentName", "value": document}])["Commands"]
        if c["RequestedDateTime"].timestamp() >= started - 60
    ]
    assert sorted(len(c["InstanceIds"]) for c in commands) == [10, 50]
    assert sorted(i for c in commands for i in c["InstanceIds"]) == sorted(hosts)
    assert {(c["Status"], c["CompletedCount"], c["ErrorCount"]) for c in commands} == {
        ("Success", 50, 0),
        ("Success", 10, 0),
    }
    assert {c["Parameters"]["Address"][0] for c in commands} == {"10.0.1.9"}
