"""Byte flips of small compressed Arrow IPC shards, read through ``take`` and ``rd.DataLoader``.

Shards (12 rows of a string, a ``list<int32>`` and an int64 column, 4-row record batches):
``feather_lz4`` (``pyarrow.feather.write_feather``'s default: an LZ4 IPC file), ``zstd_stream``
(a ZSTD IPC stream) and ``mixed_stream`` (a stream whose first record batch is LZ4-compressed and
whose later ones are not: each stream message names its own codec, so such files exist; pyarrow's
writers take one ``IpcWriteOptions`` per file, the splice is built message by message). Every case
replaces one byte (XOR 0xFF, or a random value) and is read in a worker subprocess
(``_compressed_flip_worker.py``, which lists the readers: pinned clean at the default settings,
``verify="size"`` by ``take`` and by three loaders, never pinned with ``unpinned="allow"``, and
auto-pinned). A worker that dies is restarted after the case it died on, recorded as ``crash``; no
line in ``CASE_TIMEOUT_S``: ``hang``.

Required: no crash, hang or non-rd exception anywhere, and no ``wrong`` record at the default
settings over a clean pin. The fast variant draws ``RD_RELIABILITY_SCALE`` offsets per shard
and kind (half in the first 300 and last 400 bytes, where the metadata lives); the ``slow`` one
replaces every byte both ways.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pytest

from tests.reliability._counts import SCALE, count
from tests.sources._case_runner import fan_out, run_cases

WORKER = Path(__file__).with_name("_compressed_flip_worker.py")
PROCS = 2
CASE_TIMEOUT_S = 60.0
SHARDS = ("feather_lz4", "zstd_stream", "mixed_stream")


def table() -> pa.Table:
    return pa.table({
        "text": pa.array(["a", "héllo", "", "xyz", "rd", "ünï", "q", "end!", "s", "t", "u", "v"]),
        "tokens": pa.array([[1, 2], [], [3], [4, 5, 6], [7], [8, 9], [], [10], [11], [12, 13], [14], []],
                           type=pa.list_(pa.int32())),
        "id": pa.array(range(12), type=pa.int64()),
    })


def stream_messages(t: pa.Table, codec: str | None, rows: int) -> list:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema, options=pa.ipc.IpcWriteOptions(compression=codec)) as w:
        for b in t.to_batches(max_chunksize=rows):
            w.write_batch(b)
    reader = pa.ipc.MessageReader.open_stream(sink.getvalue())
    out = []
    while True:
        try:
            out.append(reader.read_next_message())
        except StopIteration:
            return out


def codec_stream(path: Path, t: pa.Table, rows: int, first: int, first_codec: str | None, rest_codec: str | None) -> Path:
    """A stream of ``rows``-row record batches: the first ``first`` with ``first_codec`` bodies, the
    rest with ``rest_codec`` (None: uncompressed), written message by message (pyarrow's writers
    take one codec per stream)."""
    head = stream_messages(t.slice(0, first * rows), first_codec, rows)
    tail = stream_messages(t.slice(first * rows), rest_codec, rows)
    sink = pa.BufferOutputStream()
    for m in head + tail[1:]:
        m.serialize_to(sink)
    sink.write(b"\xff\xff\xff\xff\x00\x00\x00\x00")  # end of stream
    path.write_bytes(sink.getvalue().to_pybytes())
    return path


def mixed_stream(path: Path, t: pa.Table, rows: int, compressed: int = 1) -> Path:
    """A stream whose first ``compressed`` record batches are LZ4 bodies, the rest uncompressed."""
    return codec_stream(path, t, rows, compressed, "lz4", None)


def write_shard(kind: str, path: Path) -> Path:
    t = table()
    if kind == "feather_lz4":
        feather.write_feather(t, path, chunksize=4)  # LZ4, the default
    elif kind == "zstd_stream":
        with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(
                f, t.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
            for b in t.to_batches(max_chunksize=4):
                w.write_batch(b)
    else:
        mixed_stream(path, t, 4)
    return path


def _run_slice(clean: Path, work: Path, cases: list) -> list:
    return run_cases(
        WORKER, work, cases,
        lambda run_dir, todo: {"clean": str(clean), "name": "shard.arrow", "work": str(run_dir), "cases": todo},
        lambda case, what: [*case, {"all": what}],
        case_timeout_s=CASE_TIMEOUT_S, startup_s=60.0 + CASE_TIMEOUT_S,  # start-up (torch), the clean reads
    )


def cases_for(kind: str, size: int, per: int | None) -> list:
    rng = np.random.default_rng(sum(map(ord, kind)))
    if per is None:
        offsets = list(range(size))
    else:
        head = rng.integers(0, min(300, size), per // 2)
        rest = rng.integers(0, size, per - per // 2)
        tail = rng.integers(max(0, size - 400), size, per // 2)
        offsets = sorted({int(x) for x in np.concatenate([head, rest, tail])})
    return offsets


def sweep(kind: str, tmp_path: Path, per: int | None) -> list:
    clean = write_shard(kind, tmp_path / "clean.arrow")
    data = clean.read_bytes()
    rng = np.random.default_rng(len(data))
    cases = []
    for offset in cases_for(kind, len(data), per):
        cases.append([offset, data[offset] ^ 0xFF])
        value = int(rng.integers(0, 256))
        if value != data[offset]:
            cases.append([offset, value])
    return fan_out(cases, PROCS, lambda k, part: _run_slice(clean, tmp_path / f"w{k}", part))


def check_and_count(kind: str, got: list) -> None:
    by = Counter((reader, o.split(":")[0]) for _, _, out in got for reader, o in out.items())
    print(f"\n{kind}: {len(got)} cases: " + ", ".join(f"{r}/{o}={n}" for (r, o), n in sorted(by.items())))
    bad = [r for r in got if any(o.split(":")[0] in ("crash", "hang", "non-rd", "wrong") for o in r[2].values())]
    assert not bad, json.dumps(bad[:10])
    count(f"compressed_flips:{kind}", len(got))
    for (reader, outcome), n in by.items():
        count(f"compressed_flips:{kind}:{reader}:{outcome}", n)


def test_the_shards_are_what_they_claim(tmp_path):
    for kind in SHARDS:
        p = write_shard(kind, tmp_path / f"{kind}.arrow")
        data = p.read_bytes()
        reader = pa.ipc.open_file(data) if data[:6] == b"ARROW1" else pa.ipc.open_stream(data)
        assert reader.read_all().equals(table())
        assert (data[:6] == b"ARROW1") == (kind == "feather_lz4")
    # the mixed stream: its first batch's bodies are compressed (not views of the bytes), the rest are
    buf = pa.py_buffer((tmp_path / "mixed_stream.arrow").read_bytes())
    lo, hi = buf.address, buf.address + buf.size
    inside = [all(lo <= b.address < hi for c in batch.columns for b in c.buffers() if b is not None and b.size)
              for batch in pa.ipc.open_stream(buf)]
    assert inside == [False, True, True]


@pytest.mark.parametrize("kind", SHARDS)
def test_compressed_byte_flips_are_refused_or_harmless(tmp_path, kind):
    check_and_count(kind, sweep(kind, tmp_path, per=SCALE))


@pytest.mark.slow
@pytest.mark.skipif(SCALE < 20, reason="every byte through 7 readers takes minutes: `make test-long` (scale 20)")
@pytest.mark.parametrize("kind", SHARDS)
def test_compressed_byte_flips_every_byte(tmp_path, kind):
    check_and_count(kind, sweep(kind, tmp_path, per=None))
