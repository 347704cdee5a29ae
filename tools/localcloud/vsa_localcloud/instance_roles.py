"""EC2 instance roles: a managed node's scripts act with its instance profile's role, as the
programs on an AWS instance do, and the requests they sign say which instance they come from.

What AWS does:

* "IAM roles for Amazon EC2" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/iam-roles-for-amazon-ec2.html):
  an instance launched with an instance profile receives temporary credentials of the profile's
  role through its instance metadata, and the AWS CLI and SDKs on the instance use them. The
  role session is named after the instance (``arn:aws:sts::<account>:assumed-role/<role>/<instance
  id>``). An instance without an instance profile has no credentials: the CLI answers "Unable to
  locate credentials".
* "AWS global condition context keys" (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-keys.html):
  a request signed with an EC2 instance's role credentials carries ``ec2:SourceInstanceARN``
  (the ARN of the instance the credentials were delivered to), ``aws:EC2InstanceSourceVPC`` (its
  VPC) and ``aws:EC2InstanceSourcePrivateIPv4`` (its primary private IPv4 address). Global keys
  can be policy variables ("IAM policy elements: Variables and tags",
  https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_variables.html), so one
  policy lets every node read only the secrets tagged with its own instance ARN:
  ``"StringEquals": {"aws:ResourceTag/vsa:node": "${ec2:SourceInstanceARN}"}``.

What the local cloud does (LocalStack has no instance metadata and community LocalStack evaluates
no IAM policy):

* **Instance profiles on instances.** moto's EC2 looks instance profiles up in moto's own IAM,
  which LocalStack's IAM provider does not fill: RunInstances with ``IamInstanceProfile`` (and
  AssociateIamInstanceProfile) failed with ``NoSuchEntity`` for every profile. ``apply_patches``
  makes it look in LocalStack's IAM store. An instance's profile (``profile_of``) is its
  association, or, for an instance launched from a launch template (an Auto Scaling group's
  instances: moto does not associate the template's profile), the ``IamInstanceProfile`` of the
  template version it was launched from.
* **Credentials per Run Command invocation.** ``deliver`` assumes the profile's role through
  LocalStack's STS, session name = the instance id, and notes that the credentials were
  delivered to that instance. ``ssm_commands`` gives them to the invocation's scripts
  (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``); an instance without
  a profile (or whose profile has no role) gets none. ``iam_enforcement.identify`` adds
  ``source_context(access key)`` to the principal's request context: ``ec2:sourceinstancearn``,
  ``aws:ec2instancesourcevpc``, ``aws:ec2instancesourceprivateipv4``.
* **The node's AWS CLI.** At start ``write_node_cli`` writes ``<state>/node-bin/aws`` (``<state>``
  is the directory of the local cloud's venv: ``$VSA_STATE``, ``.localcloud`` of the checkout), a
  shell wrapper that runs ``vsa_localcloud.node_aws`` with the local cloud's Python, from any
  working directory. It is what a document's ``AwsCommand`` names on the local
  cloud (``tools/deploy-local.sh``: ``NodeAwsCommand``).
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localstack.runtime import hooks

LOG = logging.getLogger(__name__)

# EC2 rotates an instance's role credentials before they expire; a script here keeps the ones it
# was started with for its whole run, so they outlast any step (AssumeRole's longest session).
SESSION_SECONDS = 43_200
NODE_CLI = "aws"


@dataclass(frozen=True)
class Delivery:
    """Role credentials delivered to an instance: what requests signed with them carry."""

    instance_arn: str
    vpc_id: str
    private_ip: str
    expires: float  # epoch seconds

    def context(self) -> dict[str, list[str]]:
        keys = {
            "ec2:sourceinstancearn": self.instance_arn,
            "aws:ec2instancesourcevpc": self.vpc_id,
            "aws:ec2instancesourceprivateipv4": self.private_ip,
        }
        return {key: [value] for key, value in keys.items() if value}


_DELIVERED: dict[str, Delivery] = {}  # access key id -> to which instance
_LOCK = threading.Lock()


def source_context(access_key: str) -> dict[str, list[str]]:
    """The request-context keys of a request signed with ``access_key``: the instance's keys
    when those credentials were delivered to an instance, else none."""
    with _LOCK:
        delivery = _DELIVERED.get(access_key)
    return delivery.context() if delivery is not None else {}


# --- instance profiles -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Profile:
    """What moto's EC2 reads of an instance profile (IamInstanceProfileAssociation: Arn, Id)."""

    arn: str
    id: str
    name: str


