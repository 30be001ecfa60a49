"""Remote shards through a pyarrow.fs.FileSystem, against a local S3-compatible endpoint (moto's
server mode on a free port: the ``endpoint`` fixture of conftest.py): pinning streams through the
filesystem, reading is on demand, resume through rd.DataLoader is bit-exact."""

from __future__ import annotations

import io
import json
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import resumable_data as rd
from resumable_data.sources.files import ipc_file_batch_rows
from resumable_data.sources.store import store_for
from tests.sources.conftest import upload

moto_server = pytest.importorskip("moto.server")

N = 300
FORMATS = ["arrow", "arrow_stream", "parquet"]


def s3(endpoint) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", access_key="testing",
                             secret_key="testing", region="us-east-1", allow_bucket_creation=True)


def table(n=N, seed=0):
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 9, n)
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "tokens": pa.array([rng.integers(0, 1000, k).astype(np.int32).tolist() for k in lens],
                           type=pa.list_(pa.int32())),
        "text": pa.array([f"doc {i}" for i in range(n)]),
    })


@pytest.fixture(scope="module")
def datasets_(endpoint, tmp_path_factory):
    """Per format: (local pinned-free dir, remote prefix) holding the same shards."""
    fs = s3(endpoint)
    out = {}
    for fmt in FORMATS:
        d = tmp_path_factory.mktemp(fmt)
        rd.write_arrow_shards(table(), d, num_shards=3, rows_per_batch=37, format=fmt)
        prefix = f"bucket-{fmt.replace('_', '-')}/data"
        upload(fs, d, prefix)
        out[fmt] = (d, prefix)
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_pin_streams_through_the_filesystem_and_matches_a_local_pin(endpoint, datasets_, tmp_path, fmt):
    fs = s3(endpoint)
    local, prefix = datasets_[fmt]
    version = rd.pin(prefix, filesystem=fs)
    assert version.filesystem is fs and version.num_records == N
    assert store_for(fs).stat(f"{prefix}/{rd.sources.MANIFEST_NAME}") is not None
    loaded = rd.DatasetVersion.load(prefix, filesystem=fs)
    assert loaded == version
    # identity is storage-independent: pinning a local copy of the same bytes gives the same hash
    copy = tmp_path / "copy"
    copy.mkdir()
    for p in sorted(local.iterdir()):
        (copy / p.name).write_bytes(p.read_bytes())
    assert rd.pin(copy).hash == version.hash
    loaded.verify("content")


@pytest.mark.parametrize("fmt", FORMATS)
def test_remote_take_equals_local_take(endpoint, datasets_, fmt):
    fs = s3(endpoint)
    local, prefix = datasets_[fmt]
    rd.pin(prefix, filesystem=fs)
    src = rd.ArrowShards(prefix, filesystem=fs)
    ref = rd.ArrowShards(local, unpinned="allow")
    assert len(src) == N and src.filesystem is fs and src.pinned
    ids = np.random.default_rng(1).integers(0, N, 200)
    assert src.take(ids).equals(ref.take(ids))
    assert src[N - 1] == ref[N - 1]
    assert src.column_lengths("tokens").tolist() == ref.column_lengths("tokens").tolist()
    again = pickle.loads(pickle.dumps(src))  # DataLoader workers: the filesystem pickles its config
    assert again.take(ids[:20]).equals(ref.take(ids[:20]))
    if fmt == "arrow":  # IPC file: record batches are the units, read on demand
        assert len(src._units) == len(ref._units) and all(u.batch is None for u in src._units)


def test_uri_and_version_inputs(endpoint, datasets_, monkeypatch):
    fs = s3(endpoint)
    _, prefix = datasets_["arrow"]
    version = rd.pin(prefix, filesystem=fs)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    uri = f"s3://{prefix}?endpoint_override={endpoint}&scheme=http&region=us-east-1"
    assert rd.ArrowShards(uri).version == version
    with pytest.raises(rd.ConfigError, match="URI"):
        rd.ArrowShards(f"s3://{prefix}?bogus=1")
    assert len(rd.ArrowShards(version)) == N
    files = [f"{prefix}/{s.path}" for s in version.shards]
    assert rd.ArrowShards(files, filesystem=fs).version == version


