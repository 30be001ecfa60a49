"""The compiled identity check of memory-mapped shards (sources/watch.py) answers what the Python
check (identity.first_changed_at) answers, on every kind of change, compiled and not."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.sources.identity import first_changed_at, identity_of_stat, watch_entry
from resumable_data.sources.watch import ShardWatch, _first_unclear, statx_address

LINUX = sys.platform.startswith("linux")
MODES = [pytest.param(True, id="compiled"), pytest.param(False, id="python")]
ROOTS = [pytest.param(True, id="names-from-root"), pytest.param(False, id="full-paths")]


def _files(tmp_path: Path, n: int = 6) -> tuple[list[str], list]:
    paths = []
    for k in range(n):
        p = tmp_path / f"f{k}"
        p.write_bytes(b"x" * 10)
        paths.append(str(p))
    past = os.stat(paths[0]).st_mtime_ns - 10 * 10**9  # older than one timestamp tick
    for p in paths:
        os.utime(p, ns=(past, past))
    return paths, [watch_entry(p, identity_of_stat(os.stat(p))) for p in paths]


def _arr(which: list[int]) -> np.ndarray:
    return np.array(which, dtype=np.int64)


@pytest.mark.parametrize("from_root", ROOTS)
@pytest.mark.parametrize("compiled", MODES)
def test_first_changed_agrees_with_the_python_check(tmp_path, compiled, from_root):
    paths, entries = _files(tmp_path)
    watch = ShardWatch(entries, str(tmp_path) if from_root else None, compiled=compiled)
    assert watch.compiled == (compiled and LINUX)
    everything = list(range(len(paths)))
    assert watch.first_changed(_arr(everything)) == -1
    mtime = entries[2][3] + 10**9
    os.utime(paths[2], ns=(mtime, mtime))  # written to: mtime moves, same size
    Path(paths[3]).write_bytes(b"y" * 3)  # shorter, in place
    os.replace(paths[0], str(tmp_path / "gone"))  # the name gives nothing: the mapped inode is whole
    (tmp_path / "new").write_bytes(b"z" * 10)
    os.replace(tmp_path / "new", paths[1])  # the name gives another file: an atomic replace
    with open(paths[4], "r+b") as f:  # same size and bytes, rewritten in place: mtime moves
        f.write(b"x" * 10)
    os.utime(paths[4], ns=(entries[4][3] + 1, entries[4][3] + 1))  # by one nanosecond
    for which in (everything, [3, 2], [0, 1], [1, 0, 5], [4], [5, 4, 3], []):
        want = first_changed_at(entries, which)
        assert watch.first_changed(_arr(which)) == want, which
    assert [watch.first_changed(_arr([k])) for k in everything] == [-1, -1, 2, 3, 4, -1]


@pytest.mark.parametrize("compiled", MODES)
def test_entries_without_a_name_or_an_inode_are_never_found_changed(tmp_path, compiled):
    paths, entries = _files(tmp_path, 3)
    no_inode = (entries[2][0], None, None, entries[2][3], entries[2][4])
    watch = ShardWatch([None, entries[1], no_inode], str(tmp_path), compiled=compiled)
    Path(paths[0]).write_bytes(b"y")
    Path(paths[2]).write_bytes(b"y")
    assert watch.first_changed(_arr([0, 2])) == -1 == first_changed_at(watch.entries, [0, 2])
    Path(paths[1]).write_bytes(b"y")
    assert watch.first_changed(_arr([0, 2, 1])) == 1


@pytest.mark.skipif(not LINUX, reason="statx is Linux's")
def test_the_compiled_loop_clears_unchanged_files_itself(tmp_path):
    """Unchanged files are cleared by statx alone (no Python stat a read), and a changed one is
    reported by it: the compiled loop is the check that runs, not a pass-through."""
    assert statx_address() != 0
    paths, entries = _files(tmp_path, 3)
    watch = ShardWatch(entries, str(tmp_path))
    assert (watch._want[:, 1] == watch._dirs[0].fd).all()  # names looked up from the root held open
    args = (watch._paths, watch._want)
    assert _first_unclear(watch._fn, _arr([0, 1, 2]), *args) == -1
    Path(paths[1]).write_bytes(b"x" * 11)
    assert _first_unclear(watch._fn, _arr([0, 1, 2]), *args) == 1
    assert _first_unclear(watch._fn, _arr([2, 0]), *args) == -1
    os.replace(paths[1], str(tmp_path / "away"))  # not cleared (the name is gone): Python decides
    assert _first_unclear(watch._fn, _arr([0, 1]), *args) == 1 and watch.first_changed(_arr([0, 1])) == -1
    watch.close()  # the directory closed: nothing is cleared, the Python check by full path goes on
    assert _first_unclear(watch._fn or statx_address(), _arr([0]), *args) == 0
    assert watch.first_changed(_arr([0, 2])) == -1 and not watch.compiled
    Path(paths[2]).write_bytes(b"x")
    assert watch.first_changed(_arr([0, 2])) == 2


@pytest.mark.skipif(not LINUX, reason="statx is Linux's")
def test_a_source_and_a_mixture_view_check_its_mapped_shards_in_the_compiled_loop(tmp_path):
    rd.write_arrow_shards(
        pa.table({"x": np.arange(100)}), tmp_path / "d", num_shards=4, format="arrow"
    )
    rd.pin(tmp_path / "d")
    src = rd.ArrowShards(tmp_path / "d")
    assert src._watch.compiled and all(e is not None for e in src._watch.entries)
    other = tmp_path / "e"
    rd.write_arrow_shards(pa.table({"x": np.arange(100, 130)}), other, num_shards=2, format="arrow")
    rd.pin(other)
    second = rd.ArrowShards(other)
    view = rd.ArrowShards.concatenated([src, second])
    assert view is not None and view._watch.compiled and len(view._watch.entries) == 6
    assert view.take([0, 129]).column("x").to_pylist() == [0, 129]
    shard = sorted(other.glob("shard-*"))[1]
    with open(shard, "r+b") as f:  # an in-place write to the second source's last shard
        f.write(f.read(8))
    os.utime(shard, ns=(time_ns := os.stat(shard).st_mtime_ns + 10**9, time_ns))
    assert view.take([0, 99]).column("x").to_pylist() == [0, 99]  # the first source's shards read on
    with pytest.raises(rd.DatasetIntegrityError, match="changed after"):
        view.take([129])
    with pytest.raises(rd.DatasetIntegrityError, match="changed after"):
        second.take([29])


@pytest.mark.skipif(not LINUX, reason="statx is Linux's; /proc/self/fd")
def test_a_source_of_many_shards_holds_one_descriptor_and_close_releases_it(tmp_path):
    rd.write_arrow_shards(pa.table({"x": np.arange(600)}), tmp_path / "d", num_shards=300, format="arrow")
    rd.pin(tmp_path / "d")
    before = len(os.listdir("/proc/self/fd"))
    src = rd.ArrowShards(tmp_path / "d")
    assert src.take([0, 599]).column("x").to_pylist() == [0, 599]
    assert len(os.listdir("/proc/self/fd")) - before == 1  # the root directory, not one per shard
    src.close()
    assert len(os.listdir("/proc/self/fd")) == before
