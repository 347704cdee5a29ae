"""Nodes act with their instance role (issue #20: each node will read its own DH-HMAC-CHAP keys):
a managed node's scripts get the credentials of its instance profile's role, a fresh role session
named after the instance per invocation, and none without an instance profile
(vsa_localcloud/instance_roles.py, ssm_commands.py, iam_enforcement.py).

Written from AWS's documentation:
- "IAM roles for Amazon EC2" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/iam-roles-for-amazon-ec2.html):
  an instance launched with an instance profile gets its role's temporary credentials; the role
  session is named after the instance; an instance without one has no credentials.
- "AWS global condition context keys" (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-keys.html):
  requests signed with an instance's role credentials carry ``ec2:SourceInstanceARN``,
  ``aws:EC2InstanceSourceVPC`` and ``aws:EC2InstanceSourcePrivateIPv4``.
Each test fails on stock LocalStack: it refuses RunInstances with an instance profile of its own
IAM and gives node scripts the account's root keys.
"""

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ACCOUNT = "000000000000"
REGION = "us-east-1"
AMI = "ami-12c6146b"  # known to moto
STATE = Path(os.environ.get("VSA_STATE") or Path(__file__).resolve().parents[2] / ".localcloud")
PYTHON = STATE / "venv" / "bin" / "python"  # the local cloud's (with boto3)
TERMINAL = ("Success", "Failed", "TimedOut", "Cancelled")
# a role needs a policy: this one grants what needs no permission (sts:GetCallerIdentity)
IDENTITY = {"Effect": "Allow", "Action": "sts:GetCallerIdentity", "Resource": "*"}
# who a node's scripts are, asked with the local cloud's Python (it has boto3)
IDENTITY_SCRIPT = f"'{PYTHON}' -c 'import boto3; print(boto3.client(\"sts\").get_caller_identity()[\"Arn\"])'"


def instance_arn(instance_id: str) -> str:
    return f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{instance_id}"


@dataclass
class Node:
    instance_id: str
    private_ip: str
    vpc_id: str

    @property
    def arn(self) -> str:
        return instance_arn(self.instance_id)


@pytest.fixture
def roles(aws: Callable[[str], Any]) -> Iterator[Callable[[list[dict[str, Any]]], tuple[str, str]]]:
    """``roles(statements)``: a role EC2 may assume with those statements, in an instance profile
    of its own: (role name, instance profile ARN). Removed after."""
    iam = aws("iam")
    made: list[str] = []
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }

    def make(statements: list[dict[str, Any]]) -> tuple[str, str]:
        name = f"node-{uuid.uuid4().hex[:8]}"
        iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))
        put_policy(aws, name, statements)
        profile = iam.create_instance_profile(InstanceProfileName=name)["InstanceProfile"]
        iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
        made.append(name)
        return name, str(profile["Arn"])

    yield make
    for name in made:
        iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=name)
        iam.delete_instance_profile(InstanceProfileName=name)
        iam.delete_role_policy(RoleName=name, PolicyName="node")
        iam.delete_role(RoleName=name)


def put_policy(aws: Callable[[str], Any], role: str, statements: list[dict[str, Any]]) -> None:
    document = {"Version": "2012-10-17", "Statement": statements}
    aws("iam").put_role_policy(RoleName=role, PolicyName="node", PolicyDocument=json.dumps(document))


@pytest.fixture
def nodes(aws: Callable[[str], Any], control: Callable[..., dict[str, Any]]) -> Iterator[Callable[..., Node]]:
    """``nodes(profile_arn=None, **run_instances)``: a launched instance, registered as a managed
    node (an instance profile when given); deregistered and terminated after."""
    made: list[str] = []

    def launch(profile_arn: str | None = None, **params: Any) -> Node:
        if profile_arn:
            params["IamInstanceProfile"] = {"Arn": profile_arn}
        params.setdefault("ImageId", AMI)
        instance = aws("ec2").run_instances(MinCount=1, MaxCount=1, **params)["Instances"][0]
        made.append(instance["InstanceId"])
        control("ssm", "register_node", InstanceId=instance["InstanceId"])
        return Node(instance["InstanceId"], instance["PrivateIpAddress"], instance.get("VpcId", ""))

    yield launch
    for instance_id in made:
        control("ssm", "deregister_node", InstanceId=instance_id)
    if made:
        aws("ec2").terminate_instances(InstanceIds=made)