def _iam_store(account: str) -> Any:
    from localstack.services.iam.models import iam_stores

    return iam_stores[account]["us-east-1"]  # IAM is global: LocalStack keeps it in us-east-1


def _profile_entity(account: str, reference: str) -> Any | None:
    """LocalStack's instance profile by name or ARN (``…:instance-profile/<path><name>``)."""
    name = reference.rsplit("/", 1)[-1]
    entity = _iam_store(account).INSTANCE_PROFILES.get(name)
    if entity is None:
        return None
    if reference.startswith("arn:") and entity.instance_profile.get("Arn") != reference:
        return None
    return entity


def apply_patches() -> None:
    """moto's EC2 finds instance profiles in LocalStack's IAM (RunInstances with
    ``IamInstanceProfile``, AssociateIamInstanceProfile, ReplaceIamInstanceProfileAssociation).
    Pinned by tests/localcloud/test_node_credentials.py."""
    import moto.ec2.models.iam_instance_profile as associations
    import moto.ec2.responses.instances as responses

    original = associations.filter_iam_instance_profiles
    if getattr(original, "_vsa_localstack_iam", False):
        return

    def filter_iam_instance_profiles(
        account_id: str,
        partition: str,
        iam_instance_profile_arn: str | None,
        iam_instance_profile_name: str | None,
    ) -> Any:
        found = [
            _profile_entity(account_id, reference)
            for reference in (iam_instance_profile_arn, iam_instance_profile_name)
            if reference
        ]
        entity = found[0] if found else None
        if entity is not None and all(e is entity for e in found):  # name and ARN: one profile
            profile = entity.instance_profile
            return _Profile(profile["Arn"], profile["InstanceProfileId"], profile["InstanceProfileName"])
        # not one of LocalStack's: moto's own answer (its NoSuchEntity)
        return original(account_id, partition, iam_instance_profile_arn, iam_instance_profile_name)

    filter_iam_instance_profiles._vsa_localstack_iam = True  # type: ignore[attr-defined]
    associations.filter_iam_instance_profiles = filter_iam_instance_profiles
    responses.filter_iam_instance_profiles = filter_iam_instance_profiles


def _ec2_backend(account: str, region: str) -> Any:
    from moto.ec2.models import ec2_backends

    return ec2_backends[account][region]


def profile_of(account: str, region: str, instance: Any) -> str | None:
    """The instance profile (name or ARN) the instance runs with, if any: its association, else
    its launch template version's ``IamInstanceProfile`` (moto tags an instance launched from a
    template with ``aws:ec2launchtemplate:id`` and ``…:version``)."""
    associated = getattr(instance, "iam_instance_profile", None)
    if isinstance(associated, dict) and associated.get("Arn"):
        return str(associated["Arn"])
    backend = _ec2_backend(account, region)
    tags = backend.tags.get(instance.id, {})
    template = backend.launch_templates.get(tags.get("aws:ec2launchtemplate:id", ""))
    if template is None:
        return None
    try:
        version = template.get_version(tags.get("aws:ec2launchtemplate:version", "$Default"))
    except Exception:  # noqa: BLE001 - moto's InvalidLaunchTemplateVersionNotFound: a deleted version
        return None
    profile = (getattr(version, "data", {}) or {}).get("IamInstanceProfile") or {}
    reference = profile.get("Arn") or profile.get("Name")
    return str(reference) if reference else None


