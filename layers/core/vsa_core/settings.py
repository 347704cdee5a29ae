"""Each function's settings: small frozen models, one field per environment variable.

A field's alias is its variable (``VSA_TABLE_NAME``) and its description says what a function
needs it for, so an error names the variable an operator sets, not a Python attribute. The models
here are grouped by concern (the registry table, one workflow's ARN, the SSM documents, the node
command paths, one tuning number); a function's settings inherit exactly the groups it uses and
its handler loads them through a ``Loader`` on the first invocation, never at import (tests and
tools import handlers with no environment). Every field is required: the template gives each
function every variable its settings read (tests/infra/test_function_settings.py), so a default
would only hide a deployment that lost one.
"""

import os
from collections.abc import Callable, Mapping
from functools import wraps
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vsa_core.naming import DEPLOYMENT_ENV, DEPLOYMENT_PATTERN


class SettingsError(RuntimeError):
    """A function's environment lacks a variable its settings need, or holds one they refuse."""


class Variables(BaseModel):
    """Settings read from environment variables: each field's alias is its variable's name
    (fields still accept their own names, so tests and tools can build one directly)."""

    model_config = ConfigDict(frozen=True, extra="ignore", validate_by_name=True, validate_by_alias=True)

    @classmethod
    def variables(cls) -> dict[str, str]:
        """Each variable these settings read → what for."""
        return {str(f.alias): str(f.description) for f in cls.model_fields.values()}

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Self:
        """These settings from ``environ`` (default: the process's); a SettingsError naming
        every variable that is missing, empty or out of bounds."""
        env = os.environ if environ is None else environ
        required = {str(f.alias) for f in cls.model_fields.values() if f.is_required()}
        problems = [
            f"{name} is missing or empty: the function needs it for {purpose}"
            for name, purpose in cls.variables().items()
            if name in required and not env.get(name)
        ]
        if problems:
            raise SettingsError("; ".join(problems))
        try:
            return cls.model_validate({name: env[name] for name in cls.variables() if env.get(name)})
        except ValidationError as error:
            raise SettingsError(
                "; ".join(
                    f"{'.'.join(map(str, e['loc']))}={e['input']!r}: {e['msg']}" for e in error.errors()
                )
            ) from error


class Loader[S: Variables]:
    """A function's settings, loaded on first use and kept for the container's life."""

    _all: ClassVar[list["Loader[Any]"]] = []

    def __init__(self, model: type[S]) -> None:
        self.model = model
        self._loaded: S | None = None
        Loader._all.append(self)

    def __call__(self) -> S:
        if self._loaded is None:
            self._loaded = self.model.from_environment()
        return self._loaded

    def cache_clear(self) -> None:
        self._loaded = None

    @classmethod
    def clear_all(cls) -> None:
        """Forget every loaded settings (tests change the environment between invocations)."""
        for loader in cls._all:
            loader.cache_clear()

    def first[**P, R](self, handler: Callable[P, R]) -> Callable[P, R]:
        """Load the settings before ``handler`` runs (before its event is even parsed), so a
        missing variable fails the first invocation, whatever the event."""

        @wraps(handler)
        def loading(*args: P.args, **kwargs: P.kwargs) -> R:
            self()
            return handler(*args, **kwargs)

        return loading


# The groups: small, each one concern. Every function reads VSA_DEPLOYMENT_NAME (vsa_core.naming
# names its resources after it), so every function's settings start from Deployment.


class HistoryRetention(Variables):
    history_retention_days: int = Field(
        alias="VSA_HISTORY_RETENTION_DAYS",
        ge=1,
        le=3650,
        description="how long the array's history (changes, scale decisions) is kept",
    )


class Deployment(HistoryRetention):
    """What every function of the deployment reads (the template's Globals variables): the
    deployment's name, and its history's retention (any function may record a change)."""

    deployment_name: str = Field(
        alias=DEPLOYMENT_ENV,
        pattern=DEPLOYMENT_PATTERN.pattern,
        description="the names of this deployment's resources (vsa_core.naming)",
    )


