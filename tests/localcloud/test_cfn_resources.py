"""CloudFormation creates, updates and deletes real resources of the types the product's
templates use (stock LocalStack reports them CREATE_COMPLETE "as a fallback", creates nothing
and answers ``Ref`` with ``unknown``), and a type nobody implements fails the stack."""

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, WaiterError

TEMPLATES = Path(__file__).parent / "templates"
FAST = {"Delay": 1, "MaxAttempts": 120}


def outputs(cfn: Any, stack: str) -> dict[str, str]:
    described = cfn.describe_stacks(StackName=stack)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}


def failure_reasons(cfn: Any, stack: str) -> str:
    described = cfn.describe_stacks(StackName=stack)["Stacks"][0]
    events = cfn.describe_stack_events(StackName=stack)["StackEvents"]
    reasons = [e.get("ResourceStatusReason", "") for e in events if "FAILED" in e["ResourceStatus"]]
    return " | ".join([described["StackStatus"], described.get("StackStatusReason", ""), *reasons])


@pytest.fixture(scope="module")
def stack(aws: Callable[[str], Any]) -> Iterator[dict[str, Any]]:
    """The test template deployed once; yields its name and outputs; deleted at the end."""
    cfn = aws("cloudformation")
    name = f"cfn-resources-{uuid.uuid4().hex[:8]}"
    cfn.create_stack(StackName=name, TemplateBody=(TEMPLATES / "cfn_resources.yaml").read_text())
    try:
        cfn.get_waiter("stack_create_complete").wait(StackName=name, WaiterConfig=FAST)
    except WaiterError:
        pytest.fail(f"stack creation failed: {failure_reasons(cfn, name)}")
    state: dict[str, Any] = {"name": name, "outputs": outputs(cfn, name)}
    yield state
    cfn.delete_stack(StackName=name)
    cfn.get_waiter("stack_delete_complete").wait(StackName=name, WaiterConfig=FAST)


def test_ref_and_getatt_are_real_identifiers(stack: dict[str, Any]) -> None:
    out = stack["outputs"]
    assert "unknown" not in out.values(), out
    assert out["VolumeRef"] == out["VolumeId"]
    assert out["VolumeId"].startswith("vol-")
    assert out["LaunchTemplateRef"] == out["LaunchTemplateId"]
    assert out["LaunchTemplateId"].startswith("lt-")
    assert (out["LatestVersionNumber"], out["DefaultVersionNumber"]) == ("1", "1")
    assert out["DocumentName"].startswith(f"{stack['name']}-Document-")
    assert out["GroupName"].startswith(f"{stack['name']}-Group-")
    assert out["HookName"].startswith(f"{stack['name']}-TerminatingHook-")


def test_ssm_document_exists_with_its_content(aws: Callable[[str], Any], stack: dict[str, Any]) -> None:
    ssm, name = aws("ssm"), stack["outputs"]["DocumentName"]
    described = ssm.describe_document(Name=name)["Document"]
    assert (described["DocumentType"], described["DocumentFormat"]) == ("Command", "JSON")
    content = json.loads(ssm.get_document(Name=name)["Content"])
    assert content["mainSteps"][0]["inputs"]["runCommand"] == ["echo hello"]
    tags = ssm.list_tags_for_resource(ResourceType="Document", ResourceId=name)["TagList"]
    assert {"Key": "purpose", "Value": "cfn-test"} in tags
    yaml_document = stack["outputs"]["YamlDocumentName"]  # Content given as a YAML string
    assert ssm.describe_document(Name=yaml_document)["Document"]["DocumentFormat"] == "YAML"
    assert "echo hello" in ssm.get_document(Name=yaml_document, DocumentFormat="YAML")["Content"]


def test_volume_exists_as_multi_attach_io2(aws: Callable[[str], Any], stack: dict[str, Any]) -> None:
    volume = aws("ec2").describe_volumes(VolumeIds=[stack["outputs"]["VolumeId"]])["Volumes"][0]
    assert volume["VolumeType"] == "io2"
    assert volume["Iops"] == 1000
    assert volume["Size"] == 8
    assert volume["MultiAttachEnabled"] is True
    assert volume["AvailabilityZone"] == "us-east-1a"
    assert {"Key": "Name", "Value": "cfn-test-volume"} in volume["Tags"]


