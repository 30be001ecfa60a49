"""How rd's costs grow with the dataset size and with the step.

For datasets of 1M, 10M and 100M records (an ``id: int64`` column in 16 Arrow IPC shards, so
that 100M records fit this machine's disk and time), in one run: pinning time, open time,
resident memory after opening, state size, and the time to the first batch of a fresh loader
and of a loader restored at step 1,000,000. Then, on the largest dataset, the time to the first
batch after restoring at steps 10 ... 10^7 (resume must not grow with the step). Fresh and resumed
loaders are timed round-robin in one process (median, min, max of 21 rounds). Writes
``benchmarks/results/scaling.{json,md,png}``. Run: ``python -m benchmarks.bench_scaling [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

import resumable_data as rd
from benchmarks._common import RESULTS, summarize, timed, write_results

DATA = Path(__file__).resolve().parent / "data"


def rss_mb(kind: str = "VmRSS") -> float:
    """Resident memory from /proc/self/status: ``VmRSS`` (all), ``RssAnon`` (heap: what the
    process owns) or ``RssFile`` (mapped file pages: page cache, reclaimable)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(kind + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def build(n: int) -> Path:
    root = DATA / f"scaling-{n}"
    if (root / rd.sources.MANIFEST_NAME).exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    per = -(-n // 16)
    for k in range(16):
        ids = pa.array(np.arange(k * per, min((k + 1) * per, n), dtype=np.int64))
        with pa.OSFile(str(root / f"shard-{k:03d}.arrow"), "wb") as f, pa.ipc.new_file(f, pa.schema([("id", pa.int64())])) as w:
            for start in range(0, len(ids), 1 << 20):
                w.write_batch(pa.record_batch([ids[start:start + (1 << 20)]], names=["id"]))
    return root


def first_batch(src: rd.ArrowShards, state: dict | None) -> None:
    loader = rd.DataLoader(src, batch_size=256, shuffle=True, seed=0)
    if state is not None:
        loader.load_state_dict(state)
    next(iter(loader))


def state_at(src: rd.ArrowShards, step: int) -> dict:
    loader = rd.DataLoader(src, batch_size=256, shuffle=True, seed=0)
    state = loader.state_dict()
    spe = loader.plan.steps_per_epoch
    state["cursor"] = {"committed": step, "delivered": step, "fetched": step}
    state["epoch_base"] = [step // spe, (step // spe) * spe]
    state["counters"]["samples"] = step * 256
    return state


def interleaved(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, dict[str, float]]:
    """Seconds per call of each function, measured round-robin (one call of each per round, after
    one warm-up round), so that the machine's load drifts across all of them alike: median, min
    and max over ``repeats`` rounds."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(repeats + 1):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            if r:
                times[k].append(time.perf_counter() - t0)
    return {k: summarize(v) for k, v in times.items()}


def _ms(t: dict) -> str:
    return f"{t['median'] * 1e3:.2f} ({t['min'] * 1e3:.2f}..{t['max'] * 1e3:.2f})"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_known_args(argv)[0]
    sizes = [1_000_000, 10_000_000] if args.quick else [1_000_000, 10_000_000, 100_000_000]
    repeats = 9 if args.quick else 21
    rows = []
    first_batch(rd.ArrowShards(build(sizes[0])), None)  # JIT and imports: not part of any size's memory
    for n in sizes:
        root = build(n)
        manifest = root / rd.sources.MANIFEST_NAME
        pins = []
        for _ in range(3):
            manifest.unlink(missing_ok=True)
            t0 = time.perf_counter()
            rd.pin(root)
            pins.append(time.perf_counter() - t0)
        before = rss_mb("RssAnon"), rss_mb("RssFile")
        opened = timed(lambda root=root: rd.ArrowShards(root), repeats=3)
        src = rd.ArrowShards(root)
        first_batch(src, None)
        mem = rss_mb("RssAnon") - before[0], rss_mb("RssFile") - before[1]
        state = state_at(src, 1_000_000)
        t = interleaved({"fresh": lambda src=src: first_batch(src, None),
                         "resumed": lambda src=src, state=state: first_batch(src, state)}, repeats)
        rows.append({"records": n, "bytes": sum(p.stat().st_size for p in root.glob("*.arrow")),
                     "pin_s": summarize(pins),
                     "open_s": opened, "anon_mb_after_first_batch": mem[0], "file_mb_after_first_batch": mem[1], "state_bytes": len(json.dumps(state)),
                     "fresh_ttfb_s": t["fresh"], "resume_ttfb_s": t["resumed"]})
    src = rd.ArrowShards(build(sizes[-1]))
    steps = [10, 1_000, 100_000, 10_000_000]
    states = {step: state_at(src, step) for step in steps}
    t = interleaved({"fresh": lambda: first_batch(src, None),
                     **{str(step): (lambda st=st: first_batch(src, st)) for step, st in states.items()}}, repeats)
    fresh = t["fresh"]
    by_step = [{"step": step, "resume_ttfb_s": t[str(step)], "fresh_ttfb_s": fresh} for step in steps]
    res = {"by_size": rows, "by_step": by_step, "repeats": repeats}

    md = [f"Times: median (min..max) of {repeats} rounds, fresh and resumed measured round-robin in one process; "
          "memory: growth of the process's own (anonymous) resident memory and of its mapped file pages "
          "(page cache, reclaimable) from before opening to after the first batch.", "",
          "| records | data | pin, s | open, ms | memory: own / mapped file | state | fresh first batch, ms | "
          "resumed at step 1e6, ms | resume / fresh | resume - fresh |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f, z = r["fresh_ttfb_s"], r["resume_ttfb_s"]
        md.append(f"| {r['records']:,} | {r['bytes'] / 1e6:,.0f} MB | {r['pin_s']['median']:.2f} ({r['pin_s']['min']:.2f}.."
                  f"{r['pin_s']['max']:.2f}) | {_ms(r['open_s'])} | {r['anon_mb_after_first_batch']:.0f} / {r['file_mb_after_first_batch']:.0f} MB | {r['state_bytes']} B | "
                  f"{_ms(f)} | {_ms(z)} | {z['median'] / f['median']:.2f}x | "
                  f"{(z['median'] - f['median']) * 1e6:+.0f} us |")
    md += ["", f"| resumed at step ({sizes[-1]:,} records) | fresh | " + " | ".join(f"{s:,}" for s in steps) + " |",
           "|---" * (len(steps) + 2) + "|",
           "| first batch, ms | " + _ms(fresh) + " | " + " | ".join(_ms(b["resume_ttfb_s"]) for b in by_step) + " |",
           "| first batch / fresh start | 1.00x | " + " | ".join(
               f"{b['resume_ttfb_s']['median'] / fresh['median']:.2f}x" for b in by_step) + " |"]
    text = "\n".join(md)
    write_results("scaling", res, text)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
        a.plot([r["records"] for r in rows], [r["resume_ttfb_s"]["median"] * 1e3 for r in rows], "o-", label="resumed at step 1e6")
        a.plot([r["records"] for r in rows], [r["fresh_ttfb_s"]["median"] * 1e3 for r in rows], "s--", label="fresh start")
        a.set_xscale("log"), a.set_xlabel("records"), a.set_ylabel("first batch, ms"), a.legend(), a.set_title("vs dataset size")
        b.plot(steps, [x["resume_ttfb_s"]["median"] * 1e3 for x in by_step], "o-", label="resumed")
        b.axhline(fresh["median"] * 1e3, ls="--", color="gray", label="fresh start")
        b.set_ylim(bottom=0)
        b.set_xscale("log"), b.set_xlabel("step restored"), b.set_ylabel("first batch, ms"), b.legend(), b.set_title("vs step")
        fig.tight_layout()
        fig.savefig(RESULTS / "scaling.png", dpi=110)
    except ImportError:  # matplotlib lives in the bench extra
        pass
    print(text)
    return res


if __name__ == "__main__":
    main()
