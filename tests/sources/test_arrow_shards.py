import logging
import multiprocessing
import pickle

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.sources.files import MANIFEST_NAME


@pytest.fixture
def src(tmp_path, table):
    rd.write_arrow_shards(table, tmp_path, num_shards=4, rows_per_batch=64)
    rd.pin(tmp_path)
    return rd.ArrowShards(tmp_path)


def test_basics(src, table):
    assert len(src) == 1000 and src.num_shards == 4 and src.pinned
    assert src.version.hash == rd.DatasetVersion.load(src.root).hash
    assert src.schema.equals(table.schema)
    assert src[0] == table.slice(0, 1).to_pylist()[0]
    assert src[-1] == table.slice(999, 1).to_pylist()[0]
    assert src.__getitems__([5, 3]) == table.take([5, 3]).to_pylist()
    for bad in (1000, -1001, 2 ** 64):  # rd errors (attack sweep: plain IndexError / TypeError) that stay
        with pytest.raises(rd.RecordIdError, match="index="):  # the IndexError / TypeError of a sequence
            src[bad]
    for bad in (1.5, None, "0", [0, 1], np.array([0])):
        with pytest.raises(rd.ConfigTypeError, match="index="):
            src[bad]


@pytest.mark.parametrize("bad", [None, 0, 1.5, b"data", True])
def test_a_path_that_is_not_a_path_is_an_rd_error(bad):
    """Found by the attack sweep: ``TypeError: 'NoneType' object is not iterable`` escaped from both."""
    for call in (rd.ArrowShards, rd.pin):
        with pytest.raises(rd.ConfigTypeError, match=r"^path=.*expected a directory or shard file.*fix: "):
            call(bad)


def test_take_matches_table_take(src, table):
    rng = np.random.default_rng(1)
    for n in (1, 7, 256):
        ids = rng.integers(0, 1000, n)
        assert src.take(ids).equals(table.take(ids))
    dup = [3, 3, 999, 0, 3]
    assert src.take(dup).equals(table.take(dup))
    empty = src.take([])
    assert empty.num_rows == 0 and empty.schema.equals(table.schema)
    assert src.take(np.array([2, 1], dtype=np.uint16)).equals(table.take([2, 1]))


@pytest.mark.parametrize("bad", [[1000], [-1], [0.5], [[1, 2]], ["a"]])
def test_take_bad_ids(src, bad):
    with pytest.raises(rd.RecordIdError, match="record_ids=") as exc:
        src.take(bad)
    assert isinstance(exc.value, IndexError) and isinstance(exc.value, rd.ConfigError)


@pytest.mark.parametrize("fmt", ["arrow", "arrow_stream", "parquet"])
def test_formats_equal_rows(tmp_path, table, fmt):
    rd.write_arrow_shards(table, tmp_path, num_shards=3, rows_per_batch=100, format=fmt)
    s = rd.ArrowShards(tmp_path, unpinned="allow")
    ids = np.random.default_rng(2).integers(0, 1000, 300)
    assert s.take(ids).equals(table.take(ids))
    assert s[17] == table.slice(17, 1).to_pylist()[0]
    np.testing.assert_array_equal(
        s.column_lengths("tokens"), pa.compute.list_value_length(table.column("tokens")).to_numpy())


def test_stream_format_is_detected(tmp_path, table):
    rd.write_arrow_shards(table, tmp_path, format="arrow_stream")
    from resumable_data.sources.files import ShardFormat, detect_format
    assert detect_format(tmp_path / "shard-00000.arrow") is ShardFormat.IPC_STREAM


def test_hf_datasets_arrow_files(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"tokens": [[1, 2], [3], [4, 5, 6]] * 10, "id": list(range(30))})
    ds.save_to_disk(str(tmp_path / "hf"), num_shards=2)
    s = rd.ArrowShards(tmp_path / "hf")
    assert len(s) == 30 and s.pinned
    assert s.take([29, 0])["id"].to_pylist() == [29, 0]


def test_column_lengths_errors(src):
    with pytest.raises(rd.ConfigError, match="column="):
        src.column_lengths("nope")
    with pytest.raises(rd.ConfigError, match="column="):
        src.column_lengths("id")


def _take_in_child(s, ids):
    return s.take(ids).to_pylist()


def test_pickle_roundtrip_spawn(src):
    state = src.__getstate__()
    assert set(state) == {"format", "schema_version", "root", "files", "version", "identities", "decoded_cache_bytes"}
    ids = [5, 999, 5, 0, 512]
    again = pickle.loads(pickle.dumps(src))
    assert again.take(ids).equals(src.take(ids)) and again.version == src.version
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        got = pool.apply(_take_in_child, (src, ids))
    assert got == src.take(ids).to_pylist()


