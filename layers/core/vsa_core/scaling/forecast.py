"""The forecast: controllers an array's own recurring demand will need soon (its floor), and
for a cycle shorter than a day, the most it will need (its ceiling). Pure.

A reactive planner sees a surge only once it has begun, and a controller serves ~5 minutes after
it is ordered: a surge faster than that starves, whatever the planner does. Storage demand often
recurs (a job every 90 minutes, a nightly batch, business hours), and what recurred in every one
of the last cycles at this phase is a fair floor for the next minutes.

From the array's demand history (one value a minute, up to ``HISTORY_DAYS``; a missing minute
is ``None``), in ``BUCKET_MINUTES`` buckets (each the highest minute in it) aligned to the clock:
for each period (the cycle of ``SHORT_PERIODS`` the latest history repeats, ``short_period``;
daily; weekly) with at least ``MIN_CYCLES`` full cycles of history, the demand at each bucket of
the coming ``horizon`` that **every one** of the last cycles reached at that phase (the smallest
of them: a surge that skipped a cycle, or moved, recurs less, and a cycle with no data recurs
nothing). The floor is what the highest of these needs (``capacity.controllers_needed``), across
the periods. It is off, and says why in words, without enough history for any period, or when
what recurred needs no more than minControllers (no recurring surge ahead), or when the pattern
said more than came in the last 15 minutes (``CHECK_BUCKETS``: it is not the array's pattern
now). The floor only keeps controllers up (a scale-in never goes below it) and brings them early.

The ceiling is the short cycle's other bound: the most any of its last cycles reached in the
coming buckets (off when the last 15 minutes came above it). The planner does not extrapolate a
rising trend past it, and sheds a fall down to it without waiting for the low alarm's window.

Computed on AWS by the scheduled health check (``aws_forecast``: the history at a 5-minute
period, every array in a few batched GetMetricData calls), which stores it on the array's
registry item (``stored``) and starts ScaleArray when the floor exceeds the running count or
the ceiling is below it (the look-ahead, ``lookahead``); ScaleArray's PlanScale plans with the
stored forecast while it is fresh (``from_stored``), never reading history in the decision. The
simulator runs the same ``floor`` and ``lookahead``.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from vsa_core.arrays.capacity import controllers_needed

BUCKET_MINUTES = 5
HISTORY_DAYS = 14
"""GetMetricData keeps one-minute data 15 days: 14 days of it, and two weeks for the weekly
pattern."""
PERIODS = {"daily": 24 * 60, "weekly": 7 * 24 * 60}
MIN_CYCLES = {"short": 3, "daily": 3, "weekly": 2}
"""Full cycles a pattern must have recurred in (14 days hold two weeks, no more)."""
SHORT_PERIODS = tuple(range(30, 6 * 60 + 1, BUCKET_MINUTES))
"""The cycles shorter than a day looked for (``short_period``): any whole number of buckets from
half an hour to six hours (a job every 90 minutes recurs neither hourly nor daily)."""
MATCH_MINUTES = 120
"""A short cycle must repeat over at least this much of the latest history (or one cycle)."""
MATCH_ERROR = 0.2
"""The most a short cycle's buckets may differ from the cycle before, summed, over the summed
larger of each pair: above it nothing repeats."""
MATCH_SLACK = 0.03
"""The shortest cycle repeating within this of the best is taken (two cycles of an hourly
pattern repeat as well as one)."""
SHAPE_RATIO = 1.5
"""A short cycle has a shape when its busiest bucket is at least this times its quietest: a
flat demand repeats at every period and says nothing about what comes."""
LOOKAHEAD_MINUTES = 5
"""How often the scheduled look-ahead asks for the floor (the health check's default period)."""
STALE_PERIODS = 2
"""A stored floor older than this many health-check periods is ignored (``from_stored``)."""
CHECK_BUCKETS = 3
TOLERANCE = 0.15
FALL_MINUTES = 3
"""A period whose recurring demand over the last ``CHECK_BUCKETS`` buckets was more than
``1 + TOLERANCE`` times what came is off for now: it does not describe the array at present."""
_EPOCH = datetime(1970, 1, 5, tzinfo=UTC)  # a Monday: the weekly phase starts on Monday 00:00 UTC


@dataclass(frozen=True)
class Floor:
    """The forecast floor at ``now`` for the coming ``horizon_minutes``."""

    controllers: int
    """What the recurring demand ahead needs (0 when off)."""
    iops: float
    """The recurring demand ahead (0 when off)."""
    period: str | None
    """The period that set it (``hourly``, ``daily``, ``weekly``); None when off."""
    reason: str
    horizon_minutes: int
    ceiling_controllers: int = 0
    """What the most any of the last cycles of a short recurring cycle reached in the coming
    buckets needs (0: no such cycle holds now): a scale-in may go down to it without waiting
    for the low alarm's window, and a rising trend is not extrapolated beyond it."""
    ceiling_iops: float = 0.0
    fall_at: str | None = None
    """When the coming bucket starts in which every one of the short cycle's last cycles fell
    (ISO 8601; None: no fall before the next look-ahead): from then on a run's ceiling is what
    the cycles reached after it (``fall_controllers``, ``fall_iops``), so the fall is shed once
    the demand has come down, within the bucket instead of at the next look-ahead."""
    fall_controllers: int = 0
    fall_iops: float = 0.0
    falling: bool = False
    """Set by ``in_force`` only: the fall has come, and the ceiling is the level the cycles kept
    after it. A stored floor never has it (``from_stored`` does not read it): each PlanScale
    run decides it from its own demand."""

    @property
    def on(self) -> bool:
        return self.period is not None

    def in_force(self, now: datetime, demand_iops: float, recent_demand: Sequence[float]) -> "Floor":
        """The floor a run at ``now`` plans with: once the cycle's fall has come (its bucket has
        begun, and the demand is down by more than ``TOLERANCE`` from the most it reached since
        ``FALL_MINUTES`` before that: the bucket holds the top too), its ceiling is what the
        cycles reached after the fall, and the floor is no higher. ``recent_demand``: the minutes
        before ``now``, one a minute, oldest first."""
        if self.fall_at is None or now < (start := datetime.fromisoformat(self.fall_at)):
            return self
        since = int((now - start).total_seconds() // 60) + FALL_MINUTES
        if demand_iops > max(recent_demand[-since:], default=0.0) * (1 - TOLERANCE):
            return self
        return replace(
            self,
            controllers=min(self.controllers, self.fall_controllers),
            iops=min(self.iops, self.fall_iops),
            ceiling_controllers=self.fall_controllers,
            ceiling_iops=self.fall_iops,
            falling=True,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def bucket_index(when: datetime) -> int:
    """The clock-aligned bucket a minute falls in."""
    return int((when - _EPOCH).total_seconds() // 60) // BUCKET_MINUTES


def buckets(history: Sequence[float | None], end: datetime) -> tuple[int, list[float | None]]:
    """(index of the first bucket, each bucket's highest minute) of per-minute ``history`` whose
    last value is the minute before ``end``: only whole buckets (a bucket with no datapoint is
    None)."""
    end_index = bucket_index(end)
    first_minute = end - timedelta(minutes=len(history))
    first = bucket_index(first_minute + timedelta(minutes=BUCKET_MINUTES - 1))  # first whole one
    out: list[float | None] = [None] * max(0, end_index - first)
    start_minute = int((first_minute - _EPOCH).total_seconds() // 60)
    for offset, value in enumerate(history):
        index = (start_minute + offset) // BUCKET_MINUTES - first
        if value is not None and 0 <= index < len(out):
            held = out[index]
            out[index] = value if held is None else max(held, value)
    return first, out


def short_period(history_buckets: Sequence[float | None], first: int, nb: int) -> int | None:
    """The cycle shorter than a day that the latest history repeats (minutes), or None: among
    ``SHORT_PERIODS``, each bucket of the last ``MATCH_MINUTES`` (at least one cycle) against the
    bucket a cycle before, and that one against the one before it; the error is the summed
    differences over the summed larger of each pair. The shortest cycle within ``MATCH_SLACK``
    of the best is taken when the best is at most ``MATCH_ERROR`` and the cycle has a shape
    (``SHAPE_RATIO``)."""
    found: list[tuple[float, int]] = []
    for minutes in SHORT_PERIODS:
        width = minutes // BUCKET_MINUTES
        # at least one cycle, up to MATCH_MINUTES, of the history's last MIN_CYCLES cycles
        span = min(max(width, MATCH_MINUTES // BUCKET_MINUTES), nb - first - 2 * width)
        if span < width:
            break
        if not _has_shape(history_buckets, first, range(nb - width, nb)):
            continue
        error = _repeat_error(history_buckets, first, range(nb - span, nb), width)
        if error is not None:
            found.append((error, minutes))
    if not found or min(found)[0] > MATCH_ERROR:
        return None
    best = min(found)[0]
    return min(m for e, m in found if e <= best + MATCH_SLACK)


def _has_shape(history_buckets: Sequence[float | None], first: int, cycle: range) -> bool:
    """The cycle's busiest bucket is at least ``SHAPE_RATIO`` times its quietest: a flat demand
    repeats at every period and says nothing about what comes."""
    values = [v for v in history_buckets[cycle.start - first : cycle.stop - first] if v is not None]
    return bool(values) and max(values) >= SHAPE_RATIO * max(min(values), 1.0)


def _repeat_error(
    history_buckets: Sequence[float | None], first: int, span: range, width: int
) -> float | None:
    """The summed differences over the summed larger of each pair: every bucket of ``span``
    against the one ``width`` before, and that one against the one before it (missing buckets
    left out); None when nothing was compared."""
    start, stop = span.start - first, span.stop - first
    if start - 2 * width < 0:
        return None
    values = history_buckets[start - 2 * width : stop]
    diff = total = 0.0
    for x, y in zip(values[width:], values, strict=False):
        if x is not None and y is not None:
            diff += abs(x - y)
            total += x if x > y else y
    return diff / total if total > 0 else None


@dataclass(frozen=True)
class _Reading:
    """What one period's last cycles reached at the coming buckets."""

    period: str
    minutes: int
    cycles: int
    low: float
    """The busiest coming bucket's least (what every cycle reached there: the floor's demand)."""
    high: float | None
    """The busiest coming bucket's most (what any cycle reached: the ceiling's demand); None when
    a cycle has no data at a coming bucket (a gap bounds nothing, so no ceiling)."""


def _readings(
    history_buckets: Sequence[float | None], first: int, nb: int, ahead: range
) -> tuple[list[_Reading], list[str], list[str]]:
    """Each period's reading of the coming buckets (the periods with enough history whose
    pattern held over the last ``CHECK_BUCKETS``), with what was too short and what did not
    hold, in words."""
    available = len(history_buckets) * BUCKET_MINUTES
    periods = dict(PERIODS)
    short: list[str] = []
    cycle = short_period(history_buckets, first, nb)
    described = f"a cycle of {SHORT_PERIODS[0]} min to {SHORT_PERIODS[-1] // 60} h"
    if cycle is None and available < MIN_CYCLES["short"] * SHORT_PERIODS[0]:
        short.append(f"{described} needs {MIN_CYCLES['short']} x the cycle")
    elif cycle is None:
        short.append(f"no {described.removeprefix('a ')} repeats")
    else:
        periods = {_short_name(cycle): cycle, **periods}
    readings: list[_Reading] = []
    inconsistent: list[str] = []
    for period, minutes in periods.items():
        cycles = MIN_CYCLES.get(period, MIN_CYCLES["short"])
        if available < cycles * minutes:
            short.append(f"{period} needs {cycles} x {_span(minutes)}")
            continue
        width = minutes // BUCKET_MINUTES

        def seen(b: int, width: int = width, cycles: int = cycles) -> list[float]:
            return [(_at(history_buckets, first, b - c * width) or 0.0) for c in range(1, cycles + 1)]

        # a pattern that says more than what just happened is not the array's pattern now (an
        # hourly "pattern" of a plateau that has ended; a job that stopped recurring)
        missed = [
            (min(seen(b)), actual)
            for b in range(nb - CHECK_BUCKETS, nb)
            if (actual := _at(history_buckets, first, b)) is not None
            and min(seen(b)) > actual * (1 + TOLERANCE)
        ]
        if missed:
            said, was = missed[-1]
            inconsistent.append(f"{period}: said {said:,.0f} IOPS where {was:,.0f} came")
            continue
        low = max(min(seen(b)) for b in ahead)
        gap = any(
            _at(history_buckets, first, b - c * width) is None for b in ahead for c in range(1, cycles + 1)
        )
        high = None if gap else max(max(seen(b)) for b in ahead)
        readings.append(_Reading(period, minutes, cycles, low, high))
    return readings, short, inconsistent


# The three sizing keywords are numbers rather than an ArraySpec so the forecast imports nothing
# from the array model (the health check and the simulator pass them from the spec).
def floor(  # noqa: PLR0913
    first: int,
    history_buckets: Sequence[float | None],
    now: datetime,
    *,
    horizon_minutes: int,
    per_controller_iops: int,
    target_utilisation: float,
    min_controllers: int,
) -> Floor:
    """The forecast floor at ``now`` from ``buckets`` of the history (``first`` is the first
    bucket's index; the last bucket ends at or before ``now``)."""
    nb = bucket_index(now)
    # the buckets [now, now + horizon) falls in: the horizon's own minutes, not a bucket beyond
    # (one more bucket held a ramp's controllers up to 5 minutes before it: 1.43x -> 1.29x the
    # oracle on make bench's worst trace)
    last = bucket_index(now + timedelta(minutes=max(1, horizon_minutes) - 1))
    readings, short, inconsistent = _readings(history_buckets, first, nb, range(nb, last + 1))
    horizon = f"the next {horizon_minutes} min"
    ceiling = _ceiling(readings, history_buckets, first, nb, per_controller_iops, target_utilisation)
    cycle = next((r for r in readings if r.period not in PERIODS), None)
    fall = None
    if cycle is not None and ceiling[0]:  # a fall only of a cycle whose ceiling holds now

        def needs(iops: float) -> int:
            return controllers_needed(iops, per_controller_iops, target_utilisation)

        fall = _fall(cycle, history_buckets, first, now, horizon_minutes, needs)
    falling = fall or {}
    if not readings and inconsistent:
        return Floor(
            0,
            0.0,
            None,
            f"forecast off: no pattern holds now (in the last {CHECK_BUCKETS * BUCKET_MINUTES} min "
            f"{'; '.join(inconsistent)})",
            horizon_minutes,
        )
    if not readings:
        available = len(history_buckets) * BUCKET_MINUTES
        # long enough to look for the shortest cycle: nothing recurs, rather than too little
        looked = available >= MATCH_MINUTES + 2 * SHORT_PERIODS[0]
        said = "nothing recurring in" if looked else "too little for a pattern in"
        reason = f"forecast off: {said} {_span(available)} of history ({'; '.join(short)})"
        return Floor(0, 0.0, None, reason, horizon_minutes)
    best = max(readings, key=lambda r: r.low)
    needed = controllers_needed(best.low, per_controller_iops, target_utilisation)
    if needed <= min_controllers:
        return Floor(
            0,
            0.0,
            None,
            f"forecast off: nothing recurring ahead (what recurred in {horizon} of each of the last "
            f"cycles needs {needed} controller(s), minControllers is {min_controllers})",
            horizon_minutes,
            *ceiling,
            **falling,
        )
    return Floor(
        needed,
        best.low,
        best.period,
        f"forecast floor {needed}: {best.low:,.0f} IOPS recurred in {horizon} of each of the last "
        f"{best.cycles} {_cycles_word(best)}",
        horizon_minutes,
        *ceiling,
        **falling,
    )


def _ceiling(
    readings: Sequence[_Reading],
    history_buckets: Sequence[float | None],
    first: int,
    nb: int,
    per_controller_iops: int,
    target_utilisation: float,
) -> tuple[int, float]:
    """(controllers, IOPS) of the short cycle's ceiling: the most any of its last cycles reached
    in the coming buckets, while no bucket of the last ``CHECK_BUCKETS`` came above what the
    cycles reached there by more than ``TOLERANCE``; (0, 0.0) without one."""
    cycle = next((r for r in readings if r.period not in PERIODS), None)
    if cycle is None or cycle.high is None:
        return 0, 0.0
    width = cycle.minutes // BUCKET_MINUTES
    for b in range(nb - CHECK_BUCKETS, nb):
        actual = _at(history_buckets, first, b)
        seen = [_at(history_buckets, first, b - c * width) or 0.0 for c in range(1, cycle.cycles + 1)]
        if actual is not None and actual > max(seen) * (1 + TOLERANCE):
            return 0, 0.0
    return controllers_needed(cycle.high, per_controller_iops, target_utilisation), cycle.high


def _fall(
    cycle: _Reading,
    history_buckets: Sequence[float | None],
    first: int,
    now: datetime,
    horizon_minutes: int,
    needs: Callable[[float], int],
) -> dict[str, Any] | None:
    """The short cycle's fall before the next look-ahead: the first bucket from ``now``'s to the
    one ``LOOKAHEAD_MINUTES`` on after which the most any of its last cycles reached over a
    horizon needs fewer controllers (``needs``) than the most they reached in it; as the
    ``Floor`` fields ``fall_at``, ``fall_controllers`` and ``fall_iops``, or None (a gap, no
    fall)."""
    width = cycle.minutes // BUCKET_MINUTES
    span = -(-max(1, horizon_minutes) // BUCKET_MINUTES)

    def most(b: int) -> float | None:
        seen = [_at(history_buckets, first, b - c * width) for c in range(1, cycle.cycles + 1)]
        return None if None in seen else max(v or 0.0 for v in seen)

    for f in range(bucket_index(now), bucket_index(now + timedelta(minutes=LOOKAHEAD_MINUTES)) + 1):
        here, after = most(f), [most(b) for b in range(f + 1, f + 1 + span)]
        if here is None or any(a is None for a in after):
            return None
        top = max(a or 0.0 for a in after)
        if needs(top) < needs(here):
            start = _EPOCH + timedelta(minutes=f * BUCKET_MINUTES)
            return {"fall_at": start.isoformat(), "fall_controllers": needs(top), "fall_iops": top}
    return None


def _short_name(minutes: int) -> str:
    return "hourly" if minutes == 60 else f"every {minutes} min"


def _cycles_word(reading: _Reading) -> str:
    if reading.period == "weekly":
        return "weeks"
    if reading.period == "daily":
        return "days"
    if reading.period == "hourly":
        return "hours"
    return f"cycles of {reading.minutes} min"


def floor_from_minutes(
    history: Sequence[float | None],
    now: datetime,
    *,
    horizon_minutes: int,
    per_controller_iops: int,
    target_utilisation: float,
    min_controllers: int,
) -> Floor:
    """``floor`` from per-minute history ending at the minute before ``now``."""
    first, history_buckets = buckets(history, now.replace(second=0, microsecond=0))
    return floor(
        first,
        history_buckets,
        now,
        horizon_minutes=horizon_minutes,
        per_controller_iops=per_controller_iops,
        target_utilisation=target_utilisation,
        min_controllers=min_controllers,
    )


def _at(history_buckets: Sequence[float | None], first: int, index: int) -> float | None:
    at = index - first
    return history_buckets[at] if 0 <= at < len(history_buckets) else None


def _span(minutes: int) -> str:
    if minutes >= 24 * 60:
        return f"{minutes / (24 * 60):g} d"
    return f"{minutes / 60:g} h"


def horizon_minutes(boot_minutes: int, period_minutes: int) -> int:
    """The look-ahead a floor computed every ``period_minutes`` must cover: a surge starting
    just before the next run's own look-ahead reaches it still needs ``boot_minutes`` of notice,
    so each run looks a boot plus one period ahead."""
    return boot_minutes + period_minutes


def stored(value: Floor, computed_at: datetime) -> dict[str, Any]:
    """The floor as the registry keeps it (``forecastFloor``), with when it was computed."""
    return {**value.as_dict(), "computedAt": computed_at.isoformat()}


def from_stored(item: Mapping[str, Any] | None, now: datetime, max_age: timedelta) -> Floor:
    """The floor PlanScale plans with: the stored one while it is at most ``max_age`` old;
    else off, saying why. Older than that (``STALE_PERIODS`` health-check periods) the
    look-ahead it covered (a boot plus one period from when it was computed) has passed and the
    health check has missed refreshing it at least twice: it would keep up controllers for a
    surge that is over, or miss one it never saw."""
    if not item:
        return Floor(
            0,
            0.0,
            None,
            "forecast off: no floor stored yet (the health check computes it every period)",
            0,
        )
    computed_at = datetime.fromisoformat(str(item["computedAt"]))
    horizon = int(item.get("horizon_minutes") or 0)
    age = now - computed_at
    if age > max_age:
        return Floor(
            0,
            0.0,
            None,
            f"forecast off: the stored floor was computed {age.total_seconds() / 60:.0f} min ago "
            f"({computed_at.isoformat()}), older than {max_age.total_seconds() / 60:g} min "
            f"({STALE_PERIODS} health-check periods): its look-ahead has passed and the health "
            "check has not refreshed it",
            horizon,
        )
    return Floor(
        int(item.get("controllers") or 0),
        float(item.get("iops") or 0.0),
        item.get("period"),
        str(item.get("reason") or ""),
        horizon,
        int(item.get("ceiling_controllers") or 0),
        float(item.get("ceiling_iops") or 0.0),
        item.get("fall_at"),
        int(item.get("fall_controllers") or 0),
        float(item.get("fall_iops") or 0.0),
    )


def lookahead(
    value: Floor,
    desired: int,
    max_controllers: int,
    lock_until: int | None,
    now: datetime,
    min_controllers: int = 1,
) -> tuple[Literal["high", "low"] | None, str]:
    """Whether the health check starts ScaleArray (the look-ahead), as which alarm's run, and
    why (not): ``high`` when the floor, within maxControllers, is above the group's desired
    count (controllers booted ahead of a recurring surge); ``low`` when a short cycle's ceiling
    is below it (the cycle's own fall: PlanScale sheds it once the demand has fallen, without the
    low alarm's window); None otherwise, or while a ScaleArray run holds the array's scaling
    lock (that run plans with the stored forecast itself)."""
    target = min(value.controllers, max_controllers)
    kind: Literal["high", "low"]
    if value.on and target > desired:
        kind, why = "high", f"the floor {target} is above the desired count {desired}"
        started = "ScaleArray started ahead of the surge"
    elif (value.ceiling_controllers and max(value.ceiling_controllers, min_controllers) < desired) or (
        value.fall_at is not None and max(value.fall_controllers, min_controllers) < desired
    ):
        # (a ceiling under minControllers at minControllers sheds nothing: no run for it)
        kind = "low"
        why = (
            f"every recent cycle stayed within {value.ceiling_controllers} controller(s) in the next "
            f"{value.horizon_minutes} min, {desired} desired"
        )
        started = "ScaleArray started to shed the cycle's fall once it comes"
    elif value.on:
        return None, f"the floor {target} is at or below the desired count {desired}"
    else:
        return None, value.reason
    if lock_until is not None and lock_until >= int(now.timestamp()):
        return None, f"{why}; a ScaleArray run holds the lock"
    return kind, f"{why}: {started}"


def lookahead_runs(value: Floor, kind: Literal["high", "low"], desired: int, now: datetime) -> list[datetime]:
    """When the look-ahead's runs start: ahead of a surge once, now; for a cycle's fall once a
    minute from the fall (from now when the ceiling is below the count already) until the next
    look-ahead, so the fall is shed within a minute of the demand coming down (a run that finds
    the demand still up, or the fall shed, changes nothing)."""
    if kind == "high":
        return [now]
    start = now
    if value.fall_at is not None and not (value.ceiling_controllers and value.ceiling_controllers < desired):
        start = max(now, datetime.fromisoformat(value.fall_at))
    end = now + timedelta(minutes=LOOKAHEAD_MINUTES)
    runs = (start + timedelta(minutes=k) for k in range(LOOKAHEAD_MINUTES))
    return [run for run in runs if run < end]
