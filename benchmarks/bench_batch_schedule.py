"""Resume under a batch ramp: time to the first batch after ``load_state_dict`` at steps 10^2,
10^4 and 10^6 of a Megatron-style ramp, and after a declared batch change at step 10^6 (with a
fixed-batch resume at 10^6 beside them for reference), each against a fresh loader whose first
batch has the same size; interleaved, 15 rounds, medians and minima (the machine's load moves
single runs by up to 10x); one process, no workers.

A state at step ``s`` is the one the loader would write there: the cursor, the epoch base and
the sample counter come from the plan's pure maps (``plan.epoch_of_step``, ``epoch_first_step``,
``step_start``), so no run of 10^6 steps is needed to make it. Run:
``python -m benchmarks.bench_batch_schedule``.
"""

from __future__ import annotations

import statistics
import time

import resumable_data as rd
from benchmarks._common import write_results
from benchmarks.data import shards_dir

STEPS = (100, 10_000, 1_000_000)
RAMP = rd.BatchRamp(start=32, increment=32, ramp_samples=2_000_000, final=256)  # 7 stages over 2M samples


def main(argv: list[str] | None = None) -> dict:
    src = rd.ArrowShards(shards_dir(100_000))

    def make(batch=RAMP) -> rd.DataLoader:
        return rd.DataLoader(src, batch_size=batch, shuffle=True, seed=0, tail="continuous")

    base = make().state_dict()
    plan = make().plan

    def state(step: int) -> dict:
        e = plan.epoch_of_step(step)
        return dict(base, cursor={"committed": step, "delivered": step, "fetched": step},
                    epoch_base=[e, plan.epoch_first_step(e)], counters=dict(base["counters"], samples=plan.step_start(step)))

    def ttfb(saved: dict | None, batch=RAMP, **load) -> float:
        loader = make(batch)
        t0 = time.perf_counter()
        if saved is not None:
            loader.load_state_dict(saved, **load)
        next(iter(loader))
        return time.perf_counter() - t0

    states = {s: state(s) for s in STEPS}
    cases = {str(s): (states[s], RAMP, {}, plan.batch_of(s)) for s in STEPS}
    cases["change"] = (states[STEPS[-1]], 192, {"on_batch_change": "continue"}, 192)
    fixed_base = make(256).state_dict()
    step = STEPS[-1]
    fixed_state = dict(fixed_base, cursor={"committed": step, "delivered": step, "fetched": step},
                       epoch_base=[step * 256 // 100_000, make(256).plan.epoch_first_step(step * 256 // 100_000)],
                       counters=dict(fixed_base["counters"], samples=step * 256))
    cases["fixed"] = (fixed_state, 256, {}, 256)  # the same resume without a schedule, for reference
    batches = sorted({b for *_, b in cases.values()} | {RAMP.first_batch})
    runs: dict[str, list[float]] = {**{f"fresh {b}": [] for b in batches}, **{k: [] for k in cases}}
    for _ in range(15):
        for b in batches:  # a fresh loader whose first batch has the same size: the fair baseline
            runs[f"fresh {b}"].append(ttfb(None, b))
        for k, (saved, batch, load, _) in cases.items():
            runs[k].append(ttfb(saved, batch, **load))
    res = {k: {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v)} for k, v in runs.items()}
    restore = {"ramp": (make(), states[STEPS[-1]]), "fixed": (make(256), fixed_state)}
    per_call: dict[str, list[float]] = {k: [] for k in restore}
    for _ in range(5):  # load_state_dict alone (validation and seek, no batch), 200 calls per round
        for k, (loader, saved) in restore.items():
            t0 = time.perf_counter()
            for _ in range(200):
                loader.load_state_dict(saved)
            per_call[k].append((time.perf_counter() - t0) / 200)
    res["load_state_dict"] = {k: statistics.median(v) for k, v in per_call.items()}
    cols = [f"resumed at step {s:,} (batch {plan.batch_of(s)})" for s in STEPS] + ["batch change 256 -> 192 at step 10^6",
                                                                            "fixed batch 256, step 10^6 (no schedule)"]
    keys = [str(s) for s in STEPS] + ["change", "fixed"]

    def cell(k: str, stat: str) -> str:
        base = res[f"fresh {cases[k][3]}"][stat]
        return f"{res[k][stat] * 1e3:.2f} ms ({res[k][stat] / base:.2f}x)"

    md = "\n".join([
        "| first batch, ramp 32 -> 256 over 2M samples (x: vs a fresh loader whose first batch has that size) | "
        + " | ".join(cols) + " |",
        "|---" * (len(cols) + 1) + "|",
        "| median of 15, interleaved | " + " | ".join(cell(k, "median_s") for k in keys) + " |",
        "| minimum of 15 | " + " | ".join(cell(k, "min_s") for k in keys) + " |",
        "",
        f"`load_state_dict` alone at step 10^6 (median of 5 rounds of 200 calls): "
        f"{res['load_state_dict']['ramp'] * 1e3:.3f} ms with the ramp, "
        f"{res['load_state_dict']['fixed'] * 1e3:.3f} ms with a fixed batch."])
    write_results("batch_schedule", res, md)
    print(md)
    return res


if __name__ == "__main__":
    main()
