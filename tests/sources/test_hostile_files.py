"""Files that are not what they claim to be (issue 30 items 5, 6, 7): FIFOs and devices where rd
expects a shard or a manifest, damaged shards that were never pinned clean, full disks and broken
cache directories. Every case must end in an rd error with a fix that works (or in correct data),
never a hang, a raw exception or a write into the user's folder.

Cases that could hang on a broken build run in a subprocess with a timeout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import resumable_data as rd
from resumable_data.sources.manifests import cached_manifest
from resumable_data.sources.store import LOCAL

ROOT = Path(__file__).resolve().parents[2]
HANG_S = 30


def _run(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter; a hang is a test failure (TimeoutExpired), not a stuck run."""
    full = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=HANG_S, env=full)


_OPEN = """
import sys, resumable_data as rd
try:
    {call}
except rd.ResumableDataError as exc:
    print('rd-error', type(exc).__name__, exc)
except BaseException as exc:
    print('non-rd', type(exc).__name__, exc)
else:
    print('ok')
"""


def _outcome(call: str, *args: str, env: dict | None = None) -> str:
    r = _run(_OPEN.format(call=call), *args, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip()


def _folder(d: Path, fmt: str = "parquet") -> list[Path]:
    t = pa.table({"x": pa.array(np.arange(100, dtype=np.int64))})
    return rd.write_arrow_shards(t, d, num_shards=2, rows_per_batch=50, format=fmt)


# -- item 5: FIFOs, sockets, devices ----------------------------------------------------------------
def test_fifo_as_the_cached_manifest_is_refused_unopened(tmp_path):
    paths = _folder(tmp_path / "d")
    cache = tmp_path / "cache"
    # where the cache keeps this folder's manifest (computed with the same cache dir)
    old = os.environ.get("RD_CACHE_DIR")
    os.environ["RD_CACHE_DIR"] = str(cache)
    try:
        key_path = cached_manifest(LOCAL, LOCAL.resolve(tmp_path / "d"), [p.name for p in paths])
    finally:
        if old is None:
            del os.environ["RD_CACHE_DIR"]
        else:
            os.environ["RD_CACHE_DIR"] = old
    key_path.parent.mkdir(parents=True)
    os.mkfifo(key_path)
    out = _outcome("rd.ArrowShards(sys.argv[1])", str(tmp_path / "d"), env={"RD_CACHE_DIR": str(cache)})
    assert out.startswith("rd-error NotRegularFileError") and "FIFO" in out and str(key_path) in out
    key_path.unlink()  # the fix the message gives: remove it
    assert _outcome("rd.ArrowShards(sys.argv[1])", str(tmp_path / "d"), env={"RD_CACHE_DIR": str(cache)}) == "ok"


@pytest.mark.parametrize("call", ["rd.pin(sys.argv[1])", "rd.ArrowShards(sys.argv[1])",
                                  "rd.pin(sys.argv[1], hash='size')",
                                  "rd.ArrowShards([sys.argv[1] + '/part-1.parquet'])",
                                  "rd.DatasetVersion.load(sys.argv[1]).verify('size')"])
@pytest.mark.parametrize("kind", ["fifo", "symlink_to_fifo", "socket", "char_device"])
def test_non_regular_files_in_a_data_folder_are_refused_unopened(tmp_path, call, kind):
    d = tmp_path / "d"
    _folder(d)
    if "DatasetVersion" in call:
        rd.pin(d)
    target = d / "part-1.parquet"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "symlink_to_fifo":
        os.mkfifo(tmp_path / "pipe")
        target.symlink_to(tmp_path / "pipe")
    elif kind == "socket":
        import socket
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(target))
    else:
        target.symlink_to("/dev/zero")
    out = _outcome(call, str(d), env={"RD_CACHE_DIR": str(tmp_path / "cache")})
    assert out.startswith("rd-error"), out
    # (a listed symlink is resolved to its target, which is no shard file: refused as such)
    assert "part-1.parquet" in out or "pipe" in out or "/dev/zero" in out, out
    assert any(w in out for w in ("regular file", "extra shard file", "existing shard file")), out


def test_a_symlink_to_a_regular_file_elsewhere_is_followed(tmp_path):
    """Hugging Face hub snapshots are symlinks into blobs/: followed, to regular files only."""
    blobs = tmp_path / "blobs"
    paths = _folder(blobs)
    d = tmp_path / "snapshot"
    d.mkdir()
    for p in paths:
        (d / p.name).symlink_to(p)
    src = rd.ArrowShards(d)
    assert src.take([0, 99]).column("x").to_pylist() == [0, 99]
    assert sorted(x.name for x in d.iterdir()) == sorted(p.name for p in paths)  # nothing written there


