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
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.spec import RegisteredArray
from vsa_core.backups import aws_finish, aws_preflight, aws_restore, aws_retention, aws_sets, aws_snapshot
from vsa_core.backups.aws_context import BackupContext
from vsa_core.backups.sets import BackupMode, BackupSet, RetentionPlan
from vsa_core.clients import client
from vsa_core.registry import ArrayRegistry, BackupRegistry
from vsa_core.settings import Settings


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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ctx = BackupContext(
            registry=registry,
            backups=backups_registry,
            arrays=arrays,
            ec2=ec2 or client("ec2"),
            ssm=ssm or client("ssm"),
            sfn=sfn,
            state_machine_arn=state_machine_arn,
            clock=clock,
        )

    # --- requests, reading, deleting (aws_sets), retention, restore --------------------------

    def array(self, array_id: str) -> RegisteredArray:
        return aws_sets.array(self.ctx, array_id)

    def start(
        self,
        array_id: str,
        *,
        mode: BackupMode,
        label: str | None = None,
        trigger: Literal["api", "schedule"] = "api",
        backup_id: str | None = None,
    ) -> tuple[bool, BackupSet]:
        return aws_sets.start(
            self.ctx, array_id, mode=mode, label=label, trigger=trigger, backup_id=backup_id
        )

    def get(self, array_id: str, backup_id: str) -> BackupSet:
        return aws_sets.get(self.ctx, array_id, backup_id)

    def sets(self, array_id: str) -> list[BackupSet]:
        return aws_sets.sets(self.ctx, array_id)

    def delete(self, array_id: str, backup_id: str) -> dict[str, Any]:
        return aws_sets.delete(self.ctx, array_id, backup_id)

    def retention(self, array_id: str, keep: int | None, max_deletions: int) -> tuple[int, RetentionPlan]:
        return aws_retention.retention(self.ctx, array_id, keep, max_deletions)

    def apply_retention(self, array_id: str, keep: int | None, max_deletions: int) -> dict[str, Any]:
        return aws_retention.apply_retention(self.ctx, array_id, keep, max_deletions)

    def restore(self, array_id: str, backup_id: str, new_array_id: str | None) -> dict[str, Any]:
        return aws_restore.restore(self.ctx, array_id, backup_id, new_array_id)

    # --- the workflow's steps (aws_preflight, aws_snapshot, aws_finish) -----------------------

    def preflight(self, array_id: str, backup_id: str) -> dict[str, Any]:
        return aws_preflight.preflight(self.ctx, array_id, backup_id)

    def hosts_ready(self, checks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return aws_preflight.hosts_ready(self.ctx, checks)

    def freeze(self, backup_id: str, hosts: Sequence[Mapping[str, Any]], document: str) -> dict[str, Any]:
        return aws_snapshot.freeze(self.ctx, backup_id, hosts, document)

    def snapshot(
        self,
        array_id: str,
        backup_id: str,
        controller: str,
        excluded: Sequence[str],
        volumes: Sequence[Mapping[str, Any]],
        freezing: Mapping[str, Any] | None = None,
        thaw_document: str = "",
        freeze_timeout: float = 10,
    ) -> dict[str, Any]:
        return aws_snapshot.snapshot(
            self.ctx,
            array_id,
            backup_id,
            controller,
            excluded,
            volumes,
            freezing,
            thaw_document,
            freeze_timeout,
        )

    def record_hosts(
        self,
        array_id: str,
        backup_id: str,
        freezes: Sequence[Mapping[str, Any]],
        thaws: Sequence[Mapping[str, Any]],
    ) -> dict[str, Any]:
        return aws_finish.record_hosts(self.ctx, array_id, backup_id, freezes, thaws)

    def progress(self, array_id: str, backup_id: str, last_wait: int | None) -> dict[str, Any]:
        return aws_finish.progress(self.ctx, array_id, backup_id, last_wait)

    def finish(self, array_id: str, backup_id: str) -> dict[str, Any]:
        return aws_finish.finish(self.ctx, array_id, backup_id)

    def fail(
        self,
        array_id: str,
        backup_id: str,
        error: Mapping[str, Any] | None,
        freezes: Sequence[Mapping[str, Any]] = (),
        thaws: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any]:
        return aws_finish.fail(self.ctx, array_id, backup_id, error, freezes, thaws)


def from_settings(settings: Settings) -> BackupService:
    """The service as the Lambdas use it: the registry table and workflow from the settings."""
    return BackupService(
        registry=ArrayRegistry(settings.table_name),
        backups_registry=BackupRegistry(settings.table_name),
        arrays=ArrayService(scheduler_role_arn=settings.backup_scheduler_role_arn),
        state_machine_arn=settings.backup_state_machine_arn,
    )
