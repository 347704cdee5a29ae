"""The requests of the ConsistentBackup steps (pure models): one per step, told apart by
``step``; what ``task_backup`` parses its event into."""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from vsa_core.arrays.spec import ArrayId
from vsa_core.backups.sets import BackupId


class _Step(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    array_id: ArrayId = Field(alias="arrayId")
    backup_id: BackupId = Field(alias="backupId")


class Preflight(_Step):
    step: Literal["preflight"]


class HostsReady(_Step):
    step: Literal["hosts_ready"]
    checks: list[dict[str, Any]] = Field(default_factory=list)


class Freeze(_Step):
    step: Literal["freeze"]
    hosts: list[dict[str, Any]] = Field(default_factory=list)


class Snapshot(_Step):
    step: Literal["snapshot"]
    controller: str = Field(pattern=r"^i-[0-9a-f]{8,17}$")
    excluded: list[str] = Field(default_factory=list)
    volumes: list[dict[str, Any]] = Field(default_factory=list)
    freezing: dict[str, Any] = Field(default_factory=dict)
    freeze_timeout: int = Field(default=10, alias="freezeTimeout", ge=1, le=60)
    previous: dict[str, Any] = Field(
        default_factory=dict, description="the last look's answer (ssmCheckedAt)"
    )


class RecordHosts(_Step):
    step: Literal["record_hosts"]
    freezes: list[dict[str, Any]] = Field(default_factory=list)
    thaws: list[dict[str, Any]] = Field(default_factory=list)


class Progress(_Step):
    step: Literal["progress"]
    last_wait: int | None = Field(default=None, alias="lastWait")


class Finish(_Step):
    step: Literal["finish"]


class Fail(_Step):
    step: Literal["fail"]
    error: dict[str, Any] | None = None
    freezes: list[dict[str, Any]] = Field(default_factory=list)
    thaws: list[dict[str, Any]] = Field(default_factory=list)


class Retention(_Step):
    step: Literal["retention"]


class RetentionFailed(_Step):
    step: Literal["retention_failed"]
    error: dict[str, Any] | None = None


class Request(
    RootModel[
        Annotated[
            Preflight
            | HostsReady
            | Freeze
            | Snapshot
            | RecordHosts
            | Progress
            | Finish
            | Fail
            | Retention
            | RetentionFailed,
            Field(discriminator="step"),
        ]
    ]
):
    pass