@pytest.mark.parametrize("name", [".rd-manifest.json", "state.json"])
def test_a_symlink_loop_where_a_manifest_or_state_json_belongs_is_an_rd_error(tmp_path, name):
    """Found by the attack sweep: ELOOP from the manifest's (or HF state.json's) small read escaped as OSError."""
    d = tmp_path / "d"
    _folder(d)
    rd.pin(d)
    (d / name).unlink(missing_ok=True)
    (d / name).symlink_to(name)  # a loop of one
    with pytest.raises(rd.ConfigError, match=r"^path=.*" + re.escape(name) + ".*a readable regular file.*fix: "):
        rd.ArrowShards(d)


# -- item 6: damaged shards that were never pinned clean ---------------------------------------------
def _struct_table() -> pa.Table:
    return pa.table({"name": pa.array([f"n{i}" for i in range(64)]),
                     "s": pa.array([{"kid": i, "tag": f"t{i}"} for i in range(64)])})


@pytest.mark.parametrize("fmt", ["ipc_file", "ipc_stream", "parquet"])
@pytest.mark.parametrize("field", [b"kid", b"name"])
def test_a_field_name_that_is_not_utf8_is_an_rd_error(tmp_path, fmt, field):
    d = tmp_path / "d"
    d.mkdir()
    path = d / ("part.parquet" if fmt == "parquet" else "part.arrow")
    t = _struct_table()
    if fmt == "parquet":
        pq.write_table(t, path, row_group_size=32)
    else:
        opener = pa.ipc.new_file if fmt == "ipc_file" else pa.ipc.new_stream
        with pa.OSFile(str(path), "wb") as f, opener(f, t.schema) as w:
            w.write_table(t, max_chunksize=32)
    data = bytearray(path.read_bytes())
    hits = [m.start() for m in re.finditer(re.escape(field), bytes(data))]
    assert hits
    for at in hits:  # every copy of the name (IPC files keep the schema twice; Parquet in the thrift footer and the ARROW:schema)
        data[at] = 0xFF
    path.write_bytes(bytes(data))
    for call in ("rd.ArrowShards(sys.argv[1])", "rd.pin(sys.argv[1])",
                 "s = rd.ArrowShards(sys.argv[1], unpinned='allow'); s.take([0]); s[1]"):
        out = _outcome(call, str(d), env={"RD_CACHE_DIR": str(tmp_path / "cache")})
        assert out.startswith("rd-error"), (call, out)
        assert "part." in out


def _set_parquet_num_rows(path: Path, claimed: int) -> None:
    """Rewrite the footer so that a row group claims ``claimed`` rows (the thrift i64 is zigzag
    varint encoded; the new value is written at the same encoded length)."""
    md = pq.ParquetFile(path).metadata
    true_rows = md.row_group(0).num_rows

    def varint(n: int) -> bytes:
        z = (n << 1) ^ (n >> 63)
        out = bytearray()
        while True:
            b = z & 0x7F
            z >>= 7
            if z:
                out.append(b | 0x80)
            else:
                out.append(b)
                return bytes(out)
    data = bytearray(path.read_bytes())
    footer_len = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - footer_len
    old, new = varint(true_rows), varint(claimed)
    assert len(old) == len(new)
    footer = bytes(data[start:-8])
    # RowGroup.num_rows is field 3 (i64), short form header 0x16 after total_byte_size (field 2)
    hits = [m.start() for m in re.finditer(re.escape(b"\x16" + old), footer)]
    assert hits, "num_rows not found"
    at = start + hits[-1] + 1
    data[at:at + len(old)] = new
    path.write_bytes(bytes(data))


