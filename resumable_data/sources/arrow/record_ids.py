"""Record ids: checked against ``[0, N)`` and located in the unit index (pure index maths).

Algorithm: record id ``r`` in ``[0, N)`` is the ``r``-th row of the shards in manifest order
(shard, then row); the units (record batches / row groups holding records) start at the ids
``starts`` (ascending), so ``r`` lies in unit ``searchsorted(starts, r, side="right") - 1`` at row
``r - starts[unit]``. A single index may be negative (Python's sequence rule); an array of ids
may not.

Guarantee: an id that is not an integer in range is a :class:`RecordIdError` (a
:class:`~resumable_data.ConfigError` that is also the ``IndexError`` a Python sequence raises) or
a :class:`~resumable_data.ConfigTypeError` naming the value and the range; nothing is read.

Cost: one ``searchsorted`` per batch of ids; no state to restore. (Batches of ids are checked and
located by one compiled pass, :func:`resumable_data.sources.unit_index.locate`.)
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from resumable_data.errors import ConfigError, ConfigTypeError, describe

__all__ = ["RecordIdError", "locate", "record_index"]


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
