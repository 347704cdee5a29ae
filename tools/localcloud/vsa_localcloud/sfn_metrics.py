"""Step Functions' execution metrics in CloudWatch (namespace ``AWS/States``), as AWS publishes them.

AWS Step Functions Developer Guide, "Monitoring Step Functions metrics using Amazon CloudWatch"
(https://docs.aws.amazon.com/step-functions/latest/dg/procedure-cw-metrics.html), execution
metrics, dimension ``StateMachineArn`` ("the ARN of the state machine for the execution in
question"):

* ``ExecutionsStarted``, ``ExecutionsSucceeded``, ``ExecutionsFailed``, ``ExecutionsAborted``
  ("aborted or terminated"), ``ExecutionsTimedOut`` ("time out for any reason"): counts, one per
  execution, unit ``Count`` ("Metrics that report a count"; read with the ``Sum`` statistic);
* ``ExecutionTime``: "the interval, in milliseconds, between the time the execution starts and
  the time it closes", unit ``Milliseconds`` ("Metrics that report a time interval ... always
  measured in milliseconds").

Community LocalStack publishes none of them, so an alarm on a workflow's ``ExecutionsFailed`` or
``ExecutionsTimedOut`` (the deployment's workflow-failed alarms) could never fire locally. Here
each execution's start publishes ``ExecutionsStarted`` at its start date, and its end the
counter of the status it ended in plus ``ExecutionTime``, at its stop date. The hook is the
point where LocalStack emits the execution's "Step Functions Execution Status Change" event
(``Execution.publish_execution_status_change_event``): at the start (``RUNNING``) and when the
execution ends (stopped, failed, timed out or succeeded). TestState runs override that method
to publish nothing, and so publish no metrics here either (AWS's TestState API starts no
execution).

The datapoints go through CloudWatch's PutMetricData on an internal client, as LocalStack's own
services (Lambda's ``AWS/Lambda`` metrics) publish theirs, on one background thread: a failure
to publish is logged and never changes the execution ("CloudWatch metrics are delivered on a
best-effort basis", the same guide).

Not published: ``ExecutionThrottled`` (state transitions throttled; the local engine throttles
none, and AWS publishes it only when it does), the redrive metrics (``ExecutionsRedriven``,
``RedrivenExecutions*``; the product never redrives), and the per-version and per-alias series.
Pinned by tests/localcloud/test_sfn_metrics.py.
"""

import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from localstack.utils.patch import patch

LOG = logging.getLogger(__name__)
NAMESPACE = "AWS/States"
ENDED = {
    "SUCCEEDED": "ExecutionsSucceeded",
    "FAILED": "ExecutionsFailed",
    "ABORTED": "ExecutionsAborted",
    "TIMED_OUT": "ExecutionsTimedOut",
}
"""The counter an execution's final status adds one to."""

# Datapoints leave in order on one thread, off the StartExecution request and the execution's own.
_PUBLISHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sfn-metrics")


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def execution_datapoints(
    state_machine_arn: str, status: str, start: datetime, stop: datetime | None
) -> list[dict[str, Any]]:
    """The ``AWS/States`` datapoints an execution's status change publishes (none for a status
    that is neither the start nor an end)."""
    dimensions = [{"Name": "StateMachineArn", "Value": state_machine_arn}]
    if status == "RUNNING":
        return [
            {
                "MetricName": "ExecutionsStarted",
                "Dimensions": dimensions,
                "Timestamp": _utc(start),
                "Value": 1.0,
                "Unit": "Count",
            }
        ]
    if status not in ENDED:
        return []
    stopped = _utc(stop or datetime.now(UTC))
    elapsed_ms = max(0.0, (stopped - _utc(start)).total_seconds() * 1000)
    return [
        {
            "MetricName": ENDED[status],
            "Dimensions": dimensions,
            "Timestamp": stopped,
            "Value": 1.0,
            "Unit": "Count",
        },
        {
            "MetricName": "ExecutionTime",
            "Dimensions": dimensions,
            "Timestamp": stopped,
            "Value": elapsed_ms,
            "Unit": "Milliseconds",
        },
    ]


def _publish(account_id: str, region: str, data: list[dict[str, Any]]) -> None:
    from localstack.aws.connect import connect_to

    try:
        cloudwatch = connect_to(aws_access_key_id=account_id, region_name=region).cloudwatch
        cloudwatch.put_metric_data(Namespace=NAMESPACE, MetricData=data)
    except Exception as exc:  # noqa: BLE001 - best effort, as on AWS: the execution is unaffected
        LOG.warning("publishing %s metrics failed: %s", NAMESPACE, exc)


def install() -> None:
    from localstack.services.stepfunctions.backend.execution import Execution

    if getattr(Execution.publish_execution_status_change_event, "vsa_metrics", False):
        return

    @patch(Execution.publish_execution_status_change_event)
    def with_metrics(fn: Any, self: Any) -> Any:
        result = fn(self)
        data = execution_datapoints(
            self.state_machine_arn, str(self.exec_status), self.start_date, self.stop_date
        )
        if data:
            _PUBLISHER.submit(_publish, self.account_id, self.region_name, data)
        return result

    Execution.publish_execution_status_change_event.vsa_metrics = True  # type: ignore[attr-defined]
