"""What the health check publishes (vsa_core.health.aws_check._publish), on moto's CloudWatch:
the names the template's alarms and dashboard are built on."""

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from moto import mock_aws

from vsa_core.arrays.aws_observe import ArrayClients
from vsa_core.arrays.aws_reports import NodeDocuments
from vsa_core.health import aws_check, rules

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def _publishing_context(cloudwatch: Any) -> aws_check.HealthContext:
    """Only what ``_publish`` uses: CloudWatch and the deployment's name."""
    return aws_check.HealthContext(
        registry=None,  # type: ignore[arg-type]
        backups=None,  # type: ignore[arg-type]
        clients=ArrayClients(None, None, cloudwatch, None, None, ""),
        documents=NodeDocuments("c", "p", "d", "r"),
        deployment="vsa-test",
        period=timedelta(minutes=5),
    )


@mock_aws
def test_every_metric_named_is_published_per_array_and_per_deployment() -> None:
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    ctx = _publishing_context(cloudwatch)
    assessment = rules.Assessment(
        serving=2,
        hosts_reporting=1,
        hosts_stale=[],
        hosts_short={"i-h": 1},
        dead=["i-c"],
        witnesses={"i-c": ["i-h"]},
    )
    seen = aws_check.ArrayHealth("demo", assessment, 20_000, replaced="i-c", backup_age_seconds=60.0)
    aws_check._publish(ctx, [seen], 0, NOW)

    def names(namespace: str, dimension: str) -> set[str]:
        listed = cloudwatch.list_metrics(Namespace=namespace)["Metrics"]
        return {m["MetricName"] for m in listed if m["Dimensions"][0]["Name"] == dimension}

    assert names("VSA/Arrays", "ArrayId") == set(aws_check.ARRAY_METRICS)
    assert names("VSA", "Deployment") == set(aws_check.DEPLOYMENT_METRICS)
    capacity = cloudwatch.get_metric_statistics(
        Namespace="VSA/Arrays",
        MetricName="ControllerCapacityIops",
        Dimensions=[{"Name": "ArrayId", "Value": "demo"}],
        StartTime=NOW - timedelta(minutes=1),
        EndTime=NOW + timedelta(minutes=1),
        Period=60,
        Statistics=["Maximum"],
    )["Datapoints"]
    assert [p["Maximum"] for p in capacity] == [40_000.0]


@mock_aws
def test_an_unfinished_apply_is_published_per_array_and_counted_for_the_deployment() -> None:
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    ctx = _publishing_context(cloudwatch)
    calm = rules.Assessment(
        serving=2, hosts_reporting=0, hosts_stale=[], hosts_short={}, dead=[], witnesses={}
    )
    stopped = aws_check.ArrayHealth("stopped", calm, 20_000, apply_unfinished=3)
    fine = aws_check.ArrayHealth("fine", calm, 20_000)
    aws_check._publish(ctx, [stopped, fine], 0, NOW)

    def latest(namespace: str, metric: str, name: str, value: str) -> list[float]:
        points = cloudwatch.get_metric_statistics(
            Namespace=namespace,
            MetricName=metric,
            Dimensions=[{"Name": name, "Value": value}],
            StartTime=NOW - timedelta(minutes=1),
            EndTime=NOW + timedelta(minutes=1),
            Period=60,
            Statistics=["Maximum"],
        )["Datapoints"]
        return [p["Maximum"] for p in points]

    assert latest("VSA/Arrays", "ApplyUnfinished", "ArrayId", "stopped") == [1.0]
    assert latest("VSA/Arrays", "ApplyUnfinished", "ArrayId", "fine") == [0.0]
    assert latest("VSA", "UnfinishedApplies", "Deployment", "vsa-test") == [1.0]
    assert stopped.as_dict()["applyUnfinished"] == 3
