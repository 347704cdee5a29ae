"""The array's DH-HMAC-CHAP keys in AWS Secrets Manager (``vsa_core.arrays.keys`` decides what
they are and who gets which; this module stores them).

- The array's own secret (``<deployment>/<array>/keys``): every key, read by the control plane only.
- One secret per node (``<deployment>/<array>/node/<instance>``), tagged ``vsa:node`` = the node's
  instance ARN: a controller's holds the controller key and every declared host's key; a host's,
  its own key and the controller key. The node policy the stack outputs lets an instance read a
  secret only when that tag names the instance itself (``ec2:SourceInstanceARN``).

Every secret is encrypted with the stack's customer-managed KMS key (``KeysKey``) and tagged
``vsa:array``. A node secret is written only when its content differs (no version churn on a
re-apply); it is deleted without a recovery window when its node leaves the array (a deleted
secret's name is taken for a few seconds: a host removed and added back at once may have to
apply twice). No key ever reaches a Change, a log line or an answer: the changes say which
hosts' keys were made or dropped, in words.
"""

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from vsa_core.arrays import keys
from vsa_core.arrays.aws_observe import ArrayClients, describe_group
from vsa_core.arrays.plan import Action, Change
from vsa_core.arrays.spec import ARRAY_TAG, DEPLOYMENT_TAG, ArraySpec
from vsa_core.errors import ConflictError
from vsa_core.naming import deployment, group_name
from vsa_core.nvme import host_nqn

NOT_FOUND = "ResourceNotFoundException"
RECOVERY_WINDOW_DAYS = 7
"""How long an array's own key secret can be restored after the array (or its authentication)
is deleted (DeleteSecret RecoveryWindowInDays: 7-30, Secrets Manager API reference). Node copies
are derived from it and deleted at once."""
Stages = Mapping[str, Mapping[str, str]]
"""A key rotation's progress as the registry keeps it (``RegisteredArray.rekey_stages``)."""


WRITERS = 4
"""Node copies written at once. Each is a round trip to Secrets Manager (CreateSecret, or
PutSecretValue and TagResource); an array's 242 host copies one after another (the most that fit:
``keys.size_problem``) would take the PUT past API Gateway's 29 s at 0.1 s each. Four at a time
stay under Secrets Manager's 50 requests per second for its write calls (its quotas page), and
botocore's standard retries take any throttling. botocore clients are thread-safe (boto3's guide,
"Multithreading or multiprocessing with clients")."""


@dataclass(frozen=True)
class KeysClients:
    """Secrets Manager, the KMS key every key secret is encrypted with, and where the nodes are
    (their instance ARNs: partition, region, account)."""

    secretsmanager: Any
    kms_key_id: str
    partition: str
    region: str
    account: str

    def node_arn(self, instance_id: str) -> str:
        return keys.instance_arn(self.partition, self.region, self.account, instance_id)


def keys_clients(secretsmanager: Any, kms_key_id: str, arn: str, region: str) -> KeysClients:
    """``KeysClients`` in the partition and account of ``arn`` (any ARN of the stack's)."""
    parts = arn.split(":")
    if len(parts) < 6 or parts[0] != "arn":
        raise ValueError(f"need an ARN of the stack's to know its partition and account, not {arn!r}")
    return KeysClients(
        secretsmanager=secretsmanager,
        kms_key_id=kms_key_id,
        partition=parts[1],
        region=region,
        account=parts[4],
    )


def of(clients: ArrayClients) -> KeysClients:
    """The key clients of an array's steps (its Secrets Manager client and the stack's key, whose
    ARN says the partition and account; the backup scheduler role's where no key is configured)."""
    key = clients.keys_kms_key_id
    return keys_clients(
        clients.secretsmanager,
        key,
        key if key.startswith("arn:") else clients.scheduler_role_arn,
        str(clients.ec2.meta.region_name),
    )


LET_GO = ("Terminating:Proceed", "Terminated")
"""Group lifecycle states of a controller whose drain is over: it runs no document any more."""


def keeps_keys(lifecycle_state: str) -> bool:
    """Whether a group instance in ``lifecycle_state`` keeps its copy of the keys: while it
    serves, boots, or drains (``Terminating:Wait``: DrainController still runs its documents,
    with fencing the release of the volumes it owns, a configure-target that reads the keys)."""
    return lifecycle_state not in LET_GO


