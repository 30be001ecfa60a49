"""``gather_decoded``: decoded units (local Parquet row groups here; remote units take the same
path, tests/sources/test_remote.py and test_read_ahead*.py) gathered with the mapped shards'
column plans, rebuilt over the units a batch touches.

Every type Hugging Face and Parquet produce, nulls at every level, row groups of 61 and 1,000
rows: ``take`` equals pyarrow's ``Table.take`` and the per-row-group fallback on Hypothesis-drawn
ids (fixed seed), each column through its plan (not the fallback), dictionaries too where the
touched row groups' dictionaries are equal (differing ones: the fallback, whose result is
unchanged); the numpy layout equals the collate of ``take``; ``rd.DataLoader`` batches under a
global shuffle equal pyarrow's ``take`` + the same collate, with and without the plans over every
row group; a decoded-unit map that keeps one unit (every batch decodes again, units evicted while
a batch is planned) changes nothing."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import resumable_data as rd
from resumable_data.loader.collate import arrow_to_numpy, arrow_to_tensors, gathered_to_numpy
from resumable_data.sources import decoded_units
from resumable_data.sources.decoded_units import process_units
from resumable_data.sources.gather_decoded import Dictionaries
from resumable_data.sources.unit_reads import UnitReads
from tests.sources.typed_columns import FAST_KINDS, types_table

N = 2500
#: every row group of a file pyarrow wrote holds the same dictionary (its own object, equal): one plan
DECODED_KINDS = FAST_KINDS


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
    return pa.Table.from_arrays(src._gathering.fallback(unit, local, list(range(len(src.schema)))), schema=src.schema)


def test_parquet_units_are_decoded_and_every_type_takes_its_plan(parquet_sources):
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


# -- dictionaries: one plan over row groups whose dictionaries are equal ------------------------
WORDS = ["", "a", "bé", "word", "ünïcode", "x" * 40]
#: b.parquet's row groups: each its own dictionary (orders of WORDS); two equal a.parquet's
ORDERS = [[0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0], [1, 0, 3], [0, 1, 2, 3, 4, 5], [2, 5]]
GROUP = 100


@pytest.fixture(scope="module")
def dictionary_folder(tmp_path_factory):
    """Two Parquet shards of a dictionary column with nulls: a.parquet's 6 row groups hold one
    dictionary (pyarrow writes the array's), b.parquet's 5 row groups the dictionaries of ``ORDERS``;
    the table of the values as written (a plain ``string`` column)."""
    d = tmp_path_factory.mktemp("dicts")
    rng = np.random.default_rng(21)
    schema = pa.schema([("label", pa.dictionary(pa.int32(), pa.string())), ("x", pa.int64())])
    drawn = rng.integers(0, 6, 6 * GROUP)
    indices = pa.array([int(k) if j % 7 else None for j, k in enumerate(drawn)], type=pa.int32())
    encoded = pa.DictionaryArray.from_arrays(indices, pa.array(WORDS))
    a = encoded.to_pylist()
    pq.write_table(
        pa.table({"label": encoded, "x": np.arange(len(a))}, schema=schema), d / "a.parquet", row_group_size=GROUP
    )
    values = list(a)
    with pq.ParquetWriter(d / "b.parquet", schema) as w:
        for g, order in enumerate(ORDERS):
            idx = rng.integers(0, len(order), GROUP)
            indices = pa.array([None if j % 9 == 0 else int(k) for j, k in enumerate(idx)], type=pa.int32())
            arr = pa.DictionaryArray.from_arrays(indices, pa.array([WORDS[k] for k in order]))
            start = len(values)
            w.write_table(pa.table({"label": arr, "x": np.arange(start, start + GROUP)}, schema=schema))
            values += arr.to_pylist()
    return d, pa.table({"label": pa.array(values, type=pa.string()), "x": np.arange(len(values))})


def _dictionary_source(folder):
    return rd.ArrowShards(folder, unpinned="allow")  # the whole dataset fits the budget: plans over every unit


def _same_as_the_fallback(src, values, ids):
    got = src.take(ids)
    if len(ids):
        assert got.equals(_fallback_take(src, ids))  # the per-row-group path's result, to the byte
    assert got.column("label").to_pylist() == values.column("label").take(pa.array(ids, type=pa.int64())).to_pylist()
    assert got.column("x").to_pylist() == list(ids)
    return got


def test_row_groups_with_equal_dictionaries_take_one_plan_and_differing_ones_the_fallback(dictionary_folder):
    folder, values = dictionary_folder
    src = _dictionary_source(folder)
    reads = src._reads
    same = [0, 5, 6, 9]  # a.parquet's row groups, b.parquet's first and fourth: one dictionary
    ids = np.array([u * GROUP + k for u in same for k in (3, 77, 14)], dtype=np.int64)[::-1].copy()
    unit, _ = src._locate(ids)
    plans, _, _ = reads.touched(unit)
    assert plans[0] is not None and plans[0].kind == "dictionary"
    _same_as_the_fallback(src, values, ids)
    mixed = ids.copy()
    mixed[1] = 7 * GROUP + 40  # b.parquet's third row group: another dictionary
    plans, _, _ = reads.touched(src._locate(mixed)[0])
    assert plans[0] is None and plans[1] is not None
    _same_as_the_fallback(src, values, mixed)
    assert src.take(np.arange(len(values))).column("label").to_pylist() == values.column("label").to_pylist()
    assert reads._whole is not None  # plans over every row group: their dictionaries differ, so none there
    assert reads._whole[0] is None and reads._whole[1] is not None
    for seed in range(5):
        _same_as_the_fallback(src, values, np.random.default_rng(seed).integers(0, len(values), 200))
    only_a = np.random.default_rng(9).integers(0, 6 * GROUP, 200)
    _same_as_the_fallback(src, values, only_a)
    src.close()


@settings(derandomize=True, max_examples=30, deadline=None)
@given(ids=st.lists(st.integers(0, 11 * GROUP - 1), max_size=300), kept=st.sampled_from([1, 2, 8]))
def test_dictionary_columns_equal_the_fallback_whatever_the_dictionaries_kept(dictionary_folder, ids, kept):
    """At most ``Dictionaries.MAX_KEPT`` dictionaries get a key: a unit whose dictionary gets none
    takes the fallback with its batch; every result is the fallback's."""
    folder, values = dictionary_folder
    src = _dictionary_source(folder)
    original = Dictionaries.MAX_KEPT
    Dictionaries.MAX_KEPT = kept
    try:
        _same_as_the_fallback(src, values, np.asarray(ids, dtype=np.int64))
        _same_as_the_fallback(src, values, np.asarray(ids[::-1], dtype=np.int64))  # from the table
    finally:
        Dictionaries.MAX_KEPT = original
        src.close()


# -- the loader's batches, Parquet under a global shuffle (issue 28's slow column types) ----------
def _issue_columns(n: int) -> dict[str, pa.Array]:
    rng = np.random.default_rng(28)
    words = np.array(["the", "a", "data", "loader", "résumé", "token", "naïve"])
    text = [" ".join(words[rng.integers(0, len(words), int(k))]) for k in rng.integers(1, 9, n)]
    return {
        "dictionary": pa.array([f"class-{k}" for k in rng.integers(0, 10, n)]).dictionary_encode(),
        "opt_dictionary": pa.array([None if i % 11 == 0 else t for i, t in enumerate(text)]).dictionary_encode(),
        "bool": pa.array(rng.random(n) < 0.5),
        "opt_bool": pa.array([None if i % 13 == 0 else bool(k) for i, k in enumerate(rng.integers(0, 2, n))]),
        "struct": pa.StructArray.from_arrays(
            [pa.array(rng.integers(0, 1000, n)), pa.array(rng.random(n, dtype=np.float32)), pa.array(text)],
            names=["label", "score", "name"],
        ),
        "timestamp": pa.array(rng.integers(0, 2 * 10**15, n), type=pa.timestamp("us")),
        "opt_string": pa.array([None if i % 10 == 0 else t for i, t in enumerate(text)]),
        "fixed_size_list": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 16, dtype=np.float32)), 16),
    }


