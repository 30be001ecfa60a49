"""Compressed Arrow IPC (LZ4, ``pyarrow.feather.write_feather``'s default): open, memory, speed.

The same token table (``list<int32>`` of 128-383 tokens, 100,000 records a shard, 1,024-row
record batches) written as LZ4 feather files and uncompressed; for each order (window shuffle of
10,000, sequential, global shuffle), batch 256, 0 workers, each case in a fresh process (its own
page faults, allocator and decoded-unit map), rounds alternating the order of the cases:

* ``open s``: ``rd.ArrowShards(folder)`` (pinned beforehand); ``anon MB at open`` / ``at end``:
  the process's anonymous resident memory (``RssAnon``: decoded data, not the page cache of the
  maps) after the open and after the run;
* ``first batch ms``; ``samples/s`` over 300 batches (global: 100) after 20 warm-up batches.

``--budget``: ``decoded_cache_bytes=`` values to run besides the default; ``--before PATH``: a
checkout of the package to run the same cases over (e.g. the commit before compressed units were
decoded per record batch), side by side in the same rounds; ``--pools mimalloc,jemalloc,system``:
the same cases (this package, default budget) under each of pyarrow's allocators
(``ARROW_DEFAULT_MEMORY_POOL``), plus the uncompressed shards as Parquet (1,024-row row groups,
decoded like compressed record batches); ``--orders``: a subset of the orders; ``--alloc``: only
the allocator microbenchmark (200 fresh 1 MiB buffers written and kept, per allocator and with
mimalloc's transparent huge pages off, each in a fresh process: ms per buffer, minor page faults,
system seconds).

Run: ``python -m benchmarks.bench_compressed [--shards 2] [--rounds 3] [--budget 1200000000]
[--before /path/to/old/checkout] [--pools mimalloc,jemalloc,system]``; results in
``benchmarks/results/compressed_ipc.{json,md}`` (``compressed_pools`` with ``--pools``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq

from benchmarks._common import write_results
from benchmarks.data import DATA

ROWS = 100_000
CHUNK = 1_024
ORDERS = ("window", "sequential", "global")

CHILD = r"""
import json, sys, time
import resumable_data as rd
path, order, budget = sys.argv[1], sys.argv[2], sys.argv[3]
def anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon"):
            return int(line.split()[1]) / 1024
kw = {} if budget == "default" else {"decoded_cache_bytes": int(budget)}
a0 = anon(); t0 = time.perf_counter()
src = rd.ArrowShards(path, **kw)
t_open, a_open = time.perf_counter() - t0, anon() - a0
opts = {"global": dict(shuffle=True), "window": dict(shuffle=True, shuffle_window=10_000),
        "sequential": dict(shuffle=False)}[order]
it = iter(rd.DataLoader(src, batch_size=256, seed=0, **opts))
t0 = time.perf_counter(); next(it); first = time.perf_counter() - t0
for _ in range(20):
    next(it)
n = 100 if order == "global" else 300
t0 = time.perf_counter()
for _ in range(n):
    next(it)
dt = time.perf_counter() - t0
print(json.dumps({"open_s": t_open, "anon_open_mb": a_open, "first_ms": first * 1e3, "samples_per_s": n * 256 / dt,
                  "anon_end_mb": anon() - a0}))
