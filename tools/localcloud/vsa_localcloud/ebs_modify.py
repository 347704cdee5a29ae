"""ModifyVolume (Elastic Volumes) as AWS documents it, patched into moto's EBS model.

moto applies a modification at once (the new size and IOPS are the volume's the moment
ModifyVolume returns), accepts any number of them, shrinks a volume if asked, and answers every
modification ``completed`` (100 %) in DescribeVolumesModifications, the whole history of each
volume. AWS instead:

* **one modification at a time.** ModifyVolume (EC2 API reference,
  https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_ModifyVolume.html): "After you
  initiate a volume modification, you must wait for that modification to reach the completed
  state before you can initiate another modification for the same volume." Refused with
  ``IncorrectModificationState``, "Volume vol-… cannot be modified in modification state
  MODIFYING" (or OPTIMIZING), the message AWS answers (as operators have logged it).
* **at most four modifications per volume in a rolling 24-hour period.** The same page: "You
  can modify a volume up to four times within a rolling 24-hour period, as long as the volume
  is in the in-use or available state, and all previous modifications for that volume are
  complete." Older text of that page (and the message of the error AWS returned then, "Wait at
  least 6 hours between modifications per EBS volume") described a 6-hour cooldown after each
  modification; this follows the current API reference. The fifth is refused with
  ``VolumeModificationRateExceeded`` (the error code AWS returns for the per-volume
  modification rate; its message here states the current rule).
* **states over time.** "Monitor the progress of Amazon EBS volume modifications"
  (https://docs.aws.amazon.com/ebs/latest/userguide/monitoring-volume-modifications.html): "The
  volume enters the modifying state, the optimizing state, and finally the completed state"; "Size
  increases take effect once the volume modification reaches the optimizing state". Here a
  modification is ``modifying`` for the latency profile's ``volume_modifying`` seconds, then
  ``optimizing`` (the volume now has its new size, IOPS and type) for ``volume_optimizing``
  seconds, then ``completed`` with its end time. The fast profile (both 0) completes within the
  call, as before. On ``optimizing`` the volume's data file grows in place (``ebs_data``) and so
  its device on every instance it is attached to (a managed node's link to that file:
  ``ssm_nodes.sync_devices``), as an NVMe EBS device's capacity changes on a Nitro instance
  without a detach ("Extend the file system after resizing an EBS volume": the OS sees the new
  size; the file system is the user's to extend).
* **DescribeVolumesModifications** answers the most recent modification of each volume only
  (API reference: "If a volume has been modified more than once, the output includes only the
  most recent modification request"), with its real state and progress; ``modification-state``
  filters on it. A volume named in ``VolumeIds`` that was never modified fails the call with
  ``InvalidVolumeModification.NotFound`` ("Modification for volume 'vol-…' does not exist.", as
  EC2 answers it); filters (``volume-id``) leave such a volume out instead.
* **no shrinking, io2's ranges.** "New size cannot be smaller than existing size"
  (``InvalidParameterValue``); io2 from 4 to 65,536 GiB, 100 to 256,000 IOPS, at most 1,000
  IOPS per GiB ("Amazon EBS Provisioned IOPS SSD volumes"), with the messages EC2 answers for a
  value out of range.
"""

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

from moto.ec2.models.elastic_block_store import EBSBackend, Volume, VolumeModification
from moto.ec2.responses import elastic_block_store as templates

from vsa_localcloud import ebs_data, ebs_model, timings
from vsa_localcloud.ebs_model import LOCK, refuse

MAX_MODIFICATIONS = 4  # per volume, "within a rolling 24-hour period" (API_ModifyVolume)
WINDOW_SECONDS = 24 * 3600.0


class _Limits(TypedDict):
    size: tuple[int, int]  # GiB
    iops: tuple[int, int]
    iops_per_gib: int


IO2: _Limits = {"size": (4, 65536), "iops": (100, 256000), "iops_per_gib": 1000}
_started: dict[str, list[float]] = {}  # volume id -> monotonic start times of its modifications


