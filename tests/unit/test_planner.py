"""Capacity planning: examples from the design, then its invariants as properties."""

import json
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from tests.specs import SPREAD
from vsa_core.arrays.spec import MULTI_ATTACH_LIMIT, ArraySpec
from vsa_core.naming import ARRAY_ID_PATTERN
from vsa_core.scaling.forecast import Floor
from vsa_core.scaling.planner import (
    REVERSAL_MINUTES,
    SETTLE_MINUTES,
    PlanInput,
    ScaleDecision,
    controllers_needed,
    plan,
    settle_left,
)
from vsa_core.scaling.simulator import default_spec, simulate_planner


def spec(
    min_controllers: int = 2,
    max_controllers: int = 8,
    per_controller_iops: int = 260_000,
    target_utilisation: float = 0.7,
) -> ArraySpec:
    return ArraySpec(
        arrayId="demo",
        availabilityZone="us-east-1a",
        **SPREAD,
        minControllers=min_controllers,
        maxControllers=max_controllers,
        perControllerIops=per_controller_iops,
        targetUtilisation=target_utilisation,
    )


# ---------------------------------------------------------------- examples


def test_controllers_needed_at_the_boundary_of_one_controller():
    # Given one r5b controller at 70 % serves 182,000 IOPS
    # When / Then exactly that much needs one controller and one IOPS more needs two
    assert controllers_needed(182_000, 260_000, 0.7) == 1
    assert controllers_needed(182_001, 260_000, 0.7) == 2


def test_scale_out_goes_straight_to_what_demand_needs():
    # Given an array running 2 controllers of 260k IOPS at a 70 % target
    array = spec(min_controllers=2, max_controllers=8)
    # When demand reaches 612,345 IOPS (612,345 / 182,000 = 3.4)
    decision = plan(PlanInput(array, 612_345, current_controllers=2))
    # Then it scales out to 4 in one step, not one controller at a time
    assert decision.action == "scale-out"
    assert decision.needed_controllers == 4
    assert decision.desired_controllers == 4
    assert decision.under_provisioned is False
    assert "612,345" in decision.reason
    assert "needs 4 controller(s), 2 running" in decision.reason


def test_hold_when_the_running_controllers_serve_the_demand():
    # Given an array already at the 4 controllers its demand needs
    array = spec(min_controllers=2, max_controllers=8)
    # When the same demand is planned again
    decision = plan(PlanInput(array, 612_345, current_controllers=4))
    # Then nothing changes
    assert decision.action == "hold"
    assert decision.desired_controllers == 4
    assert decision.under_provisioned is False


def test_scale_in_on_the_current_demand_alone_removes_one_controller_at_a_time():
    # Given an array running 6 controllers
    array = spec(min_controllers=2, max_controllers=8)
    # When demand drops to what 2 controllers serve, and nothing but this minute is known
    decision = plan(PlanInput(array, 200_000, current_controllers=6))
    # Then it removes a single controller, not four: one minute proves no collapse
    assert decision.needed_controllers == 2
    assert decision.action == "scale-in"
    assert decision.desired_controllers == 5
    assert "one controller at a time" in decision.reason


def test_a_collapse_the_whole_window_shows_is_shed_in_one_decision():
    # Given an array running 6 controllers after a surge
    array = spec(min_controllers=2, max_controllers=8)
    # When every minute of the low alarm's window (5) fits 2 controllers with the margin
    decision = plan(
        PlanInput(
            array, 200_000, 6, recent_demand=[210_000.0] * 6, sustained_minutes=5, scale_in_headroom=0.9
        )
    )
    # Then it goes straight to 2, saying so
    assert (decision.action, decision.desired_controllers) == ("scale-in", 2), decision.reason
    assert "scale in 4 at once" in decision.reason


def test_a_collapse_goes_only_as_far_as_the_windows_busiest_minute():
    # Given 6 controllers, and a window whose busiest minute needs 4 (the rest needs 2)
    array = spec(min_controllers=2, max_controllers=8)
    busiest = 4 * array.per_controller_iops * array.target_utilisation * 0.95
    decision = plan(
        PlanInput(array, 100_000, 6, recent_demand=[100_000.0, busiest, 100_000.0], sustained_minutes=5)
    )
    # Then it sheds 2, down to what that minute needed, not to what the current minute needs
    assert (decision.action, decision.desired_controllers) == ("scale-in", 4), decision.reason
    assert decision.desired_controllers >= controllers_needed(
        busiest, array.per_controller_iops, array.target_utilisation
    )


