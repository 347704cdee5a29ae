"""Converge AWS on an array spec: owned volumes, launch template, controller group with its
lifecycle hooks, IOPS alarms, backup schedule; and the alarm thresholds after a scale. Every
decision (names, parameters, thresholds, what changed) is ``vsa_core.arrays.plan``'s; this
module sends the calls its diff asks for. It never waits and creates no volume: an owned
volume the spec declares that does not exist yet is answered ``create`` and created by
ReconcileArray's first step (``create_volumes``), which the API starts for it; the IOPS
alarms are put over the volumes that exist (none yet: put by that step)."""

import functools
from collections.abc import Callable

from botocore.exceptions import ClientError

from vsa_core.arrays import aws_keys, aws_observe, aws_volumes, plan
from vsa_core.arrays.aws_observe import ArrayClients, project
from vsa_core.arrays.plan import Change, Params, Resources
from vsa_core.arrays.spec import ArraySpec
from vsa_core.errors import VolumeCreationError
from vsa_core.naming import launch_template_name


def apply(
    clients: ArrayClients,
    spec: ArraySpec,
    desired_controllers: int,
    roll_surge: int = 0,
    rekey_stages: aws_keys.Stages | None = None,
) -> list[Change]:
    """Converge AWS on ``spec``; idempotent. Returns one Change per resource, ``unchanged``
    ones included (with no fields); only resources with changes were touched. ``rekey_stages``:
    a key rotation's progress (the node copies are written as it stands)."""
    owned_ids, changes = _apply_volumes(clients, spec)
    # the keys before the group: a controller it launches reads them at its bootstrap
    changes += aws_keys.converge(
        aws_keys.of(clients), spec, aws_keys.in_group(clients, spec.array_id), stages=rekey_stages
    )
    desired = _desired(clients, spec, desired_controllers, owned_ids, roll_surge)
    observed_template = aws_observe.observe_launch_template(clients, spec.array_id)
    template_change = plan.diff_resource(
        f"launch-template/{launch_template_name(spec.array_id)}",
        desired.launch_template,
        observed_template,
    )
    if template_change is not None and desired.launch_template is not None:
        _apply_launch_template(clients, desired.launch_template, template_change)
        changes.append(template_change)
    observed = aws_observe.observe(clients, spec, desired)
    for change in plan.diff(desired, observed):
        kind = change.resource.split("/", 1)[0]
        if kind in ("volume", "launch-template"):
            continue
        if kind == "alarm" and not owned_ids + spec.existing_volume_ids and spec.demand_metric is None:
            continue  # no volume to watch yet: ReconcileArray's create step puts the alarms
        _apply_change(clients, change, desired)
        changes.append(change)
    if template_change is not None and desired.launch_template is None:  # the spec now brings its own
        clients.ec2.delete_launch_template(LaunchTemplateName=launch_template_name(spec.array_id))
        changes.append(template_change)
    return changes


def plan_apply(
    clients: ArrayClients,
    spec: ArraySpec,
    desired_controllers: int,
    roll_surge: int = 0,
    rekey_stages: aws_keys.Stages | None = None,
) -> list[Change]:
    """What ``apply`` would change, from the same diff, without changing anything (reads only:
    a dry-run). An owned volume not created yet is named in the alarms' metrics by a
    placeholder (``<new volume NAME>``): its id exists only once CreateVolume answers."""
    observed_volumes = aws_volumes.converging_volumes(clients, spec.array_id)
    changes: list[Change] = []
    ids: list[str] = []
    for volume in spec.new_volumes:
        params = plan.owned_volume_params(spec, volume)
        have = observed_volumes.get(volume.name)
        change = plan.diff_resource(f"volume/{volume.name}", params, project(have, params) if have else None)
        assert change is not None
        changes.append(change)
        ids.append(str(have["VolumeId"]) if have else f"<new volume {volume.name}>")
    desired = _desired(clients, spec, desired_controllers, tuple(ids), roll_surge)
    template_change = plan.diff_resource(
        f"launch-template/{launch_template_name(spec.array_id)}",
        desired.launch_template,
        aws_observe.observe_launch_template(clients, spec.array_id),
    )
    if template_change is not None:
        changes.append(template_change)
    observed = aws_observe.observe(clients, spec, desired)
    changes += [c for c in plan.diff(desired, observed) if c.resource.split("/", 1)[0] not in _APPLIED_FIRST]
    changes += aws_keys.converge(
        aws_keys.of(clients),
        spec,
        aws_keys.in_group(clients, spec.array_id),
        dry_run=True,
        stages=rekey_stages,
    )
    return changes


