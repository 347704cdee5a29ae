"""No path from an API caller to more power (docs/security.md), tried against the deployed stack with
the local cloud's IAM enforcement on: each escalation a security review found is refused, and
the refusal names the statement (or the rule) that refused it.

- A caller-chosen administrator instance profile: the API refuses it before anything is made,
  and the API's role could not pass that role even if the API asked (PassRole names only the
  stack's NodeRolePath).
- Tag-then-act: no role of the deployment can add the product's tag to an operator's volume
  (an explicit Deny, whatever an Allow says).
- Deleting a volume the array does not own: a volume that merely carries ``vsa:array`` (an
  operator's, in the array) is refused to every role that may delete volumes.
- A forged backup event and another deployment's array: tests/integration/test_backups.py and
  tests/unit/test_controllers.py.

Roles are assumed with the test's credentials (the local cloud does not check trust policies), so
each call is authorized exactly as the deployed role's own calls are.
"""

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.integration.arrays_world import Api, World, control, group_of, no_trace, spec_for
from tests.integration.conftest import STACK

ADMIN_POLICY = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
    ],
}


@pytest.fixture
def admin_profile() -> Iterator[str]:
    """An administrator's instance profile: a role at the root path that may do anything."""
    iam, name = boto3.client("iam"), f"admin-{uuid.uuid4().hex[:8]}"
    iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(TRUST))
    iam.put_role_policy(RoleName=name, PolicyName="everything", PolicyDocument=json.dumps(ADMIN_POLICY))
    iam.create_instance_profile(InstanceProfileName=name)
    iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    yield name
    iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=name)
    iam.delete_instance_profile(InstanceProfileName=name)
    iam.delete_role_policy(RoleName=name, PolicyName="everything")
    iam.delete_role(RoleName=name)


def as_role(logical_id: str, service: str) -> Any:
    """A client of ``service`` signed with a session of the deployed role ``logical_id``."""
    role = boto3.client("cloudformation").describe_stack_resource(
        StackName=STACK, LogicalResourceId=logical_id
    )
    name = role["StackResourceDetail"]["PhysicalResourceId"]
    arn = boto3.client("iam").get_role(RoleName=name)["Role"]["Arn"]
    credentials = boto3.client("sts").assume_role(RoleArn=arn, RoleSessionName="escalation")["Credentials"]
    return boto3.client(
        service,
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
    )


def refused_by(endpoint: str, action: str) -> str:
    """What refused the newest denied ``action`` (the local cloud's decision log)."""
    denied = control(endpoint, "iam", "decisions", denied_only=True)["decisions"]
    mine = [d for d in denied if d["action"] == action]
    assert mine, f"no refusal of {action} was recorded"
    return str(mine[-1]["decided_by"])


def test_a_caller_chosen_administrator_profile_is_refused_before_anything_is_made(
    api: Api, world: World, arrays: Callable[[], str], admin_profile: str
) -> None:
    # Given a spec whose controllers would launch under an administrator's instance profile
    array_id = arrays()
    spec = spec_for(array_id, world)
    spec["controllers"] = {**spec["controllers"], "instanceProfile": admin_profile}
    # When it is applied
    status, reply = api.call("PUT", f"/arrays/{array_id}", spec)
    # Then the API refuses it, naming the profile, its role and what the deployment allows
    assert status == 400, reply
    assert f"controllers.instanceProfile {admin_profile} carries role" in reply["message"]
    assert "NodeRolePath" in reply["message"]
    # And nothing was stored or created
    assert api.call("GET", f"/arrays/{array_id}")[0] == 404
    no_trace(array_id)


