"""Skipped step ranges as a sorted set of disjoint intervals, for lookups in O(log R).

Algorithm. The ranges ``[start, stop)`` a state records (they may overlap, chain end to start
and come in any order) are sorted by start and merged into disjoint, non-touching intervals,
with a prefix sum of their lengths. Then, by binary search: :meth:`SkipIndex.covers` (is a
step skipped), :meth:`SkipIndex.first_unskipped` (the first step at or after ``s`` no range
covers: one hop, since merged intervals never touch) and :meth:`SkipIndex.skipped_before`
(distinct skipped steps below ``s``).

Guarantee: the answers equal those of scanning the ranges (overlaps count once, a chain of
ranges is crossed in one hop). Cost: O(R log R) to build, O(log R) per query; a state's
10,000 chained ranges cost milliseconds at the first batch, where the earlier rescan of every
range after each hop was quadratic (9.6 s; ``benchmarks/bench_skips.py``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

__all__ = ["SkipIndex"]


class SkipIndex:
    """Merged, sorted skipped intervals (module docs); immutable once built."""

    __slots__ = ("_before", "_starts", "_stops")

    def __init__(self, ranges: Iterable[tuple[int, int]]) -> None:
        starts: list[int] = []
        stops: list[int] = []
        for start, stop in sorted((a, b) for a, b in ranges if b > a):
            if stops and start <= stops[-1]:  # overlapping or touching: extend the last interval
                stops[-1] = max(stops[-1], stop)
            else:
                starts.append(start)
                stops.append(stop)
        before, total = [], 0
        for a, b in zip(starts, stops):
            before.append(total)
            total += b - a
        self._starts, self._stops, self._before = starts, stops, before

    def _at(self, step: int) -> int:
        """Index of the last interval starting at or before ``step`` (-1: none)."""
        return bisect_right(self._starts, step) - 1

    def covers(self, step: int) -> bool:
        i = self._at(step)
        return i >= 0 and step < self._stops[i]

    def first_unskipped(self, step: int) -> int:
        i = self._at(step)
        return self._stops[i] if i >= 0 and step < self._stops[i] else step

    def skipped_before(self, step: int) -> int:
        i = self._at(step - 1)  # intervals starting below ``step``
        if i < 0:
            return 0
        return self._before[i] + min(self._stops[i], step) - self._starts[i]