LOADER_N = 3000


@pytest.fixture(scope="module")
def issue_folders(tmp_path_factory):
    """Per column of ``_issue_columns``: its table and a folder of it as Parquet (3 files of
    100-row row groups: 30 row groups a file)."""
    out = {}
    for name, col in _issue_columns(LOADER_N).items():
        table = pa.table({"col": col})
        d = tmp_path_factory.mktemp(name)
        for k in range(3):
            part = table.slice(k * 1000, 1000)
            pq.write_table(part, d / f"part-{k}.parquet", row_group_size=100)
        out[name] = (table, d)
    return out


def _assert_same_batch(got: dict, want: dict, where: str) -> None:
    assert list(got) == list(want), where
    for k, w in want.items():
        g = got[k]
        if isinstance(w, torch.Tensor):
            assert isinstance(g, torch.Tensor) and g.dtype == w.dtype and g.shape == w.shape, (where, k)
            assert torch.equal(g, w), (where, k)
        else:
            assert type(g) is type(w) and g == w, (where, k)  # Python lists: values, None for nulls


@pytest.mark.parametrize("whole", [True, False], ids=["whole-plans", "table-plans"])
@pytest.mark.parametrize("column", list(_issue_columns(1)))
def test_loader_batches_equal_pyarrow_take_and_the_collate(issue_folders, monkeypatch, column, whole):
    """Every batch of two epochs of ``rd.DataLoader`` (global shuffle, default collate) over the
    column as Parquet equals ``arrow_to_tensors(table.take(ids))`` of pyarrow on the one-chunk
    table (the benchmark's ceiling), served by the plans over every row group (``whole``) or
    without them (the table of plan rows: every batch planned over its touched row groups)."""
    table, folder = issue_folders[column]
    if not whole:
        monkeypatch.setattr(UnitReads, "_whole_plans", lambda self, table: None)
    src = rd.ArrowShards(folder, unpinned="allow")  # the dataset fits the default budget
    loader = rd.DataLoader(src, batch_size=64, shuffle=True, seed=3)
    plan = loader.plan
    step = 0
    for _ in range(2):  # each loop: the rest of the epoch
        for batch in loader:
            ids = plan.records(np.arange(*plan.step_span(step)))
            _assert_same_batch(batch, arrow_to_tensors(table.take(pa.array(ids))), f"{column} step {step}")
            step += 1
    assert (src._reads._whole is not None) == whole
    if src._reads._whole is not None:
        assert src._reads._whole[0] is not None  # the column's plan over every row group served the batches
    src.close()