"""


def build(shards: int) -> dict[str, Path]:
    """The LZ4 and uncompressed folders (built once under ``benchmarks/data/compressed-<shards>``)."""
    import resumable_data as rd

    base = DATA / f"compressed-{shards}"
    out = {c: base / c for c in ("lz4", "uncompressed", "parquet")}
    if not all((d / ".rd-manifest.json").is_file() for d in out.values()):
        rng = np.random.default_rng(0)
        for d in out.values():
            d.mkdir(parents=True, exist_ok=True)
        for s in range(shards):
            lens = rng.integers(128, 384, ROWS)
            off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
            tokens = pa.ListArray.from_arrays(pa.array(off), pa.array(rng.integers(0, 50_000, int(off[-1]), dtype=np.int32)))
            t = pa.table({"tokens": tokens, "id": pa.array(np.arange(s * ROWS, (s + 1) * ROWS))})
            for codec in ("lz4", "uncompressed"):
                feather.write_feather(t, out[codec] / f"part-{s:03d}.arrow", compression=codec, chunksize=CHUNK)
            pq.write_table(t, out["parquet"] / f"part-{s:03d}.parquet", row_group_size=CHUNK)
        for d in out.values():
            rd.pin(d)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, default=8, help="shards of 100,000 records (8: 814 MB as LZ4)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", default="", help="comma-separated decoded_cache_bytes values to run too")
    ap.add_argument("--before", default=None, help="a checkout of an older package to run side by side")
    ap.add_argument("--pools", default="", help="comma-separated ARROW_DEFAULT_MEMORY_POOL values to compare")
    ap.add_argument("--orders", default=",".join(ORDERS))
    ap.add_argument("--alloc", action="store_true", help="only the allocator microbenchmark")
    args = ap.parse_args()
    if args.alloc:
        return alloc(args.rounds)
    folders = build(args.shards)
    orders = args.orders.split(",")
    if args.pools:
        return pools(folders, orders, args)
    trees = {"this": str(Path(__file__).resolve().parents[1])}
    if args.before:
        trees["before"] = args.before
    budgets = ["default"] + [b for b in args.budget.split(",") if b]
    cases = [(tree, codec, order, budget) for order in orders for codec in ("lz4", "uncompressed") for budget in budgets
             for tree in trees if budget == "default" or (tree == "this" and codec == "lz4")]
    runs: dict[tuple, list[dict]] = {}
    for r in range(args.rounds):
        for case in cases if r % 2 == 0 else cases[::-1]:
            tree, codec, order, budget = case
            env = dict(os.environ, PYTHONPATH=trees[tree])
            got = subprocess.run([sys.executable, "-c", CHILD, str(folders[codec]), order, budget], env=env,
                                 capture_output=True, text=True, cwd="/")
            if got.returncode:
                raise SystemExit(f"{case}: {got.stderr[-3000:]}")
            runs.setdefault(case, []).append(json.loads(got.stdout.strip().splitlines()[-1]))
            print(case, runs[case][-1], flush=True)
    rows = []
    for case, rs in runs.items():
        med = {k: statistics.median(x[k] for x in rs) for k in rs[0]}
        rows.append({"tree": case[0], "codec": case[1], "order": case[2], "budget": case[3], "runs": len(rs),
                     "samples_per_s_runs": [x["samples_per_s"] for x in rs], **med})
    size = sum(f.stat().st_size for f in folders["lz4"].glob("*.arrow"))
    lines = [f"# Compressed Arrow IPC: {args.shards} shards x {ROWS:,} records, {size / 1e6:,.0f} MB as LZ4 "
             f"(batch 256, 0 workers, {args.rounds} rounds, medians)", "",
             "| package | shards | order | decoded_cache_bytes | open s | anon MB at open | first batch ms | samples/s | anon MB at end |",
             "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for x in rows:
        lines.append(f"| {x['tree']} | {x['codec']} | {x['order']} | {x['budget']} | {x['open_s']:.2f} | "
                     f"{x['anon_open_mb']:,.0f} | {x['first_ms']:,.1f} | {x['samples_per_s']:,.0f} | {x['anon_end_mb']:,.0f} |")
    lines += ["", "## Per run (samples/s, in the order run)", "", "| package | shards | order | decoded_cache_bytes | runs |",
              "|---|---|---|---|---|"]
    lines += [f"| {x['tree']} | {x['codec']} | {x['order']} | {x['budget']} | "
              + ", ".join(f"{v:,.0f}" for v in x["samples_per_s_runs"]) + " |" for x in rows]
    path = write_results("compressed_ipc", {"rows": rows, "shards": args.shards, "lz4_bytes": size}, "\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"-> {path}")


ALLOC_CHILD = r"""
import json, resource, time
import numpy as np, pyarrow as pa
pool = pa.default_memory_pool()
ru0 = resource.getrusage(resource.RUSAGE_SELF)
held, t0 = [], time.perf_counter()
for _ in range(200):
    b = pa.allocate_buffer(1 << 20, memory_pool=pool)
    np.frombuffer(b, dtype=np.uint8)[:] = 1
    held.append(b)
