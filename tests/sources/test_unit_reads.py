"""``sources/unit_reads.py``: the units decoded when read, kept per process, fetched by checked reads."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import resumable_data as rd
from resumable_data.sources.decoded_units import process_units


def _parquet(tmp_path, n=600, group=100):
    t = pa.table({"x": np.arange(n, dtype=np.int64), "y": [[i] * (i % 4) for i in range(n)]})
    pq.write_table(t, tmp_path / "a.parquet", row_group_size=group)
    return t, rd.ArrowShards(tmp_path, unpinned="allow")


def _ipc(tmp_path, n=600, group=100):
    t = pa.table({"x": np.arange(n, dtype=np.int64)})
    with pa.OSFile(str(tmp_path / "a.arrow"), "wb") as f, pa.ipc.new_file(f, t.schema) as w:
        for b in t.to_batches(max_chunksize=group):
            w.write_batch(b)
    return t, rd.ArrowShards(tmp_path, unpinned="allow")


def test_a_decoded_unit_is_kept_and_dropped_when_read_ahead_is_attached(tmp_path):
    t, src = _parquet(tmp_path)
    reads = src._reads
    assert reads.loaded
    first = reads.decoded(2)
    assert first.batch.equals(t.slice(200, 100).to_batches()[0])
    assert reads.decoded(2) is first  # a hit: the map's entry, not a second decode
    reads.attach(None)  # units decoded from other bytes leave the map
    again = reads.decoded(2)
    assert again is not first and again.batch.equals(first.batch)
    key = (reads._owner, 0, 2)  # decoded()'s key: (source, shard, row group)
    assert process_units().entry(key) is not None
    src.close()  # the source's units leave the process's map with it
    assert process_units().entry(key) is None


def test_touched_units_plan_over_the_batch_units(tmp_path):
    _, src = _parquet(tmp_path)
    unit = np.array([5, 0, 5, 3], dtype=np.int64)
    plans, renumbered, held = src._reads.touched(unit)
    assert renumbered.tolist() == [2, 0, 2, 1]  # units 0, 3, 5 in order
    assert [h.batch.column(0)[0].as_py() for h in held] == [0, 300, 500]
    local = np.array([7, 1, 9, 50], dtype=np.int64)
    ids = np.array([507, 1, 509, 350], dtype=np.int64)
    got = plans[0].gather(ids, renumbered, local)
    assert got.to_pylist() == [507, 1, 509, 350]


def test_ranged_reads_of_local_mapped_units_are_refused_with_the_fix(tmp_path):
    _, src = _ipc(tmp_path)
    assert not src._reads.loaded and src.unit_spans() == [None] * 6
    with pytest.raises(rd.ConfigError, match=r"k.*unit read by range"):
        src.fetch_unit(0)
    with pytest.raises(rd.ConfigError, match=r"first, last.*units read by range"):
        src.fetch_run(0, 1)
    with pytest.raises(rd.ConfigError, match=r"shard.*rd\.ReadUnit\.RECORD_BATCH"):
        src.fetch_shard(0)
    assert src.unit_shards().tolist() == [0] * 6
    assert src.shard_size(0) == (tmp_path / "a.arrow").stat().st_size


# -- plans over every unit, while every unit is kept ---------------------------------------------
def _spy(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)

    def spy(*args, **kwargs):
        calls.append(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


def test_once_every_unit_is_kept_a_batch_is_gathered_by_the_plans_over_every_unit(tmp_path, monkeypatch):
    import resumable_data.sources.gather_decoded as gd
    import resumable_data.sources.unit_reads as ur

    t, src = _parquet(tmp_path, n=3000, group=97)
    monkeypatch.setattr(process_units(), "budget", 1 << 30)
    assert src.take(np.arange(len(t))).equals(t)  # every unit decoded, planned and published
    whole = src._reads._whole
    assert whole is not None
    stacked = _spy(monkeypatch, ur, "plan_touched")
    looked = _spy(monkeypatch, gd.PlanTable, "lookup")
    rng = np.random.default_rng(3)
    for _ in range(20):
        ids = rng.integers(0, len(t), int(rng.integers(1, 500)))
        got = src.take(ids)
        for name in t.column_names:
            assert got.column(name).equals(t.column(name).take(pa.array(ids))), name
    assert stacked == [] and looked == [] and src._reads._whole is whole


def test_a_unit_leaving_the_map_drops_the_plans_over_every_unit_at_once(tmp_path, monkeypatch):
    import gc
    import weakref

    t, src = _parquet(tmp_path, n=3000, group=97)
    monkeypatch.setattr(process_units(), "budget", 1 << 30)
    src.take(np.arange(len(t)))
    assert src._reads._whole is not None
    unit = weakref.ref(src._reads.decoded(5))
    process_units().put(("someone else", 0, 0), pa.record_batch({"x": [1]}))  # nothing leaves: kept
    assert src._reads._whole is not None
    process_units().clear()  # every unit leaves: the plans go with the first
    assert src._reads._whole is None
    gc.collect()
    assert unit() is None  # nothing of the source kept it alive
    ids = np.random.default_rng(4).integers(0, len(t), 300)
    assert src.take(ids).equals(t.take(pa.array(ids)))


@pytest.mark.filterwarnings("ignore:.*decoded-unit budget:RuntimeWarning")
def test_no_plans_over_every_unit_when_the_decoded_dataset_exceeds_the_budget(tmp_path, monkeypatch):
    t, src = _parquet(tmp_path, n=3000, group=97)
    process_units().clear()  # the source's units alone
    src.take(np.arange(len(t)))
    nbytes = process_units().nbytes
    monkeypatch.setattr(process_units(), "budget", nbytes // 2)
    process_units().clear()
    other = rd.ArrowShards(tmp_path, unpinned="allow")
    rng = np.random.default_rng(5)
    for _ in range(15):
        ids = rng.integers(0, len(t), 40)
        assert other.take(ids).equals(t.take(pa.array(ids)))
        assert other._reads._whole is None
    assert process_units().nbytes <= nbytes // 2


def test_a_closed_source_is_not_watched(tmp_path):
    _, src = _parquet(tmp_path)
    owner = src._reads._owner
    assert owner in process_units()._watchers
    src.close()
    assert owner not in process_units()._watchers


def test_a_source_dropped_without_close_leaves_no_units_in_the_map(tmp_path):
    import gc

    t, src = _parquet(tmp_path)
    owner = src._reads._owner
    assert src.take(np.arange(len(t))).equals(t)
    key = (owner, 0, 0)
    assert process_units().entry(key) is not None
    del src
    gc.collect()  # the source and its reads form a cycle: collected by the cycle collector
    assert process_units().entry(key) is None  # dropped at the map's next call (this one)
    assert owner not in process_units()._watchers


def test_a_source_collected_while_the_map_is_locked_never_deadlocks(tmp_path):
    """The garbage collector may run a dropped source's finalizer inside any allocation made while
    the map's lock is held (it did: ``watch`` allocating its weak method collected an earlier
    source, whose finalizer took the lock again and hung the process). The finalizer only queues
    the drop; the map's next call does it."""
    import gc
    import threading

    t, src = _parquet(tmp_path)
    assert src.take(np.arange(len(t))).equals(t)
    owner = src._reads._owner
    units = process_units()
    done = threading.Event()

    def collect_under_the_lock():
        with units.lock:
            gc.collect()  # runs the finalizer here, with the lock held
        done.set()

    gc.disable()  # nothing collects the source before the thread holds the lock
    try:
        del src
        th = threading.Thread(target=collect_under_the_lock, daemon=True)
        th.start()
        assert done.wait(20), "the finalizer took the map's lock under a holder of it"
    finally:
        gc.enable()
    assert process_units().entry((owner, 0, 0)) is None and owner not in units._watchers


