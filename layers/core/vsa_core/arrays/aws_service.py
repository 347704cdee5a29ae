"""The AWS side of an array: validate a spec, converge AWS on it, report status, tear it down.

Thin by design: every decision (names, parameters, thresholds, what changed) is in
``vsa_core.arrays.plan``; this module reads what AWS holds into the same shapes, and sends the
calls ``plan.diff`` asks for. Clients are injected (or come from ``vsa_core.clients``).
The service accounts have no mypy-boto3 stubs installed for these five services, so the clients
are typed ``Any``.

Waiting: ``apply`` never waits (new owned volumes are answered ``creating``; the bootstrap attaches
each once available); ``teardown`` waits for the group to be gone and owned volumes to be
detached. That wait is bounded (``wait_delay_seconds`` x
``wait_max_attempts``, 5 minutes by default, inside a Lambda's 15) and end in a clear error.
"""

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from botocore.exceptions import ClientError, WaiterError

from vsa_core.arrays import plan
from vsa_core.arrays.plan import Change, Params, Resources
from vsa_core.arrays.spec import ARRAY_TAG, MULTI_ATTACH_LIMIT, OWNED_TAG, ArraySpec, RegisteredArray
from vsa_core.clients import client
from vsa_core.errors import ConflictError, InvalidSpecError, TeardownPendingError
from vsa_core.naming import backup_schedule_name, group_name, iops_alarm_name, launch_template_name

SERVING_STATES = ("InService", "Pending", "Pending:Wait", "Pending:Proceed")
"""Instances of the group that count as serving (or about to serve) controllers."""

"""Auto Scaling ships no waiters in botocore; this one is in botocore's own format."""

_GROUP_KEYS = (
    "LaunchTemplate",
    "MinSize",
    "MaxSize",
    "DesiredCapacity",
    "NewInstancesProtectedFromScaleIn",
    "DefaultCooldown",
)
_HOOK_KEYS = (
    "LifecycleHookName",
    "AutoScalingGroupName",
    "LifecycleTransition",
    "HeartbeatTimeout",
    "DefaultResult",
    "NotificationMetadata",
)
_ALARM_KEYS = (
    "AlarmName",
    "AlarmDescription",
    "ActionsEnabled",
    "Threshold",
    "ComparisonOperator",
    "EvaluationPeriods",
    "DatapointsToAlarm",
    "TreatMissingData",
)
_LT_DATA_KEYS = (
    "InstanceType",
    "ImageId",
    "MetadataOptions",
    "TagSpecifications",
    "NetworkInterfaces",
    "SecurityGroupIds",
    "IamInstanceProfile",
)


def _error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _tags(items: Iterable[Mapping[str, Any]] | None) -> dict[str, str]:
    return {str(t["Key"]): str(t["Value"]) for t in items or ()}


