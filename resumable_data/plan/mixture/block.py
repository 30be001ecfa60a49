"""One block of a mixed stream: which source, source position and record each of its positions holds.

Algorithm. A block of ``B`` positions gives source ``s`` ``counts[s]`` slots (``sum == B``), laid
out source by source (slot ``k`` belongs to the source whose range of ``[0, B)`` holds it). In-block
position ``i`` visits slot ``perm(i)`` of the block's keyed permutation (the identity without
shuffling) and so belongs to that slot's source ``s``; it is the ``r``-th position of ``s`` in
the block (counted in position order), which makes it position ``q = before[s] + r`` of ``s``'s own
stream. Its record is ``perm_{s,e}(q mod n_s)`` of the source's epoch ``e = q // n_s``, and its
concatenated id ``offset_s`` plus that. :func:`block_arrays` is one compiled call: the block's
permutation over ``[0, B)`` for the layout (then a running count per source, no sort), then per
source one permutation pass per source epoch its range of the block touches, through
:func:`resumable_data.plan.permutation.forward_into` and ``round_keys_into`` (the same Feistel
network and round keys as ``Permutation``, so the records are ``Permutation(n, key).forward``'s).

Guarantee. The arrays are a pure function of (counts, before, the block key, sizes, the source
keys): the definition above, position by position (``tests/plan/test_mixture_fast.py`` checks it
against a per-position reference built from ``forward_reference``). A source's positions in a
block are the contiguous range ``[before[s], before[s] + counts[s])`` of its stream, in order.

Cost. O(B) per block; a block serves ``B / batch`` batches; :func:`span_arrays` computes
consecutive blocks in one call (one dispatch for a run of upcoming positions). The Feistel
passes read their round functions from tables (:func:`~.permutation.round_table_into`: a
block's, built per block, ``6 * 2**half`` 16-bit entries; a source epoch's, built with its keys,
for sources below 2**24 records), about half the time of computing the mixing per round; a larger
source mixes from its round keys. The source keys and tables of a block (:class:`SourceKeys`)
change only when a source's epoch does, so a caller keeps the last table.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit

from resumable_data.plan.permutation import (
    ROUNDS,
    TABLE_MAX_HALF,
    Permutation,
    forward_into,
    forward_table_into,
    round_keys_into,
    round_table_into,
)

__all__ = ["SourceKeys", "block_arrays", "is_span", "span_arrays"]

_NO_KEYS = np.zeros((1, ROUNDS), dtype=np.uint64)
#: Round tables hold ``2**half``-bit values, ``half <= TABLE_MAX_HALF = 12`` bits: 16 bits suffice (a
#: quarter of the cache a uint64 table takes; the same values).
_TABLE = np.uint16
_NO_TABLES = np.zeros(1, dtype=_TABLE)


@njit(cache=True, nogil=True)
def _block_into(
    counts,
    before,
    shuffle,
    block_half,
    btab,
    with_records,
    full,
    sizes,
    offsets,
    halves,
    row0,
    epoch0,
    keys,
    tables,
    table_at,
    src,
    pos,
    rec,
    ids,
    scratch,
    small,
):  # pragma: no cover - compiled
    """One block into ``src``/``pos`` (and ``rec``/``ids`` with records; ``full`` False: ``ids``
    only), ``btab`` the block permutation's round table (filled by the caller). ``scratch``: int64
    rows of at least the block's length (owner, order, slots, inputs, outputs, ``iota`` =
    ``arange``); ``small``: two int64 rows of ``len(counts) + 1`` (slot starts, fill)."""
    ns = counts.shape[0]
    b = counts.sum()
    start = small[0]
    start[0] = 0
    for s in range(ns):
        start[s + 1] = start[s] + counts[s]
    owner = scratch[0]  # slots laid out source by source
    for s in range(ns):
        owner[start[s] : start[s + 1]] = s
    fill = small[1]
    fill[:ns] = start[:ns]
    order = scratch[1]  # in-block positions grouped by source, in position order
    iota = scratch[5]
    slots = scratch[2]
    if shuffle:
        forward_table_into(iota[:b], slots[:b], np.uint64(b), block_half, btab)
    else:
        slots[:b] = iota[:b]
    if full:
        for i in range(b):
            s = owner[slots[i]]
            src[i] = s
            pos[i] = before[s] + fill[s] - start[s]
            order[fill[s]] = i
            fill[s] += 1
    else:
        for i in range(b):
            s = owner[slots[i]]
            order[fill[s]] = i
            fill[s] += 1
    if not with_records:
        return
    xin = scratch[3]
    got = scratch[4]
    for s in range(ns):
        n = sizes[s]
        t = start[s]
        while t < start[s + 1]:  # one piece per source epoch the block's range touches
            q = before[s] + t - start[s]
            e = q // n
            o = q - e * n
            take = min(start[s + 1] - t, n - o)
            off = offsets[s]
            if halves[s] > 0:  # shuffled (n > 1)
                for u in range(take):
                    xin[u] = o + u
                row = row0[s] + e - epoch0[s]
                if table_at[row] >= 0:
                    forward_table_into(
                        xin[:take],
                        got[:take],
                        np.uint64(n),
                        halves[s],
                        tables[table_at[row] : table_at[row] + (ROUNDS << np.int64(halves[s]))],
                    )
                else:
                    forward_into(xin[:take], got[:take], np.uint64(n), halves[s], keys[row])
                if full:
                    for u in range(take):
                        k = order[t + u]
                        rec[k] = got[u]
                        ids[k] = off + got[u]
                else:
                    for u in range(take):
                        ids[order[t + u]] = off + got[u]
            else:
                if full:
                    for u in range(take):
                        k = order[t + u]
                        rec[k] = o + u
                        ids[k] = off + o + u
                else:
                    for u in range(take):
                        ids[order[t + u]] = off + o + u
            t += take


@njit(cache=True, nogil=True)
def _block_table(block_key, block_half, btab):  # pragma: no cover - compiled
    """The round table of the block permutation keyed ``block_key`` into ``btab``."""
    bkeys = np.empty(ROUNDS, dtype=np.uint64)
    round_keys_into(block_key, bkeys)
    round_table_into(bkeys, block_half, btab)


def _scratch(b: int, ns: int) -> tuple[np.ndarray, np.ndarray]:
    scratch = np.empty((6, max(b, 1)), dtype=np.int64)
    scratch[5] = np.arange(max(b, 1), dtype=np.int64)
    return scratch, np.empty((2, ns + 1), dtype=np.int64)


@njit(cache=True, nogil=True)
def _span_kernel(
    counts,
    before,
    shuffle,
    block_keys,
    block_half,
    full,
    sizes,
    offsets,
    halves,
    row0,
    epoch0,
    keys,
    tables,
    table_at,
    src,
    pos,
    rec,
    ids,
    scratch,
    small,
):  # pragma: no cover - compiled
    """Consecutive blocks (row ``k`` of ``counts``) one after another: block ``k + 1`` starts
    where block ``k`` left each source (``before + counts[k]``)."""
    at = 0
    here = before.copy()
    btab = np.empty(ROUNDS << np.int64(block_half), dtype=_TABLE)
    for k in range(counts.shape[0]):
        b = counts[k].sum()
        if shuffle:
            _block_table(block_keys[k], block_half, btab)
        if full:
            _block_into(
                counts[k],
                here,
                shuffle,
                block_half,
                btab,
                True,
                True,
                sizes,
                offsets,
                halves,
                row0,
                epoch0,
                keys,
                tables,
                table_at,
                src[at : at + b],
                pos[at : at + b],
                rec[at : at + b],
                ids[at : at + b],
                scratch,
                small,
            )
        else:
            _block_into(
                counts[k],
                here,
                shuffle,
                block_half,
                btab,
                True,
                False,
                sizes,
                offsets,
                halves,
                row0,
                epoch0,
                keys,
                tables,
                table_at,
                src,
                pos,
                rec,
                ids[at : at + b],
                scratch,
                small,
            )
        here += counts[k]
        at += b


@njit(cache=True, nogil=True)
def is_span(pos):  # pragma: no cover - compiled
    """Whether ``pos`` (int64, non-empty) holds consecutive positions in increasing order."""
    for i in range(1, pos.shape[0]):  # noqa: SIM110 (numba compiles loops, not generators)
        if pos[i] != pos[i - 1] + 1:
            return False
    return True


class SourceKeys:
    """The round keys of the source epochs a block touches: source ``s``'s epoch ``e`` is row
    ``row0[s] + e - epoch0[s]`` of ``keys``; ``halves[s] == 0`` means id order (no shuffle, or a
    one-record source). It serves every later block whose range of each source's stream lies in
    ``[lo[s], hi[s])`` (the source epochs it holds), so consecutive blocks share one table."""

    __slots__ = ("epoch0", "halves", "hi", "keys", "lo", "row0", "table_at", "tables")

    def __init__(
        self,
        counts: np.ndarray,
        before: np.ndarray,
        sizes: np.ndarray,
        order: Callable[[int, int], Permutation | None] | None,
    ) -> None:
        ns = len(sizes)
        self.row0 = np.zeros(ns, dtype=np.int64)
        self.epoch0 = np.zeros(ns, dtype=np.int64)
        self.halves = np.zeros(ns, dtype=np.uint64)
        self.lo = np.zeros(ns, dtype=np.int64)
        self.hi = np.full(ns, 1 << 62, dtype=np.int64)  # id order needs no key
        rows: list[np.ndarray] = []
        row_halves: list[int] = []
        if order is not None:
            self.hi[sizes > 1] = 0  # a source with keys to hold serves no block until it has them
            for s in np.flatnonzero((counts > 0) & (sizes > 1)).tolist():
                n, q0 = int(sizes[s]), int(before[s])
                first, last = q0 // n, (q0 + int(counts[s]) - 1) // n  # the source epochs this block touches
                self.row0[s], self.epoch0[s] = len(rows), first
                self.lo[s], self.hi[s] = first * n, (last + 1) * n
                if order(s, first) is None:  # the caller orders this source itself: id order here
                    self.lo[s], self.hi[s] = 0, 1 << 62
                    continue
                for e in range(first, last + 1):
                    p = order(s, e)
                    assert p is not None  # an order that keys a source's first epoch keys all of them
                    self.halves[s] = p.half
                    rows.append(p.round_keys)
                    row_halves.append(int(p.half))
        self.keys = np.stack(rows) if rows else _NO_KEYS
        self.tables, self.table_at = _tables(self.keys, row_halves)

    def serves(self, counts: np.ndarray, before: np.ndarray) -> bool:
        """Whether this table holds every source epoch of the block (``counts``, ``before``)."""
        return bool((before >= self.lo).all() and (before + counts <= self.hi).all())


def _tables(keys: np.ndarray, row_halves: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Round tables (:func:`~.permutation.round_table_into`) of every row of ``keys`` whose half
    is at most ``TABLE_MAX_HALF`` bits, end to end, and each row's offset into them (-1: none,
    the kernel mixes from the round keys)."""
    table_at = np.full(max(len(row_halves), 1), -1, dtype=np.int64)
    size = 0
    for r, h in enumerate(row_halves):
        if h <= TABLE_MAX_HALF:
            table_at[r] = size
            size += ROUNDS << h
    if not size:
        return _NO_TABLES, table_at
    tables = np.empty(size, dtype=_TABLE)
    for r, h in enumerate(row_halves):
        if table_at[r] >= 0:
            round_table_into(keys[r], np.uint64(h), tables[table_at[r] : table_at[r] + (ROUNDS << h)])
    return tables, table_at


