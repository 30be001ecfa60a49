"""Positional sampling with and without replacement: the index at each position of an epoch as a
pure function of (seed, epoch, position). Pure numpy (no torch, no I/O).

Algorithms.

* :func:`keyed_uniform`: a counter-based uniform in ``[0, 1)`` per position: the splitmix64
  finalizer over ``(seed, epoch, stream)`` keys the stream, a second one mixes the position;
  53 bits of the result make the double. Vectorized, O(1) per position.
* :func:`uniform_with_replacement`: ``floor(u * n)``, uniform over ``[0, n)`` (what
  ``RandomSampler(replacement=True)`` draws).
* :func:`weighted_with_replacement`: inverse CDF, ``searchsorted(cumsum(w), u * sum(w))``: index
  ``i`` with probability ``w[i] / sum(w)``; a zero weight is never drawn. O(log n) per position
  after an O(n) cumulative sum (computed once per sampler).
* :func:`weighted_order`: Efraimidis-Spirakis weighted sampling without replacement: the epoch's
  order is the indices sorted by ``-log(u_i) / w_i`` (ascending), which draws successively without
  replacement with probabilities proportional to the remaining weights (the distribution of
  ``torch.multinomial(w, k, replacement=False)``). O(n log n) per epoch (one sort), O(n) memory;
  the caller caches the current epoch's order, so a position costs O(1) after it.

Guarantee. Every result is a pure function of its arguments: a resume at any position needs
nothing but the position. Same distributions as torch's samplers, not the same draws.
"""

from __future__ import annotations

import numpy as np

__all__ = ["keyed_uniform", "uniform_with_replacement", "weighted_order", "weighted_with_replacement"]

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MASK = (1 << 64) - 1


def _fmix(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def _stream_key(seed: int, epoch: int, stream: int) -> np.uint64:
    k = np.array([seed & _MASK], dtype=np.uint64)
    for part in (epoch, stream):
        with np.errstate(over="ignore"):
            k = _fmix(k ^ np.uint64(part & _MASK) + _GOLDEN)
    return k[0]


def keyed_uniform(seed: int, epoch: int, offsets: np.ndarray, stream: int = 0) -> np.ndarray:
    """A uniform double in ``[0, 1)`` per offset, keyed by (seed, epoch, stream)."""
    off = np.asarray(offsets, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        x = _fmix(off * _GOLDEN + _stream_key(seed, epoch, stream))
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def uniform_with_replacement(n: int, seed: int, epoch: int, offsets: np.ndarray) -> np.ndarray:
    """Indices uniform over ``[0, n)``, one independent draw per offset (int64)."""
    return np.minimum((keyed_uniform(seed, epoch, offsets) * n).astype(np.int64), n - 1)


def weighted_with_replacement(cumulative: np.ndarray, seed: int, epoch: int, offsets: np.ndarray) -> np.ndarray:
    """Indices drawn with probability ``w[i] / sum(w)`` (``cumulative = cumsum(w)``), per offset."""
    u = keyed_uniform(seed, epoch, offsets) * cumulative[-1]
    idx = np.searchsorted(cumulative, u, side="right")
    return np.minimum(idx, cumulative.size - 1).astype(np.int64)


def weighted_order(weights: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """The epoch's weighted order without replacement (Efraimidis-Spirakis keys, ascending); zero
    weights sort last (int64, all ``len(weights)`` indices)."""
    w = np.asarray(weights, dtype=np.float64)
    u = keyed_uniform(seed, epoch, np.arange(w.size), stream=1)
    with np.errstate(divide="ignore"):
        keys = np.where(w > 0, -np.log1p(-u) / w, np.inf)  # -log(1 - u), u in [0, 1): finite
    return np.argsort(keys, kind="stable").astype(np.int64)