def test_an_abrupt_fall_the_window_holds_partway_is_shed_in_one_step_once_the_window_clears():
    # Given 8 controllers, a top that needed 7 in the low alarm's window, then an instant drop
    array = spec(min_controllers=2, max_controllers=8)
    top = 7 * array.per_controller_iops * array.target_utilisation * 0.9 * 0.97
    low = 150_000.0
    falling = PlanInput(array, low, 8, recent_demand=[top] * 3 + [low] * 2, sustained_minutes=5)
    # When the window's busiest minute allows shedding 1 and the current demand allows shedding 6
    waits = plan(falling)
    # Then it waits (ScaleArray re-arms its alarm), saying why, rather than go 8 -> 7 now, 7 -> 2 later
    assert (waits.action, waits.desired_controllers, waits.waiting) == ("hold", 8, True), waits.reason
    assert "one scale-in when they have left it, not two" in waits.reason
    # and once the top has left the window, it sheds the whole fall at once
    cleared = plan(replace(falling, recent_demand=[top] + [low] * 5))
    assert (cleared.action, cleared.desired_controllers) == ("scale-in", 2), cleared.reason
    # and a maxControllers lowered below the running count is obeyed at once, window or not
    lowered = replace(falling, spec=array.model_copy(update={"max_controllers": 7}), current_controllers=8)
    capped = plan(lowered)
    assert (capped.action, capped.desired_controllers) == ("scale-in", 7), capped.reason


def test_a_recurring_fall_under_way_is_shed_in_one_step_to_the_cycles_level():
    # Given 12 controllers at the top of a recurring cycle whose fall is in force: every recent
    # cycle fell in this bucket and kept what 3 controllers serve at target after it
    array = spec(min_controllers=2, max_controllers=16)
    per_at_target = array.per_controller_iops * array.target_utilisation
    level = Floor(3, 2.9 * per_at_target, "cycles of 60 min", "forecast", 10, 12, 11.5 * per_at_target)
    fall = replace(level, fall_at=T0.isoformat(), fall_controllers=3, fall_iops=2.9 * per_at_target)
    top = 11.5 * per_at_target
    before = [top] * 6
    in_force = fall.in_force(T0 + timedelta(minutes=2), 6.5 * per_at_target, [*before, 9 * per_at_target])
    assert (in_force.ceiling_controllers, in_force.falling) == (3, True)
    falling = PlanInput(
        array,
        6.5 * per_at_target,
        12,
        now=T0 + timedelta(minutes=2),
        recent_demand=[*before[-3:], 9 * per_at_target],
        sustained_minutes=5,
        scale_in_headroom=0.9,
        forecast=in_force,
    )
    # When the demand is halfway down and still falling
    waits = plan(falling)
    # Then no scale-in to the 7 the current demand needs: it waits (ScaleArray re-arms its alarm)
    assert (waits.action, waits.desired_controllers, waits.waiting) == ("hold", 12, True), waits.reason
    assert "recurring fall is under way" in waits.reason
    # and once the demand is at the cycle's level, the whole fall goes in one step, at target (no
    # scale-in margin to leave a controller the low alarm sheds minutes later)
    there = replace(
        falling,
        demand_iops=2.95 * per_at_target,
        now=T0 + timedelta(minutes=4),
        recent_demand=[top, top, 9 * per_at_target, 6.5 * per_at_target, 4 * per_at_target],
    )
    shed = plan(there)
    assert (shed.action, shed.desired_controllers) == ("scale-in", 3), shed.reason
    # and a fall that stops above the level (no falling trend) is shed as far as the demand allows
    # with the scale-in margin, not to the level: 6.5 at target x 0.9 needs 8
    stopped = plan(replace(falling, recent_demand=[6.5 * per_at_target] * 4))
    assert (stopped.action, stopped.desired_controllers) == ("scale-in", 8), stopped.reason
    # and the same ceiling of 3 that is not the cycle's fall keeps the scale-in margin: 4
    not_a_fall = plan(replace(there, forecast=replace(in_force, falling=False)))
    assert (not_a_fall.action, not_a_fall.desired_controllers) == ("scale-in", 4), not_a_fall.reason


def test_scale_in_stops_at_the_minimum():
    # Given an array one controller above its minimum of 2
    array = spec(min_controllers=2, max_controllers=8)
    # When there is no demand at all
    decision = plan(PlanInput(array, 0, current_controllers=3))
    # Then it scales in to the floor and says the floor is why it stops there
    assert decision.action == "scale-in"
    assert decision.desired_controllers == 2
    assert "floor minControllers=2" in decision.reason