def in_group(clients: ArrayClients, array_id: str) -> list[str]:
    """The controllers of the array's group that keep their copy of the keys (``keeps_keys``)."""
    group = describe_group(clients, group_name(array_id))
    instances = group.get("Instances", []) if group else []
    return sorted(str(i["InstanceId"]) for i in instances if keeps_keys(str(i.get("LifecycleState", ""))))


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _read(clients: KeysClients, name: str) -> str | None:
    """The secret's value; None when it does not exist or is scheduled for deletion (a read
    restores nothing: only an apply does, ``_restore_if_deleted``)."""
    try:
        return str(clients.secretsmanager.get_secret_value(SecretId=name)["SecretString"])
    except ClientError as error:
        if _code(error) == NOT_FOUND or _scheduled_for_deletion(error):
            return None
        raise


def _scheduled_for_deletion(error: ClientError) -> bool:
    """Secrets Manager refuses to read or re-create a secret in its recovery window with
    InvalidRequestException, whose message speaks of its deletion ("…marked for deletion",
    "…scheduled for deletion"; moto: "…currently marked deleted")."""
    message = str(error.response.get("Error", {}).get("Message", "")).lower()
    return _code(error) == "InvalidRequestException" and "delet" in message


def _restore_if_deleted(clients: KeysClients, name: str) -> None:
    """An array declared again within its key secret's recovery window gets its keys back
    (RestoreSecret): the hosts still hold them."""
    try:
        clients.secretsmanager.describe_secret(SecretId=name)
    except ClientError as error:
        if _code(error) == NOT_FOUND:
            return
        raise
    try:
        clients.secretsmanager.get_secret_value(SecretId=name)
    except ClientError as error:
        if not _scheduled_for_deletion(error):
            raise
        clients.secretsmanager.restore_secret(SecretId=name)


DIGEST_TAG = "vsa:digest"
"""On every key secret: the SHA-256 of its content (first 32 hex digits; the content holds 256
random bits a key, so the digest says nothing of it). One ListSecrets then tells which node
copies are current, instead of a GetSecretValue each: an apply stays well inside API Gateway's
29 s with many hosts."""


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:32]


def _write(clients: KeysClients, name: str, value: str, tags: dict[str, str], exists: bool) -> Action:
    """Create the secret ``name`` holding ``value`` (with ``tags`` and its digest), or, when it
    ``exists``, put ``value`` as its new version and its digest tag. ListSecrets is eventually
    consistent (Secrets Manager API reference): a secret created moments ago may not be listed
    yet, so a create refused as existing is an update."""
    if not exists:
        try:
            clients.secretsmanager.create_secret(
                Name=name,
                SecretString=value,
                KmsKeyId=clients.kms_key_id,
                Description="VSA DH-HMAC-CHAP keys (vsa_core.arrays.keys); written by the control plane",
                Tags=[{"Key": k, "Value": v} for k, v in sorted({**tags, DIGEST_TAG: digest(value)}.items())],
            )
            return "create"
        except ClientError as error:
            if _code(error) != "ResourceExistsException":
                raise
    clients.secretsmanager.put_secret_value(SecretId=name, SecretString=value)
    clients.secretsmanager.tag_resource(SecretId=name, Tags=[{"Key": DIGEST_TAG, "Value": digest(value)}])
    return "update"


def _exists(clients: KeysClients, name: str) -> bool:
    try:
        clients.secretsmanager.describe_secret(SecretId=name)
    except ClientError as error:
        if _code(error) == NOT_FOUND:
            return False
        raise
    return True


def _delete(clients: KeysClients, name: str) -> bool:
    """Delete ``name``: the array's own key secret with a recovery window (``RECOVERY_WINDOW_DAYS``),
    a node's copy at once; whether it existed. DeleteSecret with ForceDeleteWithoutRecovery
    answers success for a secret that does not exist (moto does as AWS does), so existence is
    asked first; one already scheduled for deletion is left to its window."""
    if not _exists(clients, name):
        return False
    array_id = name.split("/")[1]
    keep = (
        {"RecoveryWindowInDays": RECOVERY_WINDOW_DAYS} if name == keys.array_secret_name(array_id) else None
    )
    try:
        clients.secretsmanager.delete_secret(SecretId=name, **(keep or {"ForceDeleteWithoutRecovery": True}))
    except ClientError as error:
        if _code(error) == NOT_FOUND or _scheduled_for_deletion(error):
            return False
        raise
    return True


