"""EBS snapshot copies and snapshot sharing, as the EBS User Guide and the EC2 API Reference
describe them (disaster recovery: a backup set's snapshots copied to another Region, and to
another account, and restored there).

What moto did, and what happens here instead:

* **CopySnapshot** made a ``completed`` copy at once, of a ``pending`` source too, with no data,
  the source's volume id, ``Encrypted`` ignored and the description ``None`` when none was
  given; it looked for the source in the caller's own account only, so a snapshot shared with
  the caller could not be copied. Here, following "Copy an Amazon EBS snapshot" (EBS User Guide,
  https://docs.aws.amazon.com/ebs/latest/userguide/ebs-copy-snapshot.html) and CopySnapshot
  (EC2 API Reference, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CopySnapshot.html):

  - "After you create a snapshot, and it has reached the ``completed`` state, you can create a
    copy of it": another state is refused, ``IncorrectState`` (the API reference names no error
    of CopySnapshot's own; ``IncorrectState`` is EC2's "The resource is in an incorrect state
    for the request", with the message EC2 gives CreateVolume from a pending snapshot,
    "Snapshot is in invalid state - pending": the exact code and text CopySnapshot answers are
    not documented).
  - "You can copy snapshots that you own and snapshots that are shared with you, privately or
    publicly": the source is the caller's own, or another account's whose
    ``createVolumePermission`` names the caller's account (or the group ``all``). A source the
    caller cannot see is ``InvalidSnapshot.NotFound`` in the caller's Region; from another
    Region the copy is accepted and fails in the destination (``error``, state message and
    ``copySnapshot`` event "Source snapshot ID is not valid": "Amazon EventBridge events for
    Amazon EBS", Copy snapshot, scenario 4; a copy given the wrong ``SourceRegion`` stays
    ``pending`` for minutes and then fails, as hashicorp/terraform-provider-aws#3086 observed).
  - "The snapshot copy is an exact copy of the original": its blocks are the source's (a sparse
    copy, ``ebs_data``), its ``VolumeSize`` the source's. It is ``pending`` for as long as a new
    snapshot (``ebs_model.start_pending``: the ``snapshot_seconds`` setting, else the latency
    profile's ``snapshot_pending``), then ``completed``, with a ``copySnapshot`` event in the
    destination Region ("If you are copying the snapshot across Regions, then the event is
    emitted in the destination Region"), ``incremental`` by the guide's rule (a previous copy
    of a snapshot of the same volume still in the destination, every such copy under the same
    key or none).
  - "Snapshots copies have an arbitrary source volume ID. Do not use this volume ID for any
    purpose.": ``vol-ffffffff``, the id EC2 shows.
  - Tags: the request's ``TagSpecifications`` (``snapshot``); "User-defined tags are not copied
    from the source snapshot to the new snapshot".
  - Encryption: "copies of encrypted EBS snapshots remain encrypted. Copies of unencrypted
    snapshots remain unencrypted, unless you enable encryption for the snapshot copy
    operation. By default, encrypted snapshot copies use the default KMS key; however, you can
    specify a different KMS key"; KmsKeyId: "If KmsKeyId is specified, the encrypted state must
    be true" (else ``InvalidParameterDependency``, moto's wording for CreateVolume). The default
    key is the destination's default EBS key as moto keeps it (``alias/aws/ebs`` in moto's own
    KMS, or the one ModifyEbsDefaultKmsKeyId set). No key is checked: neither that it exists
    (moto's KMS is not LocalStack's) nor its key policy or grants (to copy an encrypted snapshot
    shared from another account "you must have permissions for the KMS key": not evaluated).
  - "Each account can have up to twenty concurrent snapshot copy requests to a single
    destination Region": a 21st pending copy is ``ResourceLimitExceeded``, "Too many snapshot
    copies in progress. The limit is 20 for this destination region." (EC2's message, seen with
    the limit 5 it had then in aws-samples/copy-encrypted-ami#3).
  - DeleteSnapshot of a copy frees its data (``ebs_model``'s DeleteSnapshot).

* **Sharing** ("Share an Amazon EBS snapshot", https://docs.aws.amazon.com/ebs/latest/userguide/ebs-modifying-snapshot-permissions.html):
  ModifySnapshotAttribute adds or removes account ids (``UserIds`` with ``OperationType``, or
  the ``CreateVolumePermission`` structure, which moto ignored) and the group ``all``;
  DescribeSnapshotAttribute answers them for the snapshot asked about (moto named a fixed
  ``snap-a0332ee0``). "You can't share snapshots that are encrypted with the default AWS managed
  key": adding an account to such a snapshot is ``OperationNotPermitted``, "Encrypted snapshots
  with EBS default key cannot be shared" (EC2's answer, hashicorp/packer#7499); the default key
  is recognised as moto's ``alias/aws/ebs`` key of the snapshot's account and Region (the key an
  encrypted volume created without ``KmsKeyId`` gets). Each account newly shared with gets the
  ``shareSnapshot`` event on its default bus ("sent to your AWS account when another account
  shares a snapshot with it"; "emitted only when a private snapshot is shared with another
  user"). Not modelled: another account describing, or creating a volume directly from, a
  snapshot shared with it (it copies it, as the product does).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from moto.ec2.exceptions import EC2ClientError, InvalidParameterDependency
from moto.ec2.models import ec2_backends
from moto.ec2.models.elastic_block_store import EBSBackend, Snapshot
from moto.ec2.utils import random_snapshot_id

from vsa_localcloud import ebs_data, ebs_model
from vsa_localcloud.eventbus import emit

ARBITRARY_VOLUME_ID = "vol-ffffffff"
CONCURRENT_COPIES = 20  # per account and destination Region
EBS_DEFAULT_KEY_ALIAS = "alias/aws/ebs"
SOURCE_NOT_VALID = "Source snapshot ID is not valid"


@dataclass(frozen=True)
class ArbitraryVolume:
    """What a copy names as its volume: not the source's ("an arbitrary source volume ID")."""

    id: str
    size: int


