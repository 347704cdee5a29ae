"""EBS semantics moto lacks, patched into moto's EC2 models of this process.

moto keeps one attachment per volume (``Volume.attachment``) and creates every snapshot
``completed``. Here a volume keeps a list of attachments (Multi-Attach), snapshots go through
``pending`` → ``completed``/``error`` on a timer, and AWS's per-volume snapshot limits apply.
The patches are applied once, when the EC2 provider loads, and change moto's backend (not only
the API handlers) so RunInstances, TerminateInstances and Auto Scaling see the same volumes.

Every mutation of attachments or snapshot state happens under ``LOCK``; events are emitted
outside it.

moto quirks worked around here (each also commented where it is handled):

* ``Volume.attachment`` holds one attachment: the last attach wins and a detach empties it.
  Now a list (``Volume.attachments``); ``attachment`` is a view of its first entry, so moto's
  own ``status`` ("in-use" while any attachment exists) and ``delete_volume`` check still work.
* ``attach_volume`` ignored the Availability Zone, device names and Multi-Attach.
* ``Instance.teardown_defaults`` (TerminateInstances) detached by device and deleted every
  DeleteOnTermination volume, even one still attached elsewhere; a volume already gone raised
  ``InvalidVolume.NotFound``.
* ``attachment.*`` filters looked at one attachment only.
* The DescribeVolumes XML rendered one attachment with ``deleteOnTermination`` always false
  and left out ``multiAttachEnabled`` when false; the snapshot XML hard-coded ``pending``/60%
  (create) and 100% (describe). The templates are edited in place (module globals).
* Snapshots were ``completed`` at creation: ``Snapshot.status`` is an attribute moto's
  ``__init__`` assigns, so it becomes a property with a setter.
* The default root volume is always /dev/sda1 whatever the AMI's root device name.
* An attach, detach or terminate also updates the instance's SSM node sandbox: each attached
  volume is a ``dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol…`` link there to the volume's
  data file, as on a Nitro instance (``ssm_nodes.sync_devices``), so a document looking for a
  volume's device finds it only while the volume is attached.
* moto's volumes and snapshots hold no data. Here each volume has its blocks in a sparse file of
  the run directory, a snapshot copies them during the call that creates it, a volume created
  from a snapshot starts with the snapshot's, and DeleteVolume / DeleteSnapshot free them
  (``ebs_data``). CopySnapshot and sharing are ``ebs_copy``'s (a copy goes through the same
  ``pending`` phase, ``start_pending``, and ends with a ``copySnapshot`` event).
* A snapshot's ``VolumeSize`` was its volume's size now (moto renders ``snapshot.volume.size``),
  and CreateVolume from a snapshot without a ``Size`` took that too: a volume grown after the
  snapshot gave a larger snapshot. Now the size the volume had when the snapshot was taken.
  A ``Size`` smaller than the snapshot's was accepted: refused, as EC2 does.
* The patches apply when the EC2 provider loads (LocalStack loads it at first EC2 call): a
  moto EC2 use before that (e.g. Auto Scaling) sees stock moto.
"""

import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from moto.ec2.exceptions import EC2ClientError, InvalidSnapshotIdError, InvalidVolumeAttachmentError
from moto.ec2.models.elastic_block_store import EBSBackend, Snapshot, Volume, VolumeAttachment
from moto.ec2.models.instances import Instance
from moto.ec2.responses import elastic_block_store as templates
from moto.packages.boto.ec2.blockdevicemapping import BlockDeviceType

from vsa_localcloud import ebs_data, ssm_nodes, timings
from vsa_localcloud.eventbus import emit

LOCK = threading.RLock()

MULTI_ATTACH_TYPES = ("io1", "io2")
MAX_MULTI_ATTACH = 16  # "attach the volume to up to 16 Nitro-based instances in the same AZ"
# "Quotas for Amazon EBS": concurrent (pending) snapshots per volume: sc1 and st1 1, others 5.
CONCURRENT_SNAPSHOTS = {"sc1": 1, "st1": 1}
DEFAULT_CONCURRENT_SNAPSHOTS = 5


@dataclass
class Settings:
    """What tests may change through ``CONTROL["configure"]``."""

    # how long a snapshot stays pending; None: the latency profile's snapshot_pending
    snapshot_seconds: float | None = None
    snapshot_rate_seconds: float = 15.0  # "Wait at least 15 seconds between concurrent volume snapshots"


SETTINGS = Settings()