_APPLIED_FIRST = ("volume", "launch-template")


def _desired(
    clients: ArrayClients,
    spec: ArraySpec,
    desired_controllers: int,
    owned_ids: tuple[str, ...],
    roll_surge: int = 0,
) -> Resources:
    return plan.desired_resources(
        spec,
        desired_controllers,
        account_id=clients.scheduler_role_arn.split(":")[4],
        region=str(clients.ec2.meta.region_name),
        launch_template_id_of_spec=aws_observe.spec_launch_template_id(clients, spec),
        volume_ids=spec.existing_volume_ids + owned_ids,
        scheduler_role_arn=clients.scheduler_role_arn,
        event_bus=clients.event_bus_name,
        roll_surge=roll_surge,
    )


def _apply_volumes(clients: ArrayClients, spec: ArraySpec) -> tuple[tuple[str, ...], list[Change]]:
    """Grow changed owned volumes; a missing one is a ``create`` change left to ReconcileArray
    (``create_volumes``): however many there are, the API answers within its 29 s."""
    observed = aws_volumes.converging_volumes(clients, spec.array_id)
    changes: list[Change] = []
    ids: list[str] = []
    for volume in spec.new_volumes:
        params = plan.owned_volume_params(spec, volume)
        have = observed.get(volume.name)
        change = plan.diff_resource(f"volume/{volume.name}", params, project(have, params) if have else None)
        assert change is not None
        changes.append(change)
        if have is None:
            continue
        volume_id = str(have["VolumeId"])
        if aws_volumes.resizes(change):  # started by grow_volumes unless another apply raced
            aws_volumes.modify_volume(clients, volume.name, volume_id, params, [], stored=True)
        ids.append(volume_id)
    return tuple(ids), changes


def missing_volumes(clients: ArrayClients, spec: ArraySpec) -> list[str]:
    """The owned volumes the spec declares that do not exist yet (names)."""
    observed = aws_observe.owned_volumes(clients, spec.array_id)
    return [v.name for v in spec.new_volumes if v.name not in observed]


def create_volumes(clients: ArrayClients, spec: ArraySpec, desired_controllers: int) -> dict[str, list[str]]:
    """ReconcileArray's ``create`` step: CreateVolume of every owned volume the spec declares
    that does not exist yet, tagged as it is made (``vsa:array``, ``vsa:owned=true``, its
    name), each with its client token (a retried step, or two runs at once, get the same volume,
    not a second one, while the tags may not be visible yet); nothing waits for ``available``
    (the workflow's settle phase does). Then the IOPS alarms over every volume. One refusal does
    not stop the others; any raises ``VolumeCreationError`` saying what was done and what remains."""
    observed = aws_observe.owned_volumes(clients, spec.array_id)
    created: list[str] = []
    there: list[str] = []
    failed: list[str] = []
    for volume in spec.new_volumes:
        have = observed.get(volume.name)
        if have is not None:
            there.append(f"{volume.name} ({have['VolumeId']}, {have.get('State')})")
            continue
        params = plan.owned_volume_params(spec, volume)
        try:
            answer = clients.ec2.create_volume(**params, ClientToken=plan.owned_volume_token(spec, volume))
        except ClientError as error:
            code = aws_observe.error_code(error)
            failed.append(f"{volume.name} ({code}: {error.response.get('Error', {}).get('Message', '')})")
            continue
        created.append(f"{volume.name} ({answer['VolumeId']})")
    if created or there:  # the alarms over every volume (a step retried after a failure too)
        set_alarm_thresholds(clients, spec, desired_controllers)
    if failed:
        raise VolumeCreationError(
            f"array {spec.array_id}: created {', '.join(created) or 'none'}; already there: "
            f"{', '.join(there) or 'none'}; not created: {'; '.join(failed)}. The spec is stored: fix "
            "the cause and apply it again to create the rest"
        )
    return {"created": created, "existing": there}