def test_hold_at_the_minimum_without_demand():
    # Given an array at its minimum of 2
    array = spec(min_controllers=2, max_controllers=8)
    # When there is no demand
    decision = plan(PlanInput(array, 0, current_controllers=2))
    # Then it keeps the minimum
    assert decision.needed_controllers == 0
    assert decision.action == "hold"
    assert decision.desired_controllers == 2


def test_an_array_below_its_minimum_scales_out_to_it():
    # Given an array with no controllers running (desiredControllers may be 0)
    array = spec(min_controllers=2, max_controllers=8)
    # When it is planned with no demand
    decision = plan(PlanInput(array, 0, current_controllers=0))
    # Then it scales out to its minimum
    assert decision.action == "scale-out"
    assert decision.desired_controllers == 2


def test_scale_out_is_capped_at_max_and_reported_under_provisioned():
    # Given an array allowed at most 4 controllers
    array = spec(min_controllers=2, max_controllers=4)
    # When demand needs 6 (1,000,000 / 182,000 = 5.5)
    decision = plan(PlanInput(array, 1_000_000, current_controllers=2))
    # Then it scales out to the cap and says the array stays under-provisioned
    assert decision.needed_controllers == 6
    assert decision.action == "scale-out"
    assert decision.desired_controllers == 4
    assert decision.max_controllers == 4
    assert decision.under_provisioned is True
    assert "maxControllers=4" in decision.reason
    assert "under-provisioned" in decision.reason


def test_hold_at_max_still_reports_under_provisioned():
    # Given an array already at its cap of 4
    array = spec(min_controllers=2, max_controllers=4)
    # When demand still needs 6
    decision = plan(PlanInput(array, 1_000_000, current_controllers=4))
    # Then it holds and still reports the shortfall
    assert decision.action == "hold"
    assert decision.desired_controllers == 4
    assert decision.under_provisioned is True
    assert "needs 6" in decision.reason
    assert "under-provisioned" in decision.reason


def test_zero_demand_needs_no_controllers():
    # Given / When no demand / Then no controller is needed for it
    assert controllers_needed(0, 260_000, 0.7) == 0
    assert controllers_needed(0.0, 1, 1.0) == 0


@pytest.mark.parametrize("demand", [-1, -0.001, float("-inf"), float("nan")])
def test_negative_or_nan_demand_is_rejected(demand: float):
    # Given a valid array / When planned for a demand that is not a non-negative number
    # Then it is refused
    with pytest.raises(ValueError, match="non-negative"):
        plan(PlanInput(spec(), demand, current_controllers=2))


def test_infinite_demand_is_rejected_as_a_value_error():
    # Given a valid array / When planned for an infinite demand / Then it is refused like NaN
    with pytest.raises(ValueError, match="non-negative"):
        plan(PlanInput(spec(), float("inf"), current_controllers=2))


def test_desired_never_exceeds_max_even_when_running_far_above_it():
    # Given an array allowed 4 controllers that runs 8 (its maxControllers was lowered)
    array = spec(min_controllers=1, max_controllers=4)
    # When it is planned with no demand
    decision = plan(PlanInput(array, 0, current_controllers=8))
    # Then the desired count respects the cap
    assert decision.desired_controllers <= 4


def test_decision_is_json_serialisable_with_the_fields_the_workflow_reads():
    # Given a decision
    decision = plan(PlanInput(spec(), 612_345, current_controllers=2))
    # When it is returned from Lambda as JSON (the ASL reads $.plan.decision.desired_controllers)
    payload = json.loads(json.dumps(decision.as_dict()))
    # Then it carries every input and the desired count
    assert payload["desired_controllers"] == 4
    assert payload["array_id"] == "demo"
    assert payload["demand_iops"] == 612_345
    assert payload["current_controllers"] == 2
    assert payload["per_controller_iops"] == 260_000
    assert payload["target_utilisation"] == 0.7


# ---------------------------------------------------------------- properties


@st.composite
def specs(draw: st.DrawFn) -> ArraySpec:
    max_controllers = draw(st.integers(1, MULTI_ATTACH_LIMIT))
    return ArraySpec(
        arrayId=draw(st.from_regex(ARRAY_ID_PATTERN, fullmatch=True)),
        availabilityZone="us-east-1a",
        **SPREAD,
        minControllers=draw(st.integers(1, max_controllers)),
        maxControllers=max_controllers,
        perControllerIops=draw(st.integers(1_000, 1_000_000)),
        targetUtilisation=draw(st.floats(0.05, 1.0)),
    )


