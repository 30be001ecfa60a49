"""Decoded units kept per process: a least-recently-used map bounded by bytes, shared by the sources.

What. A unit that is not memory-mapped (a Parquet row group; a record batch read from a remote
store or from the read-ahead cache) is decoded into an Arrow record batch when a batch first
needs it. A batch of a shuffled stream needs many units at once: a window shuffle of 10,000
records over 1,024-row units touches about 10 of them per batch (22 when its blocks are records,
not units). A cache of a fixed number of units smaller than that decodes every unit again for
every batch (Parquet with the window shuffle ran at 1.5-3k samples/s with 8 units kept); this
one keeps the units of the last batches up to a byte budget instead.

Algorithm. An ordered map from ``(source, shard, unit index)`` to the decoded batch and what its
source derived from it once (its gather plan rows, :mod:`.gather_decoded`) (``source``:
:func:`new_owner`, a number no other source of this process gets); a hit moves the entry to the
end; an insert adds the batch's buffer bytes (none for a zero-copy batch of a memory map, kept
for its plan rows in a folder that mixes such batches with decoded ones) and evicts from the
front until the total fits ``budget`` (the newest entry is always kept, whatever its size). A process holds one map
(:func:`process_units`) that all its sources share, so the budget bounds the process whatever the
number of sources (an ``rd.Mixture`` of remote sources, a train and an eval set); a source's
entries leave with it (:meth:`DecodedUnits.drop` on close; :meth:`DecodedUnits.drop_later`, at
the map's next call, when read-ahead is attached or detached, or when it is garbage-collected: a
finalizer never takes the map's lock). A
source may ask to be told when one of its entries leaves (:meth:`DecodedUnits.watch`: what it
derived from all its units at once must not keep one alive past the budget). Operations hold a lock
(a user may read sources from threads); a forked child starts with a fresh lock.

Guarantee. Only decoding is saved: a batch here is the decode of bytes whose identity was checked
when they were read, under a key no other source shares, and the map is per process (never
shared across processes, never written to disk).

Budget. ``DEFAULT_DECODED_BYTES`` unless a source asks for more (``rd.ArrowShards(...,
decoded_cache_bytes=N)``, :meth:`DecodedUnits.reserve`): the largest request of the process wins.

Cost. O(1) per lookup and insert, O(entries) per drop; memory at most ``budget`` plus one unit per
process.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import warnings
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from resumable_data.errors import ConfigError, describe

__all__ = [
    "DEFAULT_DECODED_BYTES",
    "DecodedUnits",
    "check_budget",
    "new_owner",
    "over_budget_warning",
    "process_units",
    "warn_once",
]

#: Decoded bytes kept per process (local Parquet, remote units, units read ahead), all sources
#: together. The same with read-ahead: its shared cache holds the fetched bytes, but decoding a
#: Parquet row group again costs as much as without it (a global shuffle over 64 row groups kept in
#: 64 MiB: 953 samples/s).
DEFAULT_DECODED_BYTES = 256 << 20


def check_budget(value: Any) -> int | None:
    """``decoded_cache_bytes`` checked: None (the default budget) or a positive int of bytes (a
    numpy integer is taken as its int, as every integer parameter of the package takes it)."""
    if isinstance(value, np.integer):
        value = int(value)
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return value
    raise ConfigError(
        describe(
            "decoded_cache_bytes",
            value,
            "None (256 MiB a process) or a positive int of bytes",
            "pass e.g. decoded_cache_bytes=4 << 30 for 4 GiB of decoded units a process",
        )
    )


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


def over_budget_warning(source: str, units: int, need: int, budget: int, dataset: int) -> str:
    """What a source says once when a batch's touched units exceed the budget (each such batch
    then decodes its units again, one at a time): the figures and the two fixes."""
    return (
        f"{source}: a batch touches {units} units (record batches / row groups) whose decoded bytes, "
        f"about {_size(need)}, exceed the decoded-unit budget of {_size(budget)}, so every such batch "
        f"decodes them again (a global shuffle over Parquet or compressed Arrow IPC: slow). The dataset "
        f"decodes to about {_size(dataset)}: pass rd.ArrowShards(..., decoded_cache_bytes=N) with N at "
        f"least that (e.g. {max(dataset, need) * 5 // 4}), or a shuffle_window= so that a batch touches "
        f"fewer units"
    )


_WARNED: set[Hashable] = set()  # the datasets this process has warned about (warn_once)


def warn_once(key: Hashable, message: Callable[[], str]) -> None:
    """``message()`` as a RuntimeWarning, once per ``key`` (a dataset) in this process (a forked
    worker inherits what its parent said); composed only when it is said."""
    if key in _WARNED:
        return
    _WARNED.add(key)
    warnings.warn(message(), RuntimeWarning, stacklevel=3)


class DecodedUnits:
    """A map of decoded units bounded by ``budget`` bytes (see the module docs)."""

    def __init__(self, budget: int = DEFAULT_DECODED_BYTES) -> None:
        self.budget = budget
        self.nbytes = 0
        self._map: OrderedDict[Hashable, tuple[pa.RecordBatch, int, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._watchers: dict[int, weakref.WeakMethod] = {}  # owner -> told when one of its units leaves
        # (owner, gone) whose units go at the next call (drop_later: a finalizer never takes the lock)
        self._pending: deque[tuple[int, bool]] = deque()

    def __len__(self) -> int:
        return len(self._map)

    @property
    def lock(self) -> threading.Lock:
        """The map's lock, for an owner that keeps what it derives from its entries consistent with
        them (:class:`.gather_decoded.PlanTable`): held briefly, never while calling the map."""
        return self._lock

    def get(self, key: Hashable) -> pa.RecordBatch | None:
        """The batch kept under ``key`` (now the most recently used), or None."""
        hit = self.entry(key)
        return None if hit is None else hit[0]

    def entry(self, key: Hashable) -> tuple[pa.RecordBatch, Any] | None:
        """``(batch, extra)`` kept under ``key`` (now the most recently used), or None."""
        with self._lock:
            self._drain()
            hit = self._map.get(key)
            if hit is None:
                return None
            self._map.move_to_end(key)
            return hit[0], hit[2]

    def extras(self, keys: list[Hashable]) -> list[Any]:
        """The ``extra`` kept under each of ``keys`` (each now among the most recently used, in
        this order), None where the key has no entry: one lock for all of them."""
        out: list[Any] = []
        append = out.append
        with self._lock:
            self._drain()
            m = self._map
            get, to_end = m.get, m.move_to_end
            for key in keys:
                hit = get(key)
                if hit is None:
                    append(None)
                else:
                    to_end(key)
                    append(hit[2])
        return out

    def put(self, key: Hashable, batch: pa.RecordBatch, extra: Any = None, size: int | None = None) -> None:
        """Keep ``batch`` (and ``extra``, what its owner derived from it: its plan rows) under
        ``key``, evicting the least recently used beyond the budget. ``size``: the bytes it holds
        (default: its buffers'; 0 for a zero-copy batch of a memory map, which holds no memory)."""
        if size is None:
            size = batch.get_total_buffer_size()
        with self._lock:
            self._drain()
            old = self._map.pop(key, None)
            if old is not None:
                self.nbytes -= old[1]
                self._left(key)
            self._map[key] = (batch, size, extra)
            self.nbytes += size
            while self.nbytes > self.budget and len(self._map) > 1:
                gone, (_, freed, _) = self._map.popitem(last=False)
                self.nbytes -= freed
                self._left(gone)

    def holding(self, keys: Sequence[Hashable], extras: Sequence[Any]) -> bool:
        """Whether the map keeps ``extras[i]`` (that very object) under each ``keys[i]``. The caller
        holds :attr:`lock` (an owner checking that what it derived from its entries still matches
        them: :meth:`.unit_reads.UnitReads._whole_plans`); the drops queued by :meth:`drop_later`
        are done first, as at every call."""
        self._drain()
        m = self._map
        for key, extra in zip(keys, extras):
            hit = m.get(key)
            if hit is None or hit[2] is not extra:
                return False
        return True

    def watch(self, owner: int, told: Callable[[], None]) -> None:
        """Call ``told()`` (a bound method, held weakly) whenever a unit of ``owner`` leaves the map
        (evicted, replaced, dropped, cleared), under the map's lock: it must only drop what its owner
        derived from its units (:class:`.unit_reads.UnitReads`' plan over every unit), never call
        the map."""
        with self._lock:
            self._drain()
            self._watchers[owner] = weakref.WeakMethod(told)

    def unwatch(self, owner: int) -> None:
        with self._lock:
            self._drain()
            self._watchers.pop(owner, None)

    def _left(self, key: Hashable) -> None:
        if self._watchers and isinstance(key, tuple) and key:
            ref = self._watchers.get(key[0])
            if ref is None:
                return
            told = ref()
            if told is None:  # its source is gone
                del self._watchers[key[0]]
            else:
                told()

    def drop(self, owner: int) -> None:
        """Drop the units of source ``owner`` (keys ``(owner, ...)``)."""
        with self._lock:
            self._drain()
            self._drop(owner)

    def drop_later(self, owner: int, *, gone: bool = True) -> None:
        """Drop the units of ``owner`` at the map's next call (every call drains these first),
        without taking its lock: what a finalizer calls, or anything a finalizer may run (the
        garbage collector may run it on a thread that holds the lock, inside any allocation of a
        call below; taking it there would deadlock). ``gone``: the source itself is gone (its
        watch is dropped too); False for a live source letting its units go
        (:meth:`.unit_reads.UnitReads.attach`, which a collected loader's read-ahead runs)."""
        self._pending.append((owner, gone))

    def _drain(self) -> None:
        while self._pending:
            owner, gone = self._pending.popleft()
            if gone:
                self._watchers.pop(owner, None)  # its source is gone
            self._drop(owner)

    def _drop(self, owner: int) -> None:
        for key in [k for k in self._map if isinstance(k, tuple) and k and k[0] == owner]:
            self.nbytes -= self._map.pop(key)[1]
            self._left(key)

    def reserve(self, nbytes: int) -> None:
        """Raise the budget to ``nbytes`` if it is lower (a source asking for more: the process
        keeps the largest budget asked for; never lowered by a source)."""
        with self._lock:
            self._drain()
            self.budget = max(self.budget, nbytes)

    def clear(self, budget: int | None = None) -> None:
        """Drop every unit (and set a new ``budget`` if given)."""
        with self._lock:
            self._drain()
            for key in self._map:
                self._left(key)
            self._map.clear()
            self.nbytes = 0
            if budget is not None:
                self.budget = budget

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # a thread of the parent may have held it at the fork


_OWNERS = itertools.count()
_PROCESS = DecodedUnits(DEFAULT_DECODED_BYTES)


def new_owner() -> int:
    """A number that keys one source's units in this process's maps (never given twice)."""
    return next(_OWNERS)


def process_units() -> DecodedUnits:
    """This process's map, shared by all its sources."""
    return _PROCESS


def _reset_locks() -> None:
    _PROCESS._after_fork()


if sys.platform != "win32":  # Windows has no fork, hence nothing to reset
    os.register_at_fork(after_in_child=_reset_locks)
