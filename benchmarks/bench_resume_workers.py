"""Time to the first batch after ``load_state_dict`` with 2 workers, interleaved with fresh starts.

Worker start-up (~50 ms here) dominates both a fresh start and a resume, and it varies with the
machine's load, so this focused check interleaves fresh and resumed loaders over the same 1M-record
data, 7 times each, and reports medians. Run: ``python -m benchmarks.bench_resume_workers``.
"""

from __future__ import annotations

import statistics
import time

import resumable_data as rd
from benchmarks._common import write_results
from benchmarks.data import shards_dir

STEPS = (100, 3_000, 1_000_000)


def main(argv: list[str] | None = None) -> dict:
    src = rd.ArrowShards(shards_dir(1_000_000))

    def make() -> rd.DataLoader:
        return rd.DataLoader(src, batch_size=256, shuffle=True, seed=0, num_workers=2)

    base = make().state_dict()
    spe = make().plan.steps_per_epoch

    def state(step: int) -> dict:
        s = dict(base)
        s["cursor"] = {"committed": step, "delivered": step, "fetched": step}
        s["epoch_base"] = [step // spe, (step // spe) * spe]
        s["counters"] = dict(base["counters"], samples=step * 256)
        return s

    def ttfb(saved: dict | None) -> float:
        loader = make()
        t0 = time.perf_counter()
        if saved is not None:
            loader.load_state_dict(saved)
        next(iter(loader))
        return time.perf_counter() - t0

    runs: dict[str, list[float]] = {"fresh": [], **{str(s): [] for s in STEPS}}
    for _ in range(7):
        runs["fresh"].append(ttfb(None))
        for s in STEPS:
            runs[str(s)].append(ttfb(state(s)))
    fresh = statistics.median(runs["fresh"])
    res = {k: {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v)} for k, v in runs.items()}
    md = "\n".join(["| 2 workers, first batch | fresh | " + " | ".join(f"resumed at step {s:,}" for s in STEPS) + " |",
                    "|---" * (len(STEPS) + 2) + "|",
                    f"| median of 7, interleaved | {fresh * 1e3:.1f} ms | " + " | ".join(
                        f"{res[str(s)]['median_s'] * 1e3:.1f} ms ({res[str(s)]['median_s'] / fresh:.2f}x)" for s in STEPS) + " |"])
    write_results("resume_workers", res, md)
    print(md)
    return res


if __name__ == "__main__":
    main()