def test_plans_over_every_unit_are_not_kept_over_units_another_source_evicted_meanwhile(tmp_path, monkeypatch):
    """Another thread's source evicts this source's units while a batch over all of them is being
    planned (the batch holds them, so their plan rows are still alive): the plans over every unit
    must not be kept then. They were (the check saw only units leaving after the plans' lookup),
    and since none of the source's units was left in the map to leave again, nothing ever dropped
    them: the whole decoded dataset was held past the budget for the source's life."""
    import gc

    import resumable_data.sources.unit_reads as ur

    t, src = _parquet(tmp_path, n=3000, group=97)
    monkeypatch.setattr(process_units(), "budget", 1 << 30)
    real = ur.plan_touched

    def another_source_puts(units):  # what another thread's put does meanwhile: every older unit leaves
        process_units().put(("another source", 0, 0), pa.record_batch({"x": [0]}), size=1 << 30)
        return real(units)

    monkeypatch.setattr(ur, "plan_touched", another_source_puts)
    assert src.take(np.arange(len(t))).equals(t)
    monkeypatch.setattr(ur, "plan_touched", real)
    owner = src._reads._owner
    assert not [k for k in process_units()._map if k[0] == owner]  # the map let every unit go
    assert src._reads._whole is None  # so nothing of the source holds them
    gc.collect()
    assert src._reads._table.lookup(np.arange(len(src.unit_starts()))) is None  # no unit outlived the map
    ids = np.random.default_rng(6).integers(0, len(t), 500)
    assert src.take(ids).equals(t.take(pa.array(ids)))