@dataclass
class SnapshotSet:
    """The snapshots of one CreateSnapshots call: one event when all have finished."""

    snapshots: list[Snapshot]
    start_time: str
    emitted: bool = False


@dataclass
class _State:
    snapshots: dict[str, Snapshot] = field(default_factory=dict)  # lifecycle-managed, by id
    sets: dict[str, SnapshotSet] = field(default_factory=dict)  # by member snapshot id
    last_snapshot_at: dict[str, float] = field(default_factory=dict)  # by volume id (monotonic)


STATE = _State()


def refuse(code: str, message: str) -> EC2ClientError:
    return EC2ClientError(code, message)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _true(value: Any) -> bool:
    return str(value).lower() == "true"


def configure(body: dict[str, Any]) -> dict[str, Any]:
    with LOCK:
        if body.pop("reset", False):
            defaults = Settings()
            SETTINGS.snapshot_seconds = defaults.snapshot_seconds
            SETTINGS.snapshot_rate_seconds = defaults.snapshot_rate_seconds
            STATE.last_snapshot_at.clear()
        for key, value in body.items():
            if key not in asdict(SETTINGS):
                raise ValueError(f"unknown setting {key!r}; one of {', '.join(asdict(SETTINGS))}")
            setattr(SETTINGS, key, float(value))
        return asdict(SETTINGS)


# --- Volumes: a list of attachments ---------------------------------------------------------


# RunInstances creates and attaches the volumes of its block device mappings while the instance
# is pending (moto: Instance.setup_defaults for the root volume, Instance.add_block_device for
# the others): those are in-use at once; an AttachVolume call on a pending instance is refused.
_LAUNCH = threading.local()
_moto_create_volume = EBSBackend.create_volume


def _launching(original: Callable[..., None]) -> Callable[..., None]:
    def wrapped(self: Instance, *args: Any, **kwargs: Any) -> None:
        _LAUNCH.active = True
        try:
            original(self, *args, **kwargs)
        finally:
            _LAUNCH.active = False

    return wrapped


def create_volume(
    self: EBSBackend, size: int | None, zone_name: str, snapshot_id: str | None = None, **options: Any
) -> Volume:
    """CreateVolume answers the volume ``creating``; it is ``available`` ``volume_creating``
    seconds later (latency profile). Volumes RunInstances creates are attached at launch. A volume
    from a snapshot gets the snapshot's blocks at once (a fresh one its file when first used)."""
    if snapshot_id:
        size = _size_from_snapshot(self, snapshot_id, size)
    volume: Volume = _moto_create_volume(self, size, zone_name, snapshot_id, **options)
    if snapshot_id:
        ebs_data.restore_volume(volume.id, int(volume.size), snapshot_id)
    delay = 0.0 if getattr(_LAUNCH, "active", False) else timings.current().volume_creating
    if delay > 0:
        volume.__dict__["vsa_creating"] = True
        timings.after(delay, lambda: volume.__dict__.pop("vsa_creating", None), f"create {volume.id}")
    return volume


def _size_from_snapshot(backend: EBSBackend, snapshot_id: str, size: int | None) -> int:
    """CreateVolume's ``Size`` with a ``SnapshotId`` (API reference, CreateVolume: "If you specify
    a snapshot, the default is the snapshot size, and you can specify a volume size that is equal
    to or larger than the snapshot size")."""
    smallest = int(backend.get_snapshot(snapshot_id).volume_size)
    if size is None:
        return smallest
    if int(size) < smallest:
        # the message EC2 answers (as operators have logged it)
        raise refuse(
            "InvalidParameterValue",
            f"Volume of size {int(size)}GB is smaller than snapshot '{snapshot_id}', "
            f"expect size >= {smallest}GB",
        )
    return int(size)


_moto_delete_volume = EBSBackend.delete_volume


def delete_volume(self: EBSBackend, volume_id: str) -> Volume:
    """DeleteVolume (moto's checks) frees the volume's data."""
    volume: Volume = _moto_delete_volume(self, volume_id)
    ebs_data.delete_volume(volume_id)
    return volume


def _creating(volume: Volume) -> bool:
    return bool(volume.__dict__.get("vsa_creating"))


def _volume_status(volume: Volume) -> str:
    if _creating(volume):
        return "creating"
    return "in-use" if _attachments(volume) else "available"


def _attachments(volume: Volume) -> list[VolumeAttachment]:
    attachments: list[VolumeAttachment] = volume.__dict__.setdefault("vsa_attachments", [])
    return attachments


