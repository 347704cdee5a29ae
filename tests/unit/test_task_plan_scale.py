"""task_plan_scale: the ScaleArray step that plans an array's controller count from the alarm's
demand, the registry (spec, cooldown clocks) and the controller group (capacity, controllers
booting or draining, who leaves on a scale-in) and the forecast floor the health check stored on
the registry item (never a history read here). moto for DynamoDB, EC2 and Auto Scaling."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from task_plan_scale import handler
from tests.specs import SPREAD
from tests.unit.conftest import REGION, FakeLambdaContext, an_image_id, load_event, record_decision
from vsa_core.arrays.aws_registry import ArrayRegistry, array_key
from vsa_core.arrays.spec import ArraySpec
from vsa_core.errors import ArrayNotFoundError
from vsa_core.naming import slot_key
from vsa_core.scaling import aws_forecast
from vsa_core.scaling.aws_plan import PlanSettings
from vsa_core.scaling.events import ScaleRequest
from vsa_core.scaling.forecast import Floor, from_stored
from vsa_core.scaling.planner import PlanInput, plan

REQUEST: dict[str, Any] = load_event("stepfunctions/task_plan_scale.json")
DEMO = ArraySpec(arrayId="demo", availabilityZone="us-east-1a", **SPREAD, minControllers=2, maxControllers=8)
NOW = datetime(2026, 11, 2, 17, 5, tzinfo=UTC)
SETTINGS = PlanSettings(health_check_minutes=5, history_retention_days=90, stack_name="vsa-unit")
"""The planner's settings: the template's defaults, the unit stack's name."""


def plan_scale(*args: Any, settings: PlanSettings = SETTINGS, **clients: Any) -> dict[str, Any]:
    """The handler's planner with ``SETTINGS`` unless a test gives others."""
    return handler.plan_scale(*args, settings=settings, **clients)


@pytest.fixture
def registry(registry_table: str) -> ArrayRegistry:
    return ArrayRegistry(registry_table, boto3.client("dynamodb", region_name=REGION))


@pytest.fixture
def autoscaling(aws: None) -> Any:
    return boto3.client("autoscaling", region_name=REGION)


def make_group(autoscaling: Any, desired: int, array_id: str = "demo") -> list[str]:
    """The array's controller group with ``desired`` controllers (moto: all InService at once)."""
    ec2 = boto3.client("ec2", region_name=REGION)
    image = an_image_id(ec2)
    ec2.create_launch_template(
        LaunchTemplateName=f"vsa-{array_id}-controller",
        LaunchTemplateData={"ImageId": image, "InstanceType": "r5b.2xlarge"},
    )
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=f"vsa-{array_id}-controllers",
        LaunchTemplate={"LaunchTemplateName": f"vsa-{array_id}-controller"},
        MinSize=0,
        MaxSize=16,
        DesiredCapacity=desired,
        AvailabilityZones=["us-east-1a"],
        NewInstancesProtectedFromScaleIn=True,
    )
    group = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[f"vsa-{array_id}-controllers"])
    return [i["InstanceId"] for i in group["AutoScalingGroups"][0]["Instances"]]


# what production feeds the planner besides the demand: the simulator's lead and margin
PRODUCTION: dict[str, Any] = {"lead_minutes": 10.0, "scale_in_headroom": 0.9, "sustained_minutes": 5}
# no health check has stored a floor: PlanScale's forecast floor is off, saying so
NO_HISTORY = from_stored(None, NOW, timedelta(minutes=10))


def request(**changes: Any) -> ScaleRequest:
    return ScaleRequest.model_validate({**REQUEST, **changes})


def test_scale_out_from_the_groups_capacity_with_what_the_workflow_needs(registry, autoscaling):
    # Given array "demo" with 2 serving controllers / When its high alarm reports 612,345 IOPS
    registry.create(DEMO)
    make_group(autoscaling, 2)
    decision = plan_scale(request(), registry, autoscaling, NOW)
    # Then the plan is the planner's from the group's count, with what the workflow acts on
    expected = plan(
        PlanInput(DEMO, 612_345.0, 2, now=NOW, in_flight=0, forecast=NO_HISTORY, **PRODUCTION)
    ).as_dict()
    assert {k: decision[k] for k in expected} == expected
    assert (decision["action"], decision["desired_controllers"]) == ("scale-out", 4)
    assert decision["demandSource"] == "alarm"
    assert decision["groupName"] == "vsa-demo-controllers"
    assert decision["scaleField"] == "lastScaleOutAt"
    assert decision["leaver"] is None
    assert (decision["alarmName"], decision["eventId"]) == ("vsa-demo-iops-high", REQUEST["eventId"])


