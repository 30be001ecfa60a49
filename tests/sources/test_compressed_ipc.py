"""Compressed Arrow IPC shards (LZ4/ZSTD bodies, ``pyarrow.feather.write_feather``'s default):
opened from their layout without decompressing anything, each unit decompressed from the map when
a record in it is first requested and kept in the decoded-unit map (sources/files.py,
sources/shard_units.py). Every read equals the same records written uncompressed."""

from __future__ import annotations

import os
import pickle
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pytest

import resumable_data as rd
from resumable_data.sources import decoded_units
from resumable_data.sources.decoded_units import process_units
from resumable_data.sources.files import open_shard
from tests.sources.typed_columns import types_table

ROWS, BATCH = 3_000, 250  # 12 record batches a shard


def write(path, t, codec, *, stream=False):
    opts = pa.ipc.IpcWriteOptions(compression=codec)
    with pa.OSFile(str(path), "wb") as sink, (pa.ipc.new_stream if stream else pa.ipc.new_file)(
            sink, t.schema, options=opts) as w:
        for b in t.to_batches(max_chunksize=BATCH):
            w.write_batch(b)


def no_dictionaries(t: pa.Table) -> pa.Table:
    keep = [f.name for f in t.schema if not pa.types.is_dictionary(f.type)]
    return t.select(keep)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The same 2 x 3,000 rows of every non-dictionary type: uncompressed, LZ4 IPC files, ZSTD
    IPC streams."""
    t = no_dictionaries(types_table(2 * ROWS))
    out = {}
    for name, codec, stream in [("plain", None, False), ("lz4", "lz4", False), ("zstd_stream", "zstd", True)]:
        d = tmp_path_factory.mktemp(name)
        for s in range(2):
            write(d / f"part-{s}.arrow", t.slice(s * ROWS, ROWS), codec, stream=stream)
        out[name] = d
    return out


@pytest.mark.parametrize("name", ["lz4", "zstd_stream"])
def test_opening_holds_nothing_decompressed_and_take_decodes_only_the_units_touched(folders, name):
    before = pa.total_allocated_bytes()
    shard = open_shard(folders[name] / "part-0.arrow")
    assert shard.batches is None and shard.whole is not None and shard.layout is not None
    assert shard.unit_rows == [BATCH] * (ROWS // BATCH)
    decoded_size = shard.read_unit(0).get_total_buffer_size()
    # nothing decompressed by the open (before this route: every batch, 12 x decoded_size)
    assert pa.total_allocated_bytes() - before < decoded_size
    shard.close()

    src = rd.ArrowShards(folders[name], unpinned="allow")
    units = process_units()
    units.clear()
    got = src.take([3, 7, 1_100, 3_000 + 260])  # units 0 and 4 of part-0, unit 1 of part-1
    assert len(units) == 3
    ref = rd.ArrowShards(folders["plain"], unpinned="allow").take([3, 7, 1_100, 3_260])
    assert got.equals(ref)


@pytest.mark.parametrize("name", ["lz4", "zstd_stream"])
def test_every_type_reads_as_written_uncompressed(folders, name):
    src = rd.ArrowShards(folders[name], unpinned="allow")
    ref = rd.ArrowShards(folders["plain"], unpinned="allow")
    rng = np.random.default_rng(5)
    for ids in (rng.integers(0, 2 * ROWS, 512), np.arange(240, 770), rng.permutation(2 * ROWS)[:64]):
        assert src.take(ids).equals(ref.take(ids))
        assert src[int(ids[0])] == ref[int(ids[0])]


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    """Token lists, feather-written (LZ4, the default) and uncompressed, 4 shards of 2,000 rows."""
    rng = np.random.default_rng(3)
    n = 8_000
    t = pa.table({"tokens": pa.array([rng.integers(0, 50_000, int(k)).astype(np.int32)
                                      for k in rng.integers(1, 40, n)], type=pa.list_(pa.int32())),
                  "id": pa.array(np.arange(n))})
    out = {}
    for codec in ("lz4", "uncompressed"):
        d = tmp_path_factory.mktemp(codec)
        for s in range(4):
            feather.write_feather(t.slice(s * 2_000, 2_000), d / f"s{s}.arrow", compression=codec, chunksize=500)
        rd.pin(d)
        out[codec] = d
    return out


def batches(loader, n=None):
    out = []
    for b in loader:
        out.append({k: v.clone() for k, v in b.items()})
        if n is not None and len(out) == n:
            break
    return out


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert np.array_equal(x[k].numpy(), y[k].numpy()), k


@pytest.mark.parametrize("workers", [0, 2])
def test_a_feather_folder_streams_and_resumes_exactly(tokens, workers):
    """The order depends on the version (the bytes differ, so does the order): every batch's rows
    are checked against the uncompressed copy by id, and the resumed run against the uninterrupted
    one, batch for batch."""
    def loader():
        return rd.DataLoader(rd.ArrowShards(tokens["lz4"]), batch_size=64, shuffle=True, seed=1,
                             shuffle_window=1_000, num_workers=workers)

    whole = batches(loader())
    assert len(whole) == 8_000 // 64
    ref = rd.ArrowShards(tokens["uncompressed"])
    for b in whole:
        rows = ref.take(b["id"].numpy()).column("tokens").to_pylist()
        got = b["tokens"].numpy()
        assert [got[i, : len(r)].tolist() for i, r in enumerate(rows)] == rows
        assert all(not got[i, len(r):].any() for i, r in enumerate(rows))  # padded with 0
    first = loader()
    same(batches(first, 20), whole[:20])
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    same(batches(resumed), whole[20:])


def test_a_compressed_shard_changed_under_a_running_source(tokens, tmp_path):
    """Replaced by rename: the map still holds the bytes opened, which are read (the name's new file
    is never mixed in); written in place: refused before any of its units is decoded."""
    d = tmp_path / "copy"
    d.mkdir()
    for f in sorted(os.listdir(tokens["lz4"])):
        if f.endswith(".arrow"):
            (d / f).write_bytes((tokens["lz4"] / f).read_bytes())
    src = rd.ArrowShards(d, unpinned="allow")
    ref = rd.ArrowShards(tokens["uncompressed"])
    t = feather.read_table(d / "s1.arrow")
    other = t.set_column(1, "id", pa.array(np.arange(len(t)) + 10**6))
    feather.write_feather(other, d / "s1.tmp", compression="lz4", chunksize=500)
    changed = (d / "s1.tmp").read_bytes()
    os.replace(d / "s1.tmp", d / "s1.arrow")
    ids = np.arange(2_000, 2_010)  # unit 0 of s1, never decoded before the swap
    assert src.take(ids).equals(ref.take(ids))

    src = rd.ArrowShards(d, unpinned="allow")  # opens the new s1
    assert src.take(ids).column("id").to_pylist() == list(range(10**6, 10**6 + 10))
    t2 = other.set_column(1, "id", pa.array(np.arange(len(t)) + 2 * 10**6))
    feather.write_feather(t2, d / "s1.tmp", compression="lz4", chunksize=500)
    blob = (d / "s1.tmp").read_bytes()
    assert len(blob) == len(changed)  # same size: only the mtime tells
    with open(d / "s1.arrow", "r+b") as f:
        f.write(blob)
    with pytest.raises(rd.DatasetIntegrityError, match=r"s1\.arrow"):
        src.take(np.arange(2_600, 2_610))  # unit 1 of s1, not decoded yet
    assert src.take(np.arange(10)).equals(ref.take(np.arange(10)))  # the other shards still read


def test_dictionary_columns_are_decompressed_at_open_and_read_right(tmp_path):
    """Compressed IPC with dictionaries has no layout (sources/layout.py): read as before."""
    t = types_table(600).select(["label", "opt_label", "text"])
    write(tmp_path / "d.arrow", t, "zstd")
    shard = open_shard(tmp_path / "d.arrow")
    assert shard.batches is not None and shard.layout is None
    shard.close()
    src = rd.ArrowShards(tmp_path, unpinned="allow")
    ids = np.random.default_rng(0).integers(0, 600, 100)
    assert src.take(ids).equals(t.take(pa.array(ids)).combine_chunks())


def test_a_global_shuffle_past_the_budget_says_so_and_decoded_cache_bytes_fixes_it(tokens, monkeypatch):
    """A global shuffle touches every unit in every batch: with a budget below the decoded dataset
    every batch decodes its units again, which the source says once; ``decoded_cache_bytes`` raises
    the process's budget (kept by a pickled copy, which is what a loader worker opens)."""
    units = process_units()
    monkeypatch.setattr(units, "budget", 64 << 10)  # restored after the test
    monkeypatch.setattr(decoded_units, "_WARNED", set())  # nothing said yet in this process
    units.clear()
    loader = rd.DataLoader(rd.ArrowShards(tokens["lz4"]), batch_size=64, shuffle=True, seed=2)
    with pytest.warns(RuntimeWarning, match=r"decoded-unit budget of 64\.0 KiB.*decoded_cache_bytes="):
        slow = batches(loader, 5)

    src = rd.ArrowShards(tokens["lz4"], decoded_cache_bytes=8 << 20)
    assert units.budget == 8 << 20
    copy = pickle.loads(pickle.dumps(src))
    monkeypatch.setattr(units, "budget", 64 << 10)
    copy2 = pickle.loads(pickle.dumps(copy))  # unpickling asks for the budget again
    assert units.budget == 8 << 20 and len(copy2) == len(src)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        fast = batches(rd.DataLoader(src, batch_size=64, shuffle=True, seed=2), 5)
    same(fast, slow)