def test_take_numpy_answers_none_before_checking_ids_once_the_whole_plans_lack_a_numpy_layout(tmp_path, monkeypatch):
    """A numeric column with nulls has no numpy layout: once the plans over every row group serve
    the batches, ``take_numpy`` says so without checking the ids (the loader's ``take`` checks
    them); a numeric dataset without nulls is still served by ``take_numpy``."""
    n = 600
    table = pa.table({"x": np.arange(n), "maybe": pa.array([None if i % 7 == 0 else i for i in range(n)])})
    pq.write_table(table, tmp_path / "a.parquet", row_group_size=50)
    src = rd.ArrowShards(tmp_path, unpinned="allow")
    ids = np.arange(n - 1, -1, -5)
    assert src.take_numpy(ids) is None and src.take(np.arange(n)).equals(table)
    assert src._reads._whole is not None and src._reads.whole_without_numpy()
    checked = []
    import resumable_data.sources.arrow_shards as module

    monkeypatch.setattr(module, "checked_ids", lambda ids, table: checked.append(ids))
    assert src.take_numpy(ids) is None and checked == []
    monkeypatch.undo()
    assert src.take(ids).equals(table.take(pa.array(ids)))
    src.close()
    (tmp_path / "x").mkdir()
    pq.write_table(table.select(["x"]), tmp_path / "x" / "a.parquet", row_group_size=50)
    numeric = rd.ArrowShards(tmp_path / "x", unpinned="allow")
    numeric.take(np.arange(n))
    assert numeric._reads._whole is not None and not numeric._reads.whole_without_numpy()
    got = numeric.take_numpy(ids)
    assert got is not None and np.array_equal(got[0], ids)
    numeric.close()
