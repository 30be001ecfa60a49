"""Attacks on compressed Arrow IPC shards read unit by unit (sources/files.py ``_open_shard``,
sources/shard_units.py ``_read_unit``, sources/arrow_shards.py ``_decoded``): files changed after
some units were decoded, a stream mixing compressed and uncompressed record batches, forged
layouts in a re-hashed manifest, ``decoded_cache_bytes`` values and budgets.

A decoded unit of a compressed mapped shard may still be a view of the map: a record batch whose
bodies are not compressed (a stream mixes codecs per message; other writers store a body that does
not shrink with the -1 length prefix) decodes to slices of the map. Such a shard is checked around
every read, cached units included, as a shard of zero-copy batches is: a truncated file is refused
before its map is touched (no SIGBUS), a rewritten one before a changed value is gathered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pytest

import resumable_data as rd
from resumable_data.sources.decoded_units import DEFAULT_DECODED_BYTES, process_units
from resumable_data.sources.discovery import MANIFEST_NAME
from resumable_data.sources.version import compute_derived_hash
from tests.sources.test_compressed_flips import mixed_stream

ROOT = Path(__file__).resolve().parents[2]
N = 300


def table(n: int = N) -> pa.Table:
    return pa.table({"x": pa.array(np.arange(n, dtype=np.int64)), "s": pa.array([f"row{i}" for i in range(n)])})


def aged(path: Path) -> Path:
    """A file written long ago (its identity's mtime cannot equal a rewrite's)."""
    past = os.stat(path).st_mtime_ns - 10 * 10**9
    os.utime(path, ns=(past, past))
    return path


CHANGE_AFTER_DECODE = r"""
import os, sys
import numpy as np
import resumable_data as rd
folder, change = sys.argv[1], sys.argv[2]
path = os.path.join(folder, "mixed.arrow")
src = rd.ArrowShards(folder)
clean = src.take(np.arange(len(src))).to_pylist()   # every unit decoded (and kept)
if change == "truncate":
    os.truncate(path, 200)
else:  # same size, in place: x of row 150 (an uncompressed unit) from 150 to 999
    data = open(path, "rb").read()
    at = data.index((150).to_bytes(8, "little"))
    with open(path, "r+b") as f:
        f.seek(at)
        f.write((999).to_bytes(8, "little"))
try:
    got = src.take(np.arange(len(src))).to_pylist()
    print("identical" if got == clean else "wrong")
except rd.ResumableDataError:
    print("refused")
except Exception as exc:
    print("non-rd", type(exc).__name__, exc)
