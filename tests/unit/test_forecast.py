"""The forecast floor (``vsa_core.scaling.forecast``, pure) and how the planner uses it."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from tests.specs import SPREAD
from vsa_core.arrays.capacity import controllers_needed
from vsa_core.arrays.spec import ArraySpec
from vsa_core.scaling import rules
from vsa_core.scaling.forecast import Floor, floor_from_minutes, lookahead, lookahead_runs
from vsa_core.scaling.planner import PlanInput, plan

NOW = datetime(2026, 3, 2, 12, 25, tzinfo=UTC)  # a Monday, 25 minutes into the hour
SIZING = {
    "horizon_minutes": 10,
    "per_controller_iops": 260_000,
    "target_utilisation": 0.7,
    "min_controllers": 2,
}
SPEC = ArraySpec(arrayId="demo", availabilityZone="us-east-1a", **SPREAD, minControllers=2, maxControllers=16)


def hourly(hours: int, surge: float = 1_500_000.0, skip: int | None = None) -> list[float | None]:
    """``hours`` hours of minutes ending at NOW: 100k IOPS, and ``surge`` from minute 30 to 44 of
    every hour (none in the hour ``skip`` hours back)."""
    start = NOW - timedelta(hours=hours)
    out: list[float | None] = []
    for m in range(hours * 60):
        when = start + timedelta(minutes=m)
        back = (NOW - when - timedelta(minutes=1)) // timedelta(hours=1)
        out.append(surge if 30 <= when.minute < 45 and back != skip else 100_000.0)
    return out


def test_without_enough_history_the_floor_is_off_and_says_so():
    fl = floor_from_minutes(hourly(2), NOW, **SIZING)
    assert not fl.on
    assert fl.controllers == 0
    assert "too little for a pattern" in fl.reason
    assert "no cycle of 30 min to 6 h repeats" in fl.reason  # an hourly one needs 3 hours
    assert "daily needs 3 x 1 d" in fl.reason
    brief = floor_from_minutes(hourly(1), NOW, **SIZING)
    assert "a cycle of 30 min to 6 h needs 3 x the cycle" in brief.reason


def test_an_hourly_surge_that_recurred_three_times_is_a_floor_ahead_of_it():
    # Given 3 hours where demand surged to 1.5M at :30 each hour; now :25, the surge 5 min away
    fl = floor_from_minutes(hourly(3), NOW, **SIZING)
    # Then the floor is what 1.5M needs at 70% of 260k: 9 controllers, from the hourly pattern
    assert fl.on
    assert (fl.period, fl.controllers) == ("hourly", 9)
    assert "each of the last 3 hours" in fl.reason
    # and well before the surge (the horizon does not reach it) there is none
    early = floor_from_minutes(hourly(4)[:-15], NOW - timedelta(minutes=15), **SIZING)
    assert not early.on
    assert "nothing recurring ahead" in early.reason


def test_a_surge_that_skipped_a_cycle_is_not_recurring():
    fl = floor_from_minutes(hourly(3, skip=1), NOW, **SIZING)
    assert not fl.on


def test_missing_minutes_recur_nothing():
    history = hourly(3)
    # the surge two hours back (10:30-10:44; the history ends at 12:24) has no data
    history[-120 + 5 : -120 + 20] = [None] * 15
    assert not floor_from_minutes(history, NOW, **SIZING).on


def test_a_pattern_that_said_more_than_came_is_off_for_now():
    # Given 4 hours of a 1.5M plateau that ended 15 minutes ago (an hourly "pattern" of a plateau)
    history: list[float | None] = [1_500_000.0] * (4 * 60 - 15) + [100_000.0] * 15
    fl = floor_from_minutes(history, NOW, **SIZING)
    # Then the hourly pattern is off: it said 1.5M for the last minutes, where 100k came
    assert not fl.on
    assert "no pattern holds now" in fl.reason


def test_the_planner_scales_out_to_the_floor_and_says_the_floor_set_it():
    fl = floor_from_minutes(hourly(3), NOW, **SIZING)
    decision = plan(PlanInput(SPEC, 100_000, 2, forecast=fl))
    assert (decision.action, decision.desired_controllers) == ("scale-out", 9)
    assert decision.floor_set
    assert decision.forecast_floor == 9
    assert "the floor set the count" in decision.reason
    # without it, the demand alone holds at 2
    assert plan(PlanInput(SPEC, 100_000, 2)).action == "hold"


def test_scale_in_respects_the_floor_and_a_hold_at_it_is_at_target():
    fl = floor_from_minutes(hourly(3), NOW, **SIZING)
    held = plan(PlanInput(SPEC, 100_000, 9, forecast=fl, recent_demand=[100_000.0] * 5))
    assert held.action == "hold"
    assert held.floor_set
    assert rules.at_target(held)  # re-armed after the long pause: nothing to do until the floor ends
    assert plan(PlanInput(SPEC, 100_000, 9, recent_demand=[100_000.0] * 5)).action == "scale-in"
    # above the floor, scale-in goes on, straight down to the floor and no further
    above = plan(PlanInput(SPEC, 100_000, 11, forecast=fl, recent_demand=[100_000.0] * 5))
    assert (above.action, above.desired_controllers) == ("scale-in", 9)


def test_a_dip_part_way_up_a_recurring_climb_sheds_nothing_the_climb_takes_back():
    # Given a cycle every 90 min whose last three reached 2.36M IOPS (13 controllers) in the
    # coming minutes, one of them 2.47M (14: the ceiling), and 14 running, ordered on the trend
    climb = Floor(13, 2_360_000.0, "every 90 min", "forecast floor 13", 10, 14, 2_470_000.0)
    dip = [2_070_000.0, 2_030_000.0, 2_030_000.0, 2_030_000.0]
    # When the demand dips to 2.03M part way up (the low alarm's window would let 14 -> 13)
    held = plan(PlanInput(SPEC, 2_030_000, 14, forecast=climb, recent_demand=dip, sustained_minutes=5))
    # Then it keeps the ceiling, saying why (the climb would take the controller back minutes later)
    assert (held.action, held.desired_controllers) == ("hold", 14), held.reason
    assert held.floor_set
    assert "still climbing" in held.reason
    assert not rules.at_target(held)  # re-armed after one period: the low alarm is heard again
    # and without a ceiling (no cycle holds now) the same dip scales in to what the floor keeps
    flat = Floor(13, 2_360_000.0, "every 90 min", "forecast floor 13", 10)
    shed = plan(PlanInput(SPEC, 2_030_000, 14, forecast=flat, recent_demand=dip, sustained_minutes=5))
    assert (shed.action, shed.desired_controllers) == ("scale-in", 13), shed.reason
    # and once the demand has reached what recurred (the climb is over), the ceiling keeps nothing:
    # it scales in to what the window's minutes need
    over = Floor(12, 2_000_000.0, "every 90 min", "forecast floor 12", 10, 14, 2_470_000.0)
    after = plan(PlanInput(SPEC, 2_030_000, 14, forecast=over, recent_demand=dip, sustained_minutes=5))
    assert (after.action, after.desired_controllers) == ("scale-in", 12), after.reason
    assert "still climbing" not in after.reason


def test_an_off_floor_changes_nothing():
    fl = floor_from_minutes(hourly(2), NOW, **SIZING)
    assert (
        plan(PlanInput(SPEC, 100_000, 4, forecast=fl)).desired_controllers
        == plan(PlanInput(SPEC, 100_000, 4)).desired_controllers
    )
    assert not plan(PlanInput(SPEC, 100_000, 4, forecast=fl)).floor_set


def test_the_floor_looks_at_its_horizon_and_not_a_bucket_beyond():
    # Given 3 hours of an hourly surge from minute 30 to 44, and NOW at minute 25
    history = hourly(3)
    # When the horizon ends before the surge (5 min: minutes 25-29), the floor is off
    assert not floor_from_minutes(history, NOW, **{**SIZING, "horizon_minutes": 5}).on
    # And when it reaches the surge's first minute (6 min: minutes 25-30), the floor is the surge's
    reached = floor_from_minutes(history, NOW, **{**SIZING, "horizon_minutes": 6})
    assert reached.on
    assert reached.iops == 1_500_000.0


# --- cycles that are not hourly, and the ceiling (issue #35: periodic ramps) ------------------
def cyclic(
    end: datetime, minutes: int, period: int, surge: tuple[int, int], peak: float = 1_500_000.0
) -> list[float | None]:
    """``minutes`` minutes ending the minute before ``end``: 100k IOPS, and a ramp up to ``peak``
    over minutes [surge[0], surge[1]) of every ``period`` minutes counted from midnight."""
    start = end - timedelta(minutes=minutes)
    out: list[float | None] = []
    for m in range(minutes):
        when = start + timedelta(minutes=m)
        into = (when.hour * 60 + when.minute) % period
        low, high = surge
        ramp = (into - low + 1) / (high - low) if low <= into < high else 0.0
        out.append(100_000.0 + (peak - 100_000.0) * ramp)
    return out


def test_a_ramp_every_90_minutes_is_found_and_floored_ahead():
    # Given 6 hours of a ramp to 1.5M over minutes 40-59 of every 90 (counted from midnight),
    # and now 12:05: 725 min since midnight, 5 min into the cycle's minute 35 (12:05 is 725 % 90 = 5)
    now = datetime(2026, 3, 2, 12, 35, tzinfo=UTC)  # 755 % 90 = 35: the ramp starts in 5 min
    fl = floor_from_minutes(cyclic(now, 6 * 60, 90, (40, 60)), now, **SIZING)
    # Then the 90-minute cycle sets the floor for what the ramp reaches within the horizon
    assert fl.period == "every 90 min"
    assert fl.on
    assert "each of the last 3 cycles of 90 min" in fl.reason
    # and the hourly cycle of the earlier rule would not have seen it: an hourly pattern of the
    # same history does not repeat
    assert fl.controllers >= 3


def test_after_the_cycles_fall_the_ceiling_is_the_quiet_demand_and_the_floor_is_off():
    # Given 3 hours of an hourly surge over minutes 30-44, now 12:45: the surge has just ended
    now = datetime(2026, 3, 2, 12, 45, tzinfo=UTC)
    fl = floor_from_minutes(cyclic(now, 3 * 60, 60, (30, 45)), now, **SIZING)
    # Then nothing recurs above minControllers ahead (the floor is off), but every one of the
    # last cycles stayed at 100k for the next 10 minutes: the ceiling needs 1 controller
    assert not fl.on
    assert (fl.ceiling_controllers, fl.ceiling_iops) == (1, 100_000.0)
    # and during the surge, the ceiling is what the surge reaches in the horizon (1.5M: 9)
    during = datetime(2026, 3, 2, 12, 35, tzinfo=UTC)
    assert floor_from_minutes(cyclic(during, 3 * 60, 60, (30, 45)), during, **SIZING).ceiling_controllers == 9


def test_a_flat_demand_repeats_at_every_period_and_has_no_cycle_and_no_ceiling():
    fl = floor_from_minutes([800_000.0] * (8 * 60), NOW, **SIZING)
    assert (fl.on, fl.ceiling_controllers) == (False, 0)
    assert "nothing recurring" in fl.reason
    assert "no cycle of 30 min to 6 h repeats" in fl.reason


def test_a_cycle_with_a_gap_ahead_has_no_ceiling():
    # Given the hourly surge with one hour's data missing at the coming minutes (12:45-12:55 an
    # hour back): a gap bounds nothing, so it must not let a scale-in shed to what the rest said
    now = datetime(2026, 3, 2, 12, 45, tzinfo=UTC)
    history = cyclic(now, 3 * 60, 60, (30, 45))
    history[-60:-50] = [None] * 10
    assert floor_from_minutes(history, now, **SIZING).ceiling_controllers == 0


def test_a_ceiling_the_last_minutes_went_above_is_off():
    # Given the hourly surge, but this hour's surge went to 3M where the earlier ones reached 1.5M
    now = datetime(2026, 3, 2, 12, 45, tzinfo=UTC)
    history = cyclic(now, 3 * 60, 60, (30, 45))
    history[-15:] = [3_000_000.0] * 15
    # Then the ceiling is off: the cycle does not bound the demand now
    assert floor_from_minutes(history, now, **SIZING).ceiling_controllers == 0


def test_the_planner_sheds_a_cycles_fall_at_once_and_only_once_it_has_come():
    now = datetime(2026, 3, 2, 12, 45, tzinfo=UTC)
    fl = floor_from_minutes(cyclic(now, 3 * 60, 60, (30, 45)), now, **SIZING)
    surge_minutes = [1_500_000.0] * 4
    # When the demand has fallen to 100k, with the surge still in the low alarm's window
    shed = plan(PlanInput(SPEC, 100_000, 9, forecast=fl, recent_demand=surge_minutes, sustained_minutes=5))
    # Then it scales straight in to minControllers (the ceiling needs 1)
    assert (shed.action, shed.desired_controllers) == ("scale-in", 2)
    # where without the forecast the recent peak holds it until the window has passed
    alone = plan(PlanInput(SPEC, 100_000, 9, recent_demand=surge_minutes, sustained_minutes=5))
    assert alone.action == "hold"
    # And while the demand is still high, the ceiling sheds nothing
    held = plan(PlanInput(SPEC, 1_500_000, 9, forecast=fl, recent_demand=surge_minutes, sustained_minutes=5))
    assert held.action == "hold"


def test_a_rising_trend_is_not_extrapolated_past_the_cycles_ceiling():
    # Given an hourly 10-minute ramp to 1.5M over minutes 30-39, and now 12:37, in its climb
    now = datetime(2026, 3, 2, 12, 37, tzinfo=UTC)
    fl = floor_from_minutes(cyclic(now, 4 * 60, 60, (30, 40)), now, **SIZING)
    rising = [520_000.0, 660_000.0, 800_000.0, 940_000.0, 1_080_000.0]
    # When demand climbs 140k a minute to 1.22M (the trend says 2.62M in 10 min: 15 controllers)
    alone = plan(PlanInput(SPEC, 1_220_000, 7, recent_demand=rising))
    capped = plan(PlanInput(SPEC, 1_220_000, 7, recent_demand=rising, forecast=fl))
    # Then the cycle's ceiling (the ramp's top, 1.5M: 9) bounds where the trend goes
    assert alone.desired_controllers == 15
    assert (fl.ceiling_iops, capped.desired_controllers) == (1_500_000.0, 9)


def test_a_step_ahead_of_the_demand_waits_while_the_running_count_delivers_what_the_cycle_brings():
    # Given a recurring cycle whose last cycles all reached 1.5M in the coming minutes (its floor
    # and its ceiling: 9 controllers at 182k), and a demand of 1.0M rising 10k a minute (the
    # trend says 1.1M in 10 min): served at target by 6, but the floor asks for 9
    fl = Floor(9, 1_500_000.0, "hourly", "forecast floor 9", 10, 9, 1_500_000.0)
    rising = [950_000.0, 960_000.0, 970_000.0, 980_000.0, 990_000.0]
    # When 7 run (1.82M at 100%: the 1.5M ahead is 82% of it, within 90%)
    held = plan(PlanInput(SPEC, 1_000_000, 7, recent_demand=rising, forecast=fl))
    # Then the scale-out waits (the next look steps, further up the climb) and says why
    assert (held.action, held.desired_controllers, held.waiting) == ("hold", 7, True)
    assert "scale-out to 9 waits: 7 controller(s) deliver the demand ahead (1,500,000 IOPS" in held.reason
    # And with 6 running (1.56M at 100%: 96%) it steps, to the floor
    stepped = plan(PlanInput(SPEC, 1_000_000, 6, recent_demand=rising, forecast=fl))
    assert (stepped.action, stepped.desired_controllers) == ("scale-out", 9)


def test_a_step_ahead_of_the_demand_waits_only_with_the_cycles_ceiling_and_within_its_trend():
    # Given the same demand and 7 running
    rising = [950_000.0, 960_000.0, 970_000.0, 980_000.0, 990_000.0]
    # When the floor holds but no cycle's ceiling does (a daily floor: nothing bounds what comes)
    daily = Floor(9, 1_500_000.0, "daily", "forecast floor 9", 10)
    # Then the floor brings its controllers now, as before
    assert plan(PlanInput(SPEC, 1_000_000, 7, recent_demand=rising, forecast=daily)).desired_controllers == 9
    # And when the demand's own trend runs past what 7 deliver within 90% (100k a minute: 2.0M
    # in 10 min), beyond the ceiling, the step is not held either
    fl = Floor(9, 1_500_000.0, "hourly", "forecast floor 9", 10, 9, 1_500_000.0)
    steep = [500_000.0, 600_000.0, 700_000.0, 800_000.0, 900_000.0]
    assert plan(PlanInput(SPEC, 1_000_000, 7, recent_demand=steep, forecast=fl)).action == "scale-out"
    # nor when the current demand already needs more than run (1.3M needs 8)
    assert plan(PlanInput(SPEC, 1_300_000, 7, recent_demand=rising, forecast=fl)).desired_controllers == 9


@given(
    ceiling=st.integers(min_value=1, max_value=16),
    demand=st.floats(min_value=0, max_value=4_000_000),
    current=st.integers(min_value=2, max_value=16),
    recent=st.lists(st.floats(min_value=0, max_value=4_000_000), max_size=5),
)
def test_a_ceiling_never_sheds_below_what_the_current_demand_needs(ceiling, demand, current, recent):
    # Whatever the cycle's ceiling says, a scale-in keeps what the demand now needs at target:
    # the ceiling sheds a fall that has come, never one still ahead
    fl = Floor(0, 0.0, None, "forecast off: nothing recurring ahead", 10, ceiling, ceiling * 182_000.0)
    decision = plan(
        PlanInput(SPEC, demand, current, forecast=fl, recent_demand=recent, scale_in_headroom=0.9)
    )
    if decision.action == "scale-in":
        kept = controllers_needed(demand, SPEC.per_controller_iops, SPEC.target_utilisation)
        assert decision.desired_controllers >= min(max(kept, SPEC.min_controllers), SPEC.max_controllers)


# --- the cycle's fall within the look-ahead period (issue #35: a fall shed within a minute) -----
def test_a_fall_in_the_coming_bucket_is_foreseen_with_what_comes_after_it():
    # Given 3 hours of an hourly surge over minutes 30-44, now 12:40: the demand falls at 12:45,
    # before the next look-ahead
    now = datetime(2026, 3, 2, 12, 40, tzinfo=UTC)
    fl = floor_from_minutes(cyclic(now, 3 * 60, 60, (30, 45)), now, **SIZING)
    # Then the ceiling over the horizon still holds the surge (9), and the fall is foreseen in
    # the bucket of the surge's last minutes (12:40-12:44) with the quiet demand after it (100k:
    # 1 controller): buckets of 5 minutes say in which the fall comes, not at which minute
    assert fl.ceiling_controllers == 9
    assert (fl.fall_at, fl.fall_controllers, fl.fall_iops) == ("2026-03-02T12:40:00+00:00", 1, 100_000.0)
    # while at 12:30, with the surge still to come, there is no fall before the next look-ahead
    early = datetime(2026, 3, 2, 12, 30, tzinfo=UTC)
    assert floor_from_minutes(cyclic(early, 3 * 60, 60, (30, 45)), early, **SIZING).fall_at is None


def test_a_fall_is_in_force_only_once_its_bucket_has_begun_and_the_demand_has_come_down():
    fl = Floor(9, 1.5e6, "hourly", "r", 10, 9, 1.5e6, "2026-03-02T12:45:00+00:00", 1, 100_000.0)
    top = [1_500_000.0] * 5
    before = datetime(2026, 3, 2, 12, 44, tzinfo=UTC)
    at = datetime(2026, 3, 2, 12, 46, tzinfo=UTC)
    # before its bucket, or in it with the demand still at the top: the floor as computed
    assert fl.in_force(before, 100_000.0, top) == fl
    assert fl.in_force(at, 1_450_000.0, top) == fl
    # in it with the demand down by more than the tolerance from the top: the fall's ceiling,
    # and a floor no higher
    fell = fl.in_force(at, 100_000.0, top)
    assert (fell.controllers, fell.ceiling_controllers, fell.ceiling_iops) == (1, 1, 100_000.0)
    # and it stays in force for the rest of the minutes the fall is read from, though the last
    # three minutes are already quiet (the top is read back to FALL_MINUTES before the bucket)
    later = datetime(2026, 3, 2, 12, 49, tzinfo=UTC)
    assert fl.in_force(later, 100_000.0, [1_500_000.0] * 3 + [100_000.0] * 4).ceiling_controllers == 1


def test_the_planner_sheds_the_fall_in_its_bucket_where_the_horizons_ceiling_held_it():
    now = datetime(2026, 3, 2, 12, 40, tzinfo=UTC)
    fl = floor_from_minutes(cyclic(now, 3 * 60, 60, (30, 45)), now, **SIZING)
    top = [1_500_000.0] * 4
    at = datetime(2026, 3, 2, 12, 46, tzinfo=UTC)
    as_stored = plan(PlanInput(SPEC, 100_000, 9, forecast=fl, recent_demand=top, sustained_minutes=5, now=at))
    in_force = fl.in_force(at, 100_000, top)
    shed = plan(
        PlanInput(SPEC, 100_000, 9, forecast=in_force, recent_demand=top, sustained_minutes=5, now=at)
    )
    assert as_stored.action == "hold"  # the horizon's ceiling (the surge) holds every controller
    assert (shed.action, shed.desired_controllers) == ("scale-in", 2)


def test_the_lookahead_starts_a_run_a_minute_from_the_fall_until_the_next_lookahead():
    now = datetime(2026, 3, 2, 12, 40, 20, tzinfo=UTC)
    fl = Floor(0, 0.0, None, "off", 10, 9, 1.5e6, "2026-03-02T12:42:00+00:00", 1, 100_000.0)
    assert lookahead(fl, 9, 16, None, now, 2)[0] == "low"
    runs = lookahead_runs(fl, "low", 9, now)
    # 12:42 to 12:45, the last minute before the next look-ahead (12:45:20)
    assert runs == [datetime(2026, 3, 2, 12, 42, tzinfo=UTC) + timedelta(minutes=k) for k in range(4)]
    # a ceiling below the count already: from now on; a surge ahead: once, now
    below = Floor(0, 0.0, None, "off", 10, 3, 5e5)
    assert lookahead_runs(below, "low", 9, now) == [now + timedelta(minutes=k) for k in range(5)]
    assert lookahead_runs(fl, "high", 2, now) == [now]
    # at the fall's count already, or at minControllers above it: nothing to shed, no run
    assert lookahead(fl, 2, 16, None, now, 2)[0] is None
