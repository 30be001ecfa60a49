"""Shared benchmark helpers: repeated timing (median, min, max) and result files.

Results go to ``benchmarks/results/``; a ``--quick`` run (``make bench-quick``, or any benchmark
module run with ``--quick``) writes to ``benchmarks/results/quick/`` instead, so it never
overwrites the committed full results that the README's performance section is generated from.
A loaded run (``python -m benchmarks.run --load N``: N busy-loop processes beside every benchmark)
writes to ``benchmarks/results/loaded/``, pasted into its own section of docs/performance.md.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

QUICK = "--quick" in sys.argv[1:]
LOADED = any(a == "--load" or a.startswith("--load=") for a in sys.argv[1:])
RESULTS = Path(__file__).resolve().parent / "results" / ("quick" if QUICK else "loaded" if LOADED else "")


def summarize(xs: list[float]) -> dict[str, float]:
    """Median, min, max and count of repeated measurements."""
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": len(xs)}


def timed(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> dict[str, float]:
    """Seconds per call of ``fn``: median, min and max over ``repeats`` runs after ``warmup``."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return summarize(times)


def machine() -> dict[str, str]:
    import os

    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": str(os.cpu_count())}


def write_results(name: str, payload: dict, markdown: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps({"machine": machine(), **payload}, indent=2) + "\n")
    path = RESULTS / f"{name}.md"
    path.write_text(markdown.rstrip() + "\n")
    return path
