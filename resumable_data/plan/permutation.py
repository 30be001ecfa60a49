"""Keyed bijective permutation of ``[0, n)``: a balanced Feistel network with cycle walking.

Algorithm. Let ``b`` be the bit length of ``n - 1`` rounded up to an even number (at least 2), so
the Feistel domain ``[0, 2**b)`` holds ``[0, n)`` and is less than ``4 n``. An index is split into
two ``b/2``-bit halves and run through ``ROUNDS`` rounds ``(L, R) -> (R, L ^ F_i(R))`` with
``F_i(R) = fmix64(R ^ k_i) & mask`` (the splitmix64 finalizer). That is a bijection of the domain
for any round function; "cycle walking" re-applies it until the value falls back inside
``[0, n)``, which restricts the bijection to ``[0, n)`` (expected fewer than 4 passes).

Guarantee. For every ``n`` in ``[0, 2**62]`` and every key, :meth:`Permutation.forward` is a
bijection of ``[0, n)`` and :meth:`Permutation.inverse` is its inverse. The output is a pure
function of ``(n, key)``; round keys come from the 64-bit key by a splitmix64 sequence, and the
key from ``xxh3_64`` of (dataset version hash, seed, epoch, tag) in :func:`permutation_key`.

Cost. O(1) memory and O(1) time per index, whatever ``n``; a compiled (numba) loop does the bulk
work (:func:`forward_into` walks the cycles by passes over the whole array, which lets the CPU
overlap the indices' rounds) and :func:`forward_reference` is the same function in plain numpy,
the executable specification the tests compare against. For halves of at most
``TABLE_MAX_HALF`` bits, :func:`round_table_into` tabulates each round function over its
``2**half`` inputs and :func:`forward_table_into` runs the same walk reading them (the same
values; a table read per round instead of the mixing, for callers that evaluate many indices
of one permutation, such as the mixture's block kernel, and :meth:`Permutation.forward` for
``TABLE_MIN_INDICES`` or more indices: about twice as fast on a run of records). A restore needs nothing: any index is computed directly.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import xxhash
from numba import njit

from resumable_data.errors import ConfigError, describe

__all__ = [
    "MAX_DOMAIN",
    "ROUNDS",
    "TABLE_MAX_HALF",
    "Permutation",
    "forward_into",
    "forward_reference",
    "forward_table_into",
    "permutation_key",
    "round_keys_into",
    "round_table_into",
]

ROUNDS = 6
#: Largest half width whose round functions :func:`round_table_into` tabulates (``ROUNDS * 2**12`` entries).
TABLE_MAX_HALF = 12
_CHUNK = 256  # indices per pass of forward_into (its walk list stays in cache)
#: ``Permutation.forward`` reads round tables for calls of at least this many indices (a run of
#: records: :class:`~.record_runs.RecordRuns`) when the half is at most ``TABLE_MAX_HALF`` bits.
TABLE_MIN_INDICES = 512
MAX_DOMAIN = 1 << 62
_U64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


def _fmix64(z: int) -> int:
    z &= _U64
    z = ((z ^ (z >> 30)) * _M1) & _U64
    z = ((z ^ (z >> 27)) * _M2) & _U64
    return z ^ (z >> 31)


def _round_keys(key: int) -> np.ndarray:
    return np.array([_fmix64(key + (i + 1) * _GOLDEN) for i in range(ROUNDS)], dtype=np.uint64)


def permutation_key(version_hash: str, seed: int, epoch: int, tag: str) -> int:
    """The 64-bit key of one epoch's permutation: ``xxh3_64`` of its inputs, length-prefixed."""
    ver = version_hash.encode()
    tg = tag.encode()
    payload = b"rd.perm/1" + struct.pack("<I", len(ver)) + ver + struct.pack("<QQ", seed, epoch)
    return xxhash.xxh3_64_intdigest(payload + struct.pack("<I", len(tg)) + tg)


@njit(cache=True, nogil=True)
def _f(r, k, mask):  # pragma: no cover - compiled
    z = r ^ k
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_M1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_M2)
    z = z ^ (z >> np.uint64(31))
    return z & mask


@njit(cache=True, nogil=True, inline="always")
def round_keys_into(key, out):  # pragma: no cover - compiled
    """The round keys of ``key`` (uint64) into ``out`` (``ROUNDS`` uint64): the compiled form of
    the round-key sequence ``Permutation`` uses, for compiled callers of :func:`forward_into`."""
    for i in range(out.shape[0]):
        out[i] = _f(key + np.uint64(i + 1) * np.uint64(_GOLDEN), np.uint64(0), ~np.uint64(0))


