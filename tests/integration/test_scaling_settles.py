"""Scaling answers every breach and never gets stuck, end to end on the local cloud: the array's
own alarms (evaluated every minute by the local cloud as CloudWatch does, never by hand), EBS
metrics landing minute by minute as EBS publishes them (each minute's datapoints only once it
has ended), ScaleArray with its re-arming, ReconcileArray rewriting the alarms, and the real
controller lifecycle (BootstrapController and DrainController on the nodes' sandboxes).

Two measured cases: issue #18 (a surge, then demand low for good: a low alarm's run that holds
on "the recent peak still needs ..." must re-arm the alarm, or the array sits above
minControllers for as long as anyone watches), and an alarm that stayed OK for 8 minutes at 4-8x
its threshold after a reconcile rewrote it (its metric math filled the minute not landed yet
with 0, and the high alarm needs its 2 newest minutes breaching).
"""

import itertools
import json
import math
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from tests.integration.alarm_reads import minutes_seen
from tests.integration.arrays_world import (
    AZ,
    alarms_of,
    control,
    create_array,
    follow_run,
    group_of,
    node_root,
    put_spec,
    spec_for,
)
from tests.integration.test_controller_lifecycle import PathWatch
from vsa_core.alarm_tuning import (
    HIGH_DATAPOINTS_TO_ALARM,
    HIGH_EVALUATION_PERIODS,
    LOW_DATAPOINTS_TO_ALARM,
    LOW_EVALUATION_PERIODS,
)
from vsa_core.arrays.spec import ArraySpec
from vsa_core.nvme import subsystem_nqn
from vsa_core.scaling.aws_lookahead import EVENT_PREFIX
from vsa_core.scaling.simulator import EPOCH, Alarms, Floors, RunState, run_decision, simulate_planner

pytestmark = [pytest.mark.usefixtures("realistic_timings"), pytest.mark.minutes]

PER_CONTROLLER = 26_000 * 0.7  # 18,200 IOPS a controller at the 70% target (spec_for's figures)
CALM_IOPS = 10_000.0  # what one controller serves: minControllers (2)
SURGE_IOPS = 50_000.0  # 3 controllers
SETTLE_MINUTES = 20
EVALUATION_PERIOD = 60
ANSWERED_WITHIN = 2 * EVALUATION_PERIOD + 15  # two evaluations, and the scheduler's own jitter


class Ebs:
    """EBS publishing one volume's VolumeReadOps/VolumeWriteOps: each minute's datapoints land
    once the minute has ended (within ``EVERY`` s), at the demand in force when it started.
    ``landed[minute]`` is when a minute's datapoints were published (epoch seconds)."""

    EVERY = 10

    def __init__(self, endpoint: str, volume: str, iops: float) -> None:
        self.endpoint, self.volume, self.iops = endpoint, volume, iops
        self.levels: dict[datetime, float] = {}
        self.landed: dict[datetime, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                now = datetime.now(UTC).replace(second=0, microsecond=0)
                self.levels.setdefault(now, self.iops)
                for minute in sorted(m for m in self.levels if m < now and m not in self.landed):
                    self._publish(minute, self.levels[minute])
                    self.landed[minute] = time.time()
                self._stop.wait(self.EVERY)
        except BaseException as error:  # the test reports it
            self.error = error

    def _publish(self, minute: datetime, iops: float) -> None:
        data = [
            {
                "MetricName": metric,
                "Dimensions": [{"Name": "VolumeId", "Value": self.volume}],
                "Timestamp": (minute + timedelta(seconds=30)).isoformat(),
                "Value": iops * 60 / 2,
                "Unit": "Count",
            }
            for metric in ("VolumeReadOps", "VolumeWriteOps")
        ]
        reply = control(self.endpoint, "cloudwatch", "publish", Namespace="AWS/EBS", MetricData=data)
        assert reply["dropped"] == [], reply  # the volume is attached: EBS publishes for it

    def demand(self, iops: float) -> datetime:
        """Demand is ``iops`` from the next minute on; that minute."""
        self.iops = iops
        return datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)

    def landed_at(self, minute: datetime, timeout: float = 300) -> float:
        deadline = time.monotonic() + timeout
        while minute not in self.landed:
            assert self.error is None, self.error
            assert time.monotonic() < deadline, f"minute {minute} not published within {timeout} s"
            time.sleep(2)
        return self.landed[minute]

    def __enter__(self) -> "Ebs":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


