"""How a worker's batch reaches the main process: reused shared-memory slots, or inline bytes.

torch's workers pickle a batch with ``ForkingPickler``: every tensor storage not yet shared is
copied into a fresh shared-memory segment whose descriptor is then passed over a socket (one
connection per storage), and numpy arrays are copied into the pickle and through the result
pipe. On a small machine both cost more than making the batch (measured here: 0.18 ms for a
16-element tensor, 0.83 ms for a 256 KiB one; 0.33 ms to pickle and about as much to read back a
263 KiB numpy batch, mostly page faults on fresh buffers and pipe copies).

Algorithm. In a worker, rd's ``collate_fn`` for torch (:class:`WorkerCollate`) packs the batch
(:func:`pack`, in the worker's own thread, so an unpicklable batch is that batch's error):

* its structure: for a dict of numeric numpy arrays and plain tensors (every Arrow batch) a
  small spec of keys, dtypes and shapes; otherwise the batch pickled with protocol 5, the data
  of every numpy array and every plain CPU tensor (dense, contiguous, not shared already, not
  requiring grad, not nested, its storage exactly its data) handed out of band. Anything else
  (nested tensors included) keeps torch's own reduction: tensors already in shared memory (torch's ``default_collate`` makes tensor
  samples' batches there) keep torch's zero-copy path;
* its payloads: under :data:`SLOT_MIN_BYTES` in all they travel inline, as bytes in the
  message; larger ones are copied into one of the worker's *slots*, a shared-memory segment
  created once and reused (its pages are mapped once in both processes), and only the slot's
  name, generation and offsets travel through the pipe.

The main process maps a slot the first time it sees it, unlinks its name at once, and builds
the batch's arrays and tensors as views of the slot, without a copy. The views' base chain ends
in one object per delivered batch whose finalizer clears the slot's busy byte when the batch's
last view dies; only then does the worker reuse the slot. A worker takes the first free slot
large enough, regrows a free slot that is too small (a new generation under a new name), or
adds one; with :data:`MAX_SLOTS` busy beyond the batches it may hold ahead (``prefetch_factor``
times the steps a request carries: a loop that keeps many batches alive) it sends inline.
Slots reserve their pages when created (``posix_fallocate``), so a full ``/dev/shm`` makes that
batch travel inline instead of killing the worker with ``SIGBUS``.

Guarantee: the delivered batch equals the worker's bit for bit (same types, dtypes, shapes and
values; tensors arrive contiguous) and is never written by the worker while any part of it is
alive. An object under two keys of a flat batch arrives as one object, as through pickle.
Names are ``rd<main pid>_<worker pid>_<slot>_<gen>``; the main process keys its mappings by worker
pid and slot and checks the pool number (a counter of this process) and generation, so a new
worker that reuses a dead one's pid never reads the old mapping. :func:`forget` (run when a worker
pool stops) closes those workers' mappings (a batch still alive keeps its own) and unlinks
any slot a dead worker created that never reached the main process; slots are also registered
with ``multiprocessing``'s resource tracker, which unlinks what a killed main process leaves.
A slot that cannot be mapped (its worker died and the name was swept) raises
``ConnectionError``, which the loader reports as :class:`rd.WorkerError`.

Gathered in place. rd's own default Arrow batch (``take_numpy``, no user collate) is gathered
straight into a slot: before the gather, :meth:`WorkerCollate.arena` marks a free slot busy
(sized by the largest batch this worker packed so far; none for the worker's first batch or for
batches under :data:`SLOT_MIN_BYTES`) and hands the fetcher an :class:`_Arena` whose ``alloc``
carves each output array from it, 64-byte aligned. :func:`pack` then finds every payload of the
batch inside one such arena and sends its offsets: no copy. A payload outside it (an array that
did not fit, a structure that copies) sends the batch the usual way, and every arena its batch
did not claim is freed when the collate returns (or at once when the gather raised). The size
and the arenas are the worker's ring's, so a forked child starts with its own (none).

Cost: worker: one ``memcpy`` of the payloads into memory already mapped, none for a batch
gathered in place (plus the pickle of the structure for batches that are not flat dicts); main:
a few small objects per batch, no copy and no system call in the steady state. Shared memory held: about ``prefetch_factor + 2``
slots per worker (``prefetch_factor * 4 + 4`` where requests carry four steps, :mod:`.step_groups`),
each the size of a batch rounded up to a power of two.
"""