def block_arrays(
    counts: np.ndarray,
    before: np.ndarray,
    block_key: int | None,
    block_half: int | np.integer,
    sizes: np.ndarray | None = None,
    offsets: np.ndarray | None = None,
    keys: SourceKeys | None = None,
) -> tuple[np.ndarray, ...]:
    """(source, source position) of each in-block position, plus (record in the source,
    concatenated id) when ``sizes``, ``offsets`` and ``keys`` are given. ``block_key``: the key of
    the block's permutation (``block_half`` bits per Feistel half), None for the identity."""
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    b = int(counts.sum())
    src = np.empty(b, dtype=np.int64)
    pos = np.empty(b, dtype=np.int64)
    shuffle = block_key is not None and b > 1
    records = keys is not None
    if keys is None:
        sizes = offsets = np.zeros(len(counts), dtype=np.int64)
        keys = SourceKeys(counts, sizes, sizes + 1, None)
    rec = np.empty(b if records else 0, dtype=np.int64)
    ids = np.empty(b if records else 0, dtype=np.int64)
    half = np.uint64(block_half if shuffle else 1)
    btab = np.empty(ROUNDS << int(half), dtype=_TABLE)
    if shuffle and block_key is not None:
        _block_table(np.uint64(block_key), half, btab)
    scratch, small = _scratch(b, len(counts))
    _block_into(
        counts,
        np.ascontiguousarray(before, dtype=np.int64),
        shuffle,
        half,
        btab,
        records,
        True,
        sizes,
        offsets,
        keys.halves,
        keys.row0,
        keys.epoch0,
        keys.keys,
        keys.tables,
        keys.table_at,
        src,
        pos,
        rec,
        ids,
        scratch,
        small,
    )
    return (src, pos, rec, ids) if records else (src, pos)


