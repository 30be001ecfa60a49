"""A store that answers wrongly (moto's S3 server behind ``tests.sources._hostile_store.HostileProxy``):
a ranged GET answered with a shorter body, an object gone or forbidden mid-run, a refused range.
Each is an rd error naming the object, never a raw ``OSError`` and never a unit padded with bytes the
store did not send (pyarrow's S3 file reports the length asked for whatever the body held)."""

from __future__ import annotations

import numpy as np
import pytest

import resumable_data as rd
from resumable_data.sources import exact_reads

pytest.importorskip("moto.server")
from tests.sources._hostile_store import Answer, HostileProxy  # noqa: E402
from tests.sources.conftest import make_table, remote_copies, s3_client, upload  # noqa: E402

N = 400
FAST = rd.Retries(attempts=2, base_delay=0.01, max_delay=0.02)
FORMATS = ("arrow", "arrow_stream", "parquet")


@pytest.fixture(scope="module")
def data(endpoint, tmp_path_factory):
    """{format: (local dir, prefix)}: 20 units of 20 rows in 4 shards (strings included), pinned on S3."""
    return remote_copies(endpoint, make_table(N, strings=True), tmp_path_factory, "hostile", FORMATS)


@pytest.fixture
def hostile(endpoint):
    p = HostileProxy(endpoint)
    yield p
    p.close()


def _ranged(rewrite):
    def hook(req, ans):
        return rewrite(req, ans) if req.method == "GET" and req.range is not None else ans

    return hook


def _short(keep):
    def rewrite(req, ans):
        ans.body = ans.body[: keep(len(ans.body))]
        return ans

    return _ranged(rewrite)


def _error(status, code):
    body = f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>m</Message></Error>".encode()
    return lambda req, ans: Answer(status, "X", [("Content-Type", "application/xml")], body)


