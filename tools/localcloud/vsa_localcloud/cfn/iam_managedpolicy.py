"""AWS::IAM::ManagedPolicy with updates. LocalStack's provider creates and deletes, but its
``update`` raises NotImplementedError, which the engine takes for success: a stack update that
changes a managed policy's document reports UPDATE_COMPLETE and leaves the policy at version 1
(so a new action in the control plane's keys policy stays denied after a deploy).

On AWS, ``PolicyDocument``, ``Roles``, ``Users`` and ``Groups`` update with no interruption
(CloudFormation User Guide, AWS::IAM::ManagedPolicy): a new document is a new policy version,
made the default (IAM keeps at most 5 versions of a managed policy, so the oldest non-default
one goes first, as CreatePolicyVersion requires: "you must delete an existing version using
DeletePolicyVersion before you create a new version"); attachments follow the lists.
``ManagedPolicyName``, ``Path`` and ``Description`` are create-only: a change replaces the
policy, which the engine does through create and delete. Pinned by
tests/localcloud/test_cfn_resources.py::test_a_stack_update_versions_a_managed_policy_and_moves_its_attachments."""

from __future__ import annotations

import json
from typing import Any

import localstack.services.cloudformation.provider_utils as util
from localstack.services.cloudformation.resource_provider import ProgressEvent, ResourceRequest

from vsa_localcloud.cfn._util import Model, success

MAX_VERSIONS = 5
"""IAM quota: versions of one managed policy."""


def _document(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(util.remove_none_values(value))


def update(request: ResourceRequest[Model]) -> ProgressEvent[Model]:
    """The update LocalStack's IAMManagedPolicyProvider lacks (patched in by
    ``vsa_localcloud.patches``)."""
    iam = request.aws_client_factory.iam
    before = request.previous_state or {}
    model = dict(request.desired_state)
    arn = model["Id"] = before["Id"]
    model["ManagedPolicyName"] = before.get("ManagedPolicyName") or model.get("ManagedPolicyName")
    if _document(model["PolicyDocument"]) != _document(before.get("PolicyDocument")):
        versions = iam.list_policy_versions(PolicyArn=arn)["Versions"]
        if len(versions) >= MAX_VERSIONS:
            oldest = min((v for v in versions if not v["IsDefaultVersion"]), key=lambda v: v["CreateDate"])
            iam.delete_policy_version(PolicyArn=arn, VersionId=oldest["VersionId"])
        iam.create_policy_version(
            PolicyArn=arn, PolicyDocument=_document(model["PolicyDocument"]), SetAsDefault=True
        )
    for key, attach, detach, name in (
        ("Roles", iam.attach_role_policy, iam.detach_role_policy, "RoleName"),
        ("Users", iam.attach_user_policy, iam.detach_user_policy, "UserName"),
        ("Groups", iam.attach_group_policy, iam.detach_group_policy, "GroupName"),
    ):
        old, new = set(before.get(key) or []), set(model.get(key) or [])
        for gone in sorted(old - new):
            detach(**{name: gone}, PolicyArn=arn)
        for added in sorted(new - old):
            attach(**{name: added}, PolicyArn=arn)
    return success(model, request)
