"""Tear an array down (the DeleteArray workflow's steps): release what goes at once, then,
once the group is gone, finish with the launch template and (on request) the owned volumes."""

from vsa_core.arrays import aws_keys, aws_observe
from vsa_core.arrays.aws_observe import ArrayClients, tag_dict
from vsa_core.arrays.plan import Change
from vsa_core.arrays.spec import ARRAY_TAG, DEPLOYMENT_TAG, ArraySpec
from vsa_core.errors import TeardownPendingError
from vsa_core.naming import (
    backup_schedule_name,
    deployment,
    drill_schedule_name,
    group_name,
    iops_alarm_name,
    launch_template_name,
)


def release(clients: ArrayClients, spec: ArraySpec) -> list[Change]:
    """First teardown step, nothing waited for: delete the backup schedule and the alarms, and
    force-delete the group (its controllers go without a drain: the array is being deleted)."""
    changes = _schedule_and_alarms(clients, spec.array_id)
    name = group_name(spec.array_id)
    if aws_observe.describe_group(clients, name) is not None:
        clients.autoscaling.delete_auto_scaling_group(AutoScalingGroupName=name, ForceDelete=True)
        changes.append(Change(f"group/{name}", "delete"))
    return changes


def finish(clients: ArrayClients, spec: ArraySpec, *, delete_volumes: bool) -> list[Change]:
    """Last teardown step, once the group is gone: the schedule and alarms again (whatever a
    stopped run's last step put back), the launch template the control plane created, and
    (only with ``delete_volumes``) the volumes it created. Raises
    ``TeardownPendingError`` while the group exists or an owned volume is still attached."""
    name = group_name(spec.array_id)
    if aws_observe.describe_group(clients, name) is not None:
        raise TeardownPendingError(f"group {name} is still being deleted")
    # Again, now that the group is gone: StopExecution ends a ReconcileArray run at once, but a
    # Lambda step it had already invoked runs to its end, and ReconcileArray's create step
    # re-puts the alarms; one that ended after release would otherwise outlive the array
    changes = _schedule_and_alarms(clients, spec.array_id)
    changes += _teardown_launch_template(clients, spec.array_id)
    deleted = aws_keys.delete_all(aws_keys.of(clients), spec.array_id)
    changes += [Change(f"secret/{name}", "delete") for name in deleted]
    if delete_volumes:
        owned = aws_observe.owned_volumes(clients, spec.array_id)
        attached = [v["VolumeId"] for v in owned.values() if v["State"] != "available"]
        if attached:
            raise TeardownPendingError(f"owned volume(s) {', '.join(attached)} still detaching")
        for volume_name, volume in owned.items():
            clients.ec2.delete_volume(VolumeId=volume["VolumeId"])
            changes.append(
                Change(f"volume/{volume_name}", "delete", (("VolumeId", volume["VolumeId"], None),))
            )
    return changes


def _schedule_and_alarms(clients: ArrayClients, array_id: str) -> list[Change]:
    """Delete the array's backup and drill schedules and its IOPS alarms, those present."""
    changes: list[Change] = []
    for schedule in (backup_schedule_name(array_id), drill_schedule_name(array_id)):
        if aws_observe.observe_schedule(clients, schedule) is not None:
            clients.scheduler.delete_schedule(Name=schedule)
            changes.append(Change(f"schedule/{schedule}", "delete"))
    alarms = [iops_alarm_name(array_id, "high"), iops_alarm_name(array_id, "low")]
    present = [a["AlarmName"] for a in clients.cloudwatch.describe_alarms(AlarmNames=alarms)["MetricAlarms"]]
    if present:
        clients.cloudwatch.delete_alarms(AlarmNames=present)
        changes += [Change(f"alarm/{name}", "delete") for name in present]
    return changes


def _teardown_launch_template(clients: ArrayClients, array_id: str) -> list[Change]:
    name = launch_template_name(array_id)
    template = aws_observe.named_template(clients, array_id)
    tags = tag_dict(template.get("Tags")) if template is not None else {}
    if tags.get(ARRAY_TAG) != array_id or tags.get(DEPLOYMENT_TAG) != deployment():
        return []  # absent, or not this deployment's: leave it
    clients.ec2.delete_launch_template(LaunchTemplateName=name)
    return [Change(f"launch-template/{name}", "delete")]
