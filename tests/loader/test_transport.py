"""The worker-to-main transport (``loader/transport.py``): batches rebuilt bit for bit, slots
reused only after a delivered batch dies, inline fallbacks, a lost slot as rd.WorkerError, and
no shared memory left behind once a loader is gone."""

from __future__ import annotations

import gc
import glob
import os
import pickle

import numpy as np
import pyarrow as pa
import pytest
import torch

import resumable_data as rd
from resumable_data.loader import transport
from tests.loader.conftest import canon


def _mine() -> list[str]:
    return sorted(glob.glob(f"/dev/shm/rd{os.getpid()}_*"))


def _roundtrip(batch):
    """What the main process rebuilds from ``pack(batch)`` (worker and main are this process)."""
    return pickle.loads(pickle.dumps(transport.pack(batch, os.getpid())))


def exact(a):
    """``canon`` that also tells tensors from arrays and keeps bfloat16 bytes."""
    if isinstance(a, torch.Tensor):
        return ("tensor", str(a.dtype), tuple(a.shape), a.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    if isinstance(a, np.ndarray):
        return ("ndarray", str(a.dtype), a.shape, a.tobytes() if a.dtype != object else a.tolist())
    if isinstance(a, dict):
        return (type(a).__name__, {k: exact(v) for k, v in a.items()})
    if isinstance(a, (list, tuple)):
        return (type(a).__name__, [exact(v) for v in a])
    return (type(a).__name__, a)


@pytest.fixture(autouse=True)
def fresh_ring():
    transport._ring = None
    yield
    transport._ring = None
    gc.collect()
    transport.forget([os.getpid()])


MIXED = {
    "small": torch.arange(5, dtype=torch.int16),
    "bf16": torch.linspace(-3, 3, 40).to(torch.bfloat16),
    "bool": torch.tensor([True, False, True]),
    "scalar": torch.tensor(7.5),
    "empty": torch.zeros(0, 3),
    "strided": torch.arange(24).reshape(4, 6)[:, ::2],  # not contiguous: torch's own reduction
    "np": np.arange(12, dtype=np.float32).reshape(3, 4),
    "np_f": np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3)),
    "np_obj": np.array(["a", None, 3], dtype=object),
    "nested": [{"x": torch.ones(2, 2, dtype=torch.complex64)}, ("text", 3, None)],
}


@pytest.mark.parametrize("scale", [1, 40_000], ids=["inline", "slot"])
def test_roundtrip_is_bit_identical(scale):
    batch = dict(MIXED, big=torch.arange(scale, dtype=torch.float64), big_np=np.arange(scale, dtype=np.uint8))
    wire = transport.pack(batch, os.getpid())
    assert (wire.rebuild is transport._from_slot) == (scale > 1)  # 320 KB take a slot, 30 bytes do not
    got = pickle.loads(pickle.dumps(wire))
    assert exact(got) == exact(batch)
    assert got["big"].untyped_storage().data_ptr() != batch["big"].untyped_storage().data_ptr()
    got["big"].add_(1)  # writable, and owned by the main side alone
    assert batch["big"][0].item() == 0.0


def test_a_slot_is_reused_only_after_the_delivered_batch_dies():
    make = lambda v: {"x": torch.full((50_000,), v, dtype=torch.int32)}  # 200 KB: a slot
    first = _roundtrip(make(1))
    ring = transport._ring
    assert len(ring.slots) == 1
    second = _roundtrip(make(2))  # the first batch is alive: its slot must not be overwritten
    assert len(ring.slots) == 2
    assert torch.equal(first["x"], torch.full((50_000,), 1, dtype=torch.int32))
    view = first["x"][10:20]  # a view keeps the slot busy too
    del first
    gc.collect()
    third = _roundtrip(make(3))
    assert len(ring.slots) == 3 and torch.all(view == 1)
    del view, second
    gc.collect()
    _roundtrip(make(4))  # slots 0 and 1 are free again: no new segment
    assert len(ring.slots) == 3 and torch.all(third["x"] == 3)


def test_a_free_slot_too_small_grows_into_a_new_generation():
    _roundtrip({"x": np.zeros(70_000, dtype=np.uint8)})
    gc.collect()
    got = _roundtrip({"x": np.arange(300_000, dtype=np.int64)})
    gen, shm = transport._ring.slots[0]
    assert len(transport._ring.slots) == 1 and gen == 1 and shm.size >= 300_000 * 8
    assert np.array_equal(got["x"], np.arange(300_000, dtype=np.int64))


