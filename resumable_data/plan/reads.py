"""Which storage units the coming steps read, in order: the read plan behind read-ahead.

Algorithm. A unit is a contiguous run of record ids (an IPC record batch or a Parquet row group;
``unit_starts`` holds each unit's first record id, increasing, the first 0). The order is a pure
function of the position, so the record ids of every future step are known; for the steps
``[first, first + K)`` of one rank's stream (their record ids, in the order the batch holds them)
:func:`read_schedule` gives

* ``steps[i]``: the units step ``first + i`` reads, each once, in the order its batch first needs
  them (``np.searchsorted`` of the record ids, then the first occurrence of each unit);
* ``order``: every unit of the window once, in the order of its first use (the fetch order);
* :meth:`ReadSchedule.next_use`: the first step at or after a given step that reads a unit (None
  past the window): what Belady's rule evicts by (the resident unit used furthest in the future).

:func:`belady_misses` (and :func:`belady_fetches`, the units it fetches) replays a window's reads against a cache of ``capacity`` bytes under
Belady's rule (evict the unit whose next use is furthest; a unit whose own next use is further
than every resident one's is read without being kept): the projected fetches of a cache of that
size, the lower bound of every eviction policy (``hit rate = 1 - fetches / reads``).

Guarantee: pure (numpy only, no I/O); the same records and starts give the same schedule, so a
resumed loader that plans from its resumed step reads what an uninterrupted one reads from there.
``tests/plan/test_reads.py`` pins golden vectors and checks the properties (each step's units are
exactly those of its records, ``next_use`` against a brute force, Belady never above LRU, and a
cache that holds the window fetching each unit once).

Cost: O(R log U) for R record ids and U units (one ``searchsorted`` and one ``unique`` per step);
the next-use index is O(reads); :func:`belady_misses` O(reads log reads). A restore costs nothing:
the planner starts at the resumed step.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

__all__ = ["ReadSchedule", "belady_fetches", "belady_misses", "read_schedule", "step_units"]


def step_units(records: np.ndarray, unit_starts: np.ndarray) -> np.ndarray:
    """The units (indexes into ``unit_starts``) holding ``records``, each once, in order of first need."""
    records = np.asarray(records, dtype=np.int64)
    if records.size == 0:
        return np.zeros(0, dtype=np.int64)
    unit = np.searchsorted(np.asarray(unit_starts, dtype=np.int64), records, side="right") - 1
    _, first = np.unique(unit, return_index=True)
    return unit[np.sort(first)].astype(np.int64, copy=False)


class ReadSchedule:
    """The units of steps ``[first, first + len(steps))``: per step, and once each in fetch order."""

    __slots__ = ("_keys", "_uses", "first", "order", "steps")

    def __init__(self, first: int, steps: tuple[np.ndarray, ...]) -> None:
        self.first, self.steps = int(first), tuple(steps)
        every = np.concatenate(self.steps) if self.steps else np.zeros(0, dtype=np.int64)
        step_of = np.repeat(np.arange(self.first, self.first + len(self.steps)), [len(u) for u in self.steps])
        _, at = np.unique(every, return_index=True)
        #: every unit of the window once, in the order of its first use
        self.order = every[np.sort(at)]
        by = np.lexsort((step_of, every))  # by unit, then step
        self._keys, self._uses = every[by], step_of[by]

    @property
    def stop(self) -> int:
        """The step after the window."""
        return self.first + len(self.steps)

    def units_between(self, start: int, stop: int) -> set[int]:
        """The units read by steps ``[start, stop)`` (clipped to the window)."""
        lo, hi = max(start, self.first) - self.first, max(min(stop, self.stop) - self.first, 0)
        return {u for units in self.steps[lo:hi] for u in units.tolist()}

    def next_use(self, unit: int, at: int) -> int | None:
        """The first step ``>= at`` of the window that reads ``unit``; None if none does."""
        lo = int(np.searchsorted(self._keys, unit, side="left"))
        hi = int(np.searchsorted(self._keys, unit, side="right"))
        k = lo + int(np.searchsorted(self._uses[lo:hi], at, side="left"))
        return int(self._uses[k]) if k < hi else None


def read_schedule(first: int, step_records: Sequence[np.ndarray], unit_starts: np.ndarray) -> ReadSchedule:
    """The :class:`ReadSchedule` of steps ``first, first + 1, ...`` whose record ids are ``step_records``."""
    starts = np.asarray(unit_starts, dtype=np.int64)
    return ReadSchedule(int(first), tuple(step_units(r, starts) for r in step_records))


def belady_misses(reads: Sequence[np.ndarray], sizes: np.ndarray, capacity: int) -> int:
    """Units fetched when the unit reads ``reads`` (one array per step, in order) go through a cache
    of ``capacity`` bytes (unit ``u`` is ``sizes[u]`` bytes) under Belady's rule (module docstring)."""
    return len(belady_fetches(reads, sizes, capacity))


def belady_fetches(reads: Sequence[np.ndarray], sizes: np.ndarray, capacity: int) -> np.ndarray:
    """The units fetched, in order, by the replay of :func:`belady_misses` (``sizes[fetched].sum()``:
    the bytes a cache of ``capacity`` bytes reads, the lower bound of the read amplification)."""
    seq = np.concatenate([np.asarray(r, dtype=np.int64) for r in reads]) if len(reads) else np.zeros(0, np.int64)
    n = len(seq)
    nxt = np.full(n, n, dtype=np.int64)  # index of the next read of the same unit (n: never)
    last: dict[int, int] = {}
    for t in range(n - 1, -1, -1):
        u = int(seq[t])
        nxt[t] = last.get(u, n)
        last[u] = t
    resident: dict[int, int] = {}  # unit -> its next read
    heap: list[tuple[int, int]] = []  # (-next read, unit), stale entries skipped
    used = 0
    fetched: list[int] = []
    for t in range(n):
        u, then = int(seq[t]), int(nxt[t])
        if u in resident:
            resident[u] = then
            heapq.heappush(heap, (-then, u))
            continue
        fetched.append(u)
        size = int(sizes[u])
        if size > capacity:
            continue
        while used + size > capacity:
            far, v = heapq.heappop(heap)
            if resident.get(v) != -far:
                continue  # stale
            if -far <= then:  # every resident unit is read before u again: read u without keeping it
                heapq.heappush(heap, (far, v))
                break
            del resident[v]
            used -= int(sizes[v])
        else:
            resident[u] = then
            used += size
            heapq.heappush(heap, (-then, u))
    return np.asarray(fetched, dtype=np.int64)
