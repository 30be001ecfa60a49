import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import resumable_data as rd
from tests.sources.typed_columns import FAST_KINDS, types_table


def _fallback_take(src, ids):
    unit, local = src._locate(np.asarray(ids, dtype=np.int64))
    cols = src._gathering.fallback(unit, local, list(range(len(src.schema))))
    return pa.Table.from_arrays(cols, schema=src.schema)


def test_fast_path_is_used(sources):
    _, srcs = sources
    plan = srcs[1]._gathering.plan()
    names = srcs[1].schema.names
    kinds = {n: (g.kind if g is not None else None) for n, g in zip(names, plan)}
    assert kinds == {"tok32": "list", "tok16": "list", "f64": "fixed", "u8": "fixed",
                     "ts": "fixed", "maybe": "fixed", "flag": "bool"}
    # a column with nulls (or a timestamp) has the fast gather but no numpy layout (the collate
    # gives Python lists); a bool column without nulls has one (the collate's numpy bool array)
    assert [g.numpy_dtype is None for g in plan] == [False, False, False, False, True, True, False]
    assert srcs[1].take_numpy([0, 1]) is None


@settings(derandomize=True, max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(0, 2999), max_size=300), which=st.integers(0, 2))
def test_fast_equals_fallback_equals_table_take(sources, ids, which):
    table, srcs = sources
    src = srcs[which]
    expected = table.take(pa.array(ids, type=pa.int64()))
    got = src.take(ids)
    assert got.equals(expected)
    if ids:
        assert _fallback_take(src, ids).equals(expected)
        assert all(c.num_chunks == 1 for c in got.columns)


def test_sliced_batches_handled(tmp_path):
    # batches that are slices of larger arrays (non-zero offsets) written into IPC keep working
    t = pa.table({"x": pa.array(np.arange(100, dtype=np.int32)),
                  "l": pa.array([[i] * (i % 4) for i in range(100)], type=pa.list_(pa.int64()))})
    rd.write_arrow_shards(t.slice(10, 80), tmp_path, num_shards=2, rows_per_batch=7)
    s = rd.ArrowShards(tmp_path)
    ids = [0, 79, 40, 40, 7]
    assert s.take(ids).equals(t.slice(10, 80).take(ids))


def test_damaged_offsets_are_refused_not_read(tmp_path):
    t = pa.table({"l": pa.array([[1, 2, 3]] * 10, type=pa.list_(pa.int32()))})
    rd.write_arrow_shards(t, tmp_path)
    p = tmp_path / "shard-00000.arrow"
    data = bytearray(p.read_bytes())
    # the offsets buffer holds 0,3,6,...,30 as int32: make the last offset huge
    needle = np.arange(0, 33, 3, dtype=np.int32).tobytes()
    at = bytes(data).find(needle)
    assert at > 0
    data[at + 40:at + 44] = np.int32(10**8).tobytes()
    p.write_bytes(bytes(data))
    s = rd.ArrowShards(tmp_path, unpinned="allow")
    # refused by the structural validation of the record batch (sources/validate.py), which runs
    # before the gather plan's own bounds check ("outside its data buffer") is reached
    with pytest.raises(rd.DatasetIntegrityError, match=r"shard-00000\.arrow.*record batch 0.*damaged"):
        s.take([0])


# -- every Arrow type Hugging Face datasets and Parquet produce (tests/sources/typed_columns.py) -------
def test_every_hf_type_has_its_fast_path(typed_sources):
    _, srcs = typed_sources
    for src in srcs.values():
        plan = src._gathering.plan()
        assert {n: (g.kind if g is not None else None) for n, g in zip(src.schema.names, plan)} == FAST_KINDS


@settings(derandomize=True, max_examples=40, deadline=None)
@given(ids=st.lists(st.integers(0, 2499), max_size=200), which=st.integers(0, 2))
def test_every_type_equals_pyarrow_take(typed_sources, ids, which):
    table, srcs = typed_sources
    src = srcs[which]
    expected = table.take(pa.array(ids, type=pa.int64()))
    got = src.take(ids)
    for name in table.column_names:  # column by column: a failure names the type
        assert got.column(name).equals(expected.column(name)), name
    assert got.equals(expected)
    if ids:
        assert _fallback_take(src, ids).equals(expected)


def test_sliced_typed_batches(tmp_path):
    # record batches that are slices (non-zero offsets at every level) keep the fast path exact
    table = types_table(400, seed=3)
    sliced = table.slice(33, 300)
    rd.write_arrow_shards(sliced, tmp_path, num_shards=2, rows_per_batch=47)
    s = rd.ArrowShards(tmp_path, unpinned="allow")
    ids = [0, 299, 150, 150, 7, 46, 47, 48]
    assert s.take(ids).equals(sliced.take(ids))


def test_fixed_size_list_numpy_is_the_default_collate(typed_sources):
    from resumable_data.loader.collate import arrow_to_numpy

    table, srcs = typed_sources
    ids = np.array([5, 2499, 0, 1000, 999, 5])
    sub = table.select(["vec", "when", "big"])
    for src in srcs.values():
        one = rd.ArrowShards(src._root, unpinned="allow")
        unit, local = one._locate(ids)
        g = one._gathering.plan()[one.schema.get_field_index("vec")]
        got = g.to_numpy(ids, unit, local, 0)
        assert got.flags.writeable and got.shape == (6, 16)
        np.testing.assert_array_equal(got, arrow_to_numpy(sub.take(ids))["vec"])


