"""The minutes test's model of what an alarm's evaluation read (tests/integration/alarm_reads.py):
which minutes of a published trace explain the datapoints an alarm's history says it evaluated,
each volume's reads and writes (half the level each) filled forward from their newest landed
minute as the product's FILL(…, REPEAT) fills them."""

from datetime import UTC, datetime, timedelta

from tests.integration.alarm_reads import FILLED_FROM, minutes_seen

T0 = datetime(2026, 12, 2, 18, 0, tzinfo=UTC)
MINUTES = [T0 + timedelta(minutes=i) for i in range(12)]
# each minute its own level, and no two pairs of minutes with the same mean
RAMP = {m: 100.0 * (i + 1) ** 2 for i, m in enumerate(MINUTES)}
STEP = {m: (50_000.0 if i < 6 else 81_900.0) for i, m in enumerate(MINUTES)}  # a rise at minute 6


def read(
    levels: dict[datetime, float], window: list[int], reads_through: int, writes_through: int
) -> dict[datetime, float]:
    """What an alarm evaluating ``window`` reads: each series its own level up to the minute it
    has landed through, that minute's level after it."""

    def half(t: int, through: int) -> float:
        return levels[MINUTES[min(t, through)]] / 2

    return {MINUTES[t]: half(t, reads_through) + half(t, writes_through) for t in window}


def test_whole_minutes_are_explained_from_the_newest_landed_one():
    assert minutes_seen(read(RAMP, [8, 9], 8, 8), RAMP, MINUTES) == [8, 9]
    assert minutes_seen(read(RAMP, [8, 9], 7, 7), RAMP, MINUTES) == [7, 8, 9]


def test_a_series_a_minute_behind_the_other_is_explained_from_before_the_window():
    # evaluated early in minute 7 (N = 2): the writes of minute 6 have landed, the reads not yet
    assert minutes_seen(read(RAMP, [6, 7], 5, 6), RAMP, MINUTES) == [5, 6, 7]


def test_the_rise_read_half_old_half_new_is_explained():
    # the case a busy machine met: neither minute of the window is a whole minute of the trace
    evaluated = read(STEP, [6, 7], 5, 6)
    assert len(set(evaluated.values())) == 1
    assert 50_000 < evaluated[MINUTES[7]] < 81_900
    near = minutes_seen(evaluated, STEP, MINUTES)
    assert near, evaluated
    assert near[-1] == 7
    assert near[0] >= 6 - 1 - FILLED_FROM, near


def test_a_value_no_landing_explains_is_not_explained():
    assert minutes_seen({MINUTES[6]: 12_345.0, MINUTES[7]: 12_345.0}, RAMP, MINUTES) == []


def test_a_series_behind_by_more_than_the_query_reaches_is_not_explained():
    late = 7 - FILLED_FROM - 1  # reads through a minute older than the query reaches back
    assert minutes_seen(read(RAMP, [7, 8], late, 8), RAMP, MINUTES) == []
    assert minutes_seen(read(RAMP, [7, 8], late + 1, 8), RAMP, MINUTES) == list(range(late + 1, 9))


def test_a_level_held_is_explained_by_every_landing_the_query_reached():
    assert minutes_seen(read(STEP, [10, 11], 11, 11), STEP, MINUTES) == list(range(10 - FILLED_FROM, 12))
