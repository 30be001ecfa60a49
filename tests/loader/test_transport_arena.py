"""Attacks on batches gathered in place (``WorkerCollate.arena``): every batch a worker loader
delivers, in order, equals the 0-worker loader's, bit for bit, and no slot stays busy."""

from __future__ import annotations

import gc
import os
import pickle

import numpy as np
import pyarrow as pa
import pytest
import torch

import resumable_data as rd
from resumable_data.loader import transport
from tests.loader.test_transport import _mine, exact, fresh_ring  # noqa: F401 (autouse: a fresh ring per test)


@pytest.fixture
def claims(monkeypatch):
    """``(kept, spilled)``: batches forked workers sent from their arena, and those they did not."""
    import multiprocessing as mp

    kept, spilled = mp.get_context("fork").Value("i", 0), mp.get_context("fork").Value("i", 0)
    real = transport._Arena.claim

    def counted(self, raws):
        got = real(self, raws)
        with (kept if got is not None else spilled).get_lock():
            (kept if got is not None else spilled).value += 1
        return got

    monkeypatch.setattr(transport._Arena, "claim", counted)
    return kept, spilled




def _long_rows(root, rows=200, lo=9_000, hi=12_000, seed=0):
    """Records whose token list alone is over SLOT_MIN_BYTES (int64), with a scalar column."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(lo, hi, rows)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    tokens = pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(0, 1 << 40, offsets[-1])))
    table = pa.table({"tokens": tokens, "id": pa.array(np.arange(rows, dtype=np.int64))})
    rd.write_arrow_shards(table, root, num_shards=2)
    rd.pin(root)
    return rd.ArrowShards(root)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_unbatched_records_through_workers(tmp_path, context, claims):
    # batch_size=None: each batch is one record, its scalar column a numpy scalar, so the batch is
    # pickled (its buffers memoryviews), while an arena may be pending
    src = _long_rows(tmp_path / "ds", rows=60)
    make = lambda w: rd.DataLoader(src, batch_size=None, shuffle=True, seed=2, num_workers=w,
                                   multiprocessing_context=context if w else None)
    assert [exact(b) for b in make(2)] == [exact(b) for b in make(0)]
    assert context == "spawn" or claims[0].value > 20  # sent from where they were gathered


def test_a_list_column_empty_in_every_row_of_a_batch(tmp_path, claims):
    # a [B, 0] padded array has no bytes: the batch is pickled while its arena is pending
    rng = np.random.default_rng(1)
    rows = 120
    lengths = rng.integers(4_000, 6_000, rows)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    tokens = pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(0, 1 << 40, offsets[-1])))
    empty = pa.array([[] for _ in range(rows)], type=pa.list_(pa.int32()))
    table = pa.table({"tokens": tokens, "labels": empty, "id": pa.array(np.arange(rows, dtype=np.int64))})
    rd.write_arrow_shards(table, tmp_path / "ds", num_shards=2)
    rd.pin(tmp_path / "ds")
    src = rd.ArrowShards(tmp_path / "ds")
    make = lambda w: rd.DataLoader(src, batch_size=4, shuffle=True, seed=5, num_workers=w,
                                   multiprocessing_context="fork" if w else None)
    ref = [exact(b) for b in make(0)]
    assert ref[0][1]["labels"][2] == (4, 0)
    assert [exact(b) for b in make(2)] == ref
    assert claims[0].value > 20


def _growing(root, rows=160, seed=3):
    """Token lists whose length grows with the record id: read in order, each batch is larger
    than any before (its arrays do not fit the arena sized by the last one)."""
    rng = np.random.default_rng(seed)
    lengths = 2_000 + 40 * np.arange(rows) + rng.integers(0, 30, rows)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    tokens = pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(0, 1 << 30, offsets[-1]).astype(np.int32)))
    table = pa.table({"tokens": tokens, "id": pa.array(np.arange(rows, dtype=np.int64)),
                      "keep": pa.array(rng.integers(0, 2, rows).astype(bool))})
    rd.write_arrow_shards(table, root, num_shards=2)
    rd.pin(root)
    return rd.ArrowShards(root)


def _stale_generations() -> list[str]:
    """Names in /dev/shm of this process's slots that an older generation left: the main process
    mapped (and unlinked) a newer one, or a newer one is there too."""
    newest: dict[tuple[int, int], int] = {k: gen for k, (_, gen, _) in transport._attached.items()}
    names = [(tuple(int(x) for x in n.rsplit("/rd", 1)[1].split("_")[1:]), n) for n in _mine()]
    for (pid, index, gen), _ in names:
        newest[pid, index] = max(gen, newest.get((pid, index), -1))
    return [n for (pid, index, gen), n in names if gen < newest[pid, index]]


@pytest.mark.parametrize("shuffle", [False, True])
def test_batches_that_grow_arrive_exact(tmp_path, shuffle, claims):
    src = _growing(tmp_path / "ds", rows=400)
    make = lambda w, **kw: rd.DataLoader(src, batch_size=6, shuffle=shuffle, seed=8, num_workers=w,
                                         multiprocessing_context="fork" if w else None, **kw)
    zero = make(0)
    ref = [[exact(b) for b in zero] for _ in range(2)]
    loader = make(2, persistent_workers=True)
    for want in ref:
        assert [exact(b) for b in loader] == want
        gc.collect()
        assert not _stale_generations()  # an arena's slot regrown before it sent a batch: its old name unlinked
    assert claims[0].value > 0 and (shuffle or claims[1].value > 0)  # in order, some outgrow their arena
    del loader
    gc.collect()
    assert not _mine()


def _mapped_busy() -> list[str]:
    """Slots this process maps whose busy byte is set (no batch of them should be alive)."""
    gc.collect()
    return [shm.name for _, _, shm in transport._attached.values() if shm.buf is not None and shm.view[0]]


def test_persistent_workers_across_passes_and_a_resume_holding_every_batch(tmp_path):
    src = _token_rows(tmp_path / "ds")
    make = lambda w, **kw: rd.DataLoader(src, batch_size=16, shuffle=True, seed=3, num_workers=w,
                                         multiprocessing_context="fork" if w else None, **kw)
    zero = make(0)
    ref = [[exact(b) for b in zero] for _ in range(2)]
    assert ref[0] != ref[1] and len(ref[0]) > 2 * (transport.MAX_SLOTS + 8)
    loader = make(2, persistent_workers=True)
    held = list(loader)  # more batches alive than slots: the rest go inline, none is overwritten
    assert [exact(b) for b in held] == ref[0]
    del held
    assert not _mapped_busy()
    it = iter(loader)
    head = [exact(next(it)) for _ in range(11)]
    state = loader.state_dict()
    del it
    loader.load_state_dict(state)  # the same persistent workers go on from the cursor
    assert head + [exact(b) for b in loader] == ref[1]
    assert not _mapped_busy()
    resumed = make(2, persistent_workers=True)
    resumed.load_state_dict(state)
    assert head + [exact(b) for b in resumed] == ref[1]
    assert [exact(b) for b in resumed] == [exact(b) for b in zero]  # the third pass too
    del loader, resumed
    gc.collect()
    assert not _mine()


def _token_rows(root, rows=1_200, seed=4):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(600, 1_400, rows)  # 16 rows: about 64-90 KB of int32 tokens
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    tokens = pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(0, 50_000, offsets[-1]).astype(np.int32)))
    table = pa.table({"tokens": tokens, "id": pa.array(np.arange(rows, dtype=np.int64))})
    rd.write_arrow_shards(table, root, num_shards=3)
    rd.pin(root)
    return rd.ArrowShards(root)


_BAD = [-1]  # the first record id of the batch that fails after its gather (set before the fork)


def _fails_after_gathering(real):
    def take_numpy(self, record_ids, pad_value=0, alloc=None):
        out = real(self, record_ids, pad_value, alloc)  # arrays carved from the arena, then the error
        if int(np.asarray(record_ids)[0]) == _BAD[0]:
            raise ValueError(f"bad batch starting at id {_BAD[0]}")
        return out

    return take_numpy


def _outcomes(loader):
    it, out = iter(loader), []
    while True:
        try:
            out.append(exact(next(it)))
        except StopIteration:
            return out
        except ValueError as e:
            out.append(("error", type(e).__name__))


@pytest.mark.parametrize("failing_step,timeout", [(1, 0), (6, 0), (3, 60)])  # timeout: one step a request
def test_a_step_failing_after_its_gather(tmp_path, monkeypatch, claims, failing_step, timeout):
    src = _growing(tmp_path / "ds")
    make = lambda w: rd.DataLoader(src, batch_size=6, num_workers=w, timeout=timeout if w else 0,
                                   multiprocessing_context="fork" if w else None)
    bad = int([b["id"][0] for b in make(0)][failing_step])
    monkeypatch.setattr(rd.ArrowShards, "take_numpy", _fails_after_gathering(rd.ArrowShards.take_numpy))
    _BAD[0] = bad
    try:
        ref = _outcomes(make(0))
        assert ref[failing_step] == ("error", "ValueError")
        assert _outcomes(make(2)) == ref
        assert claims[0].value > 0
    finally:
        _BAD[0] = -1


@pytest.mark.parametrize("every", [1, 2])
def test_no_room_in_dev_shm(tmp_path, monkeypatch, claims, every):
    src = _token_rows(tmp_path / "ds", rows=400)
    real, calls = transport._create, []

    def create(name, size):
        calls.append(name)
        if len(calls) % every == 0:
            raise OSError(28, "No space left on device")
        return real(name, size)

    monkeypatch.setattr(transport, "_create", create)  # forked workers inherit it
    make = lambda w: rd.DataLoader(src, batch_size=16, shuffle=True, seed=1, num_workers=w,
                                   multiprocessing_context="fork" if w else None)
    assert [exact(b) for b in make(2)] == [exact(b) for b in make(0)]
    assert (claims[0].value > 0) == (every == 2)  # no slot at all: every batch inline
    gc.collect()


def test_a_mixture_through_workers(tmp_path, claims):
    a, b = _token_rows(tmp_path / "a", rows=500, seed=1), _token_rows(tmp_path / "b", rows=300, seed=9)
    make = lambda w: rd.DataLoader(rd.Mixture({"a": a, "b": b}, weights={"a": 0.6, "b": 0.4}, block_size=32),
                                   batch_size=16, seed=2, num_workers=w, multiprocessing_context="fork" if w else None)
    assert [exact(b) for b in make(2)] == [exact(b) for b in make(0)]
    assert claims[0].value > 0


@pytest.mark.filterwarnings("ignore:.*pin_memory.*")
def test_pin_memory_through_workers(tmp_path):
    src = _token_rows(tmp_path / "ds", rows=400)
    make = lambda w: rd.DataLoader(src, batch_size=16, shuffle=True, seed=1, num_workers=w, pin_memory=True,
                                   multiprocessing_context="fork" if w else None)
    assert [exact(b) for b in make(2)] == [exact(b) for b in make(0)]


def test_spawned_persistent_workers_resume(tmp_path):
    src = _token_rows(tmp_path / "ds", rows=500)
    make = lambda w, **kw: rd.DataLoader(src, batch_size=16, shuffle=True, seed=5, num_workers=w,
                                         multiprocessing_context="spawn" if w else None, **kw)
    zero = make(0)
    ref = [[exact(b) for b in zero] for _ in range(2)]
    loader = make(2, persistent_workers=True)
    assert [exact(b) for b in loader] == ref[0]
    it = iter(loader)
    head = [exact(next(it)) for _ in range(5)]
    state = loader.state_dict()
    del it
    loader.load_state_dict(state)
    assert head + [exact(b) for b in loader] == ref[1]


def _die_after_claiming(real):
    armed = []  # per process: worker 0 arms the kill once, then claims nothing more

    def claim(self, raws):
        if armed:
            import time

            time.sleep(60)
        got = real(self, raws)
        if got is not None and torch.utils.data.get_worker_info().id == 0:
            import signal
            import threading

            armed.append(True)  # SIGKILL this worker just after a batch gathered in place is on its way
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGKILL)).start()
        return got

    return claim


def test_a_worker_killed_mid_pass_after_gathering_in_place(tmp_path, monkeypatch):
    src = _token_rows(tmp_path / "ds")
    make = lambda w: rd.DataLoader(src, batch_size=16, shuffle=True, seed=6, num_workers=w,
                                   multiprocessing_context="fork" if w else None)
    ref = [exact(b) for b in make(0)]
    monkeypatch.setattr(transport._Arena, "claim", _die_after_claiming(transport._Arena.claim))
    loader, got = make(2), []
    with pytest.raises(rd.WorkerError):
        for b in loader:
            got.append(exact(b))
    assert got == ref[:len(got)] and len(got) < len(ref)
    state = loader.state_dict()
    monkeypatch.undo()
    resumed = make(2)
    resumed.load_state_dict(state)
    assert got + [exact(b) for b in resumed] == ref
    del loader, resumed
    gc.collect()
    assert not _mine()


def test_regrowing_a_free_slot_whose_array_is_still_alive(monkeypatch):
    # an array carved from an arena that was given back (its gather raised) may still be alive in
    # the worker (a traceback holding it): the slot then cannot be closed, and a batch that needs
    # a larger slot must still be sent, without leaving a segment behind
    monkeypatch.setattr(transport, "get_worker_info", lambda: object())
    transport._worker_ring(os.getpid()).largest = 70_000
    collate = transport.WorkerCollate()
    arena = collate.arena()
    alive = arena.alloc((1000,), np.dtype(np.int64))
    arena.release()
    batch = {"x": np.arange(300_000, dtype=np.int64)}
    _, wire, _, _ = collate((0, batch, 0, 0))
    assert exact(pickle.loads(pickle.dumps(wire))) == exact(batch)
    alive[...] = 1  # still its own
    assert wire.args[4:6] == (arena.index, arena.gen + 1)  # the slot grew into its next generation
    assert not _mine()  # the new name was mapped and unlinked, the old one (never sent) unlinked
    del alive, wire
    gc.collect()
    arena = collate.arena()  # the slot can grow now
    assert arena.shm.size >= 300_000 * 8
    transport._release_pending()


def _typed(rows=4_000, seed=7):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 40, rows)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.table({
        "i8": pa.array(rng.integers(-128, 128, rows).astype(np.int8)),
        "u16": pa.array(rng.integers(0, 1 << 16, rows).astype(np.uint16)),
        "f16": pa.array(rng.standard_normal(rows).astype(np.float16)),
        "f64": pa.array(rng.standard_normal(rows)),
        "flag": pa.array(rng.integers(0, 2, rows).astype(bool)),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.integers(-999, 999, rows * 96).astype(np.int16)), 96),
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(rows * 48).astype(np.float32)), 48),
        "ragged": pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.standard_normal(offsets[-1]).astype(np.float32))),
    })


@pytest.mark.parametrize("storage", ["arrow", "parquet"])
def test_every_numeric_layout_through_workers(tmp_path, claims, storage):
    table, root = _typed(), tmp_path / "ds"
    if storage == "arrow":
        rd.write_arrow_shards(table, root, num_shards=3)
    else:
        import pyarrow.parquet as pq

        root.mkdir()
        pq.write_table(table.slice(0, 2_500), root / "part-0.parquet", row_group_size=500)
        pq.write_table(table.slice(2_500), root / "part-1.parquet", row_group_size=500)
    rd.pin(root)
    src = rd.ArrowShards(root)
    make = lambda w: rd.DataLoader(src, batch_size=200, shuffle=True, seed=4, num_workers=w,
                                   multiprocessing_context="fork" if w else None)
    ref = [exact(b) for b in make(0)]
    assert {k: v[1] for k, v in ref[0][1].items()}["vec"] == "torch.int16"
    assert [exact(b) for b in make(2)] == ref
    assert claims[0].value > 0


def test_parquet_row_groups_with_and_without_nulls(tmp_path):
    # take_numpy answers None (a column with nulls): each batch's arena is given back and the
    # batch is made from Arrow
    import pyarrow.parquet as pq

    table, root = _typed(), tmp_path / "ds"
    values = table["u16"].to_numpy().astype(np.int64)
    nullable = pa.array(values, mask=(np.arange(len(values)) >= 3_500) & (values % 5 == 0))
    table = table.set_column(1, "u16", nullable)
    root.mkdir()
    pq.write_table(table, root / "part-0.parquet", row_group_size=500)
    rd.pin(root)
    src = rd.ArrowShards(root)
    make = lambda w: rd.DataLoader(src, batch_size=200, num_workers=w, multiprocessing_context="fork" if w else None)
    ref = [exact(b) for b in make(0)]
    assert ref[-1][1]["u16"][0] == "list" and ref[0][1]["u16"][0] == "tensor"
    assert [exact(b) for b in make(2)] == ref


def _token_shards(root, rows=3_000, seed=4):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(150, 400, rows)  # 64 rows: 38-102 KB of tokens, over SLOT_MIN_BYTES mostly
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    tokens = pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(0, 50_000, offsets[-1]).astype(np.int32)))
    table = pa.table({"tokens": tokens, "id": pa.array(np.arange(rows, dtype=np.int64)),
                      "keep": pa.array(rng.integers(0, 2, rows).astype(bool))})
    rd.write_arrow_shards(table, root, num_shards=3)
    rd.pin(root)
    return rd.ArrowShards(root)


def test_workers_gather_in_place_and_deliver_every_batch_as_in_process(tmp_path, claims):
    src = _token_shards(tmp_path / "ds")
    kept = claims[0]
    make = lambda w, **kw: rd.DataLoader(src, batch_size=64, shuffle=True, seed=3, num_workers=w,
                                         multiprocessing_context="fork" if w else None, **kw)
    ref = [exact(b) for b in make(0)]
    got = [exact(b) for b in make(2)]
    assert got == ref and len(ref) == 47
    assert kept.value > 20  # most batches were sent from where they were gathered
    loader = make(2, persistent_workers=True)
    it = iter(loader)
    head = [exact(next(it)) for _ in range(9)]
    state = loader.state_dict()
    del it, loader
    resumed = make(2)
    resumed.load_state_dict(state)
    assert head + [exact(b) for b in resumed] == ref  # every remaining batch, in order


def test_spawned_workers_gather_in_place_too(tmp_path):
    src = _token_shards(tmp_path / "ds", rows=1_000, seed=6)
    make = lambda w: rd.DataLoader(src, batch_size=64, shuffle=True, seed=1, num_workers=w,
                                   multiprocessing_context="spawn" if w else None)
    assert [exact(b) for b in make(2)] == [exact(b) for b in make(0)]
