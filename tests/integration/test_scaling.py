"""Scaling end to end on the local cloud: an alarm state change → EventBridge → on_iops_alarm →
ScaleArray (scaling lock, plan, SetDesiredCapacity, alarm thresholds, decision) → the group.

Arrays are declared through the API, as an operator would; the controller group's bootstrap
hook holds new controllers in Pending:Wait until ``settle`` lets them in (issue #6's workflow).
"""

import itertools
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.integration.arrays_world import (
    alarms_of,
    control,
    group_of,
    owned_volumes,
    put_new,
    settle,
    spec_for,
)
from tests.integration.conftest import (
    Api,
    executions_of,
    fire_alarm,
    function_logs,
    recent_stamp,
    wait_for_execution,
)
from vsa_core.alarm_tuning import SCALE_IN_HYSTERESIS
from vsa_core.scaling import forecast


def _apply(api: Api, array_id: str, spec: dict[str, Any]) -> None:
    put_new(api, spec)
    settle(array_id)


def _spec_item(stack_outputs: dict[str, str], array_id: str) -> dict[str, Any]:
    item = boto3.client("dynamodb").get_item(
        TableName=stack_outputs["RegistryTableName"],
        Key={"pk": {"S": f"ARRAY#{array_id}"}, "sk": {"S": "SPEC"}},
        ConsistentRead=True,
    )["Item"]
    return dict(item)


def test_high_alarm_sets_the_groups_capacity_and_moves_the_thresholds(
    stack_outputs, api, world, arrays, scripted_alarms
):
    # Given an array serving with its minimum of 2 controllers
    array_id = arrays()
    scripted_alarms(array_id)  # the test plays the array's alarms
    _apply(api, array_id, spec_for(array_id, world, minControllers=2, maxControllers=8))
    # When its high alarm fires at 61,234 IOPS
    name = fire_alarm(array_id, 61_234.0, recent_stamp())
    execution = wait_for_execution(stack_outputs["ScaleArrayStateMachineArn"], name)
    # Then the group wants ceil(61,234 / (26,000 x 0.7)) = 4 controllers
    assert execution["status"] == "SUCCEEDED", execution
    group = group_of(array_id)
    assert group is not None
    assert group["DesiredCapacity"] == 4
    assert len(group["Instances"]) == 4
    # And the high alarm now fires only above what 4 controllers serve; the low one below 3
    alarms = {
        a["AlarmName"]: a["Threshold"]
        for a in boto3.client("cloudwatch").describe_alarms(AlarmNamePrefix=f"vsa-{array_id}-")[
            "MetricAlarms"
        ]
    }
    assert alarms[f"vsa-{array_id}-iops-high"] == 4 * 26_000 * 0.7
    assert alarms[f"vsa-{array_id}-iops-low"] == 3 * 26_000 * 0.7 * SCALE_IN_HYSTERESIS
    # And the registry has the decision, the count, the scale-out clock, and no lock left
    item = _spec_item(stack_outputs, array_id)
    assert item["desiredControllers"] == {"N": "4"}
    assert "lastScaleOutAt" in item
    assert "scalingLock" not in item


