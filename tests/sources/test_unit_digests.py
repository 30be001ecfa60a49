"""Per-unit content digests (sources/unit_digests.py): recorded by ``rd.pin`` (hash="content") in the
manifest's layouts (schema 3), checked before every unit read by range is decoded, on the step path and
the read-ahead path, IPC and Parquet. An object replaced after the open by one of the same size (in the
same second, its HEAD even answered as before: the window between a HEAD and its GET) is an rd error and
no wrong sample; a schema-2 manifest (no digests) keeps the HEAD check; forged digests are refused.
moto's S3 server on 127.0.0.1, behind a proxy that counts requests or lies."""

from __future__ import annotations

import copy
import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash

import resumable_data as rd
from resumable_data.sources.files import MANIFEST_NAME
from resumable_data.sources.unit_digests import SpanHasher, is_digest, unit_digest
from resumable_data.sources.version import compute_derived_hash

N = 600
ROWS = 20  # per unit: 30 units in 2 shards
FAST = rd.Retries(attempts=2, base_delay=0.01, max_delay=0.02)


# -- the hasher ------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_span_hasher_gives_each_spans_digest_whatever_the_chunks(seed):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, 5000, dtype=np.uint8).tobytes()
    spans = [(int(o), int(rng.integers(0, 5000 - o + 1))) for o in rng.integers(0, 5000, 40)]
    spans += [(0, 5000), (4999, 1), (5000, 0), (17, 0)]  # whole, last byte, empty at the end, empty inside
    h = SpanHasher(spans)
    h.update(0, data[:10])  # a first attempt, abandoned: a chunk at offset 0 starts over
    pos = 0
    while pos < len(data):
        n = int(rng.integers(1, 700))
        h.update(pos, data[pos : pos + n])
        pos += n
    assert h.digests() == tuple(unit_digest(data[o : o + n]) for o, n in spans)
    assert all(is_digest(d) for d in h.digests())


def test_span_hasher_refuses_a_gap_and_an_uncovered_span():
    h = SpanHasher([(0, 10), (5, 20)])
    h.update(0, b"x" * 8)
    with pytest.raises(ValueError, match="expected the next at 8"):
        h.update(9, b"x")
    with pytest.raises(ValueError, match="runs past"):
        h.digests()


# -- data -------------------------------------------------------------------------------------------
def table(values: np.ndarray, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(np.arange(start, start + len(values), dtype=np.int64)), "v": pa.array(values)})


GOOD = np.arange(N, dtype=np.int64) * 7
BAD = GOOD[::-1].copy()  # the same values in another order: a same-size object, other rows


def encode(fmt: str, t: pa.Table) -> bytes:
    """One shard's bytes, of a size that depends only on the row count (Parquet: plain, uncompressed)."""
    sink = io.BytesIO()
    if fmt == "parquet":
        pq.write_table(t, sink, row_group_size=ROWS, compression="none", use_dictionary=False)
    else:
        opener = pa.ipc.new_file if fmt == "arrow" else pa.ipc.new_stream
        with opener(sink, t.schema) as w:
            w.write_table(t, max_chunksize=ROWS)
    return sink.getvalue()


def shard_names(fmt):
    ext = "parquet" if fmt == "parquet" else "arrow"
    return [f"a.{ext}", f"b.{ext}"]


