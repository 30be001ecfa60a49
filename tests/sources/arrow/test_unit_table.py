"""resumable_data.sources.arrow.unit_table: the units of the open shards and the arrays reads look them up by."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.sources.arrow.unit_table import closed_table, joined_table, opened_table
from resumable_data.sources.opening import open_shards
from resumable_data.sources.store import LOCAL


def _folder(path, n, shards, batch):
    table = pa.table({"x": pa.array(np.arange(n, dtype=np.int64)), "s": pa.array([f"r{i}" for i in range(n)])})
    files = rd.write_arrow_shards(table, path, num_shards=shards, rows_per_batch=batch)
    return path.as_posix(), sorted(p.name for p in files)


def test_opened_table_lists_every_unit_in_manifest_order(tmp_path):
    root, rel = _folder(tmp_path, 100, 3, 7)
    table = opened_table(root, rel, open_shards(root, rel, None, LOCAL))
    rows = [n for s in table.shards for n in s.unit_rows if n]
    assert table.num_records == 100 == sum(rows) and len(table.units) == len(rows)
    assert table.starts.tolist() == np.concatenate([[0], np.cumsum(rows)[:-1]]).tolist()
    assert table.unit_shard.tolist() == [u.shard for u in table.units] == sorted(table.unit_shard.tolist())
    assert table.mapped_bool.all() and table.unit_view.all() and not table.unwatched
    ids = np.arange(100)
    unit = np.searchsorted(table.starts, ids, side="right") - 1
    got = [table.units[k].batch.column(0)[int(i - table.starts[k])].as_py() for k, i in zip(unit, ids)]
    assert got == ids.tolist()


def test_an_identity_other_than_the_pickled_one_is_refused(tmp_path):
    root, rel = _folder(tmp_path, 30, 2, None)
    shards = open_shards(root, rel, None, LOCAL)
    expected = [s.identity for s in shards]
    expected[1] = replace(expected[1], size=expected[1].size + 1)
    with pytest.raises(rd.DatasetIntegrityError, match=rel[1]):
        opened_table(root, rel, shards, expected)


def test_a_joined_table_equals_the_shards_opened_as_one(tmp_path):
    a_root, a_rel = _folder(tmp_path / "a", 50, 2, 9)
    b_root, b_rel = _folder(tmp_path / "b", 40, 3, 4)
    rel = [f"a/{r}" for r in a_rel] + [f"b/{r}" for r in b_rel]
    a = opened_table(a_root, a_rel, open_shards(a_root, a_rel, None, LOCAL))
    b = opened_table(b_root, b_rel, open_shards(b_root, b_rel, None, LOCAL))
    joined = joined_table([a, b], rel)
    root = tmp_path.as_posix()
    one = opened_table(root, rel, open_shards(root, rel, None, LOCAL))
    for name in ("starts", "unit_shard", "mapped", "mapped_bool", "unit_view"):
        assert np.array_equal(getattr(joined, name), getattr(one, name)), name
    assert joined.unit_index == one.unit_index and joined.num_records == one.num_records == 90
    assert [(u.shard, u.start, u.rows) for u in joined.units] == [(u.shard, u.start, u.rows) for u in one.units]
    assert joined.shards == a.shards + b.shards  # the tables' open shards: nothing opened again


def test_a_closed_table_holds_no_units():
    table = closed_table(12)
    assert table.num_records == 12 and not table.units and not table.shards and len(table.schema) == 0
