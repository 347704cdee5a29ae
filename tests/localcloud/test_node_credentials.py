"""Nodes act with their instance role: each node reads its own DH-HMAC-CHAP keys from Secrets
Manager and no other node's (issue #20), through the node ``aws`` CLI the documents call as
``AwsCommand`` (vsa_localcloud/instance_roles.py, node_aws.py, ssm_commands.py, iam_enforcement.py).

Written from AWS's documentation:
- "IAM roles for Amazon EC2" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/iam-roles-for-amazon-ec2.html):
  an instance launched with an instance profile gets its role's temporary credentials; the role
  session is named after the instance; an instance without one has no credentials.
- "AWS global condition context keys" (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-keys.html):
  requests signed with an instance's role credentials carry ``ec2:SourceInstanceARN``,
  ``aws:EC2InstanceSourceVPC`` and ``aws:EC2InstanceSourcePrivateIPv4``.
- "IAM policy elements: Variables and tags" (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_variables.html):
  global condition keys can be used as policy variables (``${ec2:SourceInstanceARN}``).
- Service Authorization Reference, AWS Secrets Manager
  (https://docs.aws.amazon.com/service-authorization/latest/reference/list_awssecretsmanager.html):
  the ``Secret`` resource type supports ``aws:ResourceTag/${TagKey}`` and
  ``secretsmanager:ResourceTag/${TagKey}``.
- "Secret encryption and decryption in AWS Secrets Manager"
  (https://docs.aws.amazon.com/secretsmanager/latest/userguide/security-encryption.html): reading a
  secret encrypted with a customer managed key needs ``kms:Decrypt`` on the key, called by Secrets
  Manager on the caller's behalf (``kms:ViaService`` = secretsmanager.<region>.amazonaws.com).
- AWS CLI return codes (https://docs.aws.amazon.com/cli/latest/userguide/cli-usage-returncodes.html):
  252 usage, 253 no credentials, 254 a service error.
Each test fails on stock LocalStack: it evaluates no IAM policy, refuses RunInstances with a
LocalStack IAM instance profile, and gives node scripts no role credentials.
"""

import json
import os
import subprocess
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
NODE_AWS = STATE / "node-bin" / "aws"  # written by the local cloud at start
PYTHON = STATE / "venv" / "bin" / "python"  # the local cloud's (with boto3)
NO_CREDENTIALS = '\nUnable to locate credentials. You can configure credentials by running "aws configure".\n'
TERMINAL = ("Success", "Failed", "TimedOut", "Cancelled")
# a role needs a policy: this one grants what needs no permission (sts:GetCallerIdentity)
IDENTITY = {"Effect": "Allow", "Action": "sts:GetCallerIdentity", "Resource": "*"}
# who a node's scripts are, asked with the local cloud's Python (it has boto3)
IDENTITY_SCRIPT = f"'{PYTHON}' -c 'import boto3; print(boto3.client(\"sts\").get_caller_identity()[\"Arn\"])'"


def node_policy(key_arn: str, *, decrypt: bool = True) -> list[dict[str, Any]]:
    """The statements operators attach to node roles (controllers and hosts), issue #20."""
    read = {
        "Effect": "Allow",
        "Action": "secretsmanager:GetSecretValue",
        "Resource": f"arn:aws:secretsmanager:*:{ACCOUNT}:secret:vsa/*",
        "Condition": {"StringEquals": {"aws:ResourceTag/vsa:node": "${ec2:SourceInstanceARN}"}},
    }
    kms = {
        "Effect": "Allow",
        "Action": "kms:Decrypt",
        "Resource": key_arn,
        "Condition": {"StringEquals": {"kms:ViaService": f"secretsmanager.{REGION}.amazonaws.com"}},
    }
    return [read, kms] if decrypt else [read]


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


@pytest.fixture(scope="module")
def node_aws() -> Path:
    if not NODE_AWS.is_file():
        pytest.fail(f"{NODE_AWS} is missing: the local cloud writes it at start (tools/localcloud.sh start)")
    return NODE_AWS


@pytest.fixture
def kms_key(aws: Callable[[str], Any]) -> Iterator[str]:
    """A customer managed key; scheduled for deletion after."""
    key = aws("kms").create_key(Description="node keys")["KeyMetadata"]
    yield str(key["Arn"])
    aws("kms").schedule_key_deletion(KeyId=key["KeyId"], PendingWindowInDays=7)


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


