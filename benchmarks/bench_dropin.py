"""Drop-in benchmark: rd.DataLoader against torch's DataLoader and torchdata on the paths issue 17 names.

Every case runs its loaders side by side in one process, in interleaved rounds (loader A, B, A,
B, ... over persistent iterators, each round ``batches`` batches), and reports the median of
the per-round ratios (with min and max): load drifting on a shared machine moves both sides.

* ``map/trivial``: a map-style ``Dataset`` whose ``__getitem__`` returns its index, batch 16,
  shuffled, default settings (rd: per-sample seeding on, the globals saved and restored around
  each batch at 0 workers); torch's ``DataLoader`` with the same arguments. 0 and 2 workers.
* ``map/100us``: the same with ~100 us of Python work per ``__getitem__`` (calibrated here).
* ``seeding``: what per-sample seeding costs rd, per sample: the trivial case with
  ``seed_per_sample=True`` (eager, the default) and ``"lazy"`` vs ``False`` (0 workers), as
  differences of per-sample times. The map-style cases also run ``seed_per_sample="lazy"``.
* ``arrow/rb1024``: 8 pinned Arrow IPC shards written with 1,024-row record batches (the layout
  Hugging Face ``datasets`` writes), batch 256, shuffled, 0 workers: ``rd.ArrowShards`` in
  ``rd.DataLoader`` vs the ceiling (a one-chunk memory-mapped ``Table.take`` of the same record
  ids plus the same ``arrow_to_tensors`` collate, in a bare loop; measured as in
  ``bench_loader.paired_ceiling``: rd reads a span, the ceiling the next, rd skips it, so every
  pass pays its own first touches) and vs torchdata's ``StatefulDataLoader`` over the ceiling's
  dataset (``Table.take`` in ``__getitems__``, same collate).
* ``arrow/workers``: rd over the same records with 2 workers vs 0 workers (the default layout of
  ``benchmarks/data.py``, 16,384-row batches, batch 256), whole passes interleaved, with the CPU
  time per batch of the main process and of the workers (``--workers``: this case alone,
  ``dropin_workers.md``).
* ``busy`` (``--busy`` only): a ~200 us ``__getitem__`` at 2 persistent workers, rd vs torch,
  whole passes interleaved, with no other process and with one and two busy-loop processes the
  benchmark starts (``dropin_busy.md``).

The Arrow cases read 200,000 records in both modes (``benchmarks/data.py``'s ``--quick`` size).

Run: ``python -m benchmarks.bench_dropin [--quick]``; writes ``benchmarks/results/dropin.json``
and ``dropin.md`` (``--quick``: under ``results/quick/``).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any


from benchmarks._common import summarize, write_results

SEED = 0
#: Rounds and batches a round of the in-process trivial cases (the map case at 0 workers, the
#: seeding case): long enough that one round is tens of milliseconds
LONG_ROUNDS, LONG_BATCHES = 21, 2000


class Trivial:
    """``__getitem__`` returns the index: the loader's own per-sample cost is all there is."""

    def __init__(self, n: int, work: int = 0) -> None:
        self.n, self.work = n, work

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if self.work:
            s = 0
            for k in range(self.work):
                s += k
        return i


def calibrate(target_s: float = 100e-6) -> int:
    """Loop count of ``Trivial.__getitem__`` that takes about ``target_s`` here."""
    probe = Trivial(1, 10_000)
    t0 = time.perf_counter()
    for _ in range(20):
        probe[0]
    per = (time.perf_counter() - t0) / 20 / 10_000
    return max(1, int(target_s / per))


def _run_ns(pid: int) -> int:
    """CPU time a process ran, all its threads, in ns (``/proc/PID/task/*/schedstat``; Linux)."""
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return total


def _pids(it: Any) -> list[int]:
    """This process and the worker processes of an rd or torch iterator (torch's private
    ``_workers``; none in process)."""
    inner = getattr(it, "_it", it)
    return [os.getpid()] + [w.pid for w in getattr(inner, "_workers", [])]