def _first_attachment(volume: Volume) -> VolumeAttachment | None:
    attachments = _attachments(volume)
    return attachments[0] if attachments else None


def _set_attachment(volume: Volume, value: VolumeAttachment | None) -> None:
    # moto's Volume.__init__ assigns ``self.attachment = None``; its attach/detach (replaced
    # below) were the only other writers.
    _attachments(volume)[:] = [] if value is None else [value]


def attach_volume(
    self: EBSBackend, volume_id: str, instance_id: str, device_path: str, delete_on_termination: bool = False
) -> VolumeAttachment:
    """AttachVolume as AWS documents it (also used by RunInstances for the volumes it creates)."""
    with LOCK:
        volume = self.get_volume(volume_id)
        instance = self.get_instance(instance_id)  # type: ignore[attr-defined]
        attached = _attachments(volume)
        if _creating(volume):
            # AWS: "IncorrectState: vol-… is not 'available'." while the volume is still creating.
            raise refuse("IncorrectState", f"{volume_id} is not 'available'.")
        if instance.state not in ("running", "stopped") and not getattr(_LAUNCH, "active", False):
            # AWS attaches to a running or stopped instance only (a pending one: "… is not 'running'.").
            raise refuse("IncorrectState", f"Instance '{instance_id}' is not 'running'.")
        if any(a.instance.id == instance_id for a in attached):
            raise refuse("VolumeInUse", f"{volume_id} is already attached to instance {instance_id}")
        if attached and not _true(volume.multi_attach_enabled):
            raise refuse("VolumeInUse", f"{volume_id} is already attached to an instance")
        if len(attached) >= MAX_MULTI_ATTACH:
            raise refuse(
                "AttachmentLimitExceeded",
                f"Volume {volume_id} is attached to the maximum of {MAX_MULTI_ATTACH} instances",
            )
        if volume.zone and volume.zone.name != instance._placement.zone:
            raise refuse(
                "InvalidVolume.ZoneMismatch",
                f"The volume '{volume_id}' is not in the same availability zone as instance '{instance_id}'",
            )
        if device_path in instance.block_device_mapping:
            raise refuse(
                "InvalidParameterValue",
                f"Invalid value '{device_path}' for unixDevice. "
                f"Attachment point {device_path} is already in use",
            )
        delay = timings.current().volume_attaching if instance.state == "running" else 0.0
        attachment = VolumeAttachment(volume, instance, device_path, "attaching" if delay > 0 else "attached")
        attachment.delete_on_termination = bool(delete_on_termination)  # type: ignore[attr-defined]
        attached.append(attachment)
        instance.block_device_mapping[device_path] = BlockDeviceType(
            volume_id=volume_id,
            # moto's DescribeInstances shows "in-use" as "attached" (and other states as they are);
            # an SSM node sees the device only once "in-use" (ssm_nodes._sync_devices)
            status="attaching" if delay > 0 else "in-use",
            size=volume.size,
            attach_time=attachment.attach_time,
            delete_on_termination=bool(delete_on_termination),
        )
    if delay > 0:
        timings.after(delay, lambda: _attached(attachment), f"attach {volume_id} to {instance_id}")
    else:
        _devices_changed(instance)
    return attachment


def _attached(attachment: VolumeAttachment) -> None:
    """attaching → attached: only now does the device appear on the instance (its SSM node)."""
    with LOCK:
        if attachment.status != "attaching":
            return  # detached (or the instance terminated) meanwhile
        attachment.status = "attached"
        mapping = attachment.instance.block_device_mapping.get(attachment.device)
        if mapping is not None and mapping.volume_id == attachment.volume.id:
            mapping.status = "in-use"
    _devices_changed(attachment.instance)