def _apply_launch_template(clients: ArrayClients, params: Params, change: Change) -> None:
    if change.action == "create":
        clients.ec2.create_launch_template(**params)
    elif change.action == "update":
        version = clients.ec2.create_launch_template_version(
            LaunchTemplateName=params["LaunchTemplateName"],
            LaunchTemplateData=params["LaunchTemplateData"],
        )["LaunchTemplateVersion"]["VersionNumber"]
        clients.ec2.modify_launch_template(
            LaunchTemplateName=params["LaunchTemplateName"], DefaultVersion=str(version)
        )


def _apply_change(clients: ArrayClients, change: Change, desired: Resources) -> None:
    if change.action == "unchanged":
        return
    kind, name = change.resource.split("/", 1)
    handlers: dict[str, Callable[[Change, Resources, str], None]] = {
        "group": functools.partial(_apply_group, clients),
        "lifecycle-hook": functools.partial(_apply_hook, clients),
        "alarm": functools.partial(_apply_alarm, clients),
        "schedule": functools.partial(_apply_schedule, clients),
    }
    handlers[kind](change, desired, name)


def _apply_group(clients: ArrayClients, change: Change, desired: Resources, name: str) -> None:
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
        clients.autoscaling.create_auto_scaling_group(**params, LifecycleHookSpecificationList=hooks)
        return
    top = {f.split(".", 1)[0] for f, _, _ in change.fields}
    update = {k: params[k] for k in sorted(top - {"Tags"})}
    if update:
        clients.autoscaling.update_auto_scaling_group(AutoScalingGroupName=name, **update)
    if "Tags" in top:
        clients.autoscaling.create_or_update_tags(Tags=params["Tags"])


def _apply_hook(clients: ArrayClients, change: Change, desired: Resources, name: str) -> None:
    params = next(
        h for h in (desired.launch_hook, desired.terminate_hook) if h and h["LifecycleHookName"] == name
    )
    clients.autoscaling.put_lifecycle_hook(**params)


def _apply_alarm(clients: ArrayClients, change: Change, desired: Resources, name: str) -> None:
    params = next(a for a in (desired.alarm_high, desired.alarm_low) if a and a["AlarmName"] == name)
    clients.cloudwatch.put_metric_alarm(**params)
    if change.action == "update" and any(f == "Tags" for f, _, _ in change.fields):
        # PutMetricAlarm ignores Tags when it updates an alarm
        arn = clients.cloudwatch.describe_alarms(AlarmNames=[name])["MetricAlarms"][0]["AlarmArn"]
        clients.cloudwatch.tag_resource(ResourceARN=arn, Tags=params["Tags"])


def _apply_schedule(clients: ArrayClients, change: Change, desired: Resources, name: str) -> None:
    if change.action == "delete":
        clients.scheduler.delete_schedule(Name=name)
        return
    params = next(p for p in (desired.schedule, desired.drill_schedule) if p and p["Name"] == name)
    if change.action == "create":
        clients.scheduler.create_schedule(**params)
    else:
        clients.scheduler.update_schedule(**params)


def set_alarm_thresholds(clients: ArrayClients, spec: ArraySpec, desired_controllers: int) -> list[Change]:
    """Re-put both IOPS alarms for ``desired_controllers`` (after ScaleArray changed the
    count): the high alarm then fires only above what the new count serves, the low one only
    below what one controller fewer would. PutMetricAlarm keeps an alarm's state, so the next
    evaluation emits a state change if demand is on the other side of the new threshold."""
    volume_ids = aws_observe.volume_ids(clients, spec)
    changes: list[Change] = []
    for kind in ("high", "low"):
        params = plan.alarm_params(spec, desired_controllers, volume_ids, kind)
        before = aws_observe.observe_alarm(clients, params["AlarmName"])
        clients.cloudwatch.put_metric_alarm(**params)
        old = before.get("Threshold") if before else None
        changes.append(
            Change(
                f"alarm/{params['AlarmName']}",
                "unchanged" if old == params["Threshold"] else ("update" if before else "create"),
                () if old == params["Threshold"] else (("Threshold", old, params["Threshold"]),),
            )
        )
    return changes