def _state(modification: VolumeModification) -> str:
    state: str = modification.__dict__.get("vsa_state", "completed")
    return state


def _progress(modification: VolumeModification) -> int:
    state = _state(modification)
    if state == "completed":
        return 100
    if state == "modifying":
        return 0
    started, duration = modification.__dict__.get("vsa_optimizing", (time.monotonic(), 0.0))
    fraction = (time.monotonic() - started) / duration if duration > 0 else 1.0
    return max(1, min(99, int(fraction * 100)))


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _check_ranges(volume: Volume, size: int | None, iops: int | None, volume_type: str | None) -> None:
    if size is not None and size < volume.size:
        raise refuse("InvalidParameterValue", "New size cannot be smaller than existing size")
    if (volume_type or volume.volume_type) != "io2":
        return
    size, iops = size or volume.size, iops or volume.iops
    low, high = IO2["size"]
    if size > high:
        raise refuse("InvalidParameterValue", f"Volume of {size}GiB is too large; maximum is {high}GiB.")
    if size < low:
        raise refuse("InvalidParameterValue", f"Volume of {size}GiB is too small; minimum is {low}GiB.")
    if iops is None:
        return
    low, high = IO2["iops"]
    if iops > high:
        raise refuse("InvalidParameterValue", f"Volume iops of {iops} is too high; maximum is {high}.")
    if iops < low:
        raise refuse("InvalidParameterValue", f"Volume iops of {iops} is too low; minimum is {low}.")
    if iops > size * IO2["iops_per_gib"]:
        raise refuse(
            "InvalidParameterValue",
            f"Iops to volume size ratio of {iops / size:.6f} is too high; "
            f"maximum is {IO2['iops_per_gib']:.6f}.",
        )


def modify_volume(
    self: EBSBackend,
    volume_id: str,
    target_size: int | None = None,
    target_volume_type: str | None = None,
    target_iops: int | None = None,
    target_throughput: int | None = None,
    target_multi_attach_enabled: bool | None = None,
) -> Volume:
    size = int(target_size) if target_size is not None else None
    iops = int(target_iops) if target_iops is not None else None
    with LOCK:
        volume = self.get_volume(volume_id)
        if volume.status not in ("available", "in-use"):
            raise refuse(
                "IncorrectState",
                f"Volume {volume_id} must be in the available or in-use state to be modified.",
            )
        latest = volume.modifications[-1] if volume.modifications else None
        if latest is not None and _state(latest) != "completed":
            raise refuse(
                "IncorrectModificationState",
                f"Volume {volume_id} cannot be modified in modification state {_state(latest).upper()}",
            )
        now = time.monotonic()
        recent = [t for t in _started.get(volume_id, []) if now - t < WINDOW_SECONDS]
        if len(recent) >= MAX_MODIFICATIONS:
            again = datetime.now(UTC) + timedelta(seconds=WINDOW_SECONDS - (now - recent[0]))
            raise refuse(
                "VolumeModificationRateExceeded",
                "You've reached the maximum modification rate per volume limit. A volume can be modified "
                f"up to {MAX_MODIFICATIONS} times within a rolling 24-hour period; {volume_id} can be "
                f"modified again after {again.strftime('%Y-%m-%dT%H:%M:%SZ')}.",
            )
        _check_ranges(volume, size, iops, target_volume_type)
        # moto's VolumeModification writes the target IOPS into the volume at once: keep the
        # original until the modification reaches ``optimizing``.
        original_iops = volume.iops
        modification = VolumeModification(
            volume=volume,
            target_size=size,
            target_volume_type=target_volume_type,
            target_iops=iops,
            target_throughput=target_throughput,
            target_multi_attach_enabled=target_multi_attach_enabled,
        )
        volume.iops = original_iops
        modification.end_time = None  # type: ignore[assignment]
        modification.__dict__["vsa_state"] = "modifying"
        volume.modifications.append(modification)
        _started[volume_id] = [*recent, now]
        profile = timings.current()
    timings.after(
        profile.volume_modifying,
        lambda: _optimizing(modification, profile.volume_optimizing),
        f"modify {volume_id}: modifying",
    )
    return volume


