"""The per-process decoded-unit cache: least recently used first out, bounded by bytes, the
newest unit always kept; and a Parquet source under the window shuffle decodes each unit of a
window once, not once per batch."""

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.sources.decoded_units import DecodedUnits


def _batch(rows):
    return pa.record_batch({"x": pa.array(np.zeros(rows, dtype=np.int64))})  # 8 bytes a row


def test_least_recently_used_goes_first_within_the_byte_budget():
    c = DecodedUnits(budget=8 * 300)
    for k in range(3):
        c.put((0, k), _batch(100))
    assert len(c) == 3 and c.nbytes == 2400
    assert c.get((0, 0)) is not None  # 0 is now the newest
    c.put((0, 3), _batch(100))
    assert c.get((0, 1)) is None and all(c.get((0, k)) is not None for k in (0, 2, 3))
    assert c.nbytes == 2400


def test_the_newest_unit_is_kept_whatever_its_size_and_a_replaced_key_is_counted_once():
    c = DecodedUnits(budget=100)
    c.put((1, 0), _batch(50))
    c.put((1, 1), _batch(1000))
    assert len(c) == 1 and c.get((1, 1)) is not None and c.nbytes == 8000
    c.put((1, 1), _batch(10))
    assert len(c) == 1 and c.nbytes == 80
    c.clear(budget=5)
    assert len(c) == 0 and c.nbytes == 0 and c.budget == 5


@pytest.mark.parametrize("blocks", ["records", "read_units"])
def test_a_parquet_window_reads_each_unit_about_once(tmp_path, monkeypatch, blocks):
    """A batch of a 400-record window over 64-row row groups needs ~7-13 units; with a cache of
    8 units every batch decoded them all again (one epoch: ~9x the units)."""
    n = 4096
    rd.write_arrow_shards(pa.table({"id": np.arange(n)}), tmp_path, num_shards=4, rows_per_batch=64, format="parquet")
    src = rd.ArrowShards(tmp_path, unpinned="allow")
    from resumable_data.sources import shard_units

    reads = []
    real = shard_units.OpenShard.read_unit
    monkeypatch.setattr(shard_units.OpenShard, "read_unit", lambda self, g: reads.append(g) or real(self, g))
    loader = rd.DataLoader(src, batch_size=32, shuffle=True, seed=0, shuffle_window=400, window_blocks=blocks)
    ids = np.concatenate([b["id"].numpy() for b in loader])
    assert np.array_equal(np.sort(ids), np.arange(n))
    units = len(src.unit_starts())
    assert units == 64 and len(reads) <= units * 1.05


def test_the_budget_bounds_the_process_not_each_source(tmp_path, monkeypatch):
    """Decoded units are kept up to the budget per process (docs/object-storage.md: 256 MiB per
    process): with one map per source, four Parquet sources read in one process (a remote
    rd.Mixture, train + eval sets) held four budgets."""
    from resumable_data.sources.decoded_units import process_units

    budget, unit = 4 << 20, 80_000  # 10,000 int64 rows a row group; each source decodes 3.2 MB
    monkeypatch.setattr(process_units(), "budget", budget)
    sources = []
    for k in range(4):
        table = pa.table({"x": np.arange(400_000, dtype=np.int64)})
        rd.write_arrow_shards(table, tmp_path / f"d{k}", num_shards=1, rows_per_batch=10_000, format="parquet")
        sources.append(rd.ArrowShards(tmp_path / f"d{k}", unpinned="allow"))
    base = pa.total_allocated_bytes()
    for src in sources:
        for i in range(0, 400_000, 10_000):
            assert src.take([i]).column("x").to_pylist() == [i]
    held = pa.total_allocated_bytes() - base
    # one map a source held all 12.8 MB; the slack is the sources' own arrays (footers, gather plans)
    assert held <= budget + (1 << 20), f"{held / 2**20:.2f} MiB of decoded units held, budget 4 MiB"
    shared = process_units()
    assert 0 < shared.nbytes <= budget + unit  # ours only: the budget evicted every earlier unit
    for src in sources:  # a closed source's units go with it
        src.close()
    assert shared.nbytes == 0 and len(shared) == 0


def test_units_of_two_sources_at_the_same_shard_and_index_are_kept_apart(tmp_path):
    """The process map is keyed by source too: shard 0, row group 0 of two sources differ."""
    for k in range(2):
        rd.write_arrow_shards(
            pa.table({"x": np.arange(100) + 1000 * k}),
            tmp_path / f"d{k}",
            num_shards=1,
            rows_per_batch=10,
            format="parquet",
        )
    a, b = (rd.ArrowShards(tmp_path / f"d{k}", unpinned="allow") for k in range(2))
    for _ in range(2):
        assert a.take([3]).column("x").to_pylist() == [3]
        assert b.take([3]).column("x").to_pylist() == [1003]


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_parquet_worker_processes_deliver_what_one_process_does(tmp_path, context):
    """Each worker keeps its own decoded units (a forked one starts from the parent's map, with a
    fresh lock); the batches equal those of the loading process itself."""
    n = 2048
    rd.write_arrow_shards(pa.table({"id": np.arange(n)}), tmp_path, num_shards=4, rows_per_batch=64, format="parquet")
    src = rd.ArrowShards(tmp_path, unpinned="allow")
    kw = dict(batch_size=32, shuffle=True, seed=1, shuffle_window=300, window_blocks="read_units")
    src.take(np.arange(0, n, 64))  # the parent's map holds decoded units when the workers fork
    want = [b["id"].tolist() for b in rd.DataLoader(src, **kw)]
    got = [b["id"].tolist() for b in rd.DataLoader(src, num_workers=2, multiprocessing_context=context, **kw)]
    assert got == want


