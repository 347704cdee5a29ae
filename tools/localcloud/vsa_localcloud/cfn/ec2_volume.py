"""AWS::EC2::Volume: ``Ref`` and ``Fn::GetAtt VolumeId`` are the volume id.

Create waits until the volume is ``available``. Size, type, IOPS, throughput and Multi-Attach
change in place (ModifyVolume), tags through CreateTags/DeleteTags; the zone, encryption and
source snapshot cannot change on a volume, so they are create-only (a change replaces it).
"""

from __future__ import annotations

from pathlib import Path

from botocore.exceptions import ClientError
from localstack.services.cloudformation.provider_utils import get_schema_path
from localstack.services.cloudformation.resource_provider import (
    ProgressEvent,
    ResourceProvider,
    ResourceRequest,
)

from vsa_localcloud.cfn._util import (
    Model,
    changed,
    failed,
    in_progress,
    is_true,
    not_found,
    present,
    success,
    tag_diff,
    tag_list,
    unsupported_properties,
)

SUPPORTED = (
    "AutoEnableIO",
    "AvailabilityZone",
    "Encrypted",
    "Iops",
    "KmsKeyId",
    "MultiAttachEnabled",
    "OutpostArn",
    "Size",
    "SnapshotId",
    "Tags",
    "Throughput",
    "VolumeType",
    "VolumeId",
)
MODIFIABLE = ("Size", "VolumeType", "Iops", "Throughput", "MultiAttachEnabled")


class EC2VolumeProvider(ResourceProvider[Model]):
    TYPE = "AWS::EC2::Volume"
    SCHEMA = get_schema_path(Path(__file__))

    def create(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        model = request.desired_state
        ec2 = request.aws_client_factory.ec2
        if not model.get("VolumeId"):
            if message := unsupported_properties(self.TYPE, model, SUPPORTED):
                return failed(message)
            params = present(
                model,
                (
                    "AvailabilityZone",
                    "Encrypted",
                    "Iops",
                    "KmsKeyId",
                    "MultiAttachEnabled",
                    "OutpostArn",
                    "Size",
                    "SnapshotId",
                    "Throughput",
                    "VolumeType",
                ),
            )
            if tags := tag_list(model.get("Tags")):
                params["TagSpecifications"] = [{"ResourceType": "volume", "Tags": tags}]
            model["VolumeId"] = ec2.create_volume(**params)["VolumeId"]
            if "AutoEnableIO" in model:
                ec2.modify_volume_attribute(
                    VolumeId=model["VolumeId"], AutoEnableIO={"Value": is_true(model["AutoEnableIO"])}
                )
        # Called again by the engine with the model above while IN_PROGRESS.
        state = ec2.describe_volumes(VolumeIds=[model["VolumeId"]])["Volumes"][0]["State"]
        if state == "creating":
            return in_progress(model, request)
        if state != "available":
            return failed(f"volume {model['VolumeId']} is {state}", "NotStabilized")
        return success(model, request)

    def read(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        ec2 = request.aws_client_factory.ec2
        volume_id = request.desired_state["VolumeId"]
        try:
            volume = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]
        except ClientError:
            return not_found(self.TYPE, volume_id)
        model = present(
            volume,
            (
                "AvailabilityZone",
                "Encrypted",
                "Iops",
                "KmsKeyId",
                "MultiAttachEnabled",
                "OutpostArn",
                "Size",
                "SnapshotId",
                "Throughput",
                "VolumeType",
                "VolumeId",
            ),
        )
        model["Tags"] = volume.get("Tags", [])
        return success(model, request)

    def update(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        model = request.desired_state
        if message := unsupported_properties(self.TYPE, model, SUPPORTED):
            return failed(message)
        previous = request.previous_state or {}
        model["VolumeId"] = volume_id = previous["VolumeId"]
        ec2 = request.aws_client_factory.ec2
        if keys := changed(previous, model, MODIFIABLE):
            params = present(model, keys)
            if "MultiAttachEnabled" in keys:
                params["MultiAttachEnabled"] = is_true(model.get("MultiAttachEnabled"))
            ec2.modify_volume(VolumeId=volume_id, **params)
        if changed(previous, model, ("AutoEnableIO",)):
            ec2.modify_volume_attribute(
                VolumeId=volume_id, AutoEnableIO={"Value": is_true(model.get("AutoEnableIO"))}
            )
        to_set, to_remove = tag_diff(previous.get("Tags"), model.get("Tags"))
        if to_set:
            ec2.create_tags(Resources=[volume_id], Tags=[{"Key": k, "Value": v} for k, v in to_set.items()])
        if to_remove:
            ec2.delete_tags(Resources=[volume_id], Tags=[{"Key": k} for k in to_remove])
        return success(model, request)

    def delete(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        ec2 = request.aws_client_factory.ec2
        volume_id = request.desired_state.get("VolumeId")
        if volume_id:
            try:
                ec2.delete_volume(VolumeId=volume_id)
            except ClientError as e:
                if e.response["Error"]["Code"] != "InvalidVolume.NotFound":
                    raise
        return success({}, request)
