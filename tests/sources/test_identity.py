"""Files that change under a source (issue 30 items 1, 2): the identity recorded at open, carried
by pickles (spawn/forkserver workers), checked around every read.

Shards are written, then their mtime set 10 s into the past, so that a rewrite in the same
timestamp tick as the write (a few ms on Linux) cannot hide a change (a real dataset's files are
not rewritten within milliseconds of being written: docs/data.md states the limit).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd

ROOT = Path(__file__).resolve().parents[2]
FORMATS = ["arrow", "arrow_stream", "parquet"]


def _table(n: int = 2000, offset: int = 0) -> pa.Table:
    return pa.table({"x": pa.array(np.arange(offset, offset + n, dtype=np.int64)),
                     "text": pa.array([f"r{(i + offset) % 10:05d}" for i in range(n)])})


def _aged(paths: list[Path]) -> list[Path]:
    past = time.time_ns() - 10 * 10**9
    for p in paths:
        os.utime(p, ns=(past, past))
    return paths


def _dataset(d: Path, fmt: str, n: int = 2000) -> list[Path]:
    paths = rd.write_arrow_shards(_table(n), d, num_shards=2, rows_per_batch=500, format=fmt)
    rd.pin(d)
    return _aged(paths)


def _same_size_other_values(path: Path, fmt: str) -> bytes:
    """The bytes of ``path`` rewritten with other values in the same layout (same size)."""
    n = 1000
    other = path.parent / "other"
    rd.write_arrow_shards(_table(n, offset=2000), other, num_shards=1, rows_per_batch=500, format=fmt)
    data = next(other.glob("shard-*")).read_bytes()
    assert len(data) == path.stat().st_size
    return data


def test_identity_round_trips():
    from resumable_data.sources.identity import FileIdentity
    i = FileIdentity(10, 123, 4, 5)
    assert FileIdentity.from_dict(i.to_dict()) == i
    assert i.differences(i) == []
    assert "size" in " ".join(i.differences(FileIdentity(11, 123, 4, 5)))
    assert "inode" in " ".join(i.differences(FileIdentity(10, 123, 4, 6)))
    assert "gone" in " ".join(i.differences(None))


@pytest.mark.parametrize("fmt", FORMATS)
def test_pickled_source_refuses_a_file_replaced_at_the_same_size(tmp_path, fmt):
    """Item 1: what a spawn worker does (unpickle, reopen by path) after an atomic replace."""
    paths = _dataset(tmp_path / "d", fmt)
    src = rd.ArrowShards(tmp_path / "d")
    blob = pickle.dumps(src)
    new = _same_size_other_values(paths[1], fmt)
    tmp = paths[1].with_name(".swap")
    tmp.write_bytes(new)
    os.replace(tmp, paths[1])
    again = pickle.loads(blob)  # a worker reports the error with the batch it fetches: at the first read
    assert len(again) == len(src)
    for read in (lambda: again.take([1500]), lambda: again[0], lambda: again.column_lengths("x")):
        with pytest.raises(rd.DatasetIntegrityError, match=r"shard-00001.*changed after.*inode.*fix: restore"):
            read()
    # the running (fork-inherited) source keeps reading the bytes it opened: the pinned ones
    assert src.take([1500, 1999]).column("x").to_pylist() == [1500, 1999]


def test_spawn_worker_refuses_a_replaced_file(tmp_path):
    """The issue's case: a loader built, a shard atomically replaced, spawn workers started."""
    paths = _dataset(tmp_path / "d", "arrow")
    loader = rd.DataLoader(rd.ArrowShards(tmp_path / "d"), batch_size=500, num_workers=1,
                           multiprocessing_context="spawn", seed=0)
    tmp = paths[1].with_name(".swap")
    tmp.write_bytes(_same_size_other_values(paths[1], "arrow"))
    os.replace(tmp, paths[1])
    with pytest.raises(rd.ResumableDataError, match="changed after"):
        for _ in loader:
            pass