def test_group_uses_the_launch_template_and_has_both_hooks(
    aws: Callable[[str], Any], stack: dict[str, Any]
) -> None:
    out, autoscaling = stack["outputs"], aws("autoscaling")
    group = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[out["GroupName"]])[
        "AutoScalingGroups"
    ][0]
    assert group["LaunchTemplate"]["LaunchTemplateId"] == out["LaunchTemplateId"]
    assert group["LaunchTemplate"]["Version"] == "1"
    assert (group["MinSize"], group["MaxSize"], group["DesiredCapacity"]) == (0, 2, 1)
    assert group["NewInstancesProtectedFromScaleIn"] is True
    assert {"Key": "purpose", "Value": "cfn-test", "PropagateAtLaunch": True}.items() <= group["Tags"][
        0
    ].items()
    hooks = {
        h["LifecycleHookName"]: h
        for h in autoscaling.describe_lifecycle_hooks(AutoScalingGroupName=out["GroupName"])["LifecycleHooks"]
    }
    assert hooks["launching"]["LifecycleTransition"] == "autoscaling:EC2_INSTANCE_LAUNCHING"
    terminating = hooks[out["HookName"]]
    assert terminating["LifecycleTransition"] == "autoscaling:EC2_INSTANCE_TERMINATING"
    assert (terminating["HeartbeatTimeout"], terminating["DefaultResult"]) == (120, "ABANDON")
    assert terminating["NotificationMetadata"] == '{"role": "vsa"}'
    template = aws("ec2").describe_launch_templates(LaunchTemplateIds=[out["LaunchTemplateId"]])[
        "LaunchTemplates"
    ][0]
    assert {"Key": "purpose", "Value": "cfn-test"} in template.get("Tags", [])


