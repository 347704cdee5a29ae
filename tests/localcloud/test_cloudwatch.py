"""CloudWatch alarms and metric math as AWS documents them (each fails on stock LocalStack):

* "Alarm events and EventBridge": every alarm state change, and only a change, puts a
  ``CloudWatch Alarm State Change`` event on the default bus, in a documented shape;
* metric-math alarms (``Metrics=[...]``) are evaluated like single-metric alarms;
* GetMetricData evaluates ``Expression`` queries and returns only ``ReturnData`` queries;
* PutMetricData refuses the ``AWS/`` namespaces (only AWS services publish there);
* composite alarms evaluate their ``AlarmRule``.

AWS/EBS datapoints are published through the control endpoint, standing in for EBS itself, and
alarms are evaluated through it (``evaluate``, optionally as of a past time) instead of waiting.
"""

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

ACCOUNT = "000000000000"
REGION = "us-east-1"
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+0000$")
STATE_CHANGE = "CloudWatch Alarm State Change"
EVENTS = Path(__file__).resolve().parents[2] / "events" / "cloudwatch"


@pytest.fixture
def alarms(aws: Callable[[str], Any]) -> Iterator[list[str]]:
    """Names of alarms the test creates; deleted afterwards (composites first)."""
    names: list[str] = []
    yield names
    aws("cloudwatch").delete_alarms(AlarmNames=list(reversed(names)))


def _name(kind: str) -> str:
    return f"vsa-test-{kind}-{uuid.uuid4().hex[:8]}"


def _arn(name: str) -> str:
    return f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:{name}"


def _state_changes(event_capture: Callable[..., Any], *names: str) -> Any:
    return event_capture(
        {"source": ["aws.cloudwatch"], "detail-type": [STATE_CHANGE], "detail": {"alarmName": list(names)}}
    )


def _simple_alarm(aws: Callable[[str], Any], name: str, **extra: Any) -> None:
    aws("cloudwatch").put_metric_alarm(
        AlarmName=name,
        Namespace="VsaTest",
        MetricName="Load",
        Dimensions=[{"Name": "Array", "Value": "a1"}],
        Statistic="Average",
        Period=60,
        EvaluationPeriods=1,
        Threshold=50.0,
        ComparisonOperator="GreaterThanThreshold",
        **extra,
    )


def test_set_alarm_state_emits_the_state_change_event_in_aws_shape(aws, event_capture, alarms) -> None:
    name = _name("shape")
    alarms.append(name)
    capture = _state_changes(event_capture, name)
    _simple_alarm(aws, name, AlarmDescription="load too high")

    aws("cloudwatch").set_alarm_state(
        AlarmName=name, StateValue="ALARM", StateReason="testing", StateReasonData='{"source":"test"}'
    )

    (event,) = capture.wait_for(lambda e: True)
    assert set(event) == {
        "version",
        "id",
        "detail-type",
        "source",
        "account",
        "time",
        "region",
        "resources",
        "detail",
    }
    assert event["version"] == "0"
    assert (event["detail-type"], event["source"]) == (STATE_CHANGE, "aws.cloudwatch")
    assert (event["account"], event["region"], event["resources"]) == (ACCOUNT, REGION, [_arn(name)])
    detail = event["detail"]
    assert set(detail) == {"alarmName", "state", "previousState", "configuration"}
    assert detail["alarmName"] == name
    state, previous = detail["state"], detail["previousState"]
    assert STAMP.match(state["timestamp"])
    assert STAMP.match(previous["timestamp"])
    # SetAlarmState's reason data is passed through exactly as given
    assert {k: v for k, v in state.items() if k != "timestamp"} == {
        "value": "ALARM",
        "reason": "testing",
        "reasonData": '{"source":"test"}',
    }
    assert {k: v for k, v in previous.items() if k != "timestamp"} == {
        "value": "INSUFFICIENT_DATA",
        "reason": "Unchecked: Initial alarm creation",
    }
    (metric,) = detail["configuration"]["metrics"]
    assert detail["configuration"]["description"] == "load too high"
    assert isinstance(metric.pop("id"), str)
    assert metric == {
        "metricStat": {
            "metric": {"namespace": "VsaTest", "name": "Load", "dimensions": {"Array": "a1"}},
            "period": 60,
            "stat": "Average",
        },
        "returnData": True,
    }
    described = aws("cloudwatch").describe_alarms(AlarmNames=[name])["MetricAlarms"][0]
    assert described["StateReasonData"] == '{"source":"test"}'


def test_no_event_when_the_state_does_not_change(aws, event_capture, alarms) -> None:
    name = _name("same")
    alarms.append(name)
    capture = _state_changes(event_capture, name)
    _simple_alarm(aws, name)
    cloudwatch = aws("cloudwatch")

    for value in ("ALARM", "ALARM", "OK", "OK"):
        cloudwatch.set_alarm_state(AlarmName=name, StateValue=value, StateReason=f"now {value}")

    capture.wait_for(lambda e: e["detail"]["state"]["value"] == "OK")
    changes = [
        (e["detail"]["previousState"]["value"], e["detail"]["state"]["value"]) for e in capture.settle()
    ]
    # two changes, one event each, none for a repeated state. Compared as a set: EventBridge
    # does not promise delivery in order (its targets may see events out of order, as a loaded
    # local cloud delivers them)
    assert sorted(changes) == sorted([("INSUFFICIENT_DATA", "ALARM"), ("ALARM", "OK")])
    assert len(changes) == 2


