"""The array's demand signal (vsa_core.arrays.demand) and the two functions that read and publish it:
task_read_demand (ScaleArray's ReadDemand step) and task_publish_demand (the per-minute
aggregator for arrays too large for an alarm's own metric math). Pure tests, then moto for the
registry and volumes with botocore's Stubber for CloudWatch's GetMetricData / PutMetricData."""

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber
from hypothesis import given
from hypothesis import strategies as st

from task_publish_demand import handler as publish_handler
from task_read_demand import handler as read_handler
from tests.specs import CONTROLLERS
from tests.unit.conftest import REGION
from vsa_core.arrays import demand, plan
from vsa_core.arrays.aws_registry import ArrayRegistry
from vsa_core.arrays.aws_service import ArrayService
from vsa_core.arrays.spec import MAX_VOLUMES, ArraySpec

NOW = datetime(2026, 11, 22, 10, 30, 25, tzinfo=UTC)
CUSTOM = {"namespace": "Acme/Hosts", "metricName": "HostIops", "dimensions": {"Array": "demo"}}


def volume_ids(n: int) -> tuple[str, ...]:
    return tuple(f"vol-{i:017x}" for i in range(1, n + 1))


def spec(n: int, array_id: str = "demo", **overrides: Any) -> ArraySpec:
    return ArraySpec.model_validate(
        {
            "arrayId": array_id,
            "availabilityZone": "us-east-1a",
            "volumes": [{"volumeId": v} for v in volume_ids(n)],
            "controllers": CONTROLLERS,
            "minControllers": 2,
            "maxControllers": 8,
            **overrides,
        }
    )


# --- which metric the alarms watch ----------------------------------------------------------------


def test_a_small_array_alarms_on_its_volumes_metric_math() -> None:
    queries = demand.alarm_queries(spec(5), volume_ids(5))
    stats = [q for q in queries if "MetricStat" in q]
    assert len(stats) == 10  # read + write ops of each of the 5 volumes
    assert {q["MetricStat"]["Metric"]["Namespace"] for q in stats} == {"AWS/EBS"}
    (expression,) = [q for q in queries if "Expression" in q]
    # every volume's newest minutes not landed yet take its last value, and before its first
    # datapoint (EBS sends nothing for a volume that is not attached) it counts as 0: a series
    # missing a timestamp would drop it from the whole sum (tests/localcloud/test_cloudwatch.py
    # evaluates it)
    assert expression["Expression"] == "SUM(FILL(FILL(METRICS(), REPEAT), 0)) / PERIOD(r0)"
    assert [q["ReturnData"] for q in stats] == [False] * 10


def test_a_larger_array_alarms_on_the_published_aggregate() -> None:
    (query,) = demand.alarm_queries(spec(6), volume_ids(6))
    metric = query["MetricStat"]["Metric"]
    assert (metric["Namespace"], metric["MetricName"]) == ("VSA/Arrays", "DemandIops")
    assert metric["Dimensions"] == [{"Name": "ArrayId", "Value": "demo"}]
    assert query["MetricStat"]["Stat"] == "Maximum"  # a minute published twice counts once
    assert query["ReturnData"] is True


def test_a_host_published_metric_replaces_the_ebs_metrics() -> None:
    custom = spec(12, demandMetric=CUSTOM)
    for queries in (
        demand.alarm_queries(custom, volume_ids(12)),
        demand.read_queries(custom, volume_ids(12)),
    ):
        (query,) = queries
        assert query["MetricStat"]["Metric"]["Namespace"] == "Acme/Hosts"
        assert query["MetricStat"]["Stat"] == "Sum"
    assert not demand.needs_aggregation(custom, volume_ids(12))


def test_a_demand_metric_in_an_aws_namespace_is_refused_with_what_to_do() -> None:
    with pytest.raises(ValueError, match="AWS/ namespaces are AWS's own; leave demandMetric out"):
        spec(1, demandMetric={**CUSTOM, "namespace": "AWS/EBS"})


@given(n=st.integers(min_value=1, max_value=MAX_VOLUMES), custom=st.booleans())
def test_every_alarm_stays_within_cloudwatchs_limits(n: int, custom: bool) -> None:
    # An alarm's metric math references at most 10 metrics and 10 expressions; exactly one
    # query is returned (the one the alarm watches)
    array = spec(n, demandMetric=CUSTOM) if custom else spec(n)
    params = plan.alarm_params(array, 2, volume_ids(n), "high")
    metrics = params["Metrics"]
    assert sum("MetricStat" in q for q in metrics) <= demand.ALARM_METRIC_LIMIT
    assert sum("Expression" in q for q in metrics) <= 10
    assert sum(q["ReturnData"] for q in metrics) == 1