def role_of(account: str, profile: str) -> str | None:
    """The ARN of the role in an instance profile; None when the profile is gone or has no role."""
    entity = _profile_entity(account, profile)
    if entity is None or not entity.role_name:
        return None
    role = _iam_store(account).ROLES.get(entity.role_name)
    return str(role.role["Arn"]) if role is not None else None


# --- credentials --------------------------------------------------------------------------------


def instance_arn(account: str, region: str, instance_id: str) -> str:
    return f"arn:aws:ec2:{region}:{account}:instance/{instance_id}"


def deliver(account: str, region: str, instance_id: str) -> dict[str, str] | None:
    """Role credentials for a script on the instance, as environment variables; None when the
    instance has no instance profile with a role (no credentials at all, as on AWS)."""
    from localstack.aws.connect import connect_to

    try:
        instance = _ec2_backend(account, region).get_instance(instance_id)
    except Exception:  # noqa: BLE001 - moto's InvalidInstanceIdError: no instance, no credentials
        return None
    profile = profile_of(account, region, instance)
    role = role_of(account, profile) if profile else None
    if role is None:
        if profile:
            LOG.warning("instance %s: instance profile %s has no role; no credentials", instance_id, profile)
        return None
    from botocore.exceptions import BotoCoreError, ClientError

    sts = connect_to(aws_access_key_id=account, region_name=region).sts.request_metadata(
        service_principal="ec2"
    )
    try:
        reply = sts.assume_role(RoleArn=role, RoleSessionName=instance_id, DurationSeconds=SESSION_SECONDS)
    except (BotoCoreError, ClientError):
        # as an instance whose metadata service has no credentials: the script runs (most
        # documents call no AWS API) and any AWS call it makes says it found none
        LOG.exception("instance %s: could not assume %s; no credentials", instance_id, role)
        return None
    credentials = reply["Credentials"]
    delivery = Delivery(
        instance_arn=instance_arn(account, region, instance_id),
        vpc_id=str(instance.vpc_id or ""),
        private_ip=str(instance.private_ip or ""),
        expires=credentials["Expiration"].timestamp(),
    )
    with _LOCK:
        now = time.time()
        for key in [k for k, d in _DELIVERED.items() if d.expires < now]:
            del _DELIVERED[key]
        _DELIVERED[credentials["AccessKeyId"]] = delivery
    LOG.info("instance %s: credentials of %s (profile %s)", instance_id, role, profile)
    return {
        "AWS_ACCESS_KEY_ID": credentials["AccessKeyId"],
        "AWS_SECRET_ACCESS_KEY": credentials["SecretAccessKey"],
        "AWS_SESSION_TOKEN": credentials["SessionToken"],
    }


# --- the node's AWS CLI --------------------------------------------------------------------------


def node_cli_path() -> Path:
    """``<state>/node-bin/aws``: the local cloud runs from ``<state>/venv`` (tools/install.sh)."""
    return Path(sys.prefix).resolve().parent / "node-bin" / NODE_CLI


def write_node_cli(path: Path | None = None) -> Path:
    """Write the node's ``aws`` wrapper (atomically: local clouds of one checkout share it).
    ``-I``: the node's working directory (its sandbox) and PYTHON* variables cannot change which
    modules it runs."""
    path = path or node_cli_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (
        "#!/bin/sh\n"
        "# The AWS CLI of the local cloud's managed nodes (secretsmanager get-secret-value only),\n"
        "# written at each start by vsa_localcloud/instance_roles.py; see vsa_localcloud/node_aws.py.\n"
        f'exec {shlex.quote(sys.executable)} -I -m vsa_localcloud.node_aws "$@"\n'
    )
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    partial.chmod(0o755)
    partial.replace(path)
    return path


@hooks.on_infra_start()
def provide_instance_roles() -> None:
    apply_patches()
    LOG.info("instance profiles from LocalStack's IAM; the nodes' AWS CLI is %s", write_node_cli())
