"""``gather_decoded``: decoded units (local Parquet row groups here; remote units take the same
path, tests/sources/test_remote.py and test_read_ahead*.py) gathered with the mapped shards'
column plans, rebuilt over the units a batch touches.

Every type Hugging Face and Parquet produce, nulls at every level, row groups of 61 and 1,000
rows: ``take`` equals pyarrow's ``Table.take`` and the per-row-group fallback on Hypothesis-drawn
ids (fixed seed), each column through its plan (not the fallback) except dictionaries; the
numpy layout equals the collate of ``take``; a decoded-unit map that keeps one unit (every batch
decodes again, units evicted while a batch is planned) changes nothing."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import resumable_data as rd
from resumable_data.loader.collate import arrow_to_numpy, gathered_to_numpy
from resumable_data.sources import decoded_units
from resumable_data.sources.decoded_units import process_units
from resumable_data.sources.gather import flatten_plan, plan_column, rebuild_plan
from resumable_data.sources.gather_decoded import unit_rows
from tests.sources.typed_columns import FAST_KINDS, types_table

N = 2500
#: what Parquet gives back where it differs from the IPC plan kinds: a row group's dictionary is its
#: own, so dictionary columns take the per-row-group fallback
DECODED_KINDS = {**FAST_KINDS, "label": None, "opt_label": None}


def _as_parquet(factory, table, name):
    """``table`` as Parquet shards in three layouts: 4 shards of 1,000-row row groups, 3 of 61-row
    ones, one shard of one row group."""
    out = {}
    for k, (shards, rows) in enumerate([(4, 1000), (3, 61), (1, None)]):
        d = factory.mktemp(f"{name}{k}")
        rd.write_arrow_shards(table, d, num_shards=shards, rows_per_batch=rows, format="parquet")
        out[k] = rd.ArrowShards(d, unpinned="allow")
    return table, out


@pytest.fixture(scope="module")
def parquet_sources(tmp_path_factory):
    return _as_parquet(tmp_path_factory, types_table(N), "pq")


def _fallback_take(src, ids):
    unit, local = src._locate(np.asarray(ids, dtype=np.int64))
    return pa.Table.from_arrays(src._fallback(unit, local, list(range(len(src.schema)))), schema=src.schema)


def test_parquet_units_are_decoded_and_every_type_but_dictionaries_takes_its_plan(parquet_sources):
    _, srcs = parquet_sources
    for src in srcs.values():
        assert src._reads.loaded and not src.remote
        unit, _ = src._locate(np.arange(0, N, 7, dtype=np.int64))
        plans, renumbered, _ = src._reads.touched(unit)
        kinds = {n: (g.kind if g is not None else None) for n, g in zip(src.schema.names, plans)}
        assert kinds == DECODED_KINDS
        assert renumbered.max() == len(np.unique(unit)) - 1


@settings(derandomize=True, max_examples=40, deadline=None)
@given(ids=st.lists(st.integers(0, N - 1), max_size=300), which=st.integers(0, 2))
def test_take_equals_pyarrow_take_and_the_fallback(parquet_sources, ids, which):
    table, srcs = parquet_sources
    src = srcs[which]
    expected = table.take(pa.array(ids, type=pa.int64()))
    got = src.take(ids)
    for name in table.column_names:  # column by column: a failure names the type
        assert got.column(name).equals(expected.column(name)), name
    if ids:
        assert _fallback_take(src, ids).equals(expected)


@pytest.fixture(scope="module")
def numeric_sources(tmp_path_factory):
    rng = np.random.default_rng(2)
    lens = rng.integers(0, 40, N)
    table = pa.table(
        {
            "tokens": pa.array([rng.integers(0, 1000, k).tolist() for k in lens], type=pa.list_(pa.int32())),
            "wide": pa.array([rng.random(k).tolist() for k in lens], type=pa.large_list(pa.float32())),
            "id": pa.array(np.arange(N, dtype=np.int64)),
            "score": pa.array(rng.random(N).astype(np.float32)),
        }
    )
    return _as_parquet(tmp_path_factory, table, "num")


@settings(derandomize=True, max_examples=30, deadline=None)
@given(
    ids=st.lists(st.integers(0, N - 1), min_size=1, max_size=300), which=st.integers(0, 2), pad=st.sampled_from([0, -1])
)
def test_take_numpy_equals_the_collate_of_take(numeric_sources, ids, which, pad):
    table, srcs = numeric_sources
    got = srcs[which].take_numpy(ids, pad)
    assert got is not None
    want = arrow_to_numpy(table.take(pa.array(ids, type=pa.int64())), pad)
    mine = gathered_to_numpy(table.column_names, got)
    assert list(mine) == list(want)
    for k in want:
        a, b = mine[k], want[k]
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), k


def _counting(monkeypatch):
    import resumable_data.sources.unit_reads as mod

    calls = []
    real = mod.plan_touched

    def spy(units):
        calls.append(sum(u.nbytes for u in units))
        return real(units)

    monkeypatch.setattr(mod, "plan_touched", spy)
    return calls


def test_touched_units_over_the_budget_are_taken_one_at_a_time(parquet_sources, monkeypatch):
    table, srcs = parquet_sources
    src = srcs[1]  # 61-row row groups: a batch touches dozens of them
    ids = np.random.default_rng(5).integers(0, N, 400)
    expected = table.take(pa.array(ids))
    calls = _counting(monkeypatch)
    monkeypatch.setattr(process_units(), "budget", 1)
    monkeypatch.setattr(decoded_units, "_WARNED", set())  # nothing said yet in this process
    process_units().clear()
    with pytest.warns(
        RuntimeWarning, match=r"a batch touches \d+ units .* budget of 1 bytes.*decoded_cache_bytes"
    ) as seen:
        for _ in range(3):
            assert src.take(ids).equals(expected)
    assert len(seen) == 1  # said once per dataset and process
    again = rd.ArrowShards(src.root, unpinned="allow")  # another copy (a worker's) of the same dataset
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert again.take(ids).equals(expected)
    assert calls == []  # never planned: the fallback decoded and took one unit at a time
    assert len(process_units()) == 1  # every unit but the last one decoded was evicted


def test_units_evicted_between_batches_are_decoded_and_planned_again(parquet_sources, monkeypatch):
    table, srcs = parquet_sources
    src = srcs[1]
    rng = np.random.default_rng(6)
    calls = _counting(monkeypatch)
    process_units().clear()
    src.take(np.arange(N))
    whole = process_units().nbytes  # every row group decoded once
    monkeypatch.setattr(process_units(), "budget", whole // 4)  # four row groups fit in it, not the whole
    process_units().clear()
    calls.clear()
    units = len(src.unit_starts())
    for _ in range(10):  # batches over 4 row groups each: most were evicted by the batches before
        picked = rng.choice(units, 4, replace=False)
        ids = (picked[:, None] * 61 + rng.integers(0, 61, (4, 50))).reshape(-1)
        ids = ids[ids < N]
        assert src.take(ids).equals(table.take(pa.array(ids)))
    assert len(calls) == 10 and max(calls) <= whole // 4 and process_units().nbytes <= whole // 4


def test_one_units_rows_rebuild_its_own_plan(tmp_path):
    table = types_table(300, seed=4)
    batch = table.to_batches()[0]
    rows = unit_rows(batch)
    ids = np.arange(batch.num_rows - 1, -1, -3, dtype=np.int64)
    zeros = np.zeros(len(ids), dtype=np.int64)
    for i, f in enumerate(batch.schema):
        row = rows.rows[i]
        if f.name in ("label", "opt_label"):
            assert row is None, f.name  # dictionaries have no row
            continue
        assert row is not None, f.name
        lo = rows.lo // 64 * 64
        span = pa.foreign_buffer(lo, rows.hi - lo, base=batch)
        plan = rebuild_plan(rows.templates[i], row[:, None], span)
        assert plan.gather(ids, zeros, ids).equals(batch.column(i).take(pa.array(ids))), f.name
        again = flatten_plan(plan)
        assert again is not None and np.array_equal(again, row), f.name


def test_a_span_off_64_bytes_is_refused():
    batch = pa.record_batch({"x": pa.array(np.arange(10, dtype=np.int64))})
    plan = plan_column(0, pa.int64(), [], [], 10)  # no units: no plan
    assert plan is None
    rows = unit_rows(batch)
    span = pa.foreign_buffer(rows.lo // 64 * 64 + 8, 64, base=batch)
    with pytest.raises(ValueError, match="multiple of 64"):
        rebuild_plan(rows.templates[0], rows.rows[0][:, None], span)


@pytest.mark.filterwarnings("ignore:.*decoded-unit budget:RuntimeWarning")  # the budget shrunk under a batch
def test_threads_taking_while_the_map_is_cleared_and_shrunk_get_the_right_rows(parquet_sources, monkeypatch):
    """The plans read raw addresses of the touched units' batches: a batch must stay alive while
    any thread reads it, whatever another thread does to the process map (clear it, shrink the
    budget under one batch, drop the source's units). Three threads take from two sources over
    the same files (one map, other owners) while a fourth churns the map; every result equals
    ``Table.take`` (a unit freed under a reader: wrong values or a crash)."""
    import threading
    import time

    table, srcs = parquet_sources
    other = rd.ArrowShards(srcs[1].root, unpinned="allow")  # same 61-row row groups, its own keys
    monkeypatch.setattr(process_units(), "budget", process_units().budget)  # restored after the test
    rounds, failures, done = 6, [], threading.Event()

    def take(src, seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(rounds):
                ids = rng.integers(0, N, 300)
                got = src.take(ids)
                for name in ("text", "nested", "recs", "opt_items", "image", "flag"):
                    if not got.column(name).equals(table.column(name).take(pa.array(ids))):
                        failures.append((seed, name))
        except Exception as exc:  # reported below with the seed
            failures.append((seed, repr(exc)))

    def churn():
        rng = np.random.default_rng(9)
        while not done.is_set():
            step = int(rng.integers(0, 4))
            if step == 0:
                process_units().clear()
            elif step == 1:
                process_units().clear(budget=int(rng.integers(1, 200_000)))
            elif step == 2:
                process_units().clear(budget=1 << 30)
            else:
                srcs[1]._reads.close()
            time.sleep(0.002)

    readers = [threading.Thread(target=take, args=(s, k)) for k, s in enumerate([srcs[1], srcs[1], other])]
    churner = threading.Thread(target=churn)
    churner.start()
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    done.set()
    churner.join()
    other.close()
    assert failures == []


# -- the plan table: a batch over units planned before, by array operations ---------------------
@pytest.mark.parametrize("layout", [0, 1])
def test_a_batch_over_units_planned_before_is_planned_from_the_table(parquet_sources, monkeypatch, layout):
    """Once every unit a batch touches was planned (and is still kept), the batch's plans come from
    the source's table of rows (no per-unit stacking: ``plan_touched`` is not called) and equal
    ``Table.take``, column by column."""
    table, srcs = parquet_sources
    src = rd.ArrowShards(srcs[layout].root, unpinned="allow")  # a fresh source: an empty table
    monkeypatch.setattr(process_units(), "budget", 1 << 30)  # the decoded dataset fits
    calls = _counting(monkeypatch)
    rng = np.random.default_rng(11 + layout)
    assert src.take(np.arange(N)).equals(table)  # every unit decoded and planned once
    assert len(calls) == 1
    for _ in range(25):
        ids = rng.integers(0, N, int(rng.integers(1, 400)))
        got = src.take(ids)
        for name in table.column_names:  # column by column, to name the one that differs
            assert got.column(name).equals(table.column(name).take(pa.array(ids))), name
    assert len(calls) == 1  # every batch planned from the table


def test_the_table_keeps_no_unit_alive_and_a_unit_decoded_again_replaces_its_rows(parquet_sources, monkeypatch):
    import gc
    import weakref

    table, srcs = parquet_sources
    src = rd.ArrowShards(srcs[1].root, unpinned="allow")
    monkeypatch.setattr(process_units(), "budget", 1 << 30)
    calls = _counting(monkeypatch)
    ids = np.random.default_rng(12).integers(0, N, 300)
    assert src.take(ids).equals(table.take(pa.array(ids)))
    unit, _ = src._locate(ids)
    k = int(unit[0])
    first = src._reads.decoded(k)
    alive = weakref.ref(first)
    del first
    process_units().clear()  # the map lets every unit go: the table must not hold them
    gc.collect()
    assert alive() is None
    assert src.take(ids).equals(table.take(pa.array(ids)))  # decoded and planned again
    assert len(calls) == 2
    again = src._reads.decoded(k)
    assert again is not None and again is not alive()
    assert src.take(ids[::-1]).equals(table.take(pa.array(ids[::-1])))  # from the table: the new rows
    assert len(calls) == 2
