"""A progress bar while the first step of a pass waits for its units from the store.

Algorithm. When the fetcher plans the first step of a pass (a fresh loader, a resume, a new epoch:
the first :meth:`~.fetcher.Prefetcher.plan` after a new schedule), the fetch units that step needs
and the cache does not hold are counted, with their bytes. A :class:`FirstUnits` opens a tqdm bar
on stderr over those bytes, which advances as each unit lands, and closes when the last one has
landed, when the loop has received that step (it read a unit itself, e.g. after a failed fetch),
or when the fetcher closes. tqdm shows it only after :data:`DELAY_S` seconds, and never where
stderr is not a terminal (the same rule as ``rd.pin``'s bar): a quick start prints nothing and a
log file gets no bar.

Guarantee: display only. It reads the fetcher's own counts under the fetcher's lock, so it never
changes what is fetched, when, or what a step delivers.

Cost: one dict of the step's units and one tqdm object per pass; an update per unit landed.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from tqdm import tqdm

__all__ = ["DELAY_S", "FirstUnits"]

#: seconds before the bar is shown (a start faster than this prints nothing)
DELAY_S = 2.0
#: tqdm's ``disable``: None hides the bar where stderr is not a terminal (tests set False to see it)
DISABLE: bool | None = None
#: where the bar is written (tests pass a buffer)
FILE: Any = None
#: tqdm's ``mininterval``: seconds between redraws (tests set 0 to see every update)
MININTERVAL = 0.1


class FirstUnits:
    """The bar of one pass's first step: ``sizes`` maps each fetch unit it waits for to its bytes."""

    def __init__(self, step: int, sizes: dict[int, int]) -> None:
        self.step = step
        self._left = dict(sizes)
        self._start, self._delay = time.monotonic(), DELAY_S
        self._bar = tqdm(
            total=sum(sizes.values()),
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            delay=DELAY_S,
            mininterval=MININTERVAL,
            desc=f"rd read-ahead: the {len(sizes)} units of step {step}",
            file=FILE if FILE is not None else sys.stderr,
            leave=False,
            disable=DISABLE,
        )

    @property
    def done(self) -> bool:
        """Whether every unit landed (the bar is then closed)."""
        return not self._left

    def landed(self, unit: int) -> None:
        """Fetch unit ``unit`` is in the cache; the bar closes with the last one."""
        size = self._left.pop(unit, None)
        if size is None:
            return
        self._bar.update(size)
        if not self._left:
            if time.monotonic() - self._start >= self._delay:  # shown: the full count drawn before it clears
                self._bar.refresh()
            self._bar.close()

    def close(self) -> None:
        """Stop showing the bar (the step was received, or the fetcher closed)."""
        self._left.clear()
        self._bar.close()
