"""Capacity planning: how many controllers an array needs for a given IOPS demand. Pure.

``plan(PlanInput(spec, demand, current))`` is the whole rule set for callers that know only the
demand and the running count. Callers that know more set more of ``PlanInput``'s keyword
fields, and each one switches on one more rule, named in the decision's reason:

- ``now`` with ``last_scale_out_at`` / ``last_scale_in_at``: the spec's cooldowns, and the
  reversal hysteresis (``REVERSAL_MINUTES``, ``SETTLE_MINUTES``: bounded churn);
- ``recent_scalings``: a scale-in is never the seventh change of the count in 60 minutes
  (``CHURN_LIMIT``, ``churn_left``: bounded churn on any demand);
- ``in_flight``: nothing changes while a controller is bootstrapping or draining;
- ``recent_demand``: the demand trend (scale out ahead of a rising demand) and sustained demand
  (scale in only when every recent minute fits one controller fewer, and then straight to what
  every one of them needs);
- ``scale_in_headroom``: scale in only with a margin under target;
- ``volume_iops``: the volumes' provisioned IOPS in total, what the array can deliver at most
  (``vsa_core.arrays.capacity``): no controller beyond what moves it all, and the decision says
  when the array is volume-bound;
- ``forecast``: the forecast floor (``vsa_core.scaling.forecast``): the array's own recurring
  demand ahead; desired never goes below it (within [min, what the volumes allow]), and the
  decision says when the floor set the count. With a short cycle's ceiling in force, a
  scale-out ahead of the demand waits while the running count delivers the demand ahead within
  ``AHEAD_UTILISATION`` of its IOPS (``ahead_wait``: fewer, larger steps up a recurring ramp),
  and while the cycle is still climbing a scale-in keeps the ceiling (``climb_hold``: a dip
  part way up sheds nothing the climb takes back). Once the cycle's own fall is in force
  (``fall_in_force``), a scale-in goes to what the demand needs at target and waits, while the
  demand is still coming down, until it can go to the cycle's level after the fall
  (``fall_wait``: the fall in one step, not one a scale-in cooldown).

``plan`` applies the rules as named steps, each a pure function of typed values:

1. ``PlanInput`` (``check_input``) refuses what no rule can judge (a negative demand, a headroom
   outside (0, 1], ...), so no later step checks again;
2. ``count_bounds``: the count's range, [minControllers, the useful top] (maxControllers, the
   attach limit, the volumes' IOPS);
3. ``demand_needs``: controllers for the demand now, ahead (``rising_trend``) and sustained over
   the scale-in window (``scale_in_window``);
4. ``count_targets``: where a scale-out or a scale-in would go, clamped to the bounds and raised
   to the forecast floor (a scale-in also to ``climb_hold``);
5. ``time_left``: what the cooldowns, the reversal hysteresis and the churn limit still hold;
6. ``choose_move``: scale out (``scale_out_move``), scale in (``scale_in_move``) or hold
   (``hold_move``), waiting while a cooldown, the hysteresis or a controller in flight holds it,
   or, for a scale-out ahead of the demand, while the running count still delivers the demand
   ahead (``ahead_wait``), and, for a scale-in the low alarm's window stops partway after an
   abrupt fall, until the window lets the whole fall go in one step (``partial_wait``), or
   one partway down a recurring fall still under way, until it reaches the cycle's level
   (``fall_wait``);
7. ``decision``: the ``ScaleDecision``, with whether the forecast floor set the count
   (``floor_decided``) and the reason in words (``explain``, ``limit_notes``).
"""

import itertools
import math
from collections.abc import Sequence
from dataclasses import KW_ONLY, asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from vsa_core.alarm_tuning import HIGH_DATAPOINTS_TO_ALARM
from vsa_core.arrays.capacity import (
    controllers_needed,
    deliverable_iops,
    owner_bound_reason,
    owner_controllers,
    volume_bound_reason,
    volume_controllers,
)
from vsa_core.arrays.spec import MULTI_ATTACH_LIMIT, ArraySpec
from vsa_core.scaling.forecast import Floor

__all__ = [
    "AHEAD_UTILISATION",
    "CHURN_LIMIT",
    "CHURN_WINDOW_MINUTES",
    "PARTIAL_SHARE",
    "Assessment",
    "Bounds",
    "Move",
    "Needs",
    "PlanInput",
    "ScaleDecision",
    "Targets",
    "Waits",
    "ahead_wait",
    "assess",
    "check_input",
    "choose_move",
    "churn_left",
    "climb_hold",
    "controllers_needed",
    "count_bounds",
    "count_targets",
    "decision",
    "demand_ahead",
    "demand_needs",
    "demand_trend",
    "explain",
    "floor_decided",
    "hold_move",
    "limit_notes",
    "owner_bound",
    "plan",
    "rising_trend",
    "scale_in_move",
    "scale_in_step",
    "scale_in_window",
    "scale_out_move",
    "settle_left",
    "time_left",
    "volume_bound",
]

DEFAULT_LEAD_MINUTES = 10.0
"""How far ahead a rising demand is extrapolated by default: a controller takes ~5 minutes to
serve, and the next scale-out can follow only when this bootstrap is no longer in flight (or
the scale-out cooldown is over, if longer) and then takes its own ~5 minutes, so capacity asked
for now must cover the demand ~10 minutes from now (boot + the longer of boot and cooldown)."""

TREND_MINUTES = 5
"""The trend is read from the last ``TREND_MINUTES`` one-minute samples of ``recent_demand`` plus
the current demand: long enough to ignore one noisy minute, short enough to see a ramp start."""

