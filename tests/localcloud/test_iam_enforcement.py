"""IAM enforcement: a role's session is authorized as AWS authorizes it (vsa_localcloud/iam_enforcement.py).

Written from AWS's documentation:
- Policy evaluation logic (explicit deny, allow, implicit deny):
  https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html
- The resources and condition keys each action is authorized against (Service Authorization
  Reference, Amazon EC2): https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html
  AttachVolume: instance and volume; CreateSnapshots: instance, each volume, the snapshots
  (aws:RequestTag only on the snapshot); CreateVolume: the volume and its source snapshot.
- Tag on create needs ec2:CreateTags with ec2:CreateAction:
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/supported-iam-actions-tagging.html
- RunInstances (the section "RunInstances: the drill instance" below): the Service Authorization
  Reference's RunInstances row; the EC2 User Guide, "Launch an instance from a launch template"
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/launch-instances-from-launch-template.html)
  and "Example policies to control access to the Amazon EC2 API", Launch templates
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ExamplePolicies_EC2.html#iam-example-runinstances-launch-templates);
  the IAM User Guide, "Use an IAM role to grant permissions to applications running on Amazon EC2
  instances" (https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_use_switch-role-ec2.html).
- Run Command by tags: the Systems Manager User Guide, "Restricting Run Command access based on
  tags" (https://docs.aws.amazon.com/systems-manager/latest/userguide/sysman-rc-setting-up-cmdsec.html).
- Errors: EC2 UnauthorizedOperation (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html),
  JSON services AccessDeniedException, Auto Scaling AccessDenied, HTTP 403.
Each test fails on stock LocalStack, which evaluates no identity policy.
"""

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.infra.test_statemachine_definitions import load_template
from tests.localcloud.conftest import run_execution
from vsa_core.arrays import plan
from vsa_core.arrays.spec import ArraySpec
from vsa_core.backups import drills, sets
from vsa_core.naming import INSTANCE_INDEX

ZONE = "us-east-1a"
AMI = "ami-12c6146b"  # known to moto
ACCOUNT = "000000000000"  # the local cloud's default account
DESCRIBE = {"Effect": "Allow", "Action": ["ec2:Describe*"], "Resource": "*"}
TAGGED_ATTACH = {  # the array tag required on *every* resource: refuses the operator's own volume
    "Effect": "Allow",
    "Action": ["ec2:AttachVolume", "ec2:DetachVolume"],
    "Resource": "*",
    "Condition": {"StringLike": {"aws:ResourceTag/vsa:array": "*"}},
}


def _code(exc: ClientError) -> str:
    return str(exc.response["Error"]["Code"])


def _trust(service: str) -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
    }


@pytest.fixture
def make_role(aws: Callable[[str], Any]) -> Iterator[Callable[..., str]]:
    """``make_role(*statements, service=...)``: a role with those statements; its ARN. Removed after."""
    iam = aws("iam")
    made: list[str] = []

    def make(*statements: dict[str, Any], service: str = "lambda.amazonaws.com") -> str:
        name = f"iamtest-{uuid.uuid4().hex[:8]}"
        iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(_trust(service)))
        iam.put_role_policy(
            RoleName=name,
            PolicyName="p",
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": list(statements)}),
        )
        made.append(name)
        return str(iam.get_role(RoleName=name)["Role"]["Arn"])

    yield make
    for name in made:
        iam.delete_role_policy(RoleName=name, PolicyName="p")
        iam.delete_role(RoleName=name)


@pytest.fixture
def role_session(
    aws: Callable[[str], Any], endpoint: str, make_role: Callable[..., str]
) -> Callable[..., Callable[[str], Any]]:
    """``role_session(*statements)``: a role with those statements, assumed; returns a client factory."""

    def make(*statements: dict[str, Any]) -> Callable[[str], Any]:
        arn = make_role(*statements)
        creds = aws("sts").assume_role(RoleArn=arn, RoleSessionName="test")["Credentials"]
        session = boto3.Session(
            aws_access_key_id=creds["AccessKeyId"],
            aws_secret_access_key=creds["SecretAccessKey"],
            aws_session_token=creds["SessionToken"],
            region_name="us-east-1",
        )
        return lambda service: session.client(service, endpoint_url=endpoint)

    return make


DEPLOYMENT = "vsa"
"""The template's default DeploymentName: its roles act on what carries it."""
OURS = [{"Key": "vsa:array", "Value": "a1"}, {"Key": "vsa:deployment", "Value": DEPLOYMENT}]
"""The tags the product gives what it makes for array a1."""


@pytest.fixture
def ec2_world(aws: Callable[[str], Any]) -> Iterator[dict[str, str]]:
    """A tagged controller-like instance, a tagged volume and an untagged (operator's) volume."""
    ec2 = aws("ec2")
    instance = ec2.run_instances(
        ImageId=AMI,
        MinCount=1,
        MaxCount=1,
        Placement={"AvailabilityZone": ZONE},
        TagSpecifications=[{"ResourceType": "instance", "Tags": OURS}],
    )["Instances"][0]["InstanceId"]

    def volume(tags: list[dict[str, str]]) -> str:
        params: dict[str, Any] = {
            "AvailabilityZone": ZONE,
            "Size": 10,
            "VolumeType": "io2",
            "Iops": 1000,
            "MultiAttachEnabled": True,
        }
        if tags:
            params["TagSpecifications"] = [{"ResourceType": "volume", "Tags": tags}]
        return str(ec2.create_volume(**params)["VolumeId"])

    world = {
        "instance": instance,
        "tagged": volume(OURS),
        "operator": volume([]),
    }
    yield world
    for key in ("tagged", "operator"):
        for attachment in ec2.describe_volumes(VolumeIds=[world[key]])["Volumes"][0]["Attachments"]:
            ec2.detach_volume(VolumeId=world[key], InstanceId=attachment["InstanceId"], Force=True)
    ec2.terminate_instances(InstanceIds=[instance])
    for key in ("tagged", "operator"):
        for _ in range(50):
            try:
                ec2.delete_volume(VolumeId=world[key])
                break
            except ClientError as exc:
                if _code(exc) != "VolumeInUse":
                    raise
                time.sleep(0.1)


def test_attach_volume_is_authorized_against_the_instance_and_the_volume(role_session, ec2_world):
    # Given the old statement: AttachVolume where aws:ResourceTag/vsa:array exists
    ec2 = role_session(DESCRIBE, TAGGED_ATTACH)("ec2")
    # When the (tagged) controller attaches the operator's untagged volume
    with pytest.raises(ClientError) as denied:
        ec2.attach_volume(VolumeId=ec2_world["operator"], InstanceId=ec2_world["instance"], Device="/dev/sdf")
    # Then EC2 refuses it as AWS does, naming the volume
    assert _code(denied.value) == "UnauthorizedOperation"
    assert denied.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    message = denied.value.response["Error"]["Message"]
    assert "ec2:AttachVolume" in message
    assert f"volume/{ec2_world['operator']}" in message
    # and nothing was attached
    assert not ec2.describe_volumes(VolumeIds=[ec2_world["operator"]])["Volumes"][0]["Attachments"]
    # while the tagged volume on the tagged instance is allowed
    ec2.attach_volume(VolumeId=ec2_world["tagged"], InstanceId=ec2_world["instance"], Device="/dev/sdg")


