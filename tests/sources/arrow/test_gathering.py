"""resumable_data.sources.arrow.gathering: the plans over the maps, the fallback and the numpy layout agree with Table.take."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import resumable_data as rd


def _ids(n):
    return np.random.default_rng(3).integers(0, n, 200)


def _located(src, ids):
    unit, local = src._locate(np.asarray(ids, dtype=np.int64))
    return np.asarray(ids, dtype=np.int64), unit, local


def test_plans_fallback_and_numpy_agree_on_mapped_batches(tmp_path):
    n = 300
    table = pa.table({"x": pa.array(np.arange(n, dtype=np.int64)), "f": pa.array(np.arange(n) / 7)})
    rd.write_arrow_shards(table, tmp_path, num_shards=3, rows_per_batch=17)
    src = rd.ArrowShards(tmp_path, unpinned="allow")
    g = src._gathering
    ids, unit, local = _located(src, _ids(n))
    want = table.take(pa.array(ids))
    assert all(p is not None for p in g.plan()) and g.plan() is g.plan()  # built once
    assert g.take(ids, unit, local).equals(want)
    assert pa.Table.from_arrays(g.fallback(unit, local, [0, 1]), schema=table.schema).equals(want)
    assert g.may_numpy()
    got = g.numpy(ids, unit, local, 0)
    assert np.array_equal(got[0], ids) and np.array_equal(got[1], ids / 7)


def test_a_column_with_nulls_has_no_numpy_layout_and_its_take_is_right(tmp_path):
    n = 200
    table = pa.table({"maybe": pa.array([None if i % 3 == 0 else i for i in range(n)], type=pa.int64())})
    pq.write_table(table, tmp_path / "a.parquet", row_group_size=40)  # units decoded when read
    src = rd.ArrowShards(tmp_path, unpinned="allow")
    ids, unit, local = _located(src, _ids(n))
    assert src._gathering.take(ids, unit, local).equals(table.take(pa.array(ids)))
    assert src._gathering.numpy(ids, unit, local, 0) is None


def test_list_lengths_reads_every_unit(tmp_path):
    lists = [[1] * (i % 5) for i in range(50)]
    table = pa.table({"l": pa.array(lists, type=pa.list_(pa.int32()))})
    rd.write_arrow_shards(table, tmp_path, num_shards=2, rows_per_batch=9)
    src = rd.ArrowShards(tmp_path, unpinned="allow")
    assert src._gathering.list_lengths(0).tolist() == [len(x) for x in lists]