@pytest.fixture
def ebs(local_env: dict[str, str]) -> Iterator[Any]:
    started: list[Ebs] = []

    def start(volume: str, iops: float) -> Ebs:
        started.append(Ebs(local_env["AWS_ENDPOINT_URL"], volume, iops).__enter__())
        return started[-1]

    yield start
    for publisher in started:
        publisher.__exit__()


def _runs(stack_outputs: dict[str, str], array_id: str) -> list[dict[str, Any]]:
    """Every ScaleArray run of the array, oldest first: the alarm transition that started it
    (its input: the rule's transformation of the alarm's state-change event) and its answer once
    it ended."""
    sfn = boto3.client("stepfunctions")
    pages = sfn.get_paginator("list_executions").paginate(
        stateMachineArn=stack_outputs["ScaleArrayStateMachineArn"]
    )
    found = [e for page in pages for e in page["executions"] if e["name"].startswith(f"scale-{array_id}-")]
    runs = []
    for execution in sorted(found, key=lambda e: e["startDate"]):
        described = sfn.describe_execution(executionArn=execution["executionArn"])
        started = json.loads(described["input"])
        runs.append(
            {
                "alarm": started.get("alarmName", ""),
                "lookahead": started.get("eventId", "").startswith(EVENT_PREFIX),
                "transitionedAt": _epoch(started.get("stateTimestamp", "")),
                "status": described["status"],
                "answer": json.loads(described["output"]) if described.get("output") else None,
            }
        )
    return runs


def _epoch(stamp: str) -> float:
    """CloudWatch's event timestamp (2026-11-02T17:04:40.989+0000), or the look-ahead's
    (ISO 8601), in epoch seconds."""
    return datetime.fromisoformat(stamp).timestamp() if stamp else 0.0


def _answered(
    stack_outputs: dict[str, str], array_id: str, alarm: str, breach: tuple[float, float], what: str
) -> float:
    """The first transition of ``alarm`` to ALARM that started a ScaleArray run since the breach
    could first be seen (``breach[0]``: its first minute landed, which the newest minute not
    landed yet repeats), waited for; asserts it came within two evaluation periods of the breach
    being complete (``breach[1]``: the minutes the alarm needs have all landed)."""
    seen, complete = breach
    deadline = time.monotonic() + ANSWERED_WITHIN + 240
    while True:
        runs = _runs(stack_outputs, array_id)
        started = [
            r for r in runs if r["alarm"] == alarm and not r["lookahead"] and r["transitionedAt"] >= seen - 1
        ]
        if started:
            break
        assert time.monotonic() < deadline, f"{what}: no run of {alarm} since the breach landed"
        time.sleep(5)
    delay = float(started[0]["transitionedAt"] - complete)
    assert delay <= ANSWERED_WITHIN, f"{what}: {alarm} went to ALARM {delay:.0f} s after the breach landed"
    return delay


def _breach(publisher: Ebs, first: datetime, minutes: int) -> tuple[float, float]:
    """When a breach starting at minute ``first`` could first be seen, and when the ``minutes``
    an alarm needs had all landed."""
    return publisher.landed_at(first), publisher.landed_at(first + timedelta(minutes=minutes - 1))


