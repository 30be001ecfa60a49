"""``sources/unit_reads.py``: the units decoded when read, kept per process, fetched by checked reads."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import resumable_data as rd
from resumable_data.sources.decoded_units import process_units


def _parquet(tmp_path, n=600, group=100):
    t = pa.table({"x": np.arange(n, dtype=np.int64), "y": [[i] * (i % 4) for i in range(n)]})
    pq.write_table(t, tmp_path / "a.parquet", row_group_size=group)
    return t, rd.ArrowShards(tmp_path, unpinned="allow")


def _ipc(tmp_path, n=600, group=100):
    t = pa.table({"x": np.arange(n, dtype=np.int64)})
    with pa.OSFile(str(tmp_path / "a.arrow"), "wb") as f, pa.ipc.new_file(f, t.schema) as w:
        for b in t.to_batches(max_chunksize=group):
            w.write_batch(b)
    return t, rd.ArrowShards(tmp_path, unpinned="allow")


def test_a_decoded_unit_is_kept_and_dropped_when_read_ahead_is_attached(tmp_path):
    t, src = _parquet(tmp_path)
    reads = src._reads
    assert reads.loaded
    first = reads.decoded(2)
    assert first.batch.equals(t.slice(200, 100).to_batches()[0])
    assert reads.decoded(2) is first  # a hit: the map's entry, not a second decode
    reads.attach(None)  # units decoded from other bytes leave the map
    again = reads.decoded(2)
    assert again is not first and again.batch.equals(first.batch)
    key = (reads._owner, 0, 2)  # decoded()'s key: (source, shard, row group)
    assert process_units().entry(key) is not None
    src.close()  # the source's units leave the process's map with it
    assert process_units().entry(key) is None


def test_touched_units_plan_over_the_batch_units(tmp_path):
    _, src = _parquet(tmp_path)
    unit = np.array([5, 0, 5, 3], dtype=np.int64)
    plans, renumbered, held = src._reads.touched(unit)
    assert renumbered.tolist() == [2, 0, 2, 1]  # units 0, 3, 5 in order
    assert [h.batch.column(0)[0].as_py() for h in held] == [0, 300, 500]
    local = np.array([7, 1, 9, 50], dtype=np.int64)
    ids = np.array([507, 1, 509, 350], dtype=np.int64)
    got = plans[0].gather(ids, renumbered, local)
    assert got.to_pylist() == [507, 1, 509, 350]


def test_ranged_reads_of_local_mapped_units_are_refused_with_the_fix(tmp_path):
    _, src = _ipc(tmp_path)
    assert not src._reads.loaded and src.unit_spans() == [None] * 6
    with pytest.raises(rd.ConfigError, match=r"k.*unit read by range"):
        src.fetch_unit(0)
    with pytest.raises(rd.ConfigError, match=r"first, last.*units read by range"):
        src.fetch_run(0, 1)
    with pytest.raises(rd.ConfigError, match=r"shard.*rd\.ReadUnit\.RECORD_BATCH"):
        src.fetch_shard(0)
    assert src.unit_shards().tolist() == [0] * 6
    assert src.shard_size(0) == (tmp_path / "a.arrow").stat().st_size