def detach_volume(
    self: EBSBackend, volume_id: str, instance_id: str | None, device_path: str | None
) -> VolumeAttachment:
    """DetachVolume of one attachment; a Multi-Attach volume needs the InstanceId."""
    with LOCK:
        volume = self.get_volume(volume_id)
        attached = _attachments(volume)
        if not attached:
            raise refuse("IncorrectState", f"Volume '{volume_id}' is in the 'available' state.")
        if not instance_id and _true(volume.multi_attach_enabled):
            raise refuse(
                "MissingParameter",
                "The request must contain the parameter InstanceId to detach a Multi-Attach enabled volume",
            )
        matches = [
            a
            for a in attached
            if (not instance_id or a.instance.id == instance_id)
            and (not device_path or a.device == device_path)
        ]
        if not matches:
            raise InvalidVolumeAttachmentError(volume_id, instance_id or attached[0].instance.id)
        attachment = matches[0]
        if attachment.status == "detaching":
            raise refuse("IncorrectState", f"Volume '{volume_id}' is in the 'detaching' state.")
        delay = timings.current().volume_detaching if attachment.instance.state == "running" else 0.0
        if delay > 0:
            # DetachVolume answers "detaching"; the volume stays in-use, attached to this instance
            # (and so not deletable) until the detachment completes. The device leaves the
            # instance at once (the OS sees it go first).
            attachment.status = "detaching"
            mapping = attachment.instance.block_device_mapping.get(attachment.device)
            if mapping is not None:
                mapping.status = "detaching"
        else:
            _remove_attachment(attachment)
    _devices_changed(attachment.instance)
    if delay > 0:
        what = f"detach {volume_id} from {attachment.instance.id}"
        timings.after(delay, lambda: _detached(attachment), what)
    return attachment


def _remove_attachment(attachment: VolumeAttachment) -> None:
    """(Caller holds LOCK.) The attachment is gone: from the volume and the instance's mapping."""
    attached = _attachments(attachment.volume)
    if attachment in attached:
        attached.remove(attachment)
    mapping = attachment.instance.block_device_mapping.get(attachment.device)
    if mapping is not None and mapping.volume_id == attachment.volume.id:
        attachment.instance.block_device_mapping.pop(attachment.device, None)
    attachment.status = "detached"


def _detached(attachment: VolumeAttachment) -> None:
    """detaching → detached."""
    with LOCK:
        if attachment.status != "detaching":
            return
        _remove_attachment(attachment)
    _devices_changed(attachment.instance)


def teardown_defaults(self: Instance) -> None:
    """TerminateInstances: detach this instance's attachments only; delete a DeleteOnTermination
    volume when no other instance keeps it attached.

    moto detached by device and deleted unconditionally, which emptied a Multi-Attach volume's
    attachments and raised InvalidVolume.NotFound for a volume already gone."""
    backend = self.ec2_backend
    with LOCK:
        for device, mapping in list(self.block_device_mapping.items()):
            self.block_device_mapping.pop(device, None)
            volume = backend.volumes.get(mapping.volume_id)
            if volume is None:
                continue
            attached = _attachments(volume)
            for gone in [a for a in attached if a.instance is self]:
                gone.status = "detached"  # an attaching/detaching transition still scheduled ends here
            attached[:] = [a for a in attached if a.instance is not self]
            if mapping.delete_on_termination and not attached:
                backend.volumes.pop(volume.id, None)
                ebs_data.delete_volume(volume.id)
    _devices_changed(self)


def attachments_of(volume: Volume) -> list[VolumeAttachment]:
    """(Caller holds LOCK.) The volume's attachments, every instance's (Multi-Attach)."""
    return list(_attachments(volume))


def devices_changed(instance: Instance) -> None:
    """An instance's devices changed (a volume attached, detached, or grown): its node follows."""
    _devices_changed(instance)


def _devices_changed(instance: Instance) -> None:
    """An SSM node's /dev/disk/by-id follows its instance's attachments (called outside LOCK)."""
    backend = instance.ec2_backend
    ssm_nodes.sync_devices(backend.account_id, backend.region_name, instance.id)


_volume_filter = Volume.get_filter_value


def volume_filter_value(self: Volume, filter_name: str, method_name: str | None = None) -> Any:
    """``attachment.*`` filters match any of the volume's attachments (moto: only the one)."""
    getters: dict[str, Callable[[Any], Any]] = {
        "attachment.instance-id": lambda a: a.instance.id,
        "attachment.status": lambda a: a.status,
        "attachment.device": lambda a: a.device,
        "attachment.attach-time": lambda a: a.attach_time,
        "attachment.delete-on-termination": lambda a: str(getattr(a, "delete_on_termination", False)).lower(),
    }
    if filter_name in getters:
        return [getters[filter_name](a) for a in _attachments(self)]
    if filter_name == "multi-attach-enabled":
        return str(_true(self.multi_attach_enabled)).lower()
    return _volume_filter(self, filter_name, method_name)


# --- Snapshots: pending → completed/error, limits, events -----------------------------------


def _get_status(snapshot: Snapshot) -> str:
    status: str = snapshot.__dict__.get("vsa_status", "completed")
    return status


def _set_status(snapshot: Snapshot, value: str) -> None:
    snapshot.__dict__["vsa_status"] = value