AHEAD_UTILISATION = 0.95
"""A scale-out ahead of the demand waits while the running count would deliver the demand
ahead (``demand_ahead``: its trend and what every recent cycle reached in the coming minutes)
at no more than this share of its IOPS (``ahead_wait``). Stepping at every look-ahead on a
recurring ramp changed the count 8-9 times an hour; waiting until the running count nears
what it delivers takes the ramp in fewer, larger steps, and the step still serves before the
demand passes 100% (what starves) when the cycle holds. The share is above the target
utilisation (the steps come later than the target alone would place them) and leaves a
twentieth for a cycle that comes a little above the last ones (with none, a sawtooth tooth a
little above the last ones starved a minute: docs/scaling.md); only with a short cycle's
ceiling in force (``forecast.Floor.ceiling_iops``), whose recent cycles bound the demand
ahead."""
PARTIAL_SHARE = 0.5
"""A scale-in that sheds less than this share of what the current demand alone would let go
(``partial_wait``) waits for the low alarm's window to clear instead. After an abrupt fall the
window's older minutes still hold the top, so a scale-in then sheds a part and the rest follows
minutes later (15 -> 13 -> 2 on an instant drop): two drains on every host where one does. The
wait lasts at most the window (``sustained_minutes``); it keeps, for those minutes, only the
controllers the part would have shed, fewer than the half the fall frees."""
REVERSAL_MINUTES = 10
"""A scale-out this soon after the last scale-in undid it: the array flapped (noise around a
threshold, or a dip the low alarm's window took for the end of a surge)."""
SETTLE_MINUTES = 15
"""After such a reversal, no scale-in until this long after the scale-out: the hysteresis that
bounds churn. Each flap (a scale-in, then the scale-out that undoes it) then takes at least
``SETTLE_MINUTES``, so an array flaps at most 4 times an hour whatever its demand does, where
the cooldowns alone let it flap every 5-6 minutes (drain + cooldown, then boot). Longer
settles cost controller-hours on recurring ramps (a ramp's first scale-out often follows the
previous descent's last scale-in: 30 min took a 15-min hourly ramp from 1.71x to 2.23x the
oracle in ``make bench``), and the alarms' own hysteresis (``SCALE_IN_HYSTERESIS``, the low
alarm's 5 of 5) already keeps noise from flapping. It uses only the two clocks the
registry already keeps (``lastScaleOutAt``, ``lastScaleInAt``): the deployed rule, which the
simulator runs as it is."""
CHURN_WINDOW_MINUTES = 60
CHURN_LIMIT = 6
"""A scale-in waits while the last ``CHURN_WINDOW_MINUTES`` already hold this many changes of
the count (``churn_left``), so no scale-in makes a seventh in any 60 minutes: each change
drains or bootstraps a controller on every host's paths. A scale-out never waits for it (a
starved array is worse than a busy one), so the limit bounds churn without risking the demand;
what a held scale-in keeps is a controller or two for the minutes until the oldest change
leaves the window. On ``make bench`` it took the traces with more than 6 changes in a clock
hour from 8 to 2 and the worst ratio of no family but sawtooth's up (1.006x to 1.015x); a
limit of 5 (a slot kept for a scale-out) took the ramp variants' worst to 1.179x
(docs/scaling.md). The deployed run reads the changes from the array's recorded decisions
(``ScaleDecisions.scalings_since``)."""


