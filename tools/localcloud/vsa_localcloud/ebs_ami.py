"""An AMI's root-device snapshot is in use while the AMI is registered, as on AWS.

EC2 API Reference, DeleteSnapshot: "You cannot delete a snapshot of the root device of an EBS
volume used by a registered AMI. You must first deregister the AMI before you can delete the
snapshot." The error is ``InvalidSnapshot.InUse`` ("The snapshot snap-… is currently in use by
ami-…").

moto's RegisterImage reads only Name and Description: the block device mappings are dropped, so
a snapshot an AMI was registered from could be deleted under it (moto refuses only snapshots it
made itself for CreateImage). Here RegisterImage remembers the snapshot of the mapping of
``RootDeviceName``, and DeleteSnapshot refuses it while that AMI is registered. DeregisterImage
(moto's) removes the AMI, and with it the refusal. Pinned by tests/localcloud/test_ebs.py.

What stays a gap: DescribeImages does not list the mappings, and RegisterImage does not check
that the snapshot exists.
"""

import re
from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import InvalidSnapshotInUse
from moto.ec2.models.elastic_block_store import EBSBackend
from moto.ec2.responses.amis import AmisResponse

_applied = False
_MAPPING = re.compile(r"^BlockDeviceMapping\.(\d+)\.(DeviceName|Ebs\.SnapshotId)$")


def root_snapshot(params: dict[str, Any]) -> str | None:
    """The snapshot of the mapping whose device is RootDeviceName, from RegisterImage's query
    parameters (``BlockDeviceMapping.N.DeviceName``, ``BlockDeviceMapping.N.Ebs.SnapshotId``)."""
    root = params.get("RootDeviceName")
    mappings: dict[str, dict[str, str]] = {}
    for key, value in params.items():
        if match := _MAPPING.match(key):
            mappings.setdefault(match.group(1), {})[match.group(2)] = value
    for mapping in mappings.values():
        if root and mapping.get("DeviceName") == root and mapping.get("Ebs.SnapshotId"):
            return mapping["Ebs.SnapshotId"]
    return None


def _register_image(self: AmisResponse) -> ActionResult:
    """moto's RegisterImage, keeping the root device's snapshot on the AMI."""
    name = self._get_param("Name")
    description = self._get_param("Description", "")
    self.error_on_dryrun()
    image = self.ec2_backend.register_image(name, description)
    params = {key: values[0] for key, values in self.querystring.items() if values}
    image.vsa_root_snapshot = root_snapshot(params)
    return ActionResult({"ImageId": image.id})


def _refusing_in_use(original: Any) -> Any:
    def delete_snapshot(self: EBSBackend, snapshot_id: str) -> Any:
        for ami in list(getattr(self, "amis", {}).values()):
            if getattr(ami, "vsa_root_snapshot", None) == snapshot_id:
                raise InvalidSnapshotInUse(snapshot_id, ami.id)
        return original(self, snapshot_id)

    return delete_snapshot


def apply_patches() -> None:
    """Patch moto once (idempotent)."""
    global _applied
    if _applied:
        return
    AmisResponse.register_image = _register_image  # type: ignore[method-assign]
    EBSBackend.delete_snapshot = _refusing_in_use(EBSBackend.delete_snapshot)  # type: ignore[method-assign]
    _applied = True
