"""Per-rank throughput at 1, 2 and 4 ranks: the loader must not serialize ranks.

Each rank is a separate process (as under torchrun) with its own ``rd.DataLoader`` over the same
pinned Arrow shards (``Sharding(world, rank)``, per-rank batch ``G / world`` with ``G = 256``,
shuffled, 0 workers). All ranks start together; the aggregate rate is the global samples
delivered divided by the slowest rank's time, relative to one rank. On this 2-core machine the
ideal is 2x at 2 ranks and 2x (not 4x) at 4 ranks. Run: ``python -m benchmarks.bench_ranks [--quick]``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

from benchmarks._common import write_results
from benchmarks.data import shards_dir

G = 256


def _rank(path: str, world: int, rank: int, steps: int, barrier, out) -> None:
    import resumable_data as rd

    loader = rd.DataLoader(rd.ArrowShards(path), batch_size=G // world, shuffle=True, seed=0,
                           sharding=rd.Sharding(world, rank), tail="wrap")
    it = iter(loader)
    next(it)
    barrier.wait()
    t0 = time.perf_counter()
    for _ in range(steps):
        next(it)
    out.put((rank, time.perf_counter() - t0))


def measure(path: str, world: int, steps: int) -> float:
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(world), ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(path, world, r, steps, barrier, out)) for r in range(world)]
    for p in procs:
        p.start()
    times = [out.get()[1] for _ in procs]
    for p in procs:
        p.join()
    return steps * G / max(times)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_known_args(argv)[0]
    n = 200_000 if args.quick else 1_000_000
    path = str(shards_dir(n))
    steps = 100 if args.quick else 300
    res = {}
    for world in (1, 2, 4):
        rates = [measure(path, world, steps) for _ in range(3)]
        res[world] = {"median": statistics.median(rates), "min": min(rates), "max": max(rates)}
    base = res[1]["median"]
    md = "\n".join(["| ranks (processes) | aggregate samples/s | vs 1 rank | ideal on 2 cores |", "|---|---|---|---|"] + [
        f"| {w} | {r['median']:,.0f} ({r['min']:,.0f}..{r['max']:,.0f}) | {r['median'] / base:.2f}x | {min(w, 2)}x |"
        for w, r in res.items()])
    write_results("ranks", {"records": n, "global_batch": G, "steps": steps, "by_world": res}, md)
    print(md)
    return res


if __name__ == "__main__":
    main()
