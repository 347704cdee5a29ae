"""The array's demand signal: which metric says how many IOPS the array serves. Pure.

Three sources, chosen per array:

- **metric math** over the volumes' ``AWS/EBS`` ``VolumeReadOps`` + ``VolumeWriteOps`` (Sum per
  minute / 60 s): the default while the array has at most ``MATH_ALARM_VOLUMES`` volumes;
- **the aggregated metric** ``VSA/Arrays DemandIops {ArrayId}``: CloudWatch alarms on metric
  math reference at most 10 metrics (a hard limit, 2 per volume here), so for a larger array
  the scheduled ``task_publish_demand`` function runs the same metric math with GetMetricData
  (500 queries a call) every minute and puts the result, and the alarms watch that one metric
  (``Maximum``: re-publishing a minute never counts it twice);
- **a host-published metric** when the spec has ``demandMetric`` (e.g. the hosts' own IOPS).

The ScaleArray workflow reads the array's recent demand with the same queries
(``read_queries``), whatever the alarms watch, so it sees the newest minutes directly.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from vsa_core.arrays.spec import ArraySpec
from vsa_core.naming import arrays_namespace

METRIC_PERIOD_SECONDS = 60
ALARM_METRIC_LIMIT = 10
"""CloudWatch: an alarm on metric math references at most 10 metrics (hard limit)."""
MATH_ALARM_VOLUMES = ALARM_METRIC_LIMIT // 2
"""Volumes an alarm's own metric math can cover (two metrics each)."""
AGGREGATE_METRIC = "DemandIops"
RECENT_MINUTES = 15
"""How many minutes of demand the workflow reads: the low alarm's window."""
DEMAND_QUERY_ID = "iops"


def _stat(
    query_id: str, namespace: str, name: str, dimensions: Mapping[str, str], stat: str
) -> dict[str, Any]:
    return {
        "Id": query_id,
        "MetricStat": {
            "Metric": {
                "Namespace": namespace,
                "MetricName": name,
                "Dimensions": [{"Name": k, "Value": v} for k, v in sorted(dimensions.items())],
            },
            "Period": METRIC_PERIOD_SECONDS,
            "Stat": stat,
        },
        "ReturnData": False,
    }


def ebs_volume_queries(volume_ids: Sequence[str], *, returned: bool = False) -> list[dict[str, Any]]:
    """``VolumeReadOps`` (``r<i>``) and ``VolumeWriteOps`` (``w<i>``), Sum per minute, per volume."""
    if not volume_ids:
        raise ValueError("an array's demand needs at least one volume")
    queries: list[dict[str, Any]] = []
    for index, volume_id in enumerate(volume_ids):
        for prefix, metric in (("r", "VolumeReadOps"), ("w", "VolumeWriteOps")):
            query = _stat(f"{prefix}{index}", "AWS/EBS", metric, {"VolumeId": volume_id}, "Sum")
            queries.append({**query, "ReturnData": returned})
    return queries


EBS_IOPS_EXPRESSION = "SUM(FILL(FILL(METRICS(), REPEAT), 0)) / PERIOD(r0)"
"""The volumes' IOPS in an alarm: every volume's series complete over the alarm's range, then
summed. In CloudWatch metric math a series missing a timestamp drops that timestamp from a binary
operation, so ``r0 + w0 + r1 …`` went blank whenever one volume had no datapoint; ``METRICS()``
(every metric of the alarm, all of them the volumes') keeps the expression's length independent
of the volume count.

- ``FILL(…, REPEAT)`` first: a minute whose datapoint has not landed yet takes the volume's most
  recent value. ``FILL(…, 0)`` alone filled the newest minute with 0 until EBS's datapoint arrived,
  so an alarm evaluated before it saw "no IO" there: the high alarm (2 of its 2 newest minutes)
  then never fired while its evaluation fell before the datapoints each minute, as it did after a
  PutMetricAlarm moved the evaluation's second within the minute (EBS's datapoints land a minute
  or more late on AWS too).
- ``FILL(…, 0)`` then: before a volume's first datapoint in the range (a volume just created and
  not attached: EBS sends no metrics for it) it counts as no IO. A range with no datapoint at all
  becomes 0, which is what the alarms' ``TreatMissingData`` already said of it (no IO: the high
  alarm not breaching, the low one breaching).

https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-metric-math.html (FILL:
"REPEAT" fills a missing value with the most recent actual value before it). That the minutes
after a volume's last datapoint count as missing values REPEAT fills (the newest ones, not landed
yet) is read from that wording, as the local cloud implements it; it is not yet confirmed on an
account. Were they left missing, the outer ``FILL(…, 0)`` would read them as 0 again."""


