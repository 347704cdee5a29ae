"""Capacity planning: how many controllers an array needs for a given IOPS demand. Pure.

``plan(spec, demand, current)`` is the whole rule set for callers that know only the demand and
the running count. Callers that know more pass it by keyword, and each extra input switches on
one more rule, named in the decision's reason:

- ``now`` with ``last_scale_out_at`` / ``last_scale_in_at``: the spec's cooldowns, and the
  reversal hysteresis (``REVERSAL_MINUTES``, ``SETTLE_MINUTES``: bounded churn);
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
  decision says when the floor set the count.
"""

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from vsa_core.arrays.capacity import controllers_needed, volume_bound_reason, volume_controllers
from vsa_core.arrays.spec import MULTI_ATTACH_LIMIT, ArraySpec
from vsa_core.scaling.forecast import Floor

__all__ = ["ScaleDecision", "controllers_needed", "demand_trend", "plan", "settle_left"]

DEFAULT_LEAD_MINUTES = 10.0
"""How far ahead a rising demand is extrapolated by default: a controller takes ~5 minutes to
serve, and the next scale-out can follow only when this bootstrap is no longer in flight (or
the scale-out cooldown is over, if longer) and then takes its own ~5 minutes, so capacity asked
for now must cover the demand ~10 minutes from now (boot + the longer of boot and cooldown)."""

TREND_MINUTES = 5
"""The trend is read from the last ``TREND_MINUTES`` one-minute samples of ``recent_demand`` plus
the current demand: long enough to ignore one noisy minute, short enough to see a ramp start."""

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
    """The decision holds only until a cooldown ends or a bootstrap/drain finishes: the trigger
    should come back (ScaleArray re-arms its alarm) rather than wait for a new breach."""
    # the optional inputs (defaults: the caller did not give them)
    now: str | None = None
    """ISO 8601; like the two below (datetimes are kept out of the decision: it must stay JSON)."""
    last_scale_out_at: str | None = None
    last_scale_in_at: str | None = None
    in_flight: int = 0
    recent_samples: int = 0
    """How many ``recent_demand`` samples the decision saw."""
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


