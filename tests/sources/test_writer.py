import pyarrow as pa
import pytest

import resumable_data as rd


def test_split_and_roundtrip(tmp_path, table):
    paths = rd.write_arrow_shards(table, tmp_path, rows_per_shard=300, rows_per_batch=50)
    assert [p.name for p in paths] == [f"shard-0000{i}.arrow" for i in range(4)]
    with pa.memory_map(str(paths[0])) as f:
        r = pa.ipc.open_file(f)
        assert r.num_record_batches == 6
    back = pa.concat_tables(pa.ipc.open_file(pa.memory_map(str(p))).read_all() for p in paths)
    assert back.equals(table)


@pytest.mark.parametrize("kwargs, param", [
    ({"num_shards": 0}, "num_shards="),
    ({"rows_per_batch": -1}, "rows_per_batch="),
    ({"num_shards": 2, "rows_per_shard": 3}, "rows_per_shard="),
    ({"format": "csv"}, "format="),
    ({"num_shards": 2 ** 64}, "num_shards=.*at most one shard per row"),  # attack sweep: looped for ever
])
def test_bad_args(tmp_path, table, kwargs, param):
    with pytest.raises(rd.ConfigError, match=param):
        rd.write_arrow_shards(table, tmp_path, **kwargs)


def test_not_a_table(tmp_path):
    with pytest.raises(rd.ConfigError, match="table="):
        rd.write_arrow_shards({"a": [1]}, tmp_path)


def test_more_shards_than_rows_is_refused(tmp_path):
    """Attack sweep: num_shards past the row count wrote empty files (and 2**64 never returned)."""
    with pytest.raises(rd.ConfigError, match="num_shards=4: expected at most one shard per row"):
        rd.write_arrow_shards(pa.table({"x": [1, 2, 3]}), tmp_path, num_shards=4)
    assert not list(tmp_path.iterdir())
    assert len(rd.write_arrow_shards(pa.table({"x": [1, 2, 3]}), tmp_path, num_shards=3)) == 3
