"""An array's demand on AWS (CloudWatch): ScaleArray's ReadDemand step and the every-minute
publication of the aggregated demand metric. The queries and the sums are
``vsa_core.arrays.demand``'s (pure).

ReadDemand: read the array's demand of the last minutes with GetMetricData.

The alarm that started the workflow saw one datapoint, minutes old by the time the workflow
holds the lock; the planner needs the newest minute and the minutes before it (the trend of a
rising demand, the peak a scale-in must still serve). The queries come from the core
(``vsa_core.arrays.demand.read_queries``): every volume's AWS/EBS metrics, summed with a volume that
has no datapoint (not attached yet: EBS sends nothing) counting as no IO, or the spec's
host-published metric.

Publish: every minute, publish ``VSA/Arrays DemandIops`` for every array whose demand is its
volumes' EBS IOPS (not a host-published metric): the operations dashboard graphs it per array,
and the alarms of the larger arrays watch it.

A CloudWatch alarm on metric math references at most 10 metrics, two per volume here; an array
with more volumes than that allows (and no host-published demand metric) has alarms on this one
aggregated metric instead (``vsa_core.arrays.demand``); a smaller array's alarms keep their own
metric math, and the published metric is only graphed. This function runs the array's metric math with
GetMetricData (500 queries a call) over the last minutes and puts each minute's value. Minutes
are re-published while they settle (EBS datapoints can land late); the alarms read ``Maximum``,
so a minute put twice still counts once.
"""

from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from vsa_core.arrays import demand
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.naming import arrays_namespace
from vsa_core.observability import logger


def read_demand(
    array_id: str, registry: ArrayRegistry, service: ArrayService, cloudwatch: Any, now: datetime
) -> dict[str, Any]:
    spec = registry.get(array_id).spec
    queries = demand.read_queries(spec, service.volume_ids(spec))
    start, end = demand.window(now)
    pages = cloudwatch.get_paginator("get_metric_data").paginate(
        MetricDataQueries=queries, StartTime=start, EndTime=end, ScanBy="TimestampAscending"
    )
    # a result may come in pieces over pages: join each query's before summing the volumes
    joined: dict[str, dict[str, list[Any]]] = {}
    for page in pages:
        for result in page["MetricDataResults"]:
            into = joined.setdefault(result["Id"], {"Timestamps": [], "Values": []})
            into["Timestamps"].extend(result["Timestamps"])
            into["Values"].extend(result["Values"])
    timestamps, values = demand.demand_from_results([{"Id": k, **v} for k, v in joined.items()])
    read = demand.series(timestamps, values, start=start, end=end)
    source = "demandMetric" if spec.demand_metric else "AWS/EBS"
    logger.info("demand read", extra={**read.as_dict(), "source": source})
    return {**read.as_dict(), "source": source, "datapoints": len(values)}


PUT_BATCH = 1000
"""PutMetricData takes at most 1,000 datapoints a call."""


def publish(registry: ArrayRegistry, service: ArrayService, cloudwatch: Any, now: datetime) -> dict[str, Any]:
    published: dict[str, int] = {}
    failed: dict[str, str] = {}
    start, end = demand.window(now, minutes=demand.FRESH_MINUTES)
    for array in registry.all():
        spec = array.spec
        if array.deleting is not None:
            continue
        try:
            if spec.demand_metric is not None:
                continue  # its demand is the hosts' own metric
            volume_ids = service.volume_ids(spec)
            # every volume's series, summed with a volume without datapoints counting as no IO
            # (a volume not attached yet has no EBS metrics; it must not blank the array's sum)
            results = [
                result
                for page in cloudwatch.get_paginator("get_metric_data").paginate(
                    MetricDataQueries=demand.ebs_volume_queries(volume_ids, returned=True),
                    StartTime=start,
                    EndTime=end,
                )
                for result in page["MetricDataResults"]
            ]
            stamps, values = demand.sum_volume_results(results)
            data = [
                {
                    "MetricName": demand.AGGREGATE_METRIC,
                    "Dimensions": [{"Name": "ArrayId", "Value": spec.array_id}],
                    "Timestamp": when,
                    "Value": value,
                    "Unit": "Count/Second",
                }
                for when, value in zip(stamps, values, strict=True)
            ]
            for i in range(0, len(data), PUT_BATCH):
                cloudwatch.put_metric_data(Namespace=arrays_namespace(), MetricData=data[i : i + PUT_BATCH])
            published[spec.array_id] = len(data)
        except (ClientError, BotoCoreError) as error:  # one array's failure must not stop the others
            logger.exception("demand not published", extra={"array_id": spec.array_id})
            failed[spec.array_id] = f"{type(error).__name__}: {error}"
    logger.info("demand published", extra={"published": published, "failed": failed})
    if failed:
        raise RuntimeError(f"demand not published for {sorted(failed)}: {failed}")
    return {"published": published}