def test_only_the_high_alarms_own_run_scales_out_on_one_minute(registry, autoscaling):
    # Given array "demo" with 3 serving controllers, ReadDemand's minutes steady at what 3 serve
    # and the newest one minute above target (4 at target)
    registry.create(DEMO)
    make_group(autoscaling, 3)
    read = {
        "demandIops": 560_000.0,
        "recentDemand": [480_000.0] * 10,
        "newestMinute": "2026-11-02T17:04:00+00:00",
    }
    runs = {
        "the high alarm": {},
        "the low alarm": {"alarmName": "vsa-demo-iops-low", "alarmKind": "low"},
        "the look-ahead": {"eventId": "lookahead:2026-11-02T17:05:00+00:00"},
    }
    decisions = {
        name: plan_scale(request(demand=read, **changes), registry, autoscaling, NOW)
        for name, changes in runs.items()
    }
    # Then the high alarm's own run scales out; a run anything else started holds, saying why
    assert {n: (d["action"], d["desired_controllers"]) for n, d in decisions.items()} == {
        "the high alarm": ("scale-out", 4),
        "the low alarm": ("hold", 3),
        "the look-ahead": ("hold", 3),
    }
    assert "one minute above target" in decisions["the look-ahead"]["reason"]


def six_serving(registry: ArrayRegistry, autoscaling: Any, registry_table: str) -> list[str]:
    """Array "demo" with 6 serving controllers in slots 0..5 (the newest in the lowest)."""
    registry.create(DEMO)
    instances = sorted(make_group(autoscaling, 6), reverse=True)
    for slot, instance in enumerate(instances):
        boto3.client("dynamodb", region_name=REGION).put_item(
            TableName=registry_table,
            Item={
                "pk": {"S": "ARRAY#demo"},
                "sk": {"S": slot_key(slot)},
                "instanceId": {"S": instance},
                "state": {"S": "serving"},
            },
        )
    return instances


def test_scale_in_names_the_controller_that_leaves(registry, autoscaling, registry_table: str):
    # Given 6 serving controllers in slots 0..5 (the newest in the lowest) and demand that 2 serve
    instances = six_serving(registry, autoscaling, registry_table)
    decision = plan_scale(
        request(alarmName="vsa-demo-iops-low", alarmKind="low", demandIops=200_000.0),
        registry,
        autoscaling,
        NOW,
    )
    # Then one controller leaves, the one in the highest slot, and the scale-in clock is the one to set
    assert (decision["current_controllers"], decision["desired_controllers"]) == (6, 5)
    assert decision["leaver"] == instances[5] == min(instances)
    assert decision["leavers"] == [instances[5]]
    assert decision["scaleField"] == "lastScaleInAt"


def test_a_collapse_names_every_controller_that_leaves(registry, autoscaling, registry_table: str):
    # Given 6 serving controllers in slots 0..5 (the newest in the lowest)
    instances = six_serving(registry, autoscaling, registry_table)
    # When the low alarm fires and GetMetricData shows every recent minute at what 2 serve
    read = {
        "demandIops": 200_000.0,
        "recentDemand": [210_000.0] * 15,
        "newestMinute": "2026-11-02T17:04:00+00:00",
    }
    raw = {**REQUEST, "alarmName": "vsa-demo-iops-low", "alarmKind": "low", "demand": read}
    decision = plan_scale(ScaleRequest.model_validate(raw), registry, autoscaling, NOW)
    # Then it sheds 4 at once, and names the 4 in the highest slots, highest first (the workflow
    # unprotects exactly these, so the group terminates them and no other)
    assert (decision["current_controllers"], decision["desired_controllers"]) == (6, 2)
    assert decision["leavers"] == [instances[5], instances[4], instances[3], instances[2]]
    assert decision["leaver"] == instances[5]
    assert decision["scaleField"] == "lastScaleInAt"