demands = st.one_of(
    st.just(0.0),
    st.integers(0, 100_000_000).map(float),
    # (subnormal demands underflow to 0 controllers: not IOPS anyone measures)
    st.floats(0.0, 100_000_000.0, allow_nan=False, allow_infinity=False, allow_subnormal=False),
)
running = st.integers(0, MULTI_ATTACH_LIMIT)  # RegisteredArray.desired_controllers: 0..16


def _needed_or_less_than_max(decision: ScaleDecision) -> bool:
    return decision.needed_controllers <= decision.max_controllers


@given(array=specs(), demand=demands, current=running)
def test_desired_is_never_below_min_nor_above_the_attach_limit(array: ArraySpec, demand: float, current: int):
    # Given any valid array, demand and running count / When planned
    decision = plan(PlanInput(array, demand, current))
    # Then the desired count is within [minControllers, 16]
    assert array.min_controllers <= decision.desired_controllers <= MULTI_ATTACH_LIMIT


@given(array=specs(), demand=demands, data=st.data())
def test_desired_never_exceeds_max_from_a_count_within_the_spec(
    array: ArraySpec, demand: float, data: st.DataObject
):
    # Given an array running no more controllers than its spec allows
    current = data.draw(st.integers(0, array.max_controllers), label="current")
    # When planned
    decision = plan(PlanInput(array, demand, current))
    # Then the desired count never exceeds maxControllers
    assert decision.desired_controllers <= array.max_controllers
    assert decision.max_controllers == array.max_controllers


@given(array=specs(), demand=demands, data=st.data())
def test_any_scale_in_is_one_step(array: ArraySpec, demand: float, data: st.DataObject):
    # (From more than max + 1, "never above max" wins over "one step": see the test above.)
    # Given any running count within the spec / When planned
    current = data.draw(st.integers(0, array.max_controllers), label="current")
    decision = plan(PlanInput(array, demand, current))
    # Then a scale-in, if any, removes exactly one controller and never drops below the demand
    if decision.action == "scale-in":
        assert decision.desired_controllers == current - 1
        assert decision.desired_controllers >= decision.needed_controllers


@given(array=specs(), data=st.data())
def test_demand_below_the_running_count_scales_in_by_one(array: ArraySpec, data: st.DataObject):
    # Given an array running more than its minimum (and within its maximum)
    assume(array.min_controllers < array.max_controllers)
    current = data.draw(st.integers(array.min_controllers + 1, array.max_controllers), label="current")
    # And a demand that one controller fewer serves at the target utilisation
    capacity = (current - 1) * array.per_controller_iops * array.target_utilisation
    demand = data.draw(st.floats(0.0, capacity * 0.999), label="demand")
    # When planned
    decision = plan(PlanInput(array, demand, current))
    # Then it scales in by exactly one, and not below what the demand needs
    assert decision.action == "scale-in"
    assert decision.desired_controllers == current - 1
    assert decision.desired_controllers >= decision.needed_controllers


@given(array=specs(), demand=demands, current=running)
@example(array=spec(min_controllers=2, max_controllers=8), demand=612_345.0, current=2)
def test_never_fewer_controllers_than_demand_needs_when_max_allows(
    array: ArraySpec, demand: float, current: int
):
    # Given a demand that maxControllers can serve / When planned from any running count
    decision = plan(PlanInput(array, demand, current))
    assume(_needed_or_less_than_max(decision))
    # Then the desired count serves it, and nothing is reported under-provisioned
    assert decision.desired_controllers >= decision.needed_controllers
    assert decision.under_provisioned is False


@given(array=specs(), demand=demands, data=st.data())
def test_under_provisioned_exactly_when_demand_needs_more_than_max(
    array: ArraySpec, demand: float, data: st.DataObject
):
    # Given an array running no more controllers than its spec allows
    current = data.draw(st.integers(0, array.max_controllers), label="current")
    # When planned / Then the shortfall is flagged, and explained, exactly when max cannot serve demand
    decision = plan(PlanInput(array, demand, current))
    assert decision.under_provisioned == (decision.needed_controllers > array.max_controllers)
    if decision.under_provisioned:
        assert "under-provisioned" in decision.reason


@given(array=specs(), demand=demands, current=running)
def test_action_agrees_with_desired_versus_current(array: ArraySpec, demand: float, current: int):
    decision = plan(PlanInput(array, demand, current))
    expected = {1: "scale-out", -1: "scale-in", 0: "hold"}[
        (decision.desired_controllers > current) - (decision.desired_controllers < current)
    ]
    assert decision.action == expected
    assert decision.current_controllers == current