def test_attach_scoped_by_instance_tag_allows_the_operators_volume(role_session, ec2_world):
    # The narrowest grant AWS honours: the instance must carry the tag, the volume need not.
    ec2 = role_session(
        DESCRIBE,
        {
            "Effect": "Allow",
            "Action": "ec2:AttachVolume",
            "Resource": "arn:aws:ec2:*:*:instance/*",
            "Condition": {"StringLike": {"aws:ResourceTag/vsa:array": "*"}},
        },
        {"Effect": "Allow", "Action": "ec2:AttachVolume", "Resource": "arn:aws:ec2:*:*:volume/*"},
    )("ec2")
    ec2.attach_volume(VolumeId=ec2_world["operator"], InstanceId=ec2_world["instance"], Device="/dev/sdf")


def test_create_snapshots_request_tag_applies_to_the_snapshots_only(role_session, ec2_world, aws):
    aws("ec2").attach_volume(
        VolumeId=ec2_world["tagged"], InstanceId=ec2_world["instance"], Device="/dev/sdg"
    )
    tags = [{"ResourceType": "snapshot", "Tags": [{"Key": "vsa:array", "Value": "a1"}]}]
    spec = {"InstanceId": ec2_world["instance"], "ExcludeBootVolume": True}
    create_tags = {
        "Effect": "Allow",
        "Action": "ec2:CreateTags",
        "Resource": "*",
        "Condition": {"StringEquals": {"ec2:CreateAction": "CreateSnapshots"}},
    }
    # Given the old statement (aws:RequestTag on Resource "*")
    old = role_session(
        DESCRIBE,
        create_tags,
        {
            "Effect": "Allow",
            "Action": "ec2:CreateSnapshots",
            "Resource": "*",
            "Condition": {"StringLike": {"aws:RequestTag/vsa:array": "*"}},
        },
    )("ec2")
    with pytest.raises(ClientError) as denied:
        old.create_snapshots(InstanceSpecification=spec, TagSpecifications=tags)
    assert _code(denied.value) == "UnauthorizedOperation"
    # When the request tag is required on the snapshots and the sources are scoped otherwise
    new = role_session(
        DESCRIBE,
        create_tags,
        {
            "Effect": "Allow",
            "Action": "ec2:CreateSnapshots",
            "Resource": "arn:aws:ec2:*::snapshot/*",
            "Condition": {"StringLike": {"aws:RequestTag/vsa:array": "*"}},
        },
        {
            "Effect": "Allow",
            "Action": "ec2:CreateSnapshots",
            "Resource": ["arn:aws:ec2:*:*:instance/*", "arn:aws:ec2:*:*:volume/*"],
        },
    )("ec2")
    snapshots = new.create_snapshots(InstanceSpecification=spec, TagSpecifications=tags)["Snapshots"]
    assert [s["VolumeId"] for s in snapshots] == [ec2_world["tagged"]]
    for snapshot in snapshots:
        aws("ec2").delete_snapshot(SnapshotId=snapshot["SnapshotId"])


def test_tag_on_create_needs_create_tags(role_session):
    create_volume = {"Effect": "Allow", "Action": "ec2:CreateVolume", "Resource": "*"}
    tags = [{"ResourceType": "volume", "Tags": [{"Key": "vsa:array", "Value": "a1"}]}]
    params = {"AvailabilityZone": ZONE, "Size": 10, "VolumeType": "gp3", "TagSpecifications": tags}
    with pytest.raises(ClientError) as denied:
        role_session(create_volume)("ec2").create_volume(**params)
    assert "ec2:CreateTags" in denied.value.response["Error"]["Message"]
    ec2 = role_session(
        create_volume,
        {
            "Effect": "Allow",
            "Action": "ec2:CreateTags",
            "Resource": "*",
            "Condition": {"StringEquals": {"ec2:CreateAction": "CreateVolume"}},
        },
        {"Effect": "Allow", "Action": "ec2:DeleteVolume", "Resource": "*"},
    )("ec2")
    volume_id = ec2.create_volume(**params)["VolumeId"]
    ec2.delete_volume(VolumeId=volume_id)


def test_explicit_deny_wins(role_session, ec2_world):
    ec2 = role_session(
        {"Effect": "Allow", "Action": "ec2:*", "Resource": "*"},
        {"Effect": "Deny", "Action": "ec2:DescribeVolumes", "Resource": "*"},
    )("ec2")
    with pytest.raises(ClientError) as denied:
        ec2.describe_volumes()
    assert "explicit deny" in denied.value.response["Error"]["Message"]
    ec2.describe_instances(InstanceIds=[ec2_world["instance"]])


def test_json_and_query_protocols_refuse_in_their_own_shape(role_session):
    clients = role_session(DESCRIBE)
    with pytest.raises(ClientError) as json_denied:
        clients("dynamodb").describe_table(TableName="nothing-here")
    assert _code(json_denied.value) == "AccessDeniedException"
    assert "dynamodb:DescribeTable" in json_denied.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as query_denied:
        clients("autoscaling").set_desired_capacity(AutoScalingGroupName="g", DesiredCapacity=1)
    assert _code(query_denied.value) == "AccessDenied"
    assert query_denied.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_expired_session_credentials_are_refused_whatever_the_policy(role_session, control):
    """ "Temporary security credentials … expire": a request signed with an expired session is
    refused before any policy is evaluated: ``ExpiredToken`` (query/EC2) and
    ``ExpiredTokenException`` (JSON), HTTP 403, "The security token included in the request is
    expired" (the code the SDKs refresh credentials on)."""
    clients = role_session({"Effect": "Allow", "Action": "*", "Resource": "*"})
    clients("ec2").describe_volumes()  # allowed while the session is valid
    key = clients("ec2")._request_signer._credentials.access_key
    control("iam", "expire", AccessKeyId=key)
    with pytest.raises(ClientError) as query_refused:
        clients("ec2").describe_volumes()
    assert _code(query_refused.value) == "ExpiredToken"
    assert query_refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert "expired" in query_refused.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as json_refused:
        clients("dynamodb").list_tables()
    assert _code(json_refused.value) == "ExpiredTokenException"


def test_plain_access_keys_are_unrestricted(aws):
    # the operator's and the tests' own keys are not an assumed role: as the account root
    aws("ec2").describe_volumes()
    aws("dynamodb").list_tables()


def test_record_mode_decides_without_refusing_and_lists_usage(role_session, control):
    clients = role_session(DESCRIBE)
    control("iam", "reset")
    control("iam", "configure", mode="record")
    try:
        clients("dynamodb").list_tables()  # denied, but only recorded
        clients("ec2").describe_volumes()
    finally:
        control("iam", "configure", mode="enforce")
    usage = control("iam", "usage")
    pairs = {tuple(p) for role_pairs in usage.values() for p in role_pairs}
    assert ("dynamodb:ListTables", "*") in pairs
    assert ("ec2:DescribeVolumes", "*") in pairs
    denied = control("iam", "decisions", denied_only=True)["decisions"]
    assert any(d["action"] == "dynamodb:ListTables" for d in denied)


