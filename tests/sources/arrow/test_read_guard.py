"""resumable_data.sources.arrow.read_guard: the mapped shards a read touches are checked before and after it."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.sources.arrow.read_guard import guarded_read
from resumable_data.sources.arrow.unit_table import opened_table
from resumable_data.sources.opening import open_shards
from resumable_data.sources.store import LOCAL


@pytest.fixture
def table(tmp_path):
    t = pa.table({"x": pa.array(np.arange(40, dtype=np.int64))})
    files = rd.write_arrow_shards(t, tmp_path, num_shards=2, rows_per_batch=10)
    rel = sorted(p.name for p in files)
    return opened_table(tmp_path.as_posix(), rel, open_shards(tmp_path.as_posix(), rel, None, LOCAL))


def _touch(path):
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a write: its identity changes


def test_an_unchanged_read_returns_what_it_read(table):
    assert guarded_read(table, np.array([0, 3], dtype=np.int64), lambda: "rows") == "rows"


def test_a_shard_changed_before_the_read_is_refused_before_it(table):
    _touch(table.watch.entries[1][0])  # the mapped file of shard 1 (units 2 and 3)
    calls = []
    with pytest.raises(rd.DatasetIntegrityError, match="before a read"):
        guarded_read(table, np.array([3], dtype=np.int64), lambda: calls.append(1))
    assert not calls
    assert guarded_read(table, np.array([0], dtype=np.int64), lambda: "other shard") == "other shard"


def test_a_shard_changed_during_the_read_is_refused_after_it(table):
    with pytest.raises(rd.DatasetIntegrityError, match="after a read"):
        guarded_read(table, np.array([1], dtype=np.int64), lambda: _touch(table.watch.entries[0][0]))