def write(d, fmt, values=GOOD):
    d.mkdir(parents=True, exist_ok=True)
    for name, start in zip(shard_names(fmt), (0, N // 2)):
        (d / name).write_bytes(encode(fmt, table(values[start : start + N // 2], start)))


FORMATS = ("arrow", "arrow_stream", "parquet")


# -- pinning and the manifest -------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_content_pin_records_each_units_digest_and_size_and_etag_pins_none(tmp_path, fmt):
    write(tmp_path, fmt)
    v = rd.pin(tmp_path)
    d = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert d["schema_version"] == 4
    for s, name in zip(v.shards, shard_names(fmt)):
        data = (tmp_path / name).read_bytes()
        assert s.layout.digests == tuple(unit_digest(data[o : o + n]) for o, n, _ in s.layout.units)
        assert len(s.layout.digests) == N // 2 // ROWS
    assert all(s["layout"]["digests"] for s in d["shards"])
    assert all(s.layout.digests is None for s in rd.pin(tmp_path, hash="size", save=False).shards)
    v.verify("content")  # the digests are those of the bytes


def as_schema_2(d):
    d = copy.deepcopy(d)
    d["schema_version"] = 2
    for s in d["shards"]:
        del s["layout"]["digests"], s["layout"]["meta"]
    d["derived_hash"] = compute_derived_hash(d["shards"])
    return d


def test_a_schema_2_manifest_loads_without_digests_and_keeps_its_hash(tmp_path):
    write(tmp_path, "arrow")
    v = rd.pin(tmp_path)
    d = json.loads((tmp_path / MANIFEST_NAME).read_text())
    old = rd.DatasetVersion.from_dict(as_schema_2(d), root=tmp_path)
    assert old.hash == v.hash and all(s.layout.digests is None and s.layout.units for s in old.shards)
    # the layout keys are the schema's: no digests key in schema 2, one in schema 3
    mixed = as_schema_2(d)
    mixed["schema_version"] = 4
    mixed["derived_hash"] = compute_derived_hash(mixed["shards"])
    with pytest.raises(rd.DatasetIntegrityError, match="digests"):
        rd.DatasetVersion.from_dict(mixed, root=tmp_path)
    late = copy.deepcopy(d)
    late["schema_version"] = 2
    with pytest.raises(rd.DatasetIntegrityError, match="layout"):
        rd.DatasetVersion.from_dict(late, root=tmp_path)


@pytest.mark.parametrize("bad", [["0" * 31], "x", [1], ["g" * 32]])
def test_malformed_digests_are_refused_at_load(tmp_path, bad):
    write(tmp_path, "parquet")
    rd.pin(tmp_path)
    d = json.loads((tmp_path / MANIFEST_NAME).read_text())
    d["shards"][0]["layout"]["digests"] = bad if isinstance(bad, str) else bad * len(d["shards"][0]["layout"]["units"])
    d["derived_hash"] = compute_derived_hash(d["shards"])
    with pytest.raises(rd.DatasetIntegrityError, match="unit digests"):
        rd.DatasetVersion.from_dict(d, root=tmp_path)


def forge_digest(d, shard=0, unit=3):
    """The manifest with one unit digest replaced and its derived_hash recomputed (consistent)."""
    d = copy.deepcopy(d)
    d["shards"][shard]["layout"]["digests"][unit] = xxhash.xxh3_128_hexdigest(b"forged")
    d["derived_hash"] = compute_derived_hash(d["shards"])
    return d


def test_verify_content_lists_forged_unit_digests(tmp_path):
    write(tmp_path, "arrow")
    rd.pin(tmp_path)
    d = json.loads((tmp_path / MANIFEST_NAME).read_text())
    v = rd.DatasetVersion.from_dict(forge_digest(d), root=tmp_path)  # loads: only the bytes can tell
    v.verify("size")
    with pytest.raises(rd.DatasetIntegrityError, match=r"unit digests of record batches \[3\]"):
        v.verify("content")


# -- remote ----------------------------------------------------------------------------------------------
pytest.importorskip("moto.server")
from tests.sources._hostile_store import HostileProxy  # noqa: E402
from tests.sources.conftest import s3_client, setup_client  # noqa: E402


@pytest.fixture
def hostile(endpoint):
    p = HostileProxy(endpoint)
    yield p
    p.close()


_COUNT = iter(range(1 << 30))


def put_dataset(endpoint, tmp_path, fmt, *, schema_2=False):
    """A fresh prefix holding the two shards of ``fmt``, pinned with content hashes (``schema_2``: its
    manifest rewritten as schema 2, without digests); (prefix, local dir, manifest dict)."""
    fs = setup_client(endpoint)
    d = tmp_path / f"local-{fmt}"
    write(d, fmt)
    bucket = f"digests-{next(_COUNT)}"
    fs.create_dir(bucket)
    for name in shard_names(fmt):
        with fs.open_output_stream(f"{bucket}/data/{name}") as f:
            f.write((d / name).read_bytes())
    rd.pin(f"{bucket}/data", filesystem=fs)
    with fs.open_input_stream(f"{bucket}/data/{MANIFEST_NAME}") as f:
        manifest = json.loads(f.read())
    if schema_2:
        manifest = as_schema_2(manifest)
        put_manifest(fs, f"{bucket}/data", manifest)
    return f"{bucket}/data", d, manifest


def put_manifest(fs, prefix, d):
    with fs.open_output_stream(f"{prefix}/{MANIFEST_NAME}") as f:
        f.write(json.dumps(d).encode())


def replace_object(endpoint, prefix, fmt, name=None):
    """The last shard rewritten with the same size and other rows (moto: a new ETag, maybe the same second)."""
    fs = setup_client(endpoint)
    name = name or shard_names(fmt)[-1]
    new = encode(fmt, table(BAD[N // 2 :], N // 2))
    assert len(new) == fs.get_file_info(f"{prefix}/{name}").size  # same size
    with fs.open_output_stream(f"{prefix}/{name}") as f:
        f.write(new)


def same_head(hostile):
    """Answer every HEAD with the first ETag, Last-Modified and length the object had: the store says the
    object was not replaced (what a replacement between a HEAD and its GET looks like to the reader)."""
    first = {}

    def hook(req, ans):
        if req.method == "HEAD" and ans.status == 200:
            for h in ("ETag", "Last-Modified", "Content-Length"):
                first.setdefault((req.path, h), ans.header(h))
                if first[(req.path, h)] is not None:
                    ans.set_header(h, first[(req.path, h)])
        return ans

    return hook


def loader(src, ahead):
    return rd.DataLoader(src, batch_size=16, seed=1, sharding=rd.Sharding(1, 0), num_workers=0, read_ahead=ahead)


AHEAD = rd.ReadAhead(lookahead=4, concurrency=4, unit=rd.ReadUnit.RECORD_BATCH)


def read_all(src, how):
    """(ids, values) of every record, by ``take`` or through a loader reading ahead; the samples
    delivered before an error are kept in ``read_all.got`` (each checked by the caller)."""
    read_all.got = []
    if how == "take":
        t = src.take(np.arange(N))
        read_all.got = list(zip(t.column("id").to_pylist(), t.column("v").to_pylist()))
        return read_all.got
    ld = loader(src, AHEAD)
    try:
        for b in ld:
            read_all.got += list(zip(b["id"].tolist(), b["v"].tolist()))
    finally:
        ld.read_ahead.close()
    return read_all.got


def no_wrong_sample(got):
    assert all(v == GOOD[i] for i, v in got), "a sample of the replaced object was delivered"


HOWS = ("take", "read ahead")


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_reads_with_digests_send_no_head_and_equal_local(endpoint, hostile, tmp_path, fmt, how):
    prefix, local, _ = put_dataset(endpoint, tmp_path, fmt)
    src = rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST)
    assert all(s.layout.digests for s in src.version.shards)
    hostile.log.clear()
    got = read_all(src, how)
    no_wrong_sample(got)
    ids = [i for i, _ in got]
    assert ids == list(range(N)) if how == "take" else len(set(ids)) == len(ids) >= N - 15  # (the tail dropped)
    methods = [m for m, path, _ in hostile.log if "/data/" in path]
    assert "HEAD" not in methods and methods.count("GET") >= 1, methods


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("head", ["honest", "answered as before"])
def test_a_same_size_replacement_after_open_is_refused(endpoint, hostile, tmp_path, fmt, how, head):
    """The object replaced after the open with another of the same size (same second, likely): with
    the HEAD answered as before, this is the window between a HEAD and its GET (what pyarrow's reads
    leave open: the GET gets the new bytes). Refused by the unit digests, no wrong sample."""
    prefix, _, _ = put_dataset(endpoint, tmp_path, fmt)
    if head != "honest":
        hostile.hook = same_head(hostile)  # records each object's first answer (at open), then repeats it
    src = rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST)
    replace_object(endpoint, prefix, fmt)
    with pytest.raises(rd.DatasetIntegrityError) as exc:
        read_all(src, how)
    no_wrong_sample(read_all.got)
    text = str(exc.value)
    assert shard_names(fmt)[-1] in text and "fix:" in text
    if head == "honest":  # the re-check's HEAD sees the new ETag: the object changed
        assert "changed after this source opened it" in text
    else:  # the store swears it is the same object: its bytes are not the pinned ones
        assert "record batch" in text and "unit digest" in text and "restore the object" in text


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_a_schema_2_manifest_keeps_the_head_check(endpoint, hostile, tmp_path, fmt):
    """No digests (pinned before schema 3): every unit read is a HEAD and a GET, as before, and a
    replaced object is refused by its ETag."""
    prefix, _, _ = put_dataset(endpoint, tmp_path, fmt, schema_2=True)
    src = rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST)
    assert all(s.layout is not None and s.layout.digests is None for s in src.version.shards)
    hostile.log.clear()
    assert src.take(np.arange(N)).column("v").to_pylist() == GOOD.tolist()
    methods = [m for m, path, _ in hostile.log if "/data/" in path]
    assert methods.count("HEAD") == methods.count("GET") == N // ROWS, methods
    fresh = rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST)  # nothing decoded yet
    replace_object(endpoint, prefix, fmt)
    with pytest.raises(rd.DatasetIntegrityError, match="changed after this source opened it"):
        fresh.take(np.arange(N))


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_forged_unit_digests_are_refused(endpoint, tmp_path, fmt, how):
    """A manifest whose unit digest was edited and its derived_hash recomputed loads (only the bytes can
    tell), and the read of that unit is refused naming it: never a sample, never a silent pass."""
    prefix, _, manifest = put_dataset(endpoint, tmp_path, fmt)
    put_manifest(setup_client(endpoint), prefix, forge_digest(manifest, shard=1, unit=2))
    src = rd.ArrowShards(prefix, filesystem=s3_client(endpoint), retries=FAST)
    with pytest.raises(rd.DatasetIntegrityError, match="record batch 2 as pinned") as exc:
        read_all(src, how)
    no_wrong_sample(read_all.got)
    assert shard_names(fmt)[1] in str(exc.value) and "re-pin" in str(exc.value)


def test_a_shard_that_shrinks_while_it_is_pinned_is_refused(tmp_path, monkeypatch):
    """The layout is read before the bytes are hashed: a file that has fewer bytes by then leaves a unit
    span unhashed, which is a ConfigError (pin again), never a digest of bytes it never had."""
    from resumable_data import _io

    write(tmp_path, "arrow")
    real = _io.hash_file

    def shrunk(path, progress=None, chunks=None):
        data = open(path, "rb").read()[: 1000]  # (the footer alone would leave every unit whole)
        if chunks is not None:
            chunks(0, data)
        return real(path, progress)

    monkeypatch.setattr(_io, "hash_file", shrunk)
    with pytest.raises(rd.ConfigError, match="stays in place while it is pinned"):
        rd.pin(tmp_path, save=False)


# -- whole shards read ahead (rd.ReadUnit.SHARD) ----------------------------------------------------------
WHOLE = rd.ReadAhead(lookahead=4, concurrency=4, cache_bytes=1 << 20, unit=rd.ReadUnit.SHARD)


def recording(hostile):
    """The (method, range) of every request for a shard object from now on (range None: the whole object)."""
    seen = []

    def hook(req, ans):
        if "/data/" in req.path and MANIFEST_NAME not in req.path:
            seen.append((req.method, req.range))
        return ans

    hostile.hook = hook
    return seen


def read_whole(src):
    """Every sample a loader reading whole shards ahead delivers (kept in ``read_whole.got`` before an error)."""
    read_whole.got = []
    ld = loader(src, WHOLE)
    try:
        for b in ld:
            read_whole.got += list(zip(b["id"].tolist(), b["v"].tolist()))
    finally:
        ld.read_ahead.close()
    return read_whole.got


@pytest.mark.parametrize("fmt", FORMATS)
def test_whole_shards_with_a_pinned_content_hash_are_one_get_each_and_no_head(endpoint, hostile, tmp_path, fmt):
    prefix, _, _ = put_dataset(endpoint, tmp_path, fmt)
    src = rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST)
    seen = recording(hostile)
    got = read_whole(src)
    no_wrong_sample(got)
    assert len({i for i, _ in got}) == len(got) >= N - 15
    sizes = [src.shard_size(j) for j in range(2)]
    assert "HEAD" not in [m for m, _ in seen], seen  # before: a HEAD before each whole-object GET
    assert sorted(r for m, r in seen if r[0] == 0) == sorted((0, n - 1) for n in sizes), seen  # one GET per shard


def test_whole_shards_pinned_by_etag_keep_the_head(endpoint, hostile, tmp_path):
    """No content hash to check the bytes against: the HEAD (size and ETag as at open) stays."""
    prefix, _, _ = put_dataset(endpoint, tmp_path, "arrow")
    rd.pin(prefix, filesystem=setup_client(endpoint), hash="etag")
    src = rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST)
    assert src.version.hash_mode is rd.HashMode.ETAG
    seen = recording(hostile)
    no_wrong_sample(read_whole(src))
    methods = [m for m, _ in seen]
    assert methods.count("HEAD") == methods.count("GET"), seen  # every read, whole shards included, a HEAD first
    assert len([r for m, r in seen if m == "GET" and r[0] == 0]) == 2, seen


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
@pytest.mark.parametrize("head", ["honest", "answered as before"])
def test_a_replaced_whole_shard_is_refused_with_no_wrong_sample(endpoint, hostile, tmp_path, fmt, head):
    """The object replaced after the open by one of the same size (its ETag new, or answered as before):
    the whole-object GET hashes to another content hash, nothing of it is cached, and the step's own
    ranged read refuses it; no sample of the new bytes is delivered."""
    prefix, _, _ = put_dataset(endpoint, tmp_path, fmt)
    if head != "honest":
        hostile.hook = same_head(hostile)
    src = rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST)
    replace_object(endpoint, prefix, fmt)
    with pytest.raises(rd.DatasetIntegrityError) as exc:
        read_whole(src)
    no_wrong_sample(read_whole.got)
    assert shard_names(fmt)[-1] in str(exc.value) and "fix:" in str(exc.value)


def test_fetch_shard_refuses_bytes_that_are_not_the_pinned_content(endpoint, hostile, tmp_path):
    prefix, _, _ = put_dataset(endpoint, tmp_path, "arrow")
    hostile.hook = same_head(hostile)
    src = rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST)
    pinned = src.version.shards[1].content_hash
    replace_object(endpoint, prefix, "arrow")
    hostile.log.clear()
    with pytest.raises(rd.DatasetIntegrityError, match="pinned content hash") as exc:
        src.fetch_shard(1, pinned)
    assert "b.arrow" in str(exc.value) and "restore the object" in str(exc.value)
    assert [m for m, path, _ in hostile.log if "/data/" in path] == ["GET"]


# -- the metadata an open reads (manifest schema 4: the layout's meta digest) -----------------------------
def as_schema_3(d):
    """The manifest as schema 3 wrote it: layouts with unit digests, no metadata digest."""
    d = copy.deepcopy(d)
    d["schema_version"] = 3
    for s in d["shards"]:
        del s["layout"]["meta"]
    d["derived_hash"] = compute_derived_hash(d["shards"])
    return d


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_content_pin_records_the_digest_of_the_metadata_an_open_reads(tmp_path, fmt):
    write(tmp_path, fmt)
    v = rd.pin(tmp_path)
    for s, name in zip(v.shards, shard_names(fmt)):
        data = (tmp_path / name).read_bytes()
        offset, length = s.layout.meta_span
        if fmt == "parquet":  # the footer: Thrift metadata, its length, the magic
            footer = int.from_bytes(data[-8:-4], "little")
            assert (offset, length) == (len(data) - footer - 8, footer + 8)
        else:  # the schema message
            assert (offset, length) == s.layout.schema
        assert s.layout.meta_digest == unit_digest(data[offset : offset + length])
    assert all(s.layout.meta_digest is None for s in rd.pin(tmp_path, hash="size", save=False).shards)
    d = json.loads((tmp_path / MANIFEST_NAME).read_text())
    again = rd.DatasetVersion.from_dict(d, root=tmp_path)
    assert [(s.layout.meta_span, s.layout.meta_digest) for s in again.shards] == [
        (s.layout.meta_span, s.layout.meta_digest) for s in v.shards
    ]
    old = rd.DatasetVersion.from_dict(as_schema_3(d), root=tmp_path)  # schema 3 loads, without it
    assert old.hash == v.hash and all(s.layout.meta_digest is None and s.layout.digests for s in old.shards)
    v.verify("content")


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda m: m.__setitem__(2, "0" * 31), "meta"),
        (lambda m: m.__setitem__(0, m[0] + 1), r"metadata span|\[offset, length\] of non-negative"),
        (lambda m: m.__setitem__(1, 10**9), "meta"),
        (lambda m: m.pop(), "meta"),
    ],
)
@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_malformed_metadata_digests_are_refused_at_load(tmp_path, fmt, edit, match):
    write(tmp_path, fmt)
    rd.pin(tmp_path)
    d = json.loads((tmp_path / MANIFEST_NAME).read_text())
    edit(d["shards"][0]["layout"]["meta"])
    d["derived_hash"] = compute_derived_hash(d["shards"])
    with pytest.raises(rd.DatasetIntegrityError, match=match):
        rd.DatasetVersion.from_dict(d, root=tmp_path)