def _optimizing(modification: VolumeModification, duration: float) -> None:
    """modifying → optimizing: the new size (and IOPS, type …) are the volume's from now on."""
    with LOCK:
        volume = modification.volume
        if modification.target_size:
            volume.size = modification.target_size
        if modification.target_volume_type:
            volume.volume_type = modification.target_volume_type
        if modification.target_iops:
            volume.iops = modification.target_iops
        if modification.target_throughput:
            volume.throughput = modification.target_throughput
        if modification.target_multi_attach_enabled is not None:
            volume.multi_attach_enabled = modification.target_multi_attach_enabled
        modification.__dict__["vsa_state"] = "optimizing"
        modification.__dict__["vsa_optimizing"] = (time.monotonic(), duration)
        ebs_data.ensure_volume(volume.id, int(volume.size))  # its data file grows in place
        instances = []
        for attachment in ebs_model.attachments_of(volume):
            mapping = attachment.instance.block_device_mapping.get(attachment.device)
            if mapping is not None and mapping.volume_id == volume.id:
                mapping.size = volume.size  # what the instance's device is as long as
                instances.append(attachment.instance)
    for instance in instances:  # (outside LOCK, as every device change)
        ebs_model.devices_changed(instance)
    timings.after(duration, lambda: _completed(modification), f"modify {volume.id}: optimizing")


def _completed(modification: VolumeModification) -> None:
    with LOCK:
        modification.__dict__["vsa_state"] = "completed"
        modification.end_time = _now()


_moto_filter = VolumeModification.get_filter_value


def _filter_value(self: VolumeModification, filter_name: str) -> Any:
    if filter_name == "modification-state":
        return _state(self)
    return _moto_filter(self, filter_name)


def describe_volumes_modifications(
    self: EBSBackend, volume_ids: list[str] | None = None, filters: Any = None
) -> list[VolumeModification]:
    """The most recent modification of each volume (moto: every modification ever made)."""
    from moto.ec2.utils import generic_filter

    with LOCK:
        volumes = self.describe_volumes(volume_ids)
        for volume in volumes if volume_ids else ():
            if not volume.modifications:
                # AWS: a volume asked for by id that was never modified fails the whole call
                raise refuse(
                    "InvalidVolumeModification.NotFound",
                    f"Modification for volume '{volume.id}' does not exist.",
                )
        found = [v.modifications[-1] for v in volumes if v.modifications]
    return list(generic_filter(filters, found)) if filters else found


def _patch_template() -> None:
    text = templates.DESCRIBE_VOLUMES_MODIFICATIONS_RESPONSE
    text = text.replace(
        "<endTime>{{ modification.end_time }}</endTime>",
        "{% if modification.end_time %}<endTime>{{ modification.end_time }}</endTime>{% endif %}",
    )
    text = text.replace(
        "<modificationState>completed</modificationState>",
        "<modificationState>{{ modification.state }}</modificationState>",
    )
    text = text.replace("<progress>100</progress>", "<progress>{{ modification.progress }}</progress>")
    templates.DESCRIBE_VOLUMES_MODIFICATIONS_RESPONSE = text


_applied = False
_apply_lock = threading.Lock()


def apply_patches() -> None:
    """Patch moto's ModifyVolume once (idempotent)."""
    global _applied
    with _apply_lock:
        if _applied:
            return
        VolumeModification.state = property(_state)  # type: ignore[attr-defined]
        VolumeModification.progress = property(_progress)  # type: ignore[attr-defined]
        VolumeModification.get_filter_value = _filter_value  # type: ignore[method-assign]
        EBSBackend.modify_volume = modify_volume  # type: ignore[method-assign]
        EBSBackend.describe_volumes_modifications = describe_volumes_modifications  # type: ignore[method-assign]
        _patch_template()
        _applied = True
