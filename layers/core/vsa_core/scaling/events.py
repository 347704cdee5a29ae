"""Models of the events and workflow payloads the control plane consumes.

Three handlers import this module and each parses one of its payloads (on_iops_alarm the alarm
event, task_plan_scale the ScaleRequest, task_read_demand the ReadDemandRequest): every model is
built at its first use (``defer_build``), not at import, so none builds the others'."""

import json
import math
from typing import Any, Literal

from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import BaseModel, ConfigDict, Field

from vsa_core.arrays.ids import ArrayId
from vsa_core.errors import InvalidEventError

AlarmStateValue = Literal["OK", "ALARM", "INSUFFICIENT_DATA"]


_DEFERRED = ConfigDict(defer_build=True)


class AlarmState(BaseModel):
    model_config = _DEFERRED

    value: AlarmStateValue
    reason: str = ""
    reason_data: str | None = Field(default=None, alias="reasonData")
    timestamp: str

    def latest_datapoint(self) -> float:
        """The newest datapoint CloudWatch evaluated (``reasonData.recentDatapoints[-1]``)."""
        if not self.reason_data:
            raise InvalidEventError("alarm state carries no reasonData: cannot read the demand")
        try:
            data: Any = json.loads(self.reason_data)
        except json.JSONDecodeError as error:
            raise InvalidEventError(f"alarm reasonData is not JSON: {error}") from error
        points = data.get("recentDatapoints") if isinstance(data, dict) else None
        if not isinstance(points, list) or not points:
            raise InvalidEventError("alarm reasonData has no recentDatapoints list: cannot read the demand")
        latest = points[-1]
        if isinstance(latest, bool) or not isinstance(latest, int | float) or not math.isfinite(latest):
            raise InvalidEventError(f"alarm's latest datapoint {latest!r} is not a finite number of IOPS")
        return float(latest)


class AlarmStateChangeDetail(BaseModel):
    model_config = _DEFERRED

    alarm_name: str = Field(alias="alarmName")
    state: AlarmState
    previous_state: AlarmState | None = Field(default=None, alias="previousState")
    configuration: dict[str, Any] = Field(default_factory=dict)


class AlarmStateChangeEvent(EventBridgeModel):
    """EventBridge ``CloudWatch Alarm State Change`` (source ``aws.cloudwatch``)."""

    model_config = _DEFERRED  # merged with EventBridgeModel's

    detail: AlarmStateChangeDetail


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
    demand_iops: float = Field(alias="demandIops", ge=0, allow_inf_nan=False)
    state_timestamp: str = Field(alias="stateTimestamp")
    event_id: str = Field(alias="eventId")
    lock_now: int = Field(alias="lockNow", ge=0)
    """Epoch seconds when the trigger ran: a scaling lock whose lease ended before is free."""
    lock_until: int = Field(alias="lockUntil", ge=0)
    """Epoch seconds until which this workflow's scaling lock holds (lease)."""
    rearm_seconds: int = Field(alias="rearmSeconds", default=60, ge=1, le=3600)
    """How long after the run its alarm is set back to OK (when the decision says re-arm)."""
    demand: ReadDemand | None = None
    """Set by the workflow's ReadDemand step; absent, the alarm's datapoint is the demand."""


class ReadDemandRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True, defer_build=True)

    array_id: ArrayId = Field(alias="arrayId")
