"""ScaleArray step: read the array's demand of the last minutes with GetMetricData.

The alarm that started the workflow saw one datapoint, minutes old by the time the workflow
holds the lock; the planner needs the newest minute and the minutes before it (the trend of a
rising demand, the peak a scale-in must still serve). The queries come from the core
(``vsa_core.scaling.demand.read_queries``): every volume's AWS/EBS metrics, summed with a volume that
has no datapoint (not attached yet: EBS sends nothing) counting as no IO, or the spec's
host-published metric.
"""

from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, Field

from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.spec import ArrayId
from vsa_core.clients import client
from vsa_core.observability import logger, tracer
from vsa_core.registry import ArrayRegistry
from vsa_core.scaling import demand
from vsa_core.settings import get_settings


class ReadDemandRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    array_id: ArrayId = Field(alias="arrayId")


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


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=ReadDemandRequest)
def lambda_handler(event: ReadDemandRequest, context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(array_id=event.array_id)
    settings = get_settings()
    return read_demand(
        event.array_id,
        ArrayRegistry(settings.table_name),
        ArrayService(scheduler_role_arn=settings.backup_scheduler_role_arn),
        client("cloudwatch"),
        datetime.now(UTC),
    )