@dataclass(frozen=True)
class PlanInput:
    """Everything one decision is made from: the array's spec, its demand (now and the recent
    minutes), its state (running, in flight, the last scalings, the clock) and the tuning.

    The three positional fields are enough: each keyword field's default switches its rule off,
    so ``PlanInput(spec, demand, current)`` decides on the current demand alone. Invalid values
    are refused on construction (``check_input``)."""

    spec: ArraySpec
    demand_iops: float
    current_controllers: int
    _: KW_ONLY
    now: datetime | None = None
    """When the decision is made; the cooldowns are measured from it (no clock, no cooldown)."""
    last_scale_out_at: datetime | None = None
    """The last scale-out: no further scale-out for the spec's ``scaleOutCooldownSeconds`` after
    it, nor any scale-in for ``scaleInCooldownSeconds`` (capacity just added is not taken away
    before it has been seen at work)."""
    last_scale_in_at: datetime | None = None
    """The last scale-in: no further scale-in for ``scaleInCooldownSeconds``. A scale-out is
    never held by a scale-in."""
    in_flight: int = 0
    """Controllers bootstrapping or draining now; while any is, the decision holds."""
    recent_demand: Sequence[float] = ()
    """The demand of the minutes before this one, one sample a minute, oldest first (stored as a
    tuple). Scale-out plans for the larger of the current demand and the trend of the last
    ``TREND_MINUTES`` samples extrapolated ``lead_minutes`` ahead; scale-in plans for the highest
    demand in the samples (a single quiet minute removes nothing) and goes straight to it
    (without samples, one controller at a time)."""
    lead_minutes: float = DEFAULT_LEAD_MINUTES
    """How far ahead a rising trend is extrapolated: about the boot time plus the scale-out
    cooldown."""
    scale_in_headroom: float = 1.0
    """In (0, 1]; scale in only if one controller fewer would serve the sustained demand at
    ``targetUtilisation x scale_in_headroom`` (1.0: no margin)."""
    sustained_minutes: int | None = None
    """The sustained demand is the peak of the last ``sustained_minutes`` minutes, the current one
    included (None: every sample given, and the current one). Pass the low alarm's evaluation
    periods: a scale-in the low alarm asks for is then judged on the minutes the alarm judged."""
    volume_iops: int | None = None
    """The volumes' provisioned IOPS in total. Desired never goes above the controllers that move
    it all at target (``capacity.volume_controllers``; minControllers still holds), and scale-in
    may remove controllers above it; when the demand (or its forecast) reaches it the decision
    is volume-bound and says what to raise."""
    forecast: Floor | None = None
    """The forecast floor: scale-out goes at least to its controllers and scale-in never below
    them (within [min, the volumes' useful count]); ``floor_set`` says when it decided."""
    recent_scalings: Sequence[datetime] = ()
    """When the array's count last changed by a scale decision (its scale-outs and scale-ins),
    those of the last ``CHURN_WINDOW_MINUTES`` at least (stored as a tuple): a scale-in waits
    while they already hold ``CHURN_LIMIT`` (``churn_left``; none without ``now``)."""
    by_high_alarm: bool = True
    """The run was started by the high alarm's own change to ALARM, whose datapoints confirm the
    rise. False for a run anything else started (the low alarm, the health check's look-ahead):
    its scale-out then answers only demand that held over the high alarm's datapoints
    (``held_demand``), so it adds nothing for one noisy minute the alarm would not answer."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "recent_demand", tuple(self.recent_demand))
        object.__setattr__(self, "recent_scalings", tuple(self.recent_scalings))
        check_input(self)


@dataclass(frozen=True)
class ScaleDecision:
    """A decision and everything it was made from, so an operator can check it."""

    array_id: str
    demand_iops: float
    current_controllers: int
    needed_controllers: int
    desired_controllers: int
    min_controllers: int
    max_controllers: int
    per_controller_iops: int
    target_utilisation: float
    action: str  # "scale-out" | "scale-in" | "hold"
    reason: str
    under_provisioned: bool
    waiting: bool = False
    """The decision holds only until a cooldown ends, a bootstrap/drain finishes or the demand
    ahead outgrows the running count (``ahead_wait``): the trigger should come back (ScaleArray
    re-arms its alarm) rather than wait for a new breach."""
    # the optional inputs (defaults: the caller did not give them)
    now: str | None = None
    """ISO 8601; like the two below (datetimes are kept out of the decision: it must stay JSON)."""
    last_scale_out_at: str | None = None
    last_scale_in_at: str | None = None
    in_flight: int = 0
    recent_samples: int = 0
    """How many ``recent_demand`` samples the decision saw."""
    recent_scalings: tuple[str, ...] = ()
    """When the count changed in the last ``CHURN_WINDOW_MINUTES`` (ISO 8601, oldest first), as
    the decision saw them (``PlanInput.recent_scalings``)."""
    forecast_iops: float | None = None
    """The demand extrapolated ``lead_minutes`` ahead (None without a rising trend)."""
    sustained_iops: float | None = None
    """The highest of ``recent_demand`` and the current demand: what a scale-in must still serve."""
    lead_minutes: float | None = None
    scale_in_headroom: float = 1.0
    volume_iops: int | None = None
    """The volumes' provisioned IOPS in total (None: not known to the decision)."""
    volume_controllers: int | None = None
    """The most controllers that add IOPS (``capacity.volume_controllers``; None without
    ``volume_iops``): desired never goes above it (nor below minControllers)."""
    volume_bound: bool = False
    """The demand (or its forecast) reaches what the volumes provide: more controllers would not
    serve it; the volumes' provisioned IOPS must rise."""
    forecast_floor: int | None = None
    """The forecast floor's controllers (None: no forecast given; 0: off)."""
    forecast_reason: str | None = None
    """What the forecast said, on or off, in words."""
    floor_set: bool = False
    """The forecast floor, not the current demand, set the desired count (or held a scale-in)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan(inp: PlanInput) -> ScaleDecision:
    """Desired controllers for ``inp.demand_iops`` with ``inp.current_controllers`` asked for.

    Always: desired = ceil(demand / (perControllerIops x targetUtilisation)), clamped to
    [min, max] (max never above 16); scale-out goes straight to that count; scale-in never goes
    below what current demand needs, and removes one controller at a time when it knows only the
    current demand (straight to max when max was lowered below the running count), or goes
    straight to what every minute of ``recent_demand``'s window needs when it has one (the low
    alarm's minutes: a collapse is shed in one run, not one controller per alarm cycle). The
    other rules are ``PlanInput``'s keyword fields; the steps are listed in the module's
    docstring."""
    assessment = assess(inp)
    return decision(assessment, choose_move(assessment))


def check_input(inp: PlanInput) -> None:
    """Refuse what no rule can judge: a demand or recent sample that is not a non-negative
    number of IOPS, a negative count in flight, a lead that is not a non-negative number of
    minutes, a headroom outside (0, 1], a sustained window of less than the current minute."""
    _check_demand(inp.demand_iops, "demand")
    for sample in inp.recent_demand:
        _check_demand(sample, "recent demand")
    if inp.in_flight < 0:
        raise ValueError(f"in_flight must be 0 or more controllers, got {inp.in_flight}")
    if not math.isfinite(inp.lead_minutes) or inp.lead_minutes < 0:
        raise ValueError(f"lead_minutes must be 0 or more, got {inp.lead_minutes}")
    if not 0 < inp.scale_in_headroom <= 1:
        raise ValueError(f"scale_in_headroom must be in (0, 1], got {inp.scale_in_headroom}")
    if inp.sustained_minutes is not None and inp.sustained_minutes < 1:
        raise ValueError(f"sustained_minutes must be 1 or more, got {inp.sustained_minutes}")


# ---------------------------------------------------------------- what the input asks for


@dataclass(frozen=True)
class Bounds:
    """Where the desired count may go."""

    floor: int
    """minControllers: never fewer (each host's paths to the array)."""
    ceiling: int
    """maxControllers, never above ``MULTI_ATTACH_LIMIT`` (the attachments an io2 volume takes)."""
    by_volumes: int | None
    """The most controllers that add IOPS (``capacity.volume_controllers``); None without
    ``volume_iops``."""
    useful: int
    """The top a target is clamped to: the ceiling, or ``by_volumes`` or ``by_owners`` when fewer."""
    by_owners: int | None = None
    """With ``fencing: reservations``: the controllers that carry IO, one owner per volume
    (``capacity.owner_controllers``); None otherwise (every controller serves every volume)."""


def count_bounds(inp: PlanInput) -> Bounds:
    """The count's range: minControllers below; above, maxControllers (at most the attach limit)
    and, with the volumes' provisioned IOPS, the controllers that move all of it at target: a
    controller beyond those finds the volumes already giving all they have, so adds only cost."""
    spec = inp.spec
    ceiling = min(spec.max_controllers, MULTI_ATTACH_LIMIT)
    by_volumes = (
        None
        if inp.volume_iops is None
        else volume_controllers(inp.volume_iops, spec.per_controller_iops, spec.target_utilisation)
    )
    useful = ceiling if by_volumes is None else min(ceiling, by_volumes)
    by_owners = owner_controllers(len(spec.volumes)) if spec.fencing == "reservations" else None
    if by_owners is not None:
        # one owner per volume: a controller beyond the volume count owns none, carries no IO
        useful = min(useful, by_owners)
    return Bounds(
        floor=spec.min_controllers, ceiling=ceiling, by_volumes=by_volumes, useful=useful, by_owners=by_owners
    )


@dataclass(frozen=True)
class Needs:
    """What the demand asks for, read three ways: now, ahead (its rising trend) and sustained
    (the busiest minute of the scale-in window)."""

    needed: int
    """Controllers for the current demand at target."""
    slope: float
    """The trend in IOPS a minute (``demand_trend``; 0 without recent samples)."""
    trend: float | None
    """The demand ``lead_minutes`` ahead when it is rising; None otherwise."""
    planned_for: float
    """What a scale-out plans for: the larger of the current demand and its trend."""
    needed_out: int
    """Controllers for ``planned_for`` at target."""
    window: Sequence[float]
    """The recent samples a scale-in must still serve (``scale_in_window``)."""
    sustained: float | None
    """The busiest of ``window`` and the current minute; None without recent samples."""
    needed_in: int
    """What a scale-in keeps: enough for the current demand, its trend, and the sustained demand
    at ``targetUtilisation x scale_in_headroom``."""


def rising_trend(inp: PlanInput) -> tuple[float, float | None]:
    """(slope, the demand ``lead_minutes`` ahead). A demand rising over the recent minutes is
    planned for where it will be when a controller asked for now serves; a flat or falling one
    is not extrapolated (None): the current demand already covers it."""
    slope = demand_trend(inp.recent_demand, inp.demand_iops) if inp.recent_demand else 0.0
    return slope, (inp.demand_iops + slope * inp.lead_minutes if slope > 0 else None)


def scale_in_window(inp: PlanInput) -> Sequence[float]:
    """The recent samples a scale-in must still serve: those of the last ``sustained_minutes``
    minutes, the current one making the last (the low alarm's window: a scale-in is judged on the
    minutes the alarm judged), or every sample given."""
    recent = inp.recent_demand
    if inp.sustained_minutes is None:
        return recent
    return recent[max(0, len(recent) - inp.sustained_minutes + 1) :]


def held_demand(inp: PlanInput) -> float:
    """The demand a scale-out answers without a trend. In a run the high alarm started, the
    current demand (the alarm has confirmed the rise); in any other run (``by_high_alarm``
    False), the least of the current minute and the ``HIGH_DATAPOINTS_TO_ALARM - 1`` before it,
    the minutes the high alarm itself must see above its threshold: such a run adds no
    controller for one noisy minute above target the alarm would not answer (a scale-out and
    the scale-in after it: a connect and a drain on every host), and answers a demand that
    holds when the alarm would."""
    if inp.by_high_alarm or not inp.recent_demand:
        return inp.demand_iops
    previous = inp.recent_demand[len(inp.recent_demand) - (HIGH_DATAPOINTS_TO_ALARM - 1) :]
    return min([*previous, inp.demand_iops])


def demand_needs(inp: PlanInput) -> Needs:
    """Controllers for the demand now, ahead and sustained. A scale-out plans for the larger of
    the current demand and its trend; a scale-in keeps enough for all three, the sustained demand
    at ``targetUtilisation x scale_in_headroom`` (a margin under target, so the count it leaves
    is not at once above the high alarm), so a single quiet minute removes nothing."""
    per, util = inp.spec.per_controller_iops, inp.spec.target_utilisation
    slope, trend = rising_trend(inp)
    held = held_demand(inp)
    ceiling = inp.forecast.ceiling_iops if inp.forecast is not None else 0.0
    if trend is not None and ceiling > 0:
        # the recurring cycle's most in the coming minutes bounds where the trend goes
        trend = max(held, min(trend, ceiling))
    planned_for = max(held, trend or 0.0)
    window = scale_in_window(inp)
    sustained = max([*window, inp.demand_iops]) if inp.recent_demand else None
    needed = controllers_needed(inp.demand_iops, per, util)
    needed_out = controllers_needed(planned_for, per, util)
    by_sustained = controllers_needed(sustained or 0.0, per, util * inp.scale_in_headroom)
    return Needs(
        needed=needed,
        slope=slope,
        trend=trend,
        planned_for=planned_for,
        needed_out=needed_out,
        window=window,
        sustained=sustained,
        needed_in=max(needed, needed_out, by_sustained),
    )


@dataclass(frozen=True)
class Targets:
    """Where a scale-out or a scale-in would go."""

    reactive_out: int
    """The scale-out count the demand alone asks for, clamped to the bounds."""
    reactive_in: int
    """The scale-in count the demand alone allows, clamped to the bounds."""
    by_forecast: int
    """The forecast floor's controllers, at most the useful top (0 without a forecast)."""
    out_target: int
    """Where a scale-out goes: the larger of ``reactive_out`` and ``by_forecast``."""
    in_target: int
    """Where a scale-in stops at the lowest: the largest of ``reactive_in``, ``by_forecast`` and
    ``by_climb``."""
    by_climb: int = 0
    """What a scale-in keeps while the array's own cycle is still climbing (``climb_hold``; 0:
    it is not)."""


def count_targets(inp: PlanInput, needs: Needs, bounds: Bounds) -> Targets:
    """Clamp what the demand needs to [minControllers, the useful top], then raise it to the
    forecast floor: the array's own recurring demand is served before it arrives, but the floor
    never asks for a controller the volumes would leave idle. The scale-in target is never below
    the scale-out target (``needed_in`` covers ``needed_out``)."""
    reactive_out = max(bounds.floor, min(needs.needed_out, bounds.useful))
    reactive_in = max(bounds.floor, min(needs.needed_in, bounds.useful))
    by_forecast = 0 if inp.forecast is None else min(inp.forecast.controllers, bounds.useful)
    if inp.forecast is not None and inp.forecast.ceiling_controllers:
        # every recent cycle stayed under its ceiling in the coming minutes: the fall is the
        # cycle's own, shed now rather than after the low alarm's window confirms it
        per, util = inp.spec.per_controller_iops, inp.spec.target_utilisation
        now_in = controllers_needed(inp.demand_iops, per, util * inp.scale_in_headroom)
        if (
            fall_in_force(inp)
            and controllers_needed(inp.demand_iops, per, util) <= inp.forecast.ceiling_controllers
        ):
            # the demand is down to the level the cycles kept after their fall: the scale-in
            # goes there, at target, since the margin would leave one controller the low alarm
            # sheds minutes later (a second drain on every host for the same fall)
            now_in = inp.forecast.ceiling_controllers
        released = max(now_in, needs.needed_out, inp.forecast.ceiling_controllers)
        reactive_in = min(reactive_in, max(bounds.floor, min(released, bounds.useful)))
    by_climb = climb_hold(inp, bounds)
    return Targets(
        reactive_out=reactive_out,
        reactive_in=reactive_in,
        by_forecast=by_forecast,
        out_target=max(reactive_out, by_forecast),
        in_target=max(reactive_in, by_forecast, by_climb),
        by_climb=by_climb,
    )


def climb_hold(inp: PlanInput, bounds: Bounds) -> int:
    """What a scale-in keeps while the array's own cycle is still climbing: when what every
    recent cycle reached in the coming minutes (the floor's IOPS) is above the current demand,
    the most any of them reached there (the ceiling's controllers), at most the running count;
    0 otherwise. A dip part way up a recurring climb (noise; a climb the trend has outrun) then
    sheds nothing the climb takes back minutes later: a scale-in and a scale-out saved, at the
    cost of the minutes until the climb arrives. Once the climb is over (the demand at or above
    what recurred), or the cycle no longer holds (no ceiling), it keeps nothing."""
    forecast = inp.forecast
    if forecast is None or not forecast.ceiling_controllers or forecast.iops <= inp.demand_iops:
        return 0
    return min(inp.current_controllers, forecast.ceiling_controllers, bounds.useful)


@dataclass(frozen=True)
class Waits:
    """Seconds each timing rule still holds a change (0: it does not)."""

    out_left: float
    """The scale-out cooldown after the last scale-out."""
    in_left: float
    """The scale-in cooldown after the last scale-out or scale-in, whichever ends later."""
    settle: float
    """The hysteresis after a reversal (``settle_left``)."""
    churn: float = 0.0
    """The churn limit (``churn_left``)."""


def time_left(inp: PlanInput) -> Waits:
    """How long the cooldowns, the reversal hysteresis and the churn limit still hold a change.
    A scale-in waits out the scale-in cooldown after either scaling (capacity just added is seen
    at work before it is taken away); a scale-out waits only for its own cooldown (a scale-in
    never delays serving a demand), and never for the churn limit."""
    spec, now = inp.spec, inp.now
    in_left = max(
        _left(now, inp.last_scale_in_at, spec.scale_in_cooldown_seconds),
        _left(now, inp.last_scale_out_at, spec.scale_in_cooldown_seconds),
    )
    return Waits(
        out_left=_left(now, inp.last_scale_out_at, spec.scale_out_cooldown_seconds),
        in_left=in_left,
        settle=settle_left(now, inp.last_scale_out_at, inp.last_scale_in_at),
        churn=churn_left(now, inp.recent_scalings),
    )


@dataclass(frozen=True)
class Assessment:
    """The input and what the steps before the decision read from it: the one value the
    deciding steps take."""

    inp: PlanInput
    bounds: Bounds
    needs: Needs
    targets: Targets
    waits: Waits
    under: bool
    """maxControllers, not the volumes, stops the array serving its current demand."""


def assess(inp: PlanInput) -> Assessment:
    """Read the input through the steps that do not decide: bounds, needs, targets, time left,
    and whether maxControllers leaves the current demand unserved. That is under-provisioning
    only when the volumes would deliver more; when they cap below maxControllers the array is
    volume-bound instead (more controllers would not help)."""
    bounds = count_bounds(inp)
    needs = demand_needs(inp)
    under = needs.needed > bounds.ceiling and (
        bounds.by_volumes is None or bounds.by_volumes > bounds.ceiling
    )
    return Assessment(
        inp=inp,
        bounds=bounds,
        needs=needs,
        targets=count_targets(inp, needs, bounds),
        waits=time_left(inp),
        under=under,
    )


# ---------------------------------------------------------------- the move


@dataclass(frozen=True)
class Move:
    """What the decision does, and the notes that say why."""

    action: str  # "scale-out" | "scale-in" | "hold"
    desired: int
    waiting: bool = False
    """A hold that lasts only until a cooldown ends, a bootstrap/drain finishes or the demand
    ahead outgrows the running count."""
    notes: tuple[str, ...] = ()


def choose_move(a: Assessment) -> Move:
    """Scale out when the scale-out target is above the running count, scale in when the
    scale-in target is below it, hold when the two bracket it (the scale-in target is never
    below the scale-out target, so at most one of the first two applies)."""
    current = a.inp.current_controllers
    if a.targets.out_target > current:
        ahead = ahead_wait(a)
        return scale_out_move(a) if ahead is None else _wait(a, ahead)
    if a.targets.in_target < current:
        return scale_in_move(a)
    return hold_move(a)


def demand_ahead(inp: PlanInput, needs: Needs) -> float | None:
    """The most the demand may reach before a controller ordered at the next look serves, when
    a short recurring cycle bounds it: the largest of the demand's own trend ``lead_minutes``
    ahead (not bounded by the cycle's ceiling), the forecast floor's IOPS and the most any of
    the cycle's last cycles reached in the coming minutes (its ceiling). None without a ceiling
    in force (no cycle holds now: nothing bounds what comes)."""
    if inp.forecast is None or not inp.forecast.ceiling_iops:
        return None
    _, unbounded = rising_trend(inp)
    return max(needs.planned_for, unbounded or 0.0, inp.forecast.iops, inp.forecast.ceiling_iops)


def ahead_wait(a: Assessment) -> str | None:
    """What holds a scale-out ahead of the demand, or None. A scale-out the current demand does
    not need (it is served at target; the trend or the forecast floor asks for more) waits
    while the running count delivers ``demand_ahead`` at no more than ``AHEAD_UTILISATION`` of
    its IOPS: the next look-ahead or alarm run steps then, further up the climb, instead of
    stepping every few minutes. A climb on a recurring ramp then takes fewer, larger steps."""
    inp, current = a.inp, a.inp.current_controllers
    if a.needs.needed > current:
        return None
    ahead = demand_ahead(inp, a.needs)
    delivers = deliverable_iops(current, inp.spec.per_controller_iops, inp.volume_iops)
    if ahead is None or ahead > delivers * AHEAD_UTILISATION:
        return None
    return (
        f"scale-out to {a.targets.out_target} waits: {current} controller(s) deliver the demand ahead "
        f"({ahead:,.0f} IOPS: its trend, and every recent cycle in the coming minutes) at "
        f"{ahead / delivers:.0%} of their IOPS, within {AHEAD_UTILISATION:.0%}"
    )


def _wait(a: Assessment, note: str) -> Move:
    """Hold until what ``note`` names is over: the trigger comes back then (ScaleArray re-arms
    its alarm) rather than wait for a new breach."""
    return Move("hold", a.inp.current_controllers, waiting=True, notes=(note,))


def scale_out_move(a: Assessment) -> Move:
    """Straight to the scale-out target, unless a controller is bootstrapping or draining (the
    count to judge is not yet the count serving) or the scale-out cooldown runs: then wait."""
    inp, target = a.inp, a.targets.out_target
    if inp.in_flight:
        return _wait(
            a, f"scale-out to {target} waits: {inp.in_flight} controller(s) bootstrapping or draining"
        )
    if a.waits.out_left > 0:
        return _wait(
            a,
            f"scale-out to {target} waits: scale-out cooldown "
            f"(scaleOutCooldownSeconds={inp.spec.scale_out_cooldown_seconds}), {a.waits.out_left:.0f}s left",
        )
    capped = f"capped at maxControllers={a.bounds.ceiling}, the array stays under-provisioned"
    return Move("scale-out", target, notes=(capped,) if a.under else ())


def scale_in_move(a: Assessment) -> Move:
    """Down to ``scale_in_step``, unless ``scale_in_wait`` or ``partial_wait`` names what holds it."""
    step = scale_in_step(a)
    wait = scale_in_wait(a, step) or partial_wait(a, step) or fall_wait(a, step)
    if wait is not None:
        return _wait(a, wait)
    return Move("scale-in", step, notes=scale_in_notes(a, step))


def fall_allows(a: Assessment) -> int:
    """Where a scale-in would go on the current demand alone (at ``targetUtilisation x
    scale_in_headroom``), with the rising trend, the forecast floor and the bounds as for any
    scale-in: what the low alarm's window will allow once its older minutes have left it, if the
    demand stays where it is."""
    inp = a.inp
    now_in = controllers_needed(
        inp.demand_iops, inp.spec.per_controller_iops, inp.spec.target_utilisation * inp.scale_in_headroom
    )
    demand_alone = min(max(now_in, a.needs.needed_out), a.bounds.useful)
    return max(a.bounds.floor, a.targets.by_forecast, a.targets.by_climb, demand_alone)


def partial_wait(a: Assessment, step: int) -> str | None:
    """What holds a scale-in to ``step`` that sheds less than ``PARTIAL_SHARE`` of what the
    current demand alone would let go (``fall_allows``), or None: the demand fell faster than
    the low alarm's window has seen, so the rest of the fall is shed in the same step once the
    window's older minutes have left it, not in a second scale-in minutes later. A count above
    maxControllers (lowered below it) never waits: that step is the spec's, not the demand's."""
    if not a.inp.recent_demand or a.inp.current_controllers > a.bounds.ceiling:
        return None
    current, allows = a.inp.current_controllers, fall_allows(a)
    if allows >= step or current - step >= PARTIAL_SHARE * (current - allows):
        return None
    return (
        f"scale-in to {step} waits: the demand now needs only {allows}, and the low alarm's window "
        f"still holds minutes that need {step}; one scale-in when they have left it, not two"
    )


def fall_in_force(inp: PlanInput) -> bool:
    """The short cycle's own fall is in force (``forecast.Floor.in_force`` has put the level the
    cycles kept after it in place of the ceiling): its bucket has begun and the demand is down."""
    return inp.forecast is not None and inp.forecast.falling and bool(inp.forecast.fall_controllers)


def fall_wait(a: Assessment, step: int) -> str | None:
    """What holds a scale-in partway down a recurring fall, or None. While the cycle's own fall
    is in force and the demand is still coming down (a falling trend, and the current demand
    at target still needing more than the cycle's level after the fall), a scale-in that stops
    above that level waits: the fall is shed in one step once the demand is there, not in one
    step a scale-in cooldown as the demand passes each count (three or four drains on every
    host for one fall). It keeps the count only for the rest of the drop; a fall that stops
    above the level (the trend no longer falling) is shed as far as the demand allows."""
    inp = a.inp
    if not fall_in_force(inp) or a.needs.slope >= 0 or inp.forecast is None:
        return None
    level = max(a.bounds.floor, min(inp.forecast.fall_controllers, a.bounds.useful), a.targets.by_forecast)
    now_in = controllers_needed(inp.demand_iops, inp.spec.per_controller_iops, inp.spec.target_utilisation)
    if step <= level or now_in <= level:
        return None
    return (
        f"scale-in to {step} waits: the array's own recurring fall is under way (the demand still "
        f"falling, its cycles kept {level} after it); one scale-in when the demand is there, "
        "not one a cooldown"
    )


def scale_in_step(a: Assessment) -> int:
    """Where a scale-in goes. With a window of recent demand, straight to what its every minute
    needs (a collapse is shed at once, not a controller per alarm cycle); with the current demand
    alone, one controller at a time, but never above maxControllers (it may have been lowered
    below the running count)."""
    if a.inp.recent_demand:
        return a.targets.in_target
    return max(a.targets.in_target, min(a.inp.current_controllers - 1, a.bounds.ceiling))


def scale_in_wait(a: Assessment, step: int) -> str | None:
    """What holds a scale-in to ``step``, or None: a controller bootstrapping or draining, the
    scale-in cooldown, the hysteresis after a reversal, then the churn limit (the first that
    holds is named). A count above maxControllers (lowered below it) is not held by the churn
    limit: that step is the spec's, not the demand's."""
    inp, waits = a.inp, a.waits
    if inp.in_flight:
        return f"scale-in to {step} waits: {inp.in_flight} controller(s) bootstrapping or draining"
    if waits.in_left > 0:
        return (
            f"scale-in to {step} waits: scale-in cooldown "
            f"(scaleInCooldownSeconds={inp.spec.scale_in_cooldown_seconds}), {waits.in_left:.0f}s left"
        )
    if waits.settle > 0:
        return (
            f"scale-in to {step} waits: hysteresis after a reversal (the last scale-out undid "
            f"a scale-in within {REVERSAL_MINUTES} min; none for {SETTLE_MINUTES} min after it), "
            f"{waits.settle:.0f}s left"
        )
    if waits.churn > 0 and inp.current_controllers <= a.bounds.ceiling:
        changed = len(_within_churn_window(inp.now, inp.recent_scalings))
        return (
            f"scale-in to {step} waits: the count changed {changed} "
            f"times in the last {CHURN_WINDOW_MINUTES} min (at most {CHURN_LIMIT}, a scale-out "
            f"excepted), {waits.churn:.0f}s left"
        )
    return None


def scale_in_notes(a: Assessment, step: int) -> tuple[str, ...]:
    """What a scale-in to ``step`` says: one at a time (no window to judge more by) or how many
    at once and why; a maxControllers lowered below the running count; the minControllers floor
    when it, not the demand, stopped the scale-in."""
    current, bounds = a.inp.current_controllers, a.bounds
    notes: list[str] = []
    if not a.inp.recent_demand:
        notes.append("scale in one controller at a time (no recent demand to judge more by)")
    elif current - step > 1:
        notes.append(
            f"scale in {current - step} at once: every minute of the last "
            f"{len(a.needs.window) + 1} needs at most {a.targets.in_target}"
        )
    if current - 1 > bounds.ceiling:
        notes.append(f"maxControllers={bounds.ceiling} was lowered below the running count")
    if a.targets.in_target == bounds.floor and a.needs.needed_in < bounds.floor:
        notes.append(f"floor minControllers={bounds.floor}")
    return tuple(notes)


def hold_move(a: Assessment) -> Move:
    """Keep the running count, saying why when the current demand alone would scale in: the
    recent peak or the headroom under target (the scale-out target is below the count, the
    scale-in target is not), or the rising trend (what the current demand alone needs is below
    the count, what its trend needs is not)."""
    inp, needs, current = a.inp, a.needs, a.inp.current_controllers
    by_demand_alone = max(a.bounds.floor, min(needs.needed, a.bounds.ceiling))
    notes: tuple[str, ...] = ()
    if a.targets.out_target < current:
        if needs.sustained is not None and needs.sustained > inp.demand_iops:
            notes = (
                f"no scale-in: the recent peak {needs.sustained:,.0f} IOPS needs {needs.needed_in} "
                f"at targetUtilisation x {inp.scale_in_headroom:g}",
            )
        else:
            notes = (
                f"no scale-in: {current - 1} would run above targetUtilisation x {inp.scale_in_headroom:g}",
            )
    elif needs.needed_out > needs.needed and by_demand_alone < current:
        notes = (f"no scale-in: the rising demand needs {needs.needed_out} within {inp.lead_minutes:g} min",)
    elif (
        not inp.by_high_alarm
        and needs.planned_for < inp.demand_iops
        and min(needs.needed, a.bounds.useful) > current >= a.targets.out_target
    ):
        # held_demand alone kept the count, not a bound (the useful top would allow more)
        notes = (
            f"no scale-out: one minute above target, not yet the {HIGH_DATAPOINTS_TO_ALARM} the high "
            "alarm answers (this run was not the high alarm's)",
        )
    return Move("hold", current, notes=notes)


# ---------------------------------------------------------------- the decision


def floor_decided(a: Assessment, move: Move) -> bool:
    """The forecast floor, not the demand, set the count: a scale-out beyond what the demand asks,
    or a hold of a scale-in the demand alone would make."""
    if a.inp.forecast is None:
        return False
    if move.action == "scale-out":
        return move.desired > a.targets.reactive_out
    kept = max(a.targets.by_forecast, a.targets.by_climb)
    return move.action == "hold" and a.targets.reactive_in < a.inp.current_controllers <= kept


def volume_bound(a: Assessment) -> bool:
    """The demand (or its forecast) reaches what the volumes provide: more controllers would not
    serve it; the volumes' provisioned IOPS must rise."""
    return a.inp.volume_iops is not None and a.needs.planned_for >= a.inp.volume_iops


def owner_bound(a: Assessment) -> bool:
    """With one owner per volume, the demand (or its trend) asks for more controllers than
    there are volumes to own, and the volumes themselves would give more: the owners are the
    limit (more controllers would stand by)."""
    owners = a.bounds.by_owners
    if owners is None or a.needs.needed_out <= owners or owners >= a.bounds.ceiling:
        return False
    return a.bounds.by_volumes is None or a.bounds.by_volumes > owners


def explain(a: Assessment, move: Move, floor_set: bool) -> str:
    """The reason in words: the headline (demand, needed, running; "is served by" for a hold with
    nothing to add), then the rising trend, the move's own notes, what the forecast floor and the
    volumes did (``limit_notes``), and under-provisioning unless a scale-out already said it."""
    inp, needs = a.inp, a.needs
    notes: list[str] = []
    if needs.trend is not None and needs.needed_out > needs.needed:
        notes.append(
            f"demand rising {needs.slope:,.0f} IOPS/min: {needs.trend:,.0f} IOPS in {inp.lead_minutes:g} min "
            f"needs {needs.needed_out}"
        )
    notes += [*move.notes, *limit_notes(a, move, floor_set)]
    demand, current = f"demand {inp.demand_iops:,.0f} IOPS", inp.current_controllers
    shown = f"{demand} needs {needs.needed} controller(s), {current} running"
    if move.action == "hold" and not notes:
        shown = f"{demand} is served by {current} controller(s)"
    if a.under and move.action != "scale-out":
        notes.append(f"needs {needs.needed} but maxControllers={a.bounds.ceiling}: under-provisioned")
    return "; ".join([shown, *notes])


def limit_notes(a: Assessment, move: Move, floor_set: bool) -> list[str]:
    """What the forecast floor and the volumes did: the floor's own reason when it set the count;
    the volume-bound advice when the demand reaches the volumes' IOPS, else, on a scale-in, the
    controllers running beyond what the volumes can use."""
    inp, by_volumes = a.inp, a.bounds.by_volumes
    notes: list[str] = []
    if floor_set and inp.forecast is not None and inp.current_controllers > a.targets.by_forecast:
        notes.append(climb_note(inp.forecast, inp.demand_iops))
    elif floor_set and inp.forecast is not None:
        notes.append(f"{inp.forecast.reason} (the floor set the count)")
    if owner_bound(a) and a.bounds.by_owners is not None:
        notes.append(owner_bound_reason(a.bounds.by_owners))
    elif volume_bound(a) and inp.volume_iops is not None:
        notes.append(volume_bound_reason(inp.volume_iops, a.bounds.useful))
    elif by_volumes is not None and inp.current_controllers > by_volumes and move.action == "scale-in":
        notes.append(
            f"{inp.current_controllers} controllers run where {by_volumes} move the volumes' "
            f"{inp.volume_iops:,} IOPS"
        )
    return notes


def climb_note(forecast: Floor, demand_iops: float) -> str:
    """Why a scale-in kept the count while the cycle climbs (``climb_hold``)."""
    return (
        f"the array's cycle is still climbing: every recent cycle reached {forecast.iops:,.0f} IOPS in the "
        f"coming minutes, above the {demand_iops:,.0f} now; a scale-in keeps the most any of them "
        f"reached there ({forecast.ceiling_controllers} controller(s))"
    )


def decision(a: Assessment, move: Move) -> ScaleDecision:
    """The decision with everything it was made from (the clocks as ISO 8601: it stays JSON)."""
    inp, spec = a.inp, a.inp.spec
    floor_set = floor_decided(a, move)
    return ScaleDecision(
        array_id=spec.array_id,
        demand_iops=inp.demand_iops,
        current_controllers=inp.current_controllers,
        needed_controllers=a.needs.needed,
        desired_controllers=move.desired,
        min_controllers=a.bounds.floor,
        max_controllers=a.bounds.ceiling,
        per_controller_iops=spec.per_controller_iops,
        target_utilisation=spec.target_utilisation,
        action=move.action,
        reason=explain(a, move, floor_set),
        under_provisioned=a.under,
        waiting=move.waiting,
        now=_iso(inp.now),
        last_scale_out_at=_iso(inp.last_scale_out_at),
        last_scale_in_at=_iso(inp.last_scale_in_at),
        in_flight=inp.in_flight,
        recent_samples=len(inp.recent_demand),
        recent_scalings=tuple(t.isoformat() for t in _within_churn_window(inp.now, inp.recent_scalings)),
        forecast_iops=a.needs.trend,
        sustained_iops=a.needs.sustained,
        lead_minutes=inp.lead_minutes if inp.recent_demand else None,
        scale_in_headroom=inp.scale_in_headroom,
        volume_iops=inp.volume_iops,
        volume_controllers=a.bounds.by_volumes,
        volume_bound=volume_bound(a),
        forecast_floor=None if inp.forecast is None else inp.forecast.controllers,
        forecast_reason=None if inp.forecast is None else inp.forecast.reason,
        floor_set=floor_set,
    )


# ---------------------------------------------------------------- shared rules


def demand_trend(recent_demand: Sequence[float], demand_iops: float) -> float:
    """IOPS per minute over the last ``TREND_MINUTES`` samples of ``recent_demand`` (one a minute,
    oldest first) followed by the current demand: the smaller of their least-squares slope and
    the median of their minute-to-minute changes; 0 with no recent sample. Both follow a steady
    ramp; the slope alone overshoots on a single step (which the current demand already shows),
    the median alone follows noise, and the smaller of the two does neither."""
    points = [*recent_demand[-TREND_MINUTES:], demand_iops]
    n = len(points)
    if n < 2:
        return 0.0
    mean_x, mean_y = (n - 1) / 2, sum(points) / n
    slope = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(points)) / sum(
        (x - mean_x) ** 2 for x in range(n)
    )
    changes = sorted(b - a for a, b in itertools.pairwise(points))
    mid = len(changes) // 2
    median = changes[mid] if len(changes) % 2 else (changes[mid - 1] + changes[mid]) / 2
    return min(slope, median)


