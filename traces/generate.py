"""Write the benchmark's demand traces (``minute,iops``, one row a minute), deterministically.

    .venv/bin/python traces/generate.py      # rewrites traces/*.csv; the same bytes every time

Each trace is a few days of an array's IOPS demand for the default simulated array (controllers
of 260,000 IOPS at 70% target, at most 16: peaks stay under 16 x 182,000 = 2.9M IOPS), with 3%
multiplicative noise from a fixed seed:

- ``diurnal-oltp``: 3 days of a business OLTP database: ~120k IOPS at night, a morning and an
  afternoon hump up to ~1.9M on working days, a lighter third day (Saturday).
- ``spiky-batch``: 2 days of a 250k IOPS baseline with batch jobs: every 4 hours a job jumps to
  1.2M-2.2M within 2 minutes for 30-90 minutes, and a nightly 2-hour ETL at 2.4M.
- ``slow-ramp``: 3 days of a workload migrating in: 100k growing linearly to 2.4M over 60 hours,
  then flat.
- ``flash-crowd``: 2 days of a mild diurnal web back end (300k-800k) hit twice by a flash crowd:
  demand jumps to 2.3M within a minute, holds 45 minutes, decays back over about an hour.
"""

import math
import random
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
DAY = 24 * 60


def _hump(minute_of_day: float, centre_hour: float, width_hours: float) -> float:
    return math.exp(-(((minute_of_day / 60 - centre_hour) / width_hours) ** 2))


def diurnal_oltp(t: int) -> float:
    day, m = divmod(t, DAY)
    scale = 1.0 if day < 2 else 0.45
    load = 1.05e6 * _hump(m, 10.5, 2.2) + 0.95e6 * _hump(m, 15.5, 2.0) + 0.35e6 * _hump(m, 13, 5)
    return 120_000 + scale * load


def spiky_batch(t: int) -> float:
    base = 250_000.0
    m = t % DAY
    if 60 <= m < 180:  # nightly ETL, 01:00-03:00
        return 2_400_000.0 if m >= 62 else base + (m - 60) / 2 * 2_150_000
    slot, into = divmod(t, 240)
    rng = random.Random(1000 + slot)  # noqa: S311 (a fixed seed: traces, not secrets); each job's size and length from its own seed
    level, length = rng.uniform(1.2e6, 2.2e6), rng.randint(30, 90)
    start = 20
    if start <= into < start + length:
        return base + (level - base) * min(1.0, (into - start + 1) / 2)
    return base


def slow_ramp(t: int) -> float:
    return 100_000 + 2_300_000 * min(1.0, t / (60 * 60))


def flash_crowd(t: int) -> float:
    _, m = divmod(t, DAY)
    base = 300_000 + 500_000 * _hump(m, 14, 4)
    for start in (DAY + 11 * 60, DAY + DAY // 2 + 8 * 60):  # day 2 11:00, day 2 20:00
        into = t - start
        if 0 <= into < 45:
            return max(base, 2_300_000.0)
        if 45 <= into < 240:
            return base + (2_300_000 - base) * math.exp(-(into - 45) / 25)
    return base


TRACES: dict[str, tuple[int, Callable[[int], float]]] = {
    "diurnal-oltp": (3 * DAY, diurnal_oltp),
    "spiky-batch": (2 * DAY, spiky_batch),
    "slow-ramp": (3 * DAY, slow_ramp),
    "flash-crowd": (2 * DAY, flash_crowd),
}


def main() -> None:
    for seed, (name, (minutes, shape)) in enumerate(sorted(TRACES.items())):
        noise = random.Random(seed)  # noqa: S311 (a fixed seed: traces, not secrets)
        lines = ["minute,iops"]
        for t in range(minutes):
            lines.append(f"{t},{round(max(0.0, shape(t) * (1 + noise.gauss(0, 0.03))))}")
        (HERE / f"{name}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"traces/{name}.csv: {minutes} minutes")


if __name__ == "__main__":
    main()
