"""AWS::AutoScaling::AutoScalingGroup: ``Ref`` is the group name.

Create passes everything, lifecycle hooks included, to CreateAutoScalingGroup. Updates go
through UpdateAutoScalingGroup (sizes, launch template, zones, ...), CreateOrUpdateTags /
DeleteTags and PutLifecycleHook / DeleteLifecycleHook for the hook specifications. Delete
force-deletes the group (its instances are terminated, outstanding lifecycle actions dropped)
and waits until the group is gone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
    physical_name,
    present,
    success,
    unsupported_properties,
)

# Template property -> the API parameter it maps to (the same name, except Cooldown).
GROUP_PARAMS = {
    "LaunchTemplate": "LaunchTemplate",
    "LaunchConfigurationName": "LaunchConfigurationName",
    "MinSize": "MinSize",
    "MaxSize": "MaxSize",
    "DesiredCapacity": "DesiredCapacity",
    "AvailabilityZones": "AvailabilityZones",
    "VPCZoneIdentifier": "VPCZoneIdentifier",
    "Cooldown": "DefaultCooldown",
    "HealthCheckType": "HealthCheckType",
    "HealthCheckGracePeriod": "HealthCheckGracePeriod",
    "DefaultInstanceWarmup": "DefaultInstanceWarmup",
    "MaxInstanceLifetime": "MaxInstanceLifetime",
    "CapacityRebalance": "CapacityRebalance",
    "NewInstancesProtectedFromScaleIn": "NewInstancesProtectedFromScaleIn",
    "TerminationPolicies": "TerminationPolicies",
}
SUPPORTED = (*GROUP_PARAMS, "AutoScalingGroupName", "LifecycleHookSpecificationList", "Tags")
HOOK_KEYS = (
    "LifecycleHookName",
    "LifecycleTransition",
    "HeartbeatTimeout",
    "DefaultResult",
    "NotificationMetadata",
    "NotificationTargetARN",
    "RoleARN",
)
DELETING = "deleting"


def group_params(model: Model, keys: Any) -> Model:
    params = {GROUP_PARAMS[k]: model[k] for k in keys if model.get(k) is not None}
    if isinstance(params.get("VPCZoneIdentifier"), list):
        # A list in the template, a comma-separated string in the API.
        params["VPCZoneIdentifier"] = ",".join(params["VPCZoneIdentifier"])
    for flag in ("CapacityRebalance", "NewInstancesProtectedFromScaleIn"):
        if flag in params:
            params[flag] = is_true(params[flag])
    return params


def api_tags(name: str, tags: list[Model] | None) -> list[Model]:
    return [
        {
            "ResourceId": name,
            "ResourceType": "auto-scaling-group",
            "Key": str(t["Key"]),
            "Value": str(t["Value"]),
            "PropagateAtLaunch": is_true(t.get("PropagateAtLaunch")),
        }
        for t in tags or []
    ]


class AutoScalingGroupProvider(ResourceProvider[Model]):
    TYPE = "AWS::AutoScaling::AutoScalingGroup"
    SCHEMA = get_schema_path(Path(__file__))

    def _describe(self, request: ResourceRequest[Model], name: str) -> Model | None:
        groups = request.aws_client_factory.autoscaling.describe_auto_scaling_groups(
            AutoScalingGroupNames=[name]
        )
        return groups["AutoScalingGroups"][0] if groups["AutoScalingGroups"] else None

    def _sync_hooks(
        self, request: ResourceRequest[Model], name: str, before: list[Model], after: list[Model]
    ) -> None:
        """Make the group's hooks those of ``after``, given that they were ``before``.

        Also used right after CreateAutoScalingGroup with ``before`` empty: moto's
        CreateAutoScalingGroup ignores LifecycleHookSpecificationList, so hooks it did not
        create are put here (a no-op where the API honoured the list)."""
        autoscaling = request.aws_client_factory.autoscaling
        wanted = {h["LifecycleHookName"]: present(h, HOOK_KEYS) for h in after}
        existing = {
            h["LifecycleHookName"]
            for h in autoscaling.describe_lifecycle_hooks(AutoScalingGroupName=name)["LifecycleHooks"]
        }
        old = {h["LifecycleHookName"]: present(h, HOOK_KEYS) for h in before}
        for hook_name, hook in wanted.items():
            if hook_name not in existing or old.get(hook_name) != hook:
                autoscaling.put_lifecycle_hook(AutoScalingGroupName=name, **hook)
        for hook_name in old.keys() - wanted.keys():
            if hook_name in existing:
                autoscaling.delete_lifecycle_hook(AutoScalingGroupName=name, LifecycleHookName=hook_name)

    def create(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        model = request.desired_state
        if message := unsupported_properties(self.TYPE, model, SUPPORTED):
            return failed(message)
        autoscaling = request.aws_client_factory.autoscaling
        name = model["AutoScalingGroupName"] = physical_name(request, model.get("AutoScalingGroupName"), 255)
        params = group_params(model, GROUP_PARAMS)
        hooks = [present(h, HOOK_KEYS) for h in model.get("LifecycleHookSpecificationList") or []]
        if hooks:
            params["LifecycleHookSpecificationList"] = hooks
        if tags := api_tags(name, model.get("Tags")):
            params["Tags"] = tags
        autoscaling.create_auto_scaling_group(AutoScalingGroupName=name, **params)
        self._sync_hooks(request, name, [], hooks)
        return success(model, request)

    def read(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        name = request.desired_state["AutoScalingGroupName"]
        group = self._describe(request, name)
        if group is None:
            return not_found(self.TYPE, name)
        model = dict(request.desired_state)
        for prop, param in GROUP_PARAMS.items():
            if param in group and prop in model:
                model[prop] = group[param]
        return success(model, request)

    def update(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        model = request.desired_state
        if message := unsupported_properties(self.TYPE, model, SUPPORTED):
            return failed(message)
        previous = request.previous_state or {}
        name = model["AutoScalingGroupName"] = previous["AutoScalingGroupName"]
        autoscaling = request.aws_client_factory.autoscaling
        if keys := changed(previous, model, GROUP_PARAMS):
            params = group_params(model, keys)
            if params:
                autoscaling.update_auto_scaling_group(AutoScalingGroupName=name, **params)
        old_tags = {t["Key"]: t for t in api_tags(name, previous.get("Tags"))}
        new_tags = {t["Key"]: t for t in api_tags(name, model.get("Tags"))}
        if to_set := [t for k, t in new_tags.items() if old_tags.get(k) != t]:
            autoscaling.create_or_update_tags(Tags=to_set)
        if to_remove := [t for k, t in old_tags.items() if k not in new_tags]:
            autoscaling.delete_tags(Tags=to_remove)
        self._sync_hooks(
            request,
            name,
            previous.get("LifecycleHookSpecificationList") or [],
            model.get("LifecycleHookSpecificationList") or [],
        )
        return success(model, request)

    def delete(self, request: ResourceRequest[Model]) -> ProgressEvent[Model]:
        model = request.desired_state
        name = model.get("AutoScalingGroupName")
        if not name:
            return success({}, request)
        if not request.custom_context.get(DELETING):
            # Called again by the engine with this context while IN_PROGRESS.
            request.custom_context[DELETING] = True
            try:
                request.aws_client_factory.autoscaling.delete_auto_scaling_group(
                    AutoScalingGroupName=name, ForceDelete=True
                )
            except ClientError as e:
                if "not found" not in str(e).lower():
                    raise
        if self._describe(request, name) is not None:
            return in_progress(model, request)
        return success({}, request)
