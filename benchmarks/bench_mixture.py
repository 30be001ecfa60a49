"""Mixtures: overhead, state size, resume cost and realised proportions, beside peers.

Side by side in one process, interleaved rounds, on the same three pinned sources (weights
0.5 / 0.3 / 0.2, the smallest source upsampled):
* steady-state throughput at batch 256 (0 workers): ``rd.DataLoader(rd.Mixture(...))`` against
  ``rd.DataLoader`` over one source holding the same records (shuffled) in as many shards as the
  three sources together (12): the mixture's overhead. Every read checks the identity of each
  shard it touches (``sources/watch.py``, two ``statx`` a shard), so a batch spread over 12 files
  costs more than over 4 whatever the mixture does; the same records in 4 shards are measured
  too (the third loader of the rounds), to show that cost apart.
  Both loaders are built once and read in interleaved rounds (the order alternating), each round
  ``batches`` batches of a loader already past its first 5 (construction and first batch are the
  start-up cost, measured below as the resume/fresh ratio);
* loader state size (JSON bytes) for 3 and 64 sources;
* start of a fresh ``rd.Mixture`` (build it over the opened sources, build its loader, first
  batch) over one source's start (build the loader over the opened source, first batch), and the
  same from closed directories (every source opened too): medians of per-pair ratios of wall
  and of CPU time (``time.process_time``: the process's own work, which waiting for a CPU on a
  loaded machine does not inflate) (:func:`start_ratio`; ``--start`` runs only this, on sources of 1,024-row record batches, the
  layout Hugging Face ``datasets`` writes, and on the default layout);
* time to the first batch of a restarted job (build the loader, ``load_state_dict``, first batch)
  at step 10**2, 10**4, 10**6, over a fresh start's (build, first batch): the median of per-pair
  ratios (a fresh start and a restart back to back, the order alternating; 300 pairs a step), with min..max;
* realised proportions over the batches read, and the worst aligned block (positions per block);
* peers where installed, on the same records (the id column as numpy arrays): Grain
  ``MapDataset.mix``, Hugging Face ``interleave_datasets(probabilities=)`` and torchdata
  ``MultiNodeWeightedSampler``: samples/s, resume time at a step, bit-exactness after resume,
  realised proportions.
Run: ``python -m benchmarks.bench_mixture [--quick]`` (quick: under 3 minutes).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time

import numpy as np
import pyarrow as pa

import resumable_data as rd
from benchmarks._common import summarize, write_results

WEIGHTS = {"web": 0.5, "code": 0.3, "math": 0.2}
BATCH = 256


def write(root: str, name: str, ids: np.ndarray, rows_per_batch: int | None = None, num_shards: int = 4) -> rd.ArrowShards:
    d = os.path.join(root, name)
    rd.write_arrow_shards(pa.table({"id": pa.array(ids, pa.int64()), "x": pa.array(ids % 7919, pa.int32())}), d,
                         num_shards=num_shards, rows_per_batch=rows_per_batch)
    rd.pin(d)
    return rd.ArrowShards(d)


def first_batches(loader, n: int) -> list[np.ndarray]:
    out = []
    while len(out) < n:
        for b in loader:
            out.append(b["id"].numpy())
            if len(out) == n:
                break
    return out


class Running:
    """A loader past its first ``warm`` batches, read ``batches`` at a time across epochs."""

    def __init__(self, make, warm: int = 5) -> None:
        self.loader = make()
        self.it = iter(self.loader)
        self.take(warm)

    def take(self, batches: int) -> None:
        n = 0
        while n < batches:
            try:
                next(self.it)
            except StopIteration:  # an epoch ended: the next pass
                self.it = iter(self.loader)
                continue
            n += 1

    def rate(self, batches: int) -> float:
        """Samples/s over the next ``batches`` batches (steady state: start-up is measured apart)."""
        t0 = time.perf_counter()
        self.take(batches)
        return batches * BATCH / (time.perf_counter() - t0)


def forged_state(loader, step: int) -> dict:
    """The loader's state at ``step`` (cursor only: what a saved state at that step holds)."""
    st = loader.state_dict()
    spe = loader.plan.steps_per_epoch
    st["cursor"] = {"committed": step, "delivered": step, "fetched": step}
    st["epoch_base"] = [step // spe, (step // spe) * spe]
    return st


def resume_ratio(make, step: int, pairs: int) -> dict:
    """Time to the first batch of a restarted job over a fresh start's, as the median of per-pair
    ratios (min..max): each pair times a fresh start (build, first batch) and a restart (build,
    ``load_state_dict`` of a state at ``step``, first batch) back to back, the order alternating
    from pair to pair, so load drifting on a shared machine moves both sides of a pair alike."""
    fresh, resumed, load = [], [], []
    state = forged_state(make(), step)

    def time_fresh() -> None:
        gc.collect()  # sub-millisecond timings: keep collector pauses out of both sides
        t0 = time.perf_counter()
        next(iter(make()))
        fresh.append(time.perf_counter() - t0)

    def time_resumed() -> None:
        gc.collect()
        t0 = time.perf_counter()
        loader = make()  # a restarted job builds its loader either way: both include it
        t1 = time.perf_counter()
        loader.load_state_dict(state)
        load.append(time.perf_counter() - t1)
        next(iter(loader))
        resumed.append(time.perf_counter() - t0)
        del loader

    time_fresh(), time_resumed()  # warm-up pair (not counted): first touches of the maps and kernels
    fresh.clear(), resumed.clear(), load.clear()
    for k in range(pairs):
        for side in ((time_fresh, time_resumed) if k % 2 == 0 else (time_resumed, time_fresh)):
            side()
    ratios = summarize([r / f for r, f in zip(resumed, fresh)])
    return {"fresh_s": summarize(fresh), "resumed_s": summarize(resumed), "load_state_dict_s": summarize(load),
            "pairs": ratios, "ratio": ratios["median"]}


def start_ratio(dirs: dict, single_dir: str, pairs: int) -> dict:
    """A fresh mixture's start over one source's, median of per-pair ratios (min..max), the order
    alternating: ``opened``: ``rd.Mixture`` over sources opened once + ``rd.DataLoader`` + first
    batch, against ``rd.DataLoader`` over the opened single source + first batch; ``closed``: the
    same with every source opened inside the timing (both sides)."""
    srcs = {k: rd.ArrowShards(d) for k, d in dirs.items()}
    single = rd.ArrowShards(single_dir)

    def mix_opened() -> None:
        next(iter(rd.DataLoader(rd.Mixture(srcs, weights=WEIGHTS), batch_size=BATCH, seed=0)))

    def one_opened() -> None:
        next(iter(rd.DataLoader(single, batch_size=BATCH, shuffle=True, seed=0)))

    def mix_closed() -> None:
        m = rd.Mixture({k: rd.ArrowShards(d) for k, d in dirs.items()}, weights=WEIGHTS)
        next(iter(rd.DataLoader(m, batch_size=BATCH, seed=0)))

    def one_closed() -> None:
        next(iter(rd.DataLoader(rd.ArrowShards(single_dir), batch_size=BATCH, shuffle=True, seed=0)))

    out = {}
    for name, (a, b) in {"opened": (mix_opened, one_opened), "closed": (mix_closed, one_closed)}.items():
        secs: dict[str, list[float]] = {"mixture": [], "single": []}
        cpu: dict[str, list[float]] = {"mixture": [], "single": []}
        a(), b()  # warm-up pair: kernels compiled, maps touched
        for k in range(pairs):
            for side, fn in (("mixture", a), ("single", b)) if k % 2 == 0 else (("single", b), ("mixture", a)):
                gc.collect()  # millisecond timings: keep collector pauses out of both sides
                c0, t0 = time.process_time(), time.perf_counter()
                fn()
                secs[side].append(time.perf_counter() - t0)
                cpu[side].append(time.process_time() - c0)  # the process's own work: no wait for a CPU
        out[name] = {"mixture_s": summarize(secs["mixture"]), "single_s": summarize(secs["single"]),
                     "ratio": summarize([m / o for m, o in zip(secs["mixture"], secs["single"])]),
                     "mixture_cpu_s": summarize(cpu["mixture"]), "single_cpu_s": summarize(cpu["single"]),
                     "cpu_ratio": summarize([m / o for m, o in zip(cpu["mixture"], cpu["single"]) if o > 0])}
    return out


def start_only(pairs: int) -> dict:
    """``--start``: :func:`start_ratio` on 1,024-row record batches and on the default layout."""
    sizes = {"web": 400_000, "code": 200_000, "math": 20_000}
    out = {}
    for rows in (1024, None):
        root = tempfile.mkdtemp(prefix="rd-bench-mixstart-")
        arrays = {k: np.arange(n, dtype=np.int64) + 10_000_000 * i for i, (k, n) in enumerate(sizes.items())}
        dirs = {k: write(root, k, a, rows) for k, a in arrays.items()}
        single = write(root, "single", np.concatenate(list(arrays.values())), rows)
        out["rb1024" if rows else "default"] = start_ratio({k: s.root for k, s in dirs.items()}, single.root, pairs)
    md = [f"Fresh mixture start over one source's (sources of {sizes}, batch {BATCH}, {pairs} pairs, "
          "median of per-pair ratios, min..max; ms: medians).", "",
          "| layout | sources | mixture ms | one source ms | ratio (wall) | mixture CPU ms | one source CPU ms | "
          "ratio (CPU) |", "|---|---|---|---|---|---|---|---|"]
    for lay, r in out.items():
        for k, v in r.items():
            md.append(f"| {lay} | {k} | {v['mixture_s']['median'] * 1e3:.2f} | {v['single_s']['median'] * 1e3:.2f} | "
                      f"{v['ratio']['median']:.2f} ({v['ratio']['min']:.2f}..{v['ratio']['max']:.2f}) | "
                      f"{v['mixture_cpu_s']['median'] * 1e3:.2f} | {v['single_cpu_s']['median'] * 1e3:.2f} | "
                      f"{v['cpu_ratio']['median']:.2f} ({v['cpu_ratio']['min']:.2f}..{v['cpu_ratio']['max']:.2f}) |")
    path = write_results("mixture_start", out, "\n".join(md))
    print(path.read_text())
    return out


def state_size(root: str, sources: int) -> int:
    srcs = {f"s{i:02d}": write(root, f"small{sources}_{i}", np.arange(50) + 1000 * i) for i in range(sources)}
    mix = rd.Mixture(srcs, weights={k: 1 + (i % 5) for i, k in enumerate(srcs)})
    loader = rd.DataLoader(mix, batch_size=64, seed=0)
    first_batches(loader, 3)
    return len(json.dumps(loader.state_dict()))


# -- peers ----------------------------------------------------------------------------------------
def peer_grain(arrays: dict, batches: int, step: int) -> dict:
    import grain

    ds = [grain.MapDataset.source(arrays[k]) for k in WEIGHTS]
    mixed = grain.MapDataset.mix(ds, [WEIGHTS[k] for k in WEIGHTS])
    n = batches * BATCH
    t0 = time.perf_counter()
    got = np.array([mixed[i] for i in range(n)])
    sps = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    again = np.array([mixed[i] for i in range(step * BATCH, step * BATCH + BATCH)])  # a resume is an index
    resume = time.perf_counter() - t0
    exact = bool((again == np.array([mixed[i] for i in range(step * BATCH, step * BATCH + BATCH)])).all())
    return {"samples_per_s": sps, "resume_s": resume, "bit_exact": exact, "proportions": props(got),
            "length": len(mixed), "note": "MapDataset.mix: length and proportions follow the smallest source"}


def peer_hf(arrays: dict, batches: int, step: int) -> dict:
    import datasets

    datasets.disable_progress_bars()
    ds = [datasets.Dataset.from_dict({"id": arrays[k]}) for k in WEIGHTS]
    t0 = time.perf_counter()
    mixed = datasets.interleave_datasets(ds, probabilities=[WEIGHTS[k] for k in WEIGHTS], seed=0,
                                         stopping_strategy="all_exhausted")
    build = time.perf_counter() - t0
    n = min(batches * BATCH, len(mixed))
    t0 = time.perf_counter()
    got = np.concatenate([np.asarray(mixed[i:i + BATCH]["id"]) for i in range(0, n, BATCH)])
    sps = n / (time.perf_counter() - t0)
    it = [datasets.Dataset.from_dict({"id": arrays[k]}).to_iterable_dataset(num_shards=1) for k in WEIGHTS]
    stream = datasets.interleave_datasets(it, probabilities=[WEIGHTS[k] for k in WEIGHTS], seed=0)
    ref = []
    state = None
    for i, row in enumerate(stream):
        if i == step * BATCH:
            state = stream.state_dict()
        if i >= step * BATCH:
            ref.append(row["id"])
        if len(ref) == BATCH:
            break
    stream2 = datasets.interleave_datasets(
        [datasets.Dataset.from_dict({"id": arrays[k]}).to_iterable_dataset(num_shards=1) for k in WEIGHTS],
        probabilities=[WEIGHTS[k] for k in WEIGHTS], seed=0)
    t0 = time.perf_counter()
    stream2.load_state_dict(state)
    resumed = []
    for row in stream2:
        resumed.append(row["id"])
        if len(resumed) == BATCH:
            break
    resume = time.perf_counter() - t0
    return {"samples_per_s": sps, "build_s": build, "resume_s": resume, "bit_exact": resumed == ref,
            "proportions": props(got), "note": "map-style: an index of the whole stream built up front; "
            "resume measured on the iterable interleave (state_dict)"}


def peer_torchdata(arrays: dict, batches: int, step: int) -> dict:
    from torchdata.nodes import IterableWrapper, MultiNodeWeightedSampler

    def make():
        return MultiNodeWeightedSampler({k: IterableWrapper(_cycle(arrays[k])) for k in WEIGHTS}, dict(WEIGHTS), seed=0)

    node = make()
    n = batches * BATCH
    t0 = time.perf_counter()
    got = np.array([next(node) for _ in range(n)])
    sps = n / (time.perf_counter() - t0)
    node = make()
    for _ in range(step * BATCH):
        next(node)
    state = node.state_dict()
    ref = [next(node) for _ in range(BATCH)]
    node2 = make()
    t0 = time.perf_counter()
    node2.reset(state)
    resumed = [next(node2) for _ in range(BATCH)]
    resume = time.perf_counter() - t0
    return {"samples_per_s": sps, "resume_s": resume, "bit_exact": resumed == ref, "proportions": props(got),
            "note": "random choice per sample; sources resumed by replaying their iterators"}


class _cycle:
    """An endless iterable over an array (each pass the same order)."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def __iter__(self):
        while True:
            yield from self.a.tolist()


def props(ids: np.ndarray) -> dict:
    c = np.bincount(np.asarray(ids) // 10_000_000, minlength=3)[:3]
    return {k: round(float(v) / max(1, int(c.sum())), 4) for k, v in zip(WEIGHTS, c)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--start", action="store_true", help="only the fresh-mixture start ratio (mixture_start.md)")
    args = ap.parse_args(argv)
    if args.start:
        start_only(20 if args.quick else 60)
        return
    sizes = {"web": 60_000, "code": 30_000, "math": 3_000} if args.quick else {"web": 400_000, "code": 200_000, "math": 20_000}
    batches = 40 if args.quick else 400  # proportions and peers
    round_batches = 40 if args.quick else 2000  # ~0.1 s a throughput round at ~5M samples/s: shorter ones are mostly noise
    rounds = 5 if args.quick else 21  # the per-round ratio swings by +-10% on this shared machine: many rounds
    root = tempfile.mkdtemp(prefix="rd-bench-mix-")
    arrays = {k: np.arange(n, dtype=np.int64) + 10_000_000 * i for i, (k, n) in enumerate(sizes.items())}
    srcs = {k: write(root, k, a) for k, a in arrays.items()}
    shards = sum(src.num_shards for src in srcs.values())
    single = write(root, "single", np.concatenate(list(arrays.values())), num_shards=shards)
    single4 = write(root, "single4", np.concatenate(list(arrays.values())))
    mix = rd.Mixture(srcs, weights=WEIGHTS)

    def make_mix():
        return rd.DataLoader(mix, batch_size=BATCH, seed=0)

    def make_single():
        return rd.DataLoader(single, batch_size=BATCH, shuffle=True, seed=0)

    def make_single4():
        return rd.DataLoader(single4, batch_size=BATCH, shuffle=True, seed=0)

    rates = {"mixture": [], "single": [], "single4": []}
    running = {"single": Running(make_single), "mixture": Running(make_mix), "single4": Running(make_single4)}
    order = ("single", "mixture", "single4")
    for r in range(rounds):  # interleaved rounds, alternating the order: the machine is shared
        for name in (order if r % 2 == 0 else order[::-1]):
            rates[name].append(running[name].rate(round_batches))
    del running
    thr = {k: summarize(v) for k, v in rates.items()}
    paired = summarize([m / s for m, s in zip(rates["mixture"], rates["single"])])  # per round: same load
    overhead = 1 - paired["median"]
    paired4 = summarize([m / s for m, s in zip(rates["mixture"], rates["single4"])])
    # what 8 more shards cost one source per batch (the identity check of each shard a read touches)
    per_shard_us = [(BATCH / a - BATCH / b) * 1e6 / (shards - single4.num_shards)
                    for a, b in zip(rates["single"], rates["single4"])]
    ids = np.concatenate(first_batches(make_mix(), batches))
    block = mix.block_size
    worst = 0.0
    for j in range(len(ids) // block):
        c = np.bincount(ids[j * block:(j + 1) * block] // 10_000_000, minlength=3)
        worst = max(worst, max(abs(c[i] - w * block) for i, w in enumerate(WEIGHTS.values())))
    pairs = 60 if args.quick else 300  # ~4 ms a pair: many pairs keep the median's noise below the goal's margin
    resume = {str(s): resume_ratio(make_mix, s, pairs) for s in (10**2, 10**4, 10**6)}
    sizes_b = {"3": len(json.dumps(make_mix().state_dict())), "64": state_size(root, 64)}
    peers = {}
    for name, fn in (("grain MapDataset.mix", peer_grain), ("HF interleave_datasets", peer_hf),
                     ("torchdata MultiNodeWeightedSampler", peer_torchdata)):
        try:
            peers[name] = fn(arrays, batches, 10**2 if args.quick else 10**3)
        except Exception as e:  # a peer not installed or failing: reported, not fatal
            peers[name] = {"error": f"{type(e).__name__}: {e}"[:200]}
    payload = {"sizes": sizes, "batch": BATCH, "batches": batches, "throughput": thr, "paired_ratio": paired,
               "overhead": overhead, "single_shards": shards, "paired_ratio_single4": paired4,
               "per_shard_us_per_batch": summarize(per_shard_us),
               "state_bytes": sizes_b, "resume": resume, "proportions": props(ids), "worst_block_error": worst,
               "block": block, "peers": peers}
    md = [f"Mixture of {sizes} (weights {WEIGHTS}), batch {BATCH}, {round_batches} batches x {rounds} interleaved rounds.",
          "", "| measure | value | goal |", "|---|---|---|",
          f"| mixture overhead vs one source (samples/s, median of per-round ratios, min..max) | {overhead:.1%} "
          f"({1 - paired['max']:.0%}..{1 - paired['min']:.0%}; {thr['mixture']['median']:,.0f} vs "
          f"{thr['single']['median']:,.0f}; the one source in {shards} shards, as many as the mixture's) | <= 10% |",
          f"| the same against the same records in {single4.num_shards} shards | {1 - paired4['median']:.1%} "
          f"({1 - paired4['max']:.0%}..{1 - paired4['min']:.0%}; vs {thr['single4']['median']:,.0f}) | |",
          f"| one source, each shard more a batch touches, us a batch (the reads' identity checks) | "
          f"{summarize(per_shard_us)['median']:.2f} | |",
          f"| state size, 3 / 64 sources | {sizes_b['3']} / {sizes_b['64']} bytes | < 1 KB / < 4 KB |"]
    for s, r in resume.items():
        md.append(f"| resume / fresh first batch at step {int(s):,} (median of per-pair ratios, min..max; "
                  f"fresh, resumed, load_state_dict ms) | {r['ratio']:.2f} ({r['pairs']['min']:.2f}..{r['pairs']['max']:.2f}; "
                  f"{r['fresh_s']['median'] * 1e3:.2f}, {r['resumed_s']['median'] * 1e3:.2f}, "
                  f"{r['load_state_dict_s']['median'] * 1e3:.2f}) | <= 1.2 |")
    md.append(f"| realised proportions | {props(ids)} | {WEIGHTS} |")
    md.append(f"| worst aligned block ({block}) error | {worst:.2f} positions | < 1 |")
    md += ["", "| peer | samples/s | resume s | bit-exact after resume | proportions | note |", "|---|---|---|---|---|---|"]
    for name, r in peers.items():
        if "error" in r:
            md.append(f"| {name} | - | - | - | - | {r['error']} |")
        else:
            md.append(f"| {name} | {r['samples_per_s']:,.0f} | {r['resume_s']:.4f} | {r['bit_exact']} | "
                      f"{r['proportions']} | {r['note']} |")
    path = write_results("mixture", payload, "\n".join(md))
    print(path.read_text())


if __name__ == "__main__":
    main()