class Registry(Variables):
    table_name: str = Field(alias="VSA_TABLE_NAME", description="the array registry table")


class StackMetrics(Variables):
    stack_name: str = Field(
        alias="VSA_DEPLOYMENT", description="the Deployment dimension of the stack's own metrics"
    )


class ScaleWorkflow(Variables):
    scale_state_machine_arn: str = Field(
        alias="VSA_SCALE_STATE_MACHINE_ARN", description="starting the ScaleArray workflow"
    )


class ControllerWorkflows(Variables):
    bootstrap_state_machine_arn: str = Field(
        alias="VSA_BOOTSTRAP_STATE_MACHINE_ARN", description="the BootstrapController workflow"
    )
    drain_state_machine_arn: str = Field(
        alias="VSA_DRAIN_STATE_MACHINE_ARN", description="the DrainController workflow"
    )


class ReconcileWorkflow(Variables):
    reconcile_state_machine_arn: str = Field(
        alias="VSA_RECONCILE_STATE_MACHINE_ARN", description="starting the ReconcileArray workflow"
    )


class DeleteWorkflow(Variables):
    delete_state_machine_arn: str = Field(
        alias="VSA_DELETE_STATE_MACHINE_ARN", description="starting the DeleteArray workflow"
    )


class BackupWorkflow(Variables):
    backup_state_machine_arn: str = Field(
        alias="VSA_BACKUP_STATE_MACHINE_ARN", description="starting the ConsistentBackup workflow"
    )


class DrillWorkflow(Variables):
    drill_state_machine_arn: str = Field(
        alias="VSA_DRILL_STATE_MACHINE_ARN", description="starting the RestoreDrill workflow"
    )


class DrillSteps(Variables):
    """What the RestoreDrill steps act with: the document, the drill instances' profile, where
    the drill instance finds its volumes and mounts them."""

    drill_check_document: str = Field(
        alias="VSA_DRILL_CHECK_DOCUMENT", description="the drill-check document"
    )
    drill_instance_profile_arn: str = Field(
        alias="VSA_DRILL_INSTANCE_PROFILE_ARN", description="the instance profile every drill instance gets"
    )
    node_device_dir: str = Field(
        alias="VSA_NODE_DEVICE_DIR", description="where a node finds its EBS devices"
    )
    node_drill_mount_dir: str = Field(
        alias="VSA_NODE_DRILL_MOUNT_DIR", description="where drill-check mounts the restored filesystems"
    )


class CopyWorkflow(Variables):
    copy_state_machine_arn: str = Field(
        alias="VSA_COPY_STATE_MACHINE_ARN", description="the CopyBackupSet workflow"
    )


class CopyRegions(Variables):
    backup_copy_regions: str = Field(
        default="",  # the stack's default: no Region, no copies
        alias="VSA_BACKUP_COPY_REGIONS",
        description="the Regions the copy steps may copy into (the stack's BackupCopyRegions, "
        "comma-separated)",
    )

    backup_copy_accounts: str = Field(
        default="",  # the stack's default: copies stay in this account
        alias="VSA_BACKUP_COPY_ACCOUNTS",
        description="the other accounts copies may go to (the stack's BackupCopyAccounts, comma-separated)",
    )

    @property
    def copy_regions(self) -> tuple[str, ...]:
        return tuple(r.strip() for r in self.backup_copy_regions.split(",") if r.strip())

    @property
    def copy_accounts(self) -> tuple[str, ...]:
        return tuple(a.strip() for a in self.backup_copy_accounts.split(",") if a.strip())


class AlarmRearm(Variables):
    alarm_rearm_seconds: int = Field(
        alias="VSA_ALARM_REARM_SECONDS", ge=1, le=3600, description="when a scale run re-arms its alarm"
    )


class HealthPeriod(Variables):
    health_check_minutes: int = Field(
        alias="VSA_HEALTH_CHECK_MINUTES",
        ge=1,
        le=60,
        description="the health check's period (how old a host report or a forecast may be)",
    )


