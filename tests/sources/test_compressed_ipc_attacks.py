"""Attacks on compressed Arrow IPC shards read unit by unit (sources/files.py ``_open_shard``,
sources/shard_units.py ``_read_unit``, sources/unit_reads.py ``UnitReads.decoded``): files changed after
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
import torch

import resumable_data as rd
from resumable_data.sources.decoded_units import DEFAULT_DECODED_BYTES, process_units
from resumable_data.sources.discovery import MANIFEST_NAME
from resumable_data.sources.version import compute_derived_hash
from tests.sources.test_compressed_flips import codec_stream, mixed_stream

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


def plain_first_stream(path: Path, t: pa.Table, rows: int, plain: int) -> Path:
    """A stream whose first ``plain`` record batches are uncompressed, the rest LZ4 bodies."""
    return codec_stream(path, t, rows, plain, None, "lz4")


@pytest.mark.parametrize("how", ["plain_first_stream", "empty_first_feather"])
def test_a_shard_whose_first_batches_are_views_is_still_read_unit_by_unit(tmp_path, how):
    """Opening walks the batches while they are views of the map: a compressed batch after plain
    or empty ones still sends the shard to the per-unit route (before: the whole shard was
    decompressed at open and its batches counted as zero-copy)."""
    t = pa.table({"x": pa.array(np.arange(N, dtype=np.int64)), "y": pa.array(np.arange(N, dtype=np.float64))})
    if how == "plain_first_stream":
        plain_first_stream(tmp_path / "m.arrow", t, 50, plain=2)
    else:
        with pa.OSFile(str(tmp_path / "m.arrow"), "wb") as f, pa.ipc.new_file(
                f, t.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as w:
            w.write_batch(pa.RecordBatch.from_pylist([], schema=t.schema))  # fixed-width columns: no buffer bytes
            for b in t.to_batches(max_chunksize=50):
                w.write_batch(b)
    src = rd.ArrowShards(tmp_path, unpinned="allow")
    assert src._shards[0].batches is None and src._shards[0].layout is not None
    ids = np.random.default_rng(1).permutation(N)
    assert src.take(ids).equals(t.take(ids))


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
    # only a forgery that still names the same messages may read, and it reads the file's rows
    assert forgery not in ("past_the_end", "dropped_unit"), "a layout past the file or missing a unit was read"
    assert got.equals(t), got.to_pydict()


# -- decoded_cache_bytes -----------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, -1, 1.5, "1GB", True, float("inf"), np.int64(-5), np.bool_(True), [1], 10**30 + 0.5])
def test_bad_budgets_are_config_errors(tmp_path, bad):
    feather.write_feather(table(12), tmp_path / "a.arrow", chunksize=4)
    with pytest.raises(rd.ConfigError, match="decoded_cache_bytes"):
        rd.ArrowShards(tmp_path, unpinned="allow", decoded_cache_bytes=bad)


def test_a_numpy_integer_budget_is_taken_as_its_int(tmp_path):
    feather.write_feather(table(12), tmp_path / "a.arrow", chunksize=4)
    src = rd.ArrowShards(tmp_path, unpinned="allow", decoded_cache_bytes=np.int64(5 << 20))
    assert type(src._decoded_request) is int and src._decoded_request == 5 << 20  # pickled state is JSON
    assert src.__getstate__()["decoded_cache_bytes"] == 5 << 20


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
    asked: list[int] = []
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
                nbytes = int(rng.integers(1, 16 << 10))
                asked.append(nbytes)
                units.reserve(nbytes)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[:3]
        assert units.budget == max([8 << 10, *asked])  # the largest asked for since the reset, no other
    finally:
        units.clear(DEFAULT_DECODED_BYTES)


# -- folders mixing codecs, empty batches, mixtures, packing: every read as the plain copy's ------
ROWS = 240  # 4 shards of 60 rows, 10-row record batches


def token_table(offset: int = 0) -> pa.Table:
    rng = np.random.default_rng(11 + offset)
    n = ROWS
    return pa.table({
        "tokens": pa.array([rng.integers(1, 1_000, int(k)).astype(np.int32) for k in rng.integers(1, 12, n)],
                           type=pa.list_(pa.int32())),
        "id": pa.array(np.arange(offset, offset + n, dtype=np.int64)),
        "text": pa.array([f"t{i}" * (i % 4) for i in range(offset, offset + n)]),
    })


def _ipc(path: Path, t: pa.Table, codec, *, stream: bool = False, empty_at: int | None = None) -> None:
    with pa.OSFile(str(path), "wb") as f, (pa.ipc.new_stream if stream else pa.ipc.new_file)(
            f, t.schema, options=pa.ipc.IpcWriteOptions(compression=codec)) as w:
        for k, b in enumerate(t.to_batches(max_chunksize=10)):
            if k == empty_at:
                w.write_batch(b.slice(0, 0))
            w.write_batch(b)


def write_mixed_folder(d: Path, t: pa.Table, hostile: bool) -> Path:
    """Four shards of ``t``: uncompressed IPC files (``hostile`` False), else an LZ4 feather file, a
    ZSTD stream with an empty record batch inside, a mixed-codec stream and a plain IPC file."""
    d.mkdir()
    parts = [t.slice(60 * k, 60) for k in range(4)]
    if not hostile:
        for k, p in enumerate(parts):
            _ipc(d / f"s{k}.arrow", p, None)
        return d
    feather.write_feather(parts[0], d / "s0.arrow", chunksize=10)
    _ipc(d / "s1.arrow", parts[1], "zstd", stream=True, empty_at=2)
    mixed_stream(d / "s2.arrow", parts[2], 10, compressed=2)
    _ipc(d / "s3.arrow", parts[3], None, empty_at=0)
    return d


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed")
    t = token_table()
    plain, hostile = write_mixed_folder(root / "plain", t, False), write_mixed_folder(root / "hostile", t, True)
    rd.pin(plain)
    rd.pin(hostile)
    return t, plain, hostile


def test_a_folder_mixing_codecs_and_empty_batches_reads_as_its_plain_copy(pair):
    _, plain, hostile = pair
    src, ref = rd.ArrowShards(hostile), rd.ArrowShards(plain)
    assert [s.batches is None for s in src._shards] == [True, True, True, False]
    rng = np.random.default_rng(1)
    for ids in (rng.integers(0, ROWS, 100), np.arange(ROWS), rng.permutation(ROWS)[:7], np.array([ROWS - 1, 0])):
        assert src.take(ids).equals(ref.take(ids))
        assert src.take_numpy(ids) is None  # a string column: take() instead
    assert np.array_equal(src.column_lengths("tokens"), ref.column_lengths("tokens"))
    assert src[ROWS - 1] == ref[ROWS - 1] and src[125] == ref[125]


def collect(loader, n=None) -> list:
    out = []
    for b in loader:
        out.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in b.items()})
        if n is not None and len(out) == n:
            break
    return out


def same_batches(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert np.array_equal(np.asarray(x[k]), np.asarray(y[k])), k


@pytest.mark.parametrize("how", ["seq", "global", "window"])
@pytest.mark.parametrize("workers", [0, 2])
def test_loaders_over_a_mixed_folder_deliver_the_right_rows_and_resume_exactly(pair, how, workers):
    t, _, hostile = pair
    kw = {"seq": {"shuffle": False}, "global": {"shuffle": True}, "window": {"shuffle": True, "shuffle_window": 50}}

    def loader():
        return rd.DataLoader(rd.ArrowShards(hostile), batch_size=16, seed=4, num_workers=workers, **kw[how])

    whole = collect(loader())
    assert sum(len(b["id"]) for b in whole) == ROWS
    for b in whole:
        rows = t.take(pa.array(b["id"].numpy()))
        want = rows.column("tokens").to_pylist()
        got = b["tokens"].numpy()
        assert [got[i, : len(r)].tolist() for i, r in enumerate(want)] == want
    first = loader()
    same_batches(collect(first, 5), whole[:5])
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    same_batches(collect(resumed), whole[5:])


@pytest.mark.parametrize("workers", [0, 2])
def test_packing_over_a_mixed_folder_resumes_exactly(pair, workers):
    _, plain, hostile = pair

    def loader(folder):
        return rd.DataLoader(rd.ArrowShards(folder), batch_size=4, seed=5, shuffle=True, num_workers=workers,
                             packing=rd.Packing(32, "concat", window=20, eos_id=0))

    whole = collect(loader(hostile))
    assert len(whole) > 5
    first = loader(hostile)
    same_batches(collect(first, 3), whole[:3])
    state = first.state_dict()
    resumed = loader(hostile)
    resumed.load_state_dict(state)
    same_batches(collect(resumed), whole[3:])
    # the packed tokens are the documents' tokens: the same multiset as the plain copy's run
    tokens = lambda run: np.sort(np.concatenate([b["input_ids"].numpy().ravel() for b in run]))  # noqa: E731
    assert np.array_equal(tokens(whole), tokens(collect(loader(plain))))


def test_a_mixture_over_compressed_and_plain_sources_delivers_the_right_rows(tmp_path):
    a, b = token_table(), token_table(10_000)
    fa = write_mixed_folder(tmp_path / "a", a, True)
    fb = write_mixed_folder(tmp_path / "b", b, False)
    rd.pin(fa)
    rd.pin(fb)
    both = {int(i): r for t in (a, b) for i, r in zip(t.column("id").to_pylist(), t.to_pylist())}

    def loader():
        mix = rd.Mixture({"a": rd.ArrowShards(fa), "b": rd.ArrowShards(fb)}, weights={"a": 0.6, "b": 0.4},
                         block_size=32)
        return rd.DataLoader(mix, batch_size=8, seed=2, collate_fn=lambda rows: rows)

    whole = [list(x) for x in loader()]
    assert whole and all(row == both[row["id"]] for batch in whole for row in batch)
    assert {row["id"] < 10_000 for batch in whole for row in batch} == {True, False}
    first = loader()
    it = iter(first)
    head = [list(next(it)) for _ in range(4)]
    assert head == whole[:4]
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    assert [list(x) for x in resumed] == whole[4:]


def test_take_numpy_over_a_mixed_folder_equals_the_plain_copy(tmp_path):
    t = token_table().select(["tokens", "id"])
    plain, hostile = write_mixed_folder(tmp_path / "p", t, False), write_mixed_folder(tmp_path / "h", t, True)
    src, ref = rd.ArrowShards(hostile, unpinned="allow"), rd.ArrowShards(plain, unpinned="allow")
    for ids in (np.arange(ROWS), np.random.default_rng(2).integers(0, ROWS, 50)):
        want = ref.take_numpy(ids)
        got = src.take_numpy(ids)
        assert want is not None
        assert got is not None  # before: None (a folder mixing codecs took the per-unit Arrow path)
        (tok, lens), ident = got
        (tok_ref, lens_ref), ident_ref = want
        assert np.array_equal(tok, tok_ref) and np.array_equal(lens, lens_ref) and np.array_equal(ident, ident_ref)


def budget_collate(rows):
    return process_units().budget


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_worker_keeps_the_budget_its_source_asked_for(tmp_path, context):
    feather.write_feather(table(), tmp_path / "a.arrow", chunksize=50)
    rd.pin(tmp_path)
    units = process_units()
    before = units.budget
    try:
        src = rd.ArrowShards(tmp_path, decoded_cache_bytes=DEFAULT_DECODED_BYTES + 12345)
        loader = rd.DataLoader(src, batch_size=100, num_workers=1, multiprocessing_context=context,
                               collate_fn=budget_collate, timeout=120)
        assert list(loader) == [DEFAULT_DECODED_BYTES + 12345] * 3
    finally:
        units.clear(before)


def test_zero_copy_units_of_a_mixed_folder_cost_nothing_in_the_budget(tmp_path):
    hostile = write_mixed_folder(tmp_path / "h", token_table(), True)
    src = rd.ArrowShards(hostile, unpinned="allow")
    units = process_units()
    units.clear()
    got = src.take(np.arange(180, ROWS))  # s3: the uncompressed shard
    assert got.equals(token_table().slice(180))
    assert len(units) == 6 and units.nbytes == 0  # its six record batches, views of the map
    src.take(np.arange(0, 10))  # a compressed unit of s0: decoded bytes
    assert len(units) == 7 and units.nbytes > 0