def interleaved(makers: dict[str, Any], batches: int, rounds: int, batch_size: int,
                cpu: bool = False) -> dict[str, Any]:
    """samples/s per loader over ``rounds`` interleaved rounds, and the per-round ratio of each
    loader to the first one (the reference); ``cpu``: also the CPU time per batch of this process
    and of the loader's workers together, per round (Linux)."""
    its = {k: iter(make()) for k, make in makers.items()}
    for it in its.values():  # warm-up: workers started, first batches out of the way
        for _ in range(5):
            next(it)
    names = list(its)
    secs: dict[str, list[float]] = {k: [] for k in names}
    cpus: dict[str, list[tuple[float, float]]] = {k: [] for k in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            it = its[name]
            pids = _pids(it) if cpu else []
            c0 = [_run_ns(p) for p in pids]
            t0 = time.perf_counter()
            for _ in range(batches):
                next(it)
            secs[name].append(time.perf_counter() - t0)
            if cpu:
                d = [(b - a) / batches / 1e3 for a, b in zip(c0, [_run_ns(p) for p in pids])]
                cpus[name].append((d[0], sum(d[1:])))
    ref = names[0]
    out: dict[str, Any] = {k: {"samples_per_s": summarize([batches * batch_size / s for s in v])} for k, v in secs.items()}
    for k in names[1:]:
        out[k]["vs_" + ref] = summarize([a / b for a, b in zip(secs[ref], secs[k])])
    if cpu:
        for k in names:
            out[k]["cpu_us_per_batch"] = {"main": summarize([c[0] for c in cpus[k]]),
                                          "workers": summarize([c[1] for c in cpus[k]])}
    out["_seconds"] = secs
    for it in its.values():
        del it
    return out


def map_case(n: int, work: int, workers: int, batches: int, rounds: int) -> dict[str, Any]:
    import torch
    import resumable_data as rd

    ds = Trivial(n, work)
    makers = {
        "torch": lambda: torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True, num_workers=workers,
                                                     generator=torch.Generator().manual_seed(SEED),
                                                     persistent_workers=workers > 0),
        "rd": lambda: rd.DataLoader(ds, batch_size=16, shuffle=True, seed=SEED, num_workers=workers),
        "rd_lazy": lambda: rd.DataLoader(ds, batch_size=16, shuffle=True, seed=SEED, num_workers=workers,
                                         seed_per_sample=rd.SampleSeeding.LAZY),
    }
    return interleaved(makers, batches, rounds, 16)


#: The datasets of the batch-size case: a user class (its ``__getitem__`` is user code, seeded per
#: sample by default) and two library datasets that draw nothing (not seeded: ``draw_free.py``).
DATASETS = ("trivial", "list", "tensors")


def make_dataset(kind: str, n: int) -> Any:
    import torch

    if kind == "trivial":
        return Trivial(n)
    if kind == "list":
        return list(range(n))
    if kind == "tensors":
        return torch.utils.data.TensorDataset(torch.arange(n))
    raise ValueError(f"dataset kind {kind!r}: expected one of {DATASETS}")


