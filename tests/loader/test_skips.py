"""Skipped step ranges (``loader/skips.py``): answers equal a scan of the ranges, and many chained
ranges cost a number of range visits linear in their count (issue 30, item 10: 10,000 chained
ranges cost 9.6 s at the first batch; the wall-clock ratio is in ``benchmarks/bench_skips.py``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import resumable_data as rd
from resumable_data.loader.skips import SkipIndex
from resumable_data.loader.state import SkippedRange, first_unskipped, skipped_before


def scan_first_unskipped(ranges, step):
    while any(a <= step < b for a, b in ranges):
        step = next(b for a, b in ranges if a <= step < b)
    return step


@pytest.mark.parametrize("seed", range(20))
def test_the_index_answers_as_a_scan_does(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 30))
    starts = rng.integers(0, 60, n)
    ranges = [(int(a), int(a + rng.integers(1, 8))) for a in starts]
    index = SkipIndex(ranges)
    for step in range(80):
        assert index.covers(step) == any(a <= step < b for a, b in ranges)
        assert index.first_unskipped(step) == scan_first_unskipped(ranges, step)
        assert index.skipped_before(step) == len({s for a, b in ranges for s in range(a, b) if s < step})


class Counted(list):
    """A list of ranges that counts how many ranges its users visit."""

    visits = 0

    def __iter__(self):
        for r in super().__iter__():
            Counted.visits += 1
            yield r


@pytest.mark.parametrize("fn", [first_unskipped, skipped_before])
def test_chained_ranges_are_visited_a_linear_number_of_times(fn):
    n = 2_000
    ranges = Counted(SkippedRange(i, i + 1, "chain") for i in reversed(range(n)))
    Counted.visits = 0
    assert fn(ranges, 0 if fn is first_unskipped else n) == n
    assert Counted.visits <= 2 * n, Counted.visits  # a rescan after each hop visits n * n / 2


def test_a_state_with_many_chained_ranges_resumes_past_them():
    class Items:
        def __len__(self):
            return 50_000

        def __getitem__(self, i):
            return i

    make = lambda: rd.DataLoader(Items(), batch_size=4, seed=0, commit="explicit", dataset_version="skips")  # noqa: E731
    state = json.loads(json.dumps(make().state_dict()))
    state["skipped"] = [[i, i + 1, "chain"] for i in reversed(range(3_000))] + [[5_000, 5_002, "later"]]
    loader = make()
    loader.load_state_dict(state)
    it = iter(loader)
    got = [int(next(it)[0]) for _ in range(2_003)]
    expect = [4 * s for s in range(3_000, 5_000)] + [4 * s for s in range(5_002, 5_005)]
    assert got == expect
