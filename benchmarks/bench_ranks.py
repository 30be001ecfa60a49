"""Per-rank throughput at 1, 2 and 4 ranks: the loader must not serialize ranks.

Each rank is a separate process (as under torchrun) with its own ``rd.DataLoader`` over the same
pinned Arrow shards (``Sharding(world, rank)``, per-rank batch ``G / world`` with ``G = 256``,
shuffled, 0 workers). All ranks start together; the aggregate rate is the global samples
delivered divided by the slowest rank's time, relative to one rank. Per rank: the aggregate divided
by the number of ranks (what each rank's training loop gets when the ranks step together), and
each rank's own rate (its ``steps x G / world`` samples over its own time; median over the runs),
which shows whether one rank lags. On this 2-core machine the ideal aggregate is 2x at 2 ranks and
2x (not 4x) at 4 ranks, i.e. a per-rank rate of 1x, 1x and 0.5x one rank's. Median (min..max) of
5 runs, the world sizes interleaved run by run; the json records the machine's 1-minute load
average before and after (other work on the machine takes cores from the ranks). Run:
``python -m benchmarks.bench_ranks [--quick]`` (about 20 s; --quick: 200k records, 100 steps, 3 runs).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

from benchmarks._common import summarize, write_results
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


def measure(path: str, world: int, steps: int) -> tuple[float, list[float]]:
    """(aggregate samples/s, each rank's own samples/s in rank order) of one run."""
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(world), ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(path, world, r, steps, barrier, out)) for r in range(world)]
    for p in procs:
        p.start()
    times = dict(out.get() for _ in procs)
    for p in procs:
        p.join()
    return steps * G / max(times.values()), [steps * (G // world) / times[r] for r in range(world)]


def _k(x: float) -> str:
    return f"{x / 1e3:,.0f}k"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_known_args(argv)[0]
    n = 200_000 if args.quick else 1_000_000
    path = str(shards_dir(n))
    steps = 100 if args.quick else 300
    repeats = 3 if args.quick else 5
    load_before = os.getloadavg()[0]
    by_world: dict[int, list] = {w: [] for w in (1, 2, 4)}
    for _ in range(repeats):  # interleaved, so a change in the machine's load hits every world size alike
        for world in by_world:
            by_world[world].append(measure(path, world, steps))
    res = {}
    for world, runs in by_world.items():
        agg = [a for a, _ in runs]
        res[world] = {**summarize(agg), "per_rank": summarize([a / world for a in agg]),
                      "rank_own": [summarize([own[r] for _, own in runs]) for r in range(world)]}
    base = res[1]["median"]
    md = "\n".join([
        "| ranks (processes) | aggregate samples/s | vs 1 rank | ideal on 2 cores "
        "| per rank: aggregate / ranks | each rank's own samples/s (median) |",
        "|---|---|---|---|---|---|"] + [
        f"| {w} | {r['median']:,.0f} ({r['min']:,.0f}..{r['max']:,.0f}) | {r['median'] / base:.2f}x | {min(w, 2)}x "
        f"| {r['per_rank']['median']:,.0f} ({r['per_rank']['median'] / base:.2f}x; ideal {min(w, 2) / w:g}x) "
        f"| {' / '.join(_k(o['median']) for o in r['rank_own'])} |"
        for w, r in res.items()])
    write_results("ranks", {"records": n, "global_batch": G, "steps": steps, "repeats": repeats,
                           "load_avg_1min": [load_before, os.getloadavg()[0]], "by_world": res}, md)
    print(md)
    return res


if __name__ == "__main__":
    main()
