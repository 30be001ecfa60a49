"""What ``rd.ReadUnit.AUTO`` reads: whole shards or record batches, decided once when read-ahead starts.

Algorithm (:func:`choose_unit`, pure). The fetcher gives it the facts it knows before the first
step: the object size of each shard the first ``lookahead`` steps read (the plan is a pure
function of the step, so these are the shards the read-ahead window will need; None for a shard
that cannot be read whole: no recorded size, or a unit without a byte layout) and the cache's byte
budget. The rule, first match wins:

1. no shard is read, or one of them cannot be read whole -> ``RECORD_BATCH``;
2. the shards the window reads take more than half the budget (``SHARE_OF_BUDGET``) ->
   ``RECORD_BATCH``: whole shards would crowd out the units of the next steps (a global shuffle
   reads every shard at every step, so it lands here unless half the budget holds the dataset);
3. one of them is larger than :data:`MAX_OBJECT_BYTES` -> ``RECORD_BATCH``: a whole object is one
   request (one connection's bandwidth), where its units by range run ``concurrency`` at a time;
4. otherwise ``SHARD``: sequential and window orders whose window's shards fit comfortably, where
   one request per object instead of one per unit is what the measured speed depends on
   (``docs/object-storage.md#reading-ahead``).

Guarantee: the choice changes only how the fetcher reads, never a batch or the loader's state:
both units deliver the bytes of the same checked units (:mod:`.fetcher`). The same facts give the
same choice; it is made once per loader (a resume or a new pass keeps it) and is shown as
:attr:`~.fetcher.Prefetcher.unit` (and its ``repr``, and a debug log line).

Cost: O(shards in the window); gathering the facts costs ``lookahead`` calls of the loader's
pure ``records_of`` (the fetcher's first plan computes the same steps).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from resumable_data.sources.read_ahead.config import ReadUnit

__all__ = ["MAX_OBJECT_BYTES", "SHARE_OF_BUDGET", "UnitChoice", "choose_unit"]

#: Whole shards only while the window's shards take at most this share of ``cache_bytes``.
SHARE_OF_BUDGET = 0.5
#: Whole shards only for objects up to this size (64 MiB; a guard, not a measured optimum: the
#: benchmarks' objects are about 12.6 MB).
MAX_OBJECT_BYTES = 64 << 20


@dataclass(frozen=True)
class UnitChoice:
    """The unit :func:`choose_unit` picked and why (a sentence for ``repr`` and logs)."""

    unit: ReadUnit
    reason: str


def choose_unit(window_sizes: Sequence[int | None], cache_bytes: int) -> UnitChoice:
    """The fetch unit for shards of object sizes ``window_sizes`` (those the first ``lookahead``
    steps read; None: not readable whole) under a budget of ``cache_bytes`` (module docstring)."""
    if not window_sizes:
        return UnitChoice(ReadUnit.RECORD_BATCH, "the first steps read no shard")
    if any(s is None for s in window_sizes):
        return UnitChoice(ReadUnit.RECORD_BATCH, "a shard the first steps read has no recorded size or byte layout")
    sizes = [int(s) for s in window_sizes if s is not None]
    need, limit = sum(sizes), int(cache_bytes * SHARE_OF_BUDGET)
    if need > limit:
        return UnitChoice(
            ReadUnit.RECORD_BATCH,
            f"the {len(sizes)} shards the lookahead reads take {need:,} bytes, over half of cache_bytes ({limit:,})",
        )
    if max(sizes) > MAX_OBJECT_BYTES:
        return UnitChoice(
            ReadUnit.RECORD_BATCH,
            f"an object of {max(sizes):,} bytes is over {MAX_OBJECT_BYTES:,}: its units are read by range, in parallel",
        )
    return UnitChoice(
        ReadUnit.SHARD,
        f"the {len(sizes)} shards the lookahead reads take {need:,} bytes, within half of cache_bytes ({limit:,})",
    )
