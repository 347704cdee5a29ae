"""Every minute: publish ``VSA/Arrays DemandIops`` for the arrays whose alarms watch it.

A CloudWatch alarm on metric math references at most 10 metrics, two per volume here; an array
with more volumes than that allows (and no host-published demand metric) has alarms on this one
aggregated metric instead (``vsa_core.scaling.demand``). This function runs the array's metric math with
GetMetricData (500 queries a call) over the last minutes and puts each minute's value. Minutes
are re-published while they settle (EBS datapoints can land late); the alarms read ``Maximum``,
so a minute put twice still counts once.
"""

from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError

from vsa_core.arrays.aws_service import ArrayService
from vsa_core.clients import client
from vsa_core.observability import logger, tracer
from vsa_core.registry import ArrayRegistry
from vsa_core.scaling import demand
from vsa_core.settings import get_settings

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
            volume_ids = service.volume_ids(spec)
            if not demand.needs_aggregation(spec, volume_ids):
                continue
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
                cloudwatch.put_metric_data(
                    Namespace=demand.AGGREGATE_NAMESPACE, MetricData=data[i : i + PUT_BATCH]
                )
            published[spec.array_id] = len(data)
        except (ClientError, BotoCoreError) as error:  # one array's failure must not stop the others
            logger.exception("demand not published", extra={"array_id": spec.array_id})
            failed[spec.array_id] = f"{type(error).__name__}: {error}"
    logger.info("demand published", extra={"published": published, "failed": failed})
    if failed:
        raise RuntimeError(f"demand not published for {sorted(failed)}: {failed}")
    return {"published": published}


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = get_settings()
    return publish(
        ArrayRegistry(settings.table_name),
        ArrayService(scheduler_role_arn=settings.backup_scheduler_role_arn),
        client("cloudwatch"),
        datetime.now(UTC),
    )
