"""The requests of the RestoreDrill steps (pure models): one shape for every step, told apart
by ``step``; what ``task_drill`` parses its event into."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from vsa_core.arrays.spec import ArrayId
from vsa_core.backups.drills import DrillId

DrillStep = Literal[
    "restore",
    "volumes_ready",
    "launch",
    "node_ready",
    "attach",
    "attached",
    "check",
    "checked",
    "fail",
    "cleanup",
]


class DrillStepRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    step: DrillStep
    array_id: ArrayId = Field(alias="arrayId")
    drill_id: DrillId = Field(alias="drillId")
    error: dict[str, Any] | None = Field(default=None, description="fail: the error the workflow caught")


class DrillRunInput(BaseModel):
    """What a RestoreDrill run was started with (``aws_drills._start_run``)."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    array_id: ArrayId = Field(alias="arrayId")
    drill_id: DrillId = Field(alias="drillId")
    cleanup_only: bool = Field(default=False, alias="cleanupOnly")