def test_reserve_only_raises_the_budget():
    c = DecodedUnits(budget=1_000)
    c.reserve(500)
    assert c.budget == 1_000
    c.reserve(5_000)
    assert c.budget == 5_000


@pytest.mark.parametrize("bad", [0, -1, 1.5, "1GiB", True])
def test_decoded_cache_bytes_is_checked_at_construction(tmp_path, bad):
    pa.ipc.new_file(str(tmp_path / "a.arrow"), pa.schema([("x", pa.int64())])).close()
    with pytest.raises(
        rd.ConfigError, match=r"decoded_cache_bytes.*positive int of bytes.*decoded_cache_bytes=4 << 30"
    ):
        rd.ArrowShards(tmp_path, unpinned="allow", decoded_cache_bytes=bad)


# -- loaders rebuilt each epoch over decoded units, under a budget smaller than a batch's units ---
def _collect_garbage(table):
    """An ``arrow_collate`` that forces a collection inside every batch (dropped sources'
    finalizers run here, in the middle of the loader's work)."""
    import gc

    gc.collect()
    return table


def _drop_a_source_in_each_worker(worker_id):
    """A ``worker_init_fn`` that reads through another source and drops it without close()."""
    import gc
    import os

    other = rd.ArrowShards(os.environ["RD_TEST_OTHER_SOURCE"], unpinned="allow")
    other.take(np.arange(min(50, len(other))))
    del other
    gc.collect()


def _rich_table(n):
    rng = np.random.default_rng(1)
    return pa.table(
        {
            "id": np.arange(n, dtype=np.int64),
            "f": pa.array(rng.random(n), mask=rng.random(n) < 0.1),
            "s": pa.array([None if i % 7 == 0 else "v" * (i % 13) + str(i) for i in range(n)]),
            "l": pa.array(
                [[i] * (i % 6) if i % 5 else None for i in range(n)], pa.list_(pa.field("element", pa.int32()))
            ),
        }
    )


def _write_kind(directory, kind, t):
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    directory.mkdir()
    for j, part in enumerate(np.array_split(np.arange(t.num_rows), 3)):
        sub = t.take(pa.array(part))
        if kind == "parquet" or (kind == "mixed" and j % 2 == 0):
            pq.write_table(sub, directory / f"s{j}.parquet", row_group_size=37)
        elif kind == "mixed":
            with pa.OSFile(str(directory / f"s{j}.arrow"), "wb") as f, pa.ipc.new_file(f, sub.schema) as w:
                for b in sub.to_batches(max_chunksize=37):
                    w.write_batch(b)
        else:
            feather.write_feather(sub, directory / f"s{j}.arrow", compression=kind, chunksize=37)


@pytest.mark.filterwarnings("ignore:.*decoded-unit budget:RuntimeWarning")
@pytest.mark.parametrize(("kind", "workers"), [("parquet", 0), ("zstd", 0), ("mixed", 0), ("lz4", 2), ("parquet", 2)])
def test_loaders_rebuilt_each_epoch_under_a_tiny_budget_deliver_every_batch_right(tmp_path, monkeypatch, kind, workers):
    """A loader (and its source) built anew each epoch, the old ones dropped without close(); a
    process budget of 5,000 bytes, less than one batch's units (forked workers inherit it); a
    collection forced inside every batch and a source dropped in each worker. Every batch, in
    order, equals ``Table.take`` of its ids, and each epoch is a permutation of the records."""
    from resumable_data.sources.decoded_units import process_units

    t = _rich_table(900)
    _write_kind(tmp_path / "d", kind, t)
    _write_kind(tmp_path / "other", "parquet", _rich_table(200))
    monkeypatch.setenv("RD_TEST_OTHER_SOURCE", str(tmp_path / "other"))
    monkeypatch.setattr(process_units(), "budget", 5_000)
    epochs = []
    for epoch in range(2):
        src = rd.ArrowShards(tmp_path / "d", unpinned="allow")
        loader = rd.DataLoader(
            src,
            batch_size=64,
            shuffle=True,
            seed=3,
            num_workers=workers,
            multiprocessing_context="fork" if workers else None,
            worker_init_fn=_drop_a_source_in_each_worker if workers else None,
            arrow_collate=_collect_garbage,
        )
        seen = []
        for b in loader:
            ids = b.column("id").to_numpy()
            assert b.equals(t.take(pa.array(ids))), (epoch, len(seen))
            seen.append(ids)
        ids = np.concatenate(seen)
        assert np.array_equal(np.sort(ids), np.arange(t.num_rows))
        epochs.append(ids)
        del src, loader
    assert np.array_equal(epochs[0], epochs[1])  # a loader built again with the seed replays its stream