def test_step_functions_tasks_run_with_the_state_machine_role(aws, make_role):
    # Given a state machine whose role may not describe volumes
    role_arn = make_role(
        {"Effect": "Allow", "Action": "ec2:DescribeInstances", "Resource": "*"},
        service="states.amazonaws.com",
    )
    definition = {
        "StartAt": "Describe",
        "States": {
            "Describe": {
                "Type": "Task",
                "Resource": "arn:aws:states:::aws-sdk:ec2:describeVolumes",
                "End": True,
            }
        },
    }
    described = run_execution(aws, definition, role_arn)
    # Then the task fails with EC2's refusal of the state machine's role
    assert described["status"] == "FAILED"
    name = role_arn.rsplit("/", 1)[-1]
    assert f"assumed-role/{name}/" in described.get("cause", "")
    assert "not authorized to perform: ec2:DescribeVolumes" in described.get("cause", "")


# --- the template's own statements ---------------------------------------------------------------


STACK_ARNS = {"RegistryTable.Arn": "arn:aws:dynamodb:us-east-1:000000000000:table/*"}
"""Attributes of the stack's own resources inside a ``!Sub``, as deployed here (a wildcard for
the name: the ARN keeps its form, so ``${RegistryTable.Arn}/index/…`` stays an index ARN)."""


def _render(value: Any, stack: dict[str, str]) -> Any:
    """A policy value of template.yaml as deployed here (``!Sub`` with the local account and the
    default DeploymentName; ``!GetAtt`` of an attribute in ``stack`` as given there; other
    intrinsics, which name the stack's own resources, become wildcards)."""
    if isinstance(value, dict) and "Sub" in value:
        text = value["Sub"] if isinstance(value["Sub"], str) else value["Sub"][0]
        for attribute, arn in stack.items():
            text = text.replace(f"${{{attribute}}}", arn)
        text = text.replace("${AWS::Partition}", "aws").replace("${AWS::Region}", "us-east-1")
        text = text.replace("${AWS::AccountId}", "000000000000")
        text = text.replace("${DeploymentName}", DEPLOYMENT)
        return re.sub(r"\$\{[^}]+\}", "*", text)
    if value == {"Ref": "DeploymentName"}:
        return DEPLOYMENT
    if isinstance(value, dict) and isinstance(value.get("GetAtt"), str) and value["GetAtt"] in stack:
        return stack[value["GetAtt"]]
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in ("Ref", "GetAtt"):
        return "*"  # the stack's own resources
    if isinstance(value, dict):
        return {k: _render(v, stack) for k, v in value.items()}
    if isinstance(value, list):
        return [_render(v, stack) for v in value]
    return value