def test_the_api_role_cannot_pass_an_administrator_role_even_if_asked(
    local_env: dict[str, str], admin_profile: str
) -> None:
    # Given the API's own role, and a launch template it made (with the array's tag) that names
    # an administrator's instance profile
    ec2, autoscaling = as_role("ApiArraysRole", "ec2"), as_role("ApiArraysRole", "autoscaling")
    array_id = f"esc-{uuid.uuid4().hex[:8]}"
    template = ec2.create_launch_template(
        LaunchTemplateName=f"vsa-{array_id}-controller",
        LaunchTemplateData={
            "ImageId": "ami-0123456789abcdef0",
            "IamInstanceProfile": {"Name": admin_profile},
        },
        TagSpecifications=[
            {
                "ResourceType": "launch-template",
                "Tags": [{"Key": "vsa:array", "Value": array_id}, {"Key": "vsa:deployment", "Value": "vsa"}],
            }
        ],
    )["LaunchTemplate"]["LaunchTemplateId"]
    try:
        # When it creates a group from it, as an apply would
        with pytest.raises(ClientError) as refused:
            autoscaling.create_auto_scaling_group(
                AutoScalingGroupName=f"vsa-{array_id}-controllers",
                LaunchTemplate={"LaunchTemplateId": template, "Version": "$Latest"},
                MinSize=0,
                MaxSize=1,
                AvailabilityZones=["us-east-1a"],
                Tags=[
                    {"Key": "vsa:array", "Value": array_id, "PropagateAtLaunch": True},
                    {"Key": "vsa:deployment", "Value": "vsa", "PropagateAtLaunch": True},
                ],
            )
        # Then passing the administrator's role is refused: PassRole names only node roles
        assert refused.value.response["Error"]["Code"] in ("AccessDenied", "AccessDeniedException")
        assert "iam:PassRole" in str(refused.value)
        assert "no identity-based policy allows" in refused_by(local_env["AWS_ENDPOINT_URL"], "iam:PassRole")
        assert group_of(array_id) is None
    finally:
        boto3.client("ec2").delete_launch_template(LaunchTemplateId=template)


@pytest.mark.parametrize("role", ["ApiArraysRole", "TaskReconcileRole", "TaskBackupRole", "ApiBackupsRole"])
def test_no_role_can_tag_an_operators_volume_into_an_array(
    local_env: dict[str, str], world: World, role: str
) -> None:
    # Given an operator's volume, and a role of the deployment that tags what it creates
    volume = world.volume()
    ec2 = as_role(role, "ec2")
    # When the role adds the product's tag to it (to act on it later through a vsa:array grant)
    with pytest.raises(ClientError) as refused:
        ec2.create_tags(Resources=[volume], Tags=[{"Key": "vsa:array", "Value": "taken"}])
    # Then the explicit Deny refuses it, and the volume carries no tag of ours
    assert refused.value.response["Error"]["Code"] == "UnauthorizedOperation"
    decided = refused_by(local_env["AWS_ENDPOINT_URL"], "ec2:CreateTags")
    assert "explicit deny" in decided
    assert "NoProductTagOnExistingResources" in decided
    tags = boto3.client("ec2").describe_volumes(VolumeIds=[volume])["Volumes"][0].get("Tags", [])
    assert not [t for t in tags if t["Key"].startswith("vsa:")]


@pytest.mark.parametrize("role", ["ApiArraysRole", "TaskReconcileRole", "ApiBackupsRole"])
def test_no_role_deletes_a_volume_the_product_did_not_create(
    local_env: dict[str, str], world: World, role: str
) -> None:
    # Given an operator's volume in an array (it carries vsa:array, not vsa:owned) and a role
    # of the deployment that may delete volumes it created
    volume = world.volume()
    boto3.client("ec2").create_tags(Resources=[volume], Tags=[{"Key": "vsa:array", "Value": "data"}])
    # When the role deletes it
    with pytest.raises(ClientError) as refused:
        as_role(role, "ec2").delete_volume(VolumeId=volume)
    # Then it is refused, and the volume is still there
    assert refused.value.response["Error"]["Code"] == "UnauthorizedOperation"
    assert "no identity-based policy allows" in refused_by(local_env["AWS_ENDPOINT_URL"], "ec2:DeleteVolume")
    assert boto3.client("ec2").describe_volumes(VolumeIds=[volume])["Volumes"][0]["State"] == "available"


@pytest.mark.parametrize("role", ["ApiArraysRole", "TaskReconcileRole", "ApiBackupsRole"])
def test_no_role_deletes_another_deployments_owned_volume(
    local_env: dict[str, str], world: World, role: str
) -> None:
    # Given a volume another deployment ("stage") created for its array of the same kind: owned,
    # tagged with the array, but with that deployment's tag
    volume = world.volume()
    boto3.client("ec2").create_tags(
        Resources=[volume],
        Tags=[
            {"Key": "vsa:array", "Value": "data"},
            {"Key": "vsa:owned", "Value": "true"},
            {"Key": "vsa:deployment", "Value": "stage"},
        ],
    )
    # When a role of this deployment ("vsa") deletes it
    with pytest.raises(ClientError) as refused:
        as_role(role, "ec2").delete_volume(VolumeId=volume)
    # Then it is refused: every grant on an array's resources names this deployment's tag
    assert refused.value.response["Error"]["Code"] == "UnauthorizedOperation"
    assert "no identity-based policy allows" in refused_by(local_env["AWS_ENDPOINT_URL"], "ec2:DeleteVolume")
    assert boto3.client("ec2").describe_volumes(VolumeIds=[volume])["Volumes"][0]["State"] == "available"
