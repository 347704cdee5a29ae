"""AWS::AutoScaling::LifecycleHook: ``Ref`` is the hook name.

AWS's registry schema identifies a hook by (group name, hook name); this schema's
``primaryIdentifier`` is the hook name alone because LocalStack's engine makes the physical id
(what ``Ref`` returns) from the primary identifier, joining several with "-", and AWS documents
``Ref`` as the hook name. The group name stays in the resource's properties for read/delete.
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
    failed,
    not_found,
    physical_name,
    present,
    success,
    unsupported_properties,
)

KEYS = (
    "AutoScalingGroupName",
    "LifecycleHookName",
    "LifecycleTransition",
    "HeartbeatTimeout",
    "DefaultResult",
    "NotificationMetadata",
    "NotificationTargetARN",
    "RoleARN",
)


class LifecycleHookProvider(ResourceProvider[Model]):
    TYPE = "AWS::AutoScaling::LifecycleHook"
    SCHEMA = get_schema_path(Path(__file__))

    def _find(self, request: ResourceRequest[Model], group: str, name: str) -> Model | None:
        autoscaling = request.aws_client_factory.autoscaling
        try:
            hooks = autoscaling.describe_lifecycle_hooks(
                AutoScalingGroupName=group, LifecycleHookNames=[name]
            )
        except ClientError:
            return None
        return hooks["LifecycleHooks"][0] if hooks["LifecycleHooks"] else None

    def create(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        model = request.desired_state
        if message := unsupported_properties(self.TYPE, model, KEYS):
            return failed(message)
        model["LifecycleHookName"] = physical_name(request, model.get("LifecycleHookName"), 255)
        if self._find(request, model["AutoScalingGroupName"], model["LifecycleHookName"]):
            # PutLifecycleHook would silently overwrite it; CloudFormation refuses instead.
            return failed(f"{self.TYPE} {model['LifecycleHookName']} already exists", "AlreadyExists")
        request.aws_client_factory.autoscaling.put_lifecycle_hook(**present(model, KEYS))
        return success(model, request)

    def read(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        model = request.desired_state
        hook = self._find(request, model["AutoScalingGroupName"], model["LifecycleHookName"])
        if hook is None:
            return not_found(self.TYPE, model["LifecycleHookName"])
        return success(present(hook, KEYS), request)

    def update(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        model = request.desired_state
        if message := unsupported_properties(self.TYPE, model, KEYS):
            return failed(message)
        model["LifecycleHookName"] = (request.previous_state or {})["LifecycleHookName"]
        request.aws_client_factory.autoscaling.put_lifecycle_hook(**present(model, KEYS))
        return success(model, request)

    def delete(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        model = request.desired_state
        if model.get("LifecycleHookName") and model.get("AutoScalingGroupName"):
            try:
                request.aws_client_factory.autoscaling.delete_lifecycle_hook(
                    AutoScalingGroupName=model["AutoScalingGroupName"],
                    LifecycleHookName=model["LifecycleHookName"],
                )
            except ClientError as e:
                # The group (and with it the hook) may already be gone.
                if e.response["Error"]["Code"] != "ValidationError":
                    raise
        return success({}, request)