from __future__ import annotations

import glob
import io
import math
import os
import pickle
import sys
import weakref
from multiprocessing import resource_tracker, shared_memory
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

from resumable_data.loader import torch_compat
from resumable_data.loader.fetch import NumpyBatch

__all__ = ["MAX_SLOTS", "SLOT_MIN_BYTES", "Wire", "WorkerCollate", "forget", "pack", "prepare_main", "slot_name"]

SLOT_MIN_BYTES = 64 * 1024  #: payloads under this travel inline in the pickle
MAX_SLOTS = 16  #: busy slots per worker, beyond those for the batches it holds ahead, past which a batch travels inline
_HEADER = 64  # bytes before the first payload: byte 0 is the busy flag
_ALIGN = 64
_FREE, _BUSY = 0, 1
_PREFIX = "rd"


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def slot_name(main_pid: int, worker_pid: int, index: int, gen: int) -> str:
    """The shared-memory name of slot ``index`` (generation ``gen``) of a worker of ``main_pid``."""
    return f"{_PREFIX}{main_pid}_{worker_pid}_{index}_{gen}"


# -- the worker side -----------------------------------------------------------------------------
def _plain_tensor(t: torch.Tensor) -> bool:
    """A tensor whose data alone says everything torch's reduction would keep."""
    return (
        type(t) is torch.Tensor
        and not t.is_nested
        and t.device.type == "cpu"
        and t.layout is torch.strided
        and not t.requires_grad
        and not t.is_quantized
        and not t.is_conj()
        and not t.is_neg()
        and not t.is_shared()
        and t.is_contiguous()
        and t.storage_offset() == 0
        and t.numel() > 0
        and t.untyped_storage().nbytes() == t.numel() * t.element_size()
    )


def _rebuild_tensor(dtype: torch.dtype, shape: tuple[int, ...], data: Any) -> torch.Tensor:
    return torch.frombuffer(data, dtype=dtype).view(shape)


class _BatchPickler(ForkingPickler):
    """``ForkingPickler`` (torch's reductions for anything not handled here), protocol 5, with
    plain tensors' data handed out of band as raw bytes."""

    # ForkingPickler's class attributes (CPython's multiprocessing.reduction; typeshed leaves them out)
    _copyreg_dispatch_table: dict[Any, Any]
    _extra_reducers: dict[type, Any]

    def __init__(self, file: Any, buffers: list[pickle.PickleBuffer]) -> None:
        pickle.Pickler.__init__(self, file, protocol=5, buffer_callback=buffers.append)
        self.dispatch_table = self._copyreg_dispatch_table.copy()  # as ForkingPickler.__init__ does
        self.dispatch_table.update(self._extra_reducers)

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) and _plain_tensor(obj):
            raw = obj.detach().reshape(-1).view(torch.uint8).numpy()
            return _rebuild_tensor, (obj.dtype, tuple(obj.shape), pickle.PickleBuffer(raw.data))
        return NotImplemented


