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

    def latest_datapoint(self) -> float | None:
        """The newest datapoint CloudWatch evaluated (``reasonData.recentDatapoints[-1]``), or None
        when the state change carries none: an alarm that went to ALARM on missing data (the low
        alarm treats it as breaching) sends ``recentDatapoints: []`` and ``evaluatedDatapoints``
        with timestamps only, and SetAlarmState may send no ``reasonData`` at all. Such a change
        still starts ScaleArray, which reads the demand itself (GetMetricData); only a
        ``reasonData`` that is not what CloudWatch writes is refused."""
        if not self.reason_data:
            return None
        try:
            data: Any = json.loads(self.reason_data)
        except json.JSONDecodeError as error:
            raise InvalidEventError(f"alarm reasonData is not JSON: {error}") from error
        if not isinstance(data, dict):
            raise InvalidEventError(f"alarm reasonData is not a JSON object: {self.reason_data!r}")
        points = data.get("recentDatapoints")
        if points is None or points == []:
            return None
        if not isinstance(points, list):
            raise InvalidEventError(f"alarm reasonData's recentDatapoints is not a list: {points!r}")
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


EVENT_PREFIX = "lookahead:"
"""A look-ahead run's ``eventId`` starts with this (the decision record carries it)."""


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
    not_before: str | None = Field(
        alias="notBefore", default=None, pattern=r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$"
    )
    """A look-ahead's run for a cycle's fall: the workflow waits until then (RFC 3339, UTC, as
    a Wait state's ``TimestampPath`` takes it) before it takes the lock; absent, it runs at once."""
    rearm_seconds: int = Field(alias="rearmSeconds", default=60, ge=1, le=3600)
    """The base pause before the run's alarm is set back to OK (``rules.rearm_after``)."""
    demand: ReadDemand | None = None
    """Set by the workflow's ReadDemand step; absent, the alarm's datapoint is the demand."""

    @property
    def by_high_alarm(self) -> bool:
        """The high alarm's own change to ALARM started the run (not the low alarm's, not the
        health check's look-ahead standing in for either): ``PlanInput.by_high_alarm``."""
        return self.alarm_kind == "high" and not self.event_id.startswith(EVENT_PREFIX)


class ReadDemandRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True, defer_build=True)

    array_id: ArrayId = Field(alias="arrayId")