def _product_metrics(vol1: str, vol2: str) -> list[dict[str, Any]]:
    """The product's IOPS alarm: (r1 + w1 + r2 + w2) / PERIOD(r1) over two volumes' EBS ops."""
    queries: list[dict[str, Any]] = [
        {
            "Id": "demand",
            "Expression": "(r1 + w1 + r2 + w2) / PERIOD(r1)",
            "Label": "ArrayIops",
            "ReturnData": True,
        }
    ]
    for index, volume in ((1, vol1), (2, vol2)):
        for prefix, metric in (("r", "VolumeReadOps"), ("w", "VolumeWriteOps")):
            stat = {
                "Metric": {
                    "Namespace": "AWS/EBS",
                    "MetricName": metric,
                    "Dimensions": [{"Name": "VolumeId", "Value": volume}],
                },
                "Period": 60,
                "Stat": "Sum",
            }
            queries.append({"Id": f"{prefix}{index}", "MetricStat": stat, "ReturnData": False})
    return queries


def _publish_ops(
    control: Callable[..., Any], volume: str, minute: datetime, reads: float, writes: float
) -> None:
    """EBS publishing one minute of a volume's read and write operations (two datapoints each)."""
    data = []
    for metric, total in (("VolumeReadOps", reads), ("VolumeWriteOps", writes)):
        for second in (5, 35):
            data.append(
                {
                    "MetricName": metric,
                    "Dimensions": [{"Name": "VolumeId", "Value": volume}],
                    "Timestamp": (minute + timedelta(seconds=second)).isoformat(),
                    "Value": total / 2,
                    "Unit": "Count",
                }
            )
    control("cloudwatch", "publish", Namespace="AWS/EBS", MetricData=data)


def _volumes() -> tuple[str, str]:
    return f"vol-0{uuid.uuid4().hex[:16]}", f"vol-0{uuid.uuid4().hex[:16]}"


def _this_minute() -> datetime:
    return datetime.now(UTC).replace(second=0, microsecond=0)


