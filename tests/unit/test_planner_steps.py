"""The planner's steps, each against the rule it applies: properties over any valid input."""

from dataclasses import replace
from datetime import timedelta
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from tests.unit.test_planner import T0, contexts, demands, running, spec, specs
from vsa_core.arrays.capacity import deliverable_iops
from vsa_core.arrays.spec import MULTI_ATTACH_LIMIT
from vsa_core.scaling.forecast import Floor
from vsa_core.scaling.planner import (
    AHEAD_UTILISATION,
    CHURN_LIMIT,
    CHURN_WINDOW_MINUTES,
    PARTIAL_SHARE,
    REVERSAL_MINUTES,
    SETTLE_MINUTES,
    Assessment,
    PlanInput,
    ahead_wait,
    assess,
    choose_move,
    churn_left,
    climb_hold,
    demand_ahead,
    fall_allows,
    fall_in_force,
    fall_wait,
    floor_decided,
    partial_wait,
    plan,
    scale_in_step,
)
from vsa_core.scaling.planner import controllers_needed as needed_at

cooldowns = st.one_of(st.sampled_from([0, 60, 180, 300, 900]), st.integers(0, 3_600))
floors = st.one_of(
    st.none(),
    st.builds(
        Floor,
        controllers=st.integers(0, 20),
        iops=st.floats(0.0, 10_000_000.0),
        period=st.sampled_from([None, "hourly", "daily", "weekly"]),
        reason=st.just("forecast"),
        horizon_minutes=st.just(15),
        ceiling_controllers=st.integers(0, 20),
        ceiling_iops=st.floats(0.0, 10_000_000.0),
    ),
)


@st.composite
def inputs(draw: st.DrawFn) -> PlanInput:
    """Any valid input: every field drawn, cooldowns and volumes and the forecast floor included."""
    spec = draw(specs()).model_copy(
        update={
            "scale_out_cooldown_seconds": draw(cooldowns),
            "scale_in_cooldown_seconds": draw(cooldowns),
        }
    )
    context: dict[str, Any] = draw(contexts())
    return PlanInput(
        spec,
        draw(demands),
        draw(running),
        **context,
        volume_iops=draw(st.one_of(st.none(), st.integers(1, 20_000_000))),
        forecast=draw(floors),
    )


@given(inp=inputs())
def test_bounds_never_reach_past_max_nor_the_attach_limit(inp: PlanInput):
    bounds = assess(inp).bounds
    assert bounds.floor == inp.spec.min_controllers
    assert bounds.useful <= bounds.ceiling <= min(inp.spec.max_controllers, MULTI_ATTACH_LIMIT)
    assert (bounds.by_volumes is None) == (inp.volume_iops is None)
    assert bounds.by_volumes is None or bounds.by_volumes >= 1


@given(inp=inputs())
def test_a_scale_in_keeps_what_a_scale_out_would_ask_for(inp: PlanInput):
    needs = assess(inp).needs
    assert needs.needed <= needs.needed_out <= needs.needed_in
    assert needs.trend is None or needs.trend >= inp.demand_iops
    assert needs.sustained is None or needs.sustained >= inp.demand_iops


@given(inp=inputs())
def test_the_scale_in_window_is_the_latest_samples_within_sustained_minutes(inp: PlanInput):
    window = list(assess(inp).needs.window)
    recent = list(inp.recent_demand)
    assert window == recent[len(recent) - len(window) :]
    if inp.sustained_minutes is not None:
        assert len(window) <= inp.sustained_minutes - 1


@given(inp=inputs())
def test_targets_stay_within_min_and_the_useful_top(inp: PlanInput):
    a = assess(inp)
    top = max(a.bounds.floor, a.bounds.useful)
    assert a.bounds.floor <= a.targets.out_target <= a.targets.in_target <= top
    assert a.targets.by_forecast <= a.bounds.useful


def _moved(a: Assessment) -> tuple[str, int]:
    move = choose_move(a)
    return move.action, move.desired