def test_a_burst_of_100_alarm_events_scales_once_one_operation_at_a_time(
    stack_outputs, api, world, arrays, scripted_alarms
):
    # Given an array at 2 controllers
    array_id = arrays()
    scripted_alarms(array_id)  # the test plays the array's alarms
    _apply(api, array_id, spec_for(array_id, world, minControllers=2, maxControllers=8))
    # When 100 distinct alarm state changes arrive at once (a storm)
    names = [fire_alarm(array_id, 61_234.0, recent_stamp(60 * m + s)) for m, s in (
        divmod(i, 60) for i in range(100))]  # fmt: skip
    executions = [wait_for_execution(stack_outputs["ScaleArrayStateMachineArn"], n) for n in names]
    # Then every run ended cleanly, exactly one scaled, and it asked for 4, not 4 x 100
    assert {e["status"] for e in executions} == {"SUCCEEDED"}
    outputs = [json.loads(e["output"]) for e in executions]
    scale_outs = [o for o in outputs if o["action"] == "scale-out"]
    assert [o["desired_controllers"] for o in scale_outs] == [4]
    # The array's own alarms keep evaluating meanwhile, as on AWS: its volumes carry no IO (no
    # EBS datapoints), so under a slow machine the low alarm may fire and scale in one at a time
    # while the burst drains. Whatever ran, no run ever wanted more than the burst's 4
    everything = _executions_of(stack_outputs, array_id)
    wanted = [o.get("desired_controllers") for o in everything.values() if o.get("action") == "scale-out"]
    assert wanted == [4], wanted
    group = group_of(array_id)
    assert group is not None
    assert group["DesiredCapacity"] <= 4
    # And no two runs of this array (the burst's and any alarm's) ever held the lock at once
    sfn = boto3.client("stepfunctions")
    held = []
    for arn in everything:
        history = sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
        entered = {
            e["stateEnteredEventDetails"]["name"]: e["timestamp"]
            for e in history
            if e["type"].endswith("StateEntered")
        }
        if "ReadDemand" in entered:  # it took the lock
            released = entered.get("ReleaseLock") or entered.get("ReleaseLockOnFailure")
            assert released is not None, f"{arn} took the lock and never released it"
            held.append((entered["ReadDemand"], released, arn))
    held.sort()
    overlaps = [(a, b) for a, b in itertools.pairwise(held) if b[0] < a[1]]
    assert overlaps == [], overlaps


def _executions_of(stack_outputs: dict[str, str], array_id: str) -> dict[str, dict[str, Any]]:
    """Every finished ScaleArray execution of ``array_id`` (named ``scale-<array>-<hash>``): its
    output by execution ARN."""
    sfn = boto3.client("stepfunctions")
    found: dict[str, dict[str, Any]] = {}
    pages = sfn.get_paginator("list_executions").paginate(
        stateMachineArn=stack_outputs["ScaleArrayStateMachineArn"]
    )
    for page in pages:
        for execution in page["executions"]:
            if execution["name"].startswith(f"scale-{array_id}-") and execution["status"] == "SUCCEEDED":
                described = sfn.describe_execution(executionArn=execution["executionArn"])
                found[execution["executionArn"]] = json.loads(described["output"])
    return found


def test_low_alarm_removes_one_chosen_controller_never_below_demand_or_min(
    stack_outputs, api, world, arrays, scripted_alarms
):
    # Given an array scaled to 3 serving controllers, cooldowns off
    array_id = arrays()
    scripted_alarms(array_id)  # the test plays the array's alarms
    spec = spec_for(
        array_id,
        world,
        minControllers=2,
        maxControllers=8,
        scaleOutCooldownSeconds=0,
        scaleInCooldownSeconds=0,
    )
    _apply(api, array_id, spec)
    wait_for_execution(
        stack_outputs["ScaleArrayStateMachineArn"],
        fire_alarm(array_id, 45_000.0, recent_stamp()),
    )
    settle(array_id)
    assert group_of(array_id)["DesiredCapacity"] == 3  # type: ignore[index]
    # When demand falls to what 1 controller serves
    execution = wait_for_execution(
        stack_outputs["ScaleArrayStateMachineArn"],
        fire_alarm(array_id, 10_000.0, recent_stamp(), "low"),
    )
    # Then one controller leaves (3 -> 2): unprotected first, so the group removes that one
    decision = json.loads(execution["output"])
    assert (decision["action"], decision["desired_controllers"]) == ("scale-in", 2)
    group = group_of(array_id)
    assert group is not None
    assert group["DesiredCapacity"] == 2
    leaving = [i for i in group["Instances"] if i["InstanceId"] == decision["leaver"]]
    assert leaving == [] or leaving[0]["LifecycleState"].startswith("Terminating")
    # And at the minimum, a further low alarm holds
    settle_drains(array_id)
    execution = wait_for_execution(
        stack_outputs["ScaleArrayStateMachineArn"],
        fire_alarm(array_id, 0.0, recent_stamp(), "low"),
    )
    assert json.loads(execution["output"])["desired_controllers"] == 2