@dataclass(frozen=True)
class CopyRequest:
    source_region: str
    source_snapshot_id: str
    description: str
    encrypted: bool
    kms_key_id: str | None
    tags: dict[str, str]

    @classmethod
    def of(cls, request: dict[str, Any]) -> CopyRequest:
        tags = {
            tag["Key"]: tag.get("Value", "")
            for spec in request.get("TagSpecifications") or []
            if spec.get("ResourceType") == "snapshot"
            for tag in spec.get("Tags") or []
        }
        return cls(
            source_region=str(request["SourceRegion"]),
            source_snapshot_id=str(request["SourceSnapshotId"]),
            description=str(request.get("Description") or ""),
            encrypted=bool(request.get("Encrypted")),
            kms_key_id=request.get("KmsKeyId") or None,
            tags=tags,
        )


def visible_snapshot(account: str, region: str, snapshot_id: str) -> Snapshot | None:
    """The snapshot as ``account`` sees it in ``region``: its own, or another account's that
    shares it with ``account`` (its id, or the group ``all``, in ``createVolumePermission``)."""
    own = _backend(account, region)
    if own is not None and snapshot_id in own.snapshots:
        found: Snapshot = own.snapshots[snapshot_id]
        return found
    for owner in list(ec2_backends.keys()):
        backend = _backend(owner, region) if owner != account else None
        snapshot = backend.snapshots.get(snapshot_id) if backend is not None else None
        if snapshot is not None and (
            account in snapshot.create_volume_permission_userids
            or "all" in snapshot.create_volume_permission_groups
        ):
            return snapshot  # type: ignore[no-any-return]
    return None


def _backend(account: str, region: str) -> EBSBackend | None:
    """moto's EC2 backend of an account and Region, None when nothing was ever made there (read
    with dict.get: moto creates a backend on ``[]``)."""
    regions = dict.get(ec2_backends, account)
    return dict.get(regions, region) if regions is not None else None  # type: ignore[no-any-return]


