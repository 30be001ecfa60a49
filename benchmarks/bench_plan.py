"""Permutation throughput: bulk indices/s and the latency of one 256-index batch.

Side by side in one run: the compiled kernel (what the loader uses) against the plain numpy
Feistel of the same function (``forward_reference``), so the ratio is robust to machine noise.
Run: ``python -m benchmarks.bench_plan [--quick]``.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks._common import timed, write_results
from resumable_data.plan import OrderSpec, Permutation, Plan
from resumable_data.plan.permutation import forward_reference


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="a smaller bulk run")
    args = ap.parse_known_args(argv)[0]
    n = 10**9
    bulk = 500_000 if args.quick else 2_000_000
    perm = Permutation.keyed(n, version_hash="bench", seed=0, epoch=0)
    idx = np.arange(bulk, dtype=np.int64)
    batch = np.random.default_rng(0).integers(0, n, 256)
    perm.forward(batch)  # compile once

    def per_batch(fn, reps=200):
        def run():
            for _ in range(reps):
                fn()
        return {k: (v / reps if k != "runs" else v) for k, v in timed(run, repeats=5).items()}

    res = {
        "bulk_compiled_s": timed(lambda: perm.forward(idx)),
        "bulk_numpy_s": timed(lambda: forward_reference(n, perm.key, idx), repeats=3),
        "batch256_compiled_s": per_batch(lambda: perm.forward(batch)),
        "batch256_numpy_s": per_batch(lambda: forward_reference(n, perm.key, batch), reps=50),
    }
    plan = Plan(10**8, 256, "bench", 0, OrderSpec("window", 65536))
    res["window_step_s"] = per_batch(lambda: plan.records(np.arange(*plan.step_span(123_456))))
    plan_g = Plan(10**8, 256, "bench", 0, OrderSpec("global"))
    res["global_step_s"] = per_batch(lambda: plan_g.records(np.arange(*plan_g.step_span(123_456))))
    mps = bulk / res["bulk_compiled_s"]["median"] / 1e6
    mps_np = bulk / res["bulk_numpy_s"]["median"] / 1e6
    us = res["batch256_compiled_s"]["median"] * 1e6
    us_np = res["batch256_numpy_s"]["median"] * 1e6
    md = "\n".join([
        "| permutation (n = 1e9) | compiled kernel | plain numpy | ratio | goal |",
        "|---|---|---|---|---|",
        f"| bulk throughput, M indices/s | {mps:.1f} | {mps_np:.1f} | {mps / mps_np:.1f}x | >= 20 |",
        f"| one batch of 256 indices, us | {us:.1f} | {us_np:.0f} | {us_np / us:.0f}x faster | < 20 |",
        f"| records of one step (256, global shuffle, n = 1e8), us | {res['global_step_s']['median'] * 1e6:.1f} | | | |",
        f"| records of one step (256, window shuffle 65,536, n = 1e8), us | {res['window_step_s']['median'] * 1e6:.1f} | | | |",
    ])
    res["bulk_million_per_s"] = mps
    res["batch256_us"] = us
    write_results("plan", res, md)
    print(md)
    return res


if __name__ == "__main__":
    main()