def run(aws: Callable[[str], Any], node: Node, *commands: str, timeout: float = 30) -> dict[str, Any]:
    """Run a shell script on the node through SendCommand; its finished invocation."""
    ssm = aws("ssm")
    command_id = ssm.send_command(
        InstanceIds=[node.instance_id],
        DocumentName="AWS-RunShellScript",
        Parameters={"commands": list(commands)},
    )["Command"]["CommandId"]
    deadline = time.monotonic() + timeout
    while True:
        invocation: dict[str, Any] = ssm.get_command_invocation(
            CommandId=command_id, InstanceId=node.instance_id
        )
        if invocation["Status"] in TERMINAL:
            return invocation
        assert time.monotonic() < deadline, f"command still {invocation['Status']} after {timeout} s"
        time.sleep(0.2)


def test_a_nodes_credentials_are_its_instance_roles_session_fresh_for_each_invocation(aws, roles, nodes):
    # Given a node whose instance has an instance profile
    role, profile = roles([IDENTITY])
    node = nodes(profile)
    # When two commands run there
    runs = [
        run(aws, node, IDENTITY_SCRIPT, 'echo "$AWS_ACCESS_KEY_ID ${AWS_SESSION_TOKEN:+token}"')
        for _ in range(2)
    ]
    # Then each acts as the role, its session named after the instance, with credentials of its own
    outputs = [r["StandardOutputContent"].splitlines() for r in runs]
    for lines in outputs:
        assert lines[0] == f"arn:aws:sts::{ACCOUNT}:assumed-role/{role}/{node.instance_id}"
        assert lines[1].endswith(" token")
        assert not lines[1].startswith(ACCOUNT)  # not the account's root keys
    assert outputs[0][1] != outputs[1][1]


def test_a_node_without_an_instance_profile_has_no_credentials(aws, nodes):
    # Given a node whose instance has no instance profile
    node = nodes()
    # When a script looks at its environment
    result = run(aws, node, "env | cut -d= -f1 | grep '^AWS_' | sort")
    # Then it has no credentials at all (and no instance metadata service to look for them)
    assert result["StandardOutputContent"].splitlines() == [
        "AWS_DEFAULT_REGION",
        "AWS_EC2_METADATA_DISABLED",
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_SSM_INSTANCE_ID",
        "AWS_SSM_REGION_NAME",
    ]


def test_an_instance_launched_from_a_launch_template_has_its_instance_profile(aws, roles, nodes):
    """An Auto Scaling group's controllers are launched from the array's launch template, whose
    IamInstanceProfile they run with ("IAM role for applications that run on Amazon EC2
    instances", Amazon EC2 Auto Scaling user guide)."""
    ec2 = aws("ec2")
    # Given a launch template with an instance profile (by name)
    role, profile = roles([IDENTITY])
    name = f"node-{uuid.uuid4().hex[:8]}"
    ec2.create_launch_template(
        LaunchTemplateName=name,
        LaunchTemplateData={"ImageId": AMI, "IamInstanceProfile": {"Name": profile.rsplit("/", 1)[-1]}},
    )
    try:
        # When an instance is launched from it / Then its scripts act as the profile's role
        node = nodes(LaunchTemplate={"LaunchTemplateName": name})
        expected = f"arn:aws:sts::{ACCOUNT}:assumed-role/{role}/{node.instance_id}\n"
        assert run(aws, node, IDENTITY_SCRIPT)["StandardOutputContent"] == expected
    finally:
        ec2.delete_launch_template(LaunchTemplateName=name)


def test_run_instances_takes_an_instance_profile(aws, roles, nodes):
    # Given an instance profile (LocalStack's IAM) / When an instance is launched with it
    _, profile = roles([IDENTITY])
    node = nodes(profile)
    # Then the instance has it, as DescribeInstances and the profile associations show
    (reservation,) = aws("ec2").describe_instances(InstanceIds=[node.instance_id])["Reservations"]
    assert reservation["Instances"][0]["IamInstanceProfile"]["Arn"] == profile
    associations = aws("ec2").describe_iam_instance_profile_associations(
        Filters=[{"Name": "instance-id", "Values": [node.instance_id]}]
    )["IamInstanceProfileAssociations"]
    assert [(a["IamInstanceProfile"]["Arn"], a["State"]) for a in associations] == [(profile, "associated")]