@pytest.mark.parametrize("kind", ["parquet", "lz4", "arrow"])
def test_a_closed_source_refuses_every_read_with_a_usage_error(tmp_path, kind):
    """A read after close(): a Parquet source said its file "changed after this source opened it"
    (fix: restore the file: wrong), a compressed IPC source kept decoding into the process's map
    with nobody watching (its plans over every unit then outlived the budget)."""
    import pickle

    import pyarrow.feather as feather

    t = pa.table({"x": np.arange(600, dtype=np.int64)})
    if kind == "parquet":
        pq.write_table(t, tmp_path / "a.parquet", row_group_size=100)
    else:
        feather.write_feather(
            t, tmp_path / "a.arrow", compression="uncompressed" if kind == "arrow" else kind, chunksize=100
        )
    src = rd.ArrowShards(tmp_path, unpinned="allow")
    assert src.take([1, 500]).column("x").to_pylist() == [1, 500]
    src.close()
    for read in (
        lambda: src.take(np.arange(600)),
        lambda: src[3],
        lambda: src.take_numpy([1, 2]),
        lambda: pickle.dumps(src),
    ):
        with pytest.raises(rd.UsageError, match=r"source=.*closed.*build the source again"):
            read()
    assert not [k for k in process_units()._map if k[0] == src._reads._owner]


def test_plans_over_every_unit_are_not_kept_when_read_ahead_is_attached_while_they_are_built(tmp_path, monkeypatch):
    """attach() (read-ahead starting or stopping, possibly from a collected loader's finalizer)
    queues the drop of the units decoded from other bytes; plans over every unit being built at
    that moment must see it, not be kept over the units about to go."""
    import resumable_data.sources.gather_decoded as gd

    t, src = _parquet(tmp_path, n=3000, group=97)
    monkeypatch.setattr(process_units(), "budget", 1 << 30)
    real, calls = gd.PlanTable.plans, []

    def attach_meanwhile(self, got):  # the first call: _whole_plans, between its lookup and its check
        if not calls:
            src._reads.attach(None)
        calls.append(1)
        return real(self, got)

    monkeypatch.setattr(gd.PlanTable, "plans", attach_meanwhile)
    assert src.take(np.arange(len(t))).equals(t)
    assert calls and src._reads._whole is None
    assert not [k for k in process_units()._map if k[0] == src._reads._owner]
    ids = np.random.default_rng(7).integers(0, len(t), 400)
    assert src.take(ids).equals(t.take(pa.array(ids)))