SHORT = {
    "one byte": _short(lambda n: n - 1),  # IPC: the last byte is padding, the batch decodes unchanged
    "eight bytes": _short(lambda n: n - 8),  # IPC: a string column's tail, still valid UTF-8
    "half": _short(lambda n: n // 2),
    "empty": _short(lambda n: 0),
}


@pytest.fixture(scope="module")
def etag_pinned(endpoint, data):
    """{format: prefix}: the shards of ``data`` under another prefix, pinned with ``hash="etag"``: no unit
    digests, so every unit read is a HEAD (size and ETag) and a GET through rd's exact reader."""
    out = {}
    for fmt in FORMATS:
        local, _ = data[fmt]
        prefix = f"hostile-etag-{fmt.replace('_', '-')}/data"
        upload(s3_client(endpoint), local, prefix)
        rd.pin(prefix, filesystem=s3_client(endpoint), hash="etag")
        out[fmt] = prefix
    return out


@pytest.mark.parametrize("digests", [False, True])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", list(SHORT))
def test_a_short_body_is_refused_never_padded(data, etag_pinned, hostile, fmt, case, digests):
    """Without unit digests a short body is refused. With them (hash="content") a unit is one GET through
    the handle opened with the shard, whose buffer pyarrow leaves as it was past a short body: refused
    unless what the buffer held hashes to the unit's pinned digest, i.e. is the pinned bytes (an earlier
    read of the same unit in this process), so the rows are the pinned rows either way."""
    local, prefix = data[fmt]
    ids = np.array([5, 130, 390])
    ref = rd.ArrowShards(local, unpinned="allow").take(ids)
    src = rd.ArrowShards(prefix if digests else etag_pinned[fmt], filesystem=s3_client(hostile.endpoint), retries=FAST)
    assert all((s.layout.digests is not None) == digests for s in src.version.shards)
    hostile.hook = SHORT[case]
    if digests:
        try:
            assert src.take(ids).equals(ref), "a short body delivered other rows"
        except rd.DatasetIntegrityError as exc:
            assert "shorter body" in str(exc)  # the mismatch read again through the exact reader
    else:
        with pytest.raises(rd.DatasetIntegrityError, match="short(er)? body"):
            src.take(ids)
    hostile.hook = None
    assert src.take(ids).equals(ref)  # nothing was kept from the refused reads


CASES = {  # what the store answers every ranged GET (or HEAD) with -> the rd error expected
    "GET 404": (_ranged(_error(404, "NoSuchKey")), rd.DatasetIntegrityError, "gone"),
    "GET 403": (_ranged(_error(403, "AccessDenied")), rd.StoreUnavailableError, "permissions"),
    "GET 400": (_ranged(_error(400, "InvalidRequest")), rd.StoreUnavailableError, "permissions"),
    "GET 416": (_ranged(_error(416, "InvalidRange")), rd.DatasetIntegrityError, "byte range"),
    "HEAD 404": (lambda req, ans: _error(404, "NoSuchKey")(req, ans) if req.method == "HEAD" else ans,
                 rd.DatasetIntegrityError, "gone"),
    "HEAD 403": (lambda req, ans: _error(403, "AccessDenied")(req, ans) if req.method == "HEAD" else ans,
                 rd.StoreUnavailableError, "permissions"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_read_is_an_rd_error_naming_the_object(data, etag_pinned, hostile, case):
    hook, cls, words = CASES[case]
    # reads of units with pinned digests send no HEAD (test below): the HEAD cases need a version without
    prefix = etag_pinned["arrow"] if case.startswith("HEAD") else data["arrow"][1]
    src = rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST)
    hostile.hook = hook
    with pytest.raises(cls, match=words) as exc:
        src.take([0, 390])
    assert "shard-0000" in str(exc.value) and "fix:" in str(exc.value)
    hostile.hook = None
    assert src.take([0, 390]).column("id").to_pylist() == [0, 390]


@pytest.mark.parametrize("case", ["HEAD 404", "HEAD 403"])
def test_reads_with_unit_digests_send_no_head(data, hostile, case):
    """With pinned unit digests (hash="content") a unit read is one GET checked against its digest:
    a store refusing every HEAD after the open changes nothing."""
    local, prefix = data["arrow"]
    src = rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST)
    hostile.hook = CASES[case][0]
    hostile.reset()
    assert src.take(np.arange(N)).equals(rd.ArrowShards(local, unpinned="allow").take(np.arange(N)))
    assert set(hostile.counts) == {"GET"} and hostile.counts["GET"] > 0


def test_an_object_deleted_mid_run_is_an_integrity_error(endpoint, tmp_path):
    fs = s3_client(endpoint)
    d = tmp_path / "d"
    rd.write_arrow_shards(make_table(100), d, num_shards=2, rows_per_batch=10)
    upload(fs, d, "deleted-mid-run/data")
    rd.pin("deleted-mid-run/data", filesystem=fs)
    src = rd.ArrowShards("deleted-mid-run/data", filesystem=fs, retries=FAST)
    assert src.take([0]).column("id").to_pylist() == [0]
    fs.delete_file("deleted-mid-run/data/shard-00001.arrow")
    with pytest.raises(rd.DatasetIntegrityError, match="gone"):
        src.take([99])


class _Body:
    """A file whose reads write only the first ``sent`` bytes asked for (what pyarrow's S3 file does
    with a short body) and report the whole length."""

    def __init__(self, data: bytes, sent: int) -> None:
        self.data, self.sent, self.pos, self.reads = data, sent, 0, 0

    def seek(self, pos: int) -> None:
        self.pos = pos

    def readinto(self, buf: bytearray) -> int:
        self.reads += 1
        chunk = self.data[self.pos : self.pos + min(len(buf), self.sent)]
        buf[: len(chunk)] = chunk
        return len(buf)


@pytest.mark.parametrize("last", [0x00, 0xA5, 0x5A, 0xFF])
def test_read_exact_tells_a_short_body_from_bytes_that_end_like_the_fill(last):
    data = bytes(range(200)) + bytes([last])
    whole = _Body(data, len(data))
    assert exact_reads.read_exact(whole, 0, len(data), rd.Retries()) == data
    assert whole.reads == (2 if last == 0xA5 else 1)  # a second read only when the last byte is the first fill
    for sent in (0, 1, 100, len(data) - 1):
        assert exact_reads.read_exact(_Body(data, sent), 0, len(data), rd.Retries()) is None
    assert exact_reads.read_exact(_Body(data, 0), 5, 0, rd.Retries()) == b""


# -- opening: the manifest and each shard's metadata through the same hostile store ---------------
def _on(target, method, rewrite):
    def hook(req, ans):
        return rewrite(req, ans) if target in req.path and req.method == method else ans

    return hook


def _cut_short(keep):
    def rewrite(req, ans):
        ans.body = ans.body[: keep(len(ans.body))]
        return ans

    return rewrite


OPENING = {  # what the store answers -> the rd error opening raises
    "manifest GET 404": (_on(".rd-manifest.json", "GET", _error(404, "NoSuchKey")), rd.DatasetIntegrityError),
    "manifest GET 403": (_on(".rd-manifest.json", "GET", _error(403, "AccessDenied")), rd.StoreUnavailableError),
    "manifest HEAD 403": (_on(".rd-manifest.json", "HEAD", _error(403, "AccessDenied")), rd.StoreUnavailableError),
    # (a short manifest was parsed with the reader's buffer for its tail: "not valid JSON, re-create the
    # manifest with rd.pin", a wrong diagnosis whose fix re-pins over whatever the objects hold now)
    "manifest GET short by 1": (_on(".rd-manifest.json", "GET", _cut_short(lambda n: n - 1)), rd.DatasetIntegrityError),
    "manifest GET short by half": (_on(".rd-manifest.json", "GET", _cut_short(lambda n: n // 2)),
                                   rd.DatasetIntegrityError),
    "shard HEAD 403": (_on("shard-00001", "HEAD", _error(403, "AccessDenied")), rd.StoreUnavailableError),
    "shard metadata GET 403": (_on("shard-00001", "GET", _error(403, "AccessDenied")), rd.StoreUnavailableError),
    "shard metadata short by 1": (_on("shard-00001", "GET", _cut_short(lambda n: n - 1)), rd.DatasetIntegrityError),
    "shard metadata short by half": (_on("shard-00001", "GET", _cut_short(lambda n: n // 2)), rd.DatasetIntegrityError),
}


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
@pytest.mark.parametrize("case", list(OPENING))
def test_opening_through_a_hostile_store_is_an_rd_error(data, hostile, fmt, case):
    """Reads at open (the manifest, a shard's HEAD, an IPC schema message, a Parquet footer): a
    refused request is an rd error, and a short body is refused (it was padded with whatever the
    buffer held, which could be an earlier read of the same bytes: a short footer read opened)."""
    hook, cls = OPENING[case]
    _, prefix = data[fmt]
    hostile.hook = hook
    with pytest.raises(cls) as exc:
        rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST)
    assert "fix:" in str(exc.value) and prefix.split("/")[0] in str(exc.value)
    if "short" in case:
        assert "shorter body" in str(exc.value) and "re-create the manifest" not in str(exc.value)
    hostile.hook = None
    assert len(rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST)) == N


def _large(rewrite):
    """``rewrite`` for GETs of 1 KiB or more (the footer and tail reads): pyarrow reports an error body
    longer than a small read asked for as a failed flush, retried as transient, not as its status."""
    return lambda req, ans: rewrite(req, ans) if len(ans.body) >= 1024 else ans


PINNING = {  # what the store answers while rd.pin reads a shard's metadata -> the rd error, its words
    "shard HEAD 403": (_on("shard-00001", "HEAD", _error(403, "AccessDenied")), rd.StoreUnavailableError, "permissions"),
    "shard HEAD 404": (_on("shard-00001", "HEAD", _error(404, "NoSuchKey")), rd.DatasetIntegrityError, "gone"),
    "shard GET 403": (_on("shard-00001", "GET", _large(_error(403, "AccessDenied"))), rd.StoreUnavailableError,
                      "permissions"),
    "shard GET 404": (_on("shard-00001", "GET", _large(_error(404, "NoSuchKey"))), rd.DatasetIntegrityError, "gone"),
    "shard GET short by 1": (_on("shard-00001", "GET", _cut_short(lambda n: n - 1)), rd.DatasetIntegrityError,
                             "shorter body"),
}


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
@pytest.mark.parametrize("case", list(PINNING))
def test_pinning_through_a_hostile_store_never_blames_the_file(data, hostile, fmt, case):
    """rd.pin (and the auto-pin of an unpinned prefix) reading a shard's metadata through a store that
    refuses a request or cuts a body short: the store's error, naming the object, never the
    "not a valid shard" ConfigError whose fix (remove or rewrite the file) would delete a good shard
    (before: every case here, raw OSError or ValueError wrapped as a damaged file)."""
    hook, cls, words = PINNING[case]
    _, prefix = data[fmt]
    hostile.hook = hook
    with pytest.raises(cls, match=words) as exc:
        rd.pin(prefix, filesystem=s3_client(hostile.endpoint), save=False)
    assert "shard-00001" in str(exc.value) and "remove or rewrite" not in str(exc.value)
    assert "not a valid shard" not in str(exc.value)
    hostile.hook = None
    assert sum(s.num_rows for s in rd.pin(prefix, filesystem=s3_client(hostile.endpoint), save=False).shards) == N


def test_a_refused_open_after_the_stat_is_the_stores_error(data, hostile):
    """The HEAD of the open (after the stat's HEAD was answered) refused: the store's error, not a
    damaged shard (before: "damaged or not a valid shard", fix: re-download the file)."""
    _, prefix = data["arrow"]
    heads = []

    def hook(req, ans):
        if req.method == "HEAD" and "shard-00002" in req.path:
            heads.append(req.path)
            if len(heads) > 1:
                return _error(403, "AccessDenied")(req, ans)
        return ans

    hostile.hook = hook
    with pytest.raises(rd.StoreUnavailableError, match="permissions") as exc:
        rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST)
    assert "shard-00002" in str(exc.value) and "not a valid shard" not in str(exc.value)


# -- hashing (rd.pin, verify="content") through a store that cuts bodies short ---------------------
def _short_whole_reads(req, ans):
    """Cut the reads that start at byte 0 and are large (the hash's chunks), not the metadata reads."""
    if req.method == "GET" and req.range is not None and req.range[0] == 0 and len(ans.body) > 4096:
        ans.body = ans.body[:-7]
    return ans


@pytest.mark.parametrize("fmt", FORMATS)
def test_hashing_refuses_a_short_body(data, hostile, fmt):
    """A pin (and a verify of the content) hashed a short body together with whatever the reader's
    buffer held: another digest than the object's, recorded as the version (Parquet), or, when the
    buffer still held an earlier read of the same object, the right digest of bytes never sent."""
    local, prefix = data[fmt]
    good = rd.pin(prefix, filesystem=s3_client(hostile.endpoint), save=False)
    assert [s.content_hash for s in good.shards] == [s.content_hash for s in rd.pin(local, save=False).shards]
    hostile.hook = _short_whole_reads
    # (a Parquet shard this small is read whole for its footer too: refused there, before the hash, as
    # the store's short body, not as a damaged file to remove)
    with pytest.raises(rd.DatasetIntegrityError, match="short(er)? body") as exc:
        rd.pin(prefix, filesystem=s3_client(hostile.endpoint), save=False)
    assert "remove or rewrite" not in str(exc.value)
    with pytest.raises(rd.DatasetIntegrityError):
        rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST, verify="content")


@pytest.mark.parametrize("status", [403, 404])
def test_hashing_through_a_store_that_refuses_is_an_rd_error(data, hostile, status):
    """verify="content" (and "cached" where an ETag changed) hashes every byte: a store refusing those
    reads raised the raw OSError out of rd.ArrowShards (pin read the metadata first and was covered)."""
    _, prefix = data["arrow"]
    cls, code = (rd.StoreUnavailableError, "AccessDenied") if status == 403 else (rd.DatasetIntegrityError, "NoSuchKey")
    hostile.hook = _on("shard-00001", "GET", _large(_error(status, code)))
    with pytest.raises(cls) as exc:
        rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST, verify="content")
    assert "shard-00001" in str(exc.value) and "hashing" in str(exc.value) and "fix:" in str(exc.value)
    hostile.hook = None
    assert len(rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST, verify="content")) == N


