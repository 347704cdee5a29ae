"""Scaling never gets stuck, end to end on the local cloud: the array's own alarms (evaluated
every minute by the local cloud as CloudWatch does, nothing scripted), EBS metrics published as
AWS/EBS, ScaleArray with its re-arming, and the real controller lifecycle (BootstrapController
and DrainController on the nodes' sandboxes).

The measured case of issue #18: a surge, then demand at 10,000 IOPS for good. A low alarm's
run that holds ("the recent peak still needs ...") must re-arm the alarm: left in ALARM, it is
never fired again, and the array sits above minControllers for as long as anyone watches.
"""

import itertools
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from tests.integration.arrays_world import control, create_array, group_of, node_root, spec_for
from tests.integration.test_controller_lifecycle import PathWatch
from vsa_core.nvme import subsystem_nqn

pytestmark = [pytest.mark.usefixtures("realistic_timings"), pytest.mark.minutes]

SURGE_IOPS = 65_000.0  # 4 controllers at 18,200 IOPS each (26,000 x 70%)
CALM_IOPS = 10_000.0  # what one controller serves: minControllers (2) from here on
SETTLE_MINUTES = 20


def _publish(endpoint: str, volume: str, minutes: dict[int, float]) -> None:
    """EBS's VolumeReadOps/VolumeWriteOps for ``volume``: {minute from now: IOPS} (each minute's
    ops split evenly between reads and writes, stamped 30 s into the minute)."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    data = [
        {
            "MetricName": metric,
            "Dimensions": [{"Name": "VolumeId", "Value": volume}],
            "Timestamp": (now + timedelta(minutes=m, seconds=30)).isoformat(),
            "Value": iops * 60 / 2,
            "Unit": "Count",
        }
        for m, iops in minutes.items()
        for metric in ("VolumeReadOps", "VolumeWriteOps")
    ]
    for start in range(0, len(data), 500):
        batch = data[start : start + 500]
        reply = control(endpoint, "cloudwatch", "publish", Namespace="AWS/EBS", MetricData=batch)
        assert reply["dropped"] == [], reply  # the volume is attached: EBS publishes for it


def _decisions(stack_outputs: dict[str, str], array_id: str) -> list[dict[str, Any]]:
    """Every finished ScaleArray run of the array: its answer, oldest first."""
    sfn = boto3.client("stepfunctions")
    pages = sfn.get_paginator("list_executions").paginate(
        stateMachineArn=stack_outputs["ScaleArrayStateMachineArn"]
    )
    runs = [
        e
        for page in pages
        for e in page["executions"]
        if e["name"].startswith(f"scale-{array_id}-") and e["status"] == "SUCCEEDED"
    ]
    runs.sort(key=lambda e: e["startDate"])
    return [json.loads(sfn.describe_execution(executionArn=e["executionArn"])["output"]) for e in runs]


@pytest.mark.timeout(1800)  # the array's setup, the surge, then up to 20 minutes of real alarm time
def test_after_a_surge_the_array_returns_to_min_and_stays_there(stack_outputs, api, world, local_env, arrays):
    # Given an array of one io2 volume and one host at minControllers=2, the spec's default
    # cooldowns (scale-out 60 s, scale-in 180 s), its alarms run by the local cloud
    array_id = arrays()
    volume = world.volume()
    spec = spec_for(array_id, world, volumes=[{"volumeId": volume}], minControllers=2, maxControllers=6)
    create_array(api, array_id, spec)
    _wait_for(lambda: _in_service(array_id) == 2, 300, "2 serving controllers", array_id)
    host = spec["hosts"][0]["instanceId"]
    endpoint = local_env["AWS_ENDPOINT_URL"]
    # When a surge of 65,000 IOPS lands (the last 3 minutes, this one and the next 2: the high
    # alarm needs 2 of its 2 newest minutes, whenever in the minute it is evaluated), then demand
    # falls to 10,000 IOPS for good (EBS's datapoints for the next 40 minutes: no new surge)
    _publish(endpoint, volume, {m: SURGE_IOPS for m in range(-3, 3)} | {m: CALM_IOPS for m in range(3, 43)})
    # Then the high alarm scales the array out to 4 controllers
    wanted = lambda: (group_of(array_id) or {}).get("DesiredCapacity") == 4  # noqa: E731
    _wait_for(wanted, 240, "the scale-out to 4", array_id)
    fell_at = time.monotonic()
    with PathWatch({host: node_root(world.endpoint, host)}, [subsystem_nqn(array_id, volume)]) as paths:
        # And within 20 minutes of the fall it is back at minControllers, every controller gone
        _wait_for(
            lambda: (group_of(array_id) or {}).get("DesiredCapacity") == 2 and len(_instances(array_id)) == 2,
            SETTLE_MINUTES * 60,
            "the array back at minControllers=2",
            array_id,
        )
        settled_in = time.monotonic() - fell_at
    # And the host kept a live path to the volume throughout
    assert paths.samples > 0
    assert paths.fewest[0] >= 1, paths.fewest
    # And the runs that brought it there scaled in after the surge's one scale-out, each straight
    # to what every minute of its window needed (one run when the window shows the whole fall);
    # every run said why (a hold on the recent peak re-arms its alarm, it does not stop)
    # (a run ends after its re-arm wait, WaitBeforeRearm: the last one may still be waiting)
    deadline = time.monotonic() + 240
    while True:
        decisions = _decisions(stack_outputs, array_id)
        changes = [(d["action"], d["desired_controllers"]) for d in decisions if d["action"] != "hold"]
        if (changes and changes[-1] == ("scale-in", 2)) or time.monotonic() > deadline:
            break
        time.sleep(10)
    shown = [(d["action"], d["desired_controllers"], d["reason"]) for d in decisions]
    assert changes[0] == ("scale-out", 4), shown
    assert changes[-1] == ("scale-in", 2), shown
    assert all(action == "scale-in" for action, _ in changes[1:]), shown
    assert all(a[1] > b[1] for a, b in itertools.pairwise(changes[1:])), shown
    assert all(d["rearmSeconds"] > 0 for d in decisions)
    print(f"back at minControllers {settled_in:.0f} s after the scale-out; runs: {len(decisions)}")


def _instances(array_id: str) -> list[dict[str, Any]]:
    return list((group_of(array_id) or {}).get("Instances", []))


def _in_service(array_id: str) -> int:
    return sum(1 for i in _instances(array_id) if i["LifecycleState"] == "InService")


def _wait_for(condition: Any, seconds: float, what: str, array_id: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        states = [i["LifecycleState"] for i in _instances(array_id)]
        desired = (group_of(array_id) or {}).get("DesiredCapacity")
        assert time.monotonic() < deadline, f"no {what} within {seconds:.0f} s: desired {desired}, {states}"
        time.sleep(2)