def test_the_scale_in_cooldown_runs_from_the_registry(registry, autoscaling, registry_table: str):
    # Given a scale-in 1 minute ago (the spec's scale-in cooldown is 3 minutes)
    registry.create(DEMO)
    make_group(autoscaling, 6)
    boto3.client("dynamodb", region_name=REGION).update_item(
        TableName=registry_table,
        Key=array_key("demo"),
        UpdateExpression="SET lastScaleInAt = :at",
        ExpressionAttributeValues={":at": {"S": (NOW - timedelta(minutes=1)).isoformat()}},
    )
    decision = plan_scale(request(demandIops=200_000.0), registry, autoscaling, NOW)
    # Then nothing changes yet, and the reason says why
    assert (decision["action"], decision["desired_controllers"]) == ("hold", 6)
    assert "cooldown" in decision["reason"]


def _record(registry_table: str, started: datetime, current: int, desired: int, name: str) -> None:
    """A decision that kept or changed the count from ``current`` to ``desired``."""
    action = "hold" if current == desired else "scale-out" if desired > current else "scale-in"
    answer = {"action": action, "current_controllers": current, "desired_controllers": desired}
    record_decision(registry_table, started.isoformat().replace("+00:00", "Z"), name, answer)


def test_a_scale_in_waits_while_the_recorded_decisions_hold_six_changes_in_the_hour(
    registry, autoscaling, registry_table: str
):
    # Given 6 serving controllers, demand that 2 serve, and six recorded changes of the count in
    # the last hour (the oldest 50 minutes ago), beside holds and a change 61 minutes ago
    six_serving(registry, autoscaling, registry_table)
    _record(registry_table, NOW - timedelta(minutes=61), 5, 6, "older")
    for i, minutes in enumerate((50, 40, 30, 20, 12, 8)):
        _record(registry_table, NOW - timedelta(minutes=minutes), 5 + i % 2, 6 - i % 2, f"run-{i}")
        _record(registry_table, NOW - timedelta(minutes=minutes - 1), 6, 6, f"hold-{i}")
    low = request(alarmName="vsa-demo-iops-low", alarmKind="low", demandIops=200_000.0)
    held = plan_scale(low, registry, autoscaling, NOW)
    # Then the scale-in waits until the oldest of the six has left the hour, and says so
    assert (held["action"], held["desired_controllers"], held["waiting"]) == ("hold", 6, True)
    assert "changed 6 times in the last 60 min" in held["reason"]
    assert "600s left" in held["reason"]
    assert len(held["recent_scalings"]) == 6
    # and once it has left, the scale-in goes ahead (the change 61 minutes ago never counted)
    later_at = NOW + timedelta(minutes=10, seconds=1)
    fresh = {"stateTimestamp": later_at.isoformat()}
    low_later = request(alarmName="vsa-demo-iops-low", alarmKind="low", demandIops=200_000.0, **fresh)
    later = plan_scale(low_later, registry, autoscaling, later_at)
    assert (later["action"], later["desired_controllers"]) == ("scale-in", 5)
    # while a scale-out is never held by it
    high = request(demandIops=1_900_000.0)
    assert plan_scale(high, registry, autoscaling, NOW)["action"] == "scale-out"


def test_unregistered_array_or_missing_group_is_array_not_found(registry, autoscaling):
    with pytest.raises(ArrayNotFoundError, match="not registered"):
        plan_scale(request(), registry, autoscaling, NOW)
    registry.create(DEMO)
    with pytest.raises(ArrayNotFoundError, match="no controller group"):
        plan_scale(request(), registry, autoscaling, NOW)


def test_handler_plans_with_the_clients_and_table_of_its_environment(
    registry: ArrayRegistry, autoscaling: Any, function_env: None, lambda_context: FakeLambdaContext
):
    registry.create(DEMO)
    make_group(autoscaling, 2)
    # an alarm that changed state just now (the handler plans at the real clock's now)
    fresh = {**REQUEST, "stateTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000+0000")}
    payload = json.loads(json.dumps(handler.lambda_handler(fresh, lambda_context)))
    assert payload["desired_controllers"] == 4
    assert payload["groupName"] == "vsa-demo-controllers"


