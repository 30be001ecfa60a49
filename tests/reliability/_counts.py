"""Session-wide counts of checked cases (imported by the tests and by conftest as one module)."""

from __future__ import annotations

import collections
import os

SCALE = int(os.environ.get("RD_RELIABILITY_SCALE", "10"))
_COUNTS: collections.Counter = collections.Counter()


def count(kind: str, n: int = 1) -> int:
    """Record ``n`` checked cases of ``kind`` (e.g. "interrupt_points") for this session."""
    _COUNTS[kind] += n
    return _COUNTS[kind]
