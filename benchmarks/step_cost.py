"""The loader's own fixed cost per batch (issue 28), before vs after a change.

Cases (0 workers, ``shuffle=True, seed=0``, in this process; CPU time of the process per batch):

* ``parquet_bool``: ``rd.DataLoader(rd.ArrowShards(folder), batch_size=256)`` over the Parquet
  ``bool`` column of :mod:`benchmarks.loader_columns` (200,000 records, 8 files);
* ``ipc_tokens``: the same over the mapped Arrow IPC token shards of :mod:`benchmarks.data`
  (200,000 records, 8 shards), batch 256;
* ``map16`` / ``map256``: a trivial map-style dataset (``__getitem__`` returns the index) at
  batch 16 / 256 with the default seeding; ``map16_unseeded`` / ``map256_unseeded`` the same
  with ``seed_per_sample=False``.

``--tree DIR`` (repeatable, or none for this tree) runs every case in a fresh process per tree and
round, the trees alternating, so load changes hit both alike; it prints the median us per batch.

Run: ``python -m benchmarks.step_cost --tree /path/to/before --tree . --rounds 5``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ["parquet_bool", "ipc_tokens", "map16", "map256", "map16_unseeded", "map256_unseeded"]
N = 200_000


class Trivial:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def make(case: str):
    import resumable_data as rd

    if case == "parquet_bool":
        return rd.DataLoader(
            rd.ArrowShards(ROOT / "benchmarks/data/columns-200000/bool/parquet"), batch_size=256, shuffle=True, seed=0
        ), 256
    if case == "ipc_tokens":
        return rd.DataLoader(
            rd.ArrowShards(ROOT / f"benchmarks/data/sources-{N}x8"), batch_size=256, shuffle=True, seed=0
        ), 256
    bs = 16 if case.startswith("map16") else 256
    return rd.DataLoader(
        Trivial(N), batch_size=bs, shuffle=True, seed=0, seed_per_sample=not case.endswith("unseeded")
    ), bs


def one(case: str, batches: int) -> float:
    """CPU us per batch of ``batches`` batches after a warm-up (one process, one case)."""
    loader, _ = make(case)
    it = iter(loader)
    steps = len(loader)
    for _ in range(20):
        next(it)
    batches = min(batches, steps - 21)
    best = []
    for _ in range(3):  # three slices, the fastest (descheduling only adds)
        c0 = time.process_time_ns()
        for _ in range(batches // 3):
            next(it)
        best.append((time.process_time_ns() - c0) / (batches // 3) / 1e3)
    return min(best)


def child(case: str, batches: int) -> None:
    import resumable_data

    print(json.dumps({"case": case, "us": one(case, batches), "rd": resumable_data.__file__}))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", action="append", default=[], help="a checkout to run (repeatable)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=600)
    ap.add_argument("--case", action="append", choices=CASES, default=[])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return child(a.child, a.batches)
    trees = [str(Path(t).resolve()) for t in (a.tree or [str(ROOT)])]
    cases = a.case or CASES
    res: dict = {c: {t: [] for t in trees} for c in cases}
    for r in range(a.rounds):
        for c in cases:
            for t in trees if r % 2 == 0 else trees[::-1]:
                env = dict(os.environ, PYTHONPATH=t)
                out = subprocess.run(
                    [sys.executable, __file__, "--child", c, "--batches", str(a.batches)],
                    env=env,
                    cwd=t,
                    capture_output=True,
                    text=True,
                )
                if out.returncode:
                    raise SystemExit(out.stderr)
                got = json.loads(out.stdout.strip().splitlines()[-1])
                if not got["rd"].startswith(t):  # another tree's package was measured
                    raise SystemExit(f"{t}: measured {got['rd']}")
                res[c][t].append(got["us"])
    print(f"load average {os.getloadavg()}; CPU us per batch, median of {a.rounds} alternating fresh processes")
    print("| case | " + " | ".join(trees) + " |")
    print("|---|" + "---|" * len(trees))
    for c in cases:
        print(f"| {c} | " + " | ".join(f"{statistics.median(res[c][t]):.1f}" for t in trees) + " |")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