# -- shards without a layout (dictionaries): pyarrow's own IPC readers, over an exact reader ---------
@pytest.fixture(scope="module")
def dictionary_shards(endpoint, tmp_path_factory):
    import pyarrow as pa

    n = 400
    table = pa.table({"id": pa.array(np.arange(n, dtype=np.int64)), "v": pa.array(np.arange(n, dtype=np.int64) * 7),
                      "d": pa.array([f"c{i % 5}" for i in range(n)]).dictionary_encode()})
    fs = s3_client(endpoint)
    out = {}
    for kind, opener in (("file", pa.ipc.new_file), ("stream", pa.ipc.new_stream)):
        d = tmp_path_factory.mktemp(f"dict-{kind}")
        with opener(str(d / "a.arrow"), table.schema) as w:
            for b in table.to_batches(max_chunksize=100):
                w.write_batch(b)
        prefix = f"hostile-dict-{kind}/data"
        upload(fs, d, prefix)
        rd.pin(prefix, filesystem=fs)
        out[kind] = prefix
    return table, out


@pytest.mark.parametrize("kind", ["file", "stream"])
def test_a_shard_without_layout_refuses_a_short_body(dictionary_shards, hostile, kind):
    table, prefixes = dictionary_shards
    src = rd.ArrowShards(prefixes[kind], filesystem=s3_client(hostile.endpoint), retries=FAST)
    assert src._shards[0].layout is None  # dictionaries: read by pyarrow's reader, not by range
    hostile.hook = _short(lambda n: n - 16)  # the batch bodies' tails: garbage that decoded (file)
    with pytest.raises(rd.DatasetIntegrityError, match="short body"):
        src.take(np.arange(len(table)))
    hostile.hook = None
    assert src.take(np.arange(len(table))).equals(table)