def test_handler_error_for_an_unregistered_array_is_named_for_the_workflow(
    registry_table: str, function_env: None, lambda_context: FakeLambdaContext
):
    with pytest.raises(ArrayNotFoundError) as raised:
        handler.lambda_handler(dict(REQUEST), lambda_context)
    assert type(raised.value).__name__ == "ArrayNotFoundError"


def test_the_demand_read_by_the_workflow_wins_over_the_alarms_datapoint(registry, autoscaling):
    # Given the alarm saw 612,345 IOPS, but GetMetricData shows a ramp now at 900,000
    registry.create(DEMO)
    make_group(autoscaling, 2)
    read = {
        "demandIops": 900_000.0,
        "recentDemand": [300_000.0, 400_000.0, 500_000.0, 600_000.0, 700_000.0, 800_000.0],
        "newestMinute": "2026-11-02T17:04:00+00:00",
        "source": "AWS/EBS",
    }
    decision = plan_scale(request(demand=read), registry, autoscaling, NOW)
    # Then the plan is made from the read demand and its trend (100,000 IOPS/min for 10 min)
    expected = plan(
        PlanInput(
            DEMO, 900_000.0, 2, now=NOW, recent_demand=read["recentDemand"], forecast=NO_HISTORY, **PRODUCTION
        )
    ).as_dict()
    assert {k: decision[k] for k in expected} == expected
    assert decision["forecast_iops"] == pytest.approx(1_900_000.0)
    assert decision["desired_controllers"] == 8  # ceil(1.9M / 182k) = 11, clamped to max 8
    assert (decision["demandSource"], decision["alarmDemandIops"]) == ("AWS/EBS", 612_345.0)
    # And the decision names the minute whose demand it took
    assert decision["demandMinute"] == "2026-11-02T17:04:00+00:00"


def test_without_any_datapoint_read_the_alarms_datapoint_is_the_demand(registry, autoscaling):
    registry.create(DEMO)
    make_group(autoscaling, 2)
    empty = {"demandIops": 0.0, "recentDemand": [0.0] * 15, "newestMinute": None}
    decision = plan_scale(request(demand=empty), registry, autoscaling, NOW)
    assert (decision["demand_iops"], decision["demandSource"]) == (612_345.0, "alarm")
    assert decision["recent_samples"] == 0
    assert decision["demandMinute"] is None  # the alarm's datapoint, not a minute read


@pytest.mark.parametrize(
    ("kind", "age", "fresh"),
    [
        ("high", timedelta(minutes=5), True),  # rules.MAX_DATA_AGE, one bound for every source
        ("high", timedelta(minutes=5, seconds=1), False),
        ("low", timedelta(minutes=5), True),
        ("low", timedelta(minutes=8), False),
        ("high", timedelta(days=1), False),
    ],
)
def test_the_alarms_datapoint_stands_for_the_demand_only_while_fresh(
    registry, autoscaling, kind: str, age: timedelta, fresh: bool
):
    # Given GetMetricData found no datapoint, and the alarm's state change is `age` old
    registry.create(DEMO)
    make_group(autoscaling, 2)
    empty = {"demandIops": 0.0, "recentDemand": [0.0] * 15, "newestMinute": None}
    stamp = (NOW - age).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "+0000"
    changes = {"alarmName": f"vsa-demo-iops-{kind}", "alarmKind": kind, "stateTimestamp": stamp}
    # When planned
    decision = plan_scale(request(demand=empty, **changes), registry, autoscaling, NOW)
    if fresh:
        # Then a fresh datapoint is the demand (612,345 IOPS: scale out to 4)
        assert (decision["demandSource"], decision["desired_controllers"]) == ("alarm", 4)
    else:
        # Then no decision on stale data: hold at the group's count, say why, re-arm the alarm
        # (a breach that still holds comes back as a fresh state change)
        assert (decision["action"], decision["desired_controllers"]) == ("hold", 2)
        assert decision["demandSource"] == "stale"
        assert decision["reason"].startswith("stale: no datapoint in the last 18 min")
        assert (decision["waiting"], decision["rearmSeconds"], decision["leaver"]) == (True, 60, None)
        assert decision["scaleField"] == "lastHoldAt"