def test_a_parquet_footer_claiming_other_row_counts_is_an_rd_error(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    t = pa.table({"x": pa.array(np.arange(100, dtype=np.int64)), "t": pa.array([str(i) for i in range(100)])})
    pq.write_table(t, d / "part.parquet", row_group_size=100)
    _set_parquet_num_rows(d / "part.parquet", 99)  # 100 -> 99: same varint length
    env = {"RD_CACHE_DIR": str(tmp_path / "cache")}
    for call in ("rd.ArrowShards(sys.argv[1])", "rd.pin(sys.argv[1])",
                 "s = rd.ArrowShards(sys.argv[1], unpinned='allow'); print(len(s)); s.take([98])"):
        out = _outcome(call, str(d), env=env)
        assert out.startswith("rd-error"), (call, out)
        assert "part.parquet" in out and "rows" in out


# -- item 7: no space, broken cache directories, a bad cached manifest ---------------------------------
_FULL = """
import resource, sys, resumable_data as rd
{pre}
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.RLIM_INFINITY))
try:
    {call}
except rd.ResumableDataError as exc:
    print('rd-error', type(exc).__name__, exc)
except BaseException as exc:
    print('non-rd', type(exc).__name__, exc)
else:
    print('ok')
"""

_HF_PRE = "import datasets; ds = datasets.Dataset.from_dict({'x': list(range(3000))})"
_HF = "rd.ArrowShards.from_hf(ds)"


@pytest.mark.parametrize("call", ["rd.pin(sys.argv[1])", "rd.ArrowShards(sys.argv[1])", _HF])
@pytest.mark.parametrize("room", [0, 100, 300, 3000])
def test_a_full_disk_while_pinning_is_an_rd_error_with_a_working_fix(tmp_path, call, room):
    """A write past ``room`` bytes fails in the kernel (RLIMIT_FSIZE: EFBIG, the same OSError path
    as ENOSPC); the folder's data is untouched and, with room again, the same call works."""
    d = tmp_path / "d"
    _folder(d)
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    env = dict(os.environ, PYTHONPATH=str(ROOT), RD_CACHE_DIR=str(tmp_path / "cache"))
    pre = _HF_PRE if call == _HF else ""
    r = subprocess.run([sys.executable, "-c", _FULL.format(pre=pre, call=call), str(d), str(room)],
                       capture_output=True, text=True, timeout=120, env=env)
    out = r.stdout.strip()
    assert r.returncode == 0, r.stderr[-2000:]
    if room == 0:  # nothing can be written: the manifest (or the shards) cannot be
        assert out.startswith("rd-error ConfigError"), out
    if out != "ok":  # the levels where the write fits end well
        assert out.startswith("rd-error ConfigError") and "free space" in out, out
    assert {p.name: p.read_bytes() for p in d.iterdir() if p.name in before} == before
    r = _run(f"import sys, resumable_data as rd\n{pre}\n{call}", str(d), env={"RD_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.parametrize("broken", ["file", "manifest_is_a_dir"])
def test_a_broken_cache_dir_is_an_rd_error(tmp_path, broken, monkeypatch):
    d = tmp_path / "d"
    paths = _folder(d)
    cache = tmp_path / "cache"
    monkeypatch.setenv("RD_CACHE_DIR", str(cache))
    where = cached_manifest(LOCAL, LOCAL.resolve(d), [p.name for p in paths])
    if broken == "file":
        cache.write_bytes(b"not a directory")
        blocker = cache
    else:
        where.mkdir(parents=True)
        blocker = where
    with pytest.raises(rd.ResumableDataError, match="RD_CACHE_DIR|regular file") as info:
        rd.ArrowShards(d)
    assert str(blocker) in str(info.value)
    if broken == "file":
        assert rd.ArrowShards(d, unpinned="allow").take([5]).column("x").to_pylist() == [5]
        blocker.unlink()
    else:
        blocker.rmdir()  # the fix the message gives: remove it
    assert rd.ArrowShards(d).take([5]).column("x").to_pylist() == [5]


def test_an_empty_cached_manifest_names_the_file_that_holds_it(tmp_path, monkeypatch):
    d = tmp_path / "d"
    paths = _folder(d)
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "cache"))
    where = cached_manifest(LOCAL, LOCAL.resolve(d), [p.name for p in paths])
    where.parent.mkdir(parents=True)
    where.write_text("{}")
    with pytest.raises(rd.DatasetIntegrityError) as info:
        rd.ArrowShards(d)
    named = re.findall(r"(/\S+\.rd-manifest\.json)", str(info.value))
    assert named and all(Path(p).exists() for p in named), str(info.value)
    assert f"delete {where}" in str(info.value)
    where.unlink()  # the fix the message gives
    assert rd.ArrowShards(d).take([7]).column("x").to_pylist() == [7]


@pytest.mark.parametrize("reader", ["pyarrow", "pandas", "datasets"])
def test_the_folder_still_reads_elsewhere_after_rd_touched_it(tmp_path, reader, monkeypatch):
    """rd.ArrowShards (auto-pin) and rd.pin leave a folder every other reader still reads."""
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "cache"))
    d = tmp_path / "d"
    _folder(d)
    rd.ArrowShards(d).take([1])
    rd.pin(d)
    rd.ArrowShards(d).take([1])
    if reader == "pyarrow":
        import pyarrow.dataset as pads
        n = pads.dataset(d, format="parquet").count_rows()
    elif reader == "pandas":
        import pandas as pd
        n = len(pd.read_parquet(d))
    else:
        import datasets
        n = datasets.load_dataset("parquet", data_dir=str(d), split="train",
                                  cache_dir=str(tmp_path / "hf")).num_rows
    assert n == 100