@pytest.mark.timeout(2700)  # setup, two surges, a reconcile, then up to 20 minutes settling
def test_every_breach_is_answered_and_the_array_returns_to_min(
    stack_outputs, api, world, local_env, arrays, ebs
):
    # Given an array of one io2 volume and one host at minControllers=2, the spec's default
    # cooldowns (scale-out 60 s, scale-in 180 s), its alarms run by the local cloud, EBS
    # publishing calm demand minute by minute
    array_id = arrays()
    volume = world.volume()
    spec = spec_for(array_id, world, volumes=[{"volumeId": volume}], minControllers=2, maxControllers=8)
    create_array(api, array_id, spec)
    _wait_for(lambda: _in_service(array_id) == 2, 300, "2 serving controllers", array_id)
    host = spec["hosts"][0]["instanceId"]
    high, low = f"vsa-{array_id}-iops-high", f"vsa-{array_id}-iops-low"
    publisher = ebs(volume, CALM_IOPS)

    # When a surge of 50,000 IOPS lands (3 controllers' worth at target)
    first = publisher.demand(SURGE_IOPS)
    # Then the high alarm goes to ALARM within two evaluations of its two breaching minutes
    # landing, and the array scales out
    breach = _breach(publisher, first, HIGH_DATAPOINTS_TO_ALARM)
    delays = {"surge": _answered(stack_outputs, array_id, high, breach, "surge")}
    _wait_for(lambda: _desired(array_id) >= 3, 300, "the scale-out for the surge", array_id)
    _wait_for(
        lambda: _in_service(array_id) == _desired(array_id), 300, "the surge's controllers serving", array_id
    )

    # When a reconcile rewrites the alarms (a second volume added: their metric math covers it; it
    # has no datapoints yet, which counts as no IO; io2's least, 100 IOPS, so the volumes' total,
    # which bounds the count, stays what it was), then demand grows past the new count
    grown = {**spec, "volumes": [*spec["volumes"], {"volumeId": _small_volume(world)}]}
    status, applied = put_spec(api, grown)
    assert status == 200, applied
    follow_run(applied)
    stats = [m for m in alarms_of(array_id)[high]["Metrics"] if "MetricStat" in m]
    assert len(stats) == 4, stats  # reads and writes of both volumes
    count = _desired(array_id)
    second = publisher.demand((count + 1.5) * PER_CONTROLLER)
    # Then the rewritten high alarm answers within two evaluations too (its run scales out, or
    # holds where the volumes' IOPS bound the count)
    breach = _breach(publisher, second, HIGH_DATAPOINTS_TO_ALARM)
    delays["after the reconcile"] = _answered(stack_outputs, array_id, high, breach, "after the reconcile")

    # When demand falls to 10,000 IOPS for good
    calm = publisher.demand(CALM_IOPS)
    fell_at = time.monotonic()
    with PathWatch({host: node_root(world.endpoint, host)}, [subsystem_nqn(array_id, volume)]) as paths:
        # Then the low alarm answers within two evaluations of its 5 calm minutes landing, and
        # within 20 minutes the array is back at minControllers, every controller gone
        delays["calm"] = _answered(
            stack_outputs, array_id, low, _breach(publisher, calm, LOW_DATAPOINTS_TO_ALARM), "calm"
        )
        _wait_for(
            lambda: _desired(array_id) == 2 and len(_instances(array_id)) == 2,
            SETTLE_MINUTES * 60,
            "the array back at minControllers=2",
            array_id,
        )
        settled_in = time.monotonic() - fell_at
    # And the host kept a live path to the volume throughout
    assert paths.samples > 0
    assert paths.fewest[0] >= 1, paths.fewest
    # And after the second scale-out the runs only scaled in, each straight to what every minute
    # of its window needed, down to 2; every run re-armed its alarm (a hold too: issue #18)
    changes, runs = _changes_down_to_min(stack_outputs, array_id)
    # And the simulator, replaying the demand EBS published minute by minute as the deployed path
    # runs it (vsactl simulate's default model, with the local cloud's boot of about 2 minutes),
    # sizes each phase as the deployed path did: the most controllers each phase reached, and
    # where the array settled. (Not each decision: a run lands seconds into its minute, and 2 s
    # of a cooldown left decided whether one scale-in came before the next surge or not, where
    # the simulator steps whole minutes.)
    minutes = sorted(publisher.levels)
    replayed = simulate_planner(
        ArraySpec.model_validate(spec),
        [publisher.levels[m] for m in minutes],
        boot_minutes=2,
        trigger="alarms-rearmed",
        forecast=True,
        volume_iops=_provisioned(grown),
    )
    phases = [minutes.index(first), minutes.index(second), minutes.index(calm), len(minutes)]
    deployed = _phase_peaks(_timeline(changes, minutes), phases)
    simulated = _phase_peaks(
        [(_index(d.now, minutes), d.desired_controllers) for d in replayed.decisions], phases
    )
    assert simulated == deployed, (simulated, deployed, changes)
    # And run by run, the simulator agrees with every decision the deployed path made: put in
    # the run's state, at the minute of the trace the run took its demand from, the replay's own
    # decision step answers the same action and count, and its alarm model was in breach when
    # the run's alarm went to ALARM
    agreed = _decisions_agree(stack_outputs, array_id, publisher, ArraySpec.model_validate(grown))
    print(
        f"breaches answered after {', '.join(f'{k}: {v:.0f} s' for k, v in delays.items())}; "
        f"back at minControllers {settled_in:.0f} s after the fall; runs: {runs}; changes: {changes}; "
        f"decisions the simulator agreed with: {agreed}"
    )


