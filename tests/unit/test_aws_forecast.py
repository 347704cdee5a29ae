"""The forecast floor's history on AWS (``vsa_core.scaling.aws_forecast``): GetMetricData's exact
requests (botocore Stubber): 14 days at one minute, every page read through NextToken, the
array's demand metric, and a failure that turns the floor off instead of failing the decision."""

from datetime import UTC, datetime, timedelta

import boto3
from botocore.stub import Stubber

from tests.specs import BASE
from vsa_core.arrays.spec import ArraySpec
from vsa_core.scaling import aws_forecast, demand

NOW = datetime(2026, 3, 2, 12, 25, 30, tzinfo=UTC)
END = NOW.replace(second=0)
START = END - timedelta(days=14)
SPEC = ArraySpec(arrayId="demo", availabilityZone="us-east-1a", **BASE, minControllers=2, maxControllers=16)


def _result(stamps: list[datetime], values: list[float]) -> dict[str, object]:
    return {"Id": demand.DEMAND_QUERY_ID, "Label": "ArrayIops", "Timestamps": stamps, "Values": values}


def _expected(token: str | None = None) -> dict[str, object]:
    params: dict[str, object] = {
        "MetricDataQueries": demand.aggregated_queries("demo"),
        "StartTime": START,
        "EndTime": END,
        "ScanBy": "TimestampAscending",
        "MaxDatapoints": 100_800,
    }
    if token:
        params["NextToken"] = token
    return params


def test_fourteen_days_at_one_minute_read_over_every_page_into_a_floor():
    # Given the last 4 hours: 100k IOPS, and 1.5M from :30 to :44 of every hour, over two pages
    minutes = [END - timedelta(minutes=m) for m in range(4 * 60, 0, -1)]
    values = [1_500_000.0 if 30 <= t.minute < 45 else 100_000.0 for t in minutes]
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    stubber = Stubber(cloudwatch)
    stubber.add_response(
        "get_metric_data",
        {"MetricDataResults": [_result(minutes[:100], values[:100])], "NextToken": "page-2"},
        _expected(),
    )
    stubber.add_response(
        "get_metric_data", {"MetricDataResults": [_result(minutes[100:], values[100:])]}, _expected("page-2")
    )
    with stubber:
        # When the floor is read at :25, 5 minutes before the next surge
        floor = aws_forecast.read_floor(SPEC, cloudwatch, NOW, horizon_minutes=10)
    stubber.assert_no_pending_responses()
    # Then both pages made the history, and the hourly surge is the floor
    assert floor.on
    assert (floor.period, floor.controllers) == ("hourly", 9)


def test_history_has_a_slot_per_minute_and_missing_minutes_stay_missing():
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    stubber = Stubber(cloudwatch)
    stamps = [START, START + timedelta(minutes=2)]
    stubber.add_response(
        "get_metric_data", {"MetricDataResults": [_result(stamps, [5.0, -1.0])]}, _expected()
    )
    with stubber:
        history = aws_forecast.read_history(SPEC, cloudwatch, NOW)
    assert len(history) == 14 * 24 * 60
    assert history[:3] == [5.0, None, 0.0]
    assert set(history[3:]) == {None}


def test_a_host_published_demand_metric_is_the_history():
    spec = ArraySpec(
        arrayId="demo",
        availabilityZone="us-east-1a",
        **BASE,
        minControllers=2,
        maxControllers=16,
        demandMetric={"namespace": "Custom/Hosts", "metricName": "Iops", "dimensions": {"Array": "demo"}},
    )
    [query] = aws_forecast.history_queries(spec)
    assert query["MetricStat"]["Metric"]["Namespace"] == "Custom/Hosts"
    assert query["MetricStat"]["Period"] == 60
    assert query["ReturnData"] is True


def test_a_failed_read_turns_the_floor_off_and_says_so():
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    stubber = Stubber(cloudwatch)
    stubber.add_client_error("get_metric_data", "Throttling", "Rate exceeded", expected_params=_expected())
    with stubber:
        floor = aws_forecast.read_floor(SPEC, cloudwatch, NOW, horizon_minutes=10)
    assert not floor.on
    assert "could not be read" in floor.reason
