"""Record ids: checked against ``[0, N)`` and located in the unit index (pure index maths).

Algorithm: record id ``r`` in ``[0, N)`` is the ``r``-th row of the shards in manifest order
(shard, then row); the units (record batches / row groups holding records) start at the ids
``starts`` (ascending), so ``r`` lies in unit ``searchsorted(starts, r, side="right") - 1`` at row
``r - starts[unit]``. A single index may be negative (Python's sequence rule); an array of ids
may not.

A batch of ids (:func:`checked_ids`) must be a 1-D integer sequence; it is checked and located
in the source's unit table (:mod:`.unit_table`) by one compiled pass
(:func:`resumable_data.sources.unit_index.locate`), which also marks the mapped shards it touches.

Guarantee: an id that is not an integer in range is a :class:`RecordIdError` (a
:class:`~resumable_data.ConfigError` that is also the ``IndexError`` a Python sequence raises) or
a :class:`~resumable_data.ConfigTypeError` naming the value and the range; nothing is read.

Cost: one ``searchsorted`` per id (:func:`locate`), one compiled pass per batch of ids
(:func:`checked_ids`); no state to restore.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from resumable_data.errors import ConfigError, ConfigTypeError, describe
from resumable_data.sources.arrow.unit_table import UnitTable
from resumable_data.sources.unit_index import locate as locate_units

__all__ = ["RecordIdError", "checked_ids", "locate", "record_index"]


class RecordIdError(ConfigError, IndexError):
    """A record id passed to ``take``/``__getitems__`` is not an integer in ``[0, N)``."""


def record_index(index: Any, n: int) -> int:
    """``index`` (an integer, negative from the end) as a record id in ``[0, n)``."""
    try:
        i = operator.index(index)
    except TypeError:  # rd errors that are still the TypeError / IndexError a Python sequence raises
        raise ConfigTypeError(
            describe("index", index, "an integer record id", "use take(ids) for arrays of ids")
        ) from None
    if i < 0:
        i += n
    if not 0 <= i < n:
        raise RecordIdError(describe("index", index, f"a record id in [-{n}, {n})", "pass an id within the dataset"))
    return i


def locate(starts: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(unit, row in the unit) of every id, given each unit's first id ``starts``."""
    unit = np.searchsorted(starts, ids, side="right") - 1
    return unit, ids - starts[unit]


def checked_ids(record_ids: Any, table: UnitTable) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(ids, unit, local, touched mapped shards)`` of ``record_ids`` in ``table`` (one compiled
    pass: :func:`.unit_index.locate`), which must be a 1-D integer sequence of ids in ``[0, N)``."""
    ids = np.asarray(record_ids)
    n = table.num_records
    if ids.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, empty
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise RecordIdError(
            describe(
                "record_ids",
                record_ids,
                f"a 1-D sequence of integer record ids in [0, {n})",
                f"pass integers (got dtype {ids.dtype}, ndim {ids.ndim})",
            )
        )
    if n == 0 or (ids.dtype == np.uint64 and int(ids.max()) >= n):  # nothing to locate in / past int64
        lo, hi = int(ids.min()), int(ids.max())
    else:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        unit, local, touched, lo, hi = locate_units(
            ids, table.starts, table.unit_shard, table.mapped_bool, n, table.buckets
        )
    if lo < 0 or hi >= n:
        bad = lo if lo < 0 else hi
        raise RecordIdError(
            describe("record_ids", bad, f"record ids in [0, {n})", "pass ids of this dataset's records")
        )
    return ids, unit, local, touched