@given(array=specs(), demand=demands)
def test_needed_is_the_fewest_controllers_that_serve_demand_at_target(array: ArraySpec, demand: float):
    # Given any demand / When the controllers it needs are counted
    needed = controllers_needed(demand, array.per_controller_iops, array.target_utilisation)
    per_controller = array.per_controller_iops * array.target_utilisation
    # Then that many serve it at the target utilisation, and one fewer does not (up to float
    # rounding: at an exact multiple, e.g. 3 x 156,769 x 1/3, the division may land just above)
    assert needed >= 0
    assert needed * per_controller >= demand * (1 - 1e-12)
    if needed > 0:
        assert (needed - 1) * per_controller < demand * (1 + 1e-12)


@given(array=specs(), low=demands, high=demands, current=running)
def test_more_demand_never_means_fewer_controllers(array: ArraySpec, low: float, high: float, current: int):
    # Given two demands, one at least the other, from the same running count
    low, high = sorted((low, high))
    # When both are planned / Then the larger never desires fewer controllers
    assert (
        plan(PlanInput(array, high, current)).desired_controllers
        >= plan(PlanInput(array, low, current)).desired_controllers
    )


@given(array=specs(), demand=demands, current=running)
def test_repeated_planning_settles_on_demand_clamped_to_min_and_max(
    array: ArraySpec, demand: float, current: int
):
    # Given a steady demand, each decision applied before the next plan
    decision = plan(PlanInput(array, demand, current))
    for _ in range(MULTI_ATTACH_LIMIT + 1):
        if decision.action == "hold":
            break
        decision = plan(PlanInput(array, demand, decision.desired_controllers))
    # Then it settles (holds) within 17 steps, at the needed count clamped to [min, max]
    assert decision.action == "hold"
    settled = min(max(decision.needed_controllers, array.min_controllers), array.max_controllers)
    assert decision.desired_controllers == settled


@given(array=specs(), demand=st.one_of(st.floats(max_value=-1e-9), st.just(math.nan)), current=running)
def test_any_negative_or_nan_demand_raises(array: ArraySpec, demand: float, current: int):
    with pytest.raises(ValueError, match="non-negative"):
        plan(PlanInput(array, demand, current))


# ---------------------------------------------------------------- keyword inputs (issue #5)

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def test_scale_out_waits_for_its_cooldown_and_says_so():
    # Given a scale-out 20 seconds ago and scaleOutCooldownSeconds=60 (the default)
    array = spec()
    # When demand needs more again
    decision = plan(PlanInput(array, 612_345, 2, now=T0, last_scale_out_at=T0 - timedelta(seconds=20)))
    # Then it holds and the reason names the cooldown and what is left of it
    assert decision.action == "hold"
    assert "scale-out cooldown" in decision.reason
    assert "40s left" in decision.reason
    assert decision.now == T0.isoformat()
    assert decision.waiting  # ScaleArray re-arms its alarm: the hold ends with the cooldown


def test_scale_in_waits_for_the_longer_cooldown_after_any_scaling():
    # Given a scale-in 2 minutes ago (scaleInCooldownSeconds=180, the default)
    decision = plan(PlanInput(spec(), 0, 5, now=T0, last_scale_in_at=T0 - timedelta(minutes=2)))
    # Then no further scale-in yet
    assert decision.action == "hold"
    assert "scale-in cooldown" in decision.reason
    # Nor 2 minutes after a scale-out (the longer scale-in cooldown runs from any scaling)
    after_out = plan(PlanInput(spec(), 0, 5, now=T0, last_scale_out_at=T0 - timedelta(minutes=2)))
    assert after_out.action == "hold"
    assert after_out.waiting
    # And after 3 minutes it removes one
    later = plan(PlanInput(spec(), 0, 5, now=T0, last_scale_in_at=T0 - timedelta(minutes=3)))
    assert (later.action, later.desired_controllers) == ("scale-in", 4)


def test_nothing_changes_while_a_controller_is_in_flight():
    # Given a controller bootstrapping / When demand needs more / Then it holds and says why
    decision = plan(PlanInput(spec(), 612_345, 2, in_flight=1))
    assert decision.action == "hold"
    assert "bootstrapping or draining" in decision.reason
    assert decision.waiting