def test_all_slots_busy_sends_inline(monkeypatch):
    monkeypatch.setattr(transport, "MAX_SLOTS", 2)
    kept = [_roundtrip({"x": np.full(20_000, i, dtype=np.int64)}) for i in range(2)]
    wire = transport.pack({"x": np.full(20_000, 9, dtype=np.int64)}, os.getpid())
    assert wire.rebuild is transport._from_inline
    assert np.all(pickle.loads(pickle.dumps(wire))["x"] == 9) and [int(k["x"][0]) for k in kept] == [0, 1]


def test_no_room_for_a_slot_sends_inline(monkeypatch):
    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(transport, "_create", full)
    wire = transport.pack({"x": np.ones(100_000)}, os.getpid())
    assert wire.rebuild is transport._from_inline


def test_a_lost_slot_is_a_connection_error():
    wire = transport.pack({"x": np.ones(100_000)}, os.getpid())
    data = pickle.dumps(wire)
    name = wire.args[1]
    transport.forget([os.getpid()])  # as if its worker died and the pool's leftovers were swept
    assert not _mine()
    with pytest.raises(ConnectionError, match=name):
        pickle.loads(data)


def test_an_unpicklable_batch_raises_in_the_worker_thread():
    with pytest.raises((TypeError, AttributeError, pickle.PicklingError)):
        transport.pack({"f": lambda: 1}, os.getpid())


# -- through rd.DataLoader ---------------------------------------------------------------------
def stack_numpy(samples):
    """A collate whose batch is numpy (torch's default_collate puts tensors in shared memory
    itself, and those keep torch's path)."""
    return {"img": np.stack([s["img"].numpy() for s in samples]), "label": [s["label"] for s in samples],
            "np": np.stack([s["np"] for s in samples]), "aug": torch.cat([s["aug"] for s in samples])}