def forge_meta(d, shard=1):
    d = copy.deepcopy(d)
    d["shards"][shard]["layout"]["meta"][2] = xxhash.xxh3_128_hexdigest(b"forged")
    d["derived_hash"] = compute_derived_hash(d["shards"])
    return d


def test_verify_content_lists_a_forged_metadata_digest(tmp_path):
    write(tmp_path, "parquet")
    rd.pin(tmp_path)
    v = rd.DatasetVersion.from_dict(forge_meta(json.loads((tmp_path / MANIFEST_NAME).read_text())), root=tmp_path)
    with pytest.raises(rd.DatasetIntegrityError, match=r"its metadata span \(meta\)"):
        v.verify("content")


def renamed(fmt):
    """Other bytes of the last shard's size: the column ``v`` renamed ``w`` (IPC: another schema message),
    its values those of BAD (Parquet: other footer statistics)."""
    t = table(BAD[N // 2 :], N // 2).rename_columns(["id", "w"] if fmt != "parquet" else ["id", "v"])
    return encode(fmt, t)


def answer_with(hostile, name, new):
    """Every GET of ``name`` answered with the bytes ``new`` holds at that range, every HEAD honestly with
    the pinned object's: the object replaced between the open's HEAD and its GETs (or a store answering
    with other bytes)."""
    seen = []

    def hook(req, ans):
        if req.path.endswith(f"/data/{name}"):
            seen.append((req.method, req.range))
            if req.method == "GET" and ans.status in (200, 206):
                a, b = req.range if req.range is not None else (0, len(new) - 1)
                ans.body = new[a : (b if b >= 0 else len(new) - 1) + 1]
        return ans

    hostile.hook = hook
    return seen


@pytest.mark.parametrize("fmt", FORMATS)
def test_metadata_replaced_between_the_opens_requests_is_refused_at_open(endpoint, hostile, tmp_path, fmt):
    prefix, _, _ = put_dataset(endpoint, tmp_path, fmt)
    name = shard_names(fmt)[-1]
    new = renamed(fmt)
    assert len(new) == setup_client(endpoint).get_file_info(f"{prefix}/{name}").size
    seen = answer_with(hostile, name, new)
    with pytest.raises(rd.DatasetIntegrityError) as exc:
        rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST)
    text = str(exc.value)
    what = "Parquet footer" if fmt == "parquet" else "IPC schema message"
    assert name in text and f"its {what} as pinned" in text and "pinned metadata digest" in text
    assert "refused before any record was read" in text and "restore the object" in text
    assert [m for m, _ in seen].count("GET") == 1, seen  # the metadata's read, nothing after it


@pytest.mark.parametrize("fmt", ["arrow_stream", "parquet"])
def test_a_schema_3_manifest_opens_trusting_the_metadata_as_before(endpoint, hostile, tmp_path, fmt):
    """No metadata digest (pinned before schema 4): the open reads the metadata unchecked, as it did;
    a Parquet footer of other bytes opens, and the unit digests refuse the records (no wrong sample)."""
    prefix, _, manifest = put_dataset(endpoint, tmp_path, fmt)
    put_manifest(setup_client(endpoint), prefix, as_schema_3(manifest))
    answer_with(hostile, shard_names(fmt)[-1], renamed(fmt))
    if fmt != "parquet":  # a renamed column: refused by the schema comparison, after the message was parsed
        with pytest.raises(rd.DatasetIntegrityError, match="pinned schema"):
            rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST)
        return
    src = rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST)
    assert all(s.layout.meta_digest is None for s in src.version.shards)
    with pytest.raises(rd.DatasetIntegrityError, match="unit digest"):
        read_all(src, "take")
    no_wrong_sample(read_all.got)