"""


@pytest.mark.parametrize("change", ["truncate", "rewrite"])
def test_a_file_changed_after_its_uncompressed_units_were_decoded_is_refused(tmp_path, change):
    """Before the fix: the cached units were views of the map and the shard was not checked on a
    cache hit: a truncated file killed the process (SIGBUS), a same-size rewrite fed 999 or raised
    numpy's ValueError."""
    mixed_stream(tmp_path / "mixed.arrow", table(), 100)
    aged(tmp_path / "mixed.arrow")
    rd.pin(tmp_path)
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    run = subprocess.run([sys.executable, "-c", CHANGE_AFTER_DECODE, str(tmp_path), change], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert run.stdout.split() == ["refused"], run.stdout


def test_a_mixed_stream_reads_as_written_and_its_later_units_stay_unread(tmp_path):
    mixed_stream(tmp_path / "m.arrow", table(), 100)
    src = rd.ArrowShards(tmp_path, unpinned="allow")
    assert src._shards[0].batches is None  # the first batch is compressed: unit by unit
    rng = np.random.default_rng(0)
    ids = rng.permutation(N)
    assert src.take(ids).equals(table().take(ids))
    assert src[N - 1] == {"x": N - 1, "s": f"row{N - 1}"}


# -- forged layouts (the manifest's derived hash re-computed): refused at open or at the read ----
def _forge(d: dict) -> None:
    d["derived_hash"] = compute_derived_hash(d["shards"])


FORGERIES = {
    "offset+1": lambda u: u[1].__setitem__(0, u[1][0] + 1),
    "offset+8": lambda u: u[1].__setitem__(0, u[1][0] + 8),
    "shorter": lambda u: u[1].__setitem__(1, u[1][1] - 16),
    "rows_moved": lambda u: (u[0].__setitem__(2, 8), u[1].__setitem__(2, 0)),
    "past_the_end": lambda u: u[2].__setitem__(1, u[2][1] + 10_000),
    "schema_as_unit": lambda u: u[0].__setitem__(0, 8),
    "dropped_unit": lambda u: (u[0].__setitem__(2, 8), u.pop(1)),
}


@pytest.mark.parametrize("forgery", list(FORGERIES))
@pytest.mark.parametrize("stream", [False, True])
def test_a_forged_layout_is_refused_never_read(tmp_path, forgery, stream):
    t = table(12)
    path = tmp_path / "a.arrow"
    if stream:
        with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(
                f, t.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
            for b in t.to_batches(max_chunksize=4):
                w.write_batch(b)
    else:
        feather.write_feather(t, path, chunksize=4)
    rd.pin(tmp_path)
    manifest = tmp_path / MANIFEST_NAME
    d = json.loads(manifest.read_text())
    FORGERIES[forgery](d["shards"][0]["layout"]["units"])
    _forge(d)
    manifest.write_text(json.dumps(d))
    try:
        src = rd.ArrowShards(tmp_path)
        got = src.take(np.arange(len(src)))
    except rd.ResumableDataError:
        return
    assert got.equals(t), got.to_pydict()  # a harmless forgery (the same messages) reads the file's rows


# -- decoded_cache_bytes -----------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, -1, 1.5, "1GB", True, float("inf"), np.int64(5), [1], 10**30 + 0.5])
def test_bad_budgets_are_config_errors(tmp_path, bad):
    feather.write_feather(table(12), tmp_path / "a.arrow", chunksize=4)
    with pytest.raises(rd.ConfigError, match="decoded_cache_bytes"):
        rd.ArrowShards(tmp_path, unpinned="allow", decoded_cache_bytes=bad)


def test_a_huge_budget_is_kept_and_pickled(tmp_path):
    import pickle

    feather.write_feather(table(), tmp_path / "a.arrow", chunksize=50)
    units = process_units()
    before = units.budget
    try:
        src = rd.ArrowShards(tmp_path, unpinned="allow", decoded_cache_bytes=1 << 80)
        assert units.budget == 1 << 80
        back = pickle.loads(pickle.dumps(src))
        assert back._decoded_request == 1 << 80
        assert back.take(np.arange(N)).equals(table())
    finally:
        units.clear(before)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the budget warning, said once per source
def test_concurrent_takes_and_reserves_agree_with_one_thread(tmp_path):
    """Threads taking from two sources with different budgets while others raise the budget: every
    take equals the single-threaded one, and the process keeps the largest budget asked for."""
    for k in range(2):
        feather.write_feather(table().slice(k * 150, 150), tmp_path / f"p{k}.arrow", chunksize=10)
    units = process_units()
    units.clear(DEFAULT_DECODED_BYTES)
    small = rd.ArrowShards(tmp_path, unpinned="allow", decoded_cache_bytes=4 << 10)
    big = rd.ArrowShards(tmp_path, unpinned="allow", decoded_cache_bytes=DEFAULT_DECODED_BYTES + 1)
    assert units.budget == DEFAULT_DECODED_BYTES + 1
    units.clear(8 << 10)  # small enough that units are evicted while the threads take
    ref = table()
    errors: list = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(40):
                ids = rng.integers(0, N, 64)
                src = (small, big)[seed % 2]
                if not src.take(ids).equals(ref.take(ids)):
                    errors.append(("wrong", seed))
                units.reserve(int(rng.integers(1, 16 << 10)))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert units.budget >= 8 << 10
    units.clear(DEFAULT_DECODED_BYTES)
