"""The benchmark's generated traces (``traces/families.py``): pure and deterministic per seed, a
new seed a new trace, every array size covered, volume-bound arrays driven past their volumes."""

import pytest

from traces.families import ARRAYS, BY_NAME, DAY, FAMILIES, trace


@pytest.mark.parametrize("family", [f.name for f in FAMILIES])
def test_a_trace_is_a_function_of_its_family_and_seed(family: str):
    # Given / When: the same family and seed twice, and another seed
    first, again, other = trace(family, 3, days=2), trace(family, 3, days=2), trace(family, 4, days=2)
    # Then: the same minutes, a different trace for another seed, one non-negative sample a minute
    assert first == again
    assert first.demand != other.demand
    assert len(first.demand) == 2 * DAY
    assert min(first.demand) >= 0
    assert first.shape


def test_every_three_seeds_cover_every_array_and_a_family_keeps_its_length():
    assert {trace("slow-ramp", seed, days=1).array for seed in range(3)} == set(ARRAYS)
    assert len(trace("business-hours", 0).demand) == BY_NAME["business-hours"].days * DAY


def test_levels_follow_the_arrays_size_and_a_volume_bound_array_is_driven_past_its_volumes():
    big, small, bound = (trace("periodic-ramps", seed) for seed in range(3))
    assert max(big.demand) > 3 * max(small.demand)  # 16 x 260k against 8 x 86.7k
    assert bound.array.volume_iops is not None
    assert bound.array.useful_controllers == 6  # 1M IOPS / (260k x 0.7), rounded up
    # the peaks are drawn up to 110% of the volumes' IOPS: some seeds' demand cannot be served
    bound_peaks = [max(trace("periodic-ramps", seed).demand) for seed in range(2, 30, 3)]
    assert bound.array.volume_iops < max(bound_peaks) < 1.3 * bound.array.volume_iops
    assert min(bound_peaks) < bound.array.volume_iops


def test_periodic_ramps_recur_with_the_drawn_period():
    # the level of a periodic ramp repeats every period; the noise (a few %) does not hide it
    tr = trace("periodic-ramps", 0)
    period = int(tr.shape.split()[1])
    late = tr.demand[DAY : DAY + period]
    later = tr.demand[DAY + period : DAY + 2 * period]
    assert sum(abs(a - b) for a, b in zip(late, later, strict=True)) < 0.2 * sum(late)