def _progress(snapshot: Snapshot) -> str:
    status = _get_status(snapshot)
    if status == "completed":
        return "100%"
    if status == "error":
        return str(snapshot.__dict__.get("vsa_progress", "0%"))
    started, duration = snapshot.__dict__.get("vsa_timing", (time.monotonic(), 0.0))
    fraction = (time.monotonic() - started) / duration if duration > 0 else 1.0
    return f"{min(99, int(fraction * 100))}%"


def _state_message(snapshot: Snapshot) -> str | None:
    """DescribeSnapshots' StateMessage: why a copy ended in ``error`` (none otherwise)."""
    message = snapshot.__dict__.get("vsa_state_message") if _get_status(snapshot) == "error" else None
    return str(message) if message else None


def _check_limits(backend: EBSBackend, volumes: Iterable[Volume]) -> None:
    now = time.monotonic()
    for volume in volumes:
        last = STATE.last_snapshot_at.get(volume.id)
        if last is not None and now - last < SETTINGS.snapshot_rate_seconds:
            raise refuse(
                "SnapshotCreationPerVolumeRateExceeded",
                "The rate limit for creating concurrent snapshots of an EBS volume has been exceeded. "
                "Wait at least 15 seconds between concurrent volume snapshots.",
            )
        # Snapshots in error count too: "check that you do not have snapshots that are in an
        # incomplete state, such as 'error', which count against your concurrent snapshot limit".
        incomplete = [
            s for s in backend.snapshots.values() if s.volume is volume and s.status in ("pending", "error")
        ]
        if len(incomplete) >= CONCURRENT_SNAPSHOTS.get(volume.volume_type, DEFAULT_CONCURRENT_SNAPSHOTS):
            raise refuse(
                "ConcurrentSnapshotLimitExceeded",
                "You've reached the limit on the number of concurrent snapshots you can create on the "
                "specified volume. Wait until the 'pending' requests complete, and check that you do not "
                "have snapshots that are in an incomplete state, such as 'error', which count against "
                "your concurrent snapshot limit.",
            )


def start_pending(snapshot: Snapshot, *, of_volume: bool = True, outcome: str = "completed") -> None:
    """Put a new snapshot into ``pending`` and schedule its end, ``outcome`` (caller holds LOCK).
    A snapshot of a volume counts toward that volume's creation rate; a copy (``of_volume``
    False) does not. Copies take as long as snapshots: the same setting and profile entry."""
    duration = SETTINGS.snapshot_seconds
    if duration is None:
        duration = timings.current().snapshot_pending
    snapshot.status = "pending"
    snapshot.__dict__["vsa_timing"] = (time.monotonic(), duration)
    STATE.snapshots[snapshot.id] = snapshot
    if of_volume:
        STATE.last_snapshot_at[snapshot.volume.id] = time.monotonic()
    timer = threading.Timer(duration, _finish, (snapshot.id, outcome))
    timer.daemon = True
    timer.start()


_moto_create_snapshot = EBSBackend.create_snapshot


def create_snapshot(
    self: EBSBackend,
    volume_id: str,
    description: str,
    owner_id: str | None = None,
    from_ami: str | None = None,
) -> Snapshot:
    """CreateSnapshot with AWS's per-volume limits and a pending phase; the volume's blocks are
    copied before it answers. AMI snapshots as moto makes them: without data (those of moto's
    built-in AMIs, well over a thousand per region, are of volumes nothing wrote)."""
    if from_ami:
        return _moto_create_snapshot(self, volume_id, description, owner_id, from_ami)
    with LOCK:
        _check_limits(self, [self.get_volume(volume_id)])
        snapshot = _moto_create_snapshot(self, volume_id, description, owner_id)
        _take_data(self, [snapshot])
        start_pending(snapshot)
        return snapshot


def _take_data(backend: EBSBackend, snapshots: list[Snapshot]) -> None:
    """(Caller holds LOCK.) Copy the volumes' blocks into the new snapshots, all at one instant
    (``ebs_data.take_snapshots``), and record each volume's size then; a copy that fails takes
    the snapshots back, so the call fails with nothing created."""
    try:
        ebs_data.take_snapshots((s.volume.id, int(s.volume.size), s.id) for s in snapshots)
    except OSError:
        for snapshot in snapshots:
            backend.snapshots.pop(snapshot.id, None)
            ebs_data.delete_snapshot(snapshot.id)
        raise
    for snapshot in snapshots:
        snapshot.__dict__["vsa_volume_size"] = int(snapshot.volume.size)


