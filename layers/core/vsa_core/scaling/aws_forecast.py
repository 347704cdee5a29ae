"""The forecast floor on AWS: the array's demand history from CloudWatch (GetMetricData), then the
pure ``vsa_core.scaling.forecast.floor_from_minutes``.

The history is the array's demand metric, one value a minute over the last
``forecast.HISTORY_DAYS`` (14) days: the spec's host-published ``demandMetric`` when it has one,
else ``VSA/Arrays DemandIops`` (``Maximum``), which ``task_publish_demand`` puts every minute for
every array whose demand is its volumes' EBS IOPS (one series, where the volumes' own metric
math would be two series per volume over 20,160 minutes).

GetMetricData's limits, respected here:

- CloudWatch keeps one-minute datapoints 15 days (then 5-minute ones 63 days): 14 days at a
  60-second period is within it, and a period of 60 s is allowed for a start time up to 15 days
  back;
- one call returns at most 100,800 datapoints; 14 days of one series at one a minute is 20,160,
  yet CloudWatch may still page an answer: every page is read (``NextToken``) and a result's
  pieces are joined;
- a minute without a datapoint is missing (``None``), never zero demand: the floor counts it as
  nothing recurring.

Reading fails soft: the floor is then off and says why (the reactive planner decides alone).
"""

from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from vsa_core.arrays.spec import ArraySpec
from vsa_core.observability import logger
from vsa_core.scaling import demand, forecast

PERIOD_SECONDS = 60
MAX_DATAPOINTS = 100_800
"""GetMetricData's most datapoints in one call."""


def history_queries(spec: ArraySpec) -> list[dict[str, Any]]:
    """The array's demand metric, one returned series: the spec's own, or the aggregated one."""
    return demand.custom_queries(spec) or demand.aggregated_queries(spec.array_id)


def read_history(spec: ArraySpec, cloudwatch: Any, now: datetime) -> list[float | None]:
    """The array's demand per minute over the ``HISTORY_DAYS`` whole days before ``now``'s
    minute, oldest first, ``None`` where CloudWatch has no datapoint."""
    end = now.replace(second=0, microsecond=0)
    minutes = forecast.HISTORY_DAYS * 24 * 60
    start = end - timedelta(minutes=minutes)
    history: list[float | None] = [None] * minutes
    request: dict[str, Any] = {
        "MetricDataQueries": history_queries(spec),
        "StartTime": start,
        "EndTime": end,
        "ScanBy": "TimestampAscending",
        "MaxDatapoints": MAX_DATAPOINTS,
    }
    while True:
        page = cloudwatch.get_metric_data(**request)
        for result in page["MetricDataResults"]:
            if result["Id"] != demand.DEMAND_QUERY_ID:
                continue
            for when, value in zip(result["Timestamps"], result["Values"], strict=True):
                index = int((when - start).total_seconds() // PERIOD_SECONDS)
                if 0 <= index < minutes:
                    history[index] = max(0.0, float(value))
        token = page.get("NextToken")
        if not token:
            return history
        request["NextToken"] = token


def read_floor(spec: ArraySpec, cloudwatch: Any, now: datetime, *, horizon_minutes: int) -> forecast.Floor:
    """The array's forecast floor at ``now`` (off, with the error, when the history cannot be
    read)."""
    try:
        history = read_history(spec, cloudwatch, now)
    except (ClientError, BotoCoreError) as error:
        logger.exception("demand history not read: forecast off", extra={"array_id": spec.array_id})
        return forecast.Floor(
            0, 0.0, None, f"forecast off: the demand history could not be read ({error})", horizon_minutes
        )
    # the history's oldest minutes may predate the array: only what CloudWatch holds counts
    first = next((i for i, v in enumerate(history) if v is not None), len(history))
    return forecast.floor_from_minutes(
        history[first:],
        now,
        horizon_minutes=horizon_minutes,
        per_controller_iops=spec.per_controller_iops,
        target_utilisation=spec.target_utilisation,
        min_controllers=spec.min_controllers,
    )