def test_a_day_old_alarm_does_not_scale_an_idle_array_out(registry, autoscaling):
    # Given an idle array (GetMetricData: nothing) and a high alarm's event from a day ago
    registry.create(DEMO)
    make_group(autoscaling, 2)
    empty = {"demandIops": 0.0, "recentDemand": [0.0] * 15, "newestMinute": None}
    old = request(demand=empty, stateTimestamp="2026-11-01T17:04:40.989+0000")
    # When planned / Then the group keeps its 2 controllers
    decision = plan_scale(old, registry, autoscaling, NOW)
    assert (decision["action"], decision["current_controllers"], decision["desired_controllers"]) == (
        "hold",
        2,
        2,
    )


def test_the_decision_carries_its_expiry_after_the_retention(registry, autoscaling):
    # Given array "demo" and its group
    registry.create(DEMO)
    make_group(autoscaling, 2)
    # When PlanScale decides (the default retention: 90 days) / Then the record the workflow
    # writes carries expiresAt, the registry's TTL attribute, 90 days on
    decision = plan_scale(request(), registry, autoscaling, NOW)
    assert decision["expiresAt"] == int((NOW + timedelta(days=90)).timestamp())
    # And with HistoryRetentionDays = 7, a week on; a stale-data hold carries it too
    week = SETTINGS.model_copy(update={"history_retention_days": 7})
    assert plan_scale(request(), registry, autoscaling, NOW, settings=week)["expiresAt"] == int(
        (NOW + timedelta(days=7)).timestamp()
    )
    stale = plan_scale(request(), registry, autoscaling, NOW + timedelta(days=1), settings=week)
    assert stale["demandSource"] == "stale"
    assert stale["expiresAt"] == int((NOW + timedelta(days=8)).timestamp())


