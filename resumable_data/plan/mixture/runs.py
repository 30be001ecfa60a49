"""The runs of a mixed stream and their closed-form per-block counts (:mod:`.mixture`'s runs).

Algorithm. A run (weights ``w_s`` from position ``start``, the sources' counts ``base`` before
it) gives block ``j`` of ``B`` positions ``floor(w_s B)`` slots of source ``s`` plus one when a
point of the grid ``u_j + k`` (``u_j = frac(j a / 2**64)``, ``a`` the golden-ratio constant) falls
in ``[G_s, G_s + f_s)`` (:mod:`.mixture` states it in full). With the fractional parts scaled to
integers by their common denominator, a block's counts are integer floor divisions, and the extra
slots of blocks ``[0, j)`` are floor sums (:func:`floor_sum`, O(log)).

Guarantee. Exact integer arithmetic (Python integers): no floating point, the same counts on
every machine; :meth:`Run.span_counts` equals :meth:`Run.block_counts` block by block.

Cost. O(S) per block, O(S log) for the counts before any block: a restore costs no walk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = ["Run", "floor_sum"]

_ALPHA = 0x9E3779B97F4A7C15  # golden ratio * 2**64 (odd): the rotation of the extra-slot grid
_M = 1 << 64


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """``sum(floor((a*i + b) / m) for i in range(n))`` in O(log m) (any integer ``a``, ``b``; ``m > 0``).

    The Euclid-like reduction: ``a`` and ``b`` are brought into ``[0, m)`` once; after each swap
    ``a >= m`` always holds and ``b`` may already lie in ``[0, m)``, so only the divisions that
    can change something are done (a restore's floor sums at a step of 10**6 take ~26 rounds)."""
    if n <= 0:
        return 0
    ans = 0
    if not 0 <= a < m:
        q, a = divmod(a, m)
        ans += q * (n * (n - 1) >> 1)
    if not 0 <= b < m:
        q, b = divmod(b, m)
        ans += q * n
    while True:
        y = a * n + b
        if y < m:
            return ans
        n, b = divmod(y, m)
        m, a = a, m
        q, a = divmod(a, m)
        ans += q * (n * (n - 1) >> 1)
        if b >= m:
            q, b = divmod(b, m)
            ans += q * n


@dataclass(frozen=True)
class Run:
    """A run of the mixed stream: from ``start``, weights ``w_s`` and the sources' counts before it."""

    start: int
    weights: tuple[Fraction, ...]
    base: tuple[int, ...]  # per-source counts before ``start``
    floors: tuple[int, ...]  # floor(w_s B)
    grid: tuple[int, ...]  # G_0..G_S scaled by ``denom``
    denom: int

    @classmethod
    def of(cls, start: int, weights: tuple[Fraction, ...], base: tuple[int, ...], block: int) -> Run:
        """The run from ``start`` with ``weights`` and ``base`` counts, in blocks of ``block``."""
        floors = tuple((w.numerator * block) // w.denominator for w in weights)
        fracs = [w * block - f for w, f in zip(weights, floors)]
        denom = math.lcm(*[f.denominator for f in fracs])
        grid = [0]
        for f in fracs:
            grid.append(grid[-1] + int(f * denom))
        return cls(start, weights, base, floors, tuple(grid), denom)

    def extras_before(self, j: int) -> np.ndarray:
        """E_s(j): extra slots of each source in the run's blocks ``[0, j)``. One floor sum per
        distinct grid point that is not a multiple of ``denom``: for ``g = k * denom`` (the first,
        0, and the last, the block's extra slots, among them) each term is the ``g = 0`` term
        minus ``k``, so its sum is ``floor_sum(g=0) - k * j``."""
        md, a, d = _M * self.denom, _ALPHA * self.denom, self.denom
        base = None  # the floor sum at g = 0
        sums: dict[int, int] = {}
        f = []
        for g in self.grid:
            if g not in sums:
                if g % d == 0:
                    if base is None:
                        base = floor_sum(j, _M, _ALPHA, 0)  # the same sum: at b = 0 the denominator cancels
                    sums[g] = base - (g // d) * j
                else:
                    sums[g] = floor_sum(j, md, a, -g * _M)
            f.append(sums[g])
        return np.array([f[s] - f[s + 1] for s in range(len(self.floors))], dtype=np.int64)

    def block_counts(self, j: int) -> np.ndarray:
        md = _M * self.denom
        f = [(j * _ALPHA * self.denom - g * _M) // md for g in self.grid]
        return np.array([self.floors[s] + f[s] - f[s + 1] for s in range(len(self.floors))], dtype=np.int64)

    def span_counts(self, j: int, nb: int) -> np.ndarray:
        """:meth:`block_counts` of blocks ``j .. j + nb - 1``, one row each."""
        md, step = _M * self.denom, _ALPHA * self.denom
        gm = [g * _M for g in self.grid]
        ns = len(self.floors)
        rows = []
        x = j * step
        for _ in range(nb):
            f = [(x - g) // md for g in gm]
            rows.append([self.floors[s] + f[s] - f[s + 1] for s in range(ns)])
            x += step
        return np.array(rows, dtype=np.int64).reshape(nb, ns)
