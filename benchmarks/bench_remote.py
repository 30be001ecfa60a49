"""Training from S3 with read-ahead vs the same loader on local disk: samples/s ratios, read
amplification, requests per step, the first batch after a resume, and the projected hit rate.

Run: ``.venv/bin/python -m benchmarks.bench_remote [--quick] [--rows N] [--rounds R] [--units record_batch,shard]
[--budget default,0.5,0.25] [--epochs E]``.
A moto S3 server on 127.0.0.1 behind :class:`benchmarks.s3_proxy.S3Proxy` (``--latency-ms``,
default 30, added to every request; requests and bytes counted). Data: ``--rows`` rows (default
65,536; ``--quick`` 16,384) of ``tokens: list<int32>`` of 256..512 values and ``id: int64``, in
record batches (row groups) of 1,024 rows, 8,192 rows per shard, written as Arrow IPC files and
as Parquet. Loader: batch 256, ``rd.DataLoader(..., read_ahead=rd.ReadAhead(lookahead=64,
concurrency=16, cache_bytes=...))`` (``--lookahead``: comma-separated step counts or ``bytes``,
``lookahead=None``, the window sized by bytes; each a row, all timed in the same rounds) with ``cache_bytes`` 25% of the dataset's unit bytes for the
global shuffle (``--global-budget``) and 50% for the others (``--budget``: the 10,000-record
window's blocks are scattered over about 22 of the 64 units, 34% of this small dataset) over S3 against the same loader
over the local files (memory-mapped IPC, Parquet by row group), global shuffle, window shuffle
(``shuffle_window=10_000``; ``window_units``: the same window over read units,
``window_blocks="read_units"``) and sequential, 0 and 2 workers. Each round builds both loaders afresh
and times, one after the other (interleaved), the batches after the first (the steady state; the
first batch's own time is reported apart): ``--epochs`` epochs (default 1; global shuffle: 9 steps,
``--global-steps`` + 1).
``--units``: the fetch unit, ``rd.ReadUnit`` (``record_batch``: one ranged GET per record batch or
row group; ``shard``: the whole object per GET; ``auto``: the one ``rd.ReadUnit.AUTO`` resolves to,
shown as ``auto->shard`` or ``auto->record_batch``; the resume figures read by the first of them).
``--budget`` and ``--global-budget`` take comma-separated fractions of the dataset's bytes, or
``default`` (``rd.ReadAhead()``'s 2 GiB, which holds this dataset whole); every (unit, budget) pair
is a row.

Columns: ``ratio`` = remote samples/s / local samples/s (median over rounds); ``amplification`` =
bytes the proxy sent / bytes of the delivered records (a record's bytes: its unit's span over its
rows, so a unit fetched once and used whole is 1.0; the units read ahead for the next epoch's
first steps, at most ``lookahead`` steps' worth, are counted too); ``GET/step`` and ``HEAD/step``: requests per
step. ``resume``: first batch of a loader restored at step 40 / first batch of a fresh loader,
both with read-ahead, sources already open. ``projected hit rate``: Belady over the steps timed,
from ``plan/reads.py`` (``belady_misses``), at the budget and at a budget holding the dataset.
``lookahead``: the ``rd.ReadAhead(lookahead=...)`` of the row (``bytes``: None, the window sized by
bytes); ``window steps``: the most steps the fetcher's window reached past the newest step handed
out (median over rounds); the json's ``fetcher_stats`` holds the fetcher's counters per round, with
``step_gets``, the GETs of steps that read a unit themselves. ``Belady fetches/unit``: the projected fetches of each unit at the budget (the amplification's
lower bound for that budget); ``cache peak``: the most bytes the cache held over the dataset's
(units of steps in flight are fetched past the budget). ``store ceiling``: rows/s of the store alone (every unit read once, 16 requests in flight, no
loader): moto and the proxy share this machine's cores, so no remote figure here can exceed it.

Writes ``benchmarks/results/remote.json`` and ``remote.md`` (``--results NAME``: ``NAME.json``, ``NAME.md``).
"""

from __future__ import annotations

import argparse
import logging
import socket
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from benchmarks._common import write_results
from benchmarks.s3_proxy import S3Proxy

ROWS_PER_BATCH, ROWS_PER_SHARD, BATCH = 1024, 8192, 256
ORDERS = {
    "global": dict(shuffle=True),
    "window": dict(shuffle=True, shuffle_window=10_000),
    "window_units": dict(shuffle=True, shuffle_window=10_000, window_blocks="read_units"),
    "sequential": {},
}


def s3(endpoint: str) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", access_key="testing",
                             secret_key="testing", region="us-east-1", allow_bucket_creation=True)


