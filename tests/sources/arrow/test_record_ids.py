"""resumable_data.sources.arrow.record_ids: ids checked against [0, N) and located in the unit index (one or a batch)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.sources.arrow.record_ids import RecordIdError, checked_ids, locate, record_index


@pytest.mark.parametrize(("index", "n", "want"), [(0, 5, 0), (4, 5, 4), (-1, 5, 4), (-5, 5, 0), (np.int64(3), 5, 3)])
def test_record_index_counts_negative_ids_from_the_end(index, n, want):
    assert record_index(index, n) == want


@pytest.mark.parametrize("index", [5, -6, 100])
def test_record_index_out_of_range_is_an_rd_index_error(index):
    with pytest.raises(RecordIdError) as exc:
        record_index(index, 5)
    assert isinstance(exc.value, IndexError) and isinstance(exc.value, rd.ResumableDataError)
    assert str(index) in str(exc.value)


@pytest.mark.parametrize("index", [1.5, "3", None])
def test_record_index_of_a_non_integer_is_an_rd_type_error(index):
    with pytest.raises(rd.ConfigTypeError):
        record_index(index, 5)


def test_locate_gives_the_unit_and_the_row_in_it():
    starts = np.array([0, 3, 3, 7], dtype=np.int64)  # unit 1 holds no rows in this toy index
    unit, row = locate(starts, np.array([0, 2, 3, 6, 7, 9], dtype=np.int64))
    assert unit.tolist() == [0, 0, 2, 2, 3, 3]
    assert row.tolist() == [0, 2, 0, 3, 0, 2]


def _table(tmp_path):
    from resumable_data.sources.arrow.unit_table import opened_table
    from resumable_data.sources.opening import open_shards
    from resumable_data.sources.store import LOCAL

    t = pa.table({"x": pa.array(np.arange(25, dtype=np.int64))})
    rel = sorted(p.name for p in rd.write_arrow_shards(t, tmp_path, num_shards=2, rows_per_batch=4))
    return opened_table(tmp_path.as_posix(), rel, open_shards(tmp_path.as_posix(), rel, None, LOCAL))


def test_checked_ids_locates_a_batch_and_marks_the_mapped_shards_touched(tmp_path):
    table = _table(tmp_path)
    ids, unit, local, touched = checked_ids([24, 0, 3, 4], table)
    want = np.searchsorted(table.starts, ids, side="right") - 1
    assert ids.dtype == np.int64 and unit.tolist() == want.tolist()
    assert local.tolist() == (ids - table.starts[want]).tolist()
    assert sorted(touched.tolist()) == sorted({int(table.unit_shard[u]) for u in want})
    assert all(len(a) == 0 for a in checked_ids([], table))


@pytest.mark.parametrize(
    "bad", [[[1, 2]], [1.0, 2.0], [-1], [25], np.array([2**63 + 5], dtype=np.uint64), np.array([0, 2**64 - 1], dtype=np.uint64)]
)
def test_checked_ids_refuses_what_is_not_a_1d_batch_of_ids_in_range(tmp_path, bad):
    with pytest.raises(RecordIdError, match="record_ids"):
        checked_ids(bad, _table(tmp_path))