def test_the_workflow_reads_the_volumes_directly_even_when_alarms_watch_the_aggregate() -> None:
    queries = demand.read_queries(spec(16), volume_ids(16))
    # every volume's two series, returned and summed by the function (no FILL: the newest
    # minutes, not landed yet, must stay missing rather than read as zero demand)
    assert sum("MetricStat" in q for q in queries) == len(queries) == 32
    assert all(q["ReturnData"] for q in queries)


def test_a_volume_without_datapoints_counts_as_no_io_in_the_sum() -> None:
    # Given 3 volumes over 3 minutes, the third just created (not attached: EBS sends no metrics
    # for it) and the second missing the newest minute
    t = [NOW - timedelta(minutes=m) for m in (4, 3, 2)]
    results = [
        {"Id": "r0", "Timestamps": t, "Values": [600.0, 1200.0, 1800.0]},
        {"Id": "w0", "Timestamps": t, "Values": [60.0, 60.0, 60.0]},
        {"Id": "r1", "Timestamps": t[:2], "Values": [6000.0, 6000.0]},
        {"Id": "w1", "Timestamps": [], "Values": []},
        {"Id": "r2", "Timestamps": [], "Values": []},
        {"Id": "w2", "Timestamps": [], "Values": []},
    ]
    # When summed / Then each minute is the per-second sum of the volumes that have data
    assert demand.sum_volume_results(results) == (t, [111.0, 121.0, 31.0])
    # and a minute no volume has stays missing (not zero demand)
    assert demand.sum_volume_results(results[3:]) == ([], [])


def test_window_is_whole_minutes_before_now() -> None:
    start, end = demand.window(NOW)
    assert end == datetime(2026, 11, 22, 10, 30, tzinfo=UTC)
    assert (end - start) == timedelta(minutes=demand.RECENT_MINUTES + demand.FRESH_MINUTES)


def test_series_takes_the_newest_minute_as_demand_and_the_minutes_before_as_recent() -> None:
    start, end = demand.window(NOW)
    # datapoints for the 10 minutes up to 2 minutes ago (a late minute is not zero demand)
    stamps = [end - timedelta(minutes=m) for m in range(12, 2, -1)]
    values = [1000.0 * (12 - m) for m in range(12, 2, -1)]
    read = demand.series(list(reversed(stamps)), list(reversed(values)), start=start, end=end)
    assert read.demand_iops == 9000.0
    # only the minutes with a datapoint: a missing minute is missing, not zero demand
    assert read.recent_demand == tuple(1000.0 * k for k in range(9))
    assert read.newest_minute == (end - timedelta(minutes=3)).isoformat()


def test_series_reports_an_old_newest_minute_as_it_is_and_never_reads_missing_as_zero() -> None:
    start, end = demand.window(NOW)
    # Given one datapoint 17 minutes back, and a gap before the newest of two
    old = [start + timedelta(minutes=1)]
    read = demand.series(old, [5000.0], start=start, end=end)
    # Then it is the newest datapoint, with its minute (whether it is too old is the rules' call)
    assert (read.demand_iops, read.newest_minute) == (5000.0, old[0].isoformat())
    gap = demand.series([start, start + timedelta(minutes=5)], [7000.0, 3000.0], start=start, end=end)
    assert (gap.demand_iops, gap.recent_demand) == (3000.0, (7000.0,))
    nothing = demand.series([], [], start=start, end=end)
    assert (nothing.demand_iops, nothing.newest_minute, nothing.recent_demand) == (0.0, None, ())


def test_series_refuses_a_result_whose_timestamps_and_values_differ() -> None:
    start, end = demand.window(NOW)
    with pytest.raises(ValueError, match="different numbers"):
        demand.series([start], [], start=start, end=end)


# --- the functions ---------------------------------------------------------------------------------


@pytest.fixture
def registry(registry_table: str) -> ArrayRegistry:
    return ArrayRegistry(registry_table, boto3.client("dynamodb", region_name=REGION))


@pytest.fixture
def cloudwatch(aws: None) -> Any:
    return boto3.client("cloudwatch", region_name=REGION)


def service(cloudwatch: Any) -> ArrayService:
    return ArrayService(scheduler_role_arn="arn:aws:iam::123456789012:role/s", cloudwatch=cloudwatch)


def volume_answer(n: int, stamps: list[datetime], per_volume: dict[int, list[float]]) -> dict[str, Any]:
    """GetMetricData's answer to ``ebs_volume_queries``: volume i reads ``per_volume[i]`` ops a
    minute (writes none); a volume left out has no datapoints."""
    results = []
    for i in range(n):
        for prefix in ("r", "w"):
            values = per_volume.get(i, []) if prefix == "r" else [0.0] * len(per_volume.get(i, []))
            results.append(
                {
                    "Id": f"{prefix}{i}",
                    "Label": "x",
                    "Timestamps": stamps[: len(values)],
                    "Values": values,
                    "StatusCode": "Complete",
                }
            )
    return {"MetricDataResults": results, "Messages": []}