@given(inp=inputs())
def test_a_change_lands_within_min_and_max_and_agrees_with_its_action(inp: PlanInput):
    a = assess(inp)
    action, desired = _moved(a)
    current = inp.current_controllers
    assert {"scale-out": desired > current, "scale-in": desired < current, "hold": desired == current}[action]
    if action != "hold":
        assert a.bounds.floor <= desired <= a.bounds.ceiling


@given(inp=inputs())
def test_a_change_never_goes_below_the_forecast_floor_nor_the_current_demand(inp: PlanInput):
    a = assess(inp)
    action, desired = _moved(a)
    if action != "hold":
        assert desired >= a.targets.by_forecast
        assert desired >= max(a.bounds.floor, min(a.needs.needed, a.bounds.useful))


@given(inp=inputs())
def test_a_cooldown_never_lets_a_scaling_through_early(inp: PlanInput):
    action, _ = _moved(assess(inp))
    assert inp.now is not None  # contexts() always gives the clock
    since_out = None if inp.last_scale_out_at is None else inp.now - inp.last_scale_out_at
    since_in = None if inp.last_scale_in_at is None else inp.now - inp.last_scale_in_at
    in_cooldown = timedelta(seconds=inp.spec.scale_in_cooldown_seconds)
    if since_out is not None and since_out < timedelta(seconds=inp.spec.scale_out_cooldown_seconds):
        assert action != "scale-out"
    if any(since is not None and since < in_cooldown for since in (since_out, since_in)):
        assert action != "scale-in"


@given(
    inp=inputs(),
    since_out=st.integers(0, SETTLE_MINUTES * 60 - 1),
    undo=st.integers(0, REVERSAL_MINUTES * 60),
)
def test_no_scale_in_while_a_reversal_settles(inp: PlanInput, since_out: int, undo: int):
    # Given a scale-out within REVERSAL_MINUTES after the last scale-in (it undid it), less than
    # SETTLE_MINUTES ago
    out_at = T0 - timedelta(seconds=since_out)
    reversed_input = replace(inp, last_scale_out_at=out_at, last_scale_in_at=out_at - timedelta(seconds=undo))
    # Then no scale-in, whatever the demand and the cooldowns
    assert _moved(assess(reversed_input))[0] != "scale-in"


@given(
    inp=inputs(),
    ages=st.lists(st.integers(0, CHURN_WINDOW_MINUTES * 60 - 1), min_size=CHURN_LIMIT, max_size=12),
)
def test_no_scale_in_is_the_seventh_change_within_an_hour(inp: PlanInput, ages: list[int]):
    # Given CHURN_LIMIT changes of the count or more in the last hour, and a count not above
    # maxControllers (a lowered maximum is the spec's step, not the demand's)
    churned = replace(inp, recent_scalings=[T0 - timedelta(seconds=s) for s in ages])
    a = assess(churned)
    # Then no scale-in; and a scale-out is never held by it
    if inp.current_controllers <= a.bounds.ceiling:
        assert _moved(a)[0] != "scale-in"
    calm = _moved(assess(replace(inp, recent_scalings=())))
    assert (calm[0] == "scale-out") == (_moved(a)[0] == "scale-out")
    if calm[0] == "scale-out":
        assert _moved(a) == calm


def test_the_churn_limit_holds_until_enough_changes_have_left_the_hour():
    hour = timedelta(minutes=CHURN_WINDOW_MINUTES)
    changes = [T0 - timedelta(minutes=m) for m in (70, 55, 50, 40, 30, 20, 10, 5)]
    # seven of them within the hour: held until the second oldest of those (55 min ago) leaves
    assert churn_left(T0, changes) == (T0 - timedelta(minutes=50) + hour - T0).total_seconds() == 600
    assert churn_left(T0, changes[1:7]) == 300  # six within the hour: until the oldest leaves
    assert churn_left(T0, changes[2:7]) == 0  # five within: a scale-in may be the sixth
    assert churn_left(None, changes) == 0  # no clock, no limit
    assert churn_left(T0, [T0 + timedelta(minutes=1)] * 8) == 0  # a change "after now" is not counted