def _volume_size(snapshot: Snapshot) -> int:
    """The size of the snapshot's volume when the snapshot was taken (moto: the volume's now)."""
    return int(snapshot.__dict__.get("vsa_volume_size", snapshot.volume.size))


def create_snapshots(
    backend: EBSBackend,
    *,
    instance_id: str,
    exclude_boot: bool,
    exclude_volume_ids: Iterable[str],
    description: str,
    tags: dict[str, str],
    copy_volume_tags: bool,
) -> list[Snapshot]:
    """CreateSnapshots: one crash-consistent set of the instance's volumes (all or none)."""
    with LOCK:
        instance = backend.get_instance(instance_id)  # type: ignore[attr-defined]
        excluded = set(exclude_volume_ids)
        volumes = [
            backend.get_volume(mapping.volume_id)
            for device, mapping in instance.block_device_mapping.items()
            if not (exclude_boot and _is_boot_device(instance, device)) and mapping.volume_id not in excluded
        ]
        _check_limits(backend, volumes)
        snapshots = []
        for volume in volumes:
            snapshot = _moto_create_snapshot(backend, volume.id, description)
            if copy_volume_tags:
                snapshot.add_tags({t["key"]: t["value"] for t in volume.get_tags()})
            snapshot.add_tags(tags)
            snapshots.append(snapshot)
        _take_data(backend, snapshots)  # crash-consistent across the instance: one instant
        for snapshot in snapshots:
            start_pending(snapshot)
        group = SnapshotSet(snapshots, start_time=_now())
        for snapshot in snapshots:
            STATE.sets[snapshot.id] = group
        return snapshots


def _is_boot_device(instance: Instance, device: str) -> bool:
    # moto attaches the default root volume as /dev/sda1 whatever the AMI's root device name
    # (ami-12c6146b says /dev/xvda): both count as the boot volume.
    return device in (instance.root_device_name, "/dev/sda1")


def fail_snapshot(snapshot_id: str) -> dict[str, Any]:
    with LOCK:
        snapshot = STATE.snapshots.get(snapshot_id)
        if snapshot is None:
            raise KeyError(f"no snapshot {snapshot_id!r} created through CreateSnapshot(s) or CopySnapshot")
        if snapshot.status != "pending":
            raise ValueError(f"snapshot {snapshot_id} is {snapshot.status}, not pending")
    _finish(snapshot_id, "error")
    return {"SnapshotId": snapshot_id, "State": "error"}


def _arn(snapshot: Snapshot, kind: str, resource_id: str) -> str:
    # The documented event examples use ARNs without the account (arn:aws:ec2:<region>::snapshot/...).
    return f"arn:aws:ec2:{snapshot.ec2_backend.region_name}::{kind}/{resource_id}"


def _finish(snapshot_id: str, status: str) -> None:
    """A pending snapshot ends (timer: completed; fail_snapshot: error); emit what AWS emits."""
    events: list[dict[str, Any]] = []
    with LOCK:
        snapshot = STATE.snapshots.get(snapshot_id)
        if snapshot is None or snapshot.status != "pending":
            return
        snapshot.__dict__["vsa_progress"] = _progress(snapshot)
        snapshot.status = status
        snapshot.__dict__["vsa_end_time"] = _now()
        if status == "error" and "vsa_copy_of" in snapshot.__dict__:
            # DescribeSnapshots' StateMessage: "If a snapshot copy operation fails ... this field
            # displays error state details" (EC2 API Reference, Snapshot)
            snapshot.__dict__.setdefault("vsa_state_message", "Snapshot copy failed")
        if snapshot.id not in snapshot.ec2_backend.snapshots:
            return  # deleted while pending: nobody to notify
        group = STATE.sets.get(snapshot_id)
        if "vsa_copy_of" in snapshot.__dict__:
            events.append(_copy_event(snapshot))
        elif group is None:
            events.append(_snapshot_event(snapshot))
        elif not group.emitted and all(s.status != "pending" for s in group.snapshots):
            group.emitted = True
            events.append(_snapshots_event(group))
    for event in events:
        emit(**event)


