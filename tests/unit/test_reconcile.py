"""reconcile: thresholds, heartbeats, the desired resources and the diff (examples + properties)."""

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.specs import BASE
from vsa_core.arrays import plan
from vsa_core.arrays.plan import (
    BOOTSTRAP_HEARTBEAT_SECONDS,
    DRAIN_HEARTBEAT_SECONDS,
    Change,
    Resources,
    alarm_thresholds,
    desired_resources,
    diff,
)
from vsa_core.arrays.spec import ARRAY_TAG, DEPLOYMENT_TAG, MAX_HOSTS, ArraySpec

ROLE = "arn:aws:iam::123456789012:role/vsa-scheduler"
VOLUMES = ("vol-0a1b2c3d4e5f60001", "vol-0a1b2c3d4e5f60002")


def make_spec(**overrides: Any) -> ArraySpec:
    document = {"arrayId": "demo", "availabilityZone": "us-east-1a", "minControllers": 2, "maxControllers": 8}
    return ArraySpec.model_validate({**BASE, **document, **overrides})


def resources(spec: ArraySpec, desired: int = 2, volume_ids: tuple[str, ...] = VOLUMES) -> Resources:
    return desired_resources(
        spec,
        desired,
        account_id="123456789012",
        region="us-east-1",
        launch_template_id_of_spec=None,
        volume_ids=volume_ids,
        scheduler_role_arn=ROLE,
    )


@st.composite
def specs(draw: st.DrawFn) -> ArraySpec:
    low = draw(st.integers(1, 16))
    high = draw(st.integers(low, 16))
    volumes = draw(st.integers(1, 5))
    hosts = draw(st.integers(0, MAX_HOSTS))
    return make_spec(
        minControllers=low,
        maxControllers=high,
        perControllerIops=draw(st.integers(1_000, 500_000)),
        targetUtilisation=draw(st.floats(0.05, 1.0)),
        volumes=[{"volumeId": f"vol-0a1b2c3d4e5f6{i:04d}"} for i in range(volumes)],
        hosts=[{"instanceId": f"i-0a1b2c3d4e5f{i:05d}"} for i in range(hosts)],
        backup=draw(st.sampled_from([None, {"schedule": "rate(1 day)"}])),
    )


# --- examples --------------------------------------------------------------------------------------


def test_thresholds_at_three_controllers() -> None:
    high, low = alarm_thresholds(make_spec(perControllerIops=100_000, targetUtilisation=0.5), 3)
    assert high == 150_000
    assert low == pytest.approx(2 * 50_000 * 0.9)


def test_low_threshold_is_zero_at_the_minimum() -> None:
    assert alarm_thresholds(make_spec(), 2)[1] == 0.0


def test_desired_count_is_held_to_min_and_max() -> None:
    spec = make_spec()
    assert resources(spec, 0).group == resources(spec, 2).group
    twelve = resources(spec, 12).group
    assert twelve is not None
    assert twelve["DesiredCapacity"] == 8


def test_alarm_metric_math_sums_read_and_write_ops_of_every_volume() -> None:
    alarm = resources(make_spec()).alarm_high
    assert alarm is not None
    assert [m["Id"] for m in alarm["Metrics"]] == ["r0", "w0", "r1", "w1", "iops"]
    expression = alarm["Metrics"][-1]
    # a volume without datapoints (not attached: EBS publishes none) counts as zero, not a blank sum
    assert expression["Expression"] == "SUM(FILL(FILL(METRICS(), REPEAT), 0)) / PERIOD(r0)"
    assert expression["Label"] == "ArrayIops"
    assert [m["ReturnData"] for m in alarm["Metrics"]] == [False, False, False, False, True]
    stat = alarm["Metrics"][1]["MetricStat"]
    assert stat["Metric"]["MetricName"] == "VolumeWriteOps"
    assert stat["Metric"]["Dimensions"] == [{"Name": "VolumeId", "Value": VOLUMES[0]}]
    assert (stat["Period"], stat["Stat"]) == (60, "Sum")
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (2, 2)
    assert (alarm["ComparisonOperator"], alarm["TreatMissingData"]) == (
        "GreaterThanThreshold",
        "notBreaching",
    )
    low = resources(make_spec(), desired=3).alarm_low
    assert low is not None
    assert (low["EvaluationPeriods"], low["DatapointsToAlarm"]) == (5, 5)
    # an idle array (no datapoints) shrinks...
    assert (low["ComparisonOperator"], low["TreatMissingData"]) == ("LessThanThreshold", "breaching")
    # ...until minControllers, where the low alarm can never have anything to do
    at_min = resources(make_spec(), desired=2).alarm_low
    assert at_min is not None
    assert (at_min["Threshold"], at_min["TreatMissingData"]) == (0, "notBreaching")


