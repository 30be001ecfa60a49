"""Orders: which record an epoch visits at each offset, as a pure function.

Algorithm. ``order(e, o)`` maps an in-epoch offset ``o`` in ``[0, n)`` to a record id:

* ``sequential``: ``o`` itself.
* ``global``: the epoch's keyed permutation of ``[0, n)`` (:mod:`.permutation`) at ``o``.
* ``window`` (the shuffle buffer, rebuilt as a pure function): records form blocks of ``block``
  consecutive ids (the last block may be short); the block order is permuted per epoch; the
  permuted block sequence is cut into windows of ``window // block`` blocks, and records are
  permuted inside each window with a per-(epoch, window) key. A window touches a bounded set of
  blocks, as a shuffle buffer would, but nothing is buffered: any offset is computed directly.

Guarantee. For every order and epoch, ``o -> order(e, o)`` is a bijection of ``[0, n)``: an epoch
visits every record exactly once. Outputs depend only on (version hash, seed, epoch, spec, o).

Cost. O(len(offsets)) time and memory per call, O(1) in ``n`` and in the epoch; a restore is free.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from resumable_data._schema import check_int, coerce_enum, expect_mapping, field_enum, field_int
from resumable_data.errors import ConfigError, ResumeError, UsageError, describe
from resumable_data.plan.permutation import Permutation
from resumable_data.plan.unit_window import ReadUnits, unit_window_records

__all__ = ["EpochOrder", "Order", "OrderSpec", "WindowBlocks", "epoch_records", "window_sum"]

_TAG_GLOBAL = "global"
_TAG_BLOCKS = "window.blocks"

K_KIND = "kind"
K_WINDOW = "window"
K_BLOCK = "block"
K_BLOCKS = "blocks"
_KEYS = frozenset({K_KIND, K_WINDOW, K_BLOCK})


class Order(str, enum.Enum):
    """How an epoch orders the records."""

    SEQUENTIAL = "sequential"
    GLOBAL = "global"
    WINDOW = "window"


class WindowBlocks(str, enum.Enum):
    """What the window shuffle permutes and groups into windows.

    * ``RECORDS`` (default): blocks of ``block`` consecutive records (``window // 16`` unless given).
    * ``READ_UNITS``: the source's read units (an ``rd.ArrowShards``' record batches / row groups),
      so every unit lies in exactly one window: read by range from an object store, each unit is
      fetched once per epoch with a cache of a few windows (:mod:`.unit_window`).
    """

    RECORDS = "records"
    READ_UNITS = "read_units"


@dataclass(frozen=True)
class OrderSpec:
    """An order and, for ``window``, its window and block sizes in records.

    ``block`` defaults to ``max(1, window // 16)``; the effective window is
    ``block * max(1, window // block)`` records. With ``blocks=WindowBlocks.READ_UNITS`` the blocks
    are the source's read units (``block`` is 0) and a window holds ``window`` records on average.
    """

    kind: Order = Order.SEQUENTIAL
    window: int = 0
    block: int = 0
    blocks: WindowBlocks = WindowBlocks.RECORDS

    def __post_init__(self) -> None:
        kind = coerce_enum(self.kind, Order, "order")
        object.__setattr__(self, "kind", kind)
        blocks = coerce_enum(self.blocks, WindowBlocks, "window_blocks")
        object.__setattr__(self, "blocks", blocks)
        if blocks is WindowBlocks.READ_UNITS:
            if kind is not Order.WINDOW or self.block:
                raise ConfigError(
                    describe(
                        "window_blocks",
                        blocks.value,
                        f"the window shuffle without a block size (got order {kind.value!r}, block {self.block})",
                        "pass shuffle_window= with window_blocks='read_units', or drop window_blocks",
                    )
                )
            object.__setattr__(self, "window", check_int(self.window, "shuffle_window", 1))
        elif kind is Order.WINDOW:
            window = check_int(self.window, "shuffle_window", 1)
            block = check_int(self.block, "block", 0) or max(1, window // 16)
            if block > window:
                raise ConfigError(
                    describe(
                        "block", block, f"at most shuffle_window={window}", "pass a smaller block or a larger window"
                    )
                )
            object.__setattr__(self, "window", window)
            object.__setattr__(self, "block", block)
        elif self.window or self.block:
            raise ConfigError(
                describe(
                    "shuffle_window",
                    self.window,
                    f"0 for order={kind.value!r} (a window only applies to the window shuffle)",
                    "drop shuffle_window, or use order='window'",
                )
            )

    @property
    def blocks_per_window(self) -> int:
        """Blocks in one shuffle window (``window // block``, at least 1) for a window order of
        record blocks; 0 otherwise (read-unit windows: :func:`.unit_window.units_per_window`)."""
        return max(1, self.window // self.block) if self.kind is Order.WINDOW and self.block else 0

    def to_dict(self) -> dict[str, Any]:
        """The order as the state's JSON object ``{kind, window, block}``, plus ``blocks`` when
        it is not the default (so the bytes of every earlier order are unchanged)."""
        d: dict[str, Any] = {K_KIND: self.kind.value, K_WINDOW: self.window, K_BLOCK: self.block}
        if self.blocks is not WindowBlocks.RECORDS:
            d[K_BLOCKS] = self.blocks.value
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "order") -> OrderSpec:
        """The order ``d`` (from :meth:`to_dict`) describes; ``where`` names it in errors.

        Raises :class:`rd.ResumeError` on other keys, an unknown kind or a bad integer, and
        :class:`rd.ConfigError` on a window or block the order does not accept."""
        keys = _KEYS | {K_BLOCKS} if isinstance(d, dict) and K_BLOCKS in d else _KEYS
        expect_mapping(d, where, keys)
        blocks = field_enum(d, K_BLOCKS, WindowBlocks, where) if K_BLOCKS in d else WindowBlocks.RECORDS
        if K_BLOCKS in d and blocks is WindowBlocks.RECORDS:  # the default is written by omission only
            raise ResumeError(
                describe(f"{where}.{K_BLOCKS}", d[K_BLOCKS], "absent for record blocks", "pass an unmodified state")
            )
        kind, window, block = (
            field_enum(d, K_KIND, Order, where),
            field_int(d, K_WINDOW, where),
            field_int(d, K_BLOCK, where),
        )
        return cls(kind, window, block, blocks)


def epoch_records(
    n: int,
    spec: OrderSpec,
    offsets: np.ndarray,
    *,
    version_hash: str,
    seed: int,
    epoch: int,
    units: ReadUnits | None = None,
) -> np.ndarray:
    """Record ids visited at in-epoch ``offsets`` (int64 array with values in ``[0, n)``);
    ``units``: the source's read units, needed by (and only by) a read-unit window order."""
    offsets = np.asarray(offsets, dtype=np.int64)
    if spec.kind is Order.SEQUENTIAL:
        return offsets.copy()
    if spec.kind is Order.GLOBAL:
        return _keyed(n, version_hash, seed, epoch, _TAG_GLOBAL).forward(offsets)
    if spec.blocks is WindowBlocks.READ_UNITS:
        if units is None or units.n != n:
            raise UsageError(
                describe(
                    "units",
                    None if units is None else f"read units of {units.n} records",
                    f"the read units of the source's {n} records (a read-unit window shuffle)",
                    "open the source and pass ReadUnits.of(source.unit_starts(), len(source))",
                )
            )
        return unit_window_records(units, spec.window, offsets, version_hash=version_hash, seed=seed, epoch=epoch)
    return _window_records(n, spec, offsets, version_hash=version_hash, seed=seed, epoch=epoch)


@dataclass(frozen=True)
class EpochOrder:
    """One epoch's order as an object: ``forward(offsets)`` is :func:`epoch_records` (what a
    keyed :class:`Permutation` offers, for callers that take either, e.g. a mixture's sources)."""

    n: int
    spec: OrderSpec
    version_hash: str
    seed: int
    epoch: int

    def forward(self, offsets: np.ndarray) -> np.ndarray:
        return epoch_records(
            self.n, self.spec, offsets, version_hash=self.version_hash, seed=self.seed, epoch=self.epoch
        )


@lru_cache(maxsize=256)
def _keyed(n: int, version_hash: str, seed: int, epoch: int, tag: str) -> Permutation:
    return Permutation.keyed(n, version_hash=version_hash, seed=seed, epoch=epoch, tag=tag)


@lru_cache(maxsize=64)
def _block_layout(nb: int, version_hash: str, seed: int, epoch: int) -> tuple[Permutation, int]:
    blocks = _keyed(nb, version_hash, seed, epoch, _TAG_BLOCKS)
    return blocks, int(blocks.inverse(np.array([nb - 1]))[0])  # the slot holding the short block


def _window_records(
    n: int, spec: OrderSpec, offsets: np.ndarray, *, version_hash: str, seed: int, epoch: int
) -> np.ndarray:
    b = spec.block
    k = spec.blocks_per_window
    nb = -(-n // b)
    short = n - (nb - 1) * b  # size of the last block (id nb - 1), in [1, b]
    d = b - short
    blocks, q = _block_layout(nb, version_hash, seed, epoch)

    def slot_start(slot):
        slot = np.asarray(slot, dtype=np.int64)
        return np.where(slot <= q, slot * b, slot * b - d)

    def slot_of(o):
        return np.where(o < q * b + short, o // b, (o + d) // b)

    windows = slot_of(offsets) // k
    out = np.empty_like(offsets)
    if len(offsets) == 0:
        return out
    for w in np.unique(windows):
        sel = windows == w
        w = int(w)
        start = int(slot_start(w * k))
        stop = n if (w + 1) * k >= nb else int(slot_start((w + 1) * k))
        inner = _keyed(stop - start, version_hash, seed, epoch, f"window.{w}").forward(offsets[sel] - start)
        pos = start + inner
        slot = slot_of(pos)
        out[sel] = blocks.forward(slot) * b + (pos - slot_start(slot))
    return out


def window_sum(
    n: int,
    spec: OrderSpec,
    values: np.ndarray,
    block_sums: np.ndarray,
    a: int,
    b: int,
    *,
    version_hash: str,
    seed: int,
    epoch: int,
) -> int:
    """``sum(values[order(o)] for o in [a, b))`` under the window shuffle, where ``block_sums[j]``
    is the sum of ``values`` over block ``j``'s records: a sum does not depend on the order inside
    a window, so the windows wholly inside ``[a, b)`` cost one block-permutation evaluation per
    block (no inner permutation, no loop per window) and only the two partial windows at the ends
    are evaluated record by record (at most two windows of records)."""
    bsz, k = spec.block, spec.blocks_per_window
    nb = -(-n // bsz)
    short = n - (nb - 1) * bsz
    d = bsz - short
    blocks, q = _block_layout(nb, version_hash, seed, epoch)

    def window_start(w: int) -> int:
        slot = w * k
        return n if slot >= nb else (slot * bsz if slot <= q else slot * bsz - d)

    def window_of(o: int) -> int:
        return (o // bsz if o < q * bsz + short else (o + d) // bsz) // k

    def direct(x: int, y: int) -> int:
        if y <= x:
            return 0
        ids = _window_records(
            n, spec, np.arange(x, y, dtype=np.int64), version_hash=version_hash, seed=seed, epoch=epoch
        )
        return int(values[ids].sum())

    if b <= a:
        return 0
    wa = window_of(a)
    w0 = wa if window_start(wa) == a else wa + 1
    w1 = -(-nb // k) if b >= n else window_of(b)
    if w0 >= w1:
        return direct(a, b)
    whole = blocks.forward(np.arange(w0 * k, min(w1 * k, nb), dtype=np.int64))
    return direct(a, window_start(w0)) + int(block_sums[whole].sum()) + direct(window_start(w1), b)
