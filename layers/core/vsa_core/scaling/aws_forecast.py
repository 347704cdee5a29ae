"""The forecast floor on AWS, computed off the decision path: the scheduled health check reads
every array's demand history from CloudWatch (GetMetricData, batched), runs the pure
``vsa_core.scaling.forecast.floor`` and stores each floor on the array's registry item, where
ScaleArray's PlanScale reads it with the spec (one GetItem it makes anyway).

Why not in PlanScale: two weeks of metrics in the latency-critical decision step cost a
GetMetricData scan per alarm event (a burst of events, many arrays: throttling), seconds of
latency per decision, and on the local cloud a Lambda timeout. The pattern moves on the scale
of its 5-minute buckets, so computing it once a health-check period loses nothing.

The history is the array's demand metric over ``forecast.HISTORY_DAYS`` (14) days at a
``PERIOD_SECONDS`` (300 s) period, the forecast's own bucket: 4,032 values an array. The
spec's host-published ``demandMetric`` when it has one, else ``VSA/Arrays DemandIops``
(``Maximum``: a bucket is its busiest minute, as ``forecast.buckets`` makes it), which
``task_publish_demand`` puts every minute for every array whose demand is its volumes'.

GetMetricData's limits, respected here:

- up to ``MAX_QUERIES`` (500) queries a call: the arrays go in batches of 500, one query each;
- a call returns at most 100,800 datapoints (25 arrays' 14 days): CloudWatch pages the rest,
  and every page is read (``NextToken``), a result's pieces joined by their ``Id``;
- 5-minute data is kept 63 days: 14 days at 300 s is always there; the start is aligned to
  the period so each datapoint is one clock-aligned bucket;
- a bucket without a datapoint is missing (``None``), never zero demand.

A host-published metric whose statistic is ``Sum`` (each host puts its IOPS once a minute)
sums five minutes at a 300 s period: it is divided by 5, the bucket's mean minute (its busiest
minute is not in a 5-minute Sum).

Reading fails soft: a batch that cannot be read leaves its arrays' floors off, saying why (the
reactive planner decides alone); the health check's other work goes on.
"""

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from vsa_core.arrays import demand
from vsa_core.arrays.aws_registry import array_key
from vsa_core.arrays.spec import ArraySpec
from vsa_core.observability import logger
from vsa_core.scaling import forecast

PERIOD_SECONDS = forecast.BUCKET_MINUTES * 60
MAX_QUERIES = 500
"""GetMetricData's most queries in one call."""
MAX_DATAPOINTS = 100_800
"""GetMetricData's most datapoints in one call (more: NextToken)."""
BUCKETS = forecast.HISTORY_DAYS * 24 * 60 // forecast.BUCKET_MINUTES
FLOOR_ATTRIBUTE = "forecastFloor"
"""The registry item's attribute holding the stored floor (JSON, ``forecast.stored``)."""
FLOOR_AT_ATTRIBUTE = "forecastAt"
"""When the stored floor was computed (ISO 8601 UTC): a write never replaces a newer one."""


def history_query(spec: ArraySpec, query_id: str) -> dict[str, Any]:
    """The array's demand metric at the forecast's period: one returned series."""
    (query,) = demand.custom_queries(spec) or demand.aggregated_queries(spec.array_id)
    return {
        "Id": query_id,
        "MetricStat": {**query["MetricStat"], "Period": PERIOD_SECONDS},
        "Label": spec.array_id,
        "ReturnData": True,
    }


def _per_minute(spec: ArraySpec) -> float:
    """What divides a 5-minute value into the IOPS of a minute (a ``Sum`` spans five)."""
    metric = spec.demand_metric
    if metric is not None and metric.statistic == "Sum":
        return PERIOD_SECONDS / demand.METRIC_PERIOD_SECONDS
    return 1.0


def window(now: datetime) -> tuple[datetime, datetime]:
    """[start, end) of the history: ``HISTORY_DAYS`` of whole buckets before ``now``'s."""
    minute = now.replace(second=0, microsecond=0)
    end = minute - timedelta(minutes=minute.minute % forecast.BUCKET_MINUTES)
    return end - timedelta(minutes=BUCKETS * forecast.BUCKET_MINUTES), end