def test_metric_math_alarm_over_ebs_volumes_goes_to_alarm_and_back_to_ok(
    aws, control, event_capture, alarms
) -> None:
    vol1, vol2 = _volumes()
    now = _this_minute()
    # minutes -10..-8: 400 IOPS (24,000 ops a minute); minutes -3..-1: 100 IOPS
    for ago, ops in ((10, 6000), (9, 6000), (8, 6000), (3, 1500), (2, 1500), (1, 1500)):
        for volume in (vol1, vol2):
            _publish_ops(control, volume, now - timedelta(minutes=ago), reads=ops, writes=ops)
    name = _name("iops-high")
    alarms.append(name)
    capture = _state_changes(event_capture, name)
    aws("cloudwatch").put_metric_alarm(
        AlarmName=name,
        AlarmDescription="IOPS demand above target",
        Metrics=_product_metrics(vol1, vol2),
        EvaluationPeriods=3,
        DatapointsToAlarm=3,
        Threshold=300.0,
        ComparisonOperator="GreaterThanThreshold",
        TreatMissingData="missing",
    )

    at_high = now - timedelta(minutes=8) + timedelta(seconds=30)
    assert control("cloudwatch", "evaluate", AlarmName=name, At=at_high.isoformat())["States"] == {
        name: "ALARM"
    }
    assert control("cloudwatch", "evaluate", AlarmName=name)["States"] == {name: "OK"}

    # (SQS does not keep order: pick each transition by its states)
    def transition(before: str, after: str) -> Callable[[dict[str, Any]], bool]:
        return lambda e: (
            (e["detail"]["previousState"]["value"], e["detail"]["state"]["value"]) == (before, after)
        )

    (alarm_event,) = capture.wait_for(transition("INSUFFICIENT_DATA", "ALARM"))
    (ok_event,) = capture.wait_for(transition("ALARM", "OK"))
    assert (alarm_event["detail"]["previousState"]["value"], alarm_event["detail"]["state"]["value"]) == (
        "INSUFFICIENT_DATA",
        "ALARM",
    )
    assert (ok_event["detail"]["previousState"]["value"], ok_event["detail"]["state"]["value"]) == (
        "ALARM",
        "OK",
    )
    state = alarm_event["detail"]["state"]
    assert state["reason"].startswith("Threshold Crossed: 3 out of the last 3 datapoints [400.0 (")
    assert "were greater than the threshold (300.0) (minimum 3 datapoints for" in state["reason"]
    reason_data = json.loads(state["reasonData"])
    assert reason_data["recentDatapoints"] == [400.0, 400.0, 400.0]
    assert (reason_data["threshold"], reason_data["period"]) == (300.0, 60)
    assert reason_data["startDate"] == (now - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:00.000+0000")
    assert ok_event["detail"]["state"]["reason"].startswith(
        "Threshold Crossed: 3 out of the last 3 datapoints [100.0"
    )
    assert "were not greater than the threshold (300.0)" in ok_event["detail"]["state"]["reason"]
    assert ok_event["detail"]["previousState"] == state
    # the configuration shows the metric-math queries as in the product's sample events
    expected = json.loads((EVENTS / "iops_alarm_high.json").read_text())["detail"]["configuration"]["metrics"]
    for item in expected:
        if "metricStat" in item:
            sample = item["metricStat"]["metric"]["dimensions"]["VolumeId"]
            item["metricStat"]["metric"]["dimensions"]["VolumeId"] = vol1 if sample.endswith("1") else vol2
    assert ok_event["detail"]["configuration"] == {
        "description": "IOPS demand above target",
        "metrics": expected,
    }
    described = aws("cloudwatch").describe_alarms(AlarmNames=[name])["MetricAlarms"][0]
    assert described["StateValue"] == "OK"


def test_get_metric_data_computes_the_product_expression_per_period(aws, control) -> None:
    vol1, vol2 = _volumes()
    now = _this_minute()
    ops = {6: (600, 300, 60, 240), 5: (1200, 0, 0, 0), 4: (30, 30, 30, 30)}  # r1, w1, r2, w2 per minute
    for ago, (r1, w1, r2, w2) in ops.items():
        _publish_ops(control, vol1, now - timedelta(minutes=ago), reads=r1, writes=w1)
        _publish_ops(control, vol2, now - timedelta(minutes=ago), reads=r2, writes=w2)

    reply = aws("cloudwatch").get_metric_data(
        MetricDataQueries=_product_metrics(vol1, vol2),
        StartTime=now - timedelta(minutes=6),
        EndTime=now - timedelta(minutes=3),
    )

    (result,) = reply["MetricDataResults"]  # ReturnData=False queries are not returned
    assert (result["Id"], result["Label"], result["StatusCode"]) == ("demand", "ArrayIops", "Complete")
    assert result["Timestamps"] == [now - timedelta(minutes=m) for m in (4, 5, 6)]  # newest first
    assert result["Values"] == [2.0, 20.0, 20.0]


def test_get_metric_data_sums_an_array_of_metrics(aws, control) -> None:
    vol1, vol2 = _volumes()
    minute = _this_minute() - timedelta(minutes=2)
    _publish_ops(control, vol1, minute, reads=100, writes=20)
    _publish_ops(control, vol2, minute, reads=50, writes=10)
    queries = [q for q in _product_metrics(vol1, vol2) if q["Id"] != "demand"]
    queries += [
        {"Id": "reads", "Expression": "SUM([r1, r2])", "Label": "Reads"},
        {"Id": "all", "Expression": "SUM(METRICS())", "Label": "All"},
    ]

    reply = aws("cloudwatch").get_metric_data(
        MetricDataQueries=queries,
        StartTime=minute,
        EndTime=minute + timedelta(minutes=1),
        ScanBy="TimestampAscending",
    )

    assert {r["Id"]: r["Values"] for r in reply["MetricDataResults"]} == {"reads": [150.0], "all": [180.0]}


def test_put_metric_data_into_an_aws_namespace_is_refused(aws) -> None:
    cloudwatch = aws("cloudwatch")
    with pytest.raises(ClientError) as refused:
        cloudwatch.put_metric_data(
            Namespace="AWS/EBS", MetricData=[{"MetricName": "VolumeReadOps", "Value": 1.0}]
        )
    error = refused.value.response["Error"]
    assert (error["Code"], error["Message"]) == (
        "InvalidParameterValue",
        "The value AWS/EBS for parameter Namespace is invalid.",
    )
    cloudwatch.put_metric_data(Namespace="VsaTest", MetricData=[{"MetricName": "Load", "Value": 1.0}])


def test_composite_alarm_follows_its_rule(aws, event_capture, alarms) -> None:
    first, second, composite = _name("first"), _name("second"), _name("composite")
    alarms.extend([first, second])
    capture = _state_changes(event_capture, composite)
    _simple_alarm(aws, first)
    _simple_alarm(aws, second)
    rule = f'ALARM("{first}") AND NOT ALARM({_arn(second)})'
    cloudwatch = aws("cloudwatch")
    cloudwatch.put_composite_alarm(AlarmName=composite, AlarmRule=rule)
    alarms.append(composite)

    cloudwatch.set_alarm_state(AlarmName=first, StateValue="ALARM", StateReason="first breaches")
    (alarm_event,) = capture.wait_for(lambda e: True)
    cloudwatch.set_alarm_state(AlarmName=second, StateValue="ALARM", StateReason="second breaches")
    capture.wait_for(lambda e: e["detail"]["state"]["value"] == "OK")

    changes = [
        (e["detail"]["previousState"]["value"], e["detail"]["state"]["value"]) for e in capture.settle()
    ]
    assert changes == [("INSUFFICIENT_DATA", "ALARM"), ("ALARM", "OK")]
    detail = alarm_event["detail"]
    assert alarm_event["resources"] == [_arn(composite)]
    assert detail["configuration"] == {"alarmRule": rule}
    assert detail["state"]["reason"].startswith(f"{_arn(first)} transitioned to ALARM at ")
    triggering = json.loads(detail["state"]["reasonData"])["triggeringAlarms"]
    assert [(t["arn"], t["state"]["value"]) for t in triggering] == [(_arn(first), "ALARM")]
    described = cloudwatch.describe_alarms(AlarmNames=[composite], AlarmTypes=["CompositeAlarm"])
    assert described["CompositeAlarms"][0]["StateValue"] == "OK"


# --- missing datapoints: a volume without metrics (not attached) must not blank the demand -------
# "Using metric math" (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-metric-math.html):
# PERIOD(m) takes a TS and returns S, "the period of the metric in seconds" (a scalar, whether or not
# the metric has datapoints); FILL(m, value) takes a TS (or TS[]) and returns a TS (or TS[]), "fills
# the missing values of a metric with the specified filler value". EBS sends no metrics for a volume
# that is not attached (Amazon EBS User Guide, "Amazon CloudWatch metrics for Amazon EBS").


def _volume_queries(vol1: str, vol2: str) -> list[dict[str, Any]]:
    return [q for q in _product_metrics(vol1, vol2) if q["Id"] != "demand"]


def test_period_is_the_metrics_period_even_without_datapoints(aws, control) -> None:
    # Given r1 (volume 1) has no datapoints at all and volume 2 has one minute of reads
    vol1, vol2 = _volumes()
    minute = _this_minute() - timedelta(minutes=2)
    _publish_ops(control, vol2, minute, reads=600, writes=0)
    queries = [*_volume_queries(vol1, vol2), {"Id": "rate", "Expression": "r2 / PERIOD(r1)", "Label": "Rate"}]
    # When PERIOD of the empty metric divides the other
    reply = aws("cloudwatch").get_metric_data(
        MetricDataQueries=queries, StartTime=minute, EndTime=minute + timedelta(minutes=1)
    )
    # Then PERIOD(r1) is the scalar 60 and the rate is there (a time series of PERIOD would be empty)
    (result,) = reply["MetricDataResults"]
    assert (result["Timestamps"], result["Values"]) == ([minute], [10.0])


def test_fill_of_one_metric_is_one_time_series(aws, control) -> None:
    # Given volume 1 has reads in one of two minutes
    vol1, vol2 = _volumes()
    first = _this_minute() - timedelta(minutes=3)
    _publish_ops(control, vol1, first, reads=120, writes=0)
    queries = [
        *_volume_queries(vol1, vol2),
        {"Id": "filled", "Expression": "FILL(r1, 0)", "Label": "Filled"},
        {"Id": "both", "Expression": "FILL(r1, 0) + FILL(r2, 0)", "Label": "Both"},
    ]
    # When FILLed over both minutes
    reply = aws("cloudwatch").get_metric_data(
        MetricDataQueries=queries,
        StartTime=first,
        EndTime=first + timedelta(minutes=2),
        ScanBy="TimestampAscending",
    )
    # Then each expression is one series with both minutes, the missing one as 0
    by_id = {r["Id"]: r for r in reply["MetricDataResults"]}
    assert sorted(r["Id"] for r in reply["MetricDataResults"]) == ["both", "filled"]
    for query in ("filled", "both"):
        assert by_id[query]["Timestamps"] == [first, first + timedelta(minutes=1)]
        assert by_id[query]["Values"] == [120.0, 0.0]
    assert by_id["filled"]["Label"] == "Filled"


def test_the_products_alarm_math_counts_a_volume_without_datapoints_as_no_io(aws, control) -> None:
    # Given an array of two volumes whose first (r0/w0, PERIOD's argument) has no datapoints, as
    # a volume just created and not yet attached, and the second serves 100 then 200 IOPS
    from vsa_core.arrays.demand import ebs_iops_queries  # the queries the product's alarms use

    vol1, vol2 = _volumes()
    first = _this_minute() - timedelta(minutes=3)
    _publish_ops(control, vol2, first, reads=3000, writes=3000)
    _publish_ops(control, vol2, first + timedelta(minutes=1), reads=6000, writes=6000)
    # When GetMetricData evaluates the alarm's metric math
    reply = aws("cloudwatch").get_metric_data(
        MetricDataQueries=ebs_iops_queries([vol1, vol2]),
        StartTime=first,
        EndTime=first + timedelta(minutes=2),
        ScanBy="TimestampAscending",
    )
    # Then the demand is the second volume's, minute by minute (not blank)
    (result,) = reply["MetricDataResults"]
    assert result["Timestamps"] == [first, first + timedelta(minutes=1)]
    assert result["Values"] == [100.0, 200.0]


# "Using metric math", FILL: "FILL(m1, REPEAT)" fills each missing value with "the most recent
# actual value before" it; "LINEAR" interpolates between the values at the beginning and end of the
# gap (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-metric-math.html).


def test_fill_repeat_and_linear_as_the_metric_math_reference_defines_them(aws, control) -> None:
    # Given reads of 60 then 180 a minute, a minute apart with a minute missing between, a minute
    # missing before them and two after
    vol1, vol2 = _volumes()
    start = _this_minute() - timedelta(minutes=8)
    _publish_ops(control, vol1, start + timedelta(minutes=1), reads=60, writes=0)
    _publish_ops(control, vol1, start + timedelta(minutes=3), reads=180, writes=0)
    queries = [
        *_volume_queries(vol1, vol2),
        {"Id": "repeat", "Expression": "FILL(r1, REPEAT)", "Label": "Repeat"},
        {"Id": "linear", "Expression": "FILL(r1, linear)", "Label": "Linear"},
        {"Id": "arrays", "Expression": "FILL(FILL(METRICS(), REPEAT), 0)", "Label": "Arrays"},
    ]
    # When filled over six minutes
    reply = aws("cloudwatch").get_metric_data(
        MetricDataQueries=queries,
        StartTime=start,
        EndTime=start + timedelta(minutes=6),
        ScanBy="TimestampAscending",
    )
    results = reply["MetricDataResults"]
    by_id = {r["Id"]: r for r in results if r["Id"] != "arrays"}
    at = [start + timedelta(minutes=m) for m in range(6)]
    # Then REPEAT carries the last value to the end of the range, LINEAR fills only the gap, and
    # neither invents a value before the first one
    assert (by_id["repeat"]["Timestamps"], by_id["repeat"]["Values"]) == (
        at[1:],
        [60.0, 60.0, 180.0, 180.0, 180.0],
    )
    assert (by_id["linear"]["Timestamps"], by_id["linear"]["Values"]) == (at[1:4], [60.0, 120.0, 180.0])
    # And over an array each series is filled, then 0 where none came before (r1's first minute;
    # the other three series have no datapoint at all)
    arrays = [r for r in results if r["Id"] == "arrays"]
    assert len(arrays) == 4
    assert sorted(r["Values"] for r in arrays)[-1] == [0.0, 60.0, 60.0, 180.0, 180.0, 180.0]
    assert sorted(r["Values"] for r in arrays)[0] == [0.0] * 6


def test_the_products_high_alarm_fires_while_the_newest_minute_has_not_landed(aws, control, alarms) -> None:
    # Given an array of two volumes at 400 IOPS for the last three minutes, and nothing yet for the
    # minute under way (EBS's datapoint for it lands later), the product's high alarm over them
    from vsa_core.arrays.demand import ebs_iops_queries  # the queries the product's alarms use

    vol1, vol2 = _volumes()
    now = _this_minute()
    for ago in (3, 2, 1):
        for volume in (vol1, vol2):
            _publish_ops(control, volume, now - timedelta(minutes=ago), reads=6000, writes=6000)
    name = _name("iops-high")
    alarms.append(name)
    aws("cloudwatch").put_metric_alarm(
        AlarmName=name,
        Metrics=ebs_iops_queries([vol1, vol2]),
        EvaluationPeriods=2,
        DatapointsToAlarm=2,
        Threshold=300.0,
        ComparisonOperator="GreaterThanThreshold",
        TreatMissingData="notBreaching",
    )
    # When evaluated early in the minute under way
    state = control("cloudwatch", "evaluate", AlarmName=name, At=(now + timedelta(seconds=5)).isoformat())
    # Then it is in ALARM: the minute not landed yet counts as the last one seen, not as no IO
    # (with FILL(METRICS(), 0) alone it read 0 there, and 1 of 2 breaching kept it OK)
    assert state["States"] == {name: "ALARM"}
    reason = aws("cloudwatch").describe_alarms(AlarmNames=[name])["MetricAlarms"][0]["StateReasonData"]
    assert json.loads(reason)["recentDatapoints"] == [400.0, 400.0]


def test_an_alarm_put_again_every_few_seconds_is_still_evaluated_every_minute(aws, control, alarms) -> None:
    # "Evaluating an alarm": CloudWatch evaluates a metric alarm every period (a minute here),
    # whoever updated it last. Given an alarm whose data breaches, put again every 10 s as
    # ScaleArray and ReconcileArray may update it
    vol1, vol2 = _volumes()
    now = _this_minute()
    for ago in range(-1, 4):  # the last 3 minutes, this one and the next: whenever it is evaluated
        _publish_ops(control, vol1, now - timedelta(minutes=ago), reads=30_000, writes=30_000)
    name = _name("iops-high")
    alarms.append(name)
    from vsa_core.arrays.demand import ebs_iops_queries  # the queries the product's alarms use

    params = {
        "AlarmName": name,
        "Metrics": ebs_iops_queries([vol1, vol2]),
        "EvaluationPeriods": 1,
        "Threshold": 300.0,
        "ComparisonOperator": "GreaterThanThreshold",
        "TreatMissingData": "notBreaching",
    }
    cloudwatch = aws("cloudwatch")
    cloudwatch.put_metric_alarm(**params)
    # When nothing evaluates it by hand, then the periodic evaluation puts it in ALARM within its
    # first interval and a margin, the puts notwithstanding (each restarted the wait for a minute)
    deadline = time.monotonic() + 150
    while (
        state := cloudwatch.describe_alarms(AlarmNames=[name])["MetricAlarms"][0]["StateValue"]
    ) != "ALARM":
        assert time.monotonic() < deadline, f"alarm {name} still {state} after 150 s of puts every 10 s"
        time.sleep(10)
        cloudwatch.put_metric_alarm(**params)


def test_ebs_publishes_nothing_for_a_volume_attached_to_no_instance(aws, control) -> None:
    """ "Amazon EBS sends data points to CloudWatch … only when the volume is attached to an
    instance" (Amazon EBS metrics): the control action that stands in for EBS drops an available
    volume's datapoints and keeps an attached one's."""
    ec2 = aws("ec2")
    params = {"AvailabilityZone": "us-east-1a", "Size": 10, "VolumeType": "io2", "Iops": 1000}
    loose, used = (ec2.create_volume(**params)["VolumeId"] for _ in range(2))
    instance = ec2.run_instances(
        ImageId="ami-12c6146b", MinCount=1, MaxCount=1, Placement={"AvailabilityZone": "us-east-1a"}
    )["Instances"][0]["InstanceId"]
    try:
        ec2.get_waiter("instance_running").wait(InstanceIds=[instance], WaiterConfig={"Delay": 1})
        ec2.get_waiter("volume_available").wait(VolumeIds=[loose, used], WaiterConfig={"Delay": 1})
        ec2.attach_volume(VolumeId=used, InstanceId=instance, Device="/dev/sdf")
        minute = _this_minute() - timedelta(minutes=2)
        datum = {"MetricName": "VolumeReadOps", "Timestamp": minute.isoformat(), "Value": 60.0}
        answer = control(
            "cloudwatch",
            "publish",
            Namespace="AWS/EBS",
            MetricData=[{**datum, "Dimensions": [{"Name": "VolumeId", "Value": v}]} for v in (loose, used)],
        )
        assert answer == {"published": 1, "dropped": [loose]}
        stats = {
            v: aws("cloudwatch").get_metric_statistics(
                Namespace="AWS/EBS",
                MetricName="VolumeReadOps",
                Dimensions=[{"Name": "VolumeId", "Value": v}],
                StartTime=minute,
                EndTime=minute + timedelta(minutes=1),
                Period=60,
                Statistics=["Sum"],
            )["Datapoints"]
            for v in (loose, used)
        }
        assert stats[loose] == []
        assert [d["Sum"] for d in stats[used]] == [60.0]
    finally:
        ec2.terminate_instances(InstanceIds=[instance])


def test_the_iops_rule_matches_only_the_arrays_iops_alarms(aws) -> None:
    # Given the template's IOPS rule pattern and CloudWatch alarm state changes in AWS's shape
    # (EventBridge "wildcard" matching, documented for event buses:
    # https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-create-pattern-operators.html)
    from tests.infra.test_event_rules import alarm_state_change, iops_rule_pattern

    pattern = json.dumps(iops_rule_pattern())

    def matches(event: dict[str, Any]) -> bool:
        return bool(aws("events").test_event_pattern(EventPattern=pattern, Event=json.dumps(event))["Result"])

    # When EventBridge tests them / Then the arrays' IOPS alarms match, the stack's own do not
    assert matches(alarm_state_change("vsa-demo-iops-high"))
    assert matches(alarm_state_change("vsa-prod-db-01-iops-low"))
    assert not matches(alarm_state_change("vsa-demo-backup-failed"))
    assert not matches(json.loads((EVENTS / "backup_failed_alarm.json").read_text()))
    assert not matches(alarm_state_change("vsa-demo-iops-high", state="OK"))


def test_a_held_alarm_is_left_out_of_the_periodic_evaluation_until_released(aws, control, alarms) -> None:
    # Given a high-resolution alarm (evaluated every 10 s) that missing data sends to ALARM,
    # held by a test that plays its state changes itself (control hold; AWS has no such thing)
    name = _name("held")
    alarms.append(name)
    prefix = name.rsplit("-", 1)[0] + "-"  # as a test holds its array's alarms: vsa-<array>-
    assert control("cloudwatch", "hold", AlarmNamePrefix=prefix)["Held"] == [prefix]
    try:
        aws("cloudwatch").put_metric_alarm(
            AlarmName=name,
            Namespace="VsaTest",
            MetricName="Held",
            Statistic="Sum",
            Period=10,
            EvaluationPeriods=1,
            Threshold=1.0,
            ComparisonOperator="GreaterThanThreshold",
            TreatMissingData="breaching",
        )
        # When two periodic evaluations pass, it is not evaluated
        time.sleep(25)
        alarm = aws("cloudwatch").describe_alarms(AlarmNames=[name])["MetricAlarms"][0]
        assert alarm["StateValue"] == "INSUFFICIENT_DATA"
        # (an explicit evaluation still evaluates it)
        assert control("cloudwatch", "evaluate", AlarmName=name)["States"] == {name: "ALARM"}
        aws("cloudwatch").set_alarm_state(AlarmName=name, StateValue="OK", StateReason="reset by the test")
    finally:
        assert prefix not in control("cloudwatch", "release", AlarmNamePrefix=prefix)["Held"]
    # Then once released, the next periodic evaluation finds the missing data breaching
    deadline = time.monotonic() + 30
    while aws("cloudwatch").describe_alarms(AlarmNames=[name])["MetricAlarms"][0]["StateValue"] != "ALARM":
        assert time.monotonic() < deadline, "the released alarm was not evaluated within 30 s"
        time.sleep(1)


def test_metric_stat_queries_aggregate_each_period_from_start_time_rounded_to_the_minute(aws) -> None:
    """GetMetricData of ``MetricStat`` queries alone (LocalStack's own path, read in one query
    per metric by vsa_localcloud.patches._metric_stat_read_in_one_query): every statistic per
    period, a period without samples left out, newest first unless asked otherwise, values from
    PutMetricData's statistic sets too. The periods count from StartTime rounded down to the
    minute, as the GetMetricData API reference says of a start less than 15 days ago (LocalStack
    counted them from StartTime's second)."""
    cloudwatch = aws("cloudwatch")
    namespace, name = f"VSA/Test{uuid.uuid4().hex[:8]}", "Ops"
    dims = [{"Name": "ArrayId", "Value": "a1"}]
    minute = _this_minute() - timedelta(hours=2)
    start = minute + timedelta(seconds=17)  # on no minute's or period's boundary
    # samples at these offsets from the minute (seconds): the periods of 600 s from it hold
    # 27 and 317; 605 (588 s after StartTime itself); none; 1850 and the statistic set at 1950
    samples = {27: 4.0, 317: 8.0, 605: 1.0, 1850: 10.0}
    cloudwatch.put_metric_data(
        Namespace=namespace,
        MetricData=[
            {"MetricName": name, "Dimensions": dims, "Timestamp": minute + timedelta(seconds=s), "Value": v}
            for s, v in samples.items()
        ]
        + [
            {
                "MetricName": name,
                "Dimensions": dims,
                "Timestamp": minute + timedelta(seconds=1950),
                "StatisticValues": {"SampleCount": 4, "Sum": 20.0, "Minimum": 2.0, "Maximum": 9.0},
            }
        ],
    )
    expected = {
        "Sum": [30.0, 1.0, 12.0],
        "Average": [30.0 / 5, 1.0, 12.0 / 2],
        "Minimum": [2.0, 1.0, 4.0],
        "Maximum": [10.0, 1.0, 8.0],
        "SampleCount": [5.0, 1.0, 2.0],
    }
    queries = [
        {
            "Id": stat.lower(),
            "MetricStat": {
                "Metric": {"Namespace": namespace, "MetricName": name, "Dimensions": dims},
                "Period": 600,
                "Stat": stat,
            },
        }
        for stat in expected
    ]
    # (EndTime inside the fourth period, which is returned: it starts before EndTime)
    end = start + timedelta(seconds=2100)
    reply = cloudwatch.get_metric_data(MetricDataQueries=queries, StartTime=start, EndTime=end)
    got = {r["Id"]: r for r in reply["MetricDataResults"]}
    stamps = [minute + timedelta(seconds=s) for s in (1800, 600, 0)]
    for stat, values in expected.items():
        result = got[stat.lower()]
        assert result["Timestamps"] == stamps, (stat, result)
        assert result["Values"] == pytest.approx(values), (stat, result)
    ascending = cloudwatch.get_metric_data(
        MetricDataQueries=queries[:1], StartTime=start, EndTime=end, ScanBy="TimestampAscending"
    )["MetricDataResults"][0]
    assert ascending["Values"] == pytest.approx([12.0, 1.0, 30.0])


def _one_failure_before_a_boundary(cloudwatch: Any) -> tuple[str, datetime]:
    """(a new namespace, a clock 5-minute boundary at least 15 minutes ago) with one ``Failed``
    datapoint of 1 in that namespace 50 s before the boundary."""
    namespace = f"VSA/Test{uuid.uuid4().hex[:8]}"
    minute = _this_minute() - timedelta(minutes=15)
    boundary = minute - timedelta(minutes=minute.minute % 5)
    cloudwatch.put_metric_data(
        Namespace=namespace,
        MetricData=[{"MetricName": "Failed", "Timestamp": boundary - timedelta(seconds=50), "Value": 1.0}],
    )
    return namespace, boundary


def test_a_math_query_counts_its_periods_from_start_time_rounded_to_the_minute(aws) -> None:
    # GetMetricData API reference, StartTime: a start less than 15 days ago is rounded down to the
    # whole minute (not to a multiple of the period); the periods follow from there
    cloudwatch = aws("cloudwatch")
    namespace, boundary = _one_failure_before_a_boundary(cloudwatch)
    metric = {"Namespace": namespace, "MetricName": "Failed"}
    start = boundary - timedelta(minutes=3) + timedelta(seconds=17)
    result = cloudwatch.get_metric_data(
        MetricDataQueries=[
            {"Id": "m", "MetricStat": {"Metric": metric, "Period": 300, "Stat": "Sum"}, "ReturnData": False},
            {"Id": "twice", "Expression": "m * 2"},
        ],
        StartTime=start,
        EndTime=start + timedelta(minutes=9),
    )["MetricDataResults"]
    # the periods start at boundary - 3 min and + 2 min (from a multiple of 300 s they would
    # start at boundary - 5 min and at the boundary)
    assert [(r["Id"], r["Timestamps"], r["Values"]) for r in result] == [
        ("twice", [boundary - timedelta(minutes=3)], [2.0])
    ]


def test_an_alarm_window_slides_a_count_stays_in_it_for_a_whole_period(aws, control, alarms) -> None:
    # "Alarm evaluation window" (CloudWatch User Guide): without EvaluationWindow an alarm uses a
    # sliding window, which advances each time the alarm is evaluated. Given a count alarm over
    # 5-minute periods and one failure counted 50 s before a clock 5-minute boundary
    cloudwatch = aws("cloudwatch")
    namespace, boundary = _one_failure_before_a_boundary(cloudwatch)
    name = _name("count")
    alarms.append(name)
    cloudwatch.put_metric_alarm(
        AlarmName=name,
        Metrics=[
            {
                "Id": "failed",
                "MetricStat": {
                    "Metric": {"Namespace": namespace, "MetricName": "Failed"},
                    "Period": 300,
                    "Stat": "Sum",
                },
                "ReturnData": False,
            },
            {"Id": "count", "Expression": "FILL(failed, 0)"},
        ],
        EvaluationPeriods=1,
        Threshold=0.0,
        ComparisonOperator="GreaterThanThreshold",
        TreatMissingData="notBreaching",
    )

    def evaluated(minutes_after: int) -> str:
        at = boundary + timedelta(minutes=minutes_after, seconds=5)
        states: dict[str, str] = control("cloudwatch", "evaluate", AlarmName=name, At=at.isoformat())[
            "States"
        ]
        return states[name]

    # When it is evaluated in the minutes after the boundary, Then the count is in its newest
    # period through the fourth minute after the boundary (a window ending with the evaluation's
    # minute: five minutes from the failure's), and out of it from the fifth
    assert [evaluated(m) for m in (0, 1, 3, 4, 5)] == ["ALARM", "ALARM", "ALARM", "OK", "OK"]


def test_a_state_update_in_the_alarm_history_carries_that_updates_time_and_evaluated_data(
    aws, control, alarms
) -> None:
    # DescribeAlarmHistory (CloudWatch API Reference, AlarmHistoryItem): "Timestamp: the time
    # stamp for the alarm history item", the state update it records; its HistoryData's
    # newState.stateReasonData is the reason data of that update ("Alarm history": an
    # evaluation's evaluatedDatapoints). Stock LocalStack stamps each item with the previous
    # update's time.
    # Given an alarm over a metric with one breaching datapoint a minute ago
    name = _name("history")
    alarms.append(name)
    minute = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    aws("cloudwatch").put_metric_data(
        Namespace="VsaTest",
        MetricData=[
            {
                "MetricName": "Load",
                "Dimensions": [{"Name": "Array", "Value": name}],
                "Timestamp": minute,
                "Value": 80.0,
            }
        ],
    )
    aws("cloudwatch").put_metric_alarm(
        AlarmName=name,
        Namespace="VsaTest",
        MetricName="Load",
        Dimensions=[{"Name": "Array", "Value": name}],
        Statistic="Average",
        Period=60,
        EvaluationPeriods=1,
        Threshold=50.0,
        ComparisonOperator="GreaterThanThreshold",
    )
    # When it is evaluated (to ALARM), then set back to OK
    assert control("cloudwatch", "evaluate", AlarmName=name)["States"] == {name: "ALARM"}
    updated = [
        aws("cloudwatch").describe_alarms(AlarmNames=[name])["MetricAlarms"][0]["StateUpdatedTimestamp"]
    ]
    aws("cloudwatch").set_alarm_state(AlarmName=name, StateValue="OK", StateReason="re-armed by the test")
    updated.append(
        aws("cloudwatch").describe_alarms(AlarmNames=[name])["MetricAlarms"][0]["StateUpdatedTimestamp"]
    )
    # Then each state update's history item has the time of that update, the alarm's own
    items = aws("cloudwatch").describe_alarm_history(AlarmName=name, HistoryItemType="StateUpdate")[
        "AlarmHistoryItems"
    ]
    by_state = {json.loads(i["HistoryData"])["newState"]["stateValue"]: i for i in items}
    assert set(by_state) == {"ALARM", "OK"}
    assert [by_state["ALARM"]["Timestamp"], by_state["OK"]["Timestamp"]] == updated
    # and the evaluation's item names the datapoint it evaluated
    reason = json.loads(by_state["ALARM"]["HistoryData"])["newState"]["stateReasonData"]
    (point,) = reason["evaluatedDatapoints"]
    assert datetime.fromisoformat(point["timestamp"]) == minute
    assert point["value"] == 80.0
