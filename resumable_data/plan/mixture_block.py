"""One block of a mixed stream: which source, source position and record each of its positions holds.

Algorithm. A block of ``B`` positions gives source ``s`` ``counts[s]`` slots (``sum == B``), laid
out source by source (slot ``k`` belongs to the source whose range of ``[0, B)`` holds it). In-block
position ``i`` visits slot ``perm(i)`` of the block's keyed permutation (the identity without
shuffling) and so belongs to that slot's source ``s``; it is the ``r``-th position of ``s`` in
the block (counted in position order), which makes it position ``q = before[s] + r`` of ``s``'s own
stream. Its record is ``perm_{s,e}(q mod n_s)`` of the source's epoch ``e = q // n_s``. Both
passes are one compiled loop over the block (:func:`block_layout`, :func:`block_records`): one
Feistel evaluation per position and per pass, a running count per source, no sort; the Feistel
core is :func:`resumable_data.plan.permutation.feistel_forward`, the very function
``Permutation.forward`` runs.

Guarantee. The arrays are a pure function of (counts, before, sizes, the keys): the same as
evaluating the definition above position by position (``tests/plan/test_mixture_fast.py`` checks
that against a per-position reference built from ``forward_reference``). A source's positions in
a block are the contiguous range ``[before[s], before[s] + counts[s])`` of its stream, in order.

Cost. O(B) per pass plus, per source present, one keyed permutation per source epoch its range
touches (``lru``-cached by the caller); a block serves ``B / batch`` batches.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit

from resumable_data.plan.permutation import ROUNDS, Permutation, feistel_forward

__all__ = ["block_layout", "block_records"]

_NO_KEYS = np.zeros((1, ROUNDS), dtype=np.uint64)


@njit(cache=True, nogil=True)
def _layout_kernel(owner, shuffle, half, keys, before, src, pos):  # pragma: no cover - compiled
    b = owner.shape[0]
    seen = np.zeros(before.shape[0], dtype=np.int64)
    nb = np.uint64(b)
    mask = (np.uint64(1) << half) - np.uint64(1)
    for i in range(b):
        k = np.int64(feistel_forward(np.uint64(i), nb, half, mask, keys)) if shuffle else np.int64(i)
        s = owner[k]
        src[i] = s
        pos[i] = before[s] + seen[s]
        seen[s] += 1


@njit(cache=True, nogil=True)
def _records_kernel(src, pos, sizes, halves, row0, epoch0, keys, shuffle, rec):  # pragma: no cover - compiled
    for i in range(src.shape[0]):
        s = src[i]
        n = sizes[s]
        q = pos[i]
        e = q // n
        o = q - e * n
        if shuffle and n > 1:
            h = halves[s]
            mask = (np.uint64(1) << h) - np.uint64(1)
            rec[i] = np.int64(feistel_forward(np.uint64(o), np.uint64(n), h, mask, keys[row0[s] + e - epoch0[s]]))
        else:
            rec[i] = o


def block_layout(counts: np.ndarray, before: np.ndarray, perm: Permutation | None) -> tuple[np.ndarray, np.ndarray]:
    """(source, position in that source's stream) of each in-block position; ``perm``: the
    block's keyed permutation of ``[0, sum(counts))``, None for the identity (no shuffle)."""
    counts = np.asarray(counts, dtype=np.int64)
    owner = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    b = len(owner)
    src = np.empty(b, dtype=np.int64)
    pos = np.empty(b, dtype=np.int64)
    shuffle = perm is not None and b > 1
    keys = perm.round_keys if shuffle else _NO_KEYS[0]
    half = perm.half if shuffle else np.uint64(1)
    _layout_kernel(owner, shuffle, half, keys, np.ascontiguousarray(before, dtype=np.int64), src, pos)
    return src, pos


def block_records(src: np.ndarray, pos: np.ndarray, counts: np.ndarray, before: np.ndarray,
                  sizes: np.ndarray, order: Callable[[int, int], Permutation] | None) -> np.ndarray:
    """Record id inside its source of each in-block position, from :func:`block_layout`'s arrays;
    ``order(s, e)``: source ``s``'s keyed permutation in its epoch ``e`` (None: id order)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    rec = np.empty(len(src), dtype=np.int64)
    ns = len(sizes)
    row0 = np.zeros(ns, dtype=np.int64)
    epoch0 = np.zeros(ns, dtype=np.int64)
    halves = np.ones(ns, dtype=np.uint64)
    rows: list[np.ndarray] = []
    if order is not None:
        for s in np.flatnonzero((np.asarray(counts) > 0) & (sizes > 1)).tolist():
            n, q0 = int(sizes[s]), int(before[s])
            first, last = q0 // n, (q0 + int(counts[s]) - 1) // n  # the source epochs this block touches
            row0[s], epoch0[s] = len(rows), first
            for e in range(first, last + 1):
                p = order(s, e)
                halves[s] = p.half
                rows.append(p.round_keys)
    keys = np.stack(rows) if rows else _NO_KEYS
    _records_kernel(src, pos, sizes, halves, row0, epoch0, keys, order is not None, rec)
    return rec