def test_launch_template_from_instance_settings() -> None:
    spec = make_spec(
        controllers={
            **BASE["controllers"],
            "subnetId": "subnet-0a1b2c3d4e5f60001",
            "securityGroupIds": ["sg-00000002", "sg-00000001"],
            "instanceProfile": "vsa-controller",
        }
    )
    desired = resources(spec)
    assert desired.launch_template is not None
    data = desired.launch_template["LaunchTemplateData"]
    assert data["NetworkInterfaces"] == [
        {"DeviceIndex": 0, "SubnetId": "subnet-0a1b2c3d4e5f60001", "Groups": ["sg-00000001", "sg-00000002"]}
    ]
    assert data["IamInstanceProfile"] == {"Name": "vsa-controller"}
    assert data["MetadataOptions"] == {"HttpTokens": "required"}
    assert desired.group is not None
    assert desired.group["VPCZoneIdentifier"] == "subnet-0a1b2c3d4e5f60001"
    assert "AvailabilityZones" not in desired.group


def test_a_referenced_launch_template_is_not_created() -> None:
    spec = make_spec(
        controllers={"launchTemplate": {"launchTemplateName": "mine", "version": "3"}},
        perControllerIops=260_000,
    )
    desired = resources(spec)
    assert desired.launch_template is None
    assert desired.group is not None
    assert desired.group["LaunchTemplate"] == {"LaunchTemplateName": "mine", "Version": "3"}


def test_hooks() -> None:
    desired = resources(make_spec(hosts=[{"instanceId": "i-0a1b2c3d4e5f60001"}]))
    assert desired.launch_hook is not None
    assert desired.terminate_hook is not None
    assert desired.launch_hook["HeartbeatTimeout"] == BOOTSTRAP_HEARTBEAT_SECONDS  # whatever the size
    assert desired.launch_hook["DefaultResult"] == "ABANDON"
    assert json.loads(desired.launch_hook["NotificationMetadata"]) == {"arrayId": "demo"}
    assert desired.terminate_hook["DefaultResult"] == "CONTINUE"
    assert desired.terminate_hook["HeartbeatTimeout"] == DRAIN_HEARTBEAT_SECONDS
    assert desired.terminate_hook["LifecycleTransition"] == "autoscaling:EC2_INSTANCE_TERMINATING"


def test_backup_schedule_puts_a_backup_requested_event_on_the_deployments_own_bus() -> None:
    # the deployment's bus, whose policy lets only the scheduler role put events: never the
    # default bus, where any account principal with events:PutEvents could forge the event
    schedule = desired_resources(
        make_spec(backup={"schedule": "cron(0 3 * * ? *)", "mode": "crash"}),
        2,
        account_id="123456789012",
        region="us-east-1",
        launch_template_id_of_spec=None,
        volume_ids=VOLUMES,
        scheduler_role_arn=ROLE,
        event_bus="prod-control-plane",
    ).schedule
    assert schedule is not None
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert schedule["Target"]["Arn"] == "arn:aws:scheduler:::aws-sdk:eventbridge:putEvents"
    assert schedule["Target"]["RoleArn"] == ROLE
    entry = json.loads(schedule["Target"]["Input"])["Entries"][0]
    assert (entry["Source"], entry["DetailType"], entry["EventBusName"]) == (
        "vsa.control-plane",
        "Backup Requested",
        "prod-control-plane",
    )
    assert json.loads(entry["Detail"]) == {
        "arrayId": "demo",
        "mode": "crash",
        "retention": 7,
        "freezeTimeoutSeconds": 10,
        "trigger": "schedule",
    }
    assert resources(make_spec()).schedule is None


