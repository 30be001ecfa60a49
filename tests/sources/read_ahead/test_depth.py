"""The read-ahead window sized by bytes (sources/read_ahead/depth.py): the rule at each boundary
(the floor, the byte limit, the most steps), and the fetcher's use of it (never past the epoch's
end beyond the floor, an explicit ``lookahead`` fixing the depth)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import resumable_data as rd
from resumable_data.sources.read_ahead.depth import BASE_STEPS, MAX_STEPS, SHARE_OF_BUDGET, window_steps


def seq(n_units: int, per_unit: int) -> list[list[int]]:
    """A sequential order: each unit read by ``per_unit`` consecutive steps."""
    return [[s // per_unit] for s in range(n_units * per_unit)]


def test_the_floor_is_planned_whatever_the_bytes():
    assert window_steps(seq(10, 2), [100] * 10, floor=6, most=20, limit=0) == 6


def test_past_the_floor_a_step_is_planned_while_the_units_fit_the_limit():
    steps, sizes = seq(10, 2), [100] * 10
    # units 0..4 (steps 0..9) take 500 bytes: step 10 would read unit 5 (600 bytes)
    assert window_steps(steps, sizes, floor=2, most=20, limit=500) == 10
    assert window_steps(steps, sizes, floor=2, most=20, limit=599) == 10
    assert window_steps(steps, sizes, floor=2, most=20, limit=600) == 12


def test_a_unit_is_counted_once_however_many_steps_read_it():
    steps = [[0, 1], [1, 0], [0], [1, 2]]
    assert window_steps(steps, [10, 10, 10], floor=1, most=4, limit=20) == 3
    assert window_steps(steps, [10, 10, 10], floor=1, most=4, limit=30) == 4


def test_most_bounds_the_window_and_never_cuts_the_floor():
    steps, sizes = seq(10, 2), [1] * 10
    assert window_steps(steps, sizes, floor=2, most=7, limit=1 << 30) == 7
    assert window_steps(steps, sizes, floor=5, most=3, limit=1 << 30) == 5  # most < floor: the floor


def test_units_not_read_ahead_count_nothing():
    assert window_steps([[0], [1], [2]], [None, 10, None], floor=0, most=3, limit=10) == 3
    assert window_steps([[0], [1], [2]], [None, 11, None], floor=0, most=3, limit=10) == 1


def test_the_steps_are_read_lazily():
    def endless():
        s = 0
        while True:
            yield [s]
            s += 1

    assert window_steps(endless(), [1] * 100, floor=3, most=50, limit=10) == 10


@settings(deadline=None)  # the suite's rule: a loaded machine's pause is no failure
@given(
    st.lists(st.lists(st.integers(0, 15), max_size=4), max_size=40),
    st.lists(st.integers(0, 1000), min_size=16, max_size=16),
    st.integers(0, 40),
    st.integers(0, 40),
    st.integers(0, 8000),
)
def test_properties(steps, sizes, floor, most, limit):
    n = window_steps(steps, sizes, floor, most, limit)
    assert n == min(len(steps), max(n, floor))  # the floor, or every step there is
    assert n <= max(floor, most)

    def used(k):
        return sum(sizes[u] for u in {u for s in steps[:k] for u in s})

    if n > floor:
        assert used(n) <= limit  # past the floor: within the limit
    if floor <= n < min(len(steps), max(floor, most)):
        assert used(n + 1) > limit  # it stopped because the next step does not fit


# -- the fetcher ------------------------------------------------------------------------------------


class Source:
    """What a Prefetcher needs of a source, over ``n`` units of ``rows`` records and ``size`` bytes,
    never fetched (the tests look at the plan, not at the reads)."""

    def __init__(self, n: int, rows: int, size: int) -> None:
        self.n, self.rows, self.size = n, rows, size

    def unit_starts(self):
        return np.arange(self.n, dtype=np.int64) * self.rows

    def unit_spans(self):
        return [(k * self.size, self.size) for k in range(self.n)]

    def unit_shards(self):
        return np.arange(self.n, dtype=np.int64)  # one unit per shard

    def shard_size(self, j):
        return self.size

    def fetch_unit(self, k):
        raise OSError("not in this test")

    fetch_shard = fetch_run = fetch_unit

    def attach_read_ahead(self, cache):
        pass


def planned(config: rd.ReadAhead, epoch_end: int | None, step: int = 0, n: int = 400) -> int:
    """The step after the window a fetcher plans when step ``step`` is handed out (sequential order,
    batch 10 over units of 10 records: one unit a step, 1,000 bytes each)."""
    from resumable_data.sources.read_ahead.fetcher import Prefetcher

    src = Source(n, 10, 1_000)
    fetcher = Prefetcher(src, config, lambda s: np.arange(s * 10, s * 10 + 10) % (n * 10))
    try:  # its reads fail (OSError): the plan is what is looked at
        fetcher.new_pass(epoch_end)
        fetcher.plan(step, step)
        return fetcher._schedule.stop
    finally:
        fetcher.close()


@pytest.mark.parametrize("unit", [rd.ReadUnit.RECORD_BATCH, rd.ReadUnit.SHARD])
def test_the_fetcher_plans_by_bytes_within_the_epoch(unit):
    big = rd.ReadAhead(lookahead=None, cache_bytes=1 << 30, unit=unit)
    assert planned(big, epoch_end=300) == 300  # to the epoch's end, not past it
    assert planned(big, epoch_end=300, step=290) == 290 + BASE_STEPS  # the floor runs into the next epoch
    assert planned(big, epoch_end=None) == BASE_STEPS  # epoch unknown: the floor
    assert planned(big, epoch_end=5000, n=5000) == MAX_STEPS
    # half of 200,000 bytes holds the units of 100 steps
    by_bytes = rd.ReadAhead(lookahead=None, cache_bytes=200_000, unit=unit)
    assert planned(by_bytes, epoch_end=300) == int(200_000 * SHARE_OF_BUDGET) // 1000
    assert planned(rd.ReadAhead(lookahead=None, cache_bytes=20_000, unit=unit), epoch_end=300) == BASE_STEPS
    assert planned(rd.ReadAhead(cache_bytes=1 << 30, unit=unit), epoch_end=300) == BASE_STEPS  # default: 64


def test_an_explicit_lookahead_fixes_the_depth():
    assert planned(rd.ReadAhead(lookahead=8, cache_bytes=1 << 30), epoch_end=300) == 8
    assert planned(rd.ReadAhead(lookahead=500, cache_bytes=1 << 30), epoch_end=300) == 500  # past the epoch


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "64", (1 << 20) + 1])
def test_a_bad_lookahead_is_refused_naming_it(bad):
    with pytest.raises(rd.ConfigError, match="lookahead") as e:
        rd.ReadAhead(lookahead=bad)
    assert "None" in str(e.value)


def test_lookahead_defaults_to_64_steps_and_none_sizes_it_by_bytes():
    assert rd.ReadAhead().lookahead == 64 == BASE_STEPS
    assert rd.ReadAhead(lookahead=None).steps == BASE_STEPS
    assert rd.ReadAhead(lookahead=np.int64(7)).steps == 7
