"""The read plan (plan/reads.py): golden vectors for fixed seeds and the properties it promises."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from resumable_data.plan import OrderSpec, Plan
from resumable_data.plan.reads import belady_fetches, belady_misses, read_schedule, step_units

STARTS = np.arange(0, 200, 16)  # 13 units of 16 records (the last one 8)


def _schedule(order: OrderSpec, first: int, k: int):
    plan = Plan(num_records=200, global_batch=8, version_hash="v", seed=7, order=order, tail="drop")
    recs = [plan.records(np.arange(s * 8, s * 8 + 8)) for s in range(first, first + k)]
    return read_schedule(first, recs, STARTS)


def test_golden_window_shuffle():
    sch = _schedule(OrderSpec("window", 40), 3, 4)
    assert [s.tolist() for s in sch.steps] == [
        [8, 11, 6, 2, 0, 10],
        [6, 0, 12, 1, 11, 5],
        [6, 8, 9, 4, 11, 1],
        [2, 3, 1, 10, 6, 4, 12],
    ]
    assert sch.order.tolist() == [8, 11, 6, 2, 0, 10, 12, 1, 5, 9, 4, 3]
    assert (sch.first, sch.stop) == (3, 7)
    assert sch.next_use(8, 4) == 5 and sch.next_use(8, 6) is None and sch.next_use(99, 3) is None
    assert sch.units_between(4, 5) == {6, 0, 12, 1, 11, 5}


def test_golden_global_shuffle_and_belady():
    sch = _schedule(OrderSpec("global"), 0, 3)
    assert [s.tolist() for s in sch.steps] == [[11, 9, 10, 0, 5, 3], [11, 12, 0, 7, 5, 10], [0, 9, 7, 10, 1]]
    assert belady_misses(sch.steps, np.full(13, 10), 40) == 10
    assert belady_fetches(sch.steps, np.full(13, 10), 40).tolist() == [11, 9, 10, 0, 5, 3, 12, 7, 9, 1]


def test_sequential_reads_each_unit_once_in_order():
    sch = _schedule(OrderSpec("sequential"), 0, 25)
    assert sch.order.tolist() == list(range(13))
    assert belady_misses(sch.steps, np.full(13, 10), 10) == 13  # one unit of cache: no unit read twice


@settings(derandomize=True, max_examples=80, deadline=None)
@given(
    st.lists(st.integers(1, 40), min_size=1, max_size=12),
    st.lists(st.lists(st.integers(0, 10**6), min_size=0, max_size=30), min_size=1, max_size=8),
    st.integers(0, 50),
    st.integers(0, 400),
)
def test_schedule_properties(unit_rows, raw_steps, first, capacity):
    starts = np.concatenate([[0], np.cumsum(unit_rows)[:-1]]).astype(np.int64)
    n = int(sum(unit_rows))
    steps = [np.array([r % n for r in s], dtype=np.int64) for s in raw_steps]
    sch = read_schedule(first, steps, starts)
    owner = np.repeat(np.arange(len(unit_rows)), unit_rows)
    for recs, units in zip(steps, sch.steps):
        want = list(OrderedDict.fromkeys(owner[recs].tolist()))  # each unit once, by first need
        assert units.tolist() == want
        assert units.tolist() == step_units(recs, starts).tolist()
    seen = list(OrderedDict.fromkeys(u for s in sch.steps for u in s.tolist()))
    assert sch.order.tolist() == seen
    for u in range(len(unit_rows)):
        for at in range(first, first + len(steps) + 1):
            brute = next((first + i for i, s in enumerate(sch.steps) if first + i >= at and u in s.tolist()), None)
            assert sch.next_use(u, at) == brute
    sizes = np.array(unit_rows) * 4
    reads = sum(len(s) for s in sch.steps)
    got = belady_misses(sch.steps, sizes, capacity)
    assert len(seen) <= got <= reads
    assert got <= _lru_misses(sch.steps, sizes, capacity)
    fetched = belady_fetches(sch.steps, sizes, capacity)
    assert len(fetched) == got and set(fetched.tolist()) == set(seen)  # every unit read is fetched at least once
    if capacity >= int(sizes.sum()):
        assert got == len(seen)  # a cache that holds everything fetches each unit once
        assert fetched.tolist() == seen  # in the order of first use


def _lru_misses(reads, sizes, capacity):
    cache: OrderedDict[int, None] = OrderedDict()
    used = misses = 0
    for u in (int(x) for r in reads for x in r):
        if u in cache:
            cache.move_to_end(u)
            continue
        misses += 1
        if sizes[u] > capacity:
            continue
        while used + sizes[u] > capacity:
            v, _ = cache.popitem(last=False)
            used -= sizes[v]
        cache[u] = None
        used += sizes[u]
    return misses
