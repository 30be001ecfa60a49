"""``parquet_footer``: a footer whose column chunk metadata C++ refuses is an rd error, never an
interpreter killed by ``RowGroupMetaData.column(i)`` (a C++ exception through a binding that
cannot raise: ``std::terminate``, SIGABRT).

A one-column Parquet file (``list<int32>`` with nulls: level histograms of 2 and 4 entries in its
size statistics) gets every bit 0 of its footer flipped, one at a time; each is opened the way a
never-pinned folder is (``unpinned="allow"``, and the pin's metadata read, ``read_shard_meta``) in
one subprocess, whose death is the failure. Some flips must be refused by this check (the test
reaches it), none may crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resumable_data.sources.parquet_footer import _walk, check_column_chunks, open_parquet

ROOT = Path(__file__).resolve().parents[2]

_FLIPS = textwrap.dedent(
    """
    import json, os, sys
    import resumable_data as rd
    from resumable_data.sources.files import read_shard_meta

    clean, first, last, work = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    data = open(clean, "rb").read()
    target = os.path.join(work, "a.parquet")
    out = {"refused": 0, "histogram": 0, "ok": 0, "other": []}
    for at in range(first, last):
        damaged = bytearray(data)
        damaged[at] ^= 0x01
        with open(target, "wb") as f:
            f.write(damaged)
        for reader in (lambda: rd.ArrowShards(target, unpinned="allow").take(list(range(4))), lambda: read_shard_meta(target)):
            try:
                reader()
                out["ok"] += 1
            except rd.ResumableDataError as exc:
                out["refused"] += 1
                out["histogram"] += "level histogram" in str(exc)
            except BaseException as exc:
                out["other"].append(f"{at}: {type(exc).__name__}: {exc}"[:200])
    print(json.dumps(out))
    """
)


def _write(path: Path) -> int:
    """A one-column file; returns the footer's first byte."""
    t = pa.table({"items": pa.array([[1, None], None, [], [3]], type=pa.list_(pa.int32()))})
    pq.write_table(t, path, compression="none", write_statistics=False)
    return path.stat().st_size - 8 - pq.ParquetFile(path).metadata.serialized_size


def test_every_footer_bit_flip_is_refused_or_read_never_a_crash(tmp_path):
    clean = tmp_path / "clean.parquet"
    first = _write(clean)
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               RD_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", _FLIPS, str(clean), str(first), str(clean.stat().st_size - 8),
                          str(work)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, (out.returncode, out.stderr[-1500:])  # -6: std::terminate (SIGABRT)
    got = json.loads(out.stdout)
    assert got["other"] == []
    assert got["histogram"] > 0 and got["ok"] > 0  # the check was reached, and harmless flips still read


def test_a_clean_footer_passes_and_a_truncated_one_is_refused(tmp_path):
    path = tmp_path / "a.parquet"
    first = _write(path)
    raw = path.read_bytes()
    footer = raw[first:-8]
    pf = open_parquet(pa.OSFile(str(path)))
    assert pf.metadata.serialized_size == len(footer) and pf.read_row_group(0).num_rows == 4
    check_column_chunks(pf.metadata, footer)  # nothing to refuse
    data = np.frombuffer(footer, dtype=np.uint8)
    sizes = np.full((1, 1, 3), -1, dtype=np.int64)
    assert _walk(data, sizes, np.zeros(1, dtype=np.int64)) and sizes[0, 0, :2].tolist() == [2, 4]
    for cut in range(len(data)):  # every prefix ends inside the struct
        assert not _walk(data[:cut], np.full((1, 1, 3), -1, dtype=np.int64), np.zeros(1, dtype=np.int64))
    with pytest.raises(ValueError, match="not a Parquet file"):
        open_parquet(pa.BufferReader(raw[:-1]))