def ebs_iops_queries(volume_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Metric math for the volumes' IOPS in an alarm: ``EBS_IOPS_EXPRESSION``."""
    queries = ebs_volume_queries(volume_ids)
    queries.append(
        {
            "Id": DEMAND_QUERY_ID,
            "Expression": EBS_IOPS_EXPRESSION,
            "Label": "ArrayIops",
            "ReturnData": True,
        }
    )
    return queries


def sum_volume_results(results: Sequence[Mapping[str, Any]]) -> tuple[list[datetime], list[float]]:
    """The array's IOPS per minute from GetMetricData's per-volume results (``ebs_volume_queries``
    with ``returned=True``): each minute that any volume has a datapoint for, the sum over the
    volumes with a missing volume counting as no IO, divided by the period. Summed here rather
    than with ``FILL`` in the query: FILL would also turn the newest minutes, whose datapoints
    have not landed yet, into zero demand, where the workflow reads the newest minute that has
    data (``series``)."""
    totals: dict[datetime, float] = {}
    for result in results:
        for when, value in zip(result["Timestamps"], result["Values"], strict=True):
            totals[when] = totals.get(when, 0.0) + float(value)
    stamps = sorted(totals)
    return stamps, [totals[t] / METRIC_PERIOD_SECONDS for t in stamps]


def _returned(query: dict[str, Any]) -> dict[str, Any]:
    return {**query, "Id": DEMAND_QUERY_ID, "Label": "ArrayIops", "ReturnData": True}


def custom_queries(spec: ArraySpec) -> list[dict[str, Any]] | None:
    metric = spec.demand_metric
    if metric is None:
        return None
    query = _stat(DEMAND_QUERY_ID, metric.namespace, metric.metric_name, metric.dimensions, metric.statistic)
    return [_returned(query)]


def aggregated_queries(array_id: str) -> list[dict[str, Any]]:
    query = _stat(DEMAND_QUERY_ID, arrays_namespace(), AGGREGATE_METRIC, {"ArrayId": array_id}, "Maximum")
    return [_returned(query)]


def needs_aggregation(spec: ArraySpec, volume_ids: Sequence[str]) -> bool:
    """Whether the alarms watch the published ``VSA/Arrays`` metric (too many volumes for an
    alarm's own metric math, and no host-published metric)."""
    return spec.demand_metric is None and len(volume_ids) > MATH_ALARM_VOLUMES


def alarm_queries(spec: ArraySpec, volume_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The ``Metrics`` of the array's IOPS alarms."""
    custom = custom_queries(spec)
    if custom is not None:
        return custom
    if needs_aggregation(spec, volume_ids):
        return aggregated_queries(spec.array_id)
    return ebs_iops_queries(volume_ids)


def read_queries(spec: ArraySpec, volume_ids: Sequence[str]) -> list[dict[str, Any]]:
    """GetMetricData queries for the array's demand, straight from its source: the spec's metric
    (one result, ``DEMAND_QUERY_ID``), or every volume's two metrics (summed by
    ``sum_volume_results``)."""
    return custom_queries(spec) or ebs_volume_queries(volume_ids, returned=True)


def demand_from_results(results: Sequence[Mapping[str, Any]]) -> tuple[list[datetime], list[float]]:
    """The demand series from the results of ``read_queries``, whichever source they read."""
    mine = [r for r in results if r["Id"] == DEMAND_QUERY_ID]
    if mine:
        stamps = [t for r in mine for t in r["Timestamps"]]
        return stamps, [float(v) for r in mine for v in r["Values"]]
    return sum_volume_results(results)


FRESH_MINUTES = 3
"""A minute's datapoint may land a few minutes late: the newest datapoint counts as the current
demand if it is at most this many minutes old; later minutes are not taken as zero demand."""


@dataclass(frozen=True)
class Demand:
    """What GetMetricData said about the array's demand, minute by minute."""

    demand_iops: float
    """The newest minute with a datapoint, however old (``newest_minute`` says when); 0 with none."""
    recent_demand: tuple[float, ...]
    """Up to ``RECENT_MINUTES`` minutes before it that have a datapoint, oldest first (a minute
    without one is missing, not zero demand)."""
    newest_minute: str | None
    """ISO 8601 start of the newest minute with a datapoint; None when there was none."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "demandIops": self.demand_iops,
            "recentDemand": list(self.recent_demand),
            "newestMinute": self.newest_minute,
        }


def window(now: datetime, minutes: int = RECENT_MINUTES) -> tuple[datetime, datetime]:
    """[start, end) of the ``minutes`` + ``FRESH_MINUTES`` whole minutes before ``now``."""
    end = now.replace(second=0, microsecond=0)
    return end - timedelta(minutes=minutes + FRESH_MINUTES), end


def series(
    timestamps: Sequence[datetime], values: Sequence[float], *, start: datetime, end: datetime
) -> Demand:
    """The per-minute demand in [start, end) from one GetMetricData result (any order)."""
    if len(timestamps) != len(values):
        raise ValueError("GetMetricData returned different numbers of timestamps and values")
    minutes = int((end - start).total_seconds() // METRIC_PERIOD_SECONDS)
    if minutes < 1:
        raise ValueError("the demand window must cover at least one minute")
    slots: list[float | None] = [None] * minutes
    seen: set[int] = set()
    for when, value in zip(timestamps, values, strict=True):
        index = int((when - start).total_seconds() // METRIC_PERIOD_SECONDS)
        if 0 <= index < minutes:
            slots[index] = max(0.0, float(value))
            seen.add(index)
    newest = max(seen, default=None)
    # the newest minute with a datapoint is the current demand however old: whether it is recent
    # enough to decide on is ScaleArray's rule (rules.MAX_DATA_AGE), not a zero here; a minute
    # without a datapoint is missing, not zero demand, and is left out of the recent minutes
    current = 0.0 if newest is None else float(slots[newest] or 0.0)
    before = slots if newest is None else slots[:newest]
    recent = [v for v in before[-RECENT_MINUTES:] if v is not None]
    return Demand(
        demand_iops=current,
        recent_demand=tuple(recent),
        newest_minute=(start + timedelta(minutes=newest)).isoformat() if newest is not None else None,
    )