def _snapshot_event(snapshot: Snapshot) -> dict[str, Any]:
    failed = snapshot.status == "error"
    return {
        "account_id": snapshot.ec2_backend.account_id,
        "region": snapshot.ec2_backend.region_name,
        "source": "aws.ec2",
        "detail_type": "EBS Snapshot Notification",
        "resources": [_arn(snapshot, "snapshot", snapshot.id)],
        "detail": {
            "event": "createSnapshot",
            "result": "failed" if failed else "succeeded",
            "cause": f"Snapshot {snapshot.id} is in status error" if failed else "",
            "request-id": "",
            "snapshot_id": _arn(snapshot, "snapshot", snapshot.id),
            "source": _arn(snapshot, "volume", snapshot.volume.id),
            "startTime": snapshot.start_time,
            "endTime": snapshot.__dict__["vsa_end_time"],
        },
    }


def _copy_event(snapshot: Snapshot) -> dict[str, Any]:
    """``copySnapshot`` ("Amazon EventBridge events for Amazon EBS", Copy snapshot): in the
    destination Region, ``source`` the source snapshot's ARN; a failed copy's cause is its state
    message ("Source snapshot ID is not valid" for a source the copy could not read)."""
    failed = snapshot.status == "error"
    arn = _arn(snapshot, "snapshot", snapshot.id)
    detail: dict[str, Any] = {
        "event": "copySnapshot",
        "result": "failed" if failed else "succeeded",
        "cause": snapshot.__dict__.get("vsa_state_message", "") if failed else "",
        "request-id": "",
        "snapshot_id": arn,
        "source": snapshot.__dict__["vsa_copy_of"],
        "startTime": snapshot.start_time,
        "endTime": snapshot.__dict__["vsa_end_time"],
    }
    if not failed:
        detail["incremental"] = str(bool(snapshot.__dict__.get("vsa_incremental"))).lower()
        detail["transferType"] = "standard"
    return {
        "account_id": snapshot.ec2_backend.account_id,
        "region": snapshot.ec2_backend.region_name,
        "source": "aws.ec2",
        "detail_type": "EBS Snapshot Notification",
        "resources": [arn],
        "detail": detail,
    }


def _snapshots_event(group: SnapshotSet) -> dict[str, Any]:
    first = group.snapshots[0]
    failed = [s for s in group.snapshots if s.status == "error"]
    return {
        "account_id": first.ec2_backend.account_id,
        "region": first.ec2_backend.region_name,
        "source": "aws.ec2",
        "detail_type": "EBS Multi-Volume Snapshots Completion Status",
        "resources": [_arn(s, "snapshot", s.id) for s in group.snapshots],
        "detail": {
            "event": "createSnapshots",
            "result": "failed" if failed else "succeeded",
            "cause": f"Snapshot {failed[0].id} is in status error" if failed else "",
            "request-id": "",
            "startTime": group.start_time,
            "endTime": _now(),
            "snapshots": [
                {
                    "snapshot_id": _arn(s, "snapshot", s.id),
                    "source": _arn(s, "volume", s.volume.id),
                    "status": s.status,
                }
                for s in group.snapshots
            ],
        },
    }


# --- Response templates: moto's XML rendered one attachment and fixed snapshot progress ------

_ATTACHMENTS_XML = """<attachmentSet>
  {% for attachment in volume.attachments %}
    <item>
      <volumeId>{{ volume.id }}</volumeId>
      <instanceId>{{ attachment.instance.id }}</instanceId>
      <device>{{ attachment.device }}</device>
      <status>{{ attachment.status }}</status>
      <attachTime>{{ attachment.attach_time }}</attachTime>
      <deleteOnTermination>{{ 'true' if attachment.delete_on_termination else 'false' }}</deleteOnTermination>
    </item>
  {% endfor %}
</attachmentSet>"""
_MULTI_ATTACH_XML = (
    "<multiAttachEnabled>{{ 'true' if volume.multi_attach_enabled|string|lower == 'true' "
    "else 'false' }}</multiAttachEnabled>"
)