def plan(
    spec: ArraySpec,
    demand_iops: float,
    current_controllers: int,
    *,
    now: datetime | None = None,
    last_scale_out_at: datetime | None = None,
    last_scale_in_at: datetime | None = None,
    in_flight: int = 0,
    recent_demand: Sequence[float] = (),
    lead_minutes: float = DEFAULT_LEAD_MINUTES,
    scale_in_headroom: float = 1.0,
    sustained_minutes: int | None = None,
    volume_iops: int | None = None,
    forecast: Floor | None = None,
) -> ScaleDecision:
    """Desired controllers for ``demand_iops`` with ``current_controllers`` asked for.

    Always: desired = ceil(demand / (perControllerIops x targetUtilisation)), clamped to
    [min, max] (max never above 16); scale-out goes straight to that count; scale-in never goes
    below what current demand needs, and removes one controller at a time when it knows only the
    current demand (straight to max when max was lowered below the running count), or goes
    straight to what every minute of ``recent_demand``'s window needs when it has one (the low
    alarm's minutes: a collapse is shed in one run, not one controller per alarm cycle).

    Keyword-only inputs (their defaults switch their rule off, so the three-argument call
    decides on the current demand alone):

    - ``now``: when the decision is made; the cooldowns are measured from it (no clock, no
      cooldown).
    - ``last_scale_out_at``: the last scale-out; no further scale-out for the spec's
      ``scaleOutCooldownSeconds`` after it, nor any scale-in for ``scaleInCooldownSeconds``
      (capacity just added is not taken away before it has been seen at work).
    - ``last_scale_in_at``: the last scale-in; no further scale-in for ``scaleInCooldownSeconds``.
      A scale-out is never held by a scale-in.
    - ``in_flight``: controllers bootstrapping or draining now; while any is, the decision holds.
    - ``recent_demand``: the demand of the minutes before this one, one sample a minute, oldest
      first. Scale-out plans for the larger of the current demand and the trend of the last
      ``TREND_MINUTES`` samples extrapolated ``lead_minutes`` ahead; scale-in plans for the
      highest demand in the samples (a single quiet minute removes nothing) and goes straight
      to it (without samples, one controller at a time).
    - ``lead_minutes``: how far ahead a rising trend is extrapolated (default
      ``DEFAULT_LEAD_MINUTES``): about the boot time plus the scale-out cooldown.
    - ``scale_in_headroom``: in (0, 1]; scale in only if one controller fewer would serve the
      sustained demand at ``targetUtilisation x scale_in_headroom`` (1.0: no margin).
    - ``sustained_minutes``: the sustained demand is the peak of the last ``sustained_minutes``
      minutes, the current one included (default: every sample given, and the current one). Pass
      the low alarm's evaluation periods: a scale-in the low alarm asks for is then judged on the
      minutes the alarm judged, no more.
    - ``volume_iops``: the volumes' provisioned IOPS in total. Desired never goes above the
      controllers that move it all at target (``capacity.volume_controllers``; minControllers
      still holds), and scale-in may remove controllers above it; when the demand (or its
      forecast) reaches it the decision is volume-bound and says what to raise.
    - ``forecast``: the forecast floor; scale-out goes at least to its controllers and scale-in
      never below them (within [min, the volumes' useful count]); ``floor_set`` says when it
      decided.
    """
    _check_demand(demand_iops, "demand")
    for sample in recent_demand:
        _check_demand(sample, "recent demand")
    if in_flight < 0:
        raise ValueError(f"in_flight must be 0 or more controllers, got {in_flight}")
    if not math.isfinite(lead_minutes) or lead_minutes < 0:
        raise ValueError(f"lead_minutes must be 0 or more, got {lead_minutes}")
    if not 0 < scale_in_headroom <= 1:
        raise ValueError(f"scale_in_headroom must be in (0, 1], got {scale_in_headroom}")
    if sustained_minutes is not None and sustained_minutes < 1:
        raise ValueError(f"sustained_minutes must be 1 or more, got {sustained_minutes}")

    per_iops, target_util = spec.per_controller_iops, spec.target_utilisation
    needed = controllers_needed(demand_iops, per_iops, target_util)
    ceiling = min(spec.max_controllers, MULTI_ATTACH_LIMIT)
    floor = spec.min_controllers
    # controllers beyond what moves the volumes' whole provisioned IOPS add none
    by_volumes = None if volume_iops is None else volume_controllers(volume_iops, per_iops, target_util)
    useful = ceiling if by_volumes is None else min(ceiling, by_volumes)

    # scale-out: current demand, or its rising trend
    slope = demand_trend(recent_demand, demand_iops) if recent_demand else 0.0
    trend = demand_iops + slope * lead_minutes if slope > 0 else None
    planned_for = max(demand_iops, trend or 0.0)
    needed_out = controllers_needed(planned_for, per_iops, target_util)
    # scale-in: the highest recent demand, at target less the headroom
    window = recent_demand
    if sustained_minutes is not None:
        window = recent_demand[max(0, len(recent_demand) - sustained_minutes + 1) :]
    sustained = max([*window, demand_iops]) if recent_demand else None
    needed_in = max(
        needed,
        needed_out,
        controllers_needed(sustained or 0.0, per_iops, target_util * scale_in_headroom),
    )

    reactive_out = max(floor, min(needed_out, useful))
    reactive_in = max(floor, min(needed_in, useful))
    by_forecast = 0 if forecast is None else min(forecast.controllers, useful)
    out_target = max(reactive_out, by_forecast)
    in_target = max(reactive_in, by_forecast)
    volume_bound = volume_iops is not None and planned_for >= volume_iops
    # under-provisioned: maxControllers, not the volumes, stops the array serving its demand
    under = needed > ceiling and (by_volumes is None or by_volumes > ceiling)
    shown = f"demand {demand_iops:,.0f} IOPS needs {needed} controller(s), {current_controllers} running"
    notes: list[str] = []
    if trend is not None and needed_out > needed:
        notes.append(
            f"demand rising {slope:,.0f} IOPS/min: {trend:,.0f} IOPS in {lead_minutes:g} min "
            f"needs {needed_out}"
        )
    out_left = _left(now, last_scale_out_at, spec.scale_out_cooldown_seconds)
    in_left = max(
        _left(now, last_scale_in_at, spec.scale_in_cooldown_seconds),
        _left(now, last_scale_out_at, spec.scale_in_cooldown_seconds),
    )
    settle = settle_left(now, last_scale_out_at, last_scale_in_at)

    desired, action = current_controllers, "hold"
    waiting = False
    if out_target > current_controllers:
        if in_flight:
            waiting = True
            notes.append(
                f"scale-out to {out_target} waits: {in_flight} controller(s) bootstrapping or draining"
            )
        elif out_left > 0:
            waiting = True
            notes.append(
                f"scale-out to {out_target} waits: scale-out cooldown "
                f"(scaleOutCooldownSeconds={spec.scale_out_cooldown_seconds}), {out_left:.0f}s left"
            )
        else:
            desired, action = out_target, "scale-out"
            if under:
                notes.append(f"capped at maxControllers={ceiling}, the array stays under-provisioned")
    elif in_target < current_controllers:
        # with a window of recent demand, straight to what its every minute needs (a collapse is
        # shed at once, not a controller per alarm cycle); with the current demand alone, one at
        # a time; never above the ceiling (maxControllers may have been lowered)
        step = in_target if recent_demand else max(in_target, min(current_controllers - 1, ceiling))
        if in_flight:
            waiting = True
            notes.append(f"scale-in to {step} waits: {in_flight} controller(s) bootstrapping or draining")
        elif in_left > 0:
            waiting = True
            notes.append(
                f"scale-in to {step} waits: scale-in cooldown "
                f"(scaleInCooldownSeconds={spec.scale_in_cooldown_seconds}), {in_left:.0f}s left"
            )
        elif settle > 0:
            waiting = True
            notes.append(
                f"scale-in to {step} waits: hysteresis after a reversal (the last scale-out undid "
                f"a scale-in within {REVERSAL_MINUTES} min; none for {SETTLE_MINUTES} min after it), "
                f"{settle:.0f}s left"
            )
        else:
            desired, action = step, "scale-in"
            if not recent_demand:
                notes.append("scale in one controller at a time (no recent demand to judge more by)")
            elif current_controllers - step > 1:
                notes.append(
                    f"scale in {current_controllers - step} at once: every minute of the last "
                    f"{len(window) + 1} needs at most {in_target}"
                )
            if current_controllers - 1 > ceiling:
                notes.append(f"maxControllers={ceiling} was lowered below the running count")
            if in_target == floor and needed_in < floor:
                notes.append(f"floor minControllers={floor}")
    elif out_target < current_controllers:
        # one fewer would serve the current demand, but not the recent peak or the margin
        if sustained is not None and sustained > demand_iops:
            notes.append(
                f"no scale-in: the recent peak {sustained:,.0f} IOPS needs {needed_in} "
                f"at targetUtilisation x {scale_in_headroom:g}"
            )
        else:
            notes.append(
                f"no scale-in: {current_controllers - 1} would run above "
                f"targetUtilisation x {scale_in_headroom:g}"
            )
    elif needed_out > needed and max(floor, min(needed, ceiling)) < current_controllers:
        # the current demand alone would scale in; its rising trend keeps what it will need
        notes.append(f"no scale-in: the rising demand needs {needed_out} within {lead_minutes:g} min")
    # the floor decided: a scale-out beyond what the demand asks, or a scale-in it held
    floor_set = forecast is not None and (
        (action == "scale-out" and desired > reactive_out)
        or (action == "hold" and reactive_in < current_controllers <= by_forecast)
    )
    if floor_set and forecast is not None:
        notes.append(f"{forecast.reason} (the floor set the count)")
    if volume_bound and volume_iops is not None:
        notes.append(volume_bound_reason(volume_iops, useful))
    elif by_volumes is not None and current_controllers > by_volumes and action == "scale-in":
        notes.append(
            f"{current_controllers} controllers run where {by_volumes} move the volumes' {volume_iops:,} IOPS"
        )
    if action == "hold" and not notes:
        shown = f"demand {demand_iops:,.0f} IOPS is served by {current_controllers} controller(s)"
    if under and action != "scale-out":
        notes.append(f"needs {needed} but maxControllers={ceiling}: under-provisioned")
    reason = "; ".join([shown, *notes])
    return ScaleDecision(
        array_id=spec.array_id,
        demand_iops=demand_iops,
        current_controllers=current_controllers,
        needed_controllers=needed,
        desired_controllers=desired,
        min_controllers=floor,
        max_controllers=ceiling,
        per_controller_iops=per_iops,
        target_utilisation=target_util,
        action=action,
        reason=reason,
        under_provisioned=under,
        waiting=waiting,
        now=_iso(now),
        last_scale_out_at=_iso(last_scale_out_at),
        last_scale_in_at=_iso(last_scale_in_at),
        in_flight=in_flight,
        recent_samples=len(recent_demand),
        forecast_iops=trend,
        sustained_iops=sustained,
        lead_minutes=lead_minutes if recent_demand else None,
        scale_in_headroom=scale_in_headroom,
        volume_iops=volume_iops,
        volume_controllers=by_volumes,
        volume_bound=volume_bound,
        forecast_floor=None if forecast is None else forecast.controllers,
        forecast_reason=None if forecast is None else forecast.reason,
        floor_set=floor_set,
    )