@pytest.mark.parametrize("kind", ["file", "stream"])
def test_a_shard_without_layout_replaced_mid_run_is_refused(endpoint, kind):
    """Read by pyarrow's reader (no layout), a replaced object (same size, new ETag) was read as the
    one opened: no check ran (units read by range have the store's checked read)."""
    import io

    import pyarrow as pa

    n = 1000

    def encode(values):
        t = pa.table({"v": pa.array(values), "d": pa.array([f"c{i % 5}" for i in range(n)]).dictionary_encode()})
        sink = io.BytesIO()
        opener = pa.ipc.new_file if kind == "file" else pa.ipc.new_stream
        with opener(sink, t.schema) as w:
            for b in t.to_batches(max_chunksize=100):
                w.write_batch(b)
        return sink.getvalue()

    good = np.arange(n, dtype=np.int64)
    fs = s3_client(endpoint)
    bucket = f"hostile-dict-replaced-{kind}"
    fs.create_dir(bucket)
    path = f"{bucket}/data/a.arrow"
    with fs.open_output_stream(path) as f:
        f.write(encode(good))
    rd.pin(f"{bucket}/data", filesystem=fs)
    src = rd.ArrowShards(f"{bucket}/data", filesystem=fs, retries=FAST)
    assert src._shards[0].layout is None
    if kind == "file":
        assert src.take([0, 1]).column("v").to_pylist() == [0, 1]
    with fs.open_output_stream(path) as f:
        f.write(encode(good[::-1].copy()))  # the same size, other values
    with pytest.raises(rd.DatasetIntegrityError, match="changed after this source opened it"):
        src.take(np.arange(500, 510))