@njit(cache=True, nogil=True, inline="always")
def _pass(x, half, mask, keys):  # pragma: no cover - compiled
    left = x >> half
    right = x & mask
    for i in range(ROUNDS):
        left, right = right, left ^ _f(right, keys[i], mask)
    return (left << half) | right


@njit(cache=True, nogil=True)
def forward_into(xs, out, n, half, keys):  # pragma: no cover - compiled
    """``out[j] = forward(xs[j])`` (int64 arrays; ``n`` and ``half`` uint64, ``keys`` the round
    keys), callable from other compiled code. Cycle walking by passes, per chunk of ``_CHUNK``
    indices: one pass of the network over the chunk (no data-dependent branch, so the CPU
    overlaps the indices' rounds), then passes over its indices still outside ``[0, n)``."""
    mask = (np.uint64(1) << half) - np.uint64(1)
    m = xs.shape[0]
    todo = np.empty(min(m, _CHUNK), dtype=np.int64)
    for c0 in range(0, m, _CHUNK):
        c = 0
        for j in range(c0, min(m, c0 + _CHUNK)):
            x = _pass(np.uint64(xs[j]), half, mask, keys)
            out[j] = np.int64(x)
            todo[c] = j
            c += np.int64(x >= n)  # kept only when outside (branch-free)
        while c > 0:
            kept = 0
            for t in range(c):
                j = todo[t]
                x = _pass(np.uint64(out[j]), half, mask, keys)
                out[j] = np.int64(x)
                todo[kept] = j
                kept += np.int64(x >= n)
            c = kept


@njit(cache=True, nogil=True)
def round_table_into(keys, half, out):  # pragma: no cover - compiled
    """The round functions as tables: ``out[i * 2**half + r] = F_i(r)`` for every half value ``r``
    (``out`` holds ``ROUNDS * 2**half`` uint64; ``half <= TABLE_MAX_HALF``)."""
    size = np.int64(1) << np.int64(half)
    mask = np.uint64(size - 1)
    for i in range(ROUNDS):
        for r in range(size):
            out[i * size + r] = _f(np.uint64(r), keys[i], mask)


@njit(cache=True, nogil=True, inline="always")
def _table_pass(x, half, mask, table, size):  # pragma: no cover - compiled
    left = x >> half
    right = x & mask
    for i in range(ROUNDS):
        left, right = right, left ^ table[i * size + np.int64(right)]
    return (left << half) | right


@njit(cache=True, nogil=True)
def forward_table_into(xs, out, n, half, table):  # pragma: no cover - compiled
    """:func:`forward_into` with the round functions read from ``table`` (:func:`round_table_into`
    of the same round keys): the same values, a table read per round in place of the mixing."""
    mask = (np.uint64(1) << half) - np.uint64(1)
    size = np.int64(1) << np.int64(half)
    m = xs.shape[0]
    todo = np.empty(min(m, _CHUNK), dtype=np.int64)
    for c0 in range(0, m, _CHUNK):
        c = 0
        for j in range(c0, min(m, c0 + _CHUNK)):
            x = _table_pass(np.uint64(xs[j]), half, mask, table, size)
            out[j] = np.int64(x)
            todo[c] = j
            c += np.int64(x >= n)
        while c > 0:
            kept = 0
            for t in range(c):
                j = todo[t]
                x = _table_pass(np.uint64(out[j]), half, mask, table, size)
                out[j] = np.int64(x)
                todo[kept] = j
                kept += np.int64(x >= n)
            c = kept


@njit(cache=True, nogil=True)
def _inverse_kernel(xs, out, n, half, keys):  # pragma: no cover - compiled
    mask = (np.uint64(1) << half) - np.uint64(1)
    for j in range(xs.shape[0]):
        x = np.uint64(xs[j])
        while True:
            left = x >> half
            right = x & mask
            for i in range(keys.shape[0] - 1, -1, -1):
                left, right = right ^ _f(left, keys[i], mask), left
            x = (left << half) | right
            if x < n:
                break
        out[j] = np.int64(x)


def _half_bits(n: int) -> int:
    bits = max(2, (n - 1).bit_length())
    return (bits + 1) // 2