def template_statements(role: str, stack: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The statements of a role's inline policies in template.yaml, as deployed here; ``stack``
    names attributes of the stack's resources (``{"DrillInstanceRole.Arn": arn}``) that would
    otherwise be wildcards."""
    resource = load_template()["Resources"][role]
    attributes = {**STACK_ARNS, **(stack or {})}
    out = []
    for policy in resource["Properties"].get("Policies", []):
        for statement in policy["PolicyDocument"]["Statement"]:
            out.append({k: _render(v, attributes) for k, v in statement.items()})
    return out


def test_controller_role_attaches_the_operators_own_volume(role_session, ec2_world, aws):
    # Given the controller steps' role exactly as template.yaml declares it
    ec2 = role_session(*template_statements("TaskControllerRole"))("ec2")
    # Then it attaches an untagged (operator-owned) io2 volume to our tagged controller, and detaches it
    ec2.attach_volume(VolumeId=ec2_world["operator"], InstanceId=ec2_world["instance"], Device="/dev/sdf")
    ec2.detach_volume(VolumeId=ec2_world["operator"], InstanceId=ec2_world["instance"])
    # but not to an instance that is not one of ours
    other = aws("ec2").run_instances(
        ImageId=AMI, MinCount=1, MaxCount=1, Placement={"AvailabilityZone": ZONE}
    )
    other_id = other["Instances"][0]["InstanceId"]
    try:
        with pytest.raises(ClientError) as denied:
            ec2.attach_volume(VolumeId=ec2_world["operator"], InstanceId=other_id, Device="/dev/sdf")
        assert _code(denied.value) == "UnauthorizedOperation"
    finally:
        aws("ec2").terminate_instances(InstanceIds=[other_id])


def test_the_old_attach_statement_is_denied_for_the_operators_volume(role_session, ec2_world):
    # Given the controller role with its AttachVolume statements replaced by TAGGED_ATTACH
    statements = [
        s for s in template_statements("TaskControllerRole") if "ec2:AttachVolume" not in s["Action"]
    ]
    ec2 = role_session(*statements, TAGGED_ATTACH)("ec2")
    # Then the bootstrap's attach of an operator-owned volume is refused
    with pytest.raises(ClientError) as denied:
        ec2.attach_volume(VolumeId=ec2_world["operator"], InstanceId=ec2_world["instance"], Device="/dev/sdf")
    assert _code(denied.value) == "UnauthorizedOperation"


def test_backup_role_snapshots_an_array_of_operator_volumes(role_session, ec2_world, aws):
    aws("ec2").attach_volume(
        VolumeId=ec2_world["operator"], InstanceId=ec2_world["instance"], Device="/dev/sdf"
    )
    ec2 = role_session(*template_statements("TaskBackupRole"))("ec2")
    snapshots = ec2.create_snapshots(
        InstanceSpecification={"InstanceId": ec2_world["instance"], "ExcludeBootVolume": True},
        TagSpecifications=[{"ResourceType": "snapshot", "Tags": OURS}],
        CopyTagsFromSource="volume",
    )["Snapshots"]
    assert [s["VolumeId"] for s in snapshots] == [ec2_world["operator"]]
    for snapshot in snapshots:  # the role deletes only the array's (tagged) snapshots
        ec2.delete_snapshot(SnapshotId=snapshot["SnapshotId"])


def test_backups_api_role_restores_from_a_tagged_snapshot_and_undoes(role_session, ec2_world, aws):
    snapshot = aws("ec2").create_snapshot(
        VolumeId=ec2_world["tagged"],
        TagSpecifications=[{"ResourceType": "snapshot", "Tags": OURS}],
    )["SnapshotId"]
    untagged = aws("ec2").create_snapshot(VolumeId=ec2_world["operator"])["SnapshotId"]
    ec2 = role_session(*template_statements("ApiBackupsRole"))("ec2")
    # tagged as a restore makes its volumes: the array's tag and the set it came from
    restored = [
        {"Key": "vsa:array", "Value": "a2"},
        {"Key": "vsa:deployment", "Value": DEPLOYMENT},
        {"Key": "vsa:restored-from", "Value": "bk-1"},
    ]
    tags = [{"ResourceType": "volume", "Tags": restored}]
    params = {
        "AvailabilityZone": ZONE,
        "VolumeType": "io2",
        "Iops": 1000,
        "MultiAttachEnabled": True,
        "TagSpecifications": tags,
    }
    try:
        volume = ec2.create_volume(SnapshotId=snapshot, **params)["VolumeId"]
        ec2.delete_volume(VolumeId=volume)  # the undo of a failed restore
        with pytest.raises(ClientError) as denied:  # a data volume of the array: never
            ec2.delete_volume(VolumeId=ec2_world["tagged"])
        assert _code(denied.value) == "UnauthorizedOperation"
        with pytest.raises(ClientError) as denied:  # a snapshot that is not the array's
            ec2.create_volume(SnapshotId=untagged, **params)
        assert f"snapshot/{untagged}" in denied.value.response["Error"]["Message"]
    finally:
        aws("ec2").delete_snapshot(SnapshotId=snapshot)
        aws("ec2").delete_snapshot(SnapshotId=untagged)


def test_send_command_is_authorized_against_the_document_and_each_instance(role_session, ec2_world):
    # SendCommand: the document and each EC2 instance (i-…, not a hybrid managed node's mi-… ARN)
    statements = {
        "Effect": "Allow",
        "Action": "ssm:SendCommand",
        "Resource": ["arn:aws:ssm:*:*:document/AWS-RunShellScript", "arn:aws:ec2:*:*:instance/*"],
    }
    ssm = role_session(statements)("ssm")
    params = {"InstanceIds": [ec2_world["instance"]], "Parameters": {"commands": ["true"]}}
    refusal = ""
    try:
        ssm.send_command(DocumentName="AWS-RunShellScript", **params)
    except ClientError as exc:  # the local cloud may refuse an unregistered node, but not IAM
        refusal = _code(exc)
    assert refusal not in ("AccessDeniedException", "AccessDenied")
    with pytest.raises(ClientError) as denied:
        ssm.send_command(DocumentName="AWS-RunPowerShellScript", **params)
    assert _code(denied.value) == "AccessDeniedException"
    assert "document/AWS-RunPowerShellScript" in denied.value.response["Error"]["Message"]


def test_auto_scaling_group_tags_condition_its_actions(role_session, aws):
    autoscaling = aws("autoscaling")
    name = f"iamtest-{uuid.uuid4().hex[:8]}"
    autoscaling.create_launch_configuration(
        LaunchConfigurationName=name, ImageId=AMI, InstanceType="t3.micro"
    )
    tag = {"Key": "vsa:array", "Value": "a1", "PropagateAtLaunch": False}
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchConfigurationName=name,
        MinSize=0,
        MaxSize=2,
        AvailabilityZones=[ZONE],
        Tags=[{**tag, "ResourceId": name, "ResourceType": "auto-scaling-group"}],
    )
    untagged = f"{name}-u"
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=untagged,
        LaunchConfigurationName=name,
        MinSize=0,
        MaxSize=2,
        AvailabilityZones=[ZONE],
    )
    try:
        client = role_session(
            {
                "Effect": "Allow",
                "Action": "autoscaling:SetDesiredCapacity",
                "Resource": "*",
                "Condition": {"StringLike": {"aws:ResourceTag/vsa:array": "*"}},
            }
        )("autoscaling")
        client.set_desired_capacity(AutoScalingGroupName=name, DesiredCapacity=0)
        with pytest.raises(ClientError) as denied:
            client.set_desired_capacity(AutoScalingGroupName=untagged, DesiredCapacity=0)
        assert _code(denied.value) == "AccessDenied"
    finally:
        for group in (name, untagged):
            autoscaling.delete_auto_scaling_group(AutoScalingGroupName=group, ForceDelete=True)
        autoscaling.delete_launch_configuration(LaunchConfigurationName=name)


def test_a_query_of_an_index_is_authorized_against_the_index_alone(role_session, registry_table):
    # Given on_controller_event's role as template.yaml declares it: Query on the registry's
    # instances index, and of the table only GetItem (is a group's array this deployment's?)
    # (AWS authorizes a Query with IndexName against the index's ARN, table/<name>/index/<index>;
    # DynamoDB developer guide, IAM policy examples)
    dynamodb = role_session(*template_statements("OnControllerEventRole"))("dynamodb")
    # Then it asks the index whether an instance is a controller
    found = dynamodb.query(
        TableName=registry_table,
        IndexName=INSTANCE_INDEX,
        KeyConditionExpression="instanceId = :i AND begins_with(sk, :slot)",
        ExpressionAttributeValues={":i": {"S": "i-0123456789abcdef0"}, ":slot": {"S": "SLOT#"}},
    )
    assert found["Items"] == []
    # and reads one item by its key, but neither queries nor scans the table
    assert "Item" not in dynamodb.get_item(
        TableName=registry_table, Key={"pk": {"S": "ARRAY#a"}, "sk": {"S": "SPEC"}}
    )
    refused = []
    for call, params in (
        (
            "query",
            {"KeyConditionExpression": "pk = :pk", "ExpressionAttributeValues": {":pk": {"S": "ARRAY#a"}}},
        ),
        ("scan", {}),
        ("scan", {"IndexName": INSTANCE_INDEX}),
    ):
        with pytest.raises(ClientError) as denied:
            getattr(dynamodb, call)(TableName=registry_table, **params)
        refused.append(_code(denied.value))
    assert refused == ["AccessDeniedException"] * 3


# --- Secrets Manager: a secret's tags and its KMS key (issue #20) ---------------------------------
# Service Authorization Reference, AWS Secrets Manager
# (https://docs.aws.amazon.com/service-authorization/latest/reference/list_awssecretsmanager.html):
# the Secret resource type (arn:…:secret:${SecretId}) supports aws:ResourceTag/${TagKey} and
# secretsmanager:ResourceTag/${TagKey}; CreateSecret and TagResource aws:RequestTag and aws:TagKeys.
# A secret's ARN ends with "-" and six random characters (Secrets Manager API Reference,
# CreateSecret); a request may name it by name, full ARN or partial ARN (without them).


@pytest.fixture
def secret(aws: Callable[[str], Any]) -> Iterator[Callable[..., str]]:
    """``secret(array, **create_secret)``: a secret ``vsa/<array>/…`` tagged ``vsa:array``; its ARN.
    Deleted after (unless the test did)."""
    made: list[str] = []

    def create(array: str, **params: Any) -> str:
        params.setdefault("Name", f"vsa/{array}/iamtest-{uuid.uuid4().hex[:8]}")
        params.setdefault("SecretString", f"keys of {array}")
        params.setdefault("Tags", [{"Key": "vsa:array", "Value": array}])
        arn = str(aws("secretsmanager").create_secret(**params)["ARN"])
        made.append(arn)
        return arn

    yield create
    for arn in made:
        try:
            aws("secretsmanager").delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)
        except ClientError as exc:
            if _code(exc) != "ResourceNotFoundException":
                raise


def _names(arn: str) -> list[str]:
    """The ways a request may name a secret: its full ARN, its partial ARN, its name."""
    partial = arn[: -len("-AbCdEf")]
    return [arn, partial, partial.split(":secret:", 1)[1]]


def test_a_secret_is_authorized_by_its_full_arn_and_its_tags_however_it_is_named(role_session, secret):
    # Given a role that may use the secrets of array a1 only (their tag), and a secret of a1 and
    # one of a2
    clients = role_session(
        {
            "Effect": "Allow",
            "Action": [
                "secretsmanager:DescribeSecret",
                "secretsmanager:GetSecretValue",
                "secretsmanager:PutSecretValue",
                "secretsmanager:TagResource",
                "secretsmanager:DeleteSecret",
            ],
            "Resource": f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:vsa/*",
            "Condition": {"StringEquals": {"aws:ResourceTag/vsa:array": "a1"}},
        }
    )
    manager = clients("secretsmanager")
    ours, theirs = secret("a1"), secret("a2")
    # Then a1's secret is used by ARN, partial ARN and name alike
    for name in _names(ours):
        assert manager.describe_secret(SecretId=name)["ARN"] == ours
        assert manager.get_secret_value(SecretId=name)["SecretString"] == "keys of a1"
        manager.put_secret_value(SecretId=name, SecretString="keys of a1")
        manager.tag_resource(SecretId=name, Tags=[{"Key": "rotated", "Value": "yes"}])
    # and a2's is refused however it is named, the refusal naming its full ARN
    for name in _names(theirs):
        for call, params in (
            ("describe_secret", {}),
            ("get_secret_value", {}),
            ("put_secret_value", {"SecretString": "x"}),
            ("tag_resource", {"Tags": [{"Key": "vsa:array", "Value": "a1"}]}),
            ("delete_secret", {"ForceDeleteWithoutRecovery": True}),
        ):
            with pytest.raises(ClientError) as denied:
                getattr(manager, call)(SecretId=name, **params)
            assert _code(denied.value) == "AccessDeniedException"
            assert f"on resource: {theirs} because" in denied.value.response["Error"]["Message"]
    manager.delete_secret(SecretId=_names(ours)[1], ForceDeleteWithoutRecovery=True)


def test_a_secret_that_does_not_exist_is_authorized_by_the_arn_the_request_names(role_session):
    # Given a role that may use every secret under vsa/, and one that may use those tagged a1
    anywhere = role_session(
        {
            "Effect": "Allow",
            "Action": ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
            "Resource": f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:vsa/*",
        }
    )("secretsmanager")
    tagged = role_session(
        {
            "Effect": "Allow",
            "Action": "secretsmanager:GetSecretValue",
            "Resource": "*",
            "Condition": {"StringEquals": {"aws:ResourceTag/vsa:array": "a1"}},
        }
    )("secretsmanager")
    missing = f"vsa/a1/iamtest-{uuid.uuid4().hex[:8]}"
    # When they ask for a secret that does not exist / Then the first learns it does not exist
    # (the control plane asks so before creating one), outside vsa/ it is refused, and the
    # second is refused (a secret that does not exist has no tag to allow it)
    outcomes = []
    for client, call, secret_id in (
        (anywhere, "get_secret_value", missing),
        (anywhere, "describe_secret", missing),
        (anywhere, "get_secret_value", f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:{missing}"),
        (anywhere, "get_secret_value", f"other/{missing}"),
        (tagged, "get_secret_value", missing),
    ):
        with pytest.raises(ClientError) as failed:
            getattr(client, call)(SecretId=secret_id)
        outcomes.append(_code(failed.value))
    assert outcomes == ["ResourceNotFoundException"] * 3 + ["AccessDeniedException"] * 2


def test_secretsmanager_resource_tag_conditions_a_secret_as_aws_resource_tag_does(role_session, secret):
    manager = role_session(
        {
            "Effect": "Allow",
            "Action": "secretsmanager:GetSecretValue",
            "Resource": "*",
            "Condition": {"StringEquals": {"secretsmanager:ResourceTag/vsa:array": "a1"}},
        }
    )("secretsmanager")
    assert manager.get_secret_value(SecretId=secret("a1"))["SecretString"] == "keys of a1"
    with pytest.raises(ClientError) as denied:
        manager.get_secret_value(SecretId=secret("a2"))
    assert _code(denied.value) == "AccessDeniedException"


def test_creating_and_tagging_a_secret_see_the_request_tags(role_session, secret, aws):
    # Given a role that creates array a1's secrets (named vsa/…, tagged vsa:array=a1) and may tag
    # them, but never with vsa:node (the tag that decides which node reads a secret)
    manager = role_session(
        {
            "Effect": "Allow",
            "Action": ["secretsmanager:CreateSecret", "secretsmanager:TagResource"],
            "Resource": f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:vsa/*",
            "Condition": {"StringEqualsIfExists": {"aws:RequestTag/vsa:array": "a1"}},
        },
        {
            "Effect": "Deny",
            "Action": ["secretsmanager:CreateSecret", "secretsmanager:TagResource"],
            "Resource": "*",
            "Condition": {"ForAnyValue:StringEquals": {"aws:TagKeys": ["vsa:node"]}},
        },
    )("secretsmanager")
    name = f"vsa/a1/iamtest-{uuid.uuid4().hex[:8]}"
    created = manager.create_secret(Name=name, SecretString="k", Tags=[{"Key": "vsa:array", "Value": "a1"}])
    aws("secretsmanager").delete_secret(SecretId=created["ARN"], ForceDeleteWithoutRecovery=True)
    refused = []
    for params in (
        {"Name": name + "-2", "Tags": [{"Key": "vsa:array", "Value": "a2"}]},
        {"Name": name + "-3", "Tags": [{"Key": "vsa:node", "Value": "arn:aws:ec2:us-east-1:1:instance/i-1"}]},
        {"Name": f"other/{name}", "Tags": [{"Key": "vsa:array", "Value": "a1"}]},
    ):
        with pytest.raises(ClientError) as denied:
            manager.create_secret(SecretString="k", **params)
        refused.append(_code(denied.value))
    assert refused == ["AccessDeniedException"] * 3
    ours = secret("a1")
    manager.tag_resource(SecretId=ours, Tags=[{"Key": "owner", "Value": "ops"}])
    with pytest.raises(ClientError) as denied:
        manager.tag_resource(SecretId=ours, Tags=[{"Key": "vsa:node", "Value": "x"}])
    assert _code(denied.value) == "AccessDeniedException"


def test_reading_a_secret_under_a_customer_managed_key_also_needs_kms_decrypt(role_session, secret, aws):
    """ "Secret encryption and decryption in AWS Secrets Manager"
    (https://docs.aws.amazon.com/secretsmanager/latest/userguide/security-encryption.html): to read a
    secret encrypted with a customer managed key the caller needs kms:Decrypt on the key, which
    Secrets Manager calls on its behalf (kms:ViaService, encryption context SecretARN); the AWS
    managed key aws/secretsmanager needs no permission of the caller's."""
    kms = aws("kms")
    key = kms.create_key()["KeyMetadata"]
    alias = f"alias/iamtest-{uuid.uuid4().hex[:8]}"
    kms.create_alias(AliasName=alias, TargetKeyId=key["KeyId"])
    try:
        # Given secrets under the key (by its ARN, by an alias), under the AWS managed key
        # (named, and by default), and a role that may read them all but decrypt nothing
        by_arn, by_alias = secret("a1", KmsKeyId=key["Arn"]), secret("a1", KmsKeyId=alias)
        managed = [secret("a1", KmsKeyId="alias/aws/secretsmanager"), secret("a1")]
        read = {"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": "*"}
        manager = role_session(read)("secretsmanager")
        # Then those under the AWS managed key are read; those under the customer managed key are
        # refused kms:Decrypt on that key
        for arn in managed:
            assert manager.get_secret_value(SecretId=arn)["SecretString"] == "keys of a1"
        for arn in (by_arn, by_alias):
            with pytest.raises(ClientError) as denied:
                manager.get_secret_value(SecretId=arn)
            assert _code(denied.value) == "AccessDeniedException"
            assert f"kms:Decrypt on resource: {key['Arn']} " in denied.value.response["Error"]["Message"]
        # When kms:Decrypt is granted through Secrets Manager for one secret (its encryption
        # context) / Then that secret is read, the other still refused
        manager = role_session(
            read,
            {
                "Effect": "Allow",
                "Action": "kms:Decrypt",
                "Resource": key["Arn"],
                "Condition": {
                    "StringEquals": {
                        "kms:ViaService": "secretsmanager.us-east-1.amazonaws.com",
                        "kms:EncryptionContext:SecretARN": by_arn,
                    }
                },
            },
        )("secretsmanager")
        assert manager.get_secret_value(SecretId=by_arn)["SecretString"] == "keys of a1"
        with pytest.raises(ClientError):
            manager.get_secret_value(SecretId=by_alias)
        # and kms:Decrypt granted for calls not made through Secrets Manager does not do
        manager = role_session(
            read,
            {
                "Effect": "Allow",
                "Action": "kms:Decrypt",
                "Resource": key["Arn"],
                "Condition": {"StringEquals": {"kms:ViaService": "ec2.us-east-1.amazonaws.com"}},
            },
        )("secretsmanager")
        with pytest.raises(ClientError):
            manager.get_secret_value(SecretId=by_arn)
    finally:
        kms.delete_alias(AliasName=alias)
        kms.schedule_key_deletion(KeyId=key["KeyId"], PendingWindowInDays=7)


def test_s3_is_authorized_on_the_bucket_and_object_arns_with_the_list_prefix(role_session, aws):
    # S3's resources are arn:aws:s3:::bucket and arn:aws:s3:::bucket/key (Service Authorization
    # Reference, "Resource types defined by Amazon S3"); ListBucket's s3:prefix is the request's
    # Prefix (S3 user guide, "Example: Allow a user to list only the objects in a specific folder")
    bucket = f"iam-s3-{uuid.uuid4().hex[:8]}"
    aws("s3").create_bucket(Bucket=bucket)
    s3 = role_session(
        {
            "Effect": "Allow",
            "Action": ["s3:PutObject", "s3:GetObject"],
            "Resource": f"arn:aws:s3:::{bucket}/signals/*",
        },
        {
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": f"arn:aws:s3:::{bucket}",
            "Condition": {"StringLike": {"s3:prefix": "signals/*"}},
        },
    )("s3")
    s3.put_object(Bucket=bucket, Key="signals/a", Body=b"x")
    assert s3.get_object(Bucket=bucket, Key="signals/a")["Body"].read() == b"x"
    assert s3.list_objects_v2(Bucket=bucket, Prefix="signals/")["KeyCount"] == 1
    for denied in (
        lambda: s3.put_object(Bucket=bucket, Key="other/a", Body=b"x"),
        lambda: s3.list_objects_v2(Bucket=bucket, Prefix="other/"),
        lambda: s3.list_objects_v2(Bucket=bucket),
    ):
        with pytest.raises(ClientError) as refused:
            denied()
        assert _code(refused.value) == "AccessDenied", refused.value.response


# --- RunInstances: the drill instance -------------------------------------------------------------
# Service Authorization Reference, Amazon EC2, RunInstances: authorized against the instance and
# the volumes being created (instance/*, volume/*: aws:RequestTag and aws:TagKeys from their own
# tag specification), the network interface, the subnet, each security group, the image
# (arn:aws:ec2:<region>::image/<ami>), the launch template and the key pair, each with
# ec2:LaunchTemplate and ec2:IsLaunchTemplateResource. EC2 User Guide, "Launch an instance from a
# launch template": the request's parameters override the template's, and its tags are added to
# the template's ("If the launch template has an existing tag with a key of Owner, the value is
# replaced"). EC2 User Guide, example policies, Launch templates: ec2:IsLaunchTemplateResource
# keeps a launch to the template's resources; "Tags in a launch template": tag-on-create needs
# ec2:CreateTags for the template's tags too. IAM User Guide, "Use an IAM role to grant
# permissions to applications running on Amazon EC2 instances": "To launch an instance with a
# role, the developer must have permission to launch EC2 instances and permission to pass IAM
# roles" (iam:PassRole on the profile's role, iam:PassedToService ec2.amazonaws.com).

REGION_ARN = f"arn:aws:ec2:us-east-1:{ACCOUNT}"
LAUNCH = {"MinCount": 1, "MaxCount": 1}
DRILL_TAGS = [{"Key": drills.DRILL_TAG, "Value": "dr-1"}, {"Key": "vsa:deployment", "Value": DEPLOYMENT}]


@pytest.fixture
def instance_profile(aws: Callable[[str], Any]) -> Iterator[Callable[[str], tuple[str, str]]]:
    """``instance_profile(path)``: a role EC2 may assume, in an instance profile of its own, both
    under ``path``: (instance profile ARN, role ARN). Removed after."""
    iam = aws("iam")
    made: list[str] = []

    def make(path: str) -> tuple[str, str]:
        name = f"iamtest-{uuid.uuid4().hex[:8]}"
        trust = json.dumps(_trust("ec2.amazonaws.com"))
        role = iam.create_role(RoleName=name, Path=path, AssumeRolePolicyDocument=trust)["Role"]
        profile = iam.create_instance_profile(InstanceProfileName=name, Path=path)["InstanceProfile"]
        iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
        made.append(name)
        return str(profile["Arn"]), str(role["Arn"])

    yield make
    for name in made:
        iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=name)
        iam.delete_instance_profile(InstanceProfileName=name)
        iam.delete_role(RoleName=name)


@pytest.fixture
def launch_template(aws: Callable[[str], Any]) -> Iterator[Callable[..., str]]:
    """``launch_template(data, name=None)``: a launch template with that LaunchTemplateData; its id.
    Deleted after."""
    made: list[str] = []

    def make(data: dict[str, Any], name: str | None = None) -> str:
        name = name or f"iamtest-{uuid.uuid4().hex[:8]}"
        created = aws("ec2").create_launch_template(LaunchTemplateName=name, LaunchTemplateData=data)
        made.append(str(created["LaunchTemplate"]["LaunchTemplateId"]))
        return made[-1]

    yield make
    for template in made:
        aws("ec2").delete_launch_template(LaunchTemplateId=template)


@pytest.fixture
def launched(aws: Callable[[str], Any]) -> Iterator[Callable[[dict[str, Any]], str]]:
    """``launched(run_instances answer)``: the instance's id, terminated after the test."""
    ids: list[str] = []

    def note(reply: dict[str, Any]) -> str:
        ids.append(str(reply["Instances"][0]["InstanceId"]))
        return ids[-1]

    yield note
    if ids:
        aws("ec2").terminate_instances(InstanceIds=ids)


def _refusal(call: Callable[[], Any]) -> tuple[str, str]:
    """The error code and message of a call that must fail."""
    with pytest.raises(ClientError) as refused:
        call()
    return _code(refused.value), str(refused.value.response["Error"]["Message"])


def _default_subnet(aws: Callable[[str], Any]) -> str:
    subnets = aws("ec2").describe_subnets(
        Filters=[
            {"Name": "availability-zone", "Values": [ZONE]},
            {"Name": "default-for-az", "Values": ["true"]},
        ]
    )["Subnets"]
    return str(subnets[0]["SubnetId"])


def _drill_spec(array_id: str, controllers_profile: str) -> ArraySpec:
    """An array whose controllers are declared by instanceType and imageId, with their own
    instance profile (the control plane then keeps their launch template)."""
    return ArraySpec.model_validate(
        {
            "arrayId": array_id,
            "availabilityZone": ZONE,
            "volumes": [{"volumeId": "vol-0123456789abcdef0"}],
            "controllers": {
                "instanceType": "r5b.2xlarge",
                "imageId": AMI,
                "instanceProfile": controllers_profile,
            },
            "minControllers": 1,
            "maxControllers": 2,
            "backup": {"schedule": "rate(1 day)", "drill": {}},
        }
    )


def test_the_drill_role_launches_the_drill_instance_from_the_arrays_launch_template(
    role_session, aws, instance_profile, launch_template, launched
):
    # Given an array's controllers with their own instance profile, and the launch template the
    # control plane keeps for them (plan.launch_template_params: its tags, its profile)
    drill_profile, drill_role = instance_profile("/vsa-drill/")
    controllers_profile, controllers_role = instance_profile("/")
    spec = _drill_spec(f"iamtest-{uuid.uuid4().hex[:6]}", controllers_profile.rsplit("/", 1)[-1])
    created = plan.launch_template_params(spec)
    assert created is not None
    launch_template(created["LaunchTemplateData"], name=created["LaunchTemplateName"])
    # and TaskDrillRole exactly as template.yaml declares it, with this test's drill instance role
    ec2 = role_session(*template_statements("TaskDrillRole", {"DrillInstanceRole.Arn": drill_role}))("ec2")
    now = datetime.now(UTC)
    drill = drills.Drill(
        drill_id=drills.new_drill_id(now),
        array_id=spec.array_id,
        backup_id=sets.new_backup_id(now),
        started_at=now,
        set_created_at=now,
    )
    params = drills.launch_params(spec, drill, drill_profile)
    # When the drill step launches the drill instance as the product does (from the template,
    # the drill's instance profile over the template's, tagged as the drill's, in the array's AZ)
    instance = launched(ec2.run_instances(**params))
    # Then EC2 launches it with the drill's profile
    described = aws("ec2").describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]
    assert described["IamInstanceProfile"]["Arn"] == drill_profile
    # and refuses, as AWS does, a launch without the drill's tags, with the controllers' profile
    # (the request's, or the template's when the request names none), or not from a template
    refusals = {
        case: _refusal(lambda changed=changed: ec2.run_instances(**_changed(params, changed)))
        for case, changed in {
            "untagged": {"TagSpecifications": None},
            "controllers' profile": {"IamInstanceProfile": {"Arn": controllers_profile}},
            "template's profile": {"IamInstanceProfile": None},
            "no template": {"LaunchTemplate": None, "ImageId": AMI},
        }.items()
    }
    assert {code for code, _ in refusals.values()} == {"UnauthorizedOperation"}
    assert f"ec2:RunInstances on resource: {REGION_ARN}:instance/*" in refusals["untagged"][1]
    for case in ("controllers' profile", "template's profile"):
        assert f"iam:PassRole on resource: {controllers_role} " in refusals[case][1]
    assert "ec2:RunInstances" in refusals["no template"][1]
    # and the drill role terminates its instance (it carries the drill's tags)
    ec2.terminate_instances(InstanceIds=[instance])