def metric_answer(stamps: list[datetime], values: list[float]) -> dict[str, Any]:
    return {
        "MetricDataResults": [
            {
                "Id": "iops",
                "Label": "ArrayIops",
                "Timestamps": stamps,
                "Values": values,
                "StatusCode": "Complete",
            }
        ],
        "Messages": [],
    }


def test_read_demand_asks_for_the_arrays_queries_and_returns_its_minutes(registry, cloudwatch) -> None:
    registry.create(spec(3))
    start, end = demand.window(NOW)
    stamps = [end - timedelta(minutes=m) for m in (4, 3, 2)]
    with Stubber(cloudwatch) as stub:
        # volume 2 has no datapoints (just created, not attached)
        stub.add_response(
            "get_metric_data",
            volume_answer(3, stamps, {0: [3000.0, 6000.0, 9000.0], 1: [3000.0, 6000.0, 9000.0]}),
            {
                "MetricDataQueries": demand.read_queries(spec(3), volume_ids(3)),
                "StartTime": start,
                "EndTime": end,
                "ScanBy": "TimestampAscending",
            },
        )
        result = read_handler.read_demand("demo", registry, service(cloudwatch), cloudwatch, NOW)
        stub.assert_no_pending_responses()
    assert result["demandIops"] == 300.0
    assert result["recentDemand"][-2:] == [100.0, 200.0]
    assert (result["source"], result["datapoints"]) == ("AWS/EBS", 3)


def test_publish_puts_the_demand_of_every_array_whose_demand_is_its_volumes(registry, cloudwatch) -> None:
    # Given an array too large for alarm math, a small one, and one with a host-published metric
    registry.create(spec(2, "small"))
    registry.create(spec(7, "large"))
    registry.create(spec(9, "hosted", demandMetric=CUSTOM))
    start, end = demand.window(NOW, minutes=demand.FRESH_MINUTES)
    stamps = [end - timedelta(minutes=2), end - timedelta(minutes=1)]

    def expect(array_id: str, n: int, per_volume: dict[int, list[float]], sums: list[float]) -> None:
        stub.add_response(
            "get_metric_data",
            volume_answer(n, stamps, per_volume),
            {
                "MetricDataQueries": demand.ebs_volume_queries(volume_ids(n), returned=True),
                "StartTime": start,
                "EndTime": end,
            },
        )
        stub.add_response(
            "put_metric_data",
            {},
            {
                "Namespace": "VSA/Arrays",
                "MetricData": [
                    {
                        "MetricName": "DemandIops",
                        "Dimensions": [{"Name": "ArrayId", "Value": array_id}],
                        "Timestamp": when,
                        "Value": value,
                        "Unit": "Count/Second",
                    }
                    for when, value in zip(stamps, sums, strict=True)
                ],
            },
        )

    with Stubber(cloudwatch) as stub:
        # volume 6 has no datapoints (not attached yet): it must not blank the sum
        expect(
            "large",
            7,
            {i: [600_000.0, 612_000.0] for i in range(6)} | {0: [1_200_000.0, 1_200_000.0]},
            [70_000.0, 71_000.0],
        )
        expect("small", 2, {0: [60_000.0, 120_000.0], 1: [0.0, 60_000.0]}, [1_000.0, 3_000.0])
        result = publish_handler.publish(registry, service(cloudwatch), cloudwatch, NOW)
        stub.assert_no_pending_responses()
    # Then each is published (the dashboard graphs them; the large one's alarms watch it), never
    # the hosted one's (its demand is the hosts' own metric)
    assert result == {"published": {"large": 2, "small": 2}}


def test_one_arrays_failure_does_not_stop_the_others_and_is_reported(registry, cloudwatch) -> None:
    registry.create(spec(6, "first"))
    registry.create(spec(6, "second"))
    with Stubber(cloudwatch) as stub:
        stub.add_client_error("get_metric_data", "Throttling", "Rate exceeded")
        stub.add_response("get_metric_data", volume_answer(6, [NOW - timedelta(minutes=2)], {0: [5.0]}), None)
        stub.add_response("put_metric_data", {}, {"Namespace": "VSA/Arrays", "MetricData": ANY})
        with pytest.raises(RuntimeError, match=r"demand not published for \['first'\]"):
            publish_handler.publish(registry, service(cloudwatch), cloudwatch, NOW)
        stub.assert_no_pending_responses()