def test_pin_takes_the_uri_that_arrow_shards_takes(endpoint, tmp_path, monkeypatch):
    """rd.pin("s3://...") pins the remote prefix (it was read as a local path under the working
    directory); a prefix that holds nothing names the store, not the working directory."""
    fs = s3(endpoint)
    rd.write_arrow_shards(table(60), tmp_path, num_shards=2)
    upload(fs, tmp_path, "bucket-uri-pin/x")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    uri = f"s3://bucket-uri-pin/x?endpoint_override={endpoint}&scheme=http&region=us-east-1"
    version = rd.pin(uri)
    assert version == rd.pin("bucket-uri-pin/x", filesystem=fs, save=False)
    assert rd.ArrowShards(uri, unpinned="error").version == version  # the manifest went to the store
    with pytest.raises(rd.ConfigError, match="URI"):
        rd.pin("s3://bucket-uri-pin/x?bogus=1")
    with pytest.raises(rd.ConfigError, match=r"the store holds nothing there; fix: .*filesystem= \(endpoint"):
        rd.ArrowShards("bucket-uri-pin/absent", filesystem=fs)


def test_unpinned_remote_policies(endpoint, tmp_path):
    fs = s3(endpoint)
    rd.write_arrow_shards(table(50), tmp_path, num_shards=2)
    upload(fs, tmp_path, "bucket-unpinned/x")
    with pytest.raises(rd.ConfigError, match="pinned shards"):
        rd.ArrowShards("bucket-unpinned/x", filesystem=fs, unpinned="error")
    loose = rd.ArrowShards("bucket-unpinned/x", filesystem=fs, unpinned="allow")
    assert not loose.pinned and len(loose) == 50
    with pytest.raises(rd.ConfigError, match="filesystem"):
        rd.ArrowShards("bucket-unpinned/x", filesystem=object())


def test_verify_reports_changed_remote_objects(endpoint, tmp_path):
    fs = s3(endpoint)
    rd.write_arrow_shards(table(60), tmp_path, num_shards=2, format="parquet")
    upload(fs, tmp_path, "bucket-verify/x")
    rd.pin("bucket-verify/x", filesystem=fs)
    name = sorted(p.name for p in tmp_path.iterdir())[0]
    with fs.open_output_stream(f"bucket-verify/x/{name}") as out:  # same rows, other values
        buf = io.BytesIO()
        t = table(30, seed=9)
        pq.write_table(t, buf)
        out.write(buf.getvalue())
    with pytest.raises(rd.DatasetIntegrityError, match=name):
        rd.ArrowShards("bucket-verify/x", filesystem=fs)
    with fs.open_output_stream("bucket-verify/x/extra.parquet") as out:
        out.write(buf.getvalue())
    with pytest.raises(rd.DatasetIntegrityError, match="extra shard file"):
        rd.DatasetVersion.load("bucket-verify/x", filesystem=fs).verify()


def test_ipc_footer_row_counts_match_pyarrow(tmp_path):
    t = table(500)
    p = tmp_path / "f.arrow"
    sizes = [1, 99, 0, 200, 200]
    with pa.OSFile(str(p), "wb") as sink, pa.ipc.new_file(sink, t.schema) as w:
        offset = 0
        for size in sizes:
            w.write_batch(pa.RecordBatch.from_pylist([], schema=t.schema) if size == 0
                          else t.slice(offset, size).combine_chunks().to_batches()[0])
            offset += size
    with pa.OSFile(str(p), "rb") as f:
        reader = pa.ipc.open_file(f)
        want = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
        assert ipc_file_batch_rows(f) == want == sizes


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resumed_iteration_over_s3_is_bit_exact(endpoint, datasets_, num_workers):
    fs = s3(endpoint)
    _, prefix = datasets_["arrow"]
    rd.pin(prefix, filesystem=fs)

    def take(loader, n):
        out = []
        while len(out) < n:
            for b in loader:
                out.append({k: v.tobytes() if isinstance(v, np.ndarray) else v for k, v in b.items()})
                if len(out) == n:
                    break
        return out

    kw = dict(batch_size=16, shuffle=True, seed=5, sharding=rd.Sharding(1, 0), num_workers=num_workers,
              arrow_collate=lambda t: {"id": t.column("id").to_numpy(), "text": t.column("text").to_pylist()})
    ref = take(rd.DataLoader(rd.ArrowShards(prefix, filesystem=fs), **kw), 30)
    first = rd.DataLoader(rd.ArrowShards(prefix, filesystem=fs), **kw)
    head = take(first, 11)
    state = json.loads(json.dumps(first.state_dict()))
    del first
    resumed = rd.DataLoader(rd.ArrowShards(prefix, filesystem=fs), **kw)
    resumed.load_state_dict(state)
    assert head + take(resumed, 19) == ref
