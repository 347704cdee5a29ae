"""Backups of an array on the AWS side: what the API, the schedule trigger and each step of the
ConsistentBackup workflow do, as one entry point. The decisions are ``vsa_core.backups.sets`` and
``vsa_core.backups.reports`` (pure); the ``aws_*`` modules read AWS, act, and record the set in the
registry (every write conditional on the state read). Each method here is one function of the
module that owns the step, given this object's :class:`BackupContext`.

The workflow, and which method does each step (``statemachines/consistent_backup.asl.json``):

1. :meth:`BackupService.preflight` (``aws_preflight``) — a serving controller with every array
   volume attached, every host online in SSM, the EBS limits (at most 5 pending snapshots per io2 volume, one
   snapshot per volume every 15 s): start, wait (the workflow's Wait state) or refuse. Then the
   workflow runs freeze-io with ``DryRun=true`` on every host and :meth:`hosts_ready` fails fast
   on any host that could not freeze.
2. (the workflow) freeze-io on every host in parallel.
3. :meth:`snapshot` (``aws_snapshot``) — ONE ``CreateSnapshots`` on the controller, every
   attached volume that is not the array's excluded, tagged with the set: one point in time
   across all volumes.
4. (the workflow) thaw-io on every host, on every path out; :meth:`record_hosts` keeps what the
   hosts reported (the instants they froze and thawed, on their clocks).
5. :meth:`progress` (``aws_finish``) until every snapshot has completed or one is in error; :meth:`finish`
   labels the set honestly, or fails it and deletes its snapshots; :meth:`fail` does the same
   for a workflow that caught an error.
6. :meth:`apply_retention` (``aws_retention``) — whole sets, oldest first, never one in progress,
   capped per run.
"""

import time
from collections.abc import Callable
from typing import Any

from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.backups import aws_finish, aws_preflight, aws_restore, aws_retention, aws_sets, aws_snapshot
from vsa_core.backups.aws_context import BackupContext
from vsa_core.backups.aws_registry import BackupRegistry
from vsa_core.backups.aws_signals import Signals, signals_of
from vsa_core.backups.signals import FREEZE_LEAD_SECONDS
from vsa_core.clients import client
from vsa_core.settings import BackupWorkflow, Registry
from vsa_core.steps import on_context


class BackupService:
    def __init__(
        self,
        *,
        registry: ArrayRegistry,
        backups_registry: BackupRegistry,
        arrays: ArrayService,
        state_machine_arn: str = "",
        ec2: Any = None,
        ssm: Any = None,
        sfn: Any = None,
        cloudwatch: Any = None,
        signals: Signals | None = None,
        clock: Callable[[], float] = time.time,
        freeze_lead: float = FREEZE_LEAD_SECONDS,
    ) -> None:
        self.ctx = BackupContext(
            registry=registry,
            backups=backups_registry,
            arrays=arrays,
            ec2=ec2 or client("ec2"),
            ssm=ssm or client("ssm"),
            sfn=sfn,
            cloudwatch=cloudwatch,
            state_machine_arn=state_machine_arn,
            signals=signals,
            clock=clock,
            freeze_lead=freeze_lead,
        )

    # requests, reading, deleting, retention, restore
    array = on_context(aws_sets.array)
    start = on_context(aws_sets.start)
    get = on_context(aws_sets.get)
    sets = on_context(aws_sets.sets)
    delete = on_context(aws_sets.delete)
    retention = on_context(aws_retention.retention)
    apply_retention = on_context(aws_retention.apply_retention)
    retention_caller = on_context(aws_retention.caller_after)
    record_retention_failure = on_context(aws_retention.record_failure)
    restore = on_context(aws_restore.restore)
    copies_here = on_context(aws_restore.copies_here)
    restore_copy = on_context(aws_restore.restore_copy)
    # the ConsistentBackup workflow's steps
    preflight = on_context(aws_preflight.preflight)
    hosts_ready = on_context(aws_preflight.hosts_ready)
    freeze = on_context(aws_snapshot.freeze)
    snapshot = on_context(aws_snapshot.snapshot)
    record_hosts = on_context(aws_finish.record_hosts)
    progress = on_context(aws_finish.progress)
    finish = on_context(aws_finish.finish)
    fail = on_context(aws_finish.fail)


class BackupSettings(Registry, BackupWorkflow):
    """What the service reads: the registry table and the ConsistentBackup workflow."""


def from_settings(
    settings: BackupSettings, signals_bucket: str = "", freeze_lead: float = FREEZE_LEAD_SECONDS
) -> BackupService:
    """The service as the Lambdas use it: the registry table and workflow from the settings;
    the workflow's steps also name the signals' bucket and the hosts' freeze lead."""
    return BackupService(
        signals=signals_of(signals_bucket),
        freeze_lead=freeze_lead,
        registry=ArrayRegistry(settings.table_name),
        backups_registry=BackupRegistry(settings.table_name),
        # no role: a backup reads its array and never creates a schedule
        arrays=ArrayService(scheduler_role_arn=""),
        state_machine_arn=settings.backup_state_machine_arn,
    )
