"""The instance profile an operator gives the array's nodes (controllers and hosts): a role EC2
may assume, created under the stack's NodeRolePath, with the stack's NodeKeysPolicy attached
(each node reads its own DH-HMAC-CHAP keys from Secrets Manager, nothing else; docs/dataplane.md,
*Authentication on the data plane*). On AWS the role also needs AmazonSSMManagedInstanceCore
for the SSM agent; the local cloud's nodes need no agent policy.

Made once per local cloud (idempotent: an entity that exists is kept), by the integration tests
and the demo alike."""

import contextlib
import json
from typing import Any

NAME = "vsa-nodes"
ROLE_PATH = "/vsa-node/"
"""The stack's NodeRolePath default: the only path whose roles the control plane may pass."""
TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
    ],
}


def ensure_node_profile(iam: Any, node_keys_policy_arn: str, name: str = NAME) -> str:
    """The instance profile ``name`` with its role and the node policy; answers its name."""
    with contextlib.suppress(iam.exceptions.EntityAlreadyExistsException):
        iam.create_role(RoleName=name, Path=ROLE_PATH, AssumeRolePolicyDocument=json.dumps(TRUST))
    iam.attach_role_policy(RoleName=name, PolicyArn=node_keys_policy_arn)
    with contextlib.suppress(iam.exceptions.EntityAlreadyExistsException):
        iam.create_instance_profile(InstanceProfileName=name)
    if not _holds_role(iam, name):
        try:
            iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
        except iam.exceptions.LimitExceededException:
            # an instance profile holds one role: another test worker, making it side by side,
            # added it between the look and the add (seen with three workers on a fresh cloud)
            if not _holds_role(iam, name):
                raise
    return name


def _holds_role(iam: Any, name: str) -> bool:
    roles = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Roles"]
    return any(r["RoleName"] == name for r in roles)