def test_a_hold_with_nothing_to_wait_for_is_not_waiting():
    # Demand served / at minControllers / at maxControllers: nothing will change by waiting
    assert not plan(PlanInput(spec(), 100_000, 2)).waiting
    assert not plan(PlanInput(spec(), 0, 2)).waiting
    assert not plan(PlanInput(spec(), 50_000_000, 8)).waiting


def test_a_rising_trend_scales_out_ahead_of_demand():
    # Given demand rising 20,000 IOPS a minute, now at 300,000 (2 controllers serve 364,000)
    recent = [200_000 + 20_000 * i for i in range(5)]
    # When planned with a 10-minute lead
    decision = plan(PlanInput(spec(), 300_000, 2, recent_demand=recent, lead_minutes=10))
    # Then it plans for 500,000 IOPS (3 controllers) and says so
    assert decision.needed_controllers == 2
    assert decision.forecast_iops == pytest.approx(500_000)
    assert (decision.action, decision.desired_controllers) == ("scale-out", 3)
    assert "demand rising 20,000 IOPS/min" in decision.reason


def test_a_single_step_is_not_extrapolated():
    # Given a flat demand that just stepped up
    decision = plan(PlanInput(spec(), 900_000, 2, recent_demand=[200_000] * 5, lead_minutes=10))
    # Then it scales out for the step itself, not for a runaway trend
    assert decision.desired_controllers == controllers_needed(900_000, 260_000, 0.7) == 5


def test_a_run_the_high_alarm_did_not_start_adds_nothing_for_one_minute_above_target():
    # Given 3 controllers at a steady 480,000 IOPS (3 at target), then one minute at 560,000
    # (4 at target), in a run the low alarm or the look-ahead started
    steady = [480_000.0] * 10
    decision = plan(PlanInput(spec(), 560_000, 3, recent_demand=steady, by_high_alarm=False))
    # Then it holds, saying the minute is not yet what the high alarm answers
    assert decision.needed_controllers == 4
    assert (decision.action, decision.desired_controllers) == ("hold", 3)
    assert "one minute above target" in decision.reason
    # And once the minute before was above target too, the same run scales out
    held = plan(PlanInput(spec(), 560_000, 3, recent_demand=[*steady, 550_000], by_high_alarm=False))
    assert (held.action, held.desired_controllers) == ("scale-out", 4)
    # And at maxControllers the hold is the bound's, not the minute's, and says no such thing
    capped = plan(PlanInput(spec(max_controllers=3), 560_000, 3, recent_demand=steady, by_high_alarm=False))
    assert capped.action == "hold"
    assert "one minute above target" not in capped.reason
    # And a run the high alarm started answers the current minute (its datapoints confirmed it)
    alarmed = plan(PlanInput(spec(), 560_000, 3, recent_demand=steady))
    assert (alarmed.action, alarmed.desired_controllers) == ("scale-out", 4)


def test_scale_in_waits_for_the_recent_peak_and_the_headroom():
    # Given 4 controllers, a quiet minute now but a peak 10 minutes ago that needs 4
    recent = [700_000] + [100_000] * 9
    decision = plan(PlanInput(spec(), 100_000, 4, recent_demand=recent))
    # Then no scale-in, and the reason names the recent peak
    assert decision.action == "hold"
    assert "recent peak 700,000" in decision.reason
    # And with headroom 0.8, 3 controllers at 520,000 IOPS (> 0.8 x 546,000) do not scale in either
    margin = plan(PlanInput(spec(), 520_000, 4, recent_demand=[520_000] * 3, scale_in_headroom=0.8))
    assert margin.action == "hold"
    assert "targetUtilisation x 0.8" in margin.reason


def test_sustained_demand_is_the_peak_of_the_last_sustained_minutes_only():
    # Given 4 controllers, a peak 10 minutes ago and 9 quiet minutes since
    recent = [700_000] + [100_000] * 9
    # When the sustained window is the last 5 minutes, this one included (the low alarm's window)
    decision = plan(PlanInput(spec(), 100_000, 4, recent_demand=recent, sustained_minutes=5))
    # Then the old peak no longer holds the scale-in: straight to what the window needs (min 2)
    assert (decision.action, decision.desired_controllers) == ("scale-in", 2)
    assert decision.sustained_iops == 100_000
    # And with all 10 samples it does
    assert plan(PlanInput(spec(), 100_000, 4, recent_demand=recent)).action == "hold"