@dataclass(frozen=True)
class Permutation:
    """A keyed bijection of ``[0, n)``; ``forward(i)`` is the i-th element of the permuted order."""

    n: int
    key: int
    #: Derived in ``__post_init__``: the round keys and the bits per Feistel half.
    _keys: np.ndarray = field(init=False, repr=False, compare=False)
    _half: np.uint64 = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, (int, np.integer)) or not 0 <= self.n <= MAX_DOMAIN:
            raise ConfigError(describe("n", self.n, "an integer in [0, 2**62]", "pass the domain size"))
        if isinstance(self.key, bool) or not isinstance(self.key, (int, np.integer)) or not 0 <= self.key <= _U64:
            raise ConfigError(describe("key", self.key, "an unsigned 64-bit integer", "use permutation_key()"))
        object.__setattr__(self, "n", int(self.n))
        object.__setattr__(self, "key", int(self.key))
        object.__setattr__(self, "_keys", _round_keys(self.key))
        object.__setattr__(self, "_half", np.uint64(_half_bits(self.n)))

    @classmethod
    def keyed(cls, n: int, *, version_hash: str, seed: int, epoch: int, tag: str = "global") -> Permutation:
        """The permutation of one epoch, keyed by (version hash, seed, epoch, tag)."""
        return cls(n, permutation_key(version_hash, seed, epoch, tag))

    @property
    def round_keys(self) -> np.ndarray:
        """The ``ROUNDS`` round keys (uint64; do not modify), for compiled callers of :func:`forward_into`."""
        return self._keys

    @property
    def half(self) -> np.uint64:
        """Bits per Feistel half (``b / 2``), for compiled callers of :func:`forward_into`."""
        return self._half

    def _run(self, idx, kernel) -> np.ndarray:
        xs = np.asarray(idx)
        if xs.dtype.kind not in "iu":
            raise ConfigError(describe("idx", idx, "integer indices", "pass an integer array"))
        flat = np.ascontiguousarray(xs, dtype=np.int64).reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= self.n):
            raise ConfigError(describe("idx", idx, f"indices in [0, {self.n})", "index inside the permuted domain"))
        if self.n <= 1:
            return flat.reshape(xs.shape).copy()
        out = np.empty_like(flat)
        kernel(flat, out, np.uint64(self.n), self._half, self._keys)
        return out.reshape(xs.shape)

    def forward(self, idx) -> np.ndarray:
        """Permuted values of ``idx`` (any integer array shape; vectorized). Many indices of a
        domain whose halves are at most ``TABLE_MAX_HALF`` bits are mapped by
        :func:`forward_table_into` over this permutation's round tables (the same values, about
        twice as fast; the tables of the last few permutations are kept, at most 192 KiB each)."""
        if np.size(idx) >= TABLE_MIN_INDICES and self._half <= TABLE_MAX_HALF and self.n > 1:
            table = _round_table(self.key, int(self._half))
            return self._run(idx, lambda xs, out, n, half, keys: forward_table_into(xs, out, n, half, table))
        return self._run(idx, forward_into)

    def inverse(self, idx) -> np.ndarray:
        """The indices whose permuted values are ``idx``: ``inverse(forward(i)) == i``."""
        return self._run(idx, _inverse_kernel)

    def __call__(self, idx) -> np.ndarray:
        return self.forward(idx)


@lru_cache(maxsize=8)
def _round_table(key: int, half: int) -> np.ndarray:
    """The round tables of ``key``'s round keys for ``half``-bit halves (:func:`round_table_into`)."""
    table = np.empty(ROUNDS << half, dtype=np.uint64)
    round_table_into(_round_keys(key), np.uint64(half), table)
    return table


def forward_reference(n: int, key: int, idx) -> np.ndarray:
    """The same permutation in plain numpy: the specification the compiled kernel must match."""
    xs = np.asarray(idx, dtype=np.uint64).copy()
    if n <= 1:
        return xs.astype(np.int64)
    half = np.uint64(_half_bits(n))
    mask = (np.uint64(1) << half) - np.uint64(1)
    keys = _round_keys(key)
    todo = np.ones(xs.shape, dtype=bool)
    with np.errstate(over="ignore"):
        while todo.any():
            x = xs[todo]
            left, right = x >> half, x & mask
            for k in keys:
                z = right ^ k
                z = (z ^ (z >> np.uint64(30))) * np.uint64(_M1)
                z = (z ^ (z >> np.uint64(27))) * np.uint64(_M2)
                z = (z ^ (z >> np.uint64(31))) & mask
                left, right = right, left ^ z
            xs[todo] = (left << half) | right
            todo[todo] = xs[todo] >= np.uint64(n)
    return xs.astype(np.int64)