def batch_size_case(n: int, batch_size: int, samples: int, rounds: int, kind: str = "trivial") -> dict[str, Any]:
    """A dataset of ``kind`` (:data:`DATASETS`), 0 workers, at ``batch_size``: torch against rd with
    the default seeding, lazy seeding and no seeding (``samples`` per round, interleaved rounds)."""
    import torch
    import resumable_data as rd

    ds = make_dataset(kind, n)
    makers = {
        "torch": lambda: torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=True,
                                                     generator=torch.Generator().manual_seed(SEED)),
        "rd": lambda: rd.DataLoader(ds, batch_size=batch_size, shuffle=True, seed=SEED),
        "rd_lazy": lambda: rd.DataLoader(ds, batch_size=batch_size, shuffle=True, seed=SEED, seed_per_sample="lazy"),
        "rd_unseeded": lambda: rd.DataLoader(ds, batch_size=batch_size, shuffle=True, seed=SEED, seed_per_sample=False),
    }
    batches = max(1, samples // batch_size)
    r = interleaved(makers, batches, rounds, batch_size)
    sec = r.pop("_seconds")
    per = batches * batch_size / 1e6  # seconds of a round -> us a sample
    for name, key in (("rd", "seeding_us_per_sample"), ("rd_lazy", "lazy_us_per_sample")):
        r[key] = summarize([(a - b) / per for a, b in zip(sec[name], sec["rd_unseeded"])])
    r["torch_us_per_sample"] = summarize([t / per for t in sec["torch"]])
    return r


def seeding_case(n: int, batches: int, rounds: int) -> dict[str, Any]:
    import resumable_data as rd

    ds = Trivial(n)
    makers = {
        "rd_seeded": lambda: rd.DataLoader(ds, batch_size=16, shuffle=True, seed=SEED),
        "rd_unseeded": lambda: rd.DataLoader(ds, batch_size=16, shuffle=True, seed=SEED, seed_per_sample=False),
        "rd_lazy": lambda: rd.DataLoader(ds, batch_size=16, shuffle=True, seed=SEED, seed_per_sample="lazy"),
    }
    r = interleaved(makers, batches, rounds, 16)
    sec = r["_seconds"]
    r["seeding_us_per_sample"] = summarize([(a - b) / (batches * 16) * 1e6 for a, b in zip(sec["rd_seeded"], sec["rd_unseeded"])])
    r["lazy_seeding_us_per_sample"] = summarize([(a - b) / (batches * 16) * 1e6 for a, b in zip(sec["rd_lazy"], sec["rd_unseeded"])])
    return r


def arrow_case(n: int, batches: int, rounds: int) -> dict[str, Any]:
    import resumable_data as rd
    from benchmarks.bench_loader import RdAdapter, paired_ceiling, paired_torchdata
    from benchmarks.data import ensure, small_batches_dir

    paths = ensure(n)
    ad = RdAdapter(n, paths, 0, {})
    ad.src = rd.ArrowShards(small_batches_dir(n))
    units = len(ad.src._units) if hasattr(ad.src, "_units") else None
    ceil = paired_ceiling(ad, n, batches, rounds)
    td = paired_torchdata(ad, n, paths, batches, rounds)
    return {"record_batches": units, "ceiling": ceil, "torchdata": td}


def passes_interleaved(makers: dict[str, Any], rounds: int, batch_size: int) -> dict[str, Any]:
    """Like :func:`interleaved`, but each round is one whole pass (epoch) of each loader, timed from
    ``iter()`` to its end, with the CPU time per batch of this process and of the loader's workers
    over the pass (Linux). Whole passes, not a few dozen batches: a worker pool refills its
    prefetched batches (up to ``prefetch_factor`` requests of several steps per worker) while the
    other loader's round runs, which would both slow that round and hand the pool's next round
    batches made outside it."""
    loaders = {k: make() for k, make in makers.items()}
    for loader in loaders.values():  # warm-up: a first pass (workers started, pages mapped)
        for _ in loader:
            pass
    names = list(loaders)
    secs: dict[str, list[float]] = {k: [] for k in names}
    cpus: dict[str, list[tuple[float, float]]] = {k: [] for k in names}
    steps: dict[str, list[int]] = {k: [] for k in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            t0 = time.perf_counter()
            it = iter(loaders[name])
            pids = _pids(it)
            c0 = [_run_ns(p) for p in pids]
            n = 0
            for _ in it:
                n += 1
            secs[name].append(time.perf_counter() - t0)
            d = [(b - a) / n / 1e3 for a, b in zip(c0, [_run_ns(p) for p in pids])]
            cpus[name].append((d[0], sum(d[1:])))
            steps[name].append(n)
    ref = names[0]
    out: dict[str, Any] = {k: {"samples_per_s": summarize([steps[k][i] * batch_size / s for i, s in enumerate(v)]),
                               "cpu_us_per_batch": {"main": summarize([c[0] for c in cpus[k]]),
                                                    "workers": summarize([c[1] for c in cpus[k]])}}
                           for k, v in secs.items()}
    for k in names[1:]:
        out[k]["vs_" + ref] = summarize([(steps[k][i] / b) / (steps[ref][i] / a)
                                         for i, (a, b) in enumerate(zip(secs[ref], secs[k]))])
    out["_seconds"] = secs
    return out


def workers_case(n: int, rounds: int) -> dict[str, Any]:
    """rd over ArrowShards at 2 workers (persistent) vs 0 workers, ``rounds`` whole passes each."""
    import resumable_data as rd
    from benchmarks.data import ensure

    src = rd.ArrowShards(ensure(n)["shards"])
    makers = {
        "rd_w0": lambda: rd.DataLoader(src, batch_size=256, shuffle=True, seed=SEED),
        "rd_w2": lambda: rd.DataLoader(src, batch_size=256, shuffle=True, seed=SEED, num_workers=2,
                                       persistent_workers=True),
    }
    return passes_interleaved(makers, rounds, 256)


def _spin() -> None:  # the second process that loads the machine (--busy)
    while True:
        pass


def busy_case(work: int, samples: int, rounds: int, spinners: int) -> dict[str, Any]:
    """A busy ``__getitem__`` (``work`` loop iterations, ~200 us), batch 16, 2 persistent workers:
    torch's ``DataLoader`` vs rd's (default seeding, and ``seed_per_sample=False``), ``rounds``
    whole passes over ``samples`` records each (:func:`passes_interleaved`), while ``spinners``
    busy-loop processes load the machine."""
    import multiprocessing as mp

    import torch
    import resumable_data as rd

    ds = Trivial(samples, work)
    makers = {
        "torch": lambda: torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True, num_workers=2,
                                                     generator=torch.Generator().manual_seed(SEED),
                                                     persistent_workers=True),
        "rd": lambda: rd.DataLoader(ds, batch_size=16, shuffle=True, seed=SEED, num_workers=2,
                                    persistent_workers=True),
        "rd_unseeded": lambda: rd.DataLoader(ds, batch_size=16, shuffle=True, seed=SEED, num_workers=2,
                                             persistent_workers=True, seed_per_sample=False),
    }
    procs = [mp.get_context("fork").Process(target=_spin, daemon=True) for _ in range(spinners)]
    for p in procs:
        p.start()
    try:
        load0 = os.getloadavg()
        out = passes_interleaved(makers, rounds, 16)
        out["load"] = (load0[0], os.getloadavg()[0])
    finally:
        for p in procs:
            p.terminate()
            p.join()
    return out


def busy_only(quick: bool) -> dict[str, Any]:
    """``--busy``: :func:`busy_case` with no extra process, and with one and two busy-loop processes."""
    rounds, samples = (5, 960) if quick else (15, 3200)
    work = calibrate(200e-6)
    res = {}
    for spinners in (0, 1, 2):
        r = busy_case(work, samples, rounds, spinners)
        r.pop("_seconds")
        res[spinners] = r
        print(f"[dropin] busy, {spinners} spinner(s): rd vs torch {_r(r['rd']['vs_torch'])}, "
              f"unseeded {_r(r['rd_unseeded']['vs_torch'])}, load {r['load'][0]:.1f}..{r['load'][1]:.1f}", flush=True)
    lines = ["# Busy `__getitem__`, 2 workers: rd vs torch, with and without a second process loading the machine", "",
             f"`__getitem__` ~200 us of Python ({work:,} loop iterations, calibrated), batch 16, shuffled, 2 persistent "
             f"workers each; {rounds} interleaved whole passes over {samples:,} records per loader in one process, "
             "median (min..max) of the per-pass ratio to torch; CPU: `/proc/PID/task/*/schedstat` run time per "
             f"batch over each pass. Busy-loop processes (`while True: pass`) started by the benchmark load the "
             f"machine in the later rows ({os.cpu_count()} CPUs).", "",
             "| extra busy processes | load average (start..end) | torch samples/s | rd default vs torch | "
             "rd seed_per_sample=False vs torch | main CPU us/batch torch / rd | workers' CPU us/batch torch / rd |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for spinners, r in res.items():
        t, d = r["torch"]["cpu_us_per_batch"], r["rd"]["cpu_us_per_batch"]
        lines.append(f"| {spinners} | {r['load'][0]:.1f}..{r['load'][1]:.1f} | {_rate(r['torch'])} | "
                     f"{_r(r['rd']['vs_torch'])} | {_r(r['rd_unseeded']['vs_torch'])} | "
                     f"{_us(t['main'])} / {_us(d['main'])} | {_us(t['workers'])} / {_us(d['workers'])} |")
    payload = {"rounds": rounds, "samples": samples, "work_loops": work, "by_spinners": res}
    path = write_results("dropin_busy", payload, "\n".join(lines))
    print("\n".join(lines), f"\n[dropin] wrote {path}", flush=True)
    return payload


def workers_only(quick: bool) -> dict[str, Any]:
    """``--workers``: the ArrowShards case at 2 vs 0 workers alone (15 interleaved passes over the
    200,000 records each), with CPU per batch and the load averages around it."""
    import resumable_data as rd
    from benchmarks.data import QUICK_RECORDS

    rounds = 5 if quick else 15
    load0 = os.getloadavg()
    r = workers_case(QUICK_RECORDS, rounds)
    r.pop("_seconds")
    load1 = os.getloadavg()
    payload = {"rounds": rounds, "records": QUICK_RECORDS, "package": rd.__file__,
               "load_before": load0, "load_after": load1, "workers": r}
    w0, w2 = r["rd_w0"], r["rd_w2"]
    lines = ["# ArrowShards, 2 workers vs 0 workers, with CPU per batch", "",
             f"{QUICK_RECORDS:,} records, batch 256, shuffled, default collate; {rounds} interleaved whole passes of "
             "each loader in one process (2 workers persistent), median (min..max); CPU: `/proc/PID/task/*/schedstat` "
             f"run time per batch over each pass. Load average before / after: {load0[0]:.1f} / {load1[0]:.1f} "
             f"({os.cpu_count()} CPUs).", "",
             "| loader | samples/s | vs 0 workers | main process CPU, us/batch | workers' CPU, us/batch |",
             "|---|---:|---:|---:|---:|"]
    for name, x in (("0 workers", w0), ("2 workers", w2)):
        c = x["cpu_us_per_batch"]
        lines.append(f"| {name} | {_rate(x)} | {_r(x['vs_rd_w0']) if 'vs_rd_w0' in x else '1.00x'} | "
                     f"{_us(c['main'])} | {_us(c['workers'])} |")
    path = write_results("dropin_workers", payload, "\n".join(lines))
    print("\n".join(lines), f"\n[dropin] wrote {path}", flush=True)
    return payload


def _r(x: dict) -> str:
    return f"{x['median']:.2f}x ({x['min']:.2f}..{x['max']:.2f})"


def _us(x: dict) -> str:
    return f"{x['median']:.2f} ({x['min']:.2f}..{x['max']:.2f})"


def _rate(x: dict) -> str:
    return f"{x['samples_per_s']['median']:,.0f}"


def markdown(p: dict) -> str:
    q = " (--quick)" if p["quick"] else ""
    lines = [f"# drop-in benchmark{q}", "",
             f"Side by side in one process, {p['rounds']} interleaved rounds per case ({LONG_ROUNDS} rounds of "
             f"{LONG_BATCHES:,} batches for the trivial 0-worker and the seeding cases; median of the per-round "
             f"ratios, min..max); map-style cases: {p['map_records']:,} records, batch 16, shuffled, default settings; "
             f"Arrow cases: {p['arrow_records']:,} records, batch 256, shuffled. The 100 us `__getitem__` is "
             f"{p['work_loops']:,} loop iterations (calibrated in this run). Machine: {p['cpus']} shared CPUs.", "",
             "| case | workers | torch samples/s | rd samples/s | rd vs torch | goal | met | `seed_per_sample=\"lazy\"` vs torch |",
             "|---|---|---|---|---|---|---|---|"]
    goals = {("trivial", 0): 0.5, ("trivial", 2): 0.8, ("100us", 0): 0.9, ("100us", 2): 0.9}
    for (kind, w), g in goals.items():
        r = p["map"][f"{kind}/w{w}"]
        v = r["rd"]["vs_torch"]
        lines.append(f"| `__getitem__` {'returns its index' if kind == 'trivial' else '~100 us of work'} | {w} | "
                     f"{_rate(r['torch'])} | {_rate(r['rd'])} | {_r(v)} | >= {g}x | {'yes' if v['median'] >= g else 'no'} | "
                     f"{_r(r['rd_lazy']['vs_torch']) if 'rd_lazy' in r else 'n/a'} |")
    s = p["seeding"]["seeding_us_per_sample"]
    lines += ["", f"Per-sample seeding (the three global generators, from the sample's key) costs "
              f"**{s['median']:.1f} us a sample** ({s['min']:.1f}..{s['max']:.1f}; trivial dataset, 0 workers, "
              "`seed_per_sample=True` minus `False`, including saving and restoring the globals around each batch)"
              + (f"; with `seed_per_sample=\"lazy\"` (torch's generator only, for a dataset that never draws from "
                 f"`random`/numpy) **{p['seeding']['lazy_seeding_us_per_sample']['median']:.1f} us**"
                 if "lazy_seeding_us_per_sample" in p["seeding"] else "") + ".", ""]
    a = p["arrow"]
    lines += ["| Arrow case | measured | goal | met |", "|---|---|---|---|"]
    c, t = a["ceiling"]["ratio"], a["torchdata"]["ratio"]
    lines.append(f"| 1,024-row record batches ({a['record_batches']} of them), 0 workers: rd vs ceiling (one-chunk "
                 f"`Table.take` + same collate) | {_r(c)} | >= 0.9x | {'yes' if c['median'] >= 0.9 else 'no'} |")
    lines.append(f"| 1,024-row record batches, 0 workers: rd vs torchdata StatefulDataLoader (ceiling's dataset) | "
                 f"{_r(t)} | >= 1.2x | {'yes' if t['median'] >= 1.2 else 'no'} |")
    w = p["workers"]["rd_w2"]["vs_rd_w0"]
    lines.append(f"| ArrowShards, 2 workers vs rd's own 0 workers ({_rate(p['workers']['rd_w2'])} vs "
                 f"{_rate(p['workers']['rd_w0'])} samples/s) | {_r(w)} | >= 0.9x | {'yes' if w['median'] >= 0.9 else 'no'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds and batches")
    ap.add_argument("--batch-sizes", action="store_true",
                    help="only torch vs rd's seeding modes at batch 16 and 256 (dropin_batch_sizes.md)")
    ap.add_argument("--workers", action="store_true",
                    help="only ArrowShards at 2 vs 0 workers, with CPU per batch (dropin_workers.md)")
    ap.add_argument("--busy", action="store_true",
                    help="only a ~200 us __getitem__ at 2 workers, rd vs torch, with and without a busy-loop "
                         "process (dropin_busy.md)")
    args = ap.parse_args(argv)
    if args.busy:
        return busy_only(args.quick)
    if args.workers:
        return workers_only(args.quick)
    if args.batch_sizes:
        rounds = 5 if args.quick else 9
        out = {(kind, bs): batch_size_case(1_000_000, bs, 8_000 if args.quick else 32_000, rounds, kind)
               for kind in DATASETS for bs in (16, 256)}
        load = os.getloadavg()[0]
        lines = ["# Drop-in, 0 workers: rd's seeding modes against torch by dataset and batch size", "",
                 f"Interleaved rounds ({rounds}), median (min..max) of the per-round ratio to torch; load average "
                 f"{load:.1f} at the end. `trivial`: a user class whose `__getitem__` returns its index (user code: "
                 "seeded per sample by default); `list` and `tensors` (`TensorDataset`): library datasets that draw "
                 "nothing, not seeded (`draw_free.py`).", "",
                 "| dataset | batch | torch samples/s | rd default | rd lazy | rd seed_per_sample=False | "
                 "default's seeding us a sample | lazy us a sample | torch's whole loader us a sample |",
                 "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for (kind, bs), r in out.items():
            lines.append(f"| {kind} | {bs} | {_rate(r['torch'])} | {_r(r['rd']['vs_torch'])} | "
                         f"{_r(r['rd_lazy']['vs_torch'])} | {_r(r['rd_unseeded']['vs_torch'])} | "
                         f"{_us(r['seeding_us_per_sample'])} | {_us(r['lazy_us_per_sample'])} | "
                         f"{_us(r['torch_us_per_sample'])} |")
        path = write_results("dropin_batch_sizes", {"rounds": rounds, "load": load,
                                                    "by_case": {f"{k}/{b}": v for (k, b), v in out.items()}},
                             "\n".join(lines))
        print("\n".join(lines), f"\n[dropin] wrote {path}", flush=True)
        return out

    from benchmarks.data import QUICK_RECORDS

    rounds = 5 if args.quick else 9
    work = calibrate()
    payload: dict[str, Any] = {"quick": args.quick, "rounds": rounds, "map_records": 1_000_000, "work_loops": work,
                               "arrow_records": QUICK_RECORDS, "cpus": os.cpu_count(), "map": {}}
    for kind, loops, batches in (("trivial", 0, 100 if args.quick else 300), ("100us", work, 10 if args.quick else 30)):
        for w in (0, 2):
            t0 = time.perf_counter()
            # the trivial in-process case: rounds of 2,000 batches (~30 ms: 300 were a few ms and swung), 21 of them
            long = kind == "trivial" and w == 0 and not args.quick
            r = map_case(1_000_000, loops, w, LONG_BATCHES if long else batches, LONG_ROUNDS if long else rounds)
            r["rounds"], r["batches"] = (LONG_ROUNDS, LONG_BATCHES) if long else (rounds, batches)
            r.pop("_seconds")
            payload["map"][f"{kind}/w{w}"] = r
            print(f"[dropin] map {kind} w{w}: rd vs torch {_r(r['rd']['vs_torch'])} ({time.perf_counter() - t0:.0f}s)", flush=True)
    r = seeding_case(1_000_000, 100 if args.quick else LONG_BATCHES, rounds if args.quick else LONG_ROUNDS)
    r.pop("_seconds")
    payload["seeding"] = r
    print(f"[dropin] seeding: {payload['seeding']['seeding_us_per_sample']['median']:.1f} us/sample", flush=True)
    n = QUICK_RECORDS  # 200k records (the ratios, not the sizes, are the point; the data is built once)
    payload["arrow"] = arrow_case(n, 20 if args.quick else 40, rounds)
    print(f"[dropin] arrow rb1024: vs ceiling {_r(payload['arrow']['ceiling']['ratio'])}, "
          f"vs torchdata {_r(payload['arrow']['torchdata']['ratio'])}", flush=True)
    r = workers_case(n, rounds)
    r.pop("_seconds")
    payload["workers"] = r
    print(f"[dropin] arrow workers: 2 vs 0 {_r(r['rd_w2']['vs_rd_w0'])}", flush=True)
    path = write_results("dropin", payload, markdown(payload))
    print(f"[dropin] wrote {path}")
    return payload


if __name__ == "__main__":
    main()