def span_arrays(
    counts: np.ndarray,
    before: np.ndarray,
    block_keys: np.ndarray | None,
    block_half: int | np.integer,
    sizes: np.ndarray,
    offsets: np.ndarray,
    keys: SourceKeys,
    *,
    full: bool = True,
) -> tuple[np.ndarray, ...]:
    """:func:`block_arrays` (with records) of consecutive blocks in one compiled call: row ``k`` of
    ``counts`` is block ``k``'s counts, ``before`` the sources' counts before the first block
    (each later block starts where the one before left them), ``block_keys[k]`` block ``k``'s
    permutation key (None: the identity); ``keys`` must serve every block of the span. The arrays
    are the blocks' arrays one after another, element for element :func:`block_arrays`'.
    ``full=False``: the concatenated ids only (the other three arrays empty)."""
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    b = int(counts.sum())
    shuffle = block_keys is not None and b > counts.shape[0]  # blocks of one position: no permutation
    bkeys = np.zeros(counts.shape[0], dtype=np.uint64) if block_keys is None else block_keys
    ids = np.empty(b, dtype=np.int64)
    src, pos, rec = (np.empty(b if full else 0, dtype=np.int64) for _ in range(3))
    scratch, small = _scratch(int(counts.sum(axis=1).max(initial=0)), counts.shape[1])
    _span_kernel(
        counts,
        np.ascontiguousarray(before, dtype=np.int64),
        shuffle,
        bkeys,
        np.uint64(block_half if shuffle else 1),
        full,
        sizes,
        offsets,
        keys.halves,
        keys.row0,
        keys.epoch0,
        keys.keys,
        keys.tables,
        keys.table_at,
        src,
        pos,
        rec,
        ids,
        scratch,
        small,
    )
    return src, pos, rec, ids
