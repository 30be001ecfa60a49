"""``ArrowShards.take_numpy``: the default collate's arrays straight from the maps.

Over shards of 1,024-row record batches (the layout Hugging Face ``datasets`` writes) and others,
on id sets drawn by Hypothesis (fixed seed): every array equals ``arrow_to_numpy(take(ids))``
(value, dtype and shape), which equals ``arrow_to_numpy`` of ``Table.take`` on the one-table copy;
a column the fast path cannot serve makes ``take_numpy`` return None (the loader then takes)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import resumable_data as rd
from resumable_data.loader.collate import arrow_to_numpy, gathered_to_numpy

N = 5000


def _table(rng):
    lens = rng.integers(0, 40, N)
    off = np.zeros(N + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    vals = rng.integers(-1000, 1000, off[-1])
    return pa.table({
        "tokens": pa.ListArray.from_arrays(pa.array(off.astype(np.int32)), pa.array(vals.astype(np.int32))),
        "wide": pa.LargeListArray.from_arrays(pa.array(off), pa.array(vals.astype(np.float32))),
        "id": pa.array(np.arange(N, dtype=np.int64)),
        "u8": pa.array(rng.integers(0, 255, N).astype(np.uint8)),
        "f64": pa.array(rng.random(N)),
        "flag": pa.array(rng.random(N) < 0.3),  # bool: the collate's numpy bool array, one byte a value
    })


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    table = _table(np.random.default_rng(3))
    out = []
    for shards, batch, fmt in [(8, 1024, "arrow"), (3, 1024, "arrow"), (2, 97, "arrow"), (1, None, "arrow"),
                               (4, 1024, "parquet"), (2, 97, "parquet")]:
        d = tmp_path_factory.mktemp(f"tn{shards}_{batch}_{fmt}")
        rd.write_arrow_shards(table, d, num_shards=shards, rows_per_batch=batch, format=fmt)
        out.append(rd.ArrowShards(d))
    return table, out


def _same(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert np.array_equal(a[k], b[k]), k


@settings(derandomize=True, max_examples=80, deadline=None)
@given(ids=st.lists(st.integers(0, N - 1), min_size=1, max_size=600), which=st.integers(0, 5),
       pad=st.sampled_from([0, -1, 7]))
def test_take_numpy_equals_the_collate_of_take(sources, ids, which, pad):
    table, srcs = sources
    src = srcs[which]
    got = gathered_to_numpy(src.schema.names, src.take_numpy(ids, pad))
    _same(got, arrow_to_numpy(src.take(ids), pad))
    _same(got, arrow_to_numpy(table.take(pa.array(ids, type=pa.int64())), pad))


class Arena:
    """An ``alloc`` that carves every array from one buffer (as a loader worker's slot), recording them."""

    def __init__(self, size: int) -> None:
        self.buf = np.zeros(size, dtype=np.uint8)
        self.at, self.made = 0, []

    def alloc(self, shape, dtype):
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        out = self.buf[self.at : self.at + n].view(dtype).reshape(shape)
        self.at += -(-n // 64) * 64
        self.made.append(out)
        return out

    def holds(self, a: np.ndarray) -> bool:
        lo = self.buf.__array_interface__["data"][0]
        p = a.__array_interface__["data"][0]
        return lo <= p and p + a.nbytes <= lo + self.buf.nbytes


@settings(derandomize=True, max_examples=40, deadline=None)
@given(ids=st.lists(st.integers(0, N - 1), min_size=1, max_size=300), which=st.integers(0, 5),
       pad=st.sampled_from([0, -1]))
def test_take_numpy_into_the_callers_arrays_equals_fresh_ones(sources, ids, which, pad):
    """``alloc`` makes every array returned (a worker gathers into its shared-memory slot), whatever
    the layout (maps, Parquet's decoded row groups); the values are those of fresh arrays."""
    _, srcs = sources
    src = srcs[which]
    arena = Arena(1 << 22)
    columns = src.take_numpy(ids, pad, arena.alloc)
    got = gathered_to_numpy(src.schema.names, columns)
    _same(got, gathered_to_numpy(src.schema.names, src.take_numpy(ids, pad)))
    assert all(arena.holds(a) for a in got.values()) and len(arena.made) == len(got)


def test_fixed_size_lists_and_a_mixture_gather_into_the_callers_arrays(tmp_path):
    rng = np.random.default_rng(2)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(300 * 16).astype(np.float32)), 16)
    t = pa.table({"vec": vec, "id": pa.array(np.arange(300, dtype=np.int64))})
    for k in range(2):
        rd.write_arrow_shards(t, tmp_path / f"v{k}", num_shards=2, rows_per_batch=64)
    a, b = rd.ArrowShards(tmp_path / "v0", unpinned="allow"), rd.ArrowShards(tmp_path / "v1", unpinned="allow")
    ids = rng.integers(0, 300, 50)
    arena = Arena(1 << 16)
    got = gathered_to_numpy(a.schema.names, a.take_numpy(ids, 0, arena.alloc))
    assert got["vec"].shape == (50, 16) and all(arena.holds(x) for x in got.values())
    _same(got, arrow_to_numpy(t.take(pa.array(ids))))
    mix = rd.Mixture({"a": a, "b": b}, weights={"a": 1, "b": 1})
    arena = Arena(1 << 16)
    mixed = mix.take_numpy(ids, 0, arena.alloc)
    assert mixed is not None and all(arena.holds(x) for x in gathered_to_numpy(mix.schema.names, mixed).values())
    _same(gathered_to_numpy(mix.schema.names, mixed), gathered_to_numpy(mix.schema.names, mix.take_numpy(ids, 0)))


def test_the_1024_row_layout_has_many_units_and_uses_the_fast_path(sources):
    _, srcs = sources
    assert len(srcs[0]._units) >= N // 1024
    assert all(g is not None and g.numpy_dtype is not None for g in srcs[0]._gathering.plan())


def test_local_parquet_is_gathered_from_its_decoded_row_groups(sources):
    """Parquet row groups are decoded when read, like remote units: the same numpy layout from
    the decoded batches (not the per-row-group Arrow take, concatenation and collate)."""
    table, srcs = sources
    for src in srcs[4:]:
        ids = np.random.default_rng(1).integers(0, N, 256)
        got = src.take_numpy(ids, 0)
        assert got is not None
        _same(gathered_to_numpy(src.schema.names, got), arrow_to_numpy(table.take(pa.array(ids)), 0))


def test_local_parquet_with_nulls_gives_none(tmp_path):
    t = pa.table({"id": pa.array([1, None, 3] * 10, pa.int64())})
    rd.write_arrow_shards(t, tmp_path / "n", num_shards=1, format="parquet")
    assert rd.ArrowShards(tmp_path / "n", unpinned="allow").take_numpy([0, 1, 2]) is None


def test_empty_and_unservable_columns_give_none(sources, tmp_path):
    _, srcs = sources
    assert srcs[0].take_numpy([]) is None
    t = pa.table({"id": pa.array(np.arange(10)), "s": pa.array([str(i) for i in range(10)])})
    rd.write_arrow_shards(t, tmp_path / "s", num_shards=1)
    assert rd.ArrowShards(tmp_path / "s").take_numpy([1, 2]) is None


def test_bad_ids_are_refused_like_take(sources):
    _, srcs = sources
    with pytest.raises(rd.ResumableDataError):
        srcs[0].take_numpy([N])