@given(inp=inputs(), in_flight=st.integers(1, 16))
def test_nothing_changes_while_a_controller_is_in_flight(inp: PlanInput, in_flight: int):
    move = choose_move(assess(replace(inp, in_flight=in_flight)))
    assert (move.action, move.desired) == ("hold", inp.current_controllers)


@given(inp=inputs())
def test_waiting_is_a_hold_of_a_change_the_targets_ask_for(inp: PlanInput):
    a = assess(inp)
    move = choose_move(a)
    current = inp.current_controllers
    asked = a.targets.out_target > current or a.targets.in_target < current
    if move.waiting:
        assert move.action == "hold"
        assert asked
    elif move.action == "hold":
        assert not asked


@given(inp=inputs())
def test_a_step_ahead_waits_only_while_the_running_count_delivers_the_demand_ahead(inp: PlanInput):
    a = assess(inp)
    current = inp.current_controllers
    held = ahead_wait(a)
    if held is None:
        return
    # Only a step the current demand does not need, with a cycle's ceiling bounding what comes,
    # and what comes within AHEAD_UTILISATION of what the running count delivers
    ahead = demand_ahead(inp, a.needs)
    assert a.needs.needed <= current
    assert inp.forecast is not None
    assert inp.forecast.ceiling_iops > 0
    assert ahead is not None
    delivers = deliverable_iops(current, inp.spec.per_controller_iops, inp.volume_iops)
    assert ahead <= AHEAD_UTILISATION * delivers
    assert ahead >= inp.demand_iops


@given(inp=inputs())
# a maxControllers lowered below the running count: its step never waits (a draw found it)
@example(inp=PlanInput(spec(1, 4, 1000, 0.5), 0.0, 5, now=T0, recent_demand=(2_000.0,)))
def test_a_scale_in_waits_for_the_window_only_when_it_would_shed_less_than_the_share_of_the_fall(
    inp: PlanInput,
):
    a = assess(inp)
    current = inp.current_controllers
    if not a.targets.in_target < current:
        return
    step = scale_in_step(a)
    held = partial_wait(a, step)
    allows = fall_allows(a)
    # Never below what a scale-in may reach: the floor, the forecast floor, the rising trend
    assert allows >= max(a.bounds.floor, a.targets.by_forecast)
    if held is None:
        assert (
            not inp.recent_demand
            or current > a.bounds.ceiling
            or allows >= step
            or current - step >= PARTIAL_SHARE * (current - allows)
        )
    else:
        # Only a window-bound step, with the current demand freeing more than twice as much, and
        # never one a lowered maxControllers asks for
        assert inp.recent_demand
        assert current <= a.bounds.ceiling
        assert allows < step < current
        assert current - step < PARTIAL_SHARE * (current - allows)
        assert choose_move(a).waiting


@st.composite
def falling_inputs(draw: st.DrawFn) -> PlanInput:
    """Any valid input whose forecast carries a short cycle's fall, in force or not."""
    inp = draw(inputs())
    fall_controllers = draw(st.integers(1, 4))
    # in force (``Floor.in_force``), the ceiling is the level the cycles kept after the fall
    falling = draw(st.booleans())
    ceiling = fall_controllers if falling else draw(st.integers(0, 20))
    start = T0 + timedelta(minutes=draw(st.integers(-10, 2)))
    floor = Floor(
        draw(st.integers(0, 20)),
        draw(st.floats(0.0, 10_000_000.0)),
        "cycles of 60 min",
        "forecast",
        15,
        ceiling_controllers=ceiling,
        ceiling_iops=draw(st.floats(0.0, 10_000_000.0)),
        fall_at=start.isoformat(),
        fall_controllers=fall_controllers,
        fall_iops=draw(st.floats(0.0, 10_000_000.0)),
        falling=falling,
    )
    if draw(st.booleans()):
        # a large array halfway down from a top: what a recurring fall under way looks like
        current = draw(st.integers(5, MULTI_ATTACH_LIMIT))
        top = current * inp.spec.per_controller_iops * inp.spec.target_utilisation
        inp = replace(inp, current_controllers=current, demand_iops=draw(st.floats(0.0, top)))
    if draw(st.booleans()):
        # a demand coming down: each recent minute above the next, the current one the lowest
        steps = draw(st.lists(st.floats(1_000.0, 2_000_000.0), min_size=1, max_size=6))
        recent = [inp.demand_iops + sum(steps[i:]) for i in range(len(steps))]
        inp = replace(inp, recent_demand=tuple(recent))
    return replace(inp, now=T0, forecast=floor)


