"""A progress bar while the first step of a pass waits for its units from the store.

Algorithm. When the fetcher plans the first step of a pass (a fresh loader, a resume, a new epoch:
the first :meth:`~.fetcher.Prefetcher.plan` after a new schedule), the fetch units that step needs
and the cache does not hold are counted, with their bytes, into a :class:`FirstUnits`. The
fetcher only counts (:meth:`FirstUnits.landed`, under its own lock: no I/O there); a display
thread of the bar's own waits :data:`DELAY_S` seconds and, if the step is still waiting, draws a
tqdm bar on stderr over those bytes, redrawn every :data:`REFRESH_S` seconds whether or not a unit
landed (a long wait on one large unit still shows), until the last unit has landed, the loop has
received the step (it read a unit itself, e.g. after a failed fetch) or the fetcher closes. Where
stderr is not a terminal no thread is started and nothing is drawn (the same rule as ``rd.pin``'s
bar): a log file gets no bar.

Guarantee: display only. The fetcher's side is a dict update under its lock; the bar's writes
happen in the display thread, which takes no lock of the fetcher, so a stalled terminal never
stalls a fetch.

Cost: one dict of the step's units per pass, and on a terminal one short-lived thread.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from tqdm import tqdm

__all__ = ["DELAY_S", "REFRESH_S", "FirstUnits"]

#: seconds before the bar is drawn (a start faster than this prints nothing)
DELAY_S = 2.0
#: seconds between redraws once it is drawn
REFRESH_S = 0.25
#: tqdm's ``disable``: None hides the bar where stderr is not a terminal (tests set False to see it)
DISABLE: bool | None = None
#: where the bar is written (tests pass a buffer)
FILE: Any = None


class FirstUnits:
    """The bar of one pass's first step: ``sizes`` maps each fetch unit it waits for to its bytes."""

    def __init__(self, step: int, sizes: dict[int, int]) -> None:
        self.step = step
        self._left = dict(sizes)
        self._count, self._total, self._landed = len(sizes), sum(sizes.values()), 0
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._file = FILE if FILE is not None else sys.stderr
        shown = DISABLE is False or (DISABLE is None and _is_terminal(self._file))
        self._thread: threading.Thread | None = None
        if shown and self._left:
            self._thread = threading.Thread(target=self._show, name="rd-read-ahead-progress", daemon=True)
            self._thread.start()

    @property
    def done(self) -> bool:
        """Whether every unit landed or the bar was closed."""
        return self._finished.is_set()

    def landed(self, unit: int) -> None:
        """Fetch unit ``unit`` is in the cache (counted once; the bar ends with the last one)."""
        with self._lock:
            size = self._left.pop(unit, None)
            if size is None:
                return
            self._landed += size
            if not self._left:
                self._finished.set()

    def close(self) -> None:
        """Stop showing the bar (the step was received, or the fetcher closed)."""
        self._finished.set()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the display thread to end (tests; the fetcher never waits for it)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _show(self) -> None:
        if self._finished.wait(DELAY_S):
            return  # the step's units came sooner than the delay: nothing drawn
        bar = tqdm(
            total=self._total,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=f"rd read-ahead: the {self._count} units of step {self.step}",
            file=self._file,
            leave=False,
            disable=False,
        )
        while True:
            finished = self._finished.wait(REFRESH_S)
            with self._lock:
                bar.n = self._landed
            bar.refresh()
            if finished:
                bar.close()
                return


def _is_terminal(file: Any) -> bool:
    try:
        return bool(file.isatty())
    except (AttributeError, ValueError):  # a closed or file-like stream without isatty: not a terminal
        return False