class _Ring:
    """One worker's shared-memory slots (created on first use, in that worker only; a forked
    child makes its own), the largest batch it packed and the arenas it handed out."""

    def __init__(self, main_pid: int) -> None:
        self.pid = os.getpid()
        self.main_pid = main_pid
        self.slots: list[tuple[int, _Segment]] = []  # (generation, segment)
        self.largest = 0  # the largest packed batch (aligned payload bytes): what an arena reserves
        self.pending: list[_Arena] = []  # arenas handed to the fetcher, not yet claimed by pack() nor freed

    def acquire(self, need: int, limit: int | None = None) -> tuple[int, int, _Segment] | None:
        """A free slot of at least ``need`` bytes, marked busy: ``(index, gen, segment)``; None
        when ``limit`` (default :data:`MAX_SLOTS`) slots are busy. Raises ``OSError`` when a new segment
        does not fit."""
        limit = MAX_SLOTS if limit is None else limit
        grow = None
        for i, (gen, shm) in enumerate(self.slots):
            if shm.view[0] == _FREE:
                if shm.size >= need:
                    shm.view[0] = _BUSY
                    return i, gen, shm
                grow = i if grow is None else grow
        if grow is None and len(self.slots) >= limit:
            return None
        index = len(self.slots) if grow is None else grow
        gen = 0 if grow is None else self.slots[grow][0] + 1
        shm = _create(slot_name(self.main_pid, self.pid, index, gen), 1 << max(need - 1, 1).bit_length())
        if grow is None:
            self.slots.append((gen, shm))
        else:  # the old generation's name: the main process unlinked it if a batch was sent from it
            old = self.slots[grow][1]
            old.close()
            try:
                old.unlink()  # an arena's slot that never sent a batch (the batch was packed another way)
            except FileNotFoundError:
                pass
            self.slots[grow] = (gen, shm)
        shm.view[0] = _BUSY
        return index, gen, shm


class _Segment(shared_memory.SharedMemory):
    """A shared-memory segment with its mapping typed: :attr:`view` is ``buf`` while open."""

    _fd: int  # SharedMemory's file descriptor (CPython's; typeshed leaves it out): -1 once closed

    def close(self) -> None:
        """Close it; while an array still views it (a delivered batch in the main process, an
        array a worker carved from an arena it gave back), the mapping is left to that array
        (unmapped when it dies) instead of raising ``BufferError``."""
        try:
            super().close()
        except BufferError:
            if getattr(self, "_fd", -1) >= 0:
                os.close(self._fd)
                self._fd = -1

    @property
    def view(self) -> memoryview:
        """The mapping (``buf``); a closed segment raises ``ValueError``."""
        buf = self.buf
        if buf is None:
            raise ValueError(f"the shared-memory segment {self.name!r} is closed")
        return buf

    @property
    def address(self) -> int:
        """The mapping's start address (computed once)."""
        addr = self.__dict__.get("_address")
        if addr is None:
            addr = self.__dict__["_address"] = np.frombuffer(self.view, dtype=np.uint8).__array_interface__["data"][0]
        return addr


def _create(name: str, size: int) -> _Segment:
    """A new segment with its pages reserved: a full ``/dev/shm`` is an ``OSError`` here, never a
    ``SIGBUS`` when the batch is written."""
    shm = _Segment(name, create=True, size=size)
    try:
        if hasattr(os, "posix_fallocate"):  # the os module has it on Linux and most POSIX builds, not macOS
            os.posix_fallocate(shm._fd, 0, size)
    except OSError:
        shm.close()
        shm.unlink()
        raise
    return shm


_ring: _Ring | None = None