def read_histories(
    specs: Sequence[ArraySpec], cloudwatch: Any, now: datetime
) -> tuple[int, dict[str, list[float | None] | str]]:
    """(index of the first bucket, per array its ``BUCKETS`` bucket values oldest first, or
    why its batch could not be read)."""
    start, end = window(now)
    first = forecast.bucket_index(start)
    out: dict[str, list[float | None] | str] = {}
    for offset in range(0, len(specs), MAX_QUERIES):
        batch = {f"a{i}": spec for i, spec in enumerate(specs[offset : offset + MAX_QUERIES])}
        histories: dict[str, list[float | None]] = {q: [None] * BUCKETS for q in batch}
        request: dict[str, Any] = {
            "MetricDataQueries": [history_query(spec, q) for q, spec in batch.items()],
            "StartTime": start,
            "EndTime": end,
            "ScanBy": "TimestampAscending",
            "MaxDatapoints": MAX_DATAPOINTS,
        }
        try:
            while True:
                page = cloudwatch.get_metric_data(**request)
                for result in page["MetricDataResults"]:
                    history = histories.get(result["Id"])
                    if history is None:
                        continue
                    scale = _per_minute(batch[result["Id"]])
                    for when, value in zip(result["Timestamps"], result["Values"], strict=True):
                        index = forecast.bucket_index(when) - first
                        if 0 <= index < BUCKETS:
                            history[index] = max(0.0, float(value) / scale)
                token = page.get("NextToken")
                if not token:
                    break
                request["NextToken"] = token
        except (ClientError, BotoCoreError) as error:
            logger.exception("demand history not read: forecast off", extra={"arrays": len(batch)})
            out.update({spec.array_id: f"{type(error).__name__}: {error}" for spec in batch.values()})
            continue
        out.update({spec.array_id: histories[q] for q, spec in batch.items()})
    return first, out


def read_floors(
    specs: Sequence[ArraySpec], cloudwatch: Any, now: datetime, *, horizon_minutes: int
) -> dict[str, forecast.Floor]:
    """Every array's forecast floor at ``now`` (off, with the error, when its history could not
    be read)."""
    first, histories = read_histories(specs, cloudwatch, now)
    floors: dict[str, forecast.Floor] = {}
    for spec in specs:
        history = histories[spec.array_id]
        if isinstance(history, str):
            reason = f"forecast off: the demand history could not be read ({history})"
            floors[spec.array_id] = forecast.Floor(0, 0.0, None, reason, horizon_minutes)
            continue
        # the oldest buckets may predate the array: only what CloudWatch holds counts
        held = next((i for i, v in enumerate(history) if v is not None), len(history))
        floors[spec.array_id] = forecast.floor(
            first + held,
            history[held:],
            now,
            horizon_minutes=horizon_minutes,
            per_controller_iops=spec.per_controller_iops,
            target_utilisation=spec.target_utilisation,
            min_controllers=spec.min_controllers,
        )
    return floors


def store_floor(
    dynamodb: Any, table: str, array_id: str, value: forecast.Floor, computed_at: datetime
) -> bool:
    """Keep the floor on the array's registry item (only its two attributes: never the spec,
    its version or the lock). Conditional: the array still exists and no newer floor is
    stored (two health-check runs racing keep the newer; the same run again writes the same).
    False when the write was refused."""
    at = computed_at.isoformat()
    try:
        dynamodb.update_item(
            TableName=table,
            Key=array_key(array_id),
            UpdateExpression="SET #floor = :floor, #at = :at",
            ConditionExpression="attribute_exists(pk) AND (attribute_not_exists(#at) OR #at <= :at)",
            ExpressionAttributeNames={"#floor": FLOOR_ATTRIBUTE, "#at": FLOOR_AT_ATTRIBUTE},
            ExpressionAttributeValues={
                ":floor": {"S": json.dumps(forecast.stored(value, computed_at), sort_keys=True)},
                ":at": {"S": at},
            },
        )
    except ClientError as error:
        if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise
        return False
    return True