def settle_drains(array_id: str) -> None:
    """Act as the drain workflow (issue #6) would: let every draining controller go."""
    autoscaling = boto3.client("autoscaling")
    group = group_of(array_id)
    for instance in group["Instances"] if group else []:
        if instance["LifecycleState"] == "Terminating:Wait":
            try:
                autoscaling.complete_lifecycle_action(
                    AutoScalingGroupName=f"vsa-{array_id}-controllers",
                    LifecycleHookName=f"vsa-{array_id}-drain",
                    InstanceId=instance["InstanceId"],
                    LifecycleActionResult="CONTINUE",
                )
            except ClientError as error:
                # the deployed DrainController completed it first (it can, under load)
                if "No active Lifecycle Action" not in str(error):
                    raise
    deadline = time.monotonic() + 30
    while any(
        i["LifecycleState"].startswith("Terminating") for i in (group_of(array_id) or {}).get("Instances", [])
    ):
        assert time.monotonic() < deadline, "a drained controller did not leave"
        time.sleep(0.5)


def test_capacity_never_goes_above_16(stack_outputs, api, world, arrays, scripted_alarms):
    array_id = arrays()
    scripted_alarms(array_id)  # the test plays the array's alarms
    # three volumes: 300,000 provisioned IOPS, which 17 controllers could use (not the bound here)
    volumes = [{"volumeId": world.volume()} for _ in range(3)]
    _apply(api, array_id, spec_for(array_id, world, volumes=volumes, minControllers=2, maxControllers=16))
    # The group keeps what ScaleArray asks without launching it (a suspended Launch, as on AWS):
    # this test is about the decision and the group's desired capacity, and sixteen bootstraps
    # and drains would only repeat what the lifecycle tests show, at minutes of CPU
    boto3.client("autoscaling").suspend_processes(
        AutoScalingGroupName=group_of(array_id)["AutoScalingGroupName"],  # type: ignore[index]
        ScalingProcesses=["Launch"],
    )
    # A run skips while another holds the array's lock (the apply's own ReconcileArray run may
    # still hold it on a loaded machine) and re-arms the alarm; on AWS the alarm then fires again
    # while its metric stays high, which the test plays by firing again, a few times at most
    for _ in range(10):
        execution = wait_for_execution(
            stack_outputs["ScaleArrayStateMachineArn"],
            fire_alarm(array_id, 5_000_000.0, recent_stamp()),
        )
        decision = json.loads(execution["output"])
        if "desired_controllers" in decision:
            break
        time.sleep(2)
    assert decision["desired_controllers"] == 16, decision
    assert decision["under_provisioned"] is True
    assert group_of(array_id)["DesiredCapacity"] == 16  # type: ignore[index]


def test_repeated_alarm_event_starts_one_workflow(stack_outputs, api, world, arrays, scripted_alarms):
    array_id = arrays()
    scripted_alarms(array_id)  # the test plays the array's alarms
    _apply(api, array_id, spec_for(array_id, world))
    stamp = recent_stamp()
    name = fire_alarm(array_id, 30_000.0, stamp)
    fire_alarm(array_id, 30_000.0, stamp)
    execution = wait_for_execution(stack_outputs["ScaleArrayStateMachineArn"], name)
    assert execution["status"] == "SUCCEEDED"
    duplicates = function_logs(stack_outputs["OnIopsAlarmFunctionName"], "duplicate alarm event")
    assert any(name in line for line in duplicates), duplicates
    executions = executions_of(stack_outputs["ScaleArrayStateMachineArn"])
    assert [e["name"] for e in executions].count(name) == 1


def test_alarm_for_an_unregistered_array_fails_the_workflow_by_name(stack_outputs):
    array_id = "it-nobody-registered"
    name = fire_alarm(array_id, 100_000.0, recent_stamp())
    execution = wait_for_execution(stack_outputs["ScaleArrayStateMachineArn"], name)
    assert execution["status"] == "FAILED"
    assert execution.get("error") == "ArrayNotFoundError"
    assert array_id in execution.get("cause", "")