def _project(source: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    return {k: source[k] for k in keys if k in source}


def _problems_message(array_id: str, problems: list[str]) -> str:
    numbered = "; ".join(f"{i}) {p}" for i, p in enumerate(problems, start=1))
    return f"array {array_id}: {len(problems)} problem(s) to fix before it can be applied: {numbered}"


class ArrayService:
    """Validates, applies, reports and tears down one array's AWS resources."""

    def __init__(
        self,
        *,
        scheduler_role_arn: str,
        ec2: Any = None,
        autoscaling: Any = None,
        cloudwatch: Any = None,
        scheduler: Any = None,
        ssm: Any = None,
        wait_delay_seconds: int = 5,
        wait_max_attempts: int = 60,
    ) -> None:
        self._role_arn = scheduler_role_arn
        self._ec2 = ec2 or client("ec2")
        self._autoscaling = autoscaling or client("autoscaling")
        self._cloudwatch = cloudwatch or client("cloudwatch")
        self._scheduler = scheduler or client("scheduler")
        self._ssm = ssm or client("ssm")
        self._waiter_config = {"Delay": wait_delay_seconds, "MaxAttempts": wait_max_attempts}

    # --- validate ----------------------------------------------------------------------------

    def validate(self, spec: ArraySpec, current: RegisteredArray | None) -> None:
        """Read-only checks; every problem is collected and reported in one message.

        Raises ``InvalidSpecError`` when any problem is in the spec itself, else
        ``ConflictError`` when the spec conflicts with the array's running state.
        """
        problems: list[str] = []
        conflicts: list[str] = []
        if current is not None and current.spec.availability_zone != spec.availability_zone:
            conflicts.append(
                f"availabilityZone cannot change from {current.spec.availability_zone} to "
                f"{spec.availability_zone}: declare a new array in {spec.availability_zone} instead"
            )
        instances = self._group_instances(spec.array_id)
        problems += self._volume_problems(spec, {i["InstanceId"] for i in instances})
        problems += self._controller_problems(spec)
        problems += self._host_problems(spec)
        serving = [i["InstanceId"] for i in instances if i["LifecycleState"] in SERVING_STATES]
        if spec.max_controllers < len(serving):
            conflicts.append(
                f"maxControllers={spec.max_controllers} is below the {len(serving)} serving controllers "
                f"({', '.join(sorted(serving))}): scale the array in first (lower minControllers and wait "
                "for low demand) or keep maxControllers >= "
                f"{len(serving)}"
            )
        if problems:
            raise InvalidSpecError(_problems_message(spec.array_id, problems + conflicts))
        if conflicts:
            raise ConflictError(_problems_message(spec.array_id, conflicts))

    def _volume_problems(self, spec: ArraySpec, controllers: set[str]) -> list[str]:
        problems: list[str] = []
        ids = list(spec.existing_volume_ids)
        found = {v["VolumeId"]: v for v in self._describe_volumes([{"Name": "volume-id", "Values": ids}])}
        for volume_id in ids:
            volume = found.get(volume_id)
            if volume is None:
                problems.append(f"volume {volume_id} does not exist in this account and region: check the id")
                continue
            problems += self._volume_shape_problems(spec, volume, controllers)
        for name, observed in self._owned_volumes(spec.array_id).items():
            declared = next((v for v in spec.new_volumes if v.name == name), None)
            if declared is not None and declared.size_gib < observed["Size"]:
                problems.append(
                    f"volume {name}: sizeGiB {declared.size_gib} is below its current {observed['Size']} "
                    "GiB and EBS cannot shrink a volume: keep sizeGiB >= "
                    f"{observed['Size']}"
                )
        return problems

    @staticmethod
    def _volume_shape_problems(
        spec: ArraySpec, volume: Mapping[str, Any], controllers: set[str]
    ) -> list[str]:
        problems: list[str] = []
        volume_id = volume["VolumeId"]
        if volume["AvailabilityZone"] != spec.availability_zone:
            problems.append(
                f"volume {volume_id} is in {volume['AvailabilityZone']}, the array is in "
                f"{spec.availability_zone}: use a volume in {spec.availability_zone} (or snapshot and "
                "restore it there)"
            )
        if volume.get("VolumeType") != "io2" or not volume.get("MultiAttachEnabled", False):
            problems.append(
                f"volume {volume_id} is not io2 with Multi-Attach (it is {volume.get('VolumeType')}, "
                f"Multi-Attach {'on' if volume.get('MultiAttachEnabled') else 'off'}): use an io2 volume "
                "created with MultiAttachEnabled"
            )
        foreign = {a["InstanceId"] for a in volume.get("Attachments", [])} - controllers
        if len(foreign) + spec.max_controllers > MULTI_ATTACH_LIMIT:
            problems.append(
                f"volume {volume_id} is attached to {len(foreign)} other instance(s) "
                f"({', '.join(sorted(foreign))}); with maxControllers={spec.max_controllers} it would "
                f"exceed the {MULTI_ATTACH_LIMIT}-instance Multi-Attach limit: detach them or lower "
                "maxControllers"
            )
        return problems

    def _controller_problems(self, spec: ArraySpec) -> list[str]:
        settings = spec.controllers
        if settings.launch_template is not None:
            return self._launch_template_problems(spec)
        problems = self._foreign_template_problems(spec.array_id)
        try:
            images = self._ec2.describe_images(ImageIds=[settings.image_id])["Images"]
        except ClientError as error:
            if not _error_code(error).startswith("InvalidAMIID"):
                raise
            images = []
        if not images:
            problems.append(
                f"controllers.imageId {settings.image_id} does not exist: use an AMI in this region"
            )
        if settings.subnet_id is not None:
            try:
                subnets = self._ec2.describe_subnets(SubnetIds=[settings.subnet_id])["Subnets"]
            except ClientError as error:
                if not _error_code(error).startswith("InvalidSubnetID"):
                    raise
                subnets = []
            if not subnets:
                problems.append(f"controllers.subnetId {settings.subnet_id} does not exist: check the id")
            elif subnets[0]["AvailabilityZone"] != spec.availability_zone:
                problems.append(
                    f"controllers.subnetId {settings.subnet_id} is in {subnets[0]['AvailabilityZone']}, the "
                    f"array is in {spec.availability_zone}: use a subnet in {spec.availability_zone}"
                )
        return problems

    def _named_template(self, array_id: str) -> dict[str, Any] | None:
        """The launch template named ``vsa-<id>-controller``, ours or not (None when absent)."""
        try:
            templates = self._ec2.describe_launch_templates(
                LaunchTemplateNames=[launch_template_name(array_id)]
            )
        except ClientError as error:
            if "NotFound" not in _error_code(error):
                raise
            return None
        return dict(templates["LaunchTemplates"][0]) if templates["LaunchTemplates"] else None

    def _foreign_template_problems(self, array_id: str) -> list[str]:
        name = launch_template_name(array_id)
        template = self._named_template(array_id)
        if template is None or _tags(template.get("Tags")).get(ARRAY_TAG) == array_id:
            return []
        return [
            f"launch template {name} exists and was not created by the control plane for array {array_id} "
            f"(no tag {ARRAY_TAG}={array_id}): give it as controllers.launchTemplate, or rename or delete it"
        ]

    def _launch_template_problems(self, spec: ArraySpec) -> list[str]:
        ref = spec.controllers.launch_template
        assert ref is not None
        label = ref.launch_template_id or ref.launch_template_name
        selector = (
            {"LaunchTemplateId": ref.launch_template_id}
            if ref.launch_template_id
            else {"LaunchTemplateName": ref.launch_template_name}
        )
        try:
            self._ec2.describe_launch_template_versions(**selector, Versions=[ref.version])
        except ClientError as error:
            code = _error_code(error)
            if "NotFound" in code or "Malformed" in code:
                return [f"controllers.launchTemplate {label} does not exist: check the id or name"]
            if "Version" in code:
                return [
                    f"controllers.launchTemplate {label} has no version {ref.version}: use an existing "
                    "version, $Latest or $Default"
                ]
            raise
        return []

    def _host_problems(self, spec: ArraySpec) -> list[str]:
        ids = [h.instance_id for h in spec.hosts]
        if not ids:
            return []
        nodes = self._managed_nodes(ids)
        problems: list[str] = []
        for instance_id in ids:
            node = nodes.get(instance_id)
            if node is None:
                problems.append(
                    f"host {instance_id} is not an SSM managed node: install/start the SSM agent and give "
                    "it an instance profile with AmazonSSMManagedInstanceCore"
                )
            elif node.get("PingStatus") != "Online":
                problems.append(
                    f"host {instance_id} is an SSM managed node but {node.get('PingStatus')}: start its SSM "
                    "agent and check its network path to SSM (paths are connected by Run Command)"
                )
        return problems

    # --- apply -------------------------------------------------------------------------------

    def apply(self, spec: ArraySpec, desired_controllers: int) -> list[Change]:
        """Converge AWS on ``spec``; idempotent. Returns one Change per resource, ``unchanged``
        ones included (with no fields); only resources with changes were touched."""
        owned_ids, changes = self._apply_volumes(spec)
        desired = self._desired(spec, desired_controllers, owned_ids)
        observed_template = self._observe_launch_template(spec.array_id)
        template_change = plan.diff_resource(
            f"launch-template/{launch_template_name(spec.array_id)}",
            desired.launch_template,
            observed_template,
        )
        if template_change is not None and desired.launch_template is not None:
            self._apply_launch_template(desired.launch_template, template_change)
            changes.append(template_change)
        observed = self._observe(spec, desired)
        for change in plan.diff(desired, observed):
            kind = change.resource.split("/", 1)[0]
            if kind in ("volume", "launch-template"):
                continue
            self._apply_change(change, desired)
            changes.append(change)
        if template_change is not None and desired.launch_template is None:  # the spec now brings its own
            self._ec2.delete_launch_template(LaunchTemplateName=launch_template_name(spec.array_id))
            changes.append(template_change)
        return changes

    def _desired(self, spec: ArraySpec, desired_controllers: int, owned_ids: tuple[str, ...]) -> Resources:
        return plan.desired_resources(
            spec,
            desired_controllers,
            account_id=self._role_arn.split(":")[4],
            region=str(self._ec2.meta.region_name),
            launch_template_id_of_spec=self._spec_launch_template_id(spec),
            volume_ids=spec.existing_volume_ids + owned_ids,
            scheduler_role_arn=self._role_arn,
        )

    def _apply_volumes(self, spec: ArraySpec) -> tuple[tuple[str, ...], list[Change]]:
        """Create missing owned volumes (found again by their tags), grow changed ones."""
        observed = self._owned_volumes(spec.array_id)
        changes: list[Change] = []
        ids: list[str] = []
        for volume in spec.new_volumes:
            params = plan.owned_volume_params(spec, volume)
            have = observed.get(volume.name)
            change = plan.diff_resource(
                f"volume/{volume.name}", params, _project(have, params) if have else None
            )
            assert change is not None
            if have is None:
                # CreateVolume answers at once with the volume ``creating``; nothing here waits for
                # ``available`` (an API call has 29 s): the controllers' bootstrap attaches a volume
                # once it is available. The client token makes a retried PUT (or two at once) get
                # the same volume, not a second one, while the tags may not be visible yet.
                volume_id = str(
                    self._ec2.create_volume(**params, ClientToken=plan.owned_volume_token(spec, volume))[
                        "VolumeId"
                    ]
                )
            else:
                volume_id = str(have["VolumeId"])
                if change.action == "update":
                    self._ec2.modify_volume(VolumeId=volume_id, Size=params["Size"], Iops=params["Iops"])
            ids.append(volume_id)
            changes.append(change)
        return tuple(ids), changes

    def _apply_launch_template(self, params: Params, change: Change) -> None:
        if change.action == "create":
            self._ec2.create_launch_template(**params)
        elif change.action == "update":
            version = self._ec2.create_launch_template_version(
                LaunchTemplateName=params["LaunchTemplateName"],
                LaunchTemplateData=params["LaunchTemplateData"],
            )["LaunchTemplateVersion"]["VersionNumber"]
            self._ec2.modify_launch_template(
                LaunchTemplateName=params["LaunchTemplateName"], DefaultVersion=str(version)
            )

    def _apply_change(self, change: Change, desired: Resources) -> None:
        if change.action == "unchanged":
            return
        kind, name = change.resource.split("/", 1)
        handlers: dict[str, Callable[[Change, Resources, str], None]] = {
            "group": self._apply_group,
            "lifecycle-hook": self._apply_hook,
            "alarm": self._apply_alarm,
            "schedule": self._apply_schedule,
        }
        handlers[kind](change, desired, name)

    def _apply_group(self, change: Change, desired: Resources, name: str) -> None:
        params = desired.group
        assert params is not None
        if change.action == "create":
            # The hooks come with the group: hooks put afterwards would miss the first controllers,
            # which would then serve without ever being bootstrapped.
            hooks = [
                {k: v for k, v in hook.items() if k != "AutoScalingGroupName"}
                for hook in (desired.launch_hook, desired.terminate_hook)
                if hook is not None
            ]
            self._autoscaling.create_auto_scaling_group(**params, LifecycleHookSpecificationList=hooks)
            return
        top = {f.split(".", 1)[0] for f, _, _ in change.fields}
        update = {k: params[k] for k in sorted(top - {"Tags"})}
        if update:
            self._autoscaling.update_auto_scaling_group(AutoScalingGroupName=name, **update)
        if "Tags" in top:
            self._autoscaling.create_or_update_tags(Tags=params["Tags"])

    def _apply_hook(self, change: Change, desired: Resources, name: str) -> None:
        params = next(
            h for h in (desired.launch_hook, desired.terminate_hook) if h and h["LifecycleHookName"] == name
        )
        self._autoscaling.put_lifecycle_hook(**params)

    def _apply_alarm(self, change: Change, desired: Resources, name: str) -> None:
        params = next(a for a in (desired.alarm_high, desired.alarm_low) if a and a["AlarmName"] == name)
        self._cloudwatch.put_metric_alarm(**params)
        if change.action == "update" and any(f == "Tags" for f, _, _ in change.fields):
            # PutMetricAlarm ignores Tags when it updates an alarm
            arn = self._cloudwatch.describe_alarms(AlarmNames=[name])["MetricAlarms"][0]["AlarmArn"]
            self._cloudwatch.tag_resource(ResourceARN=arn, Tags=params["Tags"])

    def volume_ids(self, spec: ArraySpec) -> tuple[str, ...]:
        """Every volume of the array: the spec's existing ones, then the ones created for it."""
        return spec.existing_volume_ids + tuple(
            str(v["VolumeId"]) for v in self._owned_volumes(spec.array_id).values()
        )

    def set_alarm_thresholds(self, spec: ArraySpec, desired_controllers: int) -> list[Change]:
        """Re-put both IOPS alarms for ``desired_controllers`` (after ScaleArray changed the
        count): the high alarm then fires only above what the new count serves, the low one only
        below what one controller fewer would. PutMetricAlarm keeps an alarm's state, so the next
        evaluation emits a state change if demand is on the other side of the new threshold."""
        volume_ids = self.volume_ids(spec)
        changes: list[Change] = []
        for kind in ("high", "low"):
            params = plan.alarm_params(spec, desired_controllers, volume_ids, kind)
            before = self._observe_alarm(params["AlarmName"])
            self._cloudwatch.put_metric_alarm(**params)
            old = before.get("Threshold") if before else None
            changes.append(
                Change(
                    f"alarm/{params['AlarmName']}",
                    "unchanged" if old == params["Threshold"] else ("update" if before else "create"),
                    () if old == params["Threshold"] else (("Threshold", old, params["Threshold"]),),
                )
            )
        return changes

    def _apply_schedule(self, change: Change, desired: Resources, name: str) -> None:
        if change.action == "delete":
            self._scheduler.delete_schedule(Name=name)
        elif change.action == "create":
            self._scheduler.create_schedule(**(desired.schedule or {}))
        else:
            self._scheduler.update_schedule(**(desired.schedule or {}))

    # --- observe: AWS read back into reconcile's shapes -----------------------------------------

    def _observe(self, spec: ArraySpec, desired: Resources) -> Resources:
        assert desired.group is not None
        return Resources(
            array_id=spec.array_id,
            group=self._observe_group(desired.group),
            launch_hook=self._observe_hook(desired.launch_hook),
            terminate_hook=self._observe_hook(desired.terminate_hook),
            alarm_high=self._observe_alarm(iops_alarm_name(spec.array_id, "high")),
            alarm_low=self._observe_alarm(iops_alarm_name(spec.array_id, "low")),
            schedule=self._observe_schedule(backup_schedule_name(spec.array_id)),
        )

    def _describe_group(self, name: str) -> dict[str, Any] | None:
        groups = self._autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])[
            "AutoScalingGroups"
        ]
        return dict(groups[0]) if groups else None

    def _observe_group(self, desired: Params) -> dict[str, Any] | None:
        group = self._describe_group(str(desired["AutoScalingGroupName"]))
        if group is None:
            return None
        observed = {"AutoScalingGroupName": group["AutoScalingGroupName"], **_project(group, _GROUP_KEYS)}
        template = group.get("LaunchTemplate", {})
        observed["LaunchTemplate"] = _project(template, desired["LaunchTemplate"])
        if "VPCZoneIdentifier" in desired:
            observed["VPCZoneIdentifier"] = group.get("VPCZoneIdentifier")
        else:
            observed["AvailabilityZones"] = sorted(group.get("AvailabilityZones", []))
        observed["Tags"] = [
            _project(t, ("ResourceId", "ResourceType", "Key", "Value", "PropagateAtLaunch"))
            for t in group.get("Tags", [])
            if t["Key"] == ARRAY_TAG
        ]
        return observed

    def _observe_hook(self, desired: Params | None) -> dict[str, Any] | None:
        assert desired is not None
        try:
            hooks = self._autoscaling.describe_lifecycle_hooks(
                AutoScalingGroupName=desired["AutoScalingGroupName"],
                LifecycleHookNames=[desired["LifecycleHookName"]],
            )["LifecycleHooks"]
        except ClientError as error:
            if _error_code(error) != "ValidationError":  # the group does not exist (yet)
                raise
            return None
        return _project(hooks[0], _HOOK_KEYS) if hooks else None

    def _observe_alarm(self, name: str) -> dict[str, Any] | None:
        alarms = self._cloudwatch.describe_alarms(AlarmNames=[name])["MetricAlarms"]
        if not alarms:
            return None
        alarm = alarms[0]
        observed = _project(alarm, _ALARM_KEYS)
        observed["Metrics"] = [_metric_query(q) for q in alarm.get("Metrics", [])]
        tags = self._cloudwatch.list_tags_for_resource(ResourceARN=alarm["AlarmArn"]).get("Tags", [])
        observed["Tags"] = sorted(
            ({"Key": t["Key"], "Value": t["Value"]} for t in tags), key=lambda t: str(t["Key"])
        )
        return observed

    def _observe_schedule(self, name: str) -> dict[str, Any] | None:
        try:
            schedule = self._scheduler.get_schedule(Name=name)
        except ClientError as error:
            if _error_code(error) != "ResourceNotFoundException":
                raise
            return None
        return {
            "Name": schedule["Name"],
            "ScheduleExpression": schedule["ScheduleExpression"],
            "FlexibleTimeWindow": _project(schedule.get("FlexibleTimeWindow", {}), ("Mode",)),
            "State": schedule.get("State"),
            "Target": _project(schedule.get("Target", {}), ("Arn", "RoleArn", "Input")),
        }

    def _observe_launch_template(self, array_id: str) -> dict[str, Any] | None:
        name = launch_template_name(array_id)
        try:
            template = self._ec2.describe_launch_templates(LaunchTemplateNames=[name])["LaunchTemplates"][0]
            version = self._ec2.describe_launch_template_versions(
                LaunchTemplateName=name, Versions=["$Default"]
            )["LaunchTemplateVersions"][0]
        except ClientError as error:
            if "NotFound" not in _error_code(error):
                raise
            return None
        tags = _tags(template.get("Tags"))
        if tags.get(ARRAY_TAG) != array_id:
            return None  # not the control plane's (validate refuses to create over it)
        data = _project(version.get("LaunchTemplateData", {}), _LT_DATA_KEYS)
        if "TagSpecifications" in data:
            # A template's data cannot tag a launch template; moto copies the template's own
            # tags in there. Dropping them is a no-op on AWS.
            data["TagSpecifications"] = [
                t for t in data["TagSpecifications"] if t.get("ResourceType") != "launch-template"
            ]
        return {
            "LaunchTemplateName": name,
            "LaunchTemplateData": data,
            "TagSpecifications": [
                {
                    "ResourceType": "launch-template",
                    "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())],
                }
            ],
        }

    def _spec_launch_template_id(self, spec: ArraySpec) -> str | None:
        ref = spec.controllers.launch_template
        if ref is None or ref.launch_template_id is not None:
            return None if ref is None else ref.launch_template_id
        templates = self._ec2.describe_launch_templates(LaunchTemplateNames=[ref.launch_template_name])
        return str(templates["LaunchTemplates"][0]["LaunchTemplateId"])

    def _describe_volumes(self, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        pages = self._ec2.get_paginator("describe_volumes").paginate(Filters=filters)
        return [dict(v) for page in pages for v in page["Volumes"]]

    def _owned_volumes(self, array_id: str) -> dict[str, dict[str, Any]]:
        """The array's owned volumes by spec name, as CreateVolume parameters plus VolumeId."""
        prefix = f"vsa-{array_id}-"
        found: dict[str, dict[str, Any]] = {}
        for volume in self._describe_volumes(_owned_filters(array_id)):
            tags = _tags(volume.get("Tags"))
            name = tags.get("Name", "")
            if not name.startswith(prefix):
                continue
            found[name.removeprefix(prefix)] = {
                "VolumeId": volume["VolumeId"],
                "AvailabilityZone": volume["AvailabilityZone"],
                "Size": volume["Size"],
                "Iops": volume.get("Iops"),
                "VolumeType": volume.get("VolumeType"),
                "MultiAttachEnabled": volume.get("MultiAttachEnabled", False),
                "State": volume.get("State"),
                "Attachments": volume.get("Attachments", []),
                "TagSpecifications": [
                    {
                        "ResourceType": "volume",
                        "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())],
                    }
                ],
            }
        return found

    def _group_instances(self, array_id: str) -> list[dict[str, Any]]:
        group = self._describe_group(group_name(array_id))
        return list(group.get("Instances", [])) if group else []

    def _managed_nodes(self, instance_ids: list[str]) -> dict[str, dict[str, Any]]:
        pages = self._ssm.get_paginator("describe_instance_information").paginate(
            Filters=[{"Key": "InstanceIds", "Values": instance_ids}]
        )
        return {n["InstanceId"]: dict(n) for page in pages for n in page["InstanceInformationList"]}

    def _wait(self, waiter: Any, what: str, **kwargs: Any) -> None:
        try:
            waiter.wait(**kwargs, WaiterConfig=self._waiter_config)
        except WaiterError as error:
            seconds = self._waiter_config["Delay"] * self._waiter_config["MaxAttempts"]
            raise ConflictError(
                f"{what} did not reach its state within {seconds} s ({error}): check it in the console "
                "and repeat the request"
            ) from error

    # --- status ------------------------------------------------------------------------------

    def status(self, spec: ArraySpec) -> dict[str, Any]:
        """The array's live state, JSON-able."""
        group = self._describe_group(group_name(spec.array_id))
        return {
            "arrayId": spec.array_id,
            "group": None
            if group is None
            else {
                "name": group["AutoScalingGroupName"],
                "desired": group["DesiredCapacity"],
                "min": group["MinSize"],
                "max": group["MaxSize"],
            },
            "controllers": self._controllers_status(group),
            "volumes": self._volumes_status(spec),
            "alarms": self._alarms_status(spec.array_id),
            "backupSchedule": self._schedule_status(spec.array_id),
            "hosts": self._hosts_status(spec),
        }

    def _controllers_status(self, group: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        members = list(group.get("Instances", [])) if group else []
        if not members:
            return []
        ids = [m["InstanceId"] for m in members]
        pages = self._ec2.get_paginator("describe_instances").paginate(InstanceIds=ids)
        details = {i["InstanceId"]: i for page in pages for r in page["Reservations"] for i in r["Instances"]}
        result = []
        for member in members:
            detail = details.get(member["InstanceId"], {})
            launched = detail.get("LaunchTime")
            result.append(
                {
                    "instanceId": member["InstanceId"],
                    "lifecycleState": member["LifecycleState"],
                    "healthStatus": member.get("HealthStatus"),
                    "protectedFromScaleIn": member.get("ProtectedFromScaleIn", False),
                    "privateIp": detail.get("PrivateIpAddress"),
                    "availabilityZone": member.get("AvailabilityZone"),
                    "launchedAt": launched.isoformat() if launched is not None else None,
                }
            )
        return result

    def _volumes_status(self, spec: ArraySpec) -> list[dict[str, Any]]:
        owned = {v["VolumeId"]: v for v in self._owned_volumes(spec.array_id).values()}
        existing = self._describe_volumes([{"Name": "volume-id", "Values": list(spec.existing_volume_ids)}])
        volumes = [*existing, *owned.values()]
        return [
            {
                "volumeId": v["VolumeId"],
                "owned": v["VolumeId"] in owned,
                "state": v.get("State"),
                "attachments": sorted(a["InstanceId"] for a in v.get("Attachments", [])),
            }
            for v in volumes
        ]

    def _alarms_status(self, array_id: str) -> list[dict[str, Any]]:
        names = [iops_alarm_name(array_id, "high"), iops_alarm_name(array_id, "low")]
        alarms = self._cloudwatch.describe_alarms(AlarmNames=names)["MetricAlarms"]
        return [
            {"name": a["AlarmName"], "state": a["StateValue"], "threshold": a["Threshold"]} for a in alarms
        ]

    def _schedule_status(self, array_id: str) -> dict[str, Any] | None:
        schedule = self._observe_schedule(backup_schedule_name(array_id))
        if schedule is None:
            return None
        return {
            "name": schedule["Name"],
            "expression": schedule["ScheduleExpression"],
            "state": schedule["State"],
        }

    def _hosts_status(self, spec: ArraySpec) -> list[dict[str, Any]]:
        ids = [h.instance_id for h in spec.hosts]
        nodes = self._managed_nodes(ids) if ids else {}
        return [
            {
                "instanceId": h.instance_id,
                "mountpoints": list(h.mountpoints),
                "pingStatus": nodes.get(h.instance_id, {}).get("PingStatus", "NotRegistered"),
            }
            for h in spec.hosts
        ]

    def busy_reason(self, spec: ArraySpec) -> str | None:
        """Why the array cannot take a change now (a controller bootstrapping or draining), or None."""
        reasons = []
        for instance in self._group_instances(spec.array_id):
            state = str(instance["LifecycleState"])
            if state.startswith("Pending:"):
                reasons.append(f"controller {instance['InstanceId']} is bootstrapping ({state})")
            elif state.startswith("Terminating:"):
                reasons.append(f"controller {instance['InstanceId']} is draining ({state})")
        return "; ".join(reasons) + ": retry when it has finished" if reasons else None

    # --- teardown ----------------------------------------------------------------------------

    def release(self, spec: ArraySpec) -> list[Change]:
        """First teardown step, nothing waited for: delete the backup schedule and the alarms, and
        force-delete the group (its controllers go without a drain: the array is being deleted)."""
        array_id = spec.array_id
        changes: list[Change] = []
        schedule = backup_schedule_name(array_id)
        if self._observe_schedule(schedule) is not None:
            self._scheduler.delete_schedule(Name=schedule)
            changes.append(Change(f"schedule/{schedule}", "delete"))
        alarms = [iops_alarm_name(array_id, "high"), iops_alarm_name(array_id, "low")]
        present = [
            a["AlarmName"] for a in self._cloudwatch.describe_alarms(AlarmNames=alarms)["MetricAlarms"]
        ]
        if present:
            self._cloudwatch.delete_alarms(AlarmNames=present)
            changes += [Change(f"alarm/{name}", "delete") for name in present]
        name = group_name(array_id)
        if self._describe_group(name) is not None:
            self._autoscaling.delete_auto_scaling_group(AutoScalingGroupName=name, ForceDelete=True)
            changes.append(Change(f"group/{name}", "delete"))
        return changes

    def finish(self, spec: ArraySpec, *, delete_volumes: bool) -> list[Change]:
        """Last teardown step, once the group is gone: the launch template the control plane
        created, and (only with ``delete_volumes``) the volumes it created. Raises
        ``TeardownPendingError`` while the group exists or an owned volume is still attached."""
        name = group_name(spec.array_id)
        if self._describe_group(name) is not None:
            raise TeardownPendingError(f"group {name} is still being deleted")
        changes = self._teardown_launch_template(spec.array_id)
        if delete_volumes:
            owned = self._owned_volumes(spec.array_id)
            attached = [v["VolumeId"] for v in owned.values() if v["State"] != "available"]
            if attached:
                raise TeardownPendingError(f"owned volume(s) {', '.join(attached)} still detaching")
            for volume_name, volume in owned.items():
                self._ec2.delete_volume(VolumeId=volume["VolumeId"])
                changes.append(
                    Change(f"volume/{volume_name}", "delete", (("VolumeId", volume["VolumeId"], None),))
                )
        return changes

    def _teardown_launch_template(self, array_id: str) -> list[Change]:
        name = launch_template_name(array_id)
        template = self._named_template(array_id)
        if template is None or _tags(template.get("Tags")).get(ARRAY_TAG) != array_id:
            return []  # absent, or not the control plane's: leave it
        self._ec2.delete_launch_template(LaunchTemplateName=name)
        return [Change(f"launch-template/{name}", "delete")]


def _owned_filters(array_id: str) -> list[dict[str, Any]]:
    return [
        {"Name": f"tag:{ARRAY_TAG}", "Values": [array_id]},
        {"Name": f"tag:{OWNED_TAG}", "Values": ["true"]},
    ]


def _metric_query(query: Mapping[str, Any]) -> dict[str, Any]:
    """A metric data query as PutMetricAlarm takes it (AWS may add defaults on the way back)."""
    shaped: dict[str, Any] = {"Id": query["Id"]}
    if "MetricStat" in query:
        stat = query["MetricStat"]
        metric = stat["Metric"]
        shaped["MetricStat"] = {
            "Metric": {
                "Namespace": metric["Namespace"],
                "MetricName": metric["MetricName"],
                "Dimensions": [
                    {"Name": d["Name"], "Value": d["Value"]} for d in metric.get("Dimensions", [])
                ],
            },
            "Period": stat["Period"],
            "Stat": stat["Stat"],
        }
    if "Expression" in query:
        shaped["Expression"] = query["Expression"]
    if "Label" in query:
        shaped["Label"] = query["Label"]
    shaped["ReturnData"] = bool(query.get("ReturnData", True))
    return shaped
