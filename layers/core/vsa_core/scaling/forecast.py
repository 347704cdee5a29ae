"""The forecast floor: controllers an array's own recurring demand will need soon. Pure.

A reactive planner sees a surge only once it has begun, and a controller serves ~5 minutes after
it is ordered: a surge faster than that starves, whatever the planner does. Storage demand often
recurs (hourly jobs, a nightly batch, business hours), and what recurred in every one of the
last cycles at this time of the hour, day or week is a fair floor for the next minutes.

From the array's demand history (one value a minute, up to ``HISTORY_DAYS``; a missing minute
is ``None``), in ``BUCKET_MINUTES`` buckets (each the highest minute in it) aligned to the clock:
for each period (``PERIODS``: hourly, daily, weekly) with at least ``MIN_CYCLES`` full cycles of
history, the demand at each bucket of the coming ``horizon`` that **every one** of the last
``MIN_CYCLES`` cycles reached at that phase (the smallest of them: a surge that skipped a cycle,
or moved, recurs less, and a cycle with no data recurs nothing). The floor is what the highest of
these needs (``capacity.controllers_needed``), across the periods. It is off, and says why in
words, without enough history for any period, or when what recurred needs no more than
minControllers (no recurring surge ahead), or when the pattern said more than came in the last
15 minutes (``CHECK_BUCKETS``: it is not the array's pattern now). Anything else is the reactive
planner's: the floor only keeps controllers up (a scale-in never goes below it) and brings them
early.

Computed on AWS by the scheduled health check (``aws_forecast``: the history at a 5-minute
period, every array in a few batched GetMetricData calls), which stores it on the array's
registry item (``stored``) and starts ScaleArray when it exceeds the running count (the
look-ahead); ScaleArray's PlanScale plans with the stored floor while it is fresh
(``from_stored``), never reading history in the decision. The simulator runs the same
``floor``.
"""

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from vsa_core.arrays.capacity import controllers_needed

BUCKET_MINUTES = 5
HISTORY_DAYS = 14
"""GetMetricData keeps one-minute data 15 days: 14 days of it, and two weeks for the weekly
pattern."""
PERIODS = {"hourly": 60, "daily": 24 * 60, "weekly": 7 * 24 * 60}
MIN_CYCLES = {"hourly": 3, "daily": 3, "weekly": 2}
"""Full cycles a pattern must have recurred in (14 days hold two weeks, no more)."""
LOOKAHEAD_MINUTES = 5
"""How often the scheduled look-ahead asks for the floor (the health check's default period)."""
STALE_PERIODS = 2
"""A stored floor older than this many health-check periods is ignored (``from_stored``)."""
CHECK_BUCKETS = 3
TOLERANCE = 0.15
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

    @property
    def on(self) -> bool:
        return self.period is not None

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
    ahead = range(nb, last + 1)
    available = len(history_buckets) * BUCKET_MINUTES
    best: tuple[float, str, int] | None = None  # (iops, period, cycles)
    short: list[str] = []
    inconsistent: list[str] = []
    for period, minutes in PERIODS.items():
        cycles = MIN_CYCLES[period]
        if available < cycles * minutes:
            short.append(f"{period} needs {cycles} x {_span(minutes)}")
            continue
        width = minutes // BUCKET_MINUTES

        def recurred_at(b: int, width: int = width, cycles: int = cycles) -> float:
            seen = [_at(history_buckets, first, b - c * width) for c in range(1, cycles + 1)]
            return min((v or 0.0) for v in seen)

        # a pattern that says more than what just happened is not the array's pattern now (an
        # hourly "pattern" of a plateau that has ended; a job that stopped recurring)
        missed = [
            (b, recurred_at(b), actual)
            for b in range(nb - CHECK_BUCKETS, nb)
            if (actual := _at(history_buckets, first, b)) is not None
            and recurred_at(b) > actual * (1 + TOLERANCE)
        ]
        if missed:
            _, said, was = missed[-1]
            inconsistent.append(f"{period}: said {said:,.0f} IOPS where {was:,.0f} came")
            continue
        recurred = max(recurred_at(b) for b in ahead)
        if best is None or recurred > best[0]:
            best = (recurred, period, cycles)
    horizon = f"the next {horizon_minutes} min"
    if best is None and inconsistent:
        return Floor(
            0,
            0.0,
            None,
            f"forecast off: no pattern holds now (in the last {CHECK_BUCKETS * BUCKET_MINUTES} min "
            f"{'; '.join(inconsistent)})",
            horizon_minutes,
        )
    if best is None:
        return Floor(
            0,
            0.0,
            None,
            f"forecast off: {_span(available)} of history, too little for a pattern ({'; '.join(short)})",
            horizon_minutes,
        )
    iops, period, cycles = best
    needed = controllers_needed(iops, per_controller_iops, target_utilisation)
    if needed <= min_controllers:
        return Floor(
            0,
            0.0,
            None,
            f"forecast off: nothing recurring ahead (what recurred in {horizon} of each of the last "
            f"cycles needs {needed} controller(s), minControllers is {min_controllers})",
            horizon_minutes,
        )
    return Floor(
        needed,
        iops,
        period,
        f"forecast floor {needed}: {iops:,.0f} IOPS recurred in {horizon} of each of the last {cycles} "
        f"{'weeks' if period == 'weekly' else 'days' if period == 'daily' else 'hours'}",
        horizon_minutes,
    )


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
    )


def lookahead(
    value: Floor, desired: int, max_controllers: int, lock_until: int | None, now: datetime
) -> tuple[bool, str]:
    """Whether the health check starts ScaleArray for the floor (the look-ahead), and why (not):
    only when the floor, within maxControllers, is above the group's desired count and no
    ScaleArray run holds the array's scaling lock (that run plans with the stored floor itself)."""
    if not value.on:
        return False, value.reason
    target = min(value.controllers, max_controllers)
    if target <= desired:
        return False, f"the floor {target} is at or below the desired count {desired}"
    above = f"the floor {target} is above the desired count {desired}"
    if lock_until is not None and lock_until >= int(now.timestamp()):
        return False, f"{above}; a ScaleArray run holds the lock"
    return True, f"{above}: ScaleArray started ahead of the surge"
