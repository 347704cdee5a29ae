"""Restore drills as one entry point: what the API, the drill schedule's trigger and each step of
the RestoreDrill workflow call. Each method is one function of ``aws_drills`` given this
object's :class:`~vsa_core.backups.aws_drills.DrillContext`."""

from typing import Any

from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.backups import aws_drills
from vsa_core.backups.aws_drills import DrillContext, DrillSettings
from vsa_core.backups.aws_registry import BackupRegistry, DrillRegistry
from vsa_core.clients import client
from vsa_core.settings import DrillSteps, DrillWorkflow, Registry, StackMetrics
from vsa_core.steps import on_context


class DrillService:
    def __init__(
        self,
        *,
        table_name: str,
        settings: DrillSettings,
        ec2: Any = None,
        ssm: Any = None,
        sfn: Any = None,
        cloudwatch: Any = None,
    ) -> None:
        self.ctx = DrillContext(
            arrays=ArrayRegistry(table_name),
            backups=BackupRegistry(table_name),
            drills=DrillRegistry(table_name),
            ec2=ec2 or client("ec2"),
            ssm=ssm or client("ssm"),
            sfn=sfn or client("stepfunctions"),
            cloudwatch=cloudwatch or client("cloudwatch"),
            settings=settings,
        )

    # the API and the schedule
    start = on_context(aws_drills.start)
    start_scheduled = on_context(aws_drills.start_scheduled)
    drills = on_context(aws_drills.drills)
    get = on_context(aws_drills.get)
    # the RestoreDrill workflow's steps
    restore = on_context(aws_drills.restore)
    volumes_ready = on_context(aws_drills.volumes_ready)
    launch = on_context(aws_drills.launch)
    node_ready = on_context(aws_drills.node_ready)
    attach = on_context(aws_drills.attach)
    attached = on_context(aws_drills.attached)
    check = on_context(aws_drills.check)
    checked = on_context(aws_drills.checked)
    fail = on_context(aws_drills.fail)
    cleanup = on_context(aws_drills.cleanup)
    on_ended = on_context(aws_drills.on_ended)


class DrillStarterSettings(Registry, DrillWorkflow):
    """What starting and reading drills needs: the registry table and the RestoreDrill workflow."""


class DrillStepSettings(DrillStarterSettings, DrillSteps, StackMetrics):
    """…and what the workflow's steps act with."""


def starter_from_settings(settings: DrillStarterSettings) -> DrillService:
    """The service as the API and the schedule's trigger use it (start, read)."""
    return DrillService(
        table_name=settings.table_name,
        settings=DrillSettings(state_machine_arn=settings.drill_state_machine_arn),
    )


def steps_from_settings(settings: DrillStepSettings) -> DrillService:
    """The service as the RestoreDrill steps use it."""
    return DrillService(
        table_name=settings.table_name,
        settings=DrillSettings(
            state_machine_arn=settings.drill_state_machine_arn,
            document=settings.drill_check_document,
            instance_profile_arn=settings.drill_instance_profile_arn,
            device_dir=settings.node_device_dir,
            mount_dir=settings.node_drill_mount_dir,
            stack=settings.stack_name,
        ),
    )