def _patch_templates() -> None:
    multi_attach = re.compile(r"\{% if volume\.multi_attach_enabled %\}.*?\{% endif %\}", re.S)
    for name in ("CREATE_VOLUME_RESPONSE", "DESCRIBE_VOLUMES_RESPONSE"):
        text = multi_attach.sub(_MULTI_ATTACH_XML, getattr(templates, name))
        text = re.sub(r"<attachmentSet>.*?</attachmentSet>", _ATTACHMENTS_XML, text, flags=re.S)
        setattr(templates, name, text)
    for name in ("CREATE_SNAPSHOT_RESPONSE", "CREATE_SNAPSHOTS_RESPONSE", "DESCRIBE_SNAPSHOTS_RESPONSE"):
        text = getattr(templates, name).replace(
            "<status>pending</status>", "<status>{{ snapshot.status }}</status>"
        )
        text = re.sub(r"<progress>\d+%</progress>", "<progress>{{ snapshot.progress }}</progress>", text)
        text = text.replace("{{ snapshot.volume.size }}", "{{ snapshot.volume_size }}")
        if name == "DESCRIBE_SNAPSHOTS_RESPONSE":  # StateMessage, whose XML name is statusMessage
            text = text.replace(
                "<status>{{ snapshot.status }}</status>",
                "<status>{{ snapshot.status }}</status>{% if snapshot.state_message %}"
                "<statusMessage>{{ snapshot.state_message }}</statusMessage>{% endif %}",
            )
        setattr(templates, name, text)


_applied = False


class SnapshotNotFoundError(EC2ClientError):
    def __init__(self, snapshot_id: str) -> None:
        super().__init__("InvalidSnapshot.NotFound", f"The snapshot '{snapshot_id}' does not exist.")


def _snapshot_not_found_names_the_snapshot(original: Any, ids_of: Any) -> Any:
    """moto raises InvalidSnapshot.NotFound with an empty message ("as AWS did in 2014"); AWS
    answers "The snapshot 'snap-…' does not exist." An empty message also broke LocalStack's
    Step Functions: an aws-sdk:ec2:describeSnapshots task for a deleted snapshot ended the
    execution with States.Runtime (KeyError 'Message') instead of a catchable TaskFailed.
    Pinned by tests/localcloud/test_stepfunctions.py."""

    def wrapped(self: EBSBackend, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, *args, **kwargs)
        except InvalidSnapshotIdError:
            missing = [i for i in ids_of(*args, **kwargs) if i not in self.snapshots]
            raise SnapshotNotFoundError(missing[0] if missing else "") from None

    return wrapped


def _freeing_data(original: Any) -> Any:
    """DeleteSnapshot (once every check let it through) frees the snapshot's data."""

    def delete_snapshot(self: EBSBackend, snapshot_id: str) -> Any:
        deleted = original(self, snapshot_id)
        ebs_data.delete_snapshot(snapshot_id)
        return deleted

    return delete_snapshot


def apply_patches() -> None:
    """Patch moto's EBS model once (idempotent)."""
    global _applied
    with LOCK:
        if _applied:
            return
        Volume.attachments = property(_attachments)  # type: ignore[attr-defined]
        Volume.status = property(_volume_status)  # type: ignore[assignment,method-assign]
        EBSBackend.create_volume = create_volume  # type: ignore[method-assign]
        EBSBackend.delete_volume = delete_volume  # type: ignore[method-assign]
        Instance.add_block_device = _launching(Instance.add_block_device)  # type: ignore[method-assign]
        Instance.setup_defaults = _launching(Instance.setup_defaults)  # type: ignore[method-assign]
        Volume.attachment = property(_first_attachment, _set_attachment)  # type: ignore[assignment,method-assign]
        Volume.get_filter_value = volume_filter_value  # type: ignore[method-assign]
        Snapshot.status = property(_get_status, _set_status)  # type: ignore[assignment,method-assign]
        Snapshot.progress = property(_progress)  # type: ignore[attr-defined]
        Snapshot.volume_size = property(_volume_size)  # type: ignore[assignment,method-assign]
        Snapshot.state_message = property(_state_message)  # type: ignore[attr-defined]
        EBSBackend.attach_volume = attach_volume  # type: ignore[assignment,method-assign]
        EBSBackend.detach_volume = detach_volume  # type: ignore[assignment,method-assign]
        EBSBackend.create_snapshot = create_snapshot  # type: ignore[method-assign]
        EBSBackend.delete_snapshot = _freeing_data(EBSBackend.delete_snapshot)  # type: ignore[method-assign]
        EBSBackend.describe_snapshots = _snapshot_not_found_names_the_snapshot(  # type: ignore[method-assign]
            EBSBackend.describe_snapshots, lambda snapshot_ids=None, filters=None: snapshot_ids or []
        )
        for name in ("get_snapshot", "delete_snapshot"):
            setattr(
                EBSBackend,
                name,
                _snapshot_not_found_names_the_snapshot(
                    getattr(EBSBackend, name), lambda snapshot_id: [snapshot_id]
                ),
            )
        Instance.teardown_defaults = teardown_defaults  # type: ignore[method-assign]
        _patch_templates()
        _applied = True