@pytest.mark.parametrize("fmt", FORMATS)
def test_in_place_rewrite_at_the_same_size_is_refused(tmp_path, fmt):
    """Item 2: a write into the open file (same inode, same size) is never read as pinned data."""
    paths = _dataset(tmp_path / "d", fmt)
    src = rd.ArrowShards(tmp_path / "d")
    assert src.take([1, 1500]).column("x").to_pylist() == [1, 1500]
    new = _same_size_other_values(paths[1], fmt)
    with open(paths[1], "r+b") as f:  # in place: same inode
        f.write(new)
    # (a Parquet row group read before the write is cached decoded: reading it again is the pinned data)
    if fmt == "parquet":
        assert src.take([1500]).column("x").to_pylist() == [1500]
    for read in (lambda: src.take([1000]), lambda: src[1100],
                 lambda: src.take([999, 1000])):
        with pytest.raises(rd.DatasetIntegrityError, match="shard-00001.*changed after"):
            read()
    assert src.take([3]).column("x").to_pylist() == [3]  # the untouched shard still reads


_TRUNCATE = """
import sys, resumable_data as rd
src = rd.ArrowShards(sys.argv[1])
assert src.take([1500]).column('x').to_pylist() == [1500]
open(sys.argv[2], 'r+b').truncate(100)
try:
    src.take([1000])
except rd.DatasetIntegrityError as exc:
    print('refused', exc)
else:
    print('delivered')
"""


@pytest.mark.parametrize("fmt", FORMATS)
def test_truncated_in_place_is_an_rd_error_not_sigbus(tmp_path, fmt):
    paths = _dataset(tmp_path / "d", fmt)
    env = dict(os.environ, PYTHONPATH=str(ROOT), RD_CACHE_DIR=os.environ.get("RD_CACHE_DIR", str(tmp_path / "c")))
    r = subprocess.run([sys.executable, "-c", _TRUNCATE, str(tmp_path / "d"), str(paths[1])],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])  # -7 was SIGBUS
    assert r.stdout.startswith("refused") and "size" in r.stdout


def test_reading_touches_only_the_shards_it_reads(tmp_path):
    """A change to a shard the read does not touch does not stop the read (per-shard checks)."""
    paths = _dataset(tmp_path / "d", "arrow")
    src = rd.ArrowShards(tmp_path / "d")
    os.utime(paths[1])  # a "write" to shard 1 (mtime now)
    assert src.take([0, 999]).column("x").to_pylist() == [0, 999]
    with pytest.raises(rd.DatasetIntegrityError):
        src.take([1000])


def test_memory_mapped_shards_hold_no_file_descriptors(tmp_path):
    """The identity checks of mapped shards go by name: a dataset of many IPC shards does not run
    into the open-files limit (a Parquet shard holds one descriptor, as before)."""
    rd.write_arrow_shards(_table(600), tmp_path / "d", num_shards=300, format="arrow")
    rd.pin(tmp_path / "d")
    before = len(os.listdir("/proc/self/fd"))
    src = rd.ArrowShards(tmp_path / "d")
    assert src.take([0, 599]).column("x").to_pylist() == [0, 599]
    assert len(os.listdir("/proc/self/fd")) - before < 10


def test_first_changed_at_agrees_with_unchanged_at(tmp_path):
    from resumable_data.sources.identity import first_changed_at, identity_of_stat, unchanged_at, watch_entry

    paths = []
    for k in range(4):
        p = tmp_path / f"f{k}"
        p.write_bytes(b"x" * 10)
        paths.append(str(p))
    ids = [identity_of_stat(os.stat(p)) for p in paths]
    entries = [watch_entry(p, i) for p, i in zip(paths, ids)]
    assert first_changed_at(entries, [0, 1, 2, 3]) == -1
    os.utime(paths[2], ns=(ids[2].mtime_ns + 10**9, ids[2].mtime_ns + 10**9))  # written to: mtime moves
    Path(paths[3]).write_bytes(b"y" * 3)  # shorter
    os.replace(paths[0], str(tmp_path / "gone"))  # a name that now gives nothing: the mapped inode is safe
    for which in ([0, 1, 2, 3], [3, 2], [0, 1]):
        want = next((k for k in which if not unchanged_at(paths[k], ids[k])), -1)
        assert first_changed_at(entries, which) == want
    assert first_changed_at([None, *entries[1:]], [1, 3]) == 3