def array_keys(clients: KeysClients, array_id: str, stages: Stages | None = None) -> keys.ArrayKeys | None:
    """The array's keys as stored (with a rotation's progress ``stages``), or None before its
    first apply with dh-hmac-chap."""
    text = _read(clients, keys.array_secret_name(array_id))
    return keys.ArrayKeys.from_secret(text).with_stages(stages or {}) if text is not None else None


def node_secrets(clients: KeysClients, array_id: str) -> dict[str, str]:
    """The array's node secrets that exist: name → the digest of their content (its tag; ""
    for one without)."""
    prefix = keys.node_prefix(array_id)
    found: dict[str, str] = {}
    pages = clients.secretsmanager.get_paginator("list_secrets").paginate(
        Filters=[{"Key": "name", "Values": [prefix]}]
    )
    for page in pages:
        # the name filter matches a prefix of the name, case-sensitive (ListSecrets); checked
        # again here all the same
        for listed in page.get("SecretList", []):
            if str(listed["Name"]).startswith(prefix):
                tags = {str(t["Key"]): str(t["Value"]) for t in listed.get("Tags", [])}
                found[str(listed["Name"])] = tags.get(DIGEST_TAG, "")
    return dict(sorted(found.items()))


def _node_tags(clients: KeysClients, array_id: str, instance_id: str) -> dict[str, str]:
    return {
        ARRAY_TAG: array_id,
        DEPLOYMENT_TAG: deployment(),
        keys.NODE_TAG: clients.node_arn(instance_id),
        keys.KEYS_TAG: "node",
    }


def _holders(content: str) -> list[str]:
    """What a node secret holds, in words (never the keys)."""
    value = json.loads(content)
    said = ["controller key"] if "controllerKey" in value else []
    said += ["its host key"] if "hostKey" in value else []
    said += [f"host key of {n}" for n in sorted(value.get("hosts", {}))]
    return said


def converge(
    clients: KeysClients,
    spec: ArraySpec,
    controllers: Sequence[str],
    dry_run: bool = False,
    stages: Stages | None = None,
) -> list[Change]:
    """Store the keys ``spec`` needs: the array's (a key made for each new host, the keys of
    hosts no longer declared dropped) and each host's copy; the copies of ``controllers`` (the
    group's) that exist are brought up to date, those of controllers gone are deleted. A
    controller's copy is first written by its own bootstrap (``write_controller``), never here:
    a controller launching meanwhile reads the keys then. With ``authentication: none`` every
    key secret of the array is deleted (nodes then have nothing to read). ``dry_run``: only say
    what would change. Idempotent."""
    array_id = spec.array_id
    existing = node_secrets(clients, array_id)
    if spec.authentication != keys.DH_HMAC_CHAP:
        gone = [*(n for n in [keys.array_secret_name(array_id)] if _read(clients, n) is not None), *existing]
        if not dry_run:
            for name in gone:
                _delete(clients, name)
        return [Change(f"secret/{name}", "delete") for name in gone]
    wanted, change = _array_secret(clients, spec, dry_run)
    wanted = wanted.with_stages(stages or {})
    changes = [change] if change is not None else []
    copies = _copies(spec, wanted, [c for c in controllers if keys.node_secret_name(array_id, c) in existing])
    changes += _store(clients, array_id, copies, existing, dry_run)
    for name in existing:
        if name not in copies:
            if not dry_run:
                _delete(clients, name)
            changes.append(Change(f"secret/{name}", "delete"))
    return changes


def refresh_controllers(
    clients: KeysClients, spec: ArraySpec, controllers: Sequence[str], stages: Stages | None = None
) -> list[Change]:
    """Write each of ``controllers``' copies as the array's keys are now (before configure-target
    reads them: a controller that bootstrapped while an apply changed the hosts has an older
    copy). Nothing without authentication."""
    if spec.authentication != keys.DH_HMAC_CHAP:
        return []
    wanted, change = _array_secret(clients, spec, dry_run=False)
    wanted = wanted.with_stages(stages or {})
    copies = {k: v for k, v in _copies(spec, wanted, controllers).items() if v[0] in set(controllers)}
    return ([change] if change is not None else []) + _store(
        clients, spec.array_id, copies, node_secrets(clients, spec.array_id), dry_run=False
    )