def test_unpinned_default_pins_and_says_so(tmp_path, table, caplog):
    rd.write_arrow_shards(table, tmp_path, num_shards=2)
    with caplog.at_level(logging.WARNING, logger="resumable_data"):
        s = rd.ArrowShards(tmp_path)
    # auto-pinning keeps the manifest in the cache, never in the user's folder (issue 13)
    assert s.pinned and not (tmp_path / MANIFEST_NAME).exists()
    assert not (tmp_path / rd.sources.files.LEGACY_MANIFEST_NAME).exists()
    assert any("pinning it now" in r.getMessage() for r in caplog.records), caplog.text
    # the way out names the call that takes it (rd.prepare, rd.Mixture take a source, not unpinned=)
    assert "open it with rd.ArrowShards(path, unpinned='allow')" in caplog.text
    assert rd.ArrowShards(tmp_path, unpinned="error").version == s.version  # found in the cache


def test_an_unpinned_file_is_named_in_the_warning_not_its_folder(tmp_path, table, caplog):
    """Pinning one file (or a list) pins those files, not the folder around them: the warning names
    the files, so nobody thinks the whole folder was pinned."""
    rd.write_arrow_shards(table, tmp_path, num_shards=2)
    with caplog.at_level(logging.WARNING, logger="resumable_data"):
        rd.ArrowShards(tmp_path / "shard-00001.arrow")
    msg = next(r.getMessage() for r in caplog.records if "pinning it now" in r.getMessage())
    assert msg.startswith(f"resumable_data: 'shard-00001.arrow' in {tmp_path} is not pinned"), msg


def test_unpinned_allow_and_error(tmp_path, table):
    rd.write_arrow_shards(table, tmp_path, num_shards=2)
    s = rd.ArrowShards(tmp_path, unpinned="allow")
    assert s.pinned is False and s.version is None
    assert not (tmp_path / MANIFEST_NAME).exists()
    assert pickle.loads(pickle.dumps(s)).take([1]).equals(s.take([1]))
    with pytest.raises(rd.ConfigError, match="path_or_files="):
        rd.ArrowShards(tmp_path, unpinned="error")
    with pytest.raises(rd.ConfigError, match="unpinned="):
        rd.ArrowShards(tmp_path, unpinned="maybe")
    with pytest.raises(rd.ConfigError, match="verify="):
        rd.ArrowShards(tmp_path, verify="none")


def test_open_checks_integrity(tmp_path, table):
    rd.write_arrow_shards(table, tmp_path, num_shards=2)
    rd.pin(tmp_path)
    p = tmp_path / "shard-00001.arrow"
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x01
    p.write_bytes(bytes(data))
    rd.ArrowShards(tmp_path, verify="size")  # the size check alone passes a same-size edit
    with pytest.raises(rd.DatasetIntegrityError, match="shard-00001.arrow"):
        rd.ArrowShards(tmp_path, verify="content")
    with pytest.raises(rd.DatasetIntegrityError, match="shard-00001.arrow"):
        rd.ArrowShards(tmp_path)  # the default (verify="cached") hashes the changed file again
    p.write_bytes(bytes(data[:-8]))
    with pytest.raises(rd.DatasetIntegrityError, match="size"):
        rd.ArrowShards(tmp_path)


def test_file_list_and_version_inputs(tmp_path, table):
    paths = rd.write_arrow_shards(table, tmp_path, num_shards=3)
    s = rd.ArrowShards(paths)
    assert len(s) == 1000 and s.version.selection is rd.sources.Selection.FILES
    assert rd.ArrowShards(s.version).take([1, 2]).equals(table.take([1, 2]))
    # file lists pin into the cache, never into their common parent (issue 13): another list of
    # the same files is another version, and the folder stays untouched
    other = rd.ArrowShards(paths[:2])
    assert other.version.hash != s.version.hash and len(other) < 1000
    assert not (tmp_path / MANIFEST_NAME).exists()
    assert rd.ArrowShards(paths, unpinned="error").version == s.version  # found in the cache
    with pytest.raises(rd.ConfigError, match="path_or_files="):
        rd.ArrowShards(tmp_path / "nope")


def test_mixed_arrow_and_stream_shards_with_different_metadata(tmp_path, table):
    a = table.slice(0, 400).replace_schema_metadata({"who": "a"})
    b = table.slice(400).replace_schema_metadata({"who": "b"})
    rd.write_arrow_shards(a, tmp_path / "0", rows_per_batch=50)
    rd.write_arrow_shards(b, tmp_path / "1", rows_per_batch=50, format="arrow_stream")
    s = rd.ArrowShards(tmp_path)
    ids = [999, 0, 400, 399, 0]
    assert s.take(ids).to_pylist() == table.take(ids).to_pylist()
