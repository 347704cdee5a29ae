"""The re-arm rule (``vsa_core.scaling.rules.rearm_after``): one function for ScaleArray and the
simulator, and total: no reachable state of an array's alarms leaves demand off target longer
than a bound without a ScaleArray run, whatever the runs decide."""

import itertools
import math
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.specs import SPREAD
from vsa_core.arrays.spec import ArraySpec
from vsa_core.scaling import aws_plan, rules, simulator
from vsa_core.scaling.planner import PlanInput, ScaleDecision, plan
from vsa_core.scaling.rules import REARM_AT_TARGET_FACTOR, rearm_after
from vsa_core.scaling.simulator import Alarms, rearm_minutes

SPEC = ArraySpec(arrayId="demo", availabilityZone="us-east-1a", **SPREAD, minControllers=2, maxControllers=8)
BASE_SECONDS = 60
BOUND_MINUTES = math.ceil(BASE_SECONDS * REARM_AT_TARGET_FACTOR / 60) + 1
"""The longest a breached alarm can go without starting a run: the longest re-arm pause, then
the next evaluation."""
RUNS_PER_MINUTE = 3


def test_scale_array_and_the_simulator_run_the_same_rearm_function():
    # the deployed PlanScale step and the simulator import one code object, not copies
    assert aws_plan.rearm_after is rules.rearm_after
    assert simulator.rearm_after is rules.rearm_after
    assert aws_plan.rearm_after.__code__ is simulator.rearm_after.__code__


def _decision(action: str, current: int, desired: int, needed: int, waiting: bool = False) -> ScaleDecision:
    return ScaleDecision(
        array_id="demo",
        demand_iops=0.0,
        current_controllers=current,
        needed_controllers=needed,
        desired_controllers=desired,
        min_controllers=2,
        max_controllers=8,
        per_controller_iops=260_000,
        target_utilisation=0.7,
        action=action,
        reason="",
        under_provisioned=needed > 8,
        waiting=waiting,
    )


@pytest.mark.parametrize(
    ("decision", "seconds"),
    [
        (None, 60),  # the lock was busy, or the run failed
        (_decision("scale-out", 2, 4, 4), 60),
        (_decision("scale-in", 4, 3, 1), 60),
        (_decision("hold", 4, 4, 6, waiting=True), 60),  # a cooldown or a controller in flight
        (_decision("hold", 4, 4, 1), 60),  # the recent peak holds a scale-in: off target
        (_decision("hold", 4, 4, 4), 300),  # at what demand needs: a safety net
        (_decision("hold", 8, 8, 11), 300),  # at max, demand above it: nothing more to do
        (_decision("hold", 2, 2, 0), 300),  # at min, idle
    ],
)
def test_every_run_rearms_its_alarm(decision: ScaleDecision | None, seconds: int):
    assert rearm_after(decision, BASE_SECONDS) == seconds


def test_the_pause_must_be_positive():
    with pytest.raises(ValueError, match="1 s or more"):
        rearm_after(None, 0)


# One run's outcome: what ScaleArray may end with, whatever the planner says (the property holds
# for any decision, not only for good ones): a planner decision to any count in [min, max], with
# or without waiting, or no decision at all (the lock busy, the run failed, data stale)
OUTCOMES = st.one_of(
    st.none(),
    st.tuples(
        st.sampled_from(["hold", "scale-out", "scale-in"]),
        st.integers(SPEC.min_controllers, SPEC.max_controllers),
        st.integers(0, 12),
        st.booleans(),
    ),
)
MINUTE = st.one_of(st.none(), st.floats(0, 2_500_000))  # a minute's demand, or no datapoint
# demand as plateaus of 1-30 minutes (what holds an alarm's condition), noise inside some


def _flatten(parts: list[tuple[float | None, int, bool]]) -> list[float | None]:
    """Each plateau ``(value, minutes, noisy)``: a noisy one halves every other minute."""
    return [
        value if value is None or not noisy or minute % 2 else value * 0.5
        for value, minutes, noisy in parts
        for minute in range(minutes)
    ]


DEMAND = st.lists(st.tuples(MINUTE, st.integers(1, 30), st.booleans()), min_size=1, max_size=8).map(_flatten)