def test_decision_with_every_input_is_json():
    decision = plan(
        PlanInput(
            spec(),
            612_345,
            2,
            now=T0,
            last_scale_out_at=T0 - timedelta(hours=1),
            last_scale_in_at=T0 - timedelta(hours=2),
            recent_demand=[600_000.0] * 3,
        )
    )
    payload = json.loads(json.dumps(decision.as_dict()))
    assert payload["last_scale_in_at"] == (T0 - timedelta(hours=2)).isoformat()
    assert payload["recent_samples"] == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"in_flight": -1}, "in_flight"),
        ({"recent_demand": [1.0, math.nan]}, "recent demand"),
        ({"lead_minutes": -1.0}, "lead_minutes"),
        ({"scale_in_headroom": 0.0}, "scale_in_headroom"),
        ({"sustained_minutes": 0}, "sustained_minutes"),
    ],
)
def test_bad_keyword_inputs_are_rejected(kwargs: dict[str, Any], message: str):
    with pytest.raises(ValueError, match=message):
        plan(PlanInput(spec(), 0, 2, **kwargs))


recent_demands = st.lists(st.floats(0.0, 5_000_000.0, allow_nan=False, allow_subnormal=False), max_size=15)
ages = st.one_of(st.none(), st.integers(0, 3_600).map(lambda s: T0 - timedelta(seconds=s)))
scaling_times = st.lists(st.integers(0, 5_400).map(lambda s: T0 - timedelta(seconds=s)), max_size=9)


@st.composite
def contexts(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "now": T0,
        "last_scale_out_at": draw(ages),
        "last_scale_in_at": draw(ages),
        "in_flight": draw(st.integers(0, 3)),
        "recent_demand": draw(recent_demands),
        "recent_scalings": draw(scaling_times),
        "lead_minutes": draw(st.floats(0.0, 30.0)),
        "scale_in_headroom": draw(st.floats(0.5, 1.0)),
        "sustained_minutes": draw(st.one_of(st.none(), st.integers(1, 20))),
    }


@given(array=specs(), demand=demands, current=running, context=contexts())
def test_with_any_context_desired_stays_within_min_max_and_16(
    array: ArraySpec, demand: float, current: int, context: dict[str, Any]
):
    decision = plan(PlanInput(array, demand, current, **context))
    assert decision.desired_controllers <= MULTI_ATTACH_LIMIT
    if decision.action != "hold":
        assert array.min_controllers <= decision.desired_controllers <= array.max_controllers
    json.dumps(decision.as_dict())


@given(array=specs(), demand=demands, data=st.data(), context=contexts())
def test_with_any_context_scale_in_serves_every_minute_of_its_window(
    array: ArraySpec, demand: float, data: st.DataObject, context: dict[str, Any]
):
    current = data.draw(st.integers(0, array.max_controllers), label="current")
    decision = plan(PlanInput(array, demand, current, **context))
    if decision.action == "scale-in":
        recent, minutes = context["recent_demand"], context["sustained_minutes"]
        if not recent:
            # one minute proves no collapse: one controller at a time
            assert decision.desired_controllers == current - 1
        else:
            # straight down, but never below what any minute of the window needs at the margin
            window = recent if minutes is None else recent[max(0, len(recent) - minutes + 1) :]
            peak = max([*window, demand])
            needs = controllers_needed(
                peak, array.per_controller_iops, array.target_utilisation * context["scale_in_headroom"]
            )
            assert decision.desired_controllers >= min(needs, array.max_controllers)
            assert decision.desired_controllers < current
        assert decision.desired_controllers >= decision.needed_controllers
        assert decision.desired_controllers >= array.min_controllers


@given(array=specs(), demand=demands, current=running, context=contexts())
def test_cooldowns_are_respected(array: ArraySpec, demand: float, current: int, context: dict[str, Any]):
    decision = plan(PlanInput(array, demand, current, **context))
    since_out = (T0 - context["last_scale_out_at"]).total_seconds() if context["last_scale_out_at"] else None
    since_in = (T0 - context["last_scale_in_at"]).total_seconds() if context["last_scale_in_at"] else None
    if decision.action == "scale-out" and since_out is not None:
        assert since_out >= array.scale_out_cooldown_seconds
    if decision.action == "scale-in" and current <= array.max_controllers:
        for since in (since_out, since_in):
            if since is not None:
                assert since >= array.scale_in_cooldown_seconds


@given(array=specs(), demand=demands, data=st.data(), context=contexts())
def test_no_change_while_in_flight(
    array: ArraySpec, demand: float, data: st.DataObject, context: dict[str, Any]
):
    current = data.draw(st.integers(0, array.max_controllers), label="current")
    decision = plan(
        PlanInput(array, demand, current, **{**context, "in_flight": data.draw(st.integers(1, 16))})
    )
    assert decision.action == "hold"
    assert decision.desired_controllers == current


