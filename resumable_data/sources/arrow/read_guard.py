"""Identity checks around reads: a mapped shard that changed is refused before and after a read.

Algorithm: :func:`guarded_read` runs a read (``fn``) of some units between two checks of the
memory-mapped shards those units lie in (the ``touched`` shards, from the unit table's
``unit_shard`` and ``mapped``, or as :func:`~resumable_data.sources.unit_index.locate` found them).
:func:`check_files` compares the shards watched by name in one compiled call
(:meth:`~resumable_data.sources.watch.ShardWatch.first_changed`) and has the first one found
changed raise its own error (:meth:`~resumable_data.sources.files.OpenShard.check`); a mapped shard
with no watch entry is checked by its :class:`~resumable_data.sources.files.OpenShard` one by one.
A read that touches no mapped shard (decoded units: checked when they are read) runs unchecked.

Guarantee: a mapped shard truncated or rewritten before a read is refused before its map is
touched (no SIGBUS); one written during the read is refused after it, and the rows read are never
returned. Each refusal is a :class:`~resumable_data.DatasetIntegrityError` naming the file and the fix.

Cost: two checks per read, each one ``statx`` per touched mapped shard inside one compiled loop
(:mod:`...watch`; ``benchmarks/bench_identity.py``); nothing to restore (an unpickled source
builds its watch when it opens its shards).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np

from resumable_data.sources.arrow.unit_table import UnitTable

__all__ = ["check_files", "guarded_read"]

T = TypeVar("T")


def check_files(table: UnitTable, shards: np.ndarray, when: str) -> None:
    """:meth:`OpenShard.check` of the mapped shards ``shards`` (int64: those watched by name in
    one call, :meth:`.watch.ShardWatch.first_changed`; the shard found changed raises its own error)."""
    bad = table.watch.first_changed(shards)
    if bad >= 0:
        table.shards[bad].check(when)
    if table.unwatched:
        entries = table.watch.entries
        for s in shards.tolist():
            if entries[s] is None:
                table.shards[s].check(when)


def guarded_read(table: UnitTable, unit: np.ndarray, fn: Callable[[], T], touched: np.ndarray | None = None) -> T:
    """``fn()``, which reads units ``unit``, between identity checks of their mapped shards
    (``touched``, when the caller located them already)."""
    if touched is None:
        touched = np.flatnonzero(np.bincount(table.unit_shard[unit], minlength=len(table.shards)) * table.mapped)
    if not len(touched):  # no mapped shard read (decoded units: checked when they are read)
        return fn()
    check_files(table, touched, "before a read")
    out = fn()
    check_files(table, touched, "after a read (the rows read are not returned)")
    return out