def _publish_ebs(endpoint: str, volumes: list[str], per_minute_iops: list[float]) -> None:
    """EBS publishing each volume's ops for the last minutes (oldest first), split evenly."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    data = [
        {
            "MetricName": metric,
            "Dimensions": [{"Name": "VolumeId", "Value": volume}],
            "Timestamp": (
                now - timedelta(minutes=len(per_minute_iops) - i) + timedelta(seconds=30)
            ).isoformat(),
            "Value": iops * 60 / (2 * len(volumes)),
            "Unit": "Count",
        }
        for i, iops in enumerate(per_minute_iops)
        for volume in volumes
        for metric in ("VolumeReadOps", "VolumeWriteOps")
    ]
    control(endpoint, "cloudwatch", "publish", Namespace="AWS/EBS", MetricData=data)


def _volumes(array_id: str, spec: dict[str, Any]) -> list[str]:
    existing = [v["volumeId"] for v in spec["volumes"] if "volumeId" in v]
    return existing + [v["VolumeId"] for v in owned_volumes(array_id)]


def test_the_workflow_plans_on_the_metrics_it_reads_not_only_the_alarms_datapoint(
    stack_outputs, api, world, local_env, arrays
):
    # Given an array at 2 controllers whose volumes' metrics show demand rising 5,000 IOPS a minute
    array_id = arrays()
    spec = spec_for(array_id, world, minControllers=2, maxControllers=12)
    _apply(api, array_id, spec)
    ramp = [20_000.0 + 5_000.0 * m for m in range(6)]  # ... 45,000 in the newest minute
    _publish_ebs(local_env["AWS_ENDPOINT_URL"], _volumes(array_id, spec), ramp)
    # When the high alarm fires with an older datapoint (40,000)
    execution = wait_for_execution(
        stack_outputs["ScaleArrayStateMachineArn"],
        fire_alarm(array_id, 40_000.0, recent_stamp()),
    )
    # Then the decision is made on the newest minute read with GetMetricData and its trend:
    # 45,000 + 5,000/min x 10 min lead = 95,000 IOPS -> ceil(95,000 / 18,200) = 6
    assert execution["status"] == "SUCCEEDED", execution
    decision = json.loads(execution["output"])
    assert decision["demandSource"] == "AWS/EBS"
    assert decision["demand_iops"] == 45_000.0
    assert decision["alarmDemandIops"] == 40_000.0
    assert decision["recent_samples"] >= 5
    assert decision["forecast_iops"] == 95_000.0
    assert (decision["action"], decision["desired_controllers"]) == ("scale-out", 6)
    assert group_of(array_id)["DesiredCapacity"] == 6  # type: ignore[index]


def test_an_array_too_large_for_alarm_math_alarms_on_the_published_aggregate(
    stack_outputs, api, world, local_env, arrays
):
    # Given an array of 6 volumes: 12 metrics, more than an alarm's metric math may reference
    array_id = arrays()
    volumes = [world.volume() for _ in range(6)]
    spec = spec_for(array_id, world, volumes=[{"volumeId": v} for v in volumes])
    _apply(api, array_id, spec)
    # Then both alarms watch VSA/Arrays DemandIops for the array
    for alarm in alarms_of(array_id).values():
        (query,) = alarm["Metrics"]
        metric = query["MetricStat"]["Metric"]
        assert (metric["Namespace"], metric["MetricName"]) == ("VSA/Arrays", "DemandIops")
        assert metric["Dimensions"] == [{"Name": "ArrayId", "Value": array_id}]
    # When the volumes carry 30,000 IOPS and the per-minute publisher runs
    _publish_ebs(local_env["AWS_ENDPOINT_URL"], volumes, [30_000.0, 30_000.0])
    reply = boto3.client("lambda").invoke(
        FunctionName=stack_outputs["TaskPublishDemandFunctionName"], Payload=b"{}"
    )
    assert "FunctionError" not in reply, reply["Payload"].read()
    # Then the aggregate holds the array's IOPS, minute by minute
    now = datetime.now(UTC)
    stats = boto3.client("cloudwatch").get_metric_statistics(
        Namespace="VSA/Arrays",
        MetricName="DemandIops",
        Dimensions=[{"Name": "ArrayId", "Value": array_id}],
        StartTime=now - timedelta(minutes=10),
        EndTime=now,
        Period=60,
        Statistics=["Maximum"],
    )["Datapoints"]
    assert sorted(round(p["Maximum"]) for p in stats) == [30_000, 30_000]


def _put_recurring_history(array_id: str, base: float, surge: float) -> int:
    """Three hours and more of ``VSA/Arrays DemandIops`` for the array, one datapoint per
    5-minute bucket: ``base``, but ``surge`` 5 to 15 minutes ahead of now's time of the hour in
    each of the last three hours (an hourly job that is about to come again). Answers now's
    bucket."""
    now = datetime.now(UTC)
    current = forecast.bucket_index(now)
    surging = {current + ahead - 12 * cycle for cycle in (1, 2, 3) for ahead in (1, 2)}
    epoch = datetime(1970, 1, 5, tzinfo=UTC)  # forecast's bucket 0
    data = [
        {
            "MetricName": "DemandIops",
            "Dimensions": [{"Name": "ArrayId", "Value": array_id}],
            "Timestamp": epoch + timedelta(minutes=5 * bucket, seconds=30),
            "Value": surge if bucket in surging else base,
            "Unit": "Count/Second",
        }
        for bucket in range(current - 40, current)
    ]
    boto3.client("cloudwatch").put_metric_data(Namespace="VSA/Arrays", MetricData=data)
    return current


def test_a_recurring_surge_ahead_is_pre_scaled_by_the_health_checks_look_ahead(
    stack_outputs, api, world, local_env, arrays, scripted_alarms
):
    # Given an array at its minimum of 2 controllers, serving 20,000 IOPS now, whose demand in
    # each of the last 3 hours rose to 100,000 IOPS 5-15 minutes after this time of the hour
    array_id = arrays()
    scripted_alarms(array_id)  # no alarm of its own starts a run under the test
    spec = spec_for(array_id, world, minControllers=2, maxControllers=8)
    _apply(api, array_id, spec)
    _put_recurring_history(array_id, 20_000.0, 100_000.0)
    _publish_ebs(local_env["AWS_ENDPOINT_URL"], _volumes(array_id, spec), [20_000.0] * 3)
    # When the health check runs for it (read timeout past the function's own 120 s: botocore's
    # 60 s gave up first on the loaded machine, and a retry would invoke it again)
    reply = boto3.client("lambda", config=Config(read_timeout=150, retries={"max_attempts": 0})).invoke(
        FunctionName=stack_outputs["TaskHealthCheckFunctionName"],
        Payload=json.dumps({"arrayIds": [array_id]}).encode(),
    )
    payload = json.loads(reply["Payload"].read())
    assert "FunctionError" not in reply, payload
    (seen,) = payload["arrays"]
    # Then it stored the floor the recurring surge needs: ceil(100,000 / 18,200) = 6 ...
    assert seen["forecastFloor"] == 6, seen["forecastReason"]
    floor = json.loads(_spec_item(stack_outputs, array_id)["forecastFloor"]["S"])
    assert (floor["controllers"], floor["period"]) == (6, "hourly")
    # ... and, the floor being above the desired 2, started ScaleArray, which scaled to it
    assert seen["lookaheadStarted"], seen
    execution = wait_for_execution(stack_outputs["ScaleArrayStateMachineArn"], seen["lookaheadStarted"])
    assert execution["status"] == "SUCCEEDED", execution
    decision = json.loads(execution["output"])
    assert (decision["action"], decision["desired_controllers"]) == ("scale-out", 6), decision["reason"]
    assert decision["floor_set"] is True
    assert decision["eventId"].startswith("lookahead:")
    assert group_of(array_id)["DesiredCapacity"] == 6  # type: ignore[index]
    assert _spec_item(stack_outputs, array_id)["desiredControllers"] == {"N": "6"}