def test_a_rising_trend_that_holds_a_scale_in_says_so() -> None:
    # (found by the property below: the trend kept 2 controllers the current demand would not
    # need, and the reason did not say which rule held the scale-in)
    array = spec(min_controllers=1, max_controllers=2, per_controller_iops=1000, target_utilisation=0.25)
    decision = plan(PlanInput(array, 0.0, 2, recent_demand=[0.0, 9.0, 93.0], lead_minutes=30.0))
    assert plan(PlanInput(array, 0.0, 2)).action == "scale-in"
    assert decision.action == "hold"
    assert "no scale-in: the rising demand needs 2 within 30 min" in decision.reason


@given(array=specs(), demand=demands, current=running, context=contexts())
def test_every_rule_that_held_a_change_is_in_the_reason(
    array: ArraySpec, demand: float, current: int, context: dict[str, Any]
):
    decision = plan(PlanInput(array, demand, current, **context))
    plain = plan(PlanInput(array, demand, current))
    if decision.action == "hold" and plain.action != "hold":
        assert any(
            word in decision.reason
            for word in (
                "cooldown",
                "bootstrapping or draining",
                "recent peak",
                "targetUtilisation x",
                "rising demand",
                "hysteresis after a reversal",
            )
        ), (decision.reason, demand, current, context)


# ---------------------------------------------------------------- bounded churn (issue #18)


def test_a_scale_in_waits_after_a_reversal_and_says_so():
    # Given a scale-in at T0-12 min that a scale-out undid 4 minutes later (a flap)
    clocks = {"last_scale_in_at": T0 - timedelta(minutes=12), "last_scale_out_at": T0 - timedelta(minutes=8)}
    # When demand falls again: the cooldowns are over, but the hysteresis holds the scale-in
    decision = plan(PlanInput(spec(), 0, 5, now=T0, **clocks))
    assert decision.action == "hold"
    assert decision.waiting
    assert "hysteresis after a reversal" in decision.reason
    assert f"{(SETTLE_MINUTES - 8) * 60}s left" in decision.reason
    # Then once SETTLE_MINUTES have passed since the scale-out it scales in
    later = plan(PlanInput(spec(), 0, 5, now=T0 + timedelta(minutes=SETTLE_MINUTES - 8), **clocks))
    assert later.action == "scale-in"


def test_a_scale_out_long_after_the_last_scale_in_is_no_reversal():
    clocks = {
        "last_scale_in_at": T0 - timedelta(minutes=12 + REVERSAL_MINUTES),
        "last_scale_out_at": T0 - timedelta(minutes=8),
    }
    assert plan(PlanInput(spec(), 0, 5, now=T0, **clocks)).action == "scale-in"
    # nor does the hysteresis ever hold a scale-out
    assert settle_left(T0, T0 - timedelta(minutes=1), T0 - timedelta(minutes=2)) > 0
    assert (
        plan(
            PlanInput(
                spec(),
                612_345,
                2,
                now=T0,
                last_scale_out_at=T0 - timedelta(minutes=2),
                last_scale_in_at=T0 - timedelta(minutes=3),
            )
        ).action
        == "scale-out"
    )


@settings(max_examples=40, deadline=None)
@given(
    levels=st.lists(st.floats(0.0, 3_000_000.0), min_size=4, max_size=12),
    hold=st.integers(1, 30),
)
def test_replayed_on_any_demand_an_array_flaps_at_most_once_per_settle(levels: list[float], hold: int):
    # Given any demand (levels held ``hold`` minutes each, replayed through the deployed path)
    demand = [level for level in levels for _ in range(hold)] * 2
    result = simulate_planner(default_spec(), demand, trigger="alarms-rearmed")
    # Then a scale-in that follows a reversal comes SETTLE_MINUTES after its scale-out at least
    decisions = result.decisions
    for before, out, after in zip(decisions, decisions[1:], decisions[2:], strict=False):
        reversal = (
            before.action == "scale-in"
            and out.action == "scale-out"
            and _at(out) - _at(before) <= timedelta(minutes=REVERSAL_MINUTES)
        )
        if reversal and after.action == "scale-in":
            assert _at(after) - _at(out) >= timedelta(minutes=SETTLE_MINUTES)
    # so the flaps in any hour are bounded
    assert result.reversals <= len(demand) / SETTLE_MINUTES + 1


def _at(decision: ScaleDecision) -> datetime:
    assert decision.now is not None
    return datetime.fromisoformat(decision.now)