def test_a_view_validates_each_record_batch_once_for_its_sources(typed_sources):
    from resumable_data.sources.arrow_shards import ArrowShards

    _, srcs = typed_sources
    members = [rd.ArrowShards(srcs[2]._root, unpinned="allow") for _ in range(2)]
    view = ArrowShards.concatenated(members)
    n0 = len(members[0]._units)
    view.take([1, 2503])  # a record batch of each source (2,500 records each)
    assert members[0]._validation.valid[0] and members[1]._validation.valid[0]
    again = ArrowShards.concatenated(members)
    assert again._validation.valid[0] and again._validation.valid[n0]  # a fresh view starts from what its sources validated


@settings(derandomize=True, max_examples=60, deadline=None)
@given(rows=st.lists(st.integers(1, 40), min_size=1, max_size=12),
       picks=st.lists(st.integers(-5, 500), min_size=1, max_size=100), data=st.data())
def test_locate_equals_searchsorted(rows, picks, data):
    from resumable_data.sources.unit_index import locate

    starts = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)
    shards = len(rows) // 2 + 1
    unit_shard = np.sort(np.array(data.draw(st.lists(st.integers(0, shards - 1), min_size=len(rows),
                                                     max_size=len(rows))), dtype=np.int64))
    mapped = np.array(data.draw(st.lists(st.booleans(), min_size=shards, max_size=shards)), dtype=bool)
    ids = np.array(picks, dtype=np.int64)
    unit, local, touched, lo, hi = locate(ids, starts, unit_shard, mapped, sum(rows))
    assert (lo, hi) == (ids.min(), ids.max())
    inside = (ids >= 0) & (ids < sum(rows))
    want = np.searchsorted(starts, ids, side="right") - 1
    assert np.array_equal(unit[inside], want[inside]) and np.array_equal(local[inside], (ids - starts[want])[inside])
    want_touched = sorted({int(unit_shard[u]) for u in want[inside] if mapped[unit_shard[u]]})
    assert set(want_touched) <= set(touched.tolist()) <= set(np.flatnonzero(mapped).tolist())
    if inside.all():
        assert touched.tolist() == want_touched


def test_copy_kernels_refuse_strided_arrays():
    # the memcpy copy needs one contiguous block: a strided view is a typing error, never a wrong copy
    from numba.core.errors import TypingError

    from resumable_data.sources.copy_kernels import copy_runs

    values = np.arange(20, dtype=np.uint8)[::2]
    one = np.ones(1, dtype=np.int64)
    with pytest.raises(TypingError):
        copy_runs(values, one * 0, one, one * 0, np.empty(1, dtype=np.uint8))
    out = np.empty(3, dtype=np.uint8)
    copy_runs(np.ascontiguousarray(values), np.array([2]), np.array([3]), np.array([0]), out)
    assert out.tolist() == [4, 6, 8]


@settings(derandomize=True, max_examples=40, deadline=None)
@given(
    lens=st.lists(st.integers(0, 9), min_size=1, max_size=40),
    picks=st.lists(st.integers(0, 10**6), max_size=60),
    wide=st.booleans(),
)
def test_gather_runs_packs_each_rows_run_and_stops_past_the_limit(lens, picks, wide):
    """``gather_runs`` against a Python reference: two units of one offsets buffer (the second's
    offsets start past the first's), rows picked from both; the total capped by ``limit``."""
    from resumable_data.sources.copy_kernels import gather_runs

    off = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    values = np.arange(int(off[-1]) * 2 + 5, dtype=np.uint64 if wide else np.uint8)
    offsets = np.concatenate([off, off]).astype(np.int64 if wide else np.int32)  # unit 1: its own copy
    base = np.array([0, len(off)], dtype=np.int64)
    values_base = np.array([0, int(off[-1]) + 5], dtype=np.int64)
    unit = np.array([p % 2 for p in picks], dtype=np.int64)
    local = np.array([p % len(lens) for p in picks], dtype=np.int64)
    runs = [values[values_base[u] + off[r] : values_base[u] + off[r + 1]] for u, r in zip(unit, local)]
    want = np.concatenate(runs) if runs else values[:0]
    ends = np.cumsum([0] + [len(r) for r in runs])
    out = np.empty(len(picks) + 1, dtype=offsets.dtype)
    data, total = gather_runs(offsets, base, values, values_base, unit, local, 1 << 40, out)
    assert total == len(want) and data.dtype == values.dtype and np.array_equal(data, want)
    assert np.array_equal(out, ends)
    if len(want):
        data, total = gather_runs(offsets, base, values, values_base, unit, local, len(want) - 1, out)
        assert total == -1 and len(data) == 0


@pytest.mark.parametrize("rows", [[1] * 300 + [5000], [5000] + [1] * 300, [7] * 64, [1000] * 3 + [1] + [999] * 2])
def test_locate_with_skewed_units_equals_searchsorted(rows):
    """Buckets sized by the average unit: a bucket spanning many small units, or a unit spanning
    many buckets, still gives every id its searchsorted unit (every id tried, and the edges)."""
    from resumable_data.sources.unit_index import locate, unit_buckets

    n = sum(rows)
    starts = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)
    unit_shard = np.zeros(len(rows), dtype=np.int64)
    ids = np.concatenate([np.arange(n), [-1, n, n + 10**6, -(10**6)]]).astype(np.int64)
    unit, local, _, lo, hi = locate(ids, starts, unit_shard, np.ones(1, dtype=bool), n, unit_buckets(starts, n))
    want = np.searchsorted(starts, ids[:n], side="right") - 1
    assert np.array_equal(unit[:n], want) and np.array_equal(local[:n], ids[:n] - starts[want])
    assert (lo, hi) == (-(10**6), n + 10**6) and np.array_equal(unit[n:], [0, 0, 0, 0])