def _copies(
    spec: ArraySpec, wanted: keys.ArrayKeys, controllers: Iterable[str]
) -> dict[str, tuple[str, str]]:
    """Secret name → (instance id, content) of every host's copy and each of ``controllers``'."""
    nqns = {h.instance_id: host_nqn(h) for h in spec.hosts}
    copies = {keys.node_secret_name(spec.array_id, i): (i, wanted.host_secret(n)) for i, n in nqns.items()}
    for instance_id in controllers:
        content = wanted.controller_secret(nqns.values(), instance_id)
        copies[keys.node_secret_name(spec.array_id, instance_id)] = (instance_id, content)
    return copies


def _store(
    clients: KeysClients,
    array_id: str,
    copies: dict[str, tuple[str, str]],
    existing: dict[str, str],
    dry_run: bool,
) -> list[Change]:
    """Write each of ``copies`` whose content differs from what ``existing`` (name → digest)
    says is stored."""
    due = [(n, i, v) for n, (i, v) in sorted(copies.items()) if existing.get(n) != digest(v)]
    if dry_run:
        actions: list[Action] = ["update" if n in existing else "create" for n, _, _ in due]
    else:
        with ThreadPoolExecutor(max_workers=WRITERS) as pool:
            actions = list(
                pool.map(
                    lambda w: _write(
                        clients, w[0], w[2], _node_tags(clients, array_id, w[1]), w[0] in existing
                    ),
                    due,
                )
            )
    return [
        Change(f"secret/{name}", action, (("holds", None, _holders(value)),))
        for (name, _, value), action in zip(due, actions, strict=True)
    ]


def _array_secret(
    clients: KeysClients, spec: ArraySpec, dry_run: bool
) -> tuple[keys.ArrayKeys, Change | None]:
    """The array's keys for ``spec``'s hosts, stored (unless ``dry_run``) when they changed."""
    name = keys.array_secret_name(spec.array_id)
    if not dry_run:
        _restore_if_deleted(clients, name)
    text = _read(clients, name)
    current = keys.ArrayKeys.from_secret(text) if text is not None else None
    wanted, said = keys.converge(current, (host_nqn(h) for h in spec.hosts))
    if not said:
        return wanted, None
    if not dry_run:
        tags = {ARRAY_TAG: spec.array_id, DEPLOYMENT_TAG: deployment(), keys.KEYS_TAG: "array"}
        _write(clients, name, wanted.as_secret(), tags, exists=text is not None)
    before = sorted(current.hosts) if current is not None else None
    action: Action = "create" if current is None else "update"
    return wanted, Change(f"secret/{name}", action, (("hosts", before, sorted(wanted.hosts)),))


def write_controller(
    clients: KeysClients, spec: ArraySpec, instance_id: str, in_group: Iterable[str] = ()
) -> dict[str, str]:
    """A bootstrapping controller's copy of the keys (the controller key and every declared
    host's), from the array's secret; answers what configure-target is given: ``authentication``
    and ``keysSecretId`` (``none`` without authentication). The copies of controllers that left
    (neither a host nor in ``in_group``, the group's instances) are deleted on the way: a
    controller lost without a drain leaves its copy until the next controller bootstraps."""
    if spec.authentication != keys.DH_HMAC_CHAP:
        return {"authentication": keys.NONE, "keysSecretId": "none"}
    # the apply stores the keys before the group can launch a controller; one that failed
    # half-way may not have: the same rule makes them now (a no-op when they are there)
    stored, _ = _array_secret(clients, spec, dry_run=False)
    nqns = [host_nqn(h) for h in spec.hosts]
    name = keys.node_secret_name(spec.array_id, instance_id)
    existing = node_secrets(clients, spec.array_id)
    _store(
        clients,
        spec.array_id,
        {name: (instance_id, stored.controller_secret(nqns, instance_id))},
        existing,
        dry_run=False,
    )
    keep = {
        keys.node_secret_name(spec.array_id, i)
        for i in [instance_id, *in_group, *(h.instance_id for h in spec.hosts)]
    }
    for stale in existing:
        if stale not in keep:
            _delete(clients, stale)
    return {"authentication": keys.DH_HMAC_CHAP, "keysSecretId": name}


