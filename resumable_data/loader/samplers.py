"""Positional versions of torch's ``RandomSampler`` and ``WeightedRandomSampler``.

``rd.DataLoader`` translates torch's samplers into these automatically (:mod:`.translate`); they
implement :class:`rd.PositionalSampler`, so the index at position ``p`` of epoch ``e`` is a pure
function of (seed, e, p) and a resume is a seek. ``num_samples`` sets the epoch length.

Algorithm and cost (the index maths is :mod:`resumable_data.plan.sampling`):

* :class:`PositionalRandomSampler` with replacement: ``floor(u * n)`` of a keyed uniform, O(1)
  per position; without replacement (``num_samples`` != n): block ``j = p // n`` of the epoch is
  a keyed Feistel permutation of ``[0, n)`` (the first ``num_samples % n`` of the last block, as
  torch), O(1) per position, nothing cached.
* :class:`PositionalWeightedSampler` with replacement: inverse CDF of a keyed uniform, O(log n)
  per position after one O(n) cumulative sum. Without replacement: Efraimidis-Spirakis keys
  sorted once per epoch, O(n log n) time and O(n) memory per epoch; the current epoch's order is
  cached, so a resume costs one sort and every position after it O(1).

Guarantee. The same distribution as torch's sampler (not the same draws); restore cost as above.
"""

from __future__ import annotations

import numpy as np

from resumable_data.errors import ConfigError, describe
from resumable_data.plan.permutation import Permutation, permutation_key
from resumable_data.plan.sampling import uniform_with_replacement, weighted_order, weighted_with_replacement

__all__ = ["PositionalRandomSampler", "PositionalWeightedSampler"]


def _num_samples(num_samples: int, limit: int | None) -> int:
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
        raise ConfigError(describe("num_samples", num_samples, "a positive integer", "pass num_samples >= 1"))
    if limit is not None and num_samples > limit:
        raise ConfigError(
            describe(
                "num_samples",
                num_samples,
                f"at most {limit} (records with a positive weight) without replacement",
                "pass replacement=True or a smaller num_samples",
            )
        )
    return int(num_samples)


class PositionalRandomSampler:
    """``RandomSampler(data_source, replacement, num_samples)`` as a pure function of position."""

    def __init__(self, n: int, num_samples: int | None = None, *, replacement: bool = False, seed: int = 0) -> None:
        self.n = int(n)
        self.num_samples = _num_samples(self.n if num_samples is None else num_samples, None)
        self.replacement = bool(replacement)
        self.seed = int(seed)

    def with_seed(self, seed: int) -> PositionalRandomSampler:
        return PositionalRandomSampler(self.n, self.num_samples, replacement=self.replacement, seed=seed)

    def __len__(self) -> int:
        return self.num_samples

    def indices(self, epoch: int, offsets: np.ndarray) -> np.ndarray:
        offsets = np.asarray(offsets, dtype=np.int64)
        if self.replacement:
            return uniform_with_replacement(self.n, self.seed, epoch, offsets)
        blocks, within = np.divmod(offsets, self.n)
        out = np.empty_like(offsets)
        for j in np.unique(blocks).tolist():
            sel = blocks == j
            out[sel] = Permutation(self.n, permutation_key("", self.seed, epoch, f"rd.random/{j}")).forward(within[sel])
        return out

    def fingerprint(self) -> str:
        return f"rd.PositionalRandomSampler(n={self.n}, num_samples={self.num_samples}, replacement={self.replacement})"


class PositionalWeightedSampler:
    """``WeightedRandomSampler(weights, num_samples, replacement)`` as a pure function of position."""

    def __init__(self, weights, num_samples: int, *, replacement: bool = True, seed: int = 0) -> None:
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
        if w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
            raise ConfigError(
                describe(
                    "weights",
                    f"{w.size} weights",
                    "finite, non-negative, at least one positive",
                    "pass one weight per record",
                )
            )
        self.weights = w
        self.replacement = bool(replacement)
        self.num_samples = _num_samples(num_samples, None if replacement else int(np.count_nonzero(w)))
        self.seed = int(seed)
        self._cumulative = np.cumsum(w)
        self._order: tuple[int, np.ndarray] | None = None

    def with_seed(self, seed: int) -> PositionalWeightedSampler:
        return PositionalWeightedSampler(self.weights, self.num_samples, replacement=self.replacement, seed=seed)

    def __len__(self) -> int:
        return self.num_samples

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_order": None}  # workers sort their own epoch

    def indices(self, epoch: int, offsets: np.ndarray) -> np.ndarray:
        offsets = np.asarray(offsets, dtype=np.int64)
        if self.replacement:
            return weighted_with_replacement(self._cumulative, self.seed, epoch, offsets)
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, weighted_order(self.weights, self.seed, epoch))
        return self._order[1][offsets]

    def fingerprint(self) -> str:
        import xxhash

        digest = xxhash.xxh3_64_hexdigest(self.weights.tobytes())
        return (
            f"rd.PositionalWeightedSampler(n={self.weights.size}, num_samples={self.num_samples}, "
            f"replacement={self.replacement}, weights_xxh3={digest})"
        )
