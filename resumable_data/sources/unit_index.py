"""Where a record lives: units (record batches / row groups) and the id -> (unit, row) index.

Algorithm: units are listed in record order with their first record id (``starts``). A record
id's unit is the last start <= id; :func:`locate` finds it for a whole batch in one compiled
pass, each id searched only among the units of its bucket of records (:func:`unit_buckets`: a
table over ``n >> shift`` buckets, built once per source), and marks the memory-mapped shards the
batch touches. :class:`UnitsView` concatenates several sources' unit lists without a Python step
per unit (shifted shard and record numbers); :func:`group_segments` groups ids by unit.

Guarantee: ``locate`` returns, for every id in ``[0, n)``, the unit and row a scan over
``starts`` would (tests compare it with ``np.searchsorted`` on skewed layouts), and the smallest
and largest id so the caller refuses ids outside ``[0, n)`` before reading anything.

Cost: O(len(ids)) per call after an O(units + n >> shift) table built once; a view costs
O(sources) to build and O(log sources) per unit looked up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

import numpy as np
import pyarrow as pa
from numba import njit

__all__ = ["Unit", "UnitsView", "group_segments", "locate", "unit_buckets"]


@njit(cache=True, nogil=True)
def _locate_ids(ids, starts, buckets, shift, n, unit_shard, mapped, unit, local, touched):  # pragma: no cover
    """Per id: its unit (the last ``starts`` entry <= id) and row in it; marks ``touched[s]`` for
    every mapped shard ``s`` read. The unit is searched only among the units that share the id's
    bucket (``buckets``, :func:`unit_buckets`): usually none or one step, where a binary search over
    every unit mispredicts a branch per level (~3x slower on shuffled ids). Returns (min id, max
    id, mapped shards touched); an id outside ``[0, n)`` gets unit 0: the caller refuses it from that
    range before any read."""
    lo = ids[0]
    hi = ids[0]
    count = 0
    for j in range(ids.shape[0]):
        i = ids[j]
        if i < lo:
            lo = i
        if i > hi:
            hi = i
        k = 0
        if 0 <= i < n:
            b = i >> shift
            k = buckets[b]
            e = buckets[b + 1]
            while k < e:  # the last start <= i among units k..e
                m = (k + e + 1) >> 1
                if starts[m] <= i:
                    k = m
                else:
                    e = m - 1
        unit[j] = k
        local[j] = i - starts[k]
        s = unit_shard[k]
        if mapped[s] and not touched[s]:
            touched[s] = True
            count += 1
    return lo, hi, count


_NONE = np.zeros(0, dtype=np.int64)  # no mapped shard touched (read-only: shared by every call)
_NONE.flags.writeable = False


def unit_buckets(starts: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """``(buckets, shift)`` for :func:`locate` over ``n`` records in units starting at ``starts``:
    ``buckets[b]`` is the unit holding record ``min(b << shift, n - 1)``, for buckets of ``2**shift``
    records, no more than the units' average, so a bucket spans about two units (8 bytes per
    bucket: about 16 per unit). Built once per source."""
    if n <= 0 or not len(starts):
        return np.zeros(2, dtype=np.int64), 0
    shift = max(0, (n // len(starts)).bit_length() - 1)
    firsts = np.minimum(np.arange(((n - 1) >> shift) + 2, dtype=np.int64) << shift, n - 1)
    return np.searchsorted(starts, firsts, side="right").astype(np.int64) - 1, shift


def locate(
    ids: np.ndarray,
    starts: np.ndarray,
    unit_shard: np.ndarray,
    mapped: np.ndarray,
    n: int,
    buckets: tuple[np.ndarray, int] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """``(unit, local, touched mapped shards, min id, max id)`` of non-empty int64 ``ids``: one
    compiled pass (``starts``: every unit's first record id, ascending, the first 0; ``unit_shard``:
    each unit's shard; ``mapped``: per shard, whether it is memory-mapped, bool; ``n``: the
    records; ``buckets``: :func:`unit_buckets` of ``starts`` and ``n``, built here when None). The
    caller refuses ids outside ``[0, n)`` from the returned min and max before reading anything."""
    table, shift = unit_buckets(starts, n) if buckets is None else buckets
    unit = np.empty(len(ids), dtype=np.int64)
    local = np.empty(len(ids), dtype=np.int64)
    touched = np.zeros(len(mapped), dtype=np.bool_)
    lo, hi, count = _locate_ids(ids, starts, table, shift, n, unit_shard, mapped, unit, local, touched)
    return unit, local, np.flatnonzero(touched) if count else _NONE, int(lo), int(hi)


class Unit:
    """A contiguous run of records: one IPC record batch (``batch``) or a Parquet row group."""

    __slots__ = ("batch", "row_group", "rows", "shard", "start")

    def __init__(self, shard: int, start: int, rows: int, batch: pa.RecordBatch | None, row_group: int | None) -> None:
        self.shard = shard
        self.start = start
        self.rows = rows
        self.batch = batch
        self.row_group = row_group


class UnitsView(Sequence[Unit]):
    """The units of several sources' unit lists in order (``rd.Mixture``'s gather view): unit
    ``k`` is its source's unit with the shard index and first record id shifted by the shards and
    records of the sources before it, made on access (building the view costs no Python step per
    unit; the loader's batches never touch it: they use the view's arrays)."""

    def __init__(self, parts: Sequence[Sequence[Unit]], shard_offsets: Sequence[int], record_offsets: Sequence[int]):
        self._parts = list(parts)
        self._first = np.cumsum([0] + [len(p) for p in self._parts], dtype=np.int64)
        self._shard, self._record = list(shard_offsets), list(record_offsets)

    def __len__(self) -> int:
        return int(self._first[-1])

    @overload
    def __getitem__(self, k: int) -> Unit: ...

    @overload
    def __getitem__(self, k: slice) -> list[Unit]: ...

    def __getitem__(self, k: int | slice) -> Unit | list[Unit]:
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        n = len(self)
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError(k)
        p = int(np.searchsorted(self._first, k, side="right")) - 1
        u = self._parts[p][k - int(self._first[p])]
        return Unit(u.shard + self._shard[p], u.start + self._record[p], u.rows, u.batch, u.row_group)


def group_segments(keys: np.ndarray, num_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Stable order grouping ``keys`` and the segment bounds (length ``num_keys + 1``)."""
    order = np.argsort(keys, kind="stable")
    bounds = np.zeros(num_keys + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=num_keys), out=bounds[1:])
    return order, bounds