def _decisions_agree(stack_outputs: dict[str, str], array_id: str, publisher: Ebs, spec: ArraySpec) -> int:
    """Every decision of a ScaleArray run that read its demand (not one that found the lock busy,
    refused stale data or fell back to its alarm's datapoint) replayed through the simulator's
    decision step (``simulator.run_decision``, the step its minute loop takes): the run's newest
    minute of demand (``demandMinute``) as the trace's minute, the run's count, clock, last
    scale-out and scale-in, controllers in flight and the changes of the last hour it read, the
    volumes' IOPS it read from EC2, the forecast floor the simulator builds from the trace and
    whether the high alarm started it.
    Asserts the same action, count and minimum needed; and that the simulator's alarm model
    (``simulator.Alarms``) was in breach, for the run's count, at a minute the run's alarm read
    when it went to ALARM (its alarm history lists the datapoints it evaluated:
    ``minutes_seen``). How many decisions agreed."""
    minutes = sorted(publisher.levels)
    trace = [publisher.levels[m] for m in minutes]
    # the alarms' windows reach back before EBS's first minute: missing data there (the Alarms
    # model treats it as the product configures the alarms)
    pad = max(HIGH_EVALUATION_PERIODS, LOW_EVALUATION_PERIODS)
    alarms, floors = Alarms(spec, [None] * pad + trace), Floors(spec, trace)
    agreed = 0
    for run in _runs(stack_outputs, array_id):
        answer = run["answer"]
        if run["status"] != "SUCCEEDED" or not answer or answer.get("demandMinute") is None:
            continue
        t = minutes.index(datetime.fromisoformat(answer["demandMinute"]))
        state = RunState(
            answer["current_controllers"],
            datetime.fromisoformat(answer["now"]),
            _when(answer["last_scale_out_at"]),
            _when(answer["last_scale_in_at"]),
            answer["in_flight"],
            tuple(datetime.fromisoformat(at) for at in answer["recent_scalings"]),
        )
        by_high_alarm = run["alarm"].endswith("-high") and not run["lookahead"]
        replayed = run_decision(
            spec,
            trace,
            t,
            state,
            volume_iops=answer["volume_iops"],
            floor=floors.at(t),
            by_high_alarm=by_high_alarm,
        )
        shown = (answer["action"], answer["desired_controllers"], answer["reason"], replayed.reason)
        assert (replayed.action, replayed.desired_controllers, replayed.needed_controllers) == (
            answer["action"],
            answer["desired_controllers"],
            answer["needed_controllers"],
        ), shown
        agreed += 1
        if run["lookahead"]:
            continue  # started by the health check's look-ahead, not by an alarm
        kind = "high" if run["alarm"].endswith("-high") else "low"
        evaluated = _evaluated_datapoints(run["alarm"], run["transitionedAt"])
        if evaluated:  # what the alarm's own evaluation read
            near = minutes_seen(evaluated, publisher.levels, minutes)
            assert near, _unmatched(kind, evaluated, publisher, run)
        else:  # it evaluated no datapoint (missing data): the minutes landed by then
            landed = [
                i for i, m in enumerate(minutes) if publisher.landed.get(m, math.inf) <= run["transitionedAt"]
            ]
            assert landed, run
            near = [i for i in (landed[-1], landed[-1] + 1) if i < len(minutes)]
        assert any(alarms.breaching(kind, pad + i, state.desired) for i in near), (kind, near, state, shown)
    assert agreed >= 3, agreed  # the surge, after the reconcile, the fall (at least)
    return agreed


