"""The forecast floor on AWS (``vsa_core.scaling.aws_forecast``), read by the health check, never
by a decision: GetMetricData's exact requests (botocore Stubber): every array in one call of up
to 500 queries at a 300 s period over 14 days, every page read through NextToken, and a failure
that turns the floors off instead of failing the check; the floor stored on the registry item
(moto), conditionally."""

import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.stub import Stubber

from tests.specs import BASE
from tests.unit.conftest import REGION
from vsa_core.arrays import demand
from vsa_core.arrays.aws_registry import ArrayRegistry, array_key
from vsa_core.arrays.spec import ArraySpec
from vsa_core.scaling import aws_forecast, forecast

NOW = datetime(2026, 3, 2, 12, 27, 30, tzinfo=UTC)
END = datetime(2026, 3, 2, 12, 25, tzinfo=UTC)  # the last whole 5-minute bucket ends here
START = END - timedelta(days=14)


def spec(array_id: str = "demo", **changes: object) -> ArraySpec:
    return ArraySpec(
        arrayId=array_id,
        availabilityZone="us-east-1a",
        **BASE,
        minControllers=2,
        maxControllers=16,
        **changes,
    )


def _query(array_id: str, query_id: str) -> dict[str, object]:
    (query,) = demand.aggregated_queries(array_id)
    stat = {**query["MetricStat"], "Period": 300}  # type: ignore[dict-item]
    return {"Id": query_id, "MetricStat": stat, "Label": array_id, "ReturnData": True}


def _expected(queries: list[dict[str, object]], token: str | None = None) -> dict[str, object]:
    params: dict[str, object] = {
        "MetricDataQueries": queries,
        "StartTime": START,
        "EndTime": END,
        "ScanBy": "TimestampAscending",
        "MaxDatapoints": 100_800,
    }
    if token:
        params["NextToken"] = token
    return params


def _result(query_id: str, stamps: list[datetime], values: list[float]) -> dict[str, object]:
    return {
        "Id": query_id,
        "Label": query_id,
        "Timestamps": stamps,
        "Values": values,
        "StatusCode": "Complete",
    }


def test_every_array_in_one_call_at_five_minutes_every_page_read_into_its_own_floor():
    # Given two arrays: "demo" at 100k IOPS with 1.5M from :30 to :44 of every hour over the last
    # 4 hours, "quiet" at 50k; CloudWatch answers in two pages, split inside demo's series
    buckets = [END - timedelta(minutes=m) for m in range(4 * 60, 0, -5)]
    surge = [1_500_000.0 if 30 <= t.minute < 45 else 100_000.0 for t in buckets]
    quiet = [50_000.0] * len(buckets)
    queries = [_query("demo", "a0"), _query("quiet", "a1")]
    cloudwatch = boto3.client("cloudwatch", region_name=REGION)
    stubber = Stubber(cloudwatch)
    stubber.add_response(
        "get_metric_data",
        {"MetricDataResults": [_result("a0", buckets[:20], surge[:20])], "NextToken": "page-2"},
        _expected(queries),
    )
    stubber.add_response(
        "get_metric_data",
        {"MetricDataResults": [_result("a0", buckets[20:], surge[20:]), _result("a1", buckets, quiet)]},
        _expected(queries, "page-2"),
    )
    with stubber:
        # When the floors are read at 12:27, minutes before the next surge
        floors = aws_forecast.read_floors([spec("demo"), spec("quiet")], cloudwatch, NOW, horizon_minutes=10)
    stubber.assert_no_pending_responses()
    # Then both pages made demo's history: its hourly surge is its floor; quiet has none
    assert (floors["demo"].period, floors["demo"].controllers) == ("hourly", 9)
    assert not floors["quiet"].on
    assert "nothing recurring" in floors["quiet"].reason


def test_more_than_500_arrays_go_in_batches_of_500_queries():
    specs = [spec(f"a{i:03d}") for i in range(501)]
    cloudwatch = boto3.client("cloudwatch", region_name=REGION)
    stubber = Stubber(cloudwatch)
    first = [_query(s.array_id, f"a{i}") for i, s in enumerate(specs[:500])]
    stubber.add_response("get_metric_data", {"MetricDataResults": []}, _expected(first))
    stubber.add_response("get_metric_data", {"MetricDataResults": []}, _expected([_query("a500", "a0")]))
    with stubber:
        start, histories = aws_forecast.read_histories(specs, cloudwatch, NOW)
    stubber.assert_no_pending_responses()
    assert start == forecast.bucket_index(START)
    assert len(histories) == 501
    assert all(h == [None] * 4032 for h in histories.values())