def _changed(params: dict[str, Any], changed: dict[str, Any]) -> dict[str, Any]:
    """``params`` with ``changed`` laid over them (None: left out)."""
    return {k: v for k, v in {**params, **changed}.items() if v is not None}


def test_run_instances_passes_the_role_of_its_instance_profile_or_its_templates(
    role_session, instance_profile, launch_template, launched
):
    # Given a role that may launch anything but pass only the roles under /vsa-drill/ to EC2
    ours, ours_role = instance_profile("/vsa-drill/")
    other, other_role = instance_profile("/")
    ec2 = role_session(
        {"Effect": "Allow", "Action": "ec2:RunInstances", "Resource": "*"},
        {
            "Effect": "Allow",
            "Action": "iam:PassRole",
            "Resource": f"arn:aws:iam::{ACCOUNT}:role/vsa-drill/*",
            "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        },
    )("ec2")
    with_ours = {
        "LaunchTemplate": {"LaunchTemplateId": launch_template({"IamInstanceProfile": {"Arn": ours}})}
    }
    with_other = {
        "LaunchTemplate": {
            "LaunchTemplateId": launch_template({"IamInstanceProfile": {"Name": other.split("/")[-1]}})
        }
    }
    image = {"ImageId": AMI, **LAUNCH}
    # Then it launches with its profile, by ARN (path and all) or by name, from the request or the
    # template, the request's over the template's
    for allowed in (
        {**image, "IamInstanceProfile": {"Arn": ours}},
        {**image, "IamInstanceProfile": {"Name": ours.split("/")[-1]}},
        {**image, **with_ours},
        {**image, **with_other, "IamInstanceProfile": {"Arn": ours}},
    ):
        launched(ec2.run_instances(**allowed))
    # and is refused with another role's, naming that role
    for refused in (
        {**image, "IamInstanceProfile": {"Arn": other}},
        {**image, **with_other},
        {**image, **with_ours, "IamInstanceProfile": {"Name": other.split("/")[-1]}},
    ):
        code, message = _refusal(lambda refused=refused: ec2.run_instances(**refused))
        assert code == "UnauthorizedOperation"
        assert f"iam:PassRole on resource: {other_role} " in message
    assert ours_role.startswith(f"arn:aws:iam::{ACCOUNT}:role/vsa-drill/")


def test_is_launch_template_resource_keeps_a_launch_to_its_templates_resources(
    role_session, aws, launch_template, launched
):
    # Given AWS's example policy: launch only from that launch template, overriding none of its
    # resources, and tag on create (needed for the tags the template gives the instance)
    group = aws("ec2").create_security_group(GroupName=f"iamtest-{uuid.uuid4().hex[:8]}", Description="t")
    template = launch_template(
        {
            "ImageId": AMI,
            "SecurityGroupIds": [group["GroupId"]],
            "TagSpecifications": [{"ResourceType": "instance", "Tags": [{"Key": "team", "Value": "a"}]}],
        }
    )
    run = {
        "Effect": "Allow",
        "Action": "ec2:RunInstances",
        "Resource": "*",
        "Condition": {
            "ArnLike": {"ec2:LaunchTemplate": f"{REGION_ARN}:launch-template/{template}"},
            "Bool": {"ec2:IsLaunchTemplateResource": "true"},
        },
    }
    tag = {
        "Effect": "Allow",
        "Action": "ec2:CreateTags",
        "Resource": f"{REGION_ARN}:instance/*",
        "Condition": {"StringEquals": {"ec2:CreateAction": "RunInstances"}},
    }
    ec2 = role_session(run, tag)("ec2")
    default_group = aws("ec2").describe_security_groups(GroupNames=["default"])["SecurityGroups"][0][
        "GroupId"
    ]
    subnet = _default_subnet(aws)
    from_template = {"LaunchTemplate": {"LaunchTemplateId": template}, **LAUNCH}
    try:
        # Then a launch from the template alone is allowed: its image and group, the default
        # subnet, the new instance, volume and interface are all the template's
        launched(ec2.run_instances(**from_template))
        # and one that supplies a resource itself is refused, naming it (the template's own image too)
        for override, resource in (
            ({"ImageId": AMI}, f"arn:aws:ec2:us-east-1::image/{AMI}"),
            ({"SecurityGroupIds": [default_group]}, f"{REGION_ARN}:security-group/{default_group}"),
            ({"SubnetId": subnet}, f"{REGION_ARN}:subnet/{subnet}"),
        ):
            code, message = _refusal(lambda o=override: ec2.run_instances(**from_template, **o))
            assert code == "UnauthorizedOperation"
            assert f"on resource: {resource} " in message
        # as is a launch from no template, and one whose template tags without ec2:CreateTags
        assert _refusal(lambda: ec2.run_instances(ImageId=AMI, **LAUNCH))[0] == "UnauthorizedOperation"
        untagging = role_session(run)("ec2")
        assert "ec2:CreateTags" in _refusal(lambda: untagging.run_instances(**from_template))[1]
    finally:
        aws("ec2").delete_security_group(GroupId=group["GroupId"])


def test_a_launch_templates_tags_are_the_launchs_with_the_requests_over_them(
    role_session, launch_template, launched
):
    # Given a role that launches only instances created with owner=me, and templates that tag
    # their instances owner=me and owner=you
    ec2 = role_session(
        {"Effect": "Allow", "Action": "ec2:RunInstances", "NotResource": "arn:aws:ec2:*:*:instance/*"},
        {
            "Effect": "Allow",
            "Action": "ec2:RunInstances",
            "Resource": "arn:aws:ec2:*:*:instance/*",
            "Condition": {"StringEquals": {"aws:RequestTag/owner": "me"}},
        },
        {
            "Effect": "Allow",
            "Action": "ec2:CreateTags",
            "Resource": "*",
            "Condition": {"StringEquals": {"ec2:CreateAction": "RunInstances"}},
        },
    )("ec2")

    def template(owner: str) -> dict[str, Any]:
        tags = [{"ResourceType": "instance", "Tags": [{"Key": "owner", "Value": owner}]}]
        return {
            "LaunchTemplate": {
                "LaunchTemplateId": launch_template({"ImageId": AMI, "TagSpecifications": tags})
            }
        }

    def request(owner: str) -> dict[str, Any]:
        return {
            "TagSpecifications": [{"ResourceType": "instance", "Tags": [{"Key": "owner", "Value": owner}]}]
        }

    mine, theirs = template("me"), template("you")
    # Then the template's tags are the launch's when the request gives none, and the request's
    # value wins for a key in both
    launched(ec2.run_instances(**mine, **LAUNCH))
    launched(ec2.run_instances(**theirs, **request("me"), **LAUNCH))
    for refused in ({**theirs}, {**mine, **request("you")}):
        code, message = _refusal(lambda refused=refused: ec2.run_instances(**refused, **LAUNCH))
        assert code == "UnauthorizedOperation"
        assert f"ec2:RunInstances on resource: {REGION_ARN}:instance/*" in message


def test_send_command_on_an_instance_is_conditioned_on_its_tags_as_ssm_resource_tag(
    role_session, aws, ec2_world, launched
):
    # Given TaskDrillRole's SendCommand statements as template.yaml declares them (the document;
    # an instance where ssm:resourceTag/vsa:drill exists), a drill instance and one of the array's
    statements = [s for s in template_statements("TaskDrillRole") if "ssm:SendCommand" in s["Action"]]
    ssm = role_session(*statements)("ssm")
    drill = launched(
        aws("ec2").run_instances(
            ImageId=AMI,
            Placement={"AvailabilityZone": ZONE},
            TagSpecifications=[{"ResourceType": "instance", "Tags": DRILL_TAGS}],
            **LAUNCH,
        )
    )
    params = {"DocumentName": "AWS-RunShellScript", "Parameters": {"commands": ["true"]}}
    # Then Run Command on the array's instance is refused, naming it
    code, message = _refusal(lambda: ssm.send_command(InstanceIds=[ec2_world["instance"]], **params))
    assert code == "AccessDeniedException"
    assert f"instance/{ec2_world['instance']} " in message
    # and on the drill instance it is not (the local cloud may refuse a node it does not manage)
    refusal = ""
    try:
        ssm.send_command(InstanceIds=[drill], **params)
    except ClientError as exc:
        refusal = _code(exc)
    assert refusal not in ("AccessDeniedException", "AccessDenied")


def test_the_drill_role_attaches_terminates_and_deletes_only_what_carries_the_drill_tag(
    role_session, aws, ec2_world, launched
):
    # Given a drill instance and two drill volumes (the drill's tags), beside the array's tagged
    # instance and the operator's untagged volume
    plain = aws("ec2")
    instance = launched(
        plain.run_instances(
            ImageId=AMI,
            Placement={"AvailabilityZone": ZONE},
            TagSpecifications=[{"ResourceType": "instance", "Tags": DRILL_TAGS}],
            **LAUNCH,
        )
    )
    volumes = [
        plain.create_volume(
            AvailabilityZone=ZONE, Size=1, TagSpecifications=[{"ResourceType": "volume", "Tags": DRILL_TAGS}]
        )["VolumeId"]
        for _ in range(2)
    ]
    ec2 = role_session(*template_statements("TaskDrillRole"))("ec2")
    try:
        # Then the drill role attaches a drill volume to the drill instance and deletes a drill volume
        ec2.attach_volume(VolumeId=volumes[0], InstanceId=instance, Device="/dev/sdf")
        ec2.delete_volume(VolumeId=volumes[1])
        # but nothing that lacks the drill's tag, instance or volume
        for refused in (
            lambda: ec2.attach_volume(VolumeId=ec2_world["operator"], InstanceId=instance, Device="/dev/sdg"),
            lambda: ec2.attach_volume(
                VolumeId=volumes[0], InstanceId=ec2_world["instance"], Device="/dev/sdg"
            ),
            lambda: ec2.delete_volume(VolumeId=ec2_world["operator"]),
            lambda: ec2.terminate_instances(InstanceIds=[ec2_world["instance"]]),
        ):
            assert _refusal(refused)[0] == "UnauthorizedOperation"
        # and it terminates the drill instance
        ec2.terminate_instances(InstanceIds=[instance])
    finally:
        _delete_volumes(plain, volumes)


def _delete_volumes(ec2: Any, volumes: list[str]) -> None:
    """Detach (forced) and delete those of the volumes still there."""
    left = ec2.describe_volumes(Filters=[{"Name": "volume-id", "Values": volumes}])["Volumes"]
    for volume in [v["VolumeId"] for v in left]:
        for attachment in ec2.describe_volumes(VolumeIds=[volume])["Volumes"][0]["Attachments"]:
            ec2.detach_volume(VolumeId=volume, InstanceId=attachment["InstanceId"], Force=True)
        for _ in range(50):
            try:
                ec2.delete_volume(VolumeId=volume)
                break
            except ClientError as exc:
                if _code(exc) != "VolumeInUse":
                    raise
                time.sleep(0.1)