@pytest.fixture
def secrets(aws: Callable[[str], Any]) -> Iterator[Callable[..., str]]:
    """``secrets(node_arn, value, kms_key=None, array="a1")``: a node's keys secret as the control
    plane stores it (``vsa/<array>/<node>``, tagged ``vsa:array`` and ``vsa:node``); its ARN.
    Deleted after."""
    made: list[str] = []

    def create(node_arn: str, value: str, kms_key: str | None = None, array: str = "a1") -> str:
        params: dict[str, Any] = {
            "Name": f"vsa/{array}/{node_arn.rsplit('/', 1)[-1]}-{uuid.uuid4().hex[:6]}",
            "SecretString": value,
            "Tags": [{"Key": "vsa:array", "Value": array}, {"Key": "vsa:node", "Value": node_arn}],
        }
        if kms_key:
            params["KmsKeyId"] = kms_key
        arn = str(aws("secretsmanager").create_secret(**params)["ARN"])
        made.append(arn)
        return arn

    yield create
    for arn in made:
        aws("secretsmanager").delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)


def run(aws: Callable[[str], Any], node: Node, *commands: str, timeout: float = 60) -> dict[str, Any]:
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


def read_secret(node_aws: Path, secret_id: str) -> str:
    """The document's call (documents/lib/dhchap.sh), its exit code printed last."""
    return (
        f"'{node_aws}' secretsmanager get-secret-value --secret-id '{secret_id}'"
        ' --query SecretString --output text; echo "exit=$?"'
    )


def access_denied(node: Node, role: str, action: str, resource: str) -> str:
    return (
        "\nAn error occurred (AccessDeniedException) when calling the GetSecretValue operation: "
        f"User: arn:aws:sts::{ACCOUNT}:assumed-role/{role}/{node.instance_id} is not authorized to "
        f"perform: {action} on resource: {resource} because no identity-based policy allows the "
        f"{action} action\n"
    )


def test_each_node_reads_its_own_secret_and_no_other_nodes(aws, roles, nodes, secrets, kms_key, node_aws):
    # Given two nodes of one array and a node of another array, their instances in one instance
    # profile whose role has the node policy, each node's keys in a secret tagged with its
    # instance ARN and encrypted with a customer managed key
    role, profile = roles(node_policy(kms_key))
    first, second = nodes(profile), nodes(profile)
    elsewhere = nodes(profile)
    mine = secrets(first.arn, "first-keys", kms_key)
    theirs = secrets(second.arn, "second-keys", kms_key)
    other_array = secrets(elsewhere.arn, "other-array-keys", kms_key, array="a2")
    # When each node reads its own secret (by ARN, and by name)
    by_arn = run(aws, first, read_secret(node_aws, mine))
    by_name = run(aws, second, read_secret(node_aws, theirs.rsplit(":", 1)[-1][:-7]))
    # Then it gets it
    assert (by_arn["StandardOutputContent"], by_arn["StandardErrorContent"]) == ("first-keys\nexit=0\n", "")
    assert (by_name["StandardOutputContent"], by_name["StandardErrorContent"]) == (
        "second-keys\nexit=0\n",
        "",
    )
    # When the first reads the second's (same array) and the other array's node's
    refused = run(aws, first, read_secret(node_aws, theirs), read_secret(node_aws, other_array))
    # Then both are refused as the AWS CLI reports AccessDeniedException (exit 254), naming the
    # node's role session and the secret's ARN
    assert refused["StandardOutputContent"] == "exit=254\nexit=254\n"
    assert refused["StandardErrorContent"] == access_denied(
        first, role, "secretsmanager:GetSecretValue", theirs
    ) + access_denied(first, role, "secretsmanager:GetSecretValue", other_array)


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


def test_requests_carry_the_instances_vpc_and_private_ip(aws, roles, nodes, secrets, node_aws):
    # Given a role that lets a secret be read only from one instance's VPC and private IP
    # (aws:EC2InstanceSourceVPC, aws:EC2InstanceSourcePrivateIPv4), the secret under the AWS
    # managed key (no kms:Decrypt needed), and two nodes in that role
    role, profile = roles([IDENTITY])
    first, second = nodes(profile), nodes(profile)
    assert first.private_ip != second.private_ip
    secret = secrets(first.arn, "keys")
    condition = {
        "aws:EC2InstanceSourceVPC": first.vpc_id,
        "aws:EC2InstanceSourcePrivateIPv4": first.private_ip,
    }
    allow = {
        "Effect": "Allow",
        "Action": "secretsmanager:GetSecretValue",
        "Resource": "*",
        "Condition": {"StringEquals": condition},
    }
    put_policy(aws, role, [allow])
    # When both read it / Then only the first may
    assert run(aws, first, read_secret(node_aws, secret))["StandardOutputContent"] == "keys\nexit=0\n"
    refused = run(aws, second, read_secret(node_aws, secret))
    assert refused["StandardOutputContent"] == "exit=254\n"
    assert refused["StandardErrorContent"] == access_denied(
        second, role, "secretsmanager:GetSecretValue", secret
    )