_TOP = 260_000 * 0.7
# halfway down a fall in force from 12 to a level of 3, still falling: the step waits
_HALFWAY = PlanInput(
    spec(2, 16),
    6.5 * _TOP,
    12,
    now=T0 + timedelta(minutes=2),
    recent_demand=(11.5 * _TOP, 11.5 * _TOP, 11.5 * _TOP, 9 * _TOP),
    sustained_minutes=5,
    forecast=Floor(
        3, 2.9 * _TOP, "cycles of 60 min", "forecast", 10, 3, 2.9 * _TOP, T0.isoformat(), 3, 2.9 * _TOP, True
    ),
)


@given(inp=falling_inputs())
@example(inp=_HALFWAY)
def test_a_scale_in_waits_on_a_recurring_fall_only_while_it_is_under_way_and_above_the_level(inp: PlanInput):
    a = assess(inp)
    if not a.targets.in_target < inp.current_controllers:
        return
    step = scale_in_step(a)
    held = fall_wait(a, step)
    if inp is _HALFWAY:
        assert held is not None
    if held is None:
        return
    # Only once the fall is in force, the demand still falling, the step above the cycle's level
    # and the current demand at target still above it
    assert inp.forecast is not None
    assert inp.now is not None
    assert fall_in_force(inp)
    assert inp.forecast.falling
    assert a.needs.slope < 0
    level = max(a.bounds.floor, min(inp.forecast.fall_controllers, a.bounds.useful), a.targets.by_forecast)
    assert step > level
    assert needed_at(inp.demand_iops, inp.spec.per_controller_iops, inp.spec.target_utilisation) > level
    assert choose_move(a).waiting


@given(inp=inputs())
def test_the_floor_decides_only_when_there_is_one(inp: PlanInput):
    a = assess(inp)
    if inp.forecast is None:
        assert not floor_decided(a, choose_move(a))


@given(inp=inputs())
def test_the_steps_make_the_decision_plan_returns(inp: PlanInput):
    a = assess(inp)
    move = choose_move(a)
    decision = plan(inp)
    assert (decision.action, decision.desired_controllers, decision.waiting) == (
        move.action,
        move.desired,
        move.waiting,
    )
    assert decision.needed_controllers == a.needs.needed
    assert decision.under_provisioned == a.under


@given(inp=inputs())
def test_a_scale_in_keeps_the_ceiling_only_while_the_cycle_climbs(inp: PlanInput):
    a = assess(inp)
    kept = climb_hold(inp, a.bounds)
    assert kept == a.targets.by_climb
    # Never more than runs (it keeps, never adds), nor beyond the useful top
    assert kept <= min(inp.current_controllers, max(a.bounds.floor, a.bounds.useful))
    if kept:
        # only with a cycle's ceiling, and what every recent cycle reached ahead above the demand now
        assert inp.forecast is not None
        assert inp.forecast.ceiling_controllers >= kept
        assert inp.forecast.iops > inp.demand_iops
    action, desired = _moved(a)
    if action == "scale-in":
        assert desired >= kept