def test_diff_reports_only_the_fields_that_differ() -> None:
    before = resources(make_spec())
    after = resources(make_spec(maxControllers=10))
    changes = plan.pending(diff(after, before))
    assert changes == [Change("group/vsa-demo-controllers", "update", (("MaxSize", 8, 10),))]


def test_diff_creates_what_is_absent_and_deletes_a_dropped_schedule() -> None:
    desired = resources(make_spec(backup={"schedule": "rate(1 day)"}))
    actions = {c.resource: c.action for c in diff(desired, Resources(array_id="demo"))}
    assert set(actions.values()) == {"create"}
    assert "schedule/vsa-demo-backup" in actions
    deleted = [c for c in diff(resources(make_spec()), desired) if c.action == "delete"]
    assert [c.resource for c in deleted] == ["schedule/vsa-demo-backup"]


# --- properties ------------------------------------------------------------------------------------


@given(specs(), st.integers(1, 16))
def test_low_is_below_high(spec: ArraySpec, desired: int) -> None:
    high, low = alarm_thresholds(spec, desired)
    assert 0 <= low < high


@given(specs(), st.integers(1, 15))
def test_thresholds_are_monotonic_in_the_controller_count(spec: ArraySpec, desired: int) -> None:
    high, low = alarm_thresholds(spec, desired)
    next_high, next_low = alarm_thresholds(spec, desired + 1)
    assert next_high >= high
    assert next_low >= low


@given(specs())
def test_heartbeats_are_within_what_auto_scaling_accepts(spec: ArraySpec) -> None:
    desired = resources(spec, volume_ids=spec.existing_volume_ids)
    for hook in (desired.launch_hook, desired.terminate_hook):
        assert hook is not None
        assert 30 <= hook["HeartbeatTimeout"] <= 7200


@given(specs(), st.integers(0, 32))
def test_the_group_never_exceeds_16_or_its_bounds(spec: ArraySpec, desired: int) -> None:
    group = resources(spec, desired, spec.existing_volume_ids).group
    assert group is not None
    assert group["MinSize"] <= group["DesiredCapacity"] <= group["MaxSize"] <= 16


@given(specs(), st.integers(0, 16))
def test_diff_of_desired_against_itself_is_empty(spec: ArraySpec, desired: int) -> None:
    same = resources(spec, desired, spec.existing_volume_ids)
    assert plan.pending(diff(same, same)) == []
    assert all(c.fields == () for c in diff(same, same))


@given(specs(), st.integers(0, 16))
def test_every_taggable_created_resource_carries_the_array_tag(spec: ArraySpec, desired: int) -> None:
    # Schedules take no tags (Scheduler tags only schedule groups): the id is in the name and the event.
    d = resources(spec, desired, spec.existing_volume_ids)
    tag = {"Key": ARRAY_TAG, "Value": spec.array_id}
    for alarm in (d.alarm_high, d.alarm_low):
        assert alarm is not None
        assert tag in alarm["Tags"]
    assert d.group is not None
    assert {(t["Key"], t["Value"]) for t in d.group["Tags"]} == {
        (ARRAY_TAG, spec.array_id),
        (DEPLOYMENT_TAG, "vsa"),
    }
    assert d.launch_template is not None
    template = d.launch_template
    for tag_spec in (*template["TagSpecifications"], *template["LaunchTemplateData"]["TagSpecifications"]):
        assert tag in tag_spec["Tags"]
    if d.schedule is not None:
        assert spec.array_id in d.schedule["Name"]
        assert spec.array_id in d.schedule["Target"]["Input"]


@given(st.integers(4, 100), st.integers(1, 16))
def test_owned_volumes_are_tagged_owned(size: int, desired: int) -> None:
    spec = make_spec(volumes=[{"name": "data", "sizeGiB": size, "iops": 100}])
    params = resources(spec, desired, ("vol-0a1b2c3d4e5f60009",)).volumes["data"]
    tags = params["TagSpecifications"][0]["Tags"]
    assert {"Key": ARRAY_TAG, "Value": "demo"} in tags
    assert {"Key": "vsa:owned", "Value": "true"} in tags
    assert (params["VolumeType"], params["MultiAttachEnabled"]) == ("io2", True)