def _unmatched(kind: str, evaluated: dict[datetime, float], publisher: Ebs, run: dict[str, Any]) -> str:
    """What an alarm evaluated that no newest landed minute explains, whole: each minute's value
    beside the trace's level and when EBS's datapoints for it landed."""
    rows = [
        f"{m:%H:%M} evaluated {v:,.1f}, level {publisher.levels.get(m, math.nan):,.1f}, "
        f"landed {publisher.landed.get(m, math.nan) - run['transitionedAt']:+.1f} s"
        for m, v in sorted(evaluated.items())
    ]
    return f"{kind} alarm at {run['transitionedAt']:.3f} ({run['alarm']}):\n" + "\n".join(rows)


def _evaluated_datapoints(alarm: str, transitioned_at: float) -> dict[datetime, float]:
    """The datapoints the alarm evaluated when it went to ALARM at ``transitioned_at`` (minute:
    value): its state update's item in the alarm history (stamped with the update's time, as the
    state-change event is), whose reason data lists them; empty when it evaluated none."""
    pages = boto3.client("cloudwatch").get_paginator("describe_alarm_history")
    items = [
        item
        for page in pages.paginate(AlarmName=alarm, HistoryItemType="StateUpdate")
        for item in page["AlarmHistoryItems"]
        if abs(item["Timestamp"].timestamp() - transitioned_at) < 0.01
    ]
    updates = [json.loads(item["HistoryData"])["newState"] for item in items]
    (update,) = [u for u in updates if u["stateValue"] == "ALARM"]
    points = (update.get("stateReasonData") or {}).get("evaluatedDatapoints", [])
    return {datetime.fromisoformat(p["timestamp"]): float(p["value"]) for p in points if "value" in p}


def _when(stamp: str | None) -> datetime | None:
    return None if stamp is None else datetime.fromisoformat(stamp)


