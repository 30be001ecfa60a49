"""The layout index (sources/layout.py): built for every format, pinned in the manifest (schema 2)
without changing the version hash, schema-1 manifests still read (layouts then built once and
cached), remote units read by range: opening costs O(shards) small requests and a stream shard
is never downloaded whole (moto on 127.0.0.1 behind benchmarks.s3_proxy.S3Proxy, which counts)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import resumable_data as rd
from resumable_data.sources import layout as L
from resumable_data.sources.files import MANIFEST_NAME, read_shard_meta

pytest.importorskip("moto.server")
from benchmarks.s3_proxy import S3Proxy  # noqa: E402


def table(n=600, seed=0):
    rng = np.random.default_rng(seed)
    return pa.table({"id": pa.array(np.arange(n, dtype=np.int64)),
                     "tokens": pa.array([rng.integers(0, 99, k).astype(np.int32).tolist()
                                         for k in rng.integers(0, 9, n)], type=pa.list_(pa.int32())),
                     "text": pa.array([f"r{i}" if i % 5 else None for i in range(n)])})


def write_ipc(path, t, sizes, *, stream=False, compression=None):
    opts = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.OSFile(str(path), "wb") as sink, (pa.ipc.new_stream if stream else pa.ipc.new_file)(
            sink, t.schema, options=opts) as w:
        at = 0
        for n in sizes:
            w.write_batch(t.slice(at, n).combine_chunks().to_batches()[0] if n
                          else pa.RecordBatch.from_pylist([], schema=t.schema))
            at += n


def reader_batches(path, stream):
    buf = pa.py_buffer(path.read_bytes())
    r = pa.ipc.open_stream(buf) if stream else pa.ipc.open_file(buf)
    return list(r) if stream else [r.get_batch(i) for i in range(r.num_record_batches)]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_ipc_layout_reads_every_batch_by_range(tmp_path, stream, compression):
    t = table()
    sizes = [1, 99, 0, 200, 300]
    p = tmp_path / "x.arrow"
    write_ipc(p, t, sizes, stream=stream, compression=compression)
    b = p.read_bytes()
    read_at = lambda o, n: b[o:o + n]  # noqa: E731
    lay = (L.ipc_stream_layout if stream else L.ipc_file_layout)(read_at, len(b))
    assert lay.format is (L.ShardFormat.IPC_STREAM if stream else L.ShardFormat.IPC_FILE)
    assert lay.unit_rows == sizes
    schema = pa.ipc.read_schema(pa.py_buffer(read_at(*lay.schema)))
    want = reader_batches(p, stream)
    for (off, n, rows), ref in zip(lay.units, want):
        assert L.read_ipc_unit(read_at(off, n), schema, rows).equals(ref)
    assert L.ShardLayout.from_dict(json.loads(json.dumps(lay.to_dict())), len(b), digests=True, meta=True) == lay
    assert L.ShardLayout.from_dict(json.loads(json.dumps(lay.to_dict(digests=False))), len(b)) == lay
    assert read_shard_meta(p).layout == lay  # what rd.pin records
    with pytest.raises(L.LayoutMismatch, match="rows"):
        L.read_ipc_unit(read_at(*lay.units[1][:2]), schema, 98)


def test_parquet_layout_spans_the_row_groups(tmp_path):
    t = table()
    pq.write_table(t, tmp_path / "x.parquet", row_group_size=128)
    md = pq.ParquetFile(tmp_path / "x.parquet").metadata
    lay = L.parquet_layout(md)
    assert lay.unit_rows == [md.row_group(g).num_rows for g in range(md.num_row_groups)]
    size = (tmp_path / "x.parquet").stat().st_size
    assert all(0 < off and off + n <= size for off, n, _ in lay.units)
    assert [u[0] for u in lay.units] == sorted(u[0] for u in lay.units)


def test_dictionaries_have_no_layout_and_still_read(tmp_path):
    t = pa.table({"d": pa.array(["a", "b", "a"] * 20).dictionary_encode()})
    p = tmp_path / "d.arrow"
    write_ipc(p, t, [30, 30], stream=True)
    b = p.read_bytes()
    assert L.ipc_stream_layout(lambda o, n: b[o:o + n], len(b)) is None
    assert read_shard_meta(p).layout is None


@pytest.mark.parametrize("bad, match", [
    ({"format": "ipc_file", "schema": None, "units": []}, "schema range"),
    ({"format": "parquet", "schema": [0, 4], "units": []}, "schema range"),
    ({"format": "ipc_file", "schema": [8, 100], "units": [[50, 10, 1]]}, "file order"),
    ({"format": "ipc_file", "schema": [8, 100], "units": [[200, 10, 1], [150, 10, 1]]}, "file order"),
    ({"format": "ipc_file", "schema": [8, 100], "units": [[200, 10**6, 1]]}, "inside"),
    ({"format": "ipc_file", "schema": [8, 100], "units": [[200, 10, -1]]}, "non-negative"),
    ({"format": "zip", "schema": None, "units": []}, "format"),
])
def test_layout_validation(bad, match):
    with pytest.raises(L.LayoutMismatch, match=match):
        L.ShardLayout.from_dict(bad, 1000)


# -- manifests: schema 2 pins layouts, schema 1 still reads, the identity is unchanged ----------
def as_schema_1(d):
    d = json.loads(json.dumps(d))
    d["schema_version"] = 1
    d.pop("derived_hash")
    for s in d["shards"]:
        s.pop("layout")
        s.pop("etag")
    return d


@pytest.mark.parametrize("fmt", ["arrow", "arrow_stream", "parquet"])
def test_schema_2_pins_layouts_and_keeps_the_version_hash(tmp_path, fmt):
    rd.write_arrow_shards(table(), tmp_path, num_shards=2, rows_per_batch=77, format=fmt)
    v = rd.pin(tmp_path)
    d = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert d["schema_version"] == 4 and all(s["layout"]["units"] and s["layout"]["digests"] for s in d["shards"])
    assert [len(s.layout.units) for s in v.shards] == [4, 4]
    old = rd.DatasetVersion.from_dict(as_schema_1(d), root=tmp_path)  # what schema 1 wrote
    assert old.hash == v.hash and old == v and all(s.layout is None for s in old.shards)
    # the hash of schema 1's body is the hash this package wrote before layouts existed
    from resumable_data.sources.version import compute_hash
    assert compute_hash(as_schema_1(d)) == v.hash
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(as_schema_1(d)))
    src = rd.ArrowShards(tmp_path)
    assert src.version.hash == v.hash and src.take([0, 599]).column("id").to_pylist() == [0, 599]


# -- remote: requests and bytes ------------------------------------------------------------------
SHARDS = 6


@pytest.fixture(scope="module")
def remote(endpoint, tmp_path_factory):
    proxy = S3Proxy(endpoint)
    fs = pafs.S3FileSystem(endpoint_override=proxy.endpoint, scheme="http", access_key="testing",
                           secret_key="testing", region="us-east-1", allow_bucket_creation=True)
    out = {}
    for fmt in ("arrow", "arrow_stream", "parquet"):
        d = tmp_path_factory.mktemp(fmt)
        rd.write_arrow_shards(table(1200), d, num_shards=SHARDS, rows_per_batch=20, format=fmt)
        prefix = f"layout-{fmt.replace('_', '-')}/data"
        fs.create_dir(prefix.split("/")[0])
        for p in sorted(d.iterdir()):
            with fs.open_output_stream(f"{prefix}/{p.name}") as f:
                f.write(p.read_bytes())
        out[fmt] = (d, prefix)
    yield proxy, fs, out
    proxy.close()


def put_manifest(fs, prefix, d):
    with fs.open_output_stream(f"{prefix}/{MANIFEST_NAME}") as f:
        f.write(json.dumps(d).encode())


@pytest.mark.parametrize("fmt", ["arrow", "arrow_stream", "parquet"])
def test_remote_open_is_o_shards_and_reads_by_range(remote, fmt, tmp_path, monkeypatch):
    proxy, fs, data = remote
    local, prefix = data[fmt]
    rd.pin(prefix, filesystem=fs)
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "new-machine"))  # no markers: pinned ETags trusted
    total = sum(p.stat().st_size for p in local.iterdir())
    proxy.reset()
    src = rd.ArrowShards(prefix, filesystem=fs)
    # a HEAD (verify) and an open (HEAD) per shard, one GET of its schema (IPC) or footer
    # (Parquet); the manifest, the listing and the directory check: a constant
    assert proxy.requests <= 3 * SHARDS + 8, proxy.counts
    manifest = fs.get_file_info(f"{prefix}/{MANIFEST_NAME}").size
    if fmt != "parquet":  # (pyarrow reads a Parquet file's last 64 KiB for its footer: these are smaller)
        assert proxy.bytes_out - manifest < total / 10  # metadata only: nothing downloaded whole
    ref = rd.ArrowShards(local, unpinned="allow")
    ids = np.random.default_rng(2).permutation(len(ref))
    proxy.reset()
    assert src.take(ids).equals(ref.take(ids))
    if fmt != "parquet":  # one ranged GET per unit, of exactly its message (no byte read twice), and no
        units = len(src._units)  # HEAD: every unit's bytes are checked against its pinned digest instead
        assert proxy.counts["GET"] == units and proxy.counts.get("HEAD", 0) == 0 and proxy.requests == units
        assert proxy.bytes_out < total


@pytest.mark.parametrize("fmt", ["arrow", "arrow_stream"])
def test_schema_1_remote_manifest_builds_layouts_once(remote, fmt, tmp_path, monkeypatch):
    proxy, fs, data = remote
    local, prefix = data[fmt]
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "cache"))
    v = rd.pin(prefix, filesystem=fs)
    put_manifest(fs, prefix, as_schema_1(v.to_dict()))
    proxy.reset()
    cold = rd.ArrowShards(prefix, filesystem=fs)
    cold_requests = proxy.requests
    assert cold.version.hash == v.hash and all(s.layout is not None for s in cold.version.shards)
    proxy.reset()
    warm = rd.ArrowShards(prefix, filesystem=fs)  # layouts from cache_dir()/layouts
    assert proxy.requests <= 3 * SHARDS + 8 < cold_requests
    ids = np.arange(len(warm))[::-7]
    assert warm.take(ids).equals(rd.ArrowShards(local, unpinned="allow").take(ids))
    # verify="size" does not check the bytes, so it does not remember what it built
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "other"))
    rd.ArrowShards(prefix, filesystem=fs, verify="size")
    assert not (tmp_path / "other" / "layouts").exists()


@pytest.mark.parametrize("fmt", ["arrow", "arrow_stream", "parquet"])
def test_head_requests_per_shard_of_pins_and_opens(remote, fmt, tmp_path, monkeypatch):
    """The HEADs docs/object-storage.md's Opening table counts, per shard: a shard opened only for its
    metadata (a pin's, a cold open's layout build) records no identity, so it sends no HEAD for one
    and leaves the verify's stat to the open that reads (before, one HEAD more per shard in both)."""
    proxy, fs, data = remote
    _, prefix = data[fmt]
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "cache"))
    ipc = fmt != "parquet"  # an IPC shard's format is read from its first bytes (a HEAD and a GET)

    def heads(fn):
        proxy.reset()
        out = fn()
        return out, proxy.counts.get("HEAD", 0)

    # pin: the format (IPC), the metadata's open, the stat giving the ETag; hash="content" opens to hash
    _, pin_etag = heads(lambda: rd.pin(prefix, filesystem=fs, hash="etag"))
    assert pin_etag == (3 if ipc else 2) * SHARDS
    v, pin_content = heads(lambda: rd.pin(prefix, filesystem=fs))
    assert pin_content == (4 if ipc else 3) * SHARDS
    # open: the verify's stat and the open, per shard; the manifest and the directory: 2
    _, pinned = heads(lambda: rd.ArrowShards(prefix, filesystem=fs))
    assert pinned == 2 * SHARDS + 2
    put_manifest(fs, prefix, as_schema_1(v.to_dict()))
    _, cold = heads(lambda: rd.ArrowShards(prefix, filesystem=fs))  # + the layout build's open (+ format)
    assert cold == (4 if ipc else 3) * SHARDS + 2
    src, cached = heads(lambda: rd.ArrowShards(prefix, filesystem=fs))
    assert cached == 2 * SHARDS + 2
    ids = np.arange(len(src))[::-5]  # the identity recorded is the verified one: reads check against it
    assert src.take(ids).equals(rd.ArrowShards(data[fmt][0], unpinned="allow").take(ids))
    rd.pin(prefix, filesystem=fs)  # restore for the other tests


def test_a_layout_that_does_not_match_the_bytes_is_an_integrity_error(remote, tmp_path, monkeypatch):
    proxy, fs, data = remote
    _, prefix = data["arrow"]
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path))
    v = rd.pin(prefix, filesystem=fs)
    d = v.to_dict()
    u = d["shards"][0]["layout"]["units"]
    u[0][1] -= 8  # the first unit's range cut short: still inside the file, in order
    from resumable_data.sources.version import compute_derived_hash
    d["derived_hash"] = compute_derived_hash(d["shards"])
    put_manifest(fs, prefix, d)
    src = rd.ArrowShards(prefix, filesystem=fs)
    with pytest.raises(rd.DatasetIntegrityError, match="record batch 0"):
        src.take([0])
    rd.pin(prefix, filesystem=fs)  # restore for the other tests
