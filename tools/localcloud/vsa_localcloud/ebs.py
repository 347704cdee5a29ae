"""EC2 provider with EBS behaving as AWS documents it.

* Multi-Attach: a volume keeps a list of attachments (io1/io2 only, up to 16 instances in the
  volume's AZ); DescribeVolumes/DescribeInstances, DetachVolume, DeleteVolume and
  TerminateInstances respect every attachment.
* Snapshots stay ``pending`` with a growing ``Progress`` before ``completed``, with AWS's
  per-volume limits and the EventBridge events EBS emits; CreateSnapshots honours its options.
* Volumes hold data: one sparse file each, shown on every instance it is attached to; a
  snapshot copies it during the call, a volume created from a snapshot starts with it
  (``ebs_data``).
* CopySnapshot copies the source's data (across Regions, and from another account that shares
  it), ``pending`` then ``completed``, refused for a source not ``completed``; sharing through
  ModifySnapshotAttribute, refused for the default EBS key (``ebs_copy``).
* ModifyVolume goes modifying → optimizing → completed, one at a time, at most four per volume
  in a rolling 24 hours (``ebs_modify``).
* Every instance state change is an ``EC2 Instance State-change Notification`` (``ec2_instances``).

The model changes live in ``ebs_model`` (patches of moto's EC2 backend, so RunInstances and
TerminateInstances agree); this module holds the API handlers that moto cannot express and the
control actions (``POST /_localcloud/ebs/<action>``).
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from localstack.aws.api import CommonServiceException, RequestContext, handler
from localstack.aws.api.ec2 import CreateSnapshotsRequest, CreateSnapshotsResult, CreateVolumeRequest, Volume
from localstack.services.ec2.provider import Ec2Provider, get_moto_backend
from localstack.services.moto import MotoFallbackDispatcher, call_moto
from localstack.services.plugins import Service
from moto.core.exceptions import RESTError

from vsa_localcloud import ebs_ami, ebs_copy, ebs_data, ebs_lock, ebs_model, ebs_modify, ec2_instances


@contextmanager
def _as_service_errors() -> Iterator[None]:
    """moto's errors raised outside ``call_moto`` become the same AWS error responses."""
    try:
        yield
    except RESTError as exc:
        raise CommonServiceException(exc.error_type, exc.message) from exc


