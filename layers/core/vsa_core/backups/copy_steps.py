"""The requests of the CopyBackupSet steps (pure models): one shape for every step, told apart
by ``step``; what ``task_copy`` parses its event into."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from vsa_core.arrays.spec import ArrayId
from vsa_core.backups.sets import BackupId

CopyStep = Literal["start", "progress", "retention", "fail", "summary"]


class CopyStepRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    step: CopyStep
    array_id: ArrayId = Field(alias="arrayId")
    backup_id: BackupId = Field(alias="backupId")
    region: str | None = Field(default=None, pattern=r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]{1,2}$")
    account_id: str | None = Field(default=None, alias="accountId", pattern=r"^[0-9]{12}$")
    error: dict[str, Any] | None = Field(default=None, description="fail: the error the workflow caught")
