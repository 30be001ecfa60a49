"""Record ids (or sample keys) of a run of upcoming positions, computed in one vectorised call.

Algorithm. ``RecordRuns(fn)`` serves ``fn`` (a pure, elementwise function of an int64 position
array: :meth:`Plan.records`, or :func:`~.sample_keys.sample_keys` of a plan's version and seed);
:meth:`RecordRuns.span` returns ``fn(arange(start, stop))``. It holds ``fn`` of one *run* of
global positions computed by a single call: after a miss inside or at the end of the held run
(the stream going on), ``[start, start + run)``; else (the first span, a seek) ``[c, c + RUN)``,
``c`` the multiple of ``RUN`` at or below ``start`` (either extended to ``stop`` when the span is
longer). A span inside the run is a copy of a slice of it; a span outside it replaces it.
Spans longer than ``RUN // 4`` positions are computed directly (their per-call overhead is
already small next to their size).

Guarantee. The output is ``fn`` of the same positions, element for element: the run is a cache of
a pure function of the position, so nothing can go stale (a seek drops the run by missing it;
:meth:`RecordRuns.clear` drops it explicitly) and the result never depends on which spans were
asked for before. Returned arrays are not shared with the run (copies of its slices, or arrays
computed for that call alone): a caller may keep or change them.

``RecordRuns(fn, ranged=g, run=n)``: ``g(start, stop)`` computes ``fn(arange(start, stop))``
without the array of positions (:meth:`MixturePlan.span_ids`: a run of a mixed stream is a
span of blocks), and the runs after the first are ``n`` positions long instead of ``RUN`` (the
first after a start or a seek stays ``RUN`` long: the first batch waits for ``RUN`` positions).

Cost. One ``fn`` call per ``RUN`` positions (``RUN * 8`` bytes held) instead of one per batch: for
small batches the per-call overhead (validation, the epoch split, the compiled kernel's
dispatch) is paid once per run. A restore costs nothing (the first span computes a run).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["RUN", "RecordRuns"]

#: Positions per cached run.
RUN = 4096


class RecordRuns:
    """``span(start, stop)``: ``fn`` of the global positions ``[start, stop)``, e.g. ``plan.records``."""

    __slots__ = ("_fn", "_hi", "_ids", "_lo", "_ranged", "_run")

    def __init__(
        self,
        fn: Callable[[np.ndarray], np.ndarray],
        *,
        ranged: Callable[[int, int], np.ndarray] | None = None,
        run: int = RUN,
    ) -> None:
        self._fn = fn
        self._ranged = ranged
        self._run = int(run)
        self.clear()

    def _of(self, start: int, stop: int) -> np.ndarray:
        if self._ranged is not None:
            return self._ranged(start, stop)
        return self._fn(np.arange(start, stop, dtype=np.int64))

    def clear(self) -> None:
        """Drop the held run."""
        self._lo = self._hi = 0
        self._ids: np.ndarray | None = None

    def span(self, start: int, stop: int) -> np.ndarray:
        """``fn`` of positions ``[start, stop)`` (a new array)."""
        if self._ids is not None and self._lo <= start and stop <= self._hi:
            return self._ids[start - self._lo : stop - self._lo].copy()
        run = self._run
        if stop - start > run // 4:
            return self._of(start, stop)
        if self._ids is not None and self._lo <= start <= self._hi:  # the stream goes on past the held run
            lo, hi = start, max(start + run, stop)
        else:  # the first span, or a seek: a run of RUN positions, so the first batch waits for no more
            lo = start - start % RUN
            hi = max(lo + RUN, stop)
        self._ids = self._of(lo, hi)
        self._lo, self._hi = lo, hi
        return self._ids[start - lo : stop - lo].copy()
