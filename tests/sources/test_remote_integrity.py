"""Remote objects are identified by what the store guarantees (the ETag) plus size, never by a
one-second Last-Modified: a same-size object replaced within the second it was verified in is
re-hashed at ``verify="cached"`` and refused (moto's S3 server on 127.0.0.1)."""

from __future__ import annotations

import datetime
import io
import time

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import resumable_data as rd
from resumable_data.sources import verified
from resumable_data.sources.store import store_for

pytest.importorskip("moto.server")


def _ipc_bytes(values: np.ndarray, chunk: int = 100) -> bytes:
    t = pa.table({"x": pa.array(values)})
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, t.schema) as w:
        w.write_table(t, max_chunksize=chunk)
    return sink.getvalue()


def _put(fs, path, data):
    with fs.open_output_stream(path) as f:
        f.write(data)


def test_stat_carries_the_etag_and_it_changes_with_the_bytes(s3_fs):
    s3_fs.create_dir("etag-bucket")
    store = store_for(s3_fs)
    _put(s3_fs, "etag-bucket/a.bin", b"a" * 100)
    first = store.stat("etag-bucket/a.bin")
    assert first.size == 100 and first.etag and first.mtime is not None
    _put(s3_fs, "etag-bucket/a.bin", b"b" * 100)
    second = store.stat("etag-bucket/a.bin")
    assert second.size == 100 and second.etag and second.etag != first.etag
    assert store.stat("etag-bucket/missing.bin") is None and store.stat("etag-bucket") is None
    assert verified.file_key(store, "etag-bucket/a.bin") != verified.file_key(
        store, "etag-bucket/a.bin", first)


def test_same_size_replacement_in_the_same_second_is_refused(s3_fs):
    s3_fs.create_dir("same-second")
    good = np.arange(3000, dtype=np.int64)
    bad = good[::-1].copy()  # same size, same rows, 2,999 of 3,000 values differ
    assert len(_ipc_bytes(good)) == len(_ipc_bytes(bad))
    path = "same-second/data/part.arrow"
    for _ in range(20):  # replace within the second the pin verified in (retry a boundary crossing)
        while datetime.datetime.now().microsecond > 300_000:
            time.sleep(0.01)
        _put(s3_fs, path, _ipc_bytes(good))
        rd.pin("same-second/data", filesystem=s3_fs, save="cache")
        before = s3_fs.get_file_info(path).mtime
        _put(s3_fs, path, _ipc_bytes(bad))
        if s3_fs.get_file_info(path).mtime == before:
            break
    else:  # pragma: no cover - the machine is too slow to stay within one second
        pytest.skip("could not replace the object within one Last-Modified second")
    # the replaced object keeps size and Last-Modified: only the ETag tells it apart
    with pytest.raises(rd.DatasetIntegrityError, match="content hash"):
        rd.ArrowShards("same-second/data", filesystem=s3_fs)  # verify="cached", the default


# -- hash="etag": pinning a large remote dataset without reading its bytes -------------------------
def test_etag_pin_reads_no_shard_body_and_guards_replacements(endpoint, tmp_path):
    from benchmarks.s3_proxy import S3Proxy
    proxy = S3Proxy(endpoint)
    try:
        fs = pafs.S3FileSystem(endpoint_override=proxy.endpoint, scheme="http", access_key="testing",
                               secret_key="testing", region="us-east-1", allow_bucket_creation=True)
        fs.create_dir("etag-pin")
        values = [np.arange(i * 50_000, (i + 1) * 50_000, dtype=np.int64) for i in range(4)]
        for i, v in enumerate(values):
            _put(fs, f"etag-pin/data/part-{i}.arrow", _ipc_bytes(v, 5000))
        total = sum(len(_ipc_bytes(v, 5000)) for v in values)
        proxy.reset()
        version = rd.pin("etag-pin/data", filesystem=fs, hash="etag")
        assert proxy.bytes_out < total / 10  # footers and batch headers, never the bodies
        assert version.hash_mode is rd.HashMode.ETAG and all(s.etag for s in version.shards)
        src = rd.ArrowShards("etag-pin/data", filesystem=fs)
        assert src.take([0, 199_999]).column("x").to_pylist() == [0, 199_999]
        with pytest.raises(rd.ConfigError, match="level="):
            version.verify("content")  # no digest of the bytes to compare
        from resumable_data.sources.version import compute_derived_hash
        forged = version.to_dict()
        forged["shards"][0]["etag"] = '"another"'  # the identity covers the ETag: a forged one is refused
        forged["derived_hash"] = compute_derived_hash(forged["shards"])
        with pytest.raises(rd.DatasetIntegrityError, match="etag"):
            rd.DatasetVersion.from_dict(forged)
        _put(fs, "etag-pin/data/part-2.arrow", _ipc_bytes(values[2][::-1].copy(), 5000))  # same size
        with pytest.raises(rd.DatasetIntegrityError, match="part-2.arrow.*ETag"):
            rd.ArrowShards("etag-pin/data", filesystem=fs)
        rd.ArrowShards("etag-pin/data", filesystem=fs, verify="size")  # what "size" promises: sizes only
    finally:
        proxy.close()
    with pytest.raises(rd.ConfigError, match="hash='content'"):  # local files have no ETags
        (tmp_path / "d").mkdir()
        (tmp_path / "d" / "a.arrow").write_bytes(_ipc_bytes(values[0]))
        rd.pin(tmp_path / "d", hash="etag")


# -- an object replaced during a run, without read-ahead ------------------------------------------
def _parquet_bytes(values: np.ndarray, rows: int = 100) -> bytes:
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.table({"x": pa.array(values)}), sink, row_group_size=rows, compression="none", use_dictionary=False)
    return sink.getvalue()


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_a_same_size_replacement_mid_run_is_refused_without_read_ahead(s3_fs, fmt):
    """Units read on demand (no ``read_ahead=``) go through the checked read: once the object is
    replaced by one of the same size, the next unit read from it is an rd error, and no value of
    the new object is ever returned."""
    prefix = f"mid-run-{fmt}/data"
    s3_fs.create_dir(prefix)
    good = np.arange(3000, dtype=np.int64)
    bad = good[::-1].copy()
    encode = _ipc_bytes if fmt == "arrow" else _parquet_bytes
    assert len(encode(good)) == len(encode(bad))
    path = f"{prefix}/part.{fmt}"
    _put(s3_fs, path, encode(good))
    rd.pin(prefix, filesystem=s3_fs, save="cache")
    src = rd.ArrowShards(prefix, filesystem=s3_fs)
    assert src.remote
    first = np.arange(0, 1000, 7)  # units 0..9 read and decoded before the replacement
    assert src.take(first).column("x").to_numpy().tolist() == good[first].tolist()
    _put(s3_fs, path, encode(bad))
    later = np.arange(2000, 3000, 3)  # units never read before
    with pytest.raises(rd.DatasetIntegrityError):
        src.take(later)
    again = np.arange(0, 1000, 11)  # decoded before the replacement: still the verified bytes, or refused
    try:
        got = src.take(again).column("x").to_numpy().tolist()
    except rd.DatasetIntegrityError:
        return
    assert got == good[again].tolist()
