"""Models of the scaling workflow's payloads: ScaleArray's input (``ScaleRequest``, as
``on_iops_alarm`` starts it) and its ReadDemand step's request and result.

Two steps import this module and each parses one of its payloads (task_plan_scale the
ScaleRequest, task_read_demand the ReadDemandRequest), and on_iops_alarm builds the ScaleRequest:
every model is built at its first use (``defer_build``), not at import, so none builds the
others'. The alarm event itself is ``vsa_core.scaling.alarm_event``."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from vsa_core.arrays.ids import ArrayId


class ReadDemand(BaseModel):
    """The ReadDemand step's result: the array's demand minute by minute (GetMetricData)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", defer_build=True)

    demand_iops: float = Field(alias="demandIops", ge=0, allow_inf_nan=False)
    recent_demand: list[float] = Field(alias="recentDemand", default_factory=list, max_length=60)
    newest_minute: str | None = Field(alias="newestMinute", default=None)
    source: str = "AWS/EBS"


class ScaleRequest(BaseModel):
    """Input of the ScaleArray workflow, as ``on_iops_alarm`` starts it."""

    model_config = ConfigDict(populate_by_name=True, defer_build=True)

    array_id: str = Field(alias="arrayId")
    alarm_name: str = Field(alias="alarmName")
    alarm_kind: Literal["high", "low"] = Field(alias="alarmKind")
    demand_iops: float | None = Field(alias="demandIops", default=None, ge=0, allow_inf_nan=False)
    """The alarm's newest datapoint; None when it went to ALARM on missing data."""
    state_timestamp: str = Field(alias="stateTimestamp")
    event_id: str = Field(alias="eventId")
    lock_now: int = Field(alias="lockNow", ge=0)
    """Epoch seconds when the trigger ran: a scaling lock whose lease ended before is free."""
    lock_until: int = Field(alias="lockUntil", ge=0)
    """Epoch seconds until which this workflow's scaling lock holds (lease)."""
    rearm_seconds: int = Field(alias="rearmSeconds", default=60, ge=1, le=3600)
    """The base pause before the run's alarm is set back to OK (``rules.rearm_after``)."""
    demand: ReadDemand | None = None
    """Set by the workflow's ReadDemand step; absent, the alarm's datapoint is the demand."""


class ReadDemandRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True, defer_build=True)

    array_id: ArrayId = Field(alias="arrayId")
