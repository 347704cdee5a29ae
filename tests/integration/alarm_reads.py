"""What a CloudWatch alarm's evaluation read, explained by the minutes a test published: the
minutes test (test_scaling_settles.py) checks the simulator's alarm model at the minutes the
deployed alarm itself read, from its alarm history's evaluated datapoints."""

import math
from datetime import datetime, timedelta

# How many minutes before its window an alarm's evaluation may have read a series' newest landed
# datapoint from (REPEAT fills its window from there): a series a minute behind the other, and a
# publisher a minute late on a busy machine.
FILLED_FROM = 2


def minutes_seen(
    evaluated: dict[datetime, float], levels: dict[datetime, float], minutes: list[datetime]
) -> list[int]:
    """The trace's minutes at which the simulator's alarm model may stand for that evaluation.
    The product's alarm math fills a series' minutes not landed yet with its newest value
    (``FILL(…, REPEAT)``, ``arrays.demand``), and EBS's two series of a volume (VolumeReadOps,
    VolumeWriteOps: half the level each here) land apart, as on AWS, where nothing makes them
    one write: the alarm read the reads up to some newest landed minute ``j`` and the writes up
    to ``k``, each series' newest level after it, up to the newest minute it evaluated (``e``).
    ``j`` and ``k`` may be up to ``FILLED_FROM`` minutes older than every minute it evaluated:
    the alarm's query reaches back further than its N periods (the range REPEAT fills from), and
    with N = 2 an evaluation early in a minute, when one series of the minute before has landed
    and the other not yet, reads one series through the minute before its window. Every pair
    the values agree with, and the minutes from the older of the first such pair up to ``e``:
    the model, which reads whole minutes only, is in breach at one of them."""
    newest = max(evaluated)
    since = min(evaluated) - timedelta(minutes=FILLED_FROM)
    seen = [m for m in minutes if since <= m <= newest]

    def level(t: datetime, through: datetime) -> float:
        return levels[t] if t <= through else levels[through]

    def read_through(j: datetime, k: datetime) -> bool:
        return all(
            math.isclose(v, (level(t, j) + level(t, k)) / 2, rel_tol=1e-6, abs_tol=1e-6)
            for t, v in evaluated.items()
            if t in levels
        )

    landed = [min(j, k) for j in seen for k in seen if read_through(j, k)]
    if not landed:
        return []
    last = max(i for i, m in enumerate(minutes) if m <= newest)
    return list(range(minutes.index(min(landed)), last + 1))