class BackupRetention(Variables):
    retention_max_deletions: int = Field(
        alias="VSA_RETENTION_MAX_DELETIONS",
        ge=0,
        le=100,
        description="the snapshots one retention run deletes",
    )


class IdempotencyTable(Variables):
    idempotency_table_name: str = Field(
        alias="VSA_IDEMPOTENCY_TABLE_NAME", description="the table that makes API POSTs idempotent"
    )


class NodeDocumentNames(Variables):
    """The SSM documents that configure and report controllers and hosts."""

    configure_target_document: str = Field(
        alias="VSA_CONFIGURE_TARGET_DOCUMENT", description="the controllers' configure-target document"
    )
    connect_path_document: str = Field(
        alias="VSA_CONNECT_PATH_DOCUMENT", description="the hosts' connect-path document"
    )
    disconnect_path_document: str = Field(
        alias="VSA_DISCONNECT_PATH_DOCUMENT", description="the hosts' disconnect-path document"
    )
    report_paths_document: str = Field(
        alias="VSA_REPORT_PATHS_DOCUMENT", description="the hosts' report-paths document"
    )
    report_exports_document: str = Field(
        alias="VSA_REPORT_EXPORTS_DOCUMENT", description="the controllers' report-exports document"
    )


class BackupDocumentNames(Variables):
    freeze_io_document: str = Field(
        alias="VSA_FREEZE_IO_DOCUMENT", description="the hosts' freeze-io document"
    )
    thaw_io_document: str = Field(alias="VSA_THAW_IO_DOCUMENT", description="the hosts' thaw-io document")


class BackupSignals(Variables):
    # Optional on purpose: without a bucket the workflow runs the design before the signals (a
    # look at Run Command's status each second, thaw-io as the thaw), the one every deployment
    # falls back to when S3 cannot be read. `make bench-backups` runs it beside the signals.
    signals_bucket: str = Field(
        "",
        alias="VSA_SIGNALS_BUCKET",
        description="the bucket of the freeze window's signals (the hosts' frozen reports, the thaw marker);"
        " empty: no signals",
    )
    # Optional: the default suits Run Command on AWS; 0 sends no instant (each host freezes as its
    # command arrives), which `make bench-backups` runs beside the default.
    freeze_lead_milliseconds: int = Field(
        2000,
        alias="VSA_FREEZE_LEAD_MILLISECONDS",
        ge=0,
        le=10_000,
        description="how long after the Freeze step's sends every host freezes, at one instant; 0: at once",
    )


class NodeCommands(Variables):
    """Where the node-side checks find their commands and kernel files (the local cloud's nodes
    are processes with their own)."""

    node_configfs_root: str = Field(alias="VSA_NODE_CONFIGFS_ROOT", description="the controllers' configfs")
    node_nvme_command: str = Field(alias="VSA_NODE_NVME_COMMAND", description="the hosts' nvme command")
    node_sysfs_root: str = Field(alias="VSA_NODE_SYSFS_ROOT", description="the hosts' sysfs")
    node_mounts_file: str = Field(alias="VSA_NODE_MOUNTS_FILE", description="the hosts' mount table")


class SchedulerRole(Variables):
    backup_scheduler_role_arn: str = Field(
        alias="VSA_BACKUP_SCHEDULER_ROLE_ARN",
        description="the role backup schedules run as (its ARN names the account)",
    )


class NodeKeys(Variables):
    keys_kms_key_id: str = Field(
        alias="VSA_KEYS_KMS_KEY_ID", description="the KMS key of the arrays' DH-HMAC-CHAP secrets"
    )


class NodeRoles(Variables):
    node_role_path: str = Field(
        alias="VSA_NODE_ROLE_PATH", description="the IAM path of the roles a spec may give controllers"
    )


class EventBus(Variables):
    event_bus_name: str = Field(
        alias="VSA_EVENT_BUS_NAME", description="the bus backup schedules put events on"
    )
