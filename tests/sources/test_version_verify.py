"""resumable_data.sources.version_verify: the files on a store compared with their manifest, every difference listed."""

import pytest

import resumable_data as rd


@pytest.fixture
def pinned(tmp_path, table):
    rd.write_arrow_shards(table, tmp_path, num_shards=3, rows_per_batch=128)
    return rd.pin(tmp_path)


def test_flip_byte_content_verify_names_shard_and_hash(pinned, tmp_path):
    p = tmp_path / "shard-00001.arrow"
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x01
    p.write_bytes(bytes(data))
    pinned.verify("size")  # same size: undetected at size level
    with pytest.raises(rd.DatasetIntegrityError, match=r"shard-00001\.arrow.*hash"):
        pinned.verify("content")


def test_truncate_missing_extra_all_listed(pinned, tmp_path, table):
    p0 = tmp_path / "shard-00000.arrow"
    p0.write_bytes(p0.read_bytes()[:-10])
    (tmp_path / "shard-00002.arrow").unlink()
    rd.write_arrow_shards(table.slice(0, 10), tmp_path / "more")
    with pytest.raises(rd.DatasetIntegrityError) as exc:
        pinned.verify("size")
    msg = str(exc.value)
    assert "shard-00000.arrow" in msg and "size" in msg
    assert "shard-00002.arrow" in msg and "missing" in msg
    assert "more/shard-00000.arrow" in msg and "extra" in msg
    assert "3 difference(s)" in msg


def test_rows_changed_same_size_reported(tmp_path, make_table):
    t = make_table(100)
    rd.write_arrow_shards(t, tmp_path, num_shards=1)
    v = rd.pin(tmp_path, hash="size")
    d = v.to_dict()
    d["shards"][0]["num_rows"] = 99
    d["num_records"] = 99
    d["shards"][0]["layout"] = None  # a forger drops the layout too (it names 100 rows)
    from resumable_data.sources.version import compute_derived_hash, compute_hash
    d["hash"] = compute_hash(d)
    d["derived_hash"] = compute_derived_hash(d["shards"])
    forged = rd.DatasetVersion.from_dict(d, root=tmp_path)
    with pytest.raises(rd.DatasetIntegrityError, match="rows 100 on disk, pinned 99"):
        forged.verify()


def test_verify_level_errors(tmp_path, table):
    rd.write_arrow_shards(table, tmp_path)
    v = rd.pin(tmp_path, hash="size")
    with pytest.raises(rd.ConfigError, match="level="):
        v.verify("content")
    with pytest.raises(rd.ConfigError, match="level="):
        v.verify("bytes")


def test_explicit_file_list_has_no_extras(tmp_path, table):
    paths = rd.write_arrow_shards(table, tmp_path, num_shards=3)
    v = rd.pin(paths[:2])
    assert v.num_records == sum(s.num_rows for s in v.shards) < 1000
    v.verify("content")  # shard-00002 is not "extra" for an explicit list