def test_an_alarm_on_missing_data_without_any_read_holds_and_says_why(registry, autoscaling):
    # Given the low alarm went to ALARM on missing data (no datapoint of its own) at 4
    # controllers, and GetMetricData finds nothing either
    registry.create(DEMO)
    make_group(autoscaling, 4)
    empty = {"demandIops": 0.0, "recentDemand": [], "newestMinute": None}
    raw = {**REQUEST, "alarmName": "vsa-demo-iops-low", "alarmKind": "low", "demand": empty}
    raw.pop("demandIops")
    stamp = (NOW - timedelta(seconds=20)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "+0000"
    decision = plan_scale(
        ScaleRequest.model_validate({**raw, "stateTimestamp": stamp}), registry, autoscaling, NOW
    )
    # Then it holds at 4 on no data, says so, and re-arms after the base pause (looks again)
    assert (decision["action"], decision["desired_controllers"]) == ("hold", 4)
    assert decision["demandSource"] == "stale"
    assert "missing data" in decision["reason"]
    assert decision["alarmDemandIops"] is None
    assert decision["rearmSeconds"] == REQUEST["rearmSeconds"]


def test_a_hold_on_the_recent_peak_rearms_its_alarm(registry, autoscaling):
    # Given 4 controllers after a surge, demand now 100,000 IOPS but 700,000 three minutes ago
    registry.create(DEMO)
    make_group(autoscaling, 4)
    recent = [700_000.0, 700_000.0, 100_000.0, 100_000.0]
    read = {"demandIops": 100_000.0, "recentDemand": recent, "newestMinute": "2026-11-02T17:04:00+00:00"}
    changes = {"alarmName": "vsa-demo-iops-low", "alarmKind": "low", "demandIops": 100_000.0}
    # When the low alarm's run plans
    decision = plan_scale(request(demand=read, **changes), registry, autoscaling, NOW)
    # Then it holds on the recent peak, and still re-arms its alarm after the base pause: the
    # next evaluation, once the peak has left the window, scales in (before: no re-arm, stuck at 4)
    assert decision["action"] == "hold"
    assert "recent peak" in decision["reason"]
    assert decision["rearmSeconds"] == REQUEST["rearmSeconds"]


def io2_volume(iops: int, tags: dict[str, str] | None = None) -> str:
    """An io2 Multi-Attach volume in moto with ``iops`` provisioned."""
    ec2 = boto3.client("ec2", region_name=REGION)
    extra: dict[str, Any] = {}
    if tags:
        extra["TagSpecifications"] = [
            {"ResourceType": "volume", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ]
    volume = ec2.create_volume(
        AvailabilityZone="us-east-1a", Size=100, VolumeType="io2", Iops=iops, MultiAttachEnabled=True, **extra
    )
    return str(volume["VolumeId"])


def test_the_plan_reads_the_volumes_provisioned_iops_and_stops_where_they_do(registry, autoscaling):
    # Given array "demo": an existing io2 volume of 32,000 IOPS and one it created (16,000 IOPS),
    # 48,000 IOPS in all, with r5b.24xlarge controllers (260,000 IOPS each), 1 running
    existing = io2_volume(32_000)
    io2_volume(16_000, {"vsa:array": "demo", "vsa:owned": "true", "Name": "vsa-demo-data2"})
    spec = ArraySpec.model_validate(
        {
            "arrayId": "demo",
            "availabilityZone": "us-east-1a",
            "volumes": [{"volumeId": existing}, {"name": "data2", "sizeGiB": 100, "iops": 16_000}],
            "controllers": {"instanceType": "r5b.24xlarge", "imageId": "ami-0a1b2c3d4e5f60001"},
            "minControllers": 1,
            "maxControllers": 8,
        }
    )
    registry.create(spec)
    make_group(autoscaling, 1)
    # When the high alarm reports 612,345 IOPS (what 4 controllers would serve at target)
    decision = plan_scale(request(), registry, autoscaling, NOW, boto3.client("ec2", region_name=REGION))
    # Then the plan knows the volumes give 48,000 IOPS, adds no controller, and says what to raise
    assert decision["volume_iops"] == 48_000
    assert decision["volume_controllers"] == 1
    assert (decision["action"], decision["desired_controllers"]) == ("hold", 1)
    assert decision["volume_bound"] is True
    assert "volume-bound: the volumes provide 48,000 IOPS in total" in decision["reason"]
    assert "raise the volumes' provisioned IOPS" in decision["reason"]


def test_a_volume_not_found_leaves_the_volume_cap_off(registry, autoscaling):
    # Given the demo spec, whose volume moto does not have
    registry.create(DEMO)
    make_group(autoscaling, 2)
    decision = plan_scale(request(), registry, autoscaling, NOW, boto3.client("ec2", region_name=REGION))
    # Then the planner plans on the controllers alone (a partial sum would cap it wrongly)
    assert decision["volume_iops"] is None
    assert decision["volume_bound"] is False


def test_a_stale_read_holds_says_how_old_counts_itself_and_rearms(registry, autoscaling):
    # Given GetMetricData's newest datapoint is 12 minutes old and the alarm's state change a day old
    registry.create(DEMO)
    make_group(autoscaling, 2)
    old = {
        "demandIops": 900_000.0,
        "recentDemand": [],
        "newestMinute": (NOW - timedelta(minutes=12)).isoformat(),
    }
    stamp = (NOW - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S.000+0000")
    cloudwatch = boto3.client("cloudwatch", region_name=REGION)
    # When planned
    decision = plan_scale(
        request(demand=old, stateTimestamp=stamp), registry, autoscaling, NOW, None, cloudwatch
    )
    # Then it holds at the group's count (900,000 IOPS would scale out), says why, and re-arms
    assert (decision["action"], decision["desired_controllers"], decision["demandSource"]) == (
        "hold",
        2,
        "stale",
    )
    assert decision["reason"].startswith("stale: newest datapoint 12 min old")
    assert (decision["waiting"], decision["rearmSeconds"]) == (True, 60)
    # And the hold is counted where the scaling-stale-data alarm watches
    [metric] = cloudwatch.list_metrics(Namespace="VSA/Scaling")["Metrics"]
    assert metric["MetricName"] == "StaleDecisions"
    assert metric["Dimensions"] == [{"Name": "Deployment", "Value": SETTINGS.stack_name}]


def test_a_recent_read_is_decided_on(registry, autoscaling):
    registry.create(DEMO)
    make_group(autoscaling, 2)
    recent = {
        "demandIops": 900_000.0,
        "recentDemand": [],
        "newestMinute": (NOW - timedelta(minutes=4)).isoformat(),
    }
    decision = plan_scale(request(demand=recent), registry, autoscaling, NOW)
    assert (decision["action"], decision["demandSource"]) == ("scale-out", "AWS/EBS")


RECURRING = Floor(
    6, 1_000_000.0, "hourly", "forecast floor 6: 1,000,000 IOPS recurred in the next 10 min", 10
)
FRESH_READ = {
    "demandIops": 100_000.0,
    "recentDemand": [100_000.0] * 5,
    "newestMinute": "2026-11-02T17:04:00+00:00",
}


def _store(registry_table: str, computed_at: datetime) -> None:
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    assert aws_forecast.store_floor(dynamodb, registry_table, "demo", RECURRING, computed_at)


def test_a_fresh_stored_floor_scales_out_to_it_without_reading_history(registry, registry_table, autoscaling):
    # Given a floor of 6 the health check stored 4 minutes ago, and demand 2 controllers serve
    registry.create(DEMO)
    make_group(autoscaling, 2)
    _store(registry_table, NOW - timedelta(minutes=4))
    # When PlanScale plans (no CloudWatch client given: a history read would need one)
    decision = plan_scale(request(demand=FRESH_READ), registry, autoscaling, NOW)
    # Then the floor, not the demand, set the count
    assert (decision["action"], decision["desired_controllers"]) == ("scale-out", 6)
    assert decision["floor_set"] is True
    assert decision["forecast_floor"] == 6
    assert "the floor set the count" in decision["reason"]


def test_a_stale_stored_floor_is_ignored_and_says_why(registry, registry_table, autoscaling):
    # Given the same floor, stored 11 minutes ago: more than two 5-minute health-check periods
    registry.create(DEMO)
    make_group(autoscaling, 2)
    _store(registry_table, NOW - timedelta(minutes=11))
    decision = plan_scale(request(demand=FRESH_READ), registry, autoscaling, NOW)
    # Then the reactive planner decides alone, and the decision says why the floor was off
    assert (decision["action"], decision["desired_controllers"]) == ("hold", 2)
    assert decision["forecast_floor"] == 0
    assert "older than 10 min (2 health-check periods)" in decision["forecast_reason"]
    assert decision["floor_set"] is False


def test_without_a_stored_floor_the_forecast_is_off_and_says_so(registry, autoscaling):
    registry.create(DEMO)
    make_group(autoscaling, 2)
    decision = plan_scale(request(demand=FRESH_READ), registry, autoscaling, NOW)
    assert (decision["action"], decision["forecast_floor"]) == ("hold", 0)
    assert decision["forecast_reason"].startswith("forecast off: no floor stored yet")


def test_with_one_owner_per_volume_the_plan_counts_each_volume_at_its_owners_iops_and_one_controller_each(
    registry, autoscaling
):
    # Given array "demo" with fencing (one owner controller per volume) on two io2 volumes of
    # 256,000 IOPS each, with r5b.8xlarge controllers (86,667 IOPS each), 2 running
    volumes = [io2_volume(256_000), io2_volume(256_000)]
    spec = ArraySpec.model_validate(
        {
            "arrayId": "demo",
            "availabilityZone": "us-east-1a",
            "volumes": [{"volumeId": v} for v in volumes],
            "controllers": {"instanceType": "r5b.8xlarge", "imageId": "ami-0a1b2c3d4e5f60001"},
            "minControllers": 2,
            "maxControllers": 8,
            "fencing": "reservations",
        }
    )
    registry.create(spec)
    make_group(autoscaling, 2)
    # When the high alarm reports 612,345 IOPS (what 8 such controllers would serve at 70%)
    decision = plan_scale(request(), registry, autoscaling, NOW, boto3.client("ec2", region_name=REGION))
    # Then each volume counts at most its owner's 86,667 IOPS (not its 256,000), the two volumes
    # keep at most two controllers busy, and the plan says so instead of adding standbys
    assert decision["volume_iops"] == 2 * 86_667
    assert (decision["action"], decision["desired_controllers"]) == ("hold", 2)
    assert "owner-bound: with one owner controller per volume" in decision["reason"]