def test_a_node_without_an_instance_profile_has_no_credentials(aws, nodes, secrets, node_aws):
    # Given a node whose instance has no instance profile
    node = nodes()
    secret = secrets(node.arn, "keys")
    # When a script looks at its environment and reads the node's secret
    result = run(aws, node, "env | cut -d= -f1 | grep '^AWS_' | sort", read_secret(node_aws, secret))
    # Then it has no credentials at all, and the CLI says so (exit 253)
    assert result["StandardOutputContent"].splitlines() == [
        "AWS_DEFAULT_REGION",
        "AWS_EC2_METADATA_DISABLED",
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_SSM_INSTANCE_ID",
        "AWS_SSM_REGION_NAME",
        "exit=253",
    ]
    assert result["StandardErrorContent"] == NO_CREDENTIALS


def test_without_kms_decrypt_a_node_cannot_read_its_own_secret(aws, roles, nodes, secrets, kms_key, node_aws):
    # Given a node whose role may read its secret but not decrypt with the secret's key
    role, profile = roles(node_policy(kms_key, decrypt=False))
    node = nodes(profile)
    encrypted = secrets(node.arn, "keys", kms_key)
    aws_managed = secrets(node.arn, "other-keys")
    # When it reads the secret / Then it is refused kms:Decrypt on the key
    refused = run(aws, node, read_secret(node_aws, encrypted))
    assert refused["StandardOutputContent"] == "exit=254\n"
    assert refused["StandardErrorContent"] == access_denied(node, role, "kms:Decrypt", kms_key)
    # while a secret under the AWS managed key (aws/secretsmanager) needs no kms:Decrypt
    assert (
        run(aws, node, read_secret(node_aws, aws_managed))["StandardOutputContent"] == "other-keys\nexit=0\n"
    )
    # When kms:Decrypt is granted again (through Secrets Manager only) / Then it reads it
    put_policy(aws, role, node_policy(kms_key))
    assert run(aws, node, read_secret(node_aws, encrypted))["StandardOutputContent"] == "keys\nexit=0\n"


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


# --- the node aws CLI by itself -------------------------------------------------------------------


def node_cli(node_aws: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the node CLI as a script on a node would, from an unrelated working directory."""
    environment = {"PATH": "/usr/bin:/bin", "AWS_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true", **env}
    return subprocess.run(
        [str(node_aws), *args],
        env=environment,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        ("s3", "ls"),
        ("secretsmanager", "get-secret-value", "--query", "SecretString", "--output", "text"),
        ("secretsmanager", "get-secret-value", "--secret-id", "x", "--output", "json"),
        ("secretsmanager", "get-secret-value", "--secret-id", "x", "--query", "SecretString", "--output"),
        ("secretsmanager", "get-secret-value", "--secret-id", "x", "--region", "eu-west-1"),
    ],
)
def test_the_node_cli_refuses_what_it_does_not_answer_with_a_usage_error(node_aws, args):
    result = node_cli(node_aws, *args)
    assert (result.returncode, result.stdout) == (252, "")
    assert result.stderr


def test_the_node_cli_prints_the_secret_string_or_the_clis_errors(aws, endpoint, node_aws, secrets):
    # Given a secret (read with plain access keys: unrestricted)
    secret = secrets(instance_arn("i-0123456789abcdef0"), "the keys")
    keys = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_ENDPOINT_URL": endpoint}
    args = ("secretsmanager", "get-secret-value", "--query", "SecretString", "--output", "text")
    # Then by ARN, by name and with --secret-id=ID it prints the string
    for secret_id in (
        ["--secret-id", secret],
        ["--secret-id", secret.rsplit(":", 1)[-1][:-7]],
        [f"--secret-id={secret}"],
    ):
        found = node_cli(node_aws, *args, *secret_id, **keys)
        assert (found.returncode, found.stdout, found.stderr) == (0, "the keys\n", "")
    # a missing secret is the service's error, exit 254
    missing = node_cli(node_aws, *args, "--secret-id", "vsa/none", **keys)
    assert (missing.returncode, missing.stdout) == (254, "")
    assert missing.stderr.startswith(
        "\nAn error occurred (ResourceNotFoundException) when calling the GetSecretValue operation: "
    )
    # and no credentials at all, exit 253
    bare = node_cli(node_aws, *args, "--secret-id", secret, AWS_ENDPOINT_URL=endpoint)
    assert (bare.returncode, bare.stdout, bare.stderr) == (253, "", NO_CREDENTIALS)
    # nor a region (the environment's configuration, 253 too)
    nowhere = subprocess.run(
        [str(node_aws), *args, "--secret-id", secret],
        env={"PATH": "/usr/bin:/bin", "AWS_EC2_METADATA_DISABLED": "true", **keys},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (nowhere.returncode, nowhere.stdout) == (253, "")
    assert nowhere.stderr.startswith("\nYou must specify a region.")
