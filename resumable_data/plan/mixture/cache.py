"""A mixture plan's per-block arrays and their cache (the half of :class:`.mixture.MixturePlan` that computes records).

Algorithm. Block ``j`` of a run (its per-source counts and each source's count before it, from
:mod:`.runs`) becomes its arrays in one compiled O(S + B) pass (:mod:`.block`:
the block's keyed permutation, a running count per source, each source's permutation over its
range of the block): source, source position, record id in the source and concatenated id per
in-block position. A source ``s``'s ``q``-th record is record ``perm_e(q mod n_s)`` of its epoch
``e = q // n_s``, a keyed permutation per (source name, source version, seed, epoch), or, for a
source given a shuffle window, that epoch's window shuffle (:mod:`.order`), applied after the
kernel. A span of consecutive blocks is computed in one compiled call instead
(:func:`.block.span_arrays`), the block keys and counts of the span together.

Guarantee. Every array is a pure function of (run, block): the cache is keyed by (run start,
block), so a seek never reads a stale entry; it belongs to one plan (a rebase is a new plan and
starts empty) and is not pickled to workers (each refills its own).

Cost. One compiled pass per block touched, cached: a block serves ``B / batch`` batches and a
batch inside one block is one gather from its arrays; the cache holds about 32 MiB whatever
``B``. Spans are not cached (each run of upcoming positions is asked for once); the sources'
counts after a span are kept, keyed by (run, next block), so the next span needs no floor sum,
and a seek, which asks for another block, misses them and pays the closed form (one floor sum
per grid point of the run, :meth:`.runs.Run.extras_before`).
"""

from __future__ import annotations

from collections import OrderedDict
from functools import lru_cache
from typing import Any

import numpy as np

from resumable_data.plan.mixture.block import SourceKeys, block_arrays, span_arrays
from resumable_data.plan.mixture.runs import Run
from resumable_data.plan.order import EpochOrder, OrderSpec
from resumable_data.plan.permutation import Permutation, permutation_key

__all__ = ["BlockCache"]

_CACHE_BYTES = 1 << 25  # the block cache's bound (its entry count follows from the block size)


class Block:
    """One block's cached arrays (``B`` each): source, source position, record id in the source
    and concatenated id per in-block position (the last two None until asked for), plus its
    positions per source and each source's count before it."""

    __slots__ = ("before", "counts", "ids", "pos", "rec", "src")

    def __init__(
        self,
        counts: np.ndarray,
        before: np.ndarray,
        src: np.ndarray,
        pos: np.ndarray,
        rec: np.ndarray | None = None,
        ids: np.ndarray | None = None,
    ) -> None:
        self.counts, self.before, self.src, self.pos, self.rec, self.ids = counts, before, src, pos, rec, ids