def copy_snapshot(backend: EBSBackend, request: CopyRequest) -> Snapshot:
    """CopySnapshot called on ``backend``'s Region (the destination) by its account."""
    with ebs_model.LOCK:
        source = _source(backend, request)
        _check_concurrent_copies(backend)
        copy = _new_copy(backend, request, source)
        if source is None:  # another Region's snapshot this account cannot read: fails there
            copy.__dict__["vsa_state_message"] = SOURCE_NOT_VALID
            ebs_model.start_pending(copy, of_volume=False, outcome="error")
            return copy
        copy.__dict__["vsa_copy_volume"] = source.__dict__.get("vsa_copy_volume", source.volume.id)
        try:
            ebs_data.copy_snapshot(source.id, copy.id)
        except OSError:
            backend.snapshots.pop(copy.id, None)
            ebs_data.delete_snapshot(copy.id)
            raise
        copy.__dict__["vsa_incremental"] = _incremental(backend, copy)
        ebs_model.start_pending(copy, of_volume=False)
        return copy


def _source(backend: EBSBackend, request: CopyRequest) -> Snapshot | None:
    """The snapshot to copy, as the caller sees it; None for another Region's it cannot see
    (refused here when in this Region); the request's checks."""
    account, region = backend.account_id, backend.region_name  # type: ignore[attr-defined]
    source = visible_snapshot(account, request.source_region, request.source_snapshot_id)
    if source is None and request.source_region == region:
        raise ebs_model.SnapshotNotFoundError(request.source_snapshot_id)
    if source is not None and source.status != "completed":
        raise EC2ClientError("IncorrectState", f"Snapshot is in invalid state - {source.status}")
    if request.kms_key_id and not request.encrypted:
        raise InvalidParameterDependency("KmsKeyId", "Encrypted")
    return source


def _new_copy(backend: EBSBackend, request: CopyRequest, source: Snapshot | None) -> Snapshot:
    """The copy, in the destination: tagged, encrypted as the request and the source say."""
    encrypted = request.encrypted or bool(source is not None and source.encrypted)
    size = int(source.volume_size) if source is not None else 0  # type: ignore[attr-defined]
    copy = Snapshot(
        backend,
        random_snapshot_id(),
        volume=ArbitraryVolume(ARBITRARY_VOLUME_ID, size),
        description=request.description,
        encrypted=encrypted,
        kms_key_id=request.kms_key_id or (_default_key(backend) if encrypted else None),
        owner_id=backend.account_id,  # type: ignore[attr-defined]
    )
    backend.snapshots[copy.id] = copy
    copy.add_tags(request.tags)
    copy.__dict__["vsa_volume_size"] = size
    copy.__dict__["vsa_copy_of"] = (
        f"arn:aws:ec2:{request.source_region}::snapshot/{request.source_snapshot_id}"
    )
    return copy


def _check_concurrent_copies(backend: EBSBackend) -> None:
    pending = [s for s in backend.snapshots.values() if "vsa_copy_of" in s.__dict__ and s.status == "pending"]
    if len(pending) >= CONCURRENT_COPIES:
        raise EC2ClientError(
            "ResourceLimitExceeded",
            f"Too many snapshot copies in progress. The limit is {CONCURRENT_COPIES} "
            "for this destination region.",
        )


def _incremental(backend: EBSBackend, copy: Snapshot) -> bool:
    """ "Incremental snapshot copying": the copy is incremental when a previous copy (of a snapshot
    of the same volume) still exists in the destination and every such copy is unencrypted or
    under the same key as this one."""
    volume = copy.__dict__["vsa_copy_volume"]
    earlier = [
        s
        for s in backend.snapshots.values()
        if s is not copy and s.__dict__.get("vsa_copy_volume") == volume and s.status == "completed"
    ]
    return bool(earlier) and all(s.kms_key_id == copy.kms_key_id for s in earlier)


def _default_key(backend: EBSBackend) -> str:
    """The destination's default EBS key (created in moto's KMS on first use, as moto does for an
    encrypted volume)."""
    if not backend.default_kms_key_id:
        backend._create_default_encryption_key()
    return str(backend.default_kms_key_id)


