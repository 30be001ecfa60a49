"""Every single-byte flip of a small IPC file (plain and zstd-compressed), IPC stream and Parquet
shard, and of IPC and Parquet read through a ``pyarrow.fs`` filesystem (the remote store's path) (issue 13).

Each shard has a string, a list<int32> and an int64 column in 3 record batches (row groups). Every
byte is flipped (XOR 0xFF; the plain IPC file also XOR 0x01) and the damaged shard is read in a subprocess (8 workers,
each a slice of the cases, one JSON line per case), at the default settings and at
``verify="size"`` (structural validation alone). Per case: no crash (a worker that dies is
restarted after the case it died on, which is recorded as a crash), no hang (10 s per case), no
non-rd exception, and at the default settings never a row that differs from the clean file's.
At ``verify="size"`` a flip that keeps the file well-formed (a changed int value) may deliver
different rows: that is the content check's job, and it is the default.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.reliability._counts import count
from tests.sources._case_runner import fan_out, run_cases

WORKER = Path(__file__).with_name("_byte_flip_worker.py")
WORKERS = 8
CASE_TIMEOUT_S = 10.0


def _table() -> pa.Table:
    return pa.table({
        "text": pa.array(["a", "héllo", "", "xyz", "rd", "ünï", "q", "end!", "s", "t", "u", "v"]),
        "tokens": pa.array([[1, 2], [], [3], [4, 5, 6], [7], [8, 9], [], [10], [11], [12, 13], [14],
                            []], type=pa.list_(pa.int32())),
        "id": pa.array(range(12), type=pa.int64()),
    })


def _write(path: Path, fmt: str) -> Path:
    t = _table()
    batches = t.to_batches(max_chunksize=4)
    if fmt == "parquet":
        pq.write_table(t, path, row_group_size=4)
    else:
        opener = pa.ipc.new_stream if fmt == "ipc_stream" else pa.ipc.new_file
        options = pa.ipc.IpcWriteOptions(compression="zstd" if fmt == "ipc_file_zstd" else None)
        with pa.OSFile(str(path), "wb") as f, opener(f, t.schema, options=options) as w:
            for b in batches:
                w.write_batch(b)
    return path


def _run_slice(clean: Path, name: str, work: Path, cases: list, via_filesystem: bool = False) -> list:
    """Results for ``cases``; a dead or hung worker is restarted after the case it stopped on."""
    return run_cases(
        WORKER, work, cases,
        lambda run_dir, todo: {"clean": str(clean), "name": name, "work": str(run_dir), "cases": todo,
                               "via_filesystem": via_filesystem},
        lambda case, what: (case[0], case[1], what, what),
        case_timeout_s=CASE_TIMEOUT_S, startup_s=60.0,  # start-up and pinning, then CASE_TIMEOUT_S per case
        parse=lambda line: tuple(json.loads(line)),
    )


#: (shard format, read through a pyarrow.fs filesystem (the remote store's code path), XOR masks):
#: every variant but the plain IPC file flips each byte once (0xFF) to keep `make test` short
SWEEPS = {
    "ipc_file": ("ipc_file", False, (0xFF, 0x01)),
    "ipc_stream": ("ipc_stream", False, (0xFF,)),
    "parquet": ("parquet", False, (0xFF,)),
    "ipc_file_zstd": ("ipc_file_zstd", False, (0xFF,)),
    "ipc_file_via_filesystem": ("ipc_file", True, (0xFF,)),
    "parquet_via_filesystem": ("parquet", True, (0xFF,)),
}


@pytest.mark.parametrize("sweep", list(SWEEPS))
def test_every_byte_flip_is_refused_or_harmless(tmp_path, sweep):
    fmt, via_filesystem, xors = SWEEPS[sweep]
    name = "shard.parquet" if fmt == "parquet" else "shard.arrow"
    clean = _write(tmp_path / f"clean-{name}", fmt)
    size = clean.stat().st_size
    assert 300 < size < 8192
    cases = [(i, x) for x in xors for i in range(size)]
    got = fan_out(cases, WORKERS, lambda k, part: _run_slice(clean, name, tmp_path / f"w{k}", part, via_filesystem))
    default = Counter(r[2].split(":")[0] for r in got)
    structural = Counter(r[3].split(":")[0] for r in got)
    print(f"\n{sweep}: {size} bytes, {len(cases)} cases; default: {dict(default)}; "
          f"verify='size': {dict(structural)}")
    bad = [r for r in got if r[2] not in ("refused", "identical") or r[3] in ("hang",)
           or r[3].startswith(("crash", "non-rd"))]
    assert not bad, bad[:20]
    assert default["wrong"] == 0
    count(f"byte_flips_{sweep}", len(cases))
    count(f"byte_flips_{sweep}_refused", default["refused"])
    count(f"byte_flips_{sweep}_wrong_at_size", structural["wrong"])