class VsaEc2Provider(Ec2Provider):
    @handler("CreateVolume", expand=False)
    def create_volume(self, context: RequestContext, request: CreateVolumeRequest) -> Volume:
        volume_type = request.get("VolumeType") or "gp2"
        if request.get("MultiAttachEnabled") and volume_type not in ebs_model.MULTI_ATTACH_TYPES:
            # moto answers InvalidParameterDependency; EC2 reports a parameter that does not fit
            # the volume type as InvalidParameterCombination.
            raise CommonServiceException(
                "InvalidParameterCombination",
                f"Multi-Attach is supported only for io1 and io2 volumes, not {volume_type}",
            )
        volume: Volume = call_moto(context)
        return volume

    @handler("CreateSnapshots", expand=False)
    def create_snapshots(
        self, context: RequestContext, request: CreateSnapshotsRequest
    ) -> CreateSnapshotsResult:
        # moto ignores ExcludeDataVolumeIds and CopyTagsFromSource: done here on its backend.
        spec = request["InstanceSpecification"]
        tags = {
            tag["Key"]: tag["Value"]
            for tag_spec in request.get("TagSpecifications", [])
            if tag_spec.get("ResourceType", "snapshot") == "snapshot"
            for tag in tag_spec.get("Tags", [])
        }
        with _as_service_errors():
            snapshots = ebs_model.create_snapshots(
                get_moto_backend(context),
                instance_id=spec["InstanceId"],
                exclude_boot=bool(spec.get("ExcludeBootVolume")),
                exclude_volume_ids=spec.get("ExcludeDataVolumeIds", []),
                description=request.get("Description", ""),
                tags=tags,
                copy_volume_tags=request.get("CopyTagsFromSource") == "volume",
            )
        return {"Snapshots": [_snapshot_info(s) for s in snapshots]}

    @handler("LockSnapshot", expand=False)
    def lock_snapshot(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        snapshot = self._snapshot(context, request["SnapshotId"])
        return ebs_lock.lock(self._key(context, snapshot.id), snapshot.status, dict(request))

    @handler("UnlockSnapshot", expand=False)
    def unlock_snapshot(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        snapshot = self._snapshot(context, request["SnapshotId"])
        return ebs_lock.unlock(self._key(context, snapshot.id))

    @handler("DescribeLockedSnapshots", expand=False)
    def describe_locked_snapshots(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        states = [
            v
            for f in request.get("Filters", [])
            if f.get("Name") == "lock-state"
            for v in f.get("Values", [])
        ]
        found = ebs_lock.describe(
            context.account_id, context.region, list(request.get("SnapshotIds", [])), states
        )
        return {"Snapshots": found}

    @handler("CopySnapshot", expand=False)
    def copy_snapshot(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        _dry_run(request)
        with _as_service_errors():
            snapshot = ebs_copy.copy_snapshot(get_moto_backend(context), ebs_copy.CopyRequest.of(request))
        return {"SnapshotId": snapshot.id, "Tags": _tags(snapshot)}

    @handler("ModifySnapshotAttribute", expand=False)
    def modify_snapshot_attribute(self, context: RequestContext, request: dict[str, Any]) -> None:
        if request.get("Attribute", "createVolumePermission") != "createVolumePermission":
            call_moto(context)
            return
        _dry_run(request)
        with _as_service_errors():
            events = ebs_copy.modify_sharing(get_moto_backend(context), ebs_copy.SharingChange.of(request))
        ebs_copy.announce(events)

    @handler("DescribeSnapshotAttribute", expand=False)
    def describe_snapshot_attribute(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        snapshot = self._snapshot(context, request["SnapshotId"])
        if request["Attribute"] == "createVolumePermission":
            permissions = ebs_copy.create_volume_permissions(snapshot)
            return {"SnapshotId": snapshot.id, "CreateVolumePermissions": permissions}
        if request["Attribute"] == "productCodes":
            return {"SnapshotId": snapshot.id, "ProductCodes": []}
        answer: dict[str, Any] = call_moto(context)
        return answer

    @handler("DeleteSnapshot", expand=False)
    def delete_snapshot(self, context: RequestContext, request: dict[str, Any]) -> None:
        key = self._key(context, request["SnapshotId"])
        ebs_lock.refuse_deletion(key)
        call_moto(context)
        ebs_lock.forget(key)

    @staticmethod
    def _key(context: RequestContext, snapshot_id: str) -> tuple[str, str, str]:
        return (context.account_id, context.region, snapshot_id)

    @staticmethod
    def _snapshot(context: RequestContext, snapshot_id: str) -> Any:
        with _as_service_errors():
            return get_moto_backend(context).get_snapshot(snapshot_id)


def _dry_run(request: dict[str, Any]) -> None:
    """DryRun: "If you have the required permissions, the error response is DryRunOperation"
    (the IAM enforcement refuses the others before the provider runs)."""
    if request.get("DryRun"):
        raise CommonServiceException(
            "DryRunOperation", "Request would have succeeded, but DryRun flag is set.", status_code=412
        )


def _tags(snapshot: Any) -> list[dict[str, str]]:
    return [{"Key": t["key"], "Value": t["value"]} for t in snapshot.get_tags()]


def _snapshot_info(snapshot: Any) -> dict[str, Any]:
    return {
        "SnapshotId": snapshot.id,
        "VolumeId": snapshot.volume.id,
        "VolumeSize": snapshot.volume_size,  # the volume's size when the snapshot was taken
        "State": snapshot.status,
        "Progress": snapshot.progress,
        "StartTime": datetime.fromisoformat(snapshot.start_time.replace("Z", "+00:00")),
        "OwnerId": snapshot.owner_id,
        "Description": snapshot.description,
        "Encrypted": bool(snapshot.encrypted),
        "Tags": _tags(snapshot),
    }


def service() -> Service:
    ebs_model.apply_patches()
    ebs_ami.apply_patches()
    ebs_modify.apply_patches()
    ec2_instances.apply_patches()
    return Service.for_provider(VsaEc2Provider(), dispatch_table_factory=MotoFallbackDispatcher)


# POST /_localcloud/ebs/<action>
CONTROL: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    # {"snapshot_seconds": 2, "snapshot_rate_seconds": 0} or {"reset": true}; answers the settings
    "configure": ebs_model.configure,
    # {"SnapshotId": "snap-..."}: a pending snapshot goes to ``error`` (and its event is emitted)
    "fail_snapshot": lambda body: ebs_model.fail_snapshot(body["SnapshotId"]),
    # {"VolumeId": "vol-..."} or {"SnapshotId": "snap-..."}: where its data lives in the run
    # directory, its length and the bytes it takes ({"Path", "Exists", "Bytes", "AllocatedBytes"})
    "data_file": lambda body: ebs_data.describe(body.get("VolumeId"), body.get("SnapshotId")),
}