def build_table(n: int) -> pa.Table:
    rng = np.random.default_rng(0)
    lens = rng.integers(256, 513, n)
    off = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lens, out=off[1:])
    tokens = pa.ListArray.from_arrays(pa.array(off), pa.array(rng.integers(0, 50_000, off[-1]).astype(np.int32)))
    return pa.table({"id": pa.array(np.arange(n, dtype=np.int64)), "tokens": tokens})


def loader(src, order: str, workers: int, ahead=None):
    import resumable_data as rd
    return rd.DataLoader(src, batch_size=BATCH, seed=1, sharding=rd.Sharding(1, 0), num_workers=workers,
                         read_ahead=ahead, **ORDERS[order])


def run(ld, steps: int, warm: int = 0) -> tuple[float, float, np.ndarray]:
    """(first batch seconds, seconds for the ``steps`` batches after the first and ``warm`` more
    untimed ones, record ids delivered: all of them)."""
    it = iter(ld)
    t0 = time.perf_counter()
    b = next(it)
    first = time.perf_counter() - t0
    ids = [b["id"].numpy()]
    t1 = time.perf_counter()
    for k in range(warm + steps):
        if k == warm:
            t1 = time.perf_counter()
        try:
            b = next(it)
        except StopIteration:  # the next epoch: a new pass continues from the cursor
            it = iter(ld)
            b = next(it)
        ids.append(b["id"].numpy())
    return first, time.perf_counter() - t1, np.concatenate(ids)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="16,384 rows, 1 round (writes results/quick/)")
    ap.add_argument("--rows", type=int, default=65_536)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-ms", type=float, default=30.0)
    ap.add_argument("--formats", default="ipc_file,parquet")
    ap.add_argument("--orders", default="window,window_units,sequential,global")
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--budget", default="0.5", help="cache_bytes / dataset bytes (or default), window and sequential")
    ap.add_argument("--global-budget", default="0.25", help="cache_bytes / dataset bytes (or default), global shuffle")
    ap.add_argument("--global-steps", type=int, default=8,
                    help="global shuffle: steps timed after the first (default 8: mostly the first fetches; "
                         "more measures the steady state)")
    ap.add_argument("--global-warm", type=int, default=0,
                    help="global shuffle: steps run before the timed ones (e.g. one epoch: every unit fetched once)")
    ap.add_argument("--lookahead", default="64",
                    help="rd.ReadAhead(lookahead=...) values, comma-separated: a step count, or 'bytes' (None: "
                         "the window sized by bytes); each is a row, timed in the same rounds (interleaved)")
    ap.add_argument("--units", default="record_batch", help="rd.ReadUnit values, comma-separated")
    ap.add_argument("--epochs", type=int, default=1, help="epochs timed (window and sequential)")
    ap.add_argument("--no-resume", action="store_true", help="skip the resume figures")
    ap.add_argument("--results", default="remote", help="name of the results files (benchmarks/results/NAME.md)")
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.rounds = 16_384, 1
    from moto.server import ThreadedMotoServer

    import resumable_data as rd
    from resumable_data.plan.reads import belady_fetches, belady_misses, read_schedule

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    work = Path(tempfile.mkdtemp(prefix="rd-bench-remote-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    proxy = S3Proxy(f"127.0.0.1:{port}")
    direct, fs = s3(f"127.0.0.1:{port}"), s3(proxy.endpoint)
    table = build_table(args.rows)
    rows_out: list[dict] = []
    resume_rows: list[dict] = []
    try:
        for fmt in args.formats.split(","):
            local = work / fmt
            rd.write_arrow_shards(table, local, num_shards=max(1, args.rows // ROWS_PER_SHARD),
                                  rows_per_batch=ROWS_PER_BATCH, format="arrow" if fmt == "ipc_file" else "parquet")
            rd.pin(local)
            prefix = f"bench-{fmt.replace('_', '-')}/data"
            direct.create_dir(prefix.split("/")[0])
            for p in sorted(local.iterdir()):
                with direct.open_output_stream(f"{prefix}/{p.name}") as f:
                    f.write(p.read_bytes())
            rd.pin(prefix, filesystem=direct)
            proxy.latency_s = args.latency_ms / 1e3
            probe = rd.ArrowShards(prefix, filesystem=fs)
            starts, spans = probe.unit_starts(), probe.unit_spans()
            sizes = np.array([s[1] for s in spans], dtype=np.int64)
            rows = np.diff(np.append(starts, len(probe)))
            per_record = np.repeat(sizes / rows, rows)  # a record's share of its unit's bytes
            total = int(sizes.sum())
            shard_of = probe.unit_shards()
            first_unit = np.flatnonzero(np.r_[True, shard_of[1:] != shard_of[:-1]])
            fetch_units = {"record_batch": (starts, sizes),  # planner input per rd.ReadUnit
                           "shard": (starts[first_unit],
                                     np.array([probe.shard_size(int(j)) for j in shard_of[first_unit]]))}
            ceiling = store_ceiling(probe, len(sizes))
            print({"format": fmt, "store_ceiling_rows_s": ceiling}, flush=True)
            for order, unit_name, budget_s, workers in (
                (o, u, b, int(w))
                for o in args.orders.split(",")
                for u in args.units.split(",")
                for b in (args.global_budget if o == "global" else args.budget).split(",")
                for w in args.workers.split(",")
            ):
                budget = rd.ReadAhead().cache_bytes if budget_s == "default" else int(total * float(budget_s))
                looks = [None if la == "bytes" else int(la) for la in args.lookahead.split(",")]
                aheads = {la: rd.ReadAhead(lookahead=la, concurrency=16, cache_bytes=budget,
                                           unit=rd.ReadUnit(unit_name)) for la in looks}
                steps = args.global_steps if order == "global" else args.epochs * args.rows // BATCH - 1
                warm = args.global_warm if order == "global" else 0
                local_t = []
                m = {la: {k: [] for k in ("remote_t", "firsts", "amp", "gets", "heads", "peaks", "window", "stats")}
                     for la in looks}
                chosen = unit_name
                ids = None
                for _ in range(args.rounds):  # the local loader, then each lookahead: interleaved
                    ref = loader(rd.ArrowShards(local), order, workers)
                    _, t_local, ids_local = run(ref, steps, warm)
                    del ref
                    local_t.append(steps * BATCH / t_local)
                    for la, ahead in aheads.items():
                        src = rd.ArrowShards(prefix, filesystem=fs)
                        ld = loader(src, order, workers, ahead)
                        chosen = ld.read_ahead.unit.value  # the unit AUTO resolved to (else the one given)
                        proxy.reset()
                        first, t_remote, ids = run(ld, steps, warm)
                        ld.read_ahead.wait_idle(60)  # the reads in flight count (their bytes arrive late)
                        sent, by = proxy.bytes_out, dict(proxy.counts)
                        r = m[la]
                        r["peaks"].append(ld.read_ahead.stats["peak_bytes"] / sizes.sum())
                        r["window"].append(ld.read_ahead.stats["window_steps"])
                        # the fetcher's counters, and the GETs of steps that read a unit themselves
                        r["stats"].append({**ld.read_ahead.stats, "step_gets": by.get("GET", 0) -
                                           ld.read_ahead.stats["requests"]})
                        del ld
                        assert np.array_equal(ids, ids_local)
                        r["remote_t"].append(steps * BATCH / t_remote)
                        r["firsts"].append(first)
                        r["amp"].append(sent / per_record[ids].sum())
                        r["gets"].append(by.get("GET", 0) / (warm + steps + 1))
                        r["heads"].append(by.get("HEAD", 0) / (warm + steps + 1))
                planner = loader(rd.ArrowShards(local), order, 0)
                recs = [np.asarray(planner.step_info(s).records) for s in range(warm + steps + 1)]
                f_starts, f_sizes = fetch_units[chosen]
                sched = read_schedule(0, recs, f_starts)
                reads = sum(len(u) for u in sched.steps)
                misses25 = belady_misses(sched.steps, f_sizes, budget)  # at this order's budget
                hit25 = 1 - misses25 / reads
                distinct = len(sched.order)
                hit100 = 1 - belady_misses(sched.steps, f_sizes, int(f_sizes.sum())) / reads
                # the amplification Belady projects at this budget: bytes fetched / bytes delivered
                belady_amp = f_sizes[belady_fetches(sched.steps, f_sizes, budget)].sum() / per_record[ids].sum()
                unit_label = unit_name if unit_name == chosen else f"{unit_name}->{chosen}"
                for la in looks:
                    r = m[la]
                    remote_t = r["remote_t"]
                    ratios = [a / lo for a, lo in zip(remote_t, local_t)]
                    row = {"format": fmt, "order": order, "workers": workers, "unit": unit_label,
                           "budget": budget_s, "lookahead": "bytes" if la is None else la,
                           "window_steps": statistics.median(r["window"]),
                           "belady_amplification": belady_amp,
                           "local_samples_s": statistics.median(local_t),
                           "remote_samples_s": statistics.median(remote_t),
                           "ratio": statistics.median(ratios), "ratios": ratios, "remote_rounds": remote_t,
                           "first_batch_s": statistics.median(r["firsts"]),
                           "amplification": statistics.median(r["amp"]), "amplification_rounds": r["amp"],
                           "get_per_step": statistics.median(r["gets"]),
                           "head_per_step": statistics.median(r["heads"]),
                           "projected_hit_rate_25": hit25, "projected_hit_rate_100": hit100,
                           "store_ceiling_rows_s": ceiling, "ratio_to_ceiling": statistics.median(remote_t) /
                           min(ceiling, statistics.median(local_t)),
                           "belady_fetches_per_unit_25": misses25 / distinct,
                           "cache_peak_fraction": statistics.median(r["peaks"]), "fetcher_stats": r["stats"]}
                    rows_out.append(row)
                    print(row, flush=True)
            if args.no_resume:
                continue
            b0 = args.budget.split(",")[0]
            la0 = args.lookahead.split(",")[0]
            ahead = rd.ReadAhead(lookahead=None if la0 == "bytes" else int(la0), concurrency=16,
                                 unit=rd.ReadUnit(args.units.split(",")[0]),
                                 cache_bytes=rd.ReadAhead().cache_bytes if b0 == "default" else int(total * float(b0)))
            resume_rows.append(resume_figures(rd, prefix, fs, ahead, fmt, args.rounds))
            print(resume_rows[-1], flush=True)
    finally:
        proxy.close()
        server.stop()
    md = [f"# Remote training with read-ahead (moto behind S3Proxy at {args.latency_ms:g} ms, {args.rows} rows of "
          f"256-512 int32 tokens, units of {ROWS_PER_BATCH} rows, batch {BATCH}, {args.epochs} epoch(s); budget: "
          "cache_bytes over the dataset's bytes, default = rd.ReadAhead()'s 2 GiB)", "",
          "| format | order | workers | unit | budget | lookahead | window steps | local samples/s "
          "| remote samples/s | ratio | amplification "
          "| Belady amplification (budget) | GET/step | HEAD/step | first batch s "
          "| projected hit rate (budget / 100%) | Belady fetches/unit (budget) "
          "| cache peak / dataset | store ceiling rows/s | remote / min(local, ceiling) |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows_out:
        md.append(f"| {r['format']} | {r['order']} | {r['workers']} | {r['unit']} | {r['budget']} | "
                  f"{r['lookahead']} | {r['window_steps']:.0f} | {r['local_samples_s']:,.0f} | "
                  f"{r['remote_samples_s']:,.0f} | {r['ratio']:.2f} | {r['amplification']:.2f} | "
                  f"{r['belady_amplification']:.2f} | "
                  f"{r['get_per_step']:.1f} | {r['head_per_step']:.1f} | {r['first_batch_s']:.2f} | "
                  f"{r['projected_hit_rate_25']:.2f} / {r['projected_hit_rate_100']:.2f} | "
                  f"{r['belady_fetches_per_unit_25']:.2f} | {r['cache_peak_fraction']:.2f} | "
                  f"{r['store_ceiling_rows_s']:,.0f} | {r['ratio_to_ceiling']:.2f} |")
    md += ["", "| format | fresh first batch s | resumed first batch s | ratio |", "|---|---|---|---|"]
    for r in resume_rows:
        md.append(f"| {r['format']} | {r['fresh_s']:.3f} | {r['resumed_s']:.3f} | {r['ratio']:.2f} |")
    path = write_results(args.results, {"rows": rows_out, "resume": resume_rows, "args": vars(args)}, "\n".join(md))
    print("\n".join(md))
    print(f"wrote {path}")
    return {"rows": rows_out, "resume": resume_rows}


def store_ceiling(src, units: int) -> float:
    """Rows/s of the store itself: every unit read once, 16 at a time (no loader): what moto and the
    proxy serve on this machine, the bound on any remote figure here."""
    from concurrent.futures import ThreadPoolExecutor
    t0 = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(src.fetch_unit, range(units)))
    return len(src) / (time.perf_counter() - t0)


def resume_figures(rd, prefix: str, fs, ahead, fmt: str, rounds: int) -> dict:
    """First batch of a restored loader (window shuffle, 0 workers, at step 40) vs a fresh one."""
    src = rd.ArrowShards(prefix, filesystem=fs)
    base = loader(src, "window", 0, ahead)
    it = iter(base)
    for _ in range(40):
        next(it)
    state = base.state_dict()
    del it, base
    fresh, resumed = [], []
    for _ in range(rounds):
        a = loader(src, "window", 0, ahead)
        t0 = time.perf_counter()
        next(iter(a))
        fresh.append(time.perf_counter() - t0)
        del a
        b = loader(src, "window", 0, ahead)
        b.load_state_dict(state)
        t0 = time.perf_counter()
        next(iter(b))
        resumed.append(time.perf_counter() - t0)
        del b
    f, r = statistics.median(fresh), statistics.median(resumed)
    return {"format": fmt, "fresh_s": f, "resumed_s": r, "ratio": r / f}


if __name__ == "__main__":
    main()