class _Parts(_Body):
    """A file that answers each read with at most 7 bytes (a filesystem that reads in parts)."""

    def readinto(self, buf) -> int:
        self.reads += 1
        chunk = self.data[self.pos : self.pos + min(len(buf), 7)]
        buf[: len(chunk)] = chunk
        self.pos += len(chunk)
        return len(chunk)


def test_read_exact_gathers_a_read_answered_in_parts():
    data = bytes(range(100))
    assert exact_reads.read_exact(_Parts(data, len(data)), 10, 50, rd.Retries()) == data[10:60]
    assert exact_reads.read_exact(_Parts(data, len(data)), 90, 20, rd.Retries()) is None  # past the end: fewer bytes


# -- a store that ignores Range (or answers with more bytes than asked) --------------------------------
@pytest.mark.parametrize("case", ["whole object, 200", "one byte more"])
def test_an_answer_longer_than_asked_is_refused_and_explained(data, hostile, case):
    """pyarrow's S3 client fails a read whose body is longer than asked ("Failed to flush response
    stream", retried as transient); rd's error names that cause and what to check, and nothing of the
    answer is delivered (a store that ignores Range would otherwise read as "did not answer")."""
    local, prefix = data["parquet"]
    src = rd.ArrowShards(prefix, filesystem=s3_client(hostile.endpoint), retries=FAST)

    def rewrite(req, ans):
        if case == "one byte more":
            ans.body += b"\0"
            return ans
        whole = hostile.fetch("GET", req.path, {})
        return Answer(200, "OK", [(k, v) for k, v in whole.headers if k.lower() != "content-range"], whole.body)

    hostile.hook = _ranged(rewrite)
    with pytest.raises(rd.StoreUnavailableError, match="ignores the Range header") as exc:
        src.take([5, 390])
    assert "shard-0000" in str(exc.value) and "fix:" in str(exc.value)
    hostile.hook = None
    assert src.take([5, 390]).equals(rd.ArrowShards(local, unpinned="allow").take([5, 390]))