def test_update_versions_the_template_and_resizes_the_group(
    aws: Callable[[str], Any], stack: dict[str, Any]
) -> None:
    cfn, ec2, ssm = aws("cloudformation"), aws("ec2"), aws("ssm")
    cfn.update_stack(
        StackName=stack["name"],
        TemplateBody=(TEMPLATES / "cfn_resources.yaml").read_text(),
        Parameters=[
            {"ParameterKey": "MaxSize", "ParameterValue": "3"},
            {"ParameterKey": "InstanceType", "ParameterValue": "t3.small"},
            {"ParameterKey": "Greeting", "ParameterValue": "bonjour"},
        ],
    )
    try:
        cfn.get_waiter("stack_update_complete").wait(StackName=stack["name"], WaiterConfig=FAST)
    except WaiterError:
        pytest.fail(f"stack update failed: {failure_reasons(cfn, stack['name'])}")
    out = outputs(cfn, stack["name"])
    assert out["LaunchTemplateId"] == stack["outputs"]["LaunchTemplateId"]  # updated in place
    assert (out["LatestVersionNumber"], out["DefaultVersionNumber"]) == ("2", "2")
    version = ec2.describe_launch_template_versions(LaunchTemplateId=out["LaunchTemplateId"], Versions=["2"])
    assert version["LaunchTemplateVersions"][0]["LaunchTemplateData"]["InstanceType"] == "t3.small"
    group = aws("autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[out["GroupName"]])
    group = group["AutoScalingGroups"][0]
    assert group["MaxSize"] == 3
    assert group["LaunchTemplate"]["Version"] == "2"
    document = ssm.describe_document(Name=out["DocumentName"])["Document"]  # UpdateMethod NewVersion
    assert (document["DocumentVersion"], document["DefaultVersion"]) == ("2", "2")
    content = json.loads(ssm.get_document(Name=out["DocumentName"])["Content"])
    assert content["mainSteps"][0]["inputs"]["runCommand"] == ["echo bonjour"]
    replaced = ssm.describe_document(Name=out["YamlDocumentName"])["Document"]  # UpdateMethod Replace
    assert (replaced["DocumentVersion"], replaced["DefaultVersion"]) == ("1", "1")
    assert "echo bonjour" in ssm.get_document(Name=out["YamlDocumentName"], DocumentFormat="YAML")["Content"]


def test_delete_removes_every_resource(aws: Callable[[str], Any], stack: dict[str, Any]) -> None:
    cfn, ec2, out = aws("cloudformation"), aws("ec2"), stack["outputs"]
    assert ec2.describe_volumes(VolumeIds=[out["VolumeId"]])["Volumes"]  # there before the delete
    cfn.delete_stack(StackName=stack["name"])
    cfn.get_waiter("stack_delete_complete").wait(StackName=stack["name"], WaiterConfig=FAST)
    groups = aws("autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[out["GroupName"]])
    assert groups["AutoScalingGroups"] == []
    templates = ec2.describe_launch_templates()["LaunchTemplates"]
    assert out["LaunchTemplateId"] not in [t["LaunchTemplateId"] for t in templates]
    for call in (
        lambda: ec2.describe_volumes(VolumeIds=[out["VolumeId"]]),
        lambda: aws("ssm").describe_document(Name=out["DocumentName"]),
        lambda: aws("ssm").describe_document(Name=out["YamlDocumentName"]),
    ):
        with pytest.raises(ClientError):
            call()


def test_unsupported_resource_type_fails_the_stack(aws: Callable[[str], Any]) -> None:
    cfn = aws("cloudformation")
    name = f"cfn-unsupported-{uuid.uuid4().hex[:8]}"
    try:
        cfn.create_stack(StackName=name, TemplateBody=(TEMPLATES / "unsupported.yaml").read_text())
        with pytest.raises(WaiterError):
            cfn.get_waiter("stack_create_complete").wait(StackName=name, WaiterConfig=FAST)
        reasons = failure_reasons(cfn, name)
        assert "FAILED" in reasons.split(" | ")[0]
        assert "AWS::SSM::ResourceDataSync" in reasons
        assert "not" in reasons
        assert "supported" in reasons
    finally:
        cfn.delete_stack(StackName=name)


def _role_template(policies: dict[str, list[str]]) -> str:
    return json.dumps(
        {
            "Resources": {
                "Role": {
                    "Type": "AWS::IAM::Role",
                    "Properties": {
                        "AssumeRolePolicyDocument": {
                            "Version": "2012-10-17",
                            "Statement": [
                                {
                                    "Effect": "Allow",
                                    "Principal": {"Service": "lambda.amazonaws.com"},
                                    "Action": "sts:AssumeRole",
                                }
                            ],
                        },
                        "Policies": [
                            {
                                "PolicyName": name,
                                "PolicyDocument": {
                                    "Version": "2012-10-17",
                                    "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}],
                                },
                            }
                            for name, actions in policies.items()
                        ],
                    },
                }
            },
            "Outputs": {"RoleName": {"Value": {"Ref": "Role"}}},
        }
    )


def test_a_stack_update_changes_a_role_s_inline_policies(aws: Callable[[str], Any]) -> None:
    """AWS::IAM::Role ``Policies``: "Update requires: No interruption" (CloudFormation User
    Guide, AWS::IAM::Role): an update changes the role's inline policies in place."""
    cfn, iam = aws("cloudformation"), aws("iam")
    name = f"cfn-role-{uuid.uuid4().hex[:8]}"
    # Given a role with two inline policies
    cfn.create_stack(
        StackName=name,
        TemplateBody=_role_template({"steps": ["ec2:DescribeVolumes"], "old": ["ec2:DescribeInstances"]}),
    )
    cfn.get_waiter("stack_create_complete").wait(StackName=name, WaiterConfig=FAST)
    role = outputs(cfn, name)["RoleName"]
    try:
        # When the stack is updated: one policy gains an action, the other is no longer declared
        cfn.update_stack(
            StackName=name,
            TemplateBody=_role_template(
                {"steps": ["ec2:DescribeVolumes", "ssm:DescribeInstanceInformation"]}
            ),
        )
        cfn.get_waiter("stack_update_complete").wait(StackName=name, WaiterConfig=FAST)
        # Then the role is the same one, with the new statement and without the dropped policy
        assert outputs(cfn, name)["RoleName"] == role
        assert iam.list_role_policies(RoleName=role)["PolicyNames"] == ["steps"]
        document = iam.get_role_policy(RoleName=role, PolicyName="steps")["PolicyDocument"]
        if isinstance(document, str):
            document = json.loads(document)
        assert document["Statement"][0]["Action"] == [
            "ec2:DescribeVolumes",
            "ssm:DescribeInstanceInformation",
        ]
    finally:
        cfn.delete_stack(StackName=name)
        cfn.get_waiter("stack_delete_complete").wait(StackName=name, WaiterConfig=FAST)


def _dashboard_template(body: str) -> str:
    return json.dumps(
        {
            "Resources": {
                "Board": {"Type": "AWS::CloudWatch::Dashboard", "Properties": {"DashboardBody": body}}
            },
            "Outputs": {"Name": {"Value": {"Ref": "Board"}}},
        }
    )


def test_a_dashboard_is_created_updated_and_deleted_and_a_bad_body_fails(aws: Callable[[str], Any]) -> None:
    # AWS::CloudWatch::Dashboard: Ref is the name; PutDashboard refuses a body that is not a JSON
    # object with widgets (CloudWatch API reference, PutDashboard / Dashboard body structure)
    cfn, cloudwatch = aws("cloudformation"), aws("cloudwatch")
    name = f"cfn-dashboard-{uuid.uuid4().hex[:8]}"
    first = json.dumps(
        {
            "widgets": [
                {"type": "text", "x": 0, "y": 0, "width": 6, "height": 2, "properties": {"markdown": "a"}}
            ]
        }
    )
    second = json.dumps({"widgets": []})
    try:
        cfn.create_stack(StackName=name, TemplateBody=_dashboard_template(first))
        cfn.get_waiter("stack_create_complete").wait(StackName=name, WaiterConfig=FAST)
        board = outputs(cfn, name)["Name"]
        assert board.startswith(name)
        assert json.loads(cloudwatch.get_dashboard(DashboardName=board)["DashboardBody"]) == json.loads(first)
        cfn.update_stack(StackName=name, TemplateBody=_dashboard_template(second))
        cfn.get_waiter("stack_update_complete").wait(StackName=name, WaiterConfig=FAST)
        assert json.loads(cloudwatch.get_dashboard(DashboardName=board)["DashboardBody"]) == {"widgets": []}
    finally:
        cfn.delete_stack(StackName=name)
        cfn.get_waiter("stack_delete_complete").wait(StackName=name, WaiterConfig=FAST)
    with pytest.raises(ClientError):
        cloudwatch.get_dashboard(DashboardName=board)
    bad = f"cfn-dashboard-bad-{uuid.uuid4().hex[:8]}"
    try:
        cfn.create_stack(StackName=bad, TemplateBody=_dashboard_template("{not json"))
        with pytest.raises(WaiterError):
            cfn.get_waiter("stack_create_complete").wait(StackName=bad, WaiterConfig=FAST)
        assert "DashboardBody is not valid JSON" in failure_reasons(cfn, bad)
    finally:
        cfn.delete_stack(StackName=bad)


def _managed_policy_template(actions: list[str], roles: list[str]) -> str:
    role = {
        "Type": "AWS::IAM::Role",
        "Properties": {
            "AssumeRolePolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "lambda.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        },
    }
    return json.dumps(
        {
            "Resources": {
                "First": role,
                "Second": role,
                "Policy": {
                    "Type": "AWS::IAM::ManagedPolicy",
                    "Properties": {
                        "PolicyDocument": {
                            "Version": "2012-10-17",
                            "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}],
                        },
                        "Roles": [{"Ref": r} for r in roles],
                    },
                },
            },
            "Outputs": {
                "PolicyArn": {"Value": {"Ref": "Policy"}},
                "First": {"Value": {"Ref": "First"}},
                "Second": {"Value": {"Ref": "Second"}},
            },
        }
    )


def test_a_stack_update_versions_a_managed_policy_and_moves_its_attachments(
    aws: Callable[[str], Any],
) -> None:
    """AWS::IAM::ManagedPolicy ``PolicyDocument``, ``Roles``: "Update requires: No interruption"
    (CloudFormation User Guide, AWS::IAM::ManagedPolicy): the same policy gets a new default
    version. LocalStack's provider raised NotImplementedError on update, which its engine
    reported as UPDATE_COMPLETE with the policy unchanged."""
    cfn, iam = aws("cloudformation"), aws("iam")
    name = f"cfn-policy-{uuid.uuid4().hex[:8]}"
    # Given a managed policy of one action attached to the first role
    cfn.create_stack(
        StackName=name, TemplateBody=_managed_policy_template(["ec2:DescribeVolumes"], ["First"])
    )
    cfn.get_waiter("stack_create_complete").wait(StackName=name, WaiterConfig=FAST)
    out = outputs(cfn, name)
    try:
        # When the stack is updated six times: the document gains an action each time, and the
        # policy moves from the first role to the second
        actions = ["ec2:DescribeVolumes"]
        for extra in [
            "ec2:DescribeInstances",
            "ssm:SendCommand",
            "sqs:GetQueueUrl",
            "s3:GetObject",
            "sns:Publish",
        ]:
            actions.append(extra)
            cfn.update_stack(StackName=name, TemplateBody=_managed_policy_template(actions, ["Second"]))
            cfn.get_waiter("stack_update_complete").wait(StackName=name, WaiterConfig=FAST)
        # Then it is the same policy, its default version holding every action (IAM keeps 5)
        assert outputs(cfn, name)["PolicyArn"] == out["PolicyArn"]
        policy = iam.get_policy(PolicyArn=out["PolicyArn"])["Policy"]
        version = iam.get_policy_version(PolicyArn=out["PolicyArn"], VersionId=policy["DefaultVersionId"])
        document = version["PolicyVersion"]["Document"]
        if isinstance(document, str):
            document = json.loads(document)
        assert document["Statement"][0]["Action"] == actions
        assert len(iam.list_policy_versions(PolicyArn=out["PolicyArn"])["Versions"]) == 5
        # and attached to the second role only
        attached = {
            role: [
                p["PolicyArn"]
                for p in iam.list_attached_role_policies(RoleName=out[role])["AttachedPolicies"]
            ]
            for role in ("First", "Second")
        }
        assert attached == {"First": [], "Second": [out["PolicyArn"]]}
    finally:
        cfn.delete_stack(StackName=name)
        cfn.get_waiter("stack_delete_complete").wait(StackName=name, WaiterConfig=FAST)