@pytest.mark.parametrize("fmt", FORMATS)
def test_checking_the_metadata_costs_no_request(endpoint, hostile, tmp_path, fmt):
    """A schema-4 open sends the requests a schema-3 open sends (the check hashes bytes read anyway)."""
    prefix, _, manifest = put_dataset(endpoint, tmp_path, fmt)
    counts = []
    for d in (as_schema_3(manifest), manifest):
        put_manifest(setup_client(endpoint), prefix, d)
        hostile.counts.clear()
        src = rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST)
        counts.append(dict(hostile.counts))
        assert all((s.layout.meta_digest is None) == (d is not manifest) for s in src.version.shards)
        assert src.take(np.arange(N)).column("v").to_pylist() == GOOD.tolist()
    assert counts[0] == counts[1], counts


def test_a_forged_metadata_digest_fails_every_remote_open_naming_it(endpoint, tmp_path):
    prefix, _, manifest = put_dataset(endpoint, tmp_path, "arrow")
    put_manifest(setup_client(endpoint), prefix, forge_meta(manifest))
    with pytest.raises(rd.DatasetIntegrityError, match=r"b\.arrow.*IPC schema message as pinned.*re-pin"):
        rd.ArrowShards(prefix, filesystem=s3_client(endpoint), retries=FAST)