def test_a_bucket_per_five_minutes_missing_ones_stay_missing_and_a_sum_is_a_minutes_iops():
    hosts = {"namespace": "Custom/Hosts", "metricName": "Iops", "dimensions": {"Array": "demo"}}
    cloudwatch = boto3.client("cloudwatch", region_name=REGION)
    stubber = Stubber(cloudwatch)
    stamps = [START, START + timedelta(minutes=10)]
    stubber.add_response("get_metric_data", {"MetricDataResults": [_result("a0", stamps, [500.0, -1.0])]})
    with stubber:
        _, histories = aws_forecast.read_histories([spec(demandMetric=hosts)], cloudwatch, NOW)
    history = histories["demo"]
    assert isinstance(history, list)
    assert len(history) == 14 * 24 * 12
    # five one-minute Sums in a bucket: 500 is 100 IOPS a minute; a negative value is none
    assert history[:3] == [100.0, None, 0.0]
    assert set(history[3:]) == {None}
    query = aws_forecast.history_query(spec(demandMetric=hosts), "a0")
    assert query["MetricStat"]["Metric"]["Namespace"] == "Custom/Hosts"
    assert query["MetricStat"]["Period"] == 300


def test_a_failed_read_turns_the_batchs_floors_off_and_says_so():
    cloudwatch = boto3.client("cloudwatch", region_name=REGION)
    stubber = Stubber(cloudwatch)
    stubber.add_client_error(
        "get_metric_data", "Throttling", "Rate exceeded", expected_params=_expected([_query("demo", "a0")])
    )
    with stubber:
        floors = aws_forecast.read_floors([spec()], cloudwatch, NOW, horizon_minutes=10)
    assert not floors["demo"].on
    assert "could not be read" in floors["demo"].reason


FLOOR = forecast.Floor(5, 900_000.0, "daily", "forecast floor 5: ...", 10)


def _stored(registry_table: str) -> dict[str, object]:
    item = boto3.client("dynamodb", region_name=REGION).get_item(
        TableName=registry_table, Key=array_key("demo"), ConsistentRead=True
    )["Item"]
    return dict(item)


def test_the_floor_is_stored_on_the_array_and_the_registry_read_carries_it(registry_table):
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    registry = ArrayRegistry(registry_table, dynamodb)
    registry.create(spec())
    # When the health check stores the floor it computed at NOW
    assert aws_forecast.store_floor(dynamodb, registry_table, "demo", FLOOR, NOW)
    # Then the array's read has it with when it was computed; the version is untouched
    array = registry.get("demo")
    assert array.forecast_floor == {**FLOOR.as_dict(), "computedAt": NOW.isoformat()}
    assert array.version == 1
    assert json.loads(str(_stored(registry_table)["forecastFloor"]["S"]))["controllers"] == 5  # type: ignore[index]


def test_an_older_floor_never_replaces_a_newer_one_and_a_gone_array_is_not_recreated(registry_table):
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    ArrayRegistry(registry_table, dynamodb).create(spec())
    assert aws_forecast.store_floor(dynamodb, registry_table, "demo", FLOOR, NOW)
    older = forecast.Floor(0, 0.0, None, "forecast off: older", 10)
    # a run that computed earlier and writes late is refused; the same write again is not
    assert not aws_forecast.store_floor(dynamodb, registry_table, "demo", older, NOW - timedelta(minutes=5))
    assert aws_forecast.store_floor(dynamodb, registry_table, "demo", FLOOR, NOW)
    assert ArrayRegistry(registry_table, dynamodb).get("demo").forecast_floor["controllers"] == 5  # type: ignore[index]
    # an array deleted meanwhile gets no item back
    assert not aws_forecast.store_floor(dynamodb, registry_table, "gone", FLOOR, NOW)
    assert "Item" not in dynamodb.get_item(TableName=registry_table, Key=array_key("gone"))


@pytest.mark.parametrize(
    ("age", "on"),
    [(timedelta(minutes=0), True), (timedelta(minutes=10), True), (timedelta(minutes=11), False)],
)
def test_a_stored_floor_older_than_two_periods_is_off(age: timedelta, on: bool):
    stored = forecast.stored(FLOOR, NOW - age)
    floor = forecast.from_stored(stored, NOW, timedelta(minutes=10))
    assert floor.on is on
    assert floor.controllers == (5 if on else 0)
    if not on:
        assert "2 health-check periods" in floor.reason