# -- a body that trickles (faster than pyarrow's stall limit, slower than any use) ---------------------
@pytest.mark.parametrize("path", ["take", "read ahead", "open"])
def test_a_trickling_body_is_a_store_error_not_a_hang(data, hostile, path):
    """pyarrow's S3 client on Linux fails a body that stalls (no byte for 3 s) but not one that trickles
    (a byte every 0.2 s here): a read took its size over that rate (a 1.7 kB unit at 3 bytes/s ran past
    150 s unanswered at the defaults). Every remote read now has a deadline (a minute plus a second per
    64 KiB by default; rd.Retries(read_deadline=, min_read_rate=) sets it, shortened here): past it the
    read is retried, then rd.StoreUnavailableError names it and the two settings."""
    import time

    slow_link = rd.Retries(attempts=2, base_delay=0.01, max_delay=0.02, read_deadline=0.5, min_read_rate=1 << 40)
    local, prefix = data["parquet"]
    slow = _ranged(lambda req, ans: (setattr(ans, "trickle", 0.2), ans)[1])
    # one client throughout: the reads left behind keep trickling, and pyarrow makes no new S3 client in
    # a process while requests are in flight (its client registry waits for them)
    fs = s3_client(hostile.endpoint)
    src = rd.ArrowShards(prefix, filesystem=fs, retries=slow_link) if path != "open" else None
    hostile.hook = slow
    t0 = time.monotonic()
    with pytest.raises(rd.StoreUnavailableError, match="TimeoutError.*slower than that") as exc:
        if path == "take":
            src.take([5, 390])
        elif path == "read ahead":
            loader = rd.DataLoader(src, batch_size=50, num_workers=0, read_ahead=rd.ReadAhead(lookahead=2))
            try:
                list(loader)
            finally:
                loader.read_ahead.close()
        else:
            rd.ArrowShards(prefix, filesystem=fs, retries=slow_link)
    assert time.monotonic() - t0 < 30
    assert "fix:" in str(exc.value)
    assert "rd.Retries(read_deadline=..., min_read_rate=...) (now 0.5 s plus a second per 1099511627776 bytes)" in str(
        exc.value
    )
    hostile.hook = None
    again = rd.ArrowShards(prefix, filesystem=fs, retries=FAST)
    assert again.take([5, 390]).equals(rd.ArrowShards(local, unpinned="allow").take([5, 390]))


@pytest.mark.parametrize("status, code, cls, words", [
    (403, "AccessDenied", rd.StoreUnavailableError, "permissions"),
    (404, "NoSuchKey", rd.DatasetIntegrityError, "gone"),
], ids=["403", "404"])
@pytest.mark.parametrize("kind", ["file", "stream"])
def test_a_shard_without_layout_refused_mid_read_is_the_stores_error(dictionary_shards, hostile, kind, status, code,
                                                                     cls, words):
    """Read by pyarrow's reader (no layout), a store refusing the reads after the source opened
    (credentials expired, a policy changed) was reported as a damaged shard to remove or rewrite."""
    table, prefixes = dictionary_shards
    src = rd.ArrowShards(prefixes[kind], filesystem=s3_client(hostile.endpoint), retries=FAST)
    assert src._shards[0].layout is None
    hostile.hook = _on("a.arrow", "GET", _large(_error(status, code)))
    with pytest.raises(cls, match=words) as exc:
        src.take(np.arange(len(table)))
    assert "a.arrow" in str(exc.value) and "remove or rewrite" not in str(exc.value)
    assert "not a valid shard" not in str(exc.value)
    hostile.hook = None
    assert src.take(np.arange(len(table))).equals(table)