class Wide(torch.utils.data.Dataset):
    """Samples big enough that a batch takes a slot, and of several kinds."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"img": torch.rand(3, 32, 32, generator=g), "label": i, "np": np.full(5, i, dtype=np.int16),
                "aug": torch.rand(1)}


@pytest.mark.parametrize("source", ["arrow", "map", "map-numpy"])
def test_zero_and_two_workers_deliver_identical_batches(source, shards):
    if source == "arrow":
        make = lambda w: rd.DataLoader(shards, batch_size=32, shuffle=True, seed=5, num_workers=w)
    else:
        fn = stack_numpy if source == "map-numpy" else None
        make = lambda w: rd.DataLoader(Wide(), batch_size=8, shuffle=True, seed=5, num_workers=w, collate_fn=fn)
    ref = [exact(b) for b in make(0)]
    got = [exact(b) for b in make(2)]
    assert got == ref and len(ref) >= 4


def test_resume_with_workers_is_exact(shards):
    make = lambda: rd.DataLoader(shards, batch_size=16, shuffle=True, seed=2, num_workers=2, persistent_workers=True)
    ref = [canon(b) for b in make()]
    loader = make()
    it = iter(loader)
    head = [canon(next(it)) for _ in range(4)]
    state = loader.state_dict()
    del it, loader
    resumed = make()
    resumed.load_state_dict(state)
    assert head + [canon(b) for b in resumed] == ref


@pytest.mark.parametrize("persistent", [False, True])
def test_slots_are_unlinked_and_unmapped_once_the_loader_is_gone(persistent):
    loader = rd.DataLoader(Wide(), batch_size=8, num_workers=2, persistent_workers=persistent, collate_fn=stack_numpy)
    it = iter(loader)
    batches = [next(it) for _ in range(3)]
    assert batches[0]["img"].shape == (8, 3, 32, 32)
    pids = {w.pid for w in it._workers}
    assert {k[0] for k in transport._attached} & pids, "the batches did not travel through slots"
    mapped = {transport.slot_name(os.getpid(), pid, i, gen) for (pid, i), (_, gen, _) in transport._attached.items()}
    assert not {os.path.basename(p) for p in _mine()} & mapped  # a name is unlinked once it is mapped
    rest = list(it)
    if not persistent:  # the pass ended: its pool is gone, and so are its mappings
        assert not {k[0] for k in transport._attached} & pids
    del it, loader
    gc.collect()
    assert not {k[0] for k in transport._attached} & pids and not _mine()
    assert np.array_equal(batches[1]["np"][:, 0], np.array([8, 9, 10, 11, 12, 13, 14, 15]))  # still readable
    assert len(rest) == 2


def _lose_the_slot(real):
    def pack(batch, main_pid, pool=0, max_slots=None):
        wire = real(batch, main_pid, pool, max_slots)
        if wire.rebuild is transport._from_slot and torch.utils.data.get_worker_info().id == 0:
            from multiprocessing import shared_memory

            shared_memory.SharedMemory(wire.args[1]).unlink()  # gone before the main process maps it
        return wire
    return pack


def test_a_batch_whose_slot_is_lost_in_transfer_is_a_worker_error(monkeypatch):
    monkeypatch.setattr(transport, "pack", _lose_the_slot(transport.pack))  # forked workers inherit it
    loader = rd.DataLoader(Wide(), batch_size=8, num_workers=2, collate_fn=stack_numpy)
    it = iter(loader)
    with pytest.raises(rd.WorkerError, match="died while passing a batch"):
        next(it)
    assert loader.cursor.delivered == 0
    monkeypatch.undo()
    assert [exact(b) for b in loader] == [exact(b) for b in rd.DataLoader(Wide(), batch_size=8, collate_fn=stack_numpy)]
    del it, loader
    gc.collect()
    assert not _mine()


def test_arrow_batches_through_slots_keep_their_types(tmp_path):
    table = pa.table({"f": pa.array(np.linspace(0, 1, 4000, dtype=np.float32)),
                      "ids": pa.array([list(range(i % 50)) for i in range(4000)], type=pa.list_(pa.int64()))})
    rd.write_arrow_shards(table, tmp_path, num_shards=2, rows_per_batch=1024)
    rd.pin(tmp_path)
    src = rd.ArrowShards(tmp_path)
    make = lambda w: rd.DataLoader(src, batch_size=512, num_workers=w)
    assert [exact(b) for b in make(2)] == [exact(b) for b in make(0)]


def _die_after_packing(real):
    armed = []  # per process (each worker has its copy): worker 0 arms the kill once

    def pack(batch, main_pid, pool=0, max_slots=None):
        if armed:
            # the kill is armed: this worker packs nothing more, so it dies while the loader still
            # waits for its batches, however fast the epoch would otherwise end (it used to finish
            # within the 50 ms on a fast run, and the test saw no WorkerError)
            import time

            time.sleep(60)
        wire = real(batch, main_pid, pool, max_slots)
        info = torch.utils.data.get_worker_info()
        if wire.rebuild is transport._from_slot and info.id == 0:
            import signal
            import threading

            # SIGKILL this worker just after its batch is in a slot and (likely) in the pipe
            armed.append(True)
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGKILL)).start()
        return wire
    return pack


class Long(Wide):
    def __len__(self):
        return 400


def test_a_worker_killed_mid_transfer_is_a_worker_error_and_leaves_no_slot(monkeypatch):
    monkeypatch.setattr(transport, "pack", _die_after_packing(transport.pack))
    loader = rd.DataLoader(Long(), batch_size=8, num_workers=2, collate_fn=stack_numpy,
                           dataset_version="long-v1")
    ref = [exact(b) for b in rd.DataLoader(Long(), batch_size=8, collate_fn=stack_numpy, dataset_version="long-v1")]
    got = []
    with pytest.raises(rd.WorkerError):
        for b in loader:
            got.append(exact(b))
    assert got == ref[:len(got)] and len(got) < len(ref)  # what was delivered is right, in order
    state = loader.state_dict()
    monkeypatch.undo()
    resumed = rd.DataLoader(Long(), batch_size=8, collate_fn=stack_numpy, dataset_version="long-v1")
    resumed.load_state_dict(state)
    assert got + [exact(b) for b in resumed] == ref  # resumes at the first batch the loop did not see
    del loader
    gc.collect()
    assert not _mine()


@pytest.mark.parametrize("scale", [16, 40_000], ids=["inline", "slot"])
def test_one_object_under_two_keys_arrives_as_one_object(scale):
    x, t = np.arange(scale, dtype=np.float32), torch.arange(scale, dtype=torch.int64)
    got = _roundtrip({"input_ids": x, "labels": x, "t": t, "other": x.copy(), "t2": t})
    assert list(got) == ["input_ids", "labels", "t", "other", "t2"]
    assert got["labels"] is got["input_ids"] and got["t2"] is got["t"]  # as at 0 workers and in torch's pickle
    assert got["other"] is not got["input_ids"] and not np.shares_memory(got["other"], got["input_ids"])
    assert exact(got) == exact({"input_ids": x, "labels": x, "t": t, "other": x, "t2": t})
    wire = transport.pack({"input_ids": x, "labels": x}, os.getpid())
    if scale > 16:  # the payload travels once
        assert wire.args[6] == transport._aligned(x.nbytes)


def test_aliases_arrive_as_one_object_through_two_workers():
    class Ds(torch.utils.data.Dataset):
        def __len__(self):
            return 16

        def __getitem__(self, i):
            return i

    def collate(items):
        x = np.zeros((len(items), 32768), np.float32)
        return {"input_ids": x, "labels": x}

    dl = rd.DataLoader(Ds(), batch_size=4, seed=1, dataset_version="v", collate_fn=collate, num_workers=2)
    for b in dl:
        assert b["labels"] is b["input_ids"]


def test_a_new_worker_that_reuses_an_old_workers_pid_never_gets_its_mapping():
    make = lambda v: {"x": np.full(50_000, v, dtype=np.int32)}  # 200 KB: slot 0, generation 0
    first = transport.pack(make(1), os.getpid(), pool=1)
    got = pickle.loads(pickle.dumps(first))
    assert (got["x"] == 1).all()
    transport._ring = None  # a new worker of a new pool, same pid, before forget() ran
    second = transport.pack(make(2), os.getpid(), pool=2)
    assert second.args[1] == first.args[1]  # the very same slot name (the old one was unlinked)
    again = pickle.loads(pickle.dumps(second))
    assert (again["x"] == 2).all() and (got["x"] == 1).all()
    assert not np.shares_memory(again["x"], got["x"])


def test_each_pass_with_workers_gets_a_new_pool_number():
    collate = transport.WorkerCollate()
    collate.new_pool()
    first = collate.pool
    collate.new_pool()
    assert collate.pool == first + 1 and collate.main_pid == os.getpid()


class Nested(torch.utils.data.Dataset):
    """Samples that are nested tensors (torch's test_nested_tensor_multiprocessing_context_*)."""

    def __init__(self, layout):
        self.layout = layout

    def __len__(self):
        return 8

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        parts = [torch.randn(i % 3 + 1, 5, generator=g), torch.randn(2, 5, generator=g)]
        return torch.nested.nested_tensor(parts, layout=self.layout)


def _clone_collate(batch):
    return [x.clone() for x in batch]


def _unbind(x):
    return [exact(t) for t in x.unbind()]


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("context,layout,batch_size", [
    ("fork", torch.strided, None), ("fork", torch.strided, 1), ("fork", torch.jagged, None), ("fork", torch.jagged, 1),
    ("spawn", torch.strided, None), ("spawn", torch.jagged, 1),  # spawn costs seconds per worker start
], ids=["fork-strided-None", "fork-strided-1", "fork-jagged-None", "fork-jagged-1", "spawn-strided-None",
        "spawn-jagged-1"])
def test_nested_tensor_samples_through_two_workers(context, layout, batch_size):
    ds = Nested(layout)
    kw = {"collate_fn": _clone_collate} if batch_size else {}
    loader = rd.DataLoader(ds, batch_size=batch_size, num_workers=2, multiprocessing_context=context, **kw)
    got = list(loader)
    assert len(got) == len(ds)
    for i, b in enumerate(got):
        x = b if batch_size is None else b[0]
        assert x.is_nested and x.layout is layout
        assert _unbind(x) == _unbind(ds[i])


# -- batches gathered in place (WorkerCollate.arena) ---------------------------------------------
@pytest.fixture
def as_worker(monkeypatch):
    """This process acting as a worker for WorkerCollate (its batches packed, arenas handed out)."""
    monkeypatch.setattr(transport, "get_worker_info", lambda: object())
    yield
    transport._release_pending()


def test_no_arena_before_the_first_batch_nor_for_small_batches(as_worker):
    collate = transport.WorkerCollate()
    assert collate.arena() is None  # nothing packed yet: the size is unknown
    transport.pack({"x": np.zeros(1_000, dtype=np.uint8)}, os.getpid())
    assert collate.arena() is None  # batches under SLOT_MIN_BYTES travel inline
    transport.pack({"x": np.zeros(100_000, dtype=np.uint8)}, os.getpid())
    arena = collate.arena()
    assert arena is not None and arena.shm.size >= 100_000 + transport._HEADER


def test_a_batch_gathered_in_its_arena_travels_from_it_without_a_copy(as_worker):
    from resumable_data.loader.fetch import NumpyBatch

    transport._worker_ring(os.getpid()).largest = 300_000
    collate = transport.WorkerCollate()
    arena = collate.arena()
    x = arena.alloc((256, 250), np.dtype(np.int32))
    x[...] = np.arange(x.size, dtype=np.int32).reshape(x.shape)
    lengths = arena.alloc((256,), np.dtype(np.int64))
    lengths[...] = np.arange(256) * 3
    flags = arena.alloc((256,), np.dtype(np.bool_))
    flags[...] = np.arange(256) % 3 == 0
    base = arena.shm.address
    where = [a.__array_interface__["data"][0] - base for a in (x, lengths, flags)]
    assert where[0] == transport._HEADER and all(w % 64 == 0 for w in where)
    batch = NumpyBatch(x=x, lengths=lengths, flags=flags)
    step, wire, tokens, samples = collate((3, batch, 7, 256))
    assert (step, tokens, samples) == (3, 7, 256)
    header, name, pid, pool, index, gen, total, offsets = wire.args
    assert wire.rebuild is transport._from_slot and (name, index, gen) == (arena.shm.name, arena.index, arena.gen)
    assert [a for a, _ in offsets] == where  # the payloads' own places: nothing was copied
    assert transport._worker_ring(os.getpid()).pending == [] and arena.shm.view[0] == transport._BUSY  # busy until the main side is done
    got = pickle.loads(pickle.dumps(wire))
    assert exact(got) == exact(batch)
    del got
    gc.collect()
    assert arena.shm.view[0] == transport._FREE


def test_an_array_that_does_not_fit_sends_the_batch_the_usual_way_and_frees_the_arena(as_worker):
    transport._worker_ring(os.getpid()).largest = 70_000
    collate = transport.WorkerCollate()
    arena = collate.arena()
    small = arena.alloc((100,), np.dtype(np.int64))  # in the slot
    big = arena.alloc((arena.shm.size,), np.dtype(np.uint8))  # larger than the slot: a fresh array
    assert small.__array_interface__["data"][0] - arena.shm.address == transport._HEADER
    assert not (0 <= big.__array_interface__["data"][0] - arena.shm.address < arena.shm.size)
    small[...], big[...] = 5, 9
    batch = {"small": small, "big": big}
    _, wire, _, _ = collate((0, batch, 0, 0))
    assert wire.args[1] != arena.shm.name  # copied into another slot
    assert transport._worker_ring(os.getpid()).pending == [] and arena.shm.view[0] == transport._FREE
    assert exact(pickle.loads(pickle.dumps(wire))) == exact(batch)
    assert transport._worker_ring(os.getpid()).largest >= big.nbytes  # the next arena is large enough


def test_no_arena_when_no_slot_can_be_had(as_worker, monkeypatch):
    """A full /dev/shm or every slot busy: no arena, the gather makes fresh arrays (packed as before)."""
    transport._worker_ring(os.getpid()).largest = 100_000

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(transport, "_create", full)
    assert transport.WorkerCollate().arena() is None
    monkeypatch.undo()  # the fixture's patches too: set again
    monkeypatch.setattr(transport, "get_worker_info", lambda: object())
    transport._worker_ring(os.getpid()).largest = 100_000
    monkeypatch.setattr(transport, "MAX_SLOTS", 1)
    first = transport.WorkerCollate().arena()
    assert first is not None and transport.WorkerCollate().arena() is None  # the one slot is busy
    assert transport._worker_ring(os.getpid()).pending == [first]


def _report_sizes(out):
    out.put((transport._worker_ring(os.getpid()).largest, len(transport._worker_ring(os.getpid()).pending)))


def test_a_forked_worker_starts_from_its_own_batches(as_worker):
    """What the parent packed (a test, a process that forks a pool of its own) never sizes a forked
    child's arenas: the child starts with no batch packed and no arena pending."""
    import multiprocessing as mp

    transport.pack({"x": np.zeros(3_000_000, dtype=np.uint8)}, os.getpid())
    transport._worker_ring(os.getpid()).largest = 3_000_000
    assert transport.WorkerCollate().arena() is not None and transport._worker_ring(os.getpid()).pending
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_report_sizes, args=(q,))
    p.start()
    got = q.get(timeout=60)
    p.join(60)
    assert got == (0, 0)


def test_a_released_arena_frees_its_slot_and_carves_nothing_more(as_worker):
    transport._worker_ring(os.getpid()).largest = 100_000
    arena = transport.WorkerCollate().arena()
    assert arena.shm.view[0] == transport._BUSY
    arena.release()
    assert arena.shm.view[0] == transport._FREE and transport._worker_ring(os.getpid()).pending == []
    late = arena.alloc((10,), np.dtype(np.int64))
    assert not (0 <= late.__array_interface__["data"][0] - arena.shm.address < arena.shm.size)
    arena.release()  # twice: nothing happens
    assert arena.shm.view[0] == transport._FREE