def _check_demand(value: float, what: str) -> None:
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a non-negative number of IOPS, got {value}")


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def _left(now: datetime | None, last: datetime | None, cooldown_seconds: int) -> float:
    """Seconds of cooldown left (0 when no clock or no previous scaling was given)."""
    if now is None or last is None:
        return 0.0
    return max(0.0, cooldown_seconds - (now - last).total_seconds())


def settle_left(now: datetime | None, last_out: datetime | None, last_in: datetime | None) -> float:
    """Seconds a scale-in still waits after a reversal: when the last scale-out came at most
    ``REVERSAL_MINUTES`` after the last scale-in (it undid it), none until ``SETTLE_MINUTES``
    after that scale-out; 0 otherwise (or without the clocks)."""
    if now is None or last_out is None or last_in is None:
        return 0.0
    if not timedelta(0) <= last_out - last_in <= timedelta(minutes=REVERSAL_MINUTES):
        return 0.0
    return _left(now, last_out, SETTLE_MINUTES * 60)


def _within_churn_window(now: datetime | None, scalings: Sequence[datetime]) -> list[datetime]:
    """The changes of the last ``CHURN_WINDOW_MINUTES`` before ``now``, oldest first."""
    if now is None:
        return []
    window = timedelta(minutes=CHURN_WINDOW_MINUTES)
    return sorted(t for t in scalings if timedelta(0) <= now - t < window)


def churn_left(now: datetime | None, scalings: Sequence[datetime]) -> float:
    """Seconds a scale-in still waits for the churn limit: while the last
    ``CHURN_WINDOW_MINUTES`` hold ``CHURN_LIMIT`` changes or more, until enough of them have
    left it that the scale-in is at most the ``CHURN_LIMIT``-th; 0 otherwise (or without a
    clock)."""
    within = _within_churn_window(now, scalings)
    if now is None or len(within) < CHURN_LIMIT:
        return 0.0
    leaves = within[len(within) - CHURN_LIMIT] + timedelta(minutes=CHURN_WINDOW_MINUTES)
    return max(0.0, (leaves - now).total_seconds())