def _changes_down_to_min(
    stack_outputs: dict[str, str], array_id: str
) -> tuple[list[tuple[str, int, str]], int]:
    """The runs' changes of the count (action, count, when), checked: a scale-out or more, then
    only scale-ins, each to fewer, the last to 2; every run re-armed (a hold too: issue #18).
    (A run ends after its re-arm wait, WaitBeforeRearm: the last one may still be waiting.) The
    changes and how many runs."""
    deadline = time.monotonic() + 240
    while True:
        runs = _runs(stack_outputs, array_id)
        # A run that found another holding the scaling lock answers "skipped" (ScaleArray's
        # LockBusy): it planned nothing, so it has no count
        decisions = [
            r["answer"]
            for r in runs
            if r["status"] == "SUCCEEDED" and r["answer"] and r["answer"]["action"] != "skipped"
        ]
        changes = [
            (d["action"], d["desired_controllers"], d["now"]) for d in decisions if d["action"] != "hold"
        ]
        if (changes and changes[-1][:2] == ("scale-in", 2)) or time.monotonic() > deadline:
            break
        time.sleep(10)
    shown = [(d["action"], d["desired_controllers"], d["reason"]) for d in decisions]
    outs = [i for i, (action, _, _) in enumerate(changes) if action == "scale-out"]
    assert len(outs) >= 1, shown
    assert changes[-1][:2] == ("scale-in", 2), shown
    after = changes[outs[-1] + 1 :]
    assert all(action == "scale-in" for action, _, _ in after), shown
    assert all(a[1] > b[1] for a, b in itertools.pairwise(after)), shown
    assert all(d["rearmSeconds"] > 0 for d in decisions)
    return changes, len(runs)


def _index(now: str | None, minutes: list[datetime]) -> int:
    """The trace minute a decision was made in (its ``now``): the simulator's are minutes since
    its epoch, the deployed ones wall-clock times."""
    assert now is not None
    moment = datetime.fromisoformat(now)
    if moment < minutes[0] - timedelta(days=1):  # the simulator's clock
        return int((moment - EPOCH).total_seconds() // 60)
    stamp = moment.replace(second=0, microsecond=0)
    return max(0, min(len(minutes) - 1, int((stamp - minutes[0]).total_seconds() // 60)))


def _timeline(changes: list[tuple[str, int, str]], minutes: list[datetime]) -> list[tuple[int, int]]:
    return [(_index(when, minutes), count) for _, count, when in changes]


def _phase_peaks(timeline: list[tuple[int, int]], bounds: list[int], start: int = 2) -> list[int]:
    """The most controllers desired in each phase (``bounds``: each phase's first minute, then
    the trace's end), the count carried in included, then the count at the end."""
    peaks, count = [], start
    for begin, end in itertools.pairwise(bounds):
        inside = [c for t, c in timeline if begin <= t < end]
        before = [c for t, c in timeline if t < begin]
        count = before[-1] if before else start
        peaks.append(max([count, *inside]))
    return [*peaks, timeline[-1][1] if timeline else start]


def _provisioned(spec: dict[str, Any]) -> int:
    """The spec's volumes' provisioned IOPS in total (what bounds the count)."""
    found = boto3.client("ec2").describe_volumes(VolumeIds=_volume_ids(spec))["Volumes"]
    return sum(int(v["Iops"]) for v in found)


def _small_volume(world: Any) -> str:
    """An io2 Multi-Attach volume of the least size and IOPS (4 GiB, 100), available."""
    ec2 = boto3.client("ec2")
    volume = ec2.create_volume(
        AvailabilityZone=AZ,
        Size=4,
        VolumeType="io2",
        Iops=100,
        MultiAttachEnabled=True,
    )["VolumeId"]
    world.volumes.append(volume)  # the world deletes it with its own
    ec2.get_waiter("volume_available").wait(VolumeIds=[volume], WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    return str(volume)


def _volume_ids(spec: dict[str, Any]) -> list[str]:
    return [v["volumeId"] for v in spec["volumes"]]


def _instances(array_id: str) -> list[dict[str, Any]]:
    return list((group_of(array_id) or {}).get("Instances", []))


def _desired(array_id: str) -> int:
    return int((group_of(array_id) or {}).get("DesiredCapacity", 0))


def _in_service(array_id: str) -> int:
    return sum(1 for i in _instances(array_id) if i["LifecycleState"] == "InService")


def _wait_for(condition: Any, seconds: float, what: str, array_id: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        states = [i["LifecycleState"] for i in _instances(array_id)]
        desired = (group_of(array_id) or {}).get("DesiredCapacity")
        assert time.monotonic() < deadline, f"no {what} within {seconds:.0f} s: desired {desired}, {states}"
        time.sleep(2)