dt = (time.perf_counter() - t0) / 200
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"pool": pool.backend_name, "ms": dt * 1e3, "minflt": ru.ru_minflt - ru0.ru_minflt,
                  "sys_s": ru.ru_stime - ru0.ru_stime}))
"""


def alloc(rounds: int) -> None:
    """200 fresh 1 MiB buffers from pyarrow's default pool, written and kept, per allocator."""
    cases = {"mimalloc": {"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"},
             "mimalloc, MIMALLOC_ALLOW_THP=0": {"ARROW_DEFAULT_MEMORY_POOL": "mimalloc", "MIMALLOC_ALLOW_THP": "0"},
             "jemalloc": {"ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}, "system": {"ARROW_DEFAULT_MEMORY_POOL": "system"}}
    runs: dict[str, list[dict]] = {k: [] for k in cases}
    for r in range(rounds):
        for name in cases if r % 2 == 0 else list(cases)[::-1]:
            got = subprocess.run([sys.executable, "-c", ALLOC_CHILD], env=dict(os.environ, **cases[name]),
                                 capture_output=True, text=True, check=True)
            runs[name].append(json.loads(got.stdout))
    lines = [f"# 200 fresh 1 MiB buffers from pyarrow's default pool, written and kept ({rounds} fresh processes "
             "each; median (min..max))", "", "| allocator | ms per buffer | minor page faults | system s |",
             "|---|---:|---:|---:|"]
    for name, rs in runs.items():
        ms = [x["ms"] for x in rs]
        lines.append(f"| {name} | {statistics.median(ms):.2f} ({min(ms):.2f}..{max(ms):.2f}) | "
                     f"{statistics.median(x['minflt'] for x in rs):,.0f} | {statistics.median(x['sys_s'] for x in rs):.2f} |")
    path = write_results("allocator", {"runs": runs}, "\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"-> {path}")


def pools(folders: dict[str, Path], orders: list[str], args: argparse.Namespace) -> None:
    """The same cases under each of pyarrow's allocators (fresh processes, alternating rounds)."""
    cases = [(pool, codec, order) for order in orders for codec in ("lz4", "parquet") for pool in args.pools.split(",")]
    runs: dict[tuple, list[dict]] = {}
    for r in range(args.rounds):
        for case in cases if r % 2 == 0 else cases[::-1]:
            pool, codec, order = case
            env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), ARROW_DEFAULT_MEMORY_POOL=pool)
            got = subprocess.run([sys.executable, "-c", CHILD, str(folders[codec]), order, "default"], env=env,
                                 capture_output=True, text=True, cwd="/")
            if got.returncode:
                raise SystemExit(f"{case}: {got.stderr[-3000:]}")
            runs.setdefault(case, []).append(json.loads(got.stdout.strip().splitlines()[-1]))
            print(case, runs[case][-1], flush=True)
    lines = [f"# Decoded units under each pyarrow allocator ({args.shards} shards x {ROWS:,} records, batch 256, "
             f"0 workers, {args.rounds} rounds; median (min..max) samples/s)", "",
             "| shards | order | " + " | ".join(args.pools.split(",")) + " |",
             "|---|---|" + "---:|" * len(args.pools.split(","))]
    for codec in ("lz4", "parquet"):
        for order in orders:
            cells = []
            for pool in args.pools.split(","):
                v = [x["samples_per_s"] for x in runs[(pool, codec, order)]]
                cells.append(f"{statistics.median(v):,.0f} ({min(v):,.0f}..{max(v):,.0f})")
            lines.append(f"| {codec} | {order} | " + " | ".join(cells) + " |")
    rows = [{"pool": k[0], "shards": k[1], "order": k[2], "runs": v} for k, v in runs.items()]
    path = write_results("compressed_pools", {"rows": rows, "shards": args.shards}, "\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"-> {path}")


if __name__ == "__main__":
    main()
