"""The window shuffle over read units: blocks are the source's record batches / row groups.

Why. The window shuffle (:mod:`.order`) permutes blocks of ``block`` consecutive records and
shuffles records inside windows of ``window // block`` blocks. When blocks do not line up with
what a reader fetches (a record batch, a Parquet row group, an object-store range), a read unit
is split between blocks that land in different windows, far apart in the epoch: it is needed
two or three times at random points, and a byte-bounded cache has to fetch it again (1.42-1.80
fetches per unit at a 50% budget on 65,536 rows, docs/object-storage.md). Here the blocks *are*
the read units, so every unit belongs to exactly one window and is needed during that window
only: one fetch per unit per epoch with a cache of a couple of windows.

Algorithm. Units ``u`` in ``[0, nb)`` start at record ``starts[u]`` (``starts[0] == 0``, strictly
increasing, each unit non-empty; the last ends at ``n``). Per epoch the units are permuted by a
keyed :class:`~.permutation.Permutation` (tag ``window.units``); slot ``s`` holds unit
``perm(s)``, and slot offsets are the prefix sums of the permuted unit sizes. Windows are runs of
``k = max(1, round(window * nb / n))`` consecutive slots (``window`` records on average units);
records are permuted inside window ``w`` by a keyed permutation of its length (tag
``units.{w}``). ``order(o)``: find the window of offset ``o`` (binary search of the window
starts), permute inside it, find the slot of the permuted offset, return
``starts[perm(slot)] + (offset in slot)``.

Guarantee. For every epoch ``o -> order(o)`` is a bijection of ``[0, n)`` (a permutation of
slots, then of offsets inside each window, then a bijection slot offset -> record), and each
window's records are exactly its ``k`` units' records. Outputs depend only on (version hash,
seed, epoch, window, the unit starts, o); the unit starts are a function of the pinned files.

Cost. O(nb) time and memory once per epoch (the slot layout, cached for the 8 latest epochs and
layouts), then O(len(offsets) * log nb) per call; a restore is free (nothing is replayed).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol, runtime_checkable

import numpy as np
import xxhash

from resumable_data.errors import ConfigError, describe
from resumable_data.plan.permutation import Permutation

__all__ = ["HasReadUnits", "ReadUnits", "unit_window_records", "units_per_window"]

_TAG_UNITS = "window.units"


@runtime_checkable
class HasReadUnits(Protocol):
    """A source whose records are read in units (``rd.ArrowShards``: record batches / row groups)."""

    def __len__(self) -> int: ...

    def unit_starts(self) -> np.ndarray:
        """The first record id of every unit, in order."""
        ...


@dataclass(frozen=True, eq=False)
class ReadUnits:
    """The first record id of every read unit of a source of ``n`` records (see the module docs);
    equal and hashed by ``(n, digest)``, so a layout keys a cache without hashing its array."""

    starts: np.ndarray
    n: int
    digest: str

    @classmethod
    def of(cls, starts: object, n: int) -> ReadUnits:
        """Check and freeze ``starts``; :class:`rd.ConfigError` unless it is a flat array of
        integers that starts at 0, increases strictly and stays below ``n`` (an integer >= 1)."""
        a = _integer_starts(starts)
        whole = isinstance(n, (int, np.integer)) and not isinstance(n, bool) and 1 <= n < _MAX_N
        if a is None or not whole:
            raise ConfigError(
                describe(
                    "unit starts",
                    f"{type(starts).__name__} {starts!r:.80}, n={n!r}",
                    "a flat array of integer record ids and an integer record count n in [1, 2**63)",
                    "return the first record id of every unit from unit_starts() as integers (an int64 array)",
                )
            )
        if a.size == 0 or a[0] != 0 or (a.size > 1 and not (np.diff(a) > 0).all()) or a[-1] >= n:
            raise ConfigError(
                describe(
                    "unit starts",
                    f"{a.size} starts, first {a[:1].tolist()}, last {a[-1:].tolist()}, n={n}",
                    "0 first, strictly increasing, every start below the record count",
                    "pass the source's unit_starts() for its own record count",
                )
            )
        a.setflags(write=False)
        return cls(a, int(n), xxhash.xxh3_128_hexdigest(a.tobytes() + int(n).to_bytes(8, "little")))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReadUnits) and (self.n, self.digest) == (other.n, other.digest)

    def __hash__(self) -> int:
        return hash((self.n, self.digest))

    def __len__(self) -> int:
        return int(self.starts.size)


_MAX_N = 1 << 63


def _integer_starts(starts: object) -> np.ndarray | None:
    """``starts`` as an int64 array when it is a flat array of integers that fit (an empty one
    included), else None: floats are never truncated, nothing else is coerced."""
    try:
        raw = np.asarray(starts)
    except (TypeError, ValueError, OverflowError):
        return None
    if raw.ndim != 1:
        return None
    if raw.size == 0:
        return np.zeros(0, dtype=np.int64)
    if raw.dtype.kind not in "iu" or (raw.dtype.kind == "u" and int(raw.max()) >= _MAX_N):
        return None
    return raw.astype(np.int64)


def units_per_window(window: int, units: ReadUnits) -> int:
    """Units in one window: ``window`` records over the average unit, rounded, at least 1."""
    nb = len(units)
    return max(1, (window * nb + units.n // 2) // units.n)


@dataclass(frozen=True)
class _Layout:
    perm: Permutation  # slot -> unit
    slot_starts: np.ndarray  # nb + 1 offsets: where each slot begins in the epoch (then n)
    window_starts: np.ndarray  # where each window begins (then n)


@lru_cache(maxsize=8)
def _layout(units: ReadUnits, k: int, version_hash: str, seed: int, epoch: int) -> _Layout:
    nb = len(units)
    perm = Permutation.keyed(nb, version_hash=version_hash, seed=seed, epoch=epoch, tag=_TAG_UNITS)
    sizes = np.diff(np.append(units.starts, units.n))
    slot_starts = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(sizes[perm.forward(np.arange(nb, dtype=np.int64))], out=slot_starts[1:])
    window_starts = np.append(slot_starts[:nb:k], units.n)
    return _Layout(perm, slot_starts, window_starts)


@lru_cache(maxsize=256)
def _inner(length: int, version_hash: str, seed: int, epoch: int, window: int) -> Permutation:
    return Permutation.keyed(length, version_hash=version_hash, seed=seed, epoch=epoch, tag=f"units.{window}")


def unit_window_records(
    units: ReadUnits, window: int, offsets: np.ndarray, *, version_hash: str, seed: int, epoch: int
) -> np.ndarray:
    """Record ids at in-epoch ``offsets`` (int64, each in ``[0, units.n)``) under the window
    shuffle whose blocks are ``units`` (see the module docs)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    out = np.empty_like(offsets)
    if offsets.size == 0:
        return out
    lay = _layout(units, units_per_window(window, units), version_hash, seed, epoch)
    wins = np.searchsorted(lay.window_starts, offsets, side="right") - 1
    first = int(wins[0])
    groups = [(first, slice(None))] if (wins == first).all() else [(int(w), wins == w) for w in np.unique(wins)]
    for w, sel in groups:
        start, stop = int(lay.window_starts[w]), int(lay.window_starts[w + 1])
        pos = start + _inner(stop - start, version_hash, seed, epoch, w).forward(offsets[sel] - start)
        slot = np.searchsorted(lay.slot_starts, pos, side="right") - 1
        out[sel] = units.starts[lay.perm.forward(slot)] + (pos - lay.slot_starts[slot])
    return out
