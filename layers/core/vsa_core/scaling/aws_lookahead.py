"""The look-ahead on AWS: start ScaleArray when the stored forecast floor is above the array's
desired count (``forecast.lookahead`` says when), so a recurring surge has its controllers
booted before it comes rather than a boot time after its high alarm.

The run is the alarm's own workflow with the alarm's own request shape (``ScaleRequest``): the
high alarm's name and kind (the run re-arms it at its end, as any run does: harmless when it is
OK, and a breach that persists fires again), no alarm datapoint (ScaleArray reads the demand
itself), and an ``eventId`` that says it came from the look-ahead. The execution name is derived
from the array and the health-check period the run belongs to: a second health-check run in the
same period (an operator's "check now") starts nothing new.
"""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from vsa_core.arrays.lock import SCALE_LEASE_SECONDS
from vsa_core.naming import iops_alarm_name, scale_execution_name
from vsa_core.observability import logger
from vsa_core.scaling.events import EVENT_PREFIX, ScaleRequest


@dataclass(frozen=True)
class ScaleStarter:
    sfn: Any
    state_machine_arn: str
    rearm_seconds: int

    def start(
        self,
        array_id: str,
        now: datetime,
        period: timedelta,
        kind: Literal["high", "low"] = "high",
        at: datetime | None = None,
    ) -> str:
        """Start ScaleArray for the array as ``kind``'s alarm would (the high one ahead of a
        surge, the low one for a cycle's fall), at once or, ``at`` a later minute, waiting until
        then (``notBefore``: the lock's lease counts from it); answers the execution's name (also
        when this period's run for that minute was started already)."""
        seconds = int(period.total_seconds())
        slot = datetime.fromtimestamp(int(now.timestamp()) // seconds * seconds, now.tzinfo)
        alarm = iops_alarm_name(array_id, kind)
        when = at if at is not None and at > now else now
        stamp = slot.isoformat()
        if at is not None:  # one run a minute for a fall: each its own name
            stamp += f"@{at.replace(second=0, microsecond=0).isoformat()}"
        name = scale_execution_name(array_id, f"{EVENT_PREFIX}{alarm}", stamp)
        epoch = int(when.timestamp())
        request = ScaleRequest(
            array_id=array_id,
            alarm_name=alarm,
            alarm_kind=kind,
            demand_iops=None,
            state_timestamp=now.isoformat(),
            event_id=f"{EVENT_PREFIX}{stamp}",
            lock_now=epoch,
            lock_until=epoch + SCALE_LEASE_SECONDS,
            not_before=when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if when > now else None,
            rearm_seconds=self.rearm_seconds,
        )
        try:
            self.sfn.start_execution(
                stateMachineArn=self.state_machine_arn,
                name=name,
                input=request.model_dump_json(by_alias=True, exclude_none=True),
            )
        except self.sfn.exceptions.ExecutionAlreadyExists:
            logger.info("look-ahead already started this period", extra={"execution": name})
        return name