def rotation(clients: KeysClients, spec: ArraySpec, stages: Stages | None = None) -> keys.ArrayKeys | None:
    """The array's keys with a rotation's progress, when it authenticates (None without
    authentication or keys)."""
    if spec.authentication != keys.DH_HMAC_CHAP:
        return None
    return array_keys(clients, spec.array_id, stages)


def begin_rotation(clients: KeysClients, spec: ArraySpec) -> bool:
    """Store new keys for the controller and every host beside the current ones (``vsactl
    rotate-keys``); a rotation under way goes on. Whether one began (its progress in the
    registry then starts empty: the caller clears it). Refused (``ConflictError``) for an array
    without authentication or whose keys are not stored yet."""
    if spec.authentication != keys.DH_HMAC_CHAP:
        raise ConflictError(
            f"array {spec.array_id!r} has authentication none: there are no keys to rotate "
            "(apply it with authentication: dh-hmac-chap to turn authentication on)"
        )
    stored = array_keys(clients, spec.array_id)
    if stored is None:
        raise ConflictError(
            f"array {spec.array_id!r} has no keys stored yet: apply it again, then rotate its keys"
        )
    rotating, began = stored.begin_rotation()
    if began and (too_big := keys.size_problem(rotating.hosts)) is not None:
        # an array applied before its hosts were measured against the secret's size
        raise ConflictError(f"array {spec.array_id!r} cannot rotate its keys: {too_big}")
    if began:
        _put_array(clients, spec.array_id, rotating)
    return began


def _put_array(clients: KeysClients, array_id: str, value: keys.ArrayKeys) -> None:
    tags = {ARRAY_TAG: array_id, DEPLOYMENT_TAG: deployment(), keys.KEYS_TAG: "array"}
    _write(clients, keys.array_secret_name(array_id), value.as_secret(), tags, exists=True)


def rekey_hosts(clients: KeysClients, spec: ArraySpec, stages: Stages) -> list[Change]:
    """Every host's copy as the rotation stands (``paths``: the keys each controller whose nvmet
    holds new ones holds, by its address), before connect-path reads it."""
    stored = array_keys(clients, spec.array_id, stages)
    if stored is None:
        return []
    copies = _copies(spec, stored, [])
    return _store(clients, spec.array_id, copies, node_secrets(clients, spec.array_id), dry_run=False)


def promote(
    clients: KeysClients, spec: ArraySpec, controllers: Sequence[str], stages: Stages
) -> list[Change]:
    """The rotation's keys become the array's: its secret and every copy (the hosts' lose the
    per-address keys; the controllers' already hold the new ones) hold no old key any more, and
    no secret keeps its previous version by a label. The caller then clears the progress."""
    stored = array_keys(clients, spec.array_id, stages)
    if stored is None or stored.rotation is None:
        return []
    promoted = stored.promoted()
    _put_array(clients, spec.array_id, promoted)
    existing = node_secrets(clients, spec.array_id)
    held = [c for c in controllers if keys.node_secret_name(spec.array_id, c) in existing]
    changes = _store(clients, spec.array_id, _copies(spec, promoted, held), existing, dry_run=False)
    for name in [keys.array_secret_name(spec.array_id), *node_secrets(clients, spec.array_id)]:
        _forget_previous(clients, name)
    return changes


def _forget_previous(clients: KeysClients, name: str) -> None:
    """Take ``AWSPREVIOUS`` off the secret's previous version (which held old keys): a version
    without a staging label is deprecated, and Secrets Manager deletes it in time
    (UpdateSecretVersionStage; "Secrets Manager removes outdated versions")."""
    versions = clients.secretsmanager.describe_secret(SecretId=name).get("VersionIdsToStages", {})
    for version_id, stages in versions.items():
        if "AWSPREVIOUS" in stages and "AWSCURRENT" not in stages:
            clients.secretsmanager.update_secret_version_stage(
                SecretId=name, VersionStage="AWSPREVIOUS", RemoveFromVersionId=version_id
            )


def delete_all(clients: KeysClients, array_id: str) -> list[str]:
    """Every key secret of the array (its own and every node's), at teardown."""
    names = [*node_secrets(clients, array_id), keys.array_secret_name(array_id)]
    return [n for n in names if _delete(clients, n)]
