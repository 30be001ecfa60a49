"""Cost of many skipped ranges in a loader state (issue 30 item 10).

A state holds ``R`` skipped step ranges ``[i, i + 1)`` for ``i < R``, chained (each ends where the
next begins) and listed last-first, the worst order for a scan that walks the chain. One round
loads that state into a fresh ``rd.DataLoader`` (100k records, batch 4, ``commit="explicit"``)
and takes the first batch plus 100 more, which checks every step against the ranges. ``R = 1,000``
and ``R = 10,000`` rounds alternate (interleaved); the figure is the ratio of their medians: about
10 for a cost linear in ``R`` (the bound in docs is < 30), about 100 for a quadratic one (what a
state with 10,000 chained ranges cost before: 9.6 s at the first batch).

``python -m benchmarks.bench_skips [--quick]`` writes ``benchmarks/results/skips.json`` and ``.md``.
"""

from __future__ import annotations

import json
import statistics
import time

import resumable_data as rd
from benchmarks._common import QUICK, write_results

ROUNDS = 3 if QUICK else 7
SIZES = (1_000, 10_000)


class Items:
    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int) -> int:
        return i


def state_with(ranges: int) -> dict:
    loader = rd.DataLoader(Items(), batch_size=4, seed=0, commit="explicit", dataset_version="bench-skips")
    state = json.loads(json.dumps(loader.state_dict()))
    state["skipped"] = [[i, i + 1, "bench"] for i in reversed(range(ranges))]
    return state


def one_round(state: dict) -> float:
    loader = rd.DataLoader(Items(), batch_size=4, seed=0, commit="explicit", dataset_version="bench-skips")
    t0 = time.perf_counter()
    loader.load_state_dict(state)
    it = iter(loader)
    first = next(it)
    for _ in range(100):
        next(it)
    elapsed = time.perf_counter() - t0
    assert int(first[0]) == 4 * len(state["skipped"])  # the first step no range covers
    return elapsed


def main() -> dict:
    states = {r: state_with(r) for r in SIZES}
    times: dict[int, list[float]] = {r: [] for r in SIZES}
    for _ in range(ROUNDS):
        for r in SIZES:
            times[r].append(one_round(states[r]))
    med = {r: statistics.median(v) for r, v in times.items()}
    result = {"rounds": ROUNDS, "median_s": {str(r): med[r] for r in SIZES},
              "ratio_10k_over_1k": med[SIZES[1]] / med[SIZES[0]]}
    lines = ["| skipped ranges | load + 101 batches (median) |", "|---|---|"]
    lines += [f"| {r:,} | {med[r] * 1e3:.1f} ms |" for r in SIZES]
    lines.append(f"\nratio 10k / 1k: {result['ratio_10k_over_1k']:.1f} (linear: ~10, quadratic: ~100)")
    write_results("skips", result, "\n".join(lines) + "\n")
    print("\n".join(lines))
    # a generous bound: linear is ~10 (less with fixed costs), quadratic ~100
    assert result["ratio_10k_over_1k"] < 30, f"skipped ranges look superlinear: {result}"
    return result


if __name__ == "__main__":
    main()
