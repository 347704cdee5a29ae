"""Typed settings, read from the environment lazily (never at import)."""

import os
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True)

    table_name: str = Field(min_length=1)
    scale_state_machine_arn: str = ""
    backup_scheduler_role_arn: str = ""
    delete_state_machine_arn: str = ""
    reconcile_state_machine_arn: str = ""
    alarm_rearm_seconds: int = Field(default=60, ge=1, le=3600)
    bootstrap_state_machine_arn: str = ""
    drain_state_machine_arn: str = ""
    backup_state_machine_arn: str = ""
    idempotency_table_name: str = ""
    retention_max_deletions: int = Field(default=5, ge=0, le=100)
    thaw_io_document: str = ""
    freeze_io_document: str = ""
    configure_target_document: str = ""
    connect_path_document: str = ""
    disconnect_path_document: str = ""
    report_paths_document: str = ""
    report_exports_document: str = ""
    node_configfs_root: str = "/sys/kernel/config"
    node_nvme_command: str = "nvme"
    node_sysfs_root: str = "/sys"
    node_mounts_file: str = "/proc/self/mounts"
    node_aws_command: str = "aws"
    keys_kms_key_id: str = ""
    health_check_minutes: int = Field(default=5, ge=1, le=60)
    history_retention_days: int = Field(default=90, ge=1, le=3650)
    deployment: str = Field(default="vsa", description="the stack's name: our metrics' Deployment dimension")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings(
        table_name=os.environ.get("VSA_TABLE_NAME", ""),
        scale_state_machine_arn=os.environ.get("VSA_SCALE_STATE_MACHINE_ARN", ""),
        backup_scheduler_role_arn=os.environ.get("VSA_BACKUP_SCHEDULER_ROLE_ARN", ""),
        delete_state_machine_arn=os.environ.get("VSA_DELETE_STATE_MACHINE_ARN", ""),
        reconcile_state_machine_arn=os.environ.get("VSA_RECONCILE_STATE_MACHINE_ARN", ""),
        alarm_rearm_seconds=int(os.environ.get("VSA_ALARM_REARM_SECONDS", "60")),
        bootstrap_state_machine_arn=os.environ.get("VSA_BOOTSTRAP_STATE_MACHINE_ARN", ""),
        drain_state_machine_arn=os.environ.get("VSA_DRAIN_STATE_MACHINE_ARN", ""),
        backup_state_machine_arn=os.environ.get("VSA_BACKUP_STATE_MACHINE_ARN", ""),
        idempotency_table_name=os.environ.get("VSA_IDEMPOTENCY_TABLE_NAME", ""),
        retention_max_deletions=int(os.environ.get("VSA_RETENTION_MAX_DELETIONS", "5")),
        thaw_io_document=os.environ.get("VSA_THAW_IO_DOCUMENT", ""),
        freeze_io_document=os.environ.get("VSA_FREEZE_IO_DOCUMENT", ""),
        configure_target_document=os.environ.get("VSA_CONFIGURE_TARGET_DOCUMENT", ""),
        connect_path_document=os.environ.get("VSA_CONNECT_PATH_DOCUMENT", ""),
        disconnect_path_document=os.environ.get("VSA_DISCONNECT_PATH_DOCUMENT", ""),
        report_paths_document=os.environ.get("VSA_REPORT_PATHS_DOCUMENT", ""),
        report_exports_document=os.environ.get("VSA_REPORT_EXPORTS_DOCUMENT", ""),
        node_configfs_root=os.environ.get("VSA_NODE_CONFIGFS_ROOT", "/sys/kernel/config"),
        node_nvme_command=os.environ.get("VSA_NODE_NVME_COMMAND", "nvme"),
        node_sysfs_root=os.environ.get("VSA_NODE_SYSFS_ROOT", "/sys"),
        node_mounts_file=os.environ.get("VSA_NODE_MOUNTS_FILE", "/proc/self/mounts"),
        node_aws_command=os.environ.get("VSA_NODE_AWS_COMMAND", "aws"),
        keys_kms_key_id=os.environ.get("VSA_KEYS_KMS_KEY_ID", ""),
        health_check_minutes=int(os.environ.get("VSA_HEALTH_CHECK_MINUTES", "5")),
        history_retention_days=int(os.environ.get("VSA_HISTORY_RETENTION_DAYS", "90")),
        deployment=os.environ.get("VSA_DEPLOYMENT", "vsa"),
    )