class _Arena:
    """One batch's output arrays, carved from a slot marked busy (see the module docstring)."""

    __slots__ = ("at", "gen", "index", "pending", "shm")

    def __init__(self, index: int, gen: int, shm: _Segment, pending: list[_Arena]) -> None:
        self.index, self.gen, self.shm = index, gen, shm
        self.pending = pending  # its ring's: it is in it until claimed or released
        pending.append(self)
        self.at = _HEADER  # the next free byte

    def alloc(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A C-contiguous array of ``shape`` and ``dtype`` in the slot, or a fresh one when it does not fit."""
        dtype = np.dtype(dtype)
        count = math.prod(shape)
        n = count * dtype.itemsize
        if n == 0 or self.at + n > self.shm.size or self not in self.pending:
            return np.empty(shape, dtype=dtype)
        out = np.frombuffer(self.shm.view, dtype=dtype, count=count, offset=self.at).reshape(shape)
        self.at += _aligned(n)
        return out

    def release(self) -> None:
        """Free the slot (its batch was not sent from it); nothing once pack() claimed it."""
        if self in self.pending:
            self.pending.remove(self)
            self.shm.view[0] = _FREE

    def claim(self, raws: list[Any]) -> list[tuple[int, int]] | None:
        """The slot offsets of ``raws`` (uint8 arrays, or the memoryviews of a pickled batch's
        buffers) when every one lies in what was carved (then the slot is the batch's: no longer
        pending), else None. An empty payload lies anywhere."""
        base = self.shm.address
        lo, hi = base + _HEADER, base + self.at
        offsets = []
        for r in raws:
            n = r.nbytes
            if not n:
                offsets.append((_HEADER, 0))
                continue
            p = (r if type(r) is np.ndarray else np.frombuffer(r, dtype=np.uint8)).__array_interface__["data"][0]
            if p < lo or p + n > hi:
                return None
            offsets.append((p - base, n))
        self.pending.remove(self)
        return offsets


def _release_pending() -> None:
    """Free this process's arenas that no batch claimed (a ring of another process is not ours)."""
    ring = _ring
    if ring is not None and ring.pid == os.getpid():
        while ring.pending:
            ring.pending[-1].release()


def _worker_ring(main_pid: int) -> _Ring:
    global _ring
    if _ring is None or _ring.pid != os.getpid():  # a forked child never reuses its parent's slots
        _ring = _Ring(main_pid)
    return _ring


class Wire:
    """A batch on its way from a worker to the main process, serialised by :func:`pack` (in the
    worker's own thread, so an unpicklable batch raises there, as the batch's error); it
    unpickles as the batch itself."""

    __slots__ = ("args", "rebuild")

    def __init__(self, rebuild: Any, args: tuple[Any, ...]) -> None:
        self.rebuild, self.args = rebuild, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.rebuild, self.args


def _flat(batch: Any) -> tuple[Any, list[Any]] | None:
    """``((type, [(key, dtype, shape, is_tensor, same)]), payloads)`` for a dict (or ``NumpyBatch``)
    of numeric numpy arrays and plain tensors only, the shape of every Arrow batch: no pickler
    needed. ``same`` is the position of an earlier entry holding the very same object (-1 for
    none): that object travels once and arrives as one object under both keys, as through pickle."""
    if type(batch) is not dict and type(batch) is not NumpyBatch:
        return None
    spec: list[tuple[Any, Any, tuple[int, ...] | None, bool, int]] = []  # (key, dtype, shape, is_tensor, same)
    raws: list[np.ndarray] = []
    seen: dict[int, int] = {}  # id(value) -> its entry
    for k, v in batch.items():
        same = seen.get(id(v))
        if same is not None:
            spec.append((k, None, None, False, same))
            continue
        if type(v) is np.ndarray and v.dtype.kind in "biufc" and v.size and v.flags.c_contiguous:
            spec.append((k, v.dtype.str, v.shape, False, -1))
            raws.append(v.reshape(-1).view(np.uint8))
        elif isinstance(v, torch.Tensor) and _plain_tensor(v):
            spec.append((k, v.dtype, tuple(v.shape), True, -1))
            raws.append(v.detach().reshape(-1).view(torch.uint8).numpy())
        else:
            return None
        seen[id(v)] = len(spec) - 1
    return (type(batch), spec), raws


def _structure(batch: Any) -> tuple[Any, list[Any]]:
    """The batch's structure (a flat spec, or protocol-5 pickle bytes) and its payloads."""
    flat = _flat(batch)
    if flat is not None:
        return flat
    buffers: list[pickle.PickleBuffer] = []
    f = io.BytesIO()
    _BatchPickler(f, buffers).dump(batch)
    return f.getvalue(), [b.raw() for b in buffers]


def _rebuild(header: Any, buffers: list[np.ndarray]) -> Any:
    if isinstance(header, bytes):  # a batch this loader's own forked worker pickled (torch's result
        return pickle.loads(header, buffers=buffers)  # queue unpickles the same); never a state or a file
    cls, spec = header
    out, payloads = cls(), iter(buffers)
    values: list[Any] = []
    for k, dtype, shape, tensor, same in spec:
        if same >= 0:
            v = values[same]
        else:
            b = next(payloads)
            v = torch.frombuffer(b, dtype=dtype).view(shape) if tensor else b.view(dtype).reshape(shape)
        values.append(v)
        out[k] = v
    return out


def pack(batch: Any, main_pid: int, pool: int = 0, max_slots: int | None = None) -> Wire:
    """``batch`` as a :class:`Wire`: its structure pickled, its payloads in a slot or inline;
    ``pool`` is the main process's number for the worker pool this worker belongs to;
    ``max_slots`` the busy slots past which it travels inline (default :data:`MAX_SLOTS`)."""
    header, raws = _structure(batch)
    total = sum(_aligned(r.nbytes) for r in raws)
    ring = _worker_ring(main_pid)
    ring.largest = max(ring.largest, total)
    for arena in ring.pending if total else ():  # gathered in place: its payloads are in a slot already
        offsets = arena.claim(raws)
        if offsets is not None:
            return Wire(
                _from_slot,
                (header, arena.shm.name, os.getpid(), pool, arena.index, arena.gen, arena.at - _HEADER, offsets),
            )
    got = None
    if total >= SLOT_MIN_BYTES:
        try:
            got = ring.acquire(_HEADER + total, max_slots)
        except OSError:  # no room for a new segment (/dev/shm full): this batch travels inline
            got = None
    if got is None:
        return Wire(_from_inline, (header, [r.tobytes() for r in raws]))
    index, gen, shm = got
    dst = np.frombuffer(shm.view, dtype=np.uint8)
    offsets, at = [], _HEADER
    for r in raws:
        n = r.nbytes
        dst[at : at + n] = np.frombuffer(r, dtype=np.uint8)
        offsets.append((at, n))
        at += _aligned(n)
    del dst
    return Wire(_from_slot, (header, shm.name, os.getpid(), pool, index, gen, total, offsets))


class WorkerCollate:
    """The ``collate_fn`` rd gives torch's ``DataLoader``: the fetcher's ``(step, batch, tokens,
    samples)`` unchanged in the main process; in a worker, the batch packed (:func:`pack`).
    ``main_pid`` is the process that reads the batches and ``pool`` its number for the worker
    pool (both set by :meth:`new_pool` when a pass starts its workers); ``ahead`` the batches a
    worker may hold ahead (``prefetch_factor`` times the steps a request carries), which get
    slots on top of :data:`MAX_SLOTS`."""

    def __init__(self, ahead: int = 0) -> None:
        self.main_pid = os.getpid()
        self.pool = 0
        self.ahead = ahead

    def new_pool(self) -> None:
        """Before a pass starts a worker pool: this process reads its batches, under a new number
        (a new worker that reuses an old one's pid then never gets the old one's mappings)."""
        global _pools
        _pools += 1
        self.main_pid, self.pool = os.getpid(), _pools

    def arena(self) -> _Arena | None:
        """In a worker, before its fetcher gathers rd's default batch: a slot to gather it into,
        the size of the largest batch this worker packed (None before its first batch, for batches
        under :data:`SLOT_MIN_BYTES`, and when no slot is free or can be made)."""
        if get_worker_info() is None:
            return None
        ring = _worker_ring(self.main_pid)
        if ring.largest < SLOT_MIN_BYTES:
            return None
        try:
            got = ring.acquire(_HEADER + ring.largest, MAX_SLOTS + self.ahead)
        except (OSError, BufferError):  # no room for a new segment: the batch is packed as usual
            return None
        return None if got is None else _Arena(*got, ring.pending)

    def __call__(self, item: Any) -> Any:
        try:
            return self._pack(item)
        finally:
            _release_pending()  # arenas of batches that were not sent from them (packed another way)

    def _pack(self, item: Any) -> Any:
        """``item``: the fetcher's ``(step, batch, tokens, samples)``, or for a request of several steps
        (:mod:`.step_groups`) a list of those and of torch's exception wrappers (a failed step),
        each packed on its own: a batch that does not pack is that step's error (torch, with
        ``batch_size=None``, passes one dataset item; it types ``collate_fn`` for lists)."""
        if get_worker_info() is None:
            return item
        if type(item) is not list:
            step, batch, tokens, samples = item
            return step, pack(batch, self.main_pid, self.pool, MAX_SLOTS + self.ahead), tokens, samples
        out: list[Any] = []
        for one in item:
            if type(one) is tuple:
                try:
                    one = (one[0], pack(one[1], self.main_pid, self.pool, MAX_SLOTS + self.ahead), one[2], one[3])
                except Exception:  # that step's error, re-raised when the loop reaches it
                    one = torch_compat.worker_exception()
            out.append(one)
        return out


# -- the main side -------------------------------------------------------------------------------
class _Mapped(_Segment):
    """A slot as the main process maps it: closing it while a delivered batch still views it
    leaves the mapping to that batch (:meth:`_Segment.close`)."""


_attached: dict[tuple[int, int], tuple[int, int, _Mapped]] = {}  # (worker pid, index) -> (pool, gen, mapping)
_pools = 0  # worker pools started by this process (WorkerCollate.new_pool)


def _from_inline(header: Any, payloads: list[bytes]) -> Any:
    return _rebuild(header, [np.frombuffer(bytearray(p), dtype=np.uint8) for p in payloads])


def _attach(name: str, worker_pid: int, pool: int, index: int, gen: int) -> _Mapped:
    key = (worker_pid, index)
    known = _attached.get(key)
    if known is not None and known[0] == pool and known[1] == gen:
        return known[2]
    if known is not None:  # a new generation, or a new worker that reuses an old one's pid
        known[2].close()
    try:
        shm = _Mapped(name)
    except OSError as e:
        raise ConnectionError(f"the shared-memory slot {name!r} of worker pid {worker_pid} is gone ({e})") from e
    shm.unlink()  # the mapping stays valid in both processes; the name is no longer needed
    _attached[key] = (pool, gen, shm)
    return shm


class _SlotView:
    """The payload region of one delivered batch in a mapped slot: every array and tensor of the
    batch is a view whose base chain ends here, so this object dies with the batch's last view,
    and its finalizer then marks the slot free for its worker."""

    __slots__ = ("__array_interface__", "__weakref__", "_mv")

    def __init__(self, shm: _Mapped, total: int) -> None:
        self._mv = shm.view[_HEADER : _HEADER + total]  # keeps the mapping alive while views exist
        self.__array_interface__ = {
            "shape": (total,),
            "typestr": "|u1",
            "data": (shm.address + _HEADER, False),
            "version": 3,
        }


def _release(shm: _Segment) -> None:
    try:
        shm.view[0] = _FREE  # the batch's last view is gone: the worker may reuse the slot
    except ValueError:  # the mapping was closed (its pool is gone): nothing to free
        pass


def _from_slot(
    header: Any, name: str, worker_pid: int, pool: int, index: int, gen: int, total: int, offsets: list[tuple[int, int]]
) -> Any:
    shm = _attach(name, worker_pid, pool, index, gen)
    if shm.view[0] != _BUSY or shm.size < _HEADER + total:
        raise ConnectionError(f"the shared-memory slot {name!r} of worker pid {worker_pid} holds no batch")
    view = _SlotView(shm, total)
    weakref.finalize(view, _release, shm)
    raw = np.asarray(view)
    del view
    return _rebuild(header, [raw[a - _HEADER : a - _HEADER + n] for a, n in offsets])


def prepare_main() -> None:
    """Start ``multiprocessing``'s resource tracker in the main process before workers start, so
    that workers (forked or spawned) register their slots with the same tracker."""
    try:
        resource_tracker.ensure_running()
    except Exception:  # no tracker (unusual platforms): slots are still unlinked by forget()
        pass


def forget(worker_pids: list[int]) -> None:
    """After workers ``worker_pids`` of this process stopped: close their slots' mappings and
    unlink any slot one of them created that never reached this process."""
    pids = set(worker_pids)
    for key in [k for k in _attached if k[0] in pids]:
        _attached.pop(key)[2].close()
    if not sys.platform.startswith("linux"):
        return  # elsewhere the resource tracker unlinks leftovers when this process exits
    me = os.getpid()
    for pid in pids:
        for path in glob.glob(f"/dev/shm/{_PREFIX}{me}_{pid}_*"):
            try:
                leftover = shared_memory.SharedMemory(os.path.basename(path))
            except OSError:
                continue
            leftover.close()
            leftover.unlink()
