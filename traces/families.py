"""Seeded families of demand traces for the benchmark (``tools/bench.py``). Pure: simulation only,
not part of the Lambda layer.

``trace(family, seed)`` is a function of its arguments alone (its own ``random.Random(seed)``,
no clock, no file): the same trace every time, and a new seed is a new trace the planner was
never tuned on. Each family draws its shape (period, ramp length, levels, start times, noise)
and the array it runs on from the seed; levels are fractions of what the array serves at its
target utilisation with every controller that adds IOPS, so one shape fits every array size.

The arrays: a large one (2-16 x r5b.24xlarge, 260,000 IOPS each), a small one (1-8 x
r5b.8xlarge, 86,667 IOPS each, the EBS-optimized baselines of ``vsa_core.instances``) and
a volume-bound one (2-16 x 260,000 IOPS on volumes whose provisioned IOPS total 1,000,000: the
sixth controller is the last that adds any). On the volume-bound array the peaks are drawn up to
110% of the volumes' total: demand above it is starved whatever any policy does, which the
benchmark reports as the oracle's own under-provisioned minutes.
"""

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from vsa_core.arrays.capacity import volume_controllers

HOUR = 60
DAY = 24 * HOUR
WEEK = 7 * DAY
TARGET_UTILISATION = 0.7


@dataclass(frozen=True)
class Array:
    """The array a trace runs on (the simulator's spec is built from it)."""

    name: str
    min_controllers: int
    max_controllers: int
    per_controller_iops: int
    volume_iops: int | None = None

    @property
    def useful_controllers(self) -> int:
        if self.volume_iops is None:
            return self.max_controllers
        by_volumes = volume_controllers(self.volume_iops, self.per_controller_iops, TARGET_UTILISATION)
        return min(self.max_controllers, by_volumes)

    @property
    def full_iops(self) -> float:
        """What the array serves at target with every controller that adds IOPS (the volumes'
        total when they bind first): the scale of a trace's levels."""
        at_target = self.useful_controllers * self.per_controller_iops * TARGET_UTILISATION
        return at_target if self.volume_iops is None else min(at_target, float(self.volume_iops))


ARRAYS = (
    Array("2-16 x 260k", 2, 16, 260_000),
    Array("1-8 x 86.7k", 1, 8, 86_667),
    Array("2-16 x 260k, volumes 1M", 2, 16, 260_000, 1_000_000),
)


@dataclass(frozen=True)
class Trace:
    family: str
    seed: int
    array: Array
    demand: tuple[float, ...]
    """IOPS per minute, minute 0 a Monday 00:00."""
    shape: str
    """What the seed drew, in words."""


Shape = tuple[Callable[[int], float], str]
"""A level per minute (a fraction of the array's ``full_iops``) and its description."""


def _periodic_ramps(rng: random.Random) -> Shape:
    period = rng.choice((60, 60, 90, 120))
    ramp = rng.randint(15, min(40, period - 15))
    offset = rng.randrange(period)
    base, peak = rng.uniform(0.05, 0.2), rng.uniform(0.5, 0.95)

    def level(t: int) -> float:
        into = (t - offset) % period
        return base + (peak - base) * (into + 1) / ramp if into < ramp else base

    return level, f"every {period} min a {ramp}-min ramp {base:.2f}->{peak:.2f} then an instant drop"


def _ramp_variants(rng: random.Random) -> Shape:
    """Periodic ramps over the range issue #35 names: 10-30 min up, an instant or a 5-minute
    drop, every hour to every 4 hours."""
    period = rng.choice((60, 90, 120, 180, 240))
    ramp = rng.randint(10, 30)
    drop = rng.choice((0, 5))
    offset = rng.randrange(period)
    base, peak = rng.uniform(0.05, 0.2), rng.uniform(0.5, 0.95)

    def level(t: int) -> float:
        into = (t - offset) % period
        if into < ramp:
            return base + (peak - base) * (into + 1) / ramp
        if into < ramp + drop:
            return peak - (peak - base) * (into - ramp + 1) / (drop + 1)
        return base

    fall = "an instant drop" if not drop else f"a {drop}-min drop"
    return level, f"every {period} min a {ramp}-min ramp {base:.2f}->{peak:.2f} then {fall}"


def _sawtooth(rng: random.Random) -> Shape:
    period = rng.randint(30, 240)
    base, peak = rng.uniform(0.05, 0.3), rng.uniform(0.5, 0.95)
    offset = rng.randrange(period)

    def level(t: int) -> float:
        return base + (peak - base) * ((t - offset) % period) / period

    return level, f"sawtooth {base:.2f}->{peak:.2f} over {period} min"


def _random_steps(rng: random.Random, minutes: int) -> Shape:
    steps: list[tuple[int, float]] = []
    t = 0
    while t < minutes:
        steps.append((t, rng.uniform(0.05, 0.95)))
        t += rng.randint(20, 240)

    def level(m: int) -> float:
        current = steps[0][1]
        for start, value in steps:
            if start > m:
                break
            current = value
        return current

    return level, f"{len(steps)} random steps, 20-240 min each"