@settings(max_examples=300, deadline=None)
@given(
    demand=DEMAND,
    outcomes=st.lists(OUTCOMES, min_size=1, max_size=200),
    start=st.integers(SPEC.min_controllers, SPEC.max_controllers),
)
def test_no_alarm_condition_persists_beyond_the_bound_without_a_run(
    demand: list[float | None], outcomes: list, start: int
):
    """The alarms as CloudWatch runs them (``simulator.Alarms``: evaluated each minute and after
    each threshold move, an event only on a change to ALARM, missing data as the product
    configures it), ScaleArray runs on each event with an arbitrary outcome, and every run's
    alarm is re-armed after ``rearm_after``'s pause. Off target is what the alarms themselves
    say: the high alarm's condition at the current count (demand above what it serves at
    target) or the low one's (one controller fewer would serve, or no data above min). Property:
    whenever an alarm's condition has held for ``BOUND_MINUTES`` minutes in a row, a run started
    within those minutes."""
    alarms = Alarms(SPEC, demand)
    desired = start
    pending: dict[str, int] = {}
    runs: dict[str, list[int]] = {"high": [], "low": []}
    held_since: dict[str, int | None] = {"high": None, "low": None}
    queue = itertools.cycle(outcomes)
    carried: list[str] = []
    for t in range(len(demand)):
        for kind, due in list(pending.items()):
            if due <= t:
                alarms.rearm(kind)
                del pending[kind]
        # events not yet served (a run takes time: at most a few a minute) start runs later
        fired = [*carried, *alarms.evaluate(t, desired)]
        carried = fired[RUNS_PER_MINUTE:]
        fired = fired[:RUNS_PER_MINUTE]
        while fired:
            kind = fired.pop(0)
            runs[kind].append(t)
            outcome = next(queue)
            decision = None
            if outcome is not None:
                action, count, needed, waiting = outcome
                decision = _decision(action, desired, count, needed, waiting)
                moved = count != desired
                desired = count
                if moved:  # PutMetricAlarm: CloudWatch re-evaluates what it holds at once
                    carried += alarms.evaluate(t, desired)
            pending[kind] = t + rearm_minutes(decision, BASE_SECONDS)
        for kind in ("high", "low"):
            if alarms.breaching(kind, t, desired):
                since = held_since[kind] if held_since[kind] is not None else t
                held_since[kind] = since
                if t - since >= BOUND_MINUTES:
                    window = range(t - BOUND_MINUTES, t + 1)
                    assert any(r in window for r in runs[kind]), (kind, t, since, runs[kind])
            else:
                held_since[kind] = None


def test_the_measured_case_returns_to_min_in_the_simulator():
    # Given 4 controllers after a surge, then 100,000 IOPS for good (the stuck case)
    surge = [700_000.0] * 10
    after = [100_000.0] * 40
    result = simulator.simulate_planner(SPEC, surge + after, trigger="alarms-rearmed")
    # Then the array is back at minControllers within 20 minutes of the fall
    assert result.serving[len(surge) + 20] == SPEC.min_controllers
    # (never re-armed, as CloudWatch alone runs the alarms, a first run held by the scale-in
    # cooldown leaves it stuck: with a 15-minute one, started by the surge's last scale-out, the
    # fall's low alarm comes within it)
    slow = SPEC.model_copy(update={"scale_in_cooldown_seconds": 900})
    bumped = [*surge, 900_000.0, 900_000.0, 900_000.0, *after]
    never = simulator.simulate_planner(slow, bumped, trigger="alarms")
    assert never.serving[-1] > slow.min_controllers
    assert (
        simulator.simulate_planner(slow, bumped, trigger="alarms-rearmed").serving[-1] == slow.min_controllers
    )


def test_a_plan_the_planner_makes_is_judged_by_the_same_rule():
    # a hold the real planner makes at target gets the long pause; its scale-in the base one
    held = plan(PlanInput(SPEC, 100_000.0, 2))
    assert rearm_after(held, BASE_SECONDS) == BASE_SECONDS * REARM_AT_TARGET_FACTOR
    shrink = plan(PlanInput(SPEC, 100_000.0, 4))
    assert (shrink.action, rearm_after(shrink, BASE_SECONDS)) == ("scale-in", BASE_SECONDS)


def test_a_stale_hold_rearms_after_the_base_pause():
    # Given a run that found only stale data (rules.MAX_DATA_AGE): it holds, waiting
    array = ArraySpec(
        arrayId="demo", availabilityZone="us-east-1a", **SPREAD, minControllers=2, maxControllers=8
    )
    request = aws_plan.ScaleRequest.model_validate(
        {
            "arrayId": "demo",
            "alarmName": "vsa-demo-iops-low",
            "alarmKind": "low",
            "stateTimestamp": "2026-11-02T17:04:40.989+0000",
            "eventId": "e",
            "lockNow": 0,
            "lockUntil": 0,
        }
    )
    decision = rules.stale_decision(request, array, 4, datetime(2026, 11, 2, 17, 30, tzinfo=UTC), "stale: …")
    # Then it re-arms like any run that waits: a breach that persists fires again
    assert (decision.action, decision.waiting) == ("hold", True)
    assert rearm_after(decision, 60) == 60