# --- sharing -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SharingChange:
    """One ModifySnapshotAttribute of ``createVolumePermission``."""

    snapshot_id: str
    add_users: tuple[str, ...] = ()
    remove_users: tuple[str, ...] = ()
    add_groups: tuple[str, ...] = ()
    remove_groups: tuple[str, ...] = ()

    @classmethod
    def of(cls, request: dict[str, Any]) -> SharingChange:
        """From either form of the request: ``OperationType`` with ``UserIds``/``GroupNames``, or
        ``CreateVolumePermission`` ``{"Add": [{"UserId"|"Group"}], "Remove": [...]}``."""
        users: dict[str, list[str]] = {"add": [], "remove": []}
        groups: dict[str, list[str]] = {"add": [], "remove": []}
        operation = str(request.get("OperationType") or "").lower()
        if operation in users:
            users[operation] += list(request.get("UserIds") or [])
            groups[operation] += list(request.get("GroupNames") or [])
        permission = request.get("CreateVolumePermission") or {}
        for member, operation in (("Add", "add"), ("Remove", "remove")):
            for item in permission.get(member) or []:
                if item.get("UserId"):
                    users[operation].append(str(item["UserId"]))
                if item.get("Group"):
                    groups[operation].append(str(item["Group"]))
        return cls(
            snapshot_id=str(request.get("SnapshotId") or ""),
            add_users=tuple(users["add"]),
            remove_users=tuple(users["remove"]),
            add_groups=tuple(groups["add"]),
            remove_groups=tuple(groups["remove"]),
        )


def modify_sharing(backend: EBSBackend, change: SharingChange) -> list[dict[str, Any]]:
    """Apply the change to the caller's own snapshot; answers the ``shareSnapshot`` events to
    emit (one per account newly shared with), for ``announce`` outside the lock."""
    with ebs_model.LOCK:
        snapshot = backend.get_snapshot(change.snapshot_id)
        if change.add_users and shared_key_is_default(snapshot):
            raise EC2ClientError(
                "OperationNotPermitted", "Encrypted snapshots with EBS default key cannot be shared"
            )
        before = set(snapshot.create_volume_permission_userids)
        newly = [u for u in dict.fromkeys(change.add_users) if u not in before]
        backend.add_create_volume_permission(snapshot.id, list(change.add_users), list(change.add_groups))
        backend.remove_create_volume_permission(
            snapshot.id, list(change.remove_users), list(change.remove_groups)
        )
        return [_share_event(snapshot, account) for account in newly]


def announce(events: list[dict[str, Any]]) -> None:
    for event in events:
        emit(**event)


def shared_key_is_default(snapshot: Snapshot) -> bool:
    """Whether an encrypted snapshot is under the default AWS managed key (aws/ebs) of its account
    and Region: its key written as that alias, or the key moto's ``alias/aws/ebs`` names. An
    encrypted snapshot with no key of its own has its volume's (moto keeps none for a snapshot)."""
    if not snapshot.encrypted:
        return False
    key = snapshot.kms_key_id or getattr(snapshot.volume, "kms_key_id", None)
    if not key or key.endswith(EBS_DEFAULT_KEY_ALIAS):
        return True
    from moto.kms import kms_backends

    backend = snapshot.ec2_backend
    kms = kms_backends[backend.account_id][backend.region_name]
    if not kms.alias_exists(EBS_DEFAULT_KEY_ALIAS):
        return False
    default = kms.describe_key(EBS_DEFAULT_KEY_ALIAS)
    return key in (default.arn, default.id)


def _share_event(snapshot: Snapshot, account: str) -> dict[str, Any]:
    """``shareSnapshot`` ("Amazon EventBridge events for Amazon EBS", Share snapshot): to the
    account shared with, ``source`` the sharing account's number."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    region = snapshot.ec2_backend.region_name
    arn = f"arn:aws:ec2:{region}::snapshot/{snapshot.id}"
    return {
        "account_id": account,
        "region": region,
        "source": "aws.ec2",
        "detail_type": "EBS Snapshot Notification",
        "resources": [arn],
        "detail": {
            "event": "shareSnapshot",
            "result": "succeeded",
            "cause": "",
            "request-id": "",
            "snapshot_id": arn,
            "source": snapshot.ec2_backend.account_id,
            "startTime": now,
            "endTime": now,
        },
    }


def create_volume_permissions(snapshot: Snapshot) -> list[dict[str, str]]:
    """DescribeSnapshotAttribute's ``CreateVolumePermissions`` of the snapshot."""
    groups = [{"Group": g} for g in sorted(snapshot.create_volume_permission_groups)]
    return groups + [{"UserId": u} for u in sorted(snapshot.create_volume_permission_userids)]