def _noisy_plateaus(rng: random.Random, minutes: int) -> Shape:
    plateaus = [rng.uniform(0.1, 0.9) for _ in range(minutes // (6 * HOUR) + 1)]
    return (lambda t: plateaus[t // (6 * HOUR)]), f"{len(plateaus)} 6-hour plateaus"


def _diurnal(m: int, low: float, high: float) -> float:
    """A mild day: ``low`` at night, ``high`` mid-afternoon."""
    return low + (high - low) * math.exp(-(((m / HOUR - 14) / 4) ** 2))


def _nightly_batch(rng: random.Random) -> Shape:
    start = rng.randrange(22 * HOUR, 28 * HOUR) % DAY
    length = rng.randint(60, 240)
    rise = rng.randint(1, 5)
    level_, low, high = rng.uniform(0.6, 1.0), rng.uniform(0.05, 0.15), rng.uniform(0.2, 0.4)

    def level(t: int) -> float:
        m = t % DAY
        into = (m - start) % DAY
        base = _diurnal(m, low, high)
        if into < length:
            return max(base, base + (level_ - base) * min(1.0, (into + 1) / rise))
        return base

    return level, (
        f"nightly batch at {start // HOUR:02d}:{start % HOUR:02d}, {length} min at {level_:.2f} "
        f"(rises in {rise} min) over a {low:.2f}-{high:.2f} day"
    )


def _business_hours(rng: random.Random) -> Shape:
    open_, close = rng.randint(7 * HOUR, 9 * HOUR), rng.randint(17 * HOUR, 19 * HOUR)
    rise = rng.randint(10, 45)
    low, busy, lunch = rng.uniform(0.03, 0.12), rng.uniform(0.55, 0.95), rng.uniform(0.6, 0.9)

    def level(t: int) -> float:
        day, m = divmod(t, DAY)
        if day % 7 >= 5 or not open_ <= m < close:  # Saturday, Sunday, or outside hours
            return low
        up = min(1.0, (m - open_ + 1) / rise)
        noon = lunch if 12 * HOUR <= m < 13 * HOUR else 1.0
        return low + (busy * noon - low) * up

    return level, (
        f"weekdays {open_ // HOUR:02d}:{open_ % HOUR:02d}-{close // HOUR:02d}:{close % HOUR:02d} "
        f"at {busy:.2f} (ramp {rise} min, lunch x{lunch:.2f}), nights and weekends {low:.2f}"
    )


def _flash_crowd(rng: random.Random, minutes: int) -> Shape:
    crowds = sorted(rng.sample(range(2 * HOUR, minutes - 4 * HOUR, 7), rng.randint(1, 3)))
    peaks = [(rng.uniform(0.6, 1.0), rng.randint(20, 60), rng.uniform(15, 40)) for _ in crowds]
    low, high = rng.uniform(0.08, 0.15), rng.uniform(0.2, 0.35)

    def level(t: int) -> float:
        base = _diurnal(t % DAY, low, high)
        for start, (peak, hold, decay) in zip(crowds, peaks, strict=True):
            into = t - start
            if 0 <= into < hold:
                return max(base, peak)
            if hold <= into < hold + 6 * decay:
                return max(base, base + (peak - base) * math.exp(-(into - hold) / decay))
        return base

    return level, f"{len(crowds)} flash crowd(s) at random minutes, up to {max(p for p, _, _ in peaks):.2f}"


def _slow_ramp(rng: random.Random) -> Shape:
    start, end = rng.uniform(0.03, 0.15), rng.uniform(0.6, 0.95)
    hours = rng.randint(12, 60)
    return (
        lambda t: start + (end - start) * min(1.0, t / (hours * HOUR)),
        f"{start:.2f}->{end:.2f} over {hours} h, then flat",
    )


@dataclass(frozen=True)
class Family:
    name: str
    days: int
    noise: tuple[float, float]
    """The range the seed draws the multiplicative noise's standard deviation from."""
    shape: Callable[[random.Random, int], Shape]


FAMILIES = (
    Family("periodic-ramps", 2, (0.02, 0.05), lambda rng, _: _periodic_ramps(rng)),
    Family("ramp-variants", 2, (0.02, 0.05), lambda rng, _: _ramp_variants(rng)),
    Family("sawtooth", 2, (0.02, 0.05), lambda rng, _: _sawtooth(rng)),
    Family("random-steps", 2, (0.02, 0.05), _random_steps),
    Family("noisy-plateaus", 2, (0.05, 0.12), _noisy_plateaus),
    Family("nightly-batch", 7, (0.02, 0.05), lambda rng, _: _nightly_batch(rng)),
    Family("business-hours", 21, (0.02, 0.05), lambda rng, _: _business_hours(rng)),
    Family("flash-crowd", 3, (0.02, 0.05), _flash_crowd),
    Family("slow-ramp", 3, (0.02, 0.05), lambda rng, _: _slow_ramp(rng)),
)
BY_NAME = {f.name: f for f in FAMILIES}


def trace(family: str, seed: int, days: int | None = None) -> Trace:
    """``family``'s trace for ``seed`` (``days`` overrides the family's length): the array is
    ``ARRAYS[seed % 3]``, so every three seeds cover every array."""
    spec = BY_NAME[family]
    rng = random.Random(f"{family}/{seed}")  # noqa: S311 (seeded traces, not secrets)
    minutes = (days or spec.days) * DAY
    array = ARRAYS[seed % len(ARRAYS)]
    scale = array.full_iops * (1.1 if array.volume_iops else 1.0)
    level, shape = spec.shape(rng, minutes)
    sigma = rng.uniform(*spec.noise)
    demand = tuple(max(0.0, scale * level(t) * (1 + rng.gauss(0, sigma))) for t in range(minutes))
    return Trace(family, seed, array, demand, f"{shape}; noise {sigma:.0%}")