class BlockCache:
    """The block arrays of a :class:`~.mixture.MixturePlan` and their cache (a base class: the
    plan supplies ``names``, ``sizes``, ``versions``, ``block``, ``seed``, ``version_hash``,
    ``shuffle``, ``_orders`` and ``_windowed``, and calls :meth:`_init_cache` once they are set)."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    versions: tuple[str, ...]
    block: int
    seed: int
    version_hash: str
    shuffle: bool
    _orders: tuple[OrderSpec | None, ...]
    _windowed: bool

    def _init_cache(self) -> None:
        self._blocks: OrderedDict[tuple[int, int], Block] = OrderedDict()
        self._cache_entries = max(2, min(32, _CACHE_BYTES // (32 * self.block)))  # 4 arrays of B int64 per block
        self._block_half: np.uint64 | None = None  # Feistel half of the block permutation, at the first block
        self._sizes: np.ndarray | None = None  # int64 sizes and concatenated offsets, once records are asked for
        self._offsets: np.ndarray | None = None
        self._keys: SourceKeys | None = None  # the source epochs' round keys of the last block computed
        self._span_end: tuple[tuple[int, int], np.ndarray] | None = None  # (run start, next block), counts there

    def _layout(self, run: Run, j: int, records: bool = False) -> Block:
        """Block ``j`` of ``run``, cached (:mod:`.block`: what a prefix of the block consumed
        is a prefix of each source's stream); with ``records``, its record ids too."""
        key = (run.start, j)
        hit = self._blocks.get(key)
        if hit is not None and (hit.rec is not None or not records):
            return hit
        if hit is not None:
            counts, before = hit.counts, hit.before
        else:
            counts = run.block_counts(j)
            before = self._before(run, j)  # consecutive blocks: no floor sum
        block_key = None
        if self.shuffle:
            block_key = permutation_key(self.version_hash, self.seed, j, f"mixture.block@{run.start}")
        if self._block_half is None:
            self._block_half = Permutation(self.block, 0).half
        if records:
            keys = self._source_keys(counts, before)  # sets the sizes and offsets
            arrays = block_arrays(counts, before, block_key, self._block_half, self._sizes, self._offsets, keys)
            if self._windowed:
                self._window_records(*arrays)
        else:
            arrays = block_arrays(counts, before, block_key, self._block_half)
        block = Block(counts, before, *arrays)
        self._blocks[key] = block
        while len(self._blocks) > self._cache_entries:
            self._blocks.popitem(last=False)
        return block

    def _before(self, run: Run, j: int) -> np.ndarray:
        """Each source's count before block ``j`` of ``run``: from the block before it (cached)
        or the last span's end, else the closed form (floor sums)."""
        prev = self._blocks.get((run.start, j - 1))
        if prev is not None:
            return prev.before + prev.counts
        end = self._span_end  # read once: another thread may replace it meanwhile
        if end is not None and end[0] == (run.start, j):
            return end[1]
        return np.array(run.base, dtype=np.int64) + j * np.array(run.floors, dtype=np.int64) + run.extras_before(j)

    def _span_records(self, run: Run, j: int, nb: int, full: bool = True) -> Block:
        """Blocks ``j .. j + nb - 1`` of ``run`` with their record ids, as one block's arrays end
        to end (:func:`.block.span_arrays`: one compiled call, not one per block). Not
        put in the block cache; the sources' counts after the span are kept (keyed by the block
        that follows), so the next span starts without floor sums. ``full=False`` (no windowed
        source): the concatenated ids only, the other arrays empty."""
        counts = run.span_counts(j, nb)
        before = self._before(run, j)
        total = counts.sum(axis=0)
        block_keys = None
        if self.shuffle:
            tag = f"mixture.block@{run.start}"
            block_keys = np.array(
                [permutation_key(self.version_hash, self.seed, k, tag) for k in range(j, j + nb)], dtype=np.uint64
            )
        if self._block_half is None:
            self._block_half = Permutation(self.block, 0).half
        keys = self._source_keys(total, before)
        assert self._sizes is not None and self._offsets is not None  # set by _source_keys
        arrays = span_arrays(
            counts, before, block_keys, self._block_half, self._sizes, self._offsets, keys, full=full or self._windowed
        )
        if self._windowed:
            self._window_records(*arrays)
        self._span_end = ((run.start, j + nb), before + total)
        return Block(total, before, *arrays)

    def _source_keys(self, counts: np.ndarray, before: np.ndarray) -> SourceKeys:
        """Round keys of every source epoch a range of the stream touches (each source's
        ``[before, before + counts)``): the last table when it serves, else a new one."""
        if self._sizes is None:
            self._sizes = np.array(self.sizes, dtype=np.int64)
            self._offsets = np.cumsum(self._sizes) - self._sizes
        keys = self._keys
        if keys is None or not keys.serves(counts, before):  # a source entered a new epoch
            keys = self._keys = SourceKeys(counts, before, self._sizes, self._kernel_order if self.shuffle else None)
        return keys

    def _kernel_order(self, s: int, epoch: int) -> Permutation | None:
        """The keyed permutation the block kernel applies to source ``s``; None for a windowed
        source (the kernel leaves its records in id order and :meth:`_window_records` orders them)."""
        return (
            None
            if self._orders[s] is not None
            else _source_perm(self.sizes[s], self.versions[s], self.seed, epoch, self.names[s])
        )

    def _window_records(self, src: np.ndarray, pos: np.ndarray, rec: np.ndarray, ids: np.ndarray) -> None:
        """Put each windowed source's in-epoch offsets (left by the kernel in id order) through
        that source epoch's window shuffle, in place: one ``forward`` per source epoch in the block."""
        offsets = self._offsets
        assert offsets is not None  # set with the records' source keys
        for s in range(len(self.names)):
            if self._orders[s] is None:
                continue
            at = np.flatnonzero(src == s)
            if not at.size:
                continue
            n = self.sizes[s]
            epochs = pos[at] // n
            for e in np.unique(epochs).tolist():
                sel = at[epochs == e]
                rec[sel] = self.source_order(s, e).forward(rec[sel])
            ids[at] = offsets[s] + rec[at]

    def _block_records(self, run: Run, j: int) -> Block:
        """Block ``j`` with its record ids (per source, and in the sources' concatenated id space)."""
        return self._layout(run, j, records=True)

    def source_order(self, s: int, epoch: int) -> Permutation | EpochOrder:
        """The order of source ``s``'s records in its own epoch ``epoch``: a keyed permutation, or
        the window shuffle (:mod:`.order`) when the source has a window."""
        spec = self._orders[s]
        if spec is not None:
            return EpochOrder(
                self.sizes[s], spec, f"{self.versions[s]}|mixture.source.{self.names[s]}", self.seed, epoch
            )
        return _source_perm(self.sizes[s], self.versions[s], self.seed, epoch, self.names[s])

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (to workers) without the block cache: a worker refills its own."""
        return {**self.__dict__, "_blocks": None, "_keys": None, "_span_end": None}

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.__dict__.update(d)
        self._blocks = OrderedDict()


@lru_cache(maxsize=1024)
def _source_perm(n: int, version: str, seed: int, epoch: int, name: str) -> Permutation:
    return Permutation(n, permutation_key(version, seed, epoch, f"mixture.source.{name}"))
