"""The EventBridge ``CloudWatch Alarm State Change`` of an array's IOPS alarm (``on_iops_alarm``).

Apart from the workflow payloads (``vsa_core.scaling.events``) because it subclasses powertools'
``EventBridgeModel``, whose package import (the parser's, with ``pydantic.networks``) the two
steps that parse a payload need not pay on their cold start. Built at its first use
(``defer_build``), as the payloads are."""

import json
import math
from typing import Any, Literal

from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import BaseModel, ConfigDict, Field

from vsa_core.errors import InvalidEventError

_DEFERRED = ConfigDict(defer_build=True)

AlarmStateValue = Literal["OK", "ALARM", "INSUFFICIENT_DATA"]


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
