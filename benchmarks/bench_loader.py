"""Loader benchmark: rd.DataLoader against the loaders people run, side by side in one run.

Every loader reads the same records (``benchmarks/data.py``: ``tokens: list<int32>`` 16..256
tokens, ``id: int64``; 1M records, ``--quick`` 200k), batch 256, shuffled, and yields the same
batch layout (``tokens [B, L]`` int32 padded with 0, ``tokens_lengths`` int64, ``id`` int64):

* ``rd``: ``rd.DataLoader`` over ``rd.ArrowShards`` (default collate);
* ``torch_arrow``: torch ``DataLoader`` over a map-style dataset of the memory-mapped Arrow table
  (a one-record-batch copy: a chunked table's ``take`` of list columns is ~10x slower) with a
  batched ``__getitems__`` (``Table.take``) and the same ``arrow_to_tensors`` collate: the
  fastest honest baseline (no state: it cannot resume);
* ``torch_hf``: torch ``DataLoader`` over a Hugging Face ``datasets.Dataset`` (``from_file`` of an
  Arrow stream copy) with a ``pad_sequence`` collate: what most users run (no state);
* ``torchdata``: torchdata's ``StatefulDataLoader`` over the ``torch_arrow`` dataset;
* ``grain``: Grain ``MapDataset`` (range -> shuffle -> batch of ids -> gather + collate),
  checkpointable iterator (``get_state``/``set_state``); workers via ``mp_prefetch``;
* ``hf_iterable``: ``Dataset.to_iterable_dataset(num_shards=8).shuffle(buffer_size=1000)`` in a
  ``StatefulDataLoader`` (its documented resumable path);
* ``ceiling``: raw pyarrow gather of the same record ids as ``rd`` (a one-chunk memory-mapped
  ``Table.take``) + ``arrow_to_tensors`` in a plain loop (no loader, no workers). rd gathers per
  record batch (``ArrowShards.take``), which is faster than that, so the run also times rd's own
  gather in the same bare loop: rd's ratio to it is the loader's own overhead (shuffled ids,
  cursor, bookkeeping).

MosaicML Streaming is left out: it does not import without torchvision on this machine.

Each (loader, workers) runs in its own subprocess, so peak memory (PSS of the process and its
children, from ``/proc/<pid>/smaps_rollup``; RSS where that is missing) is that loader's alone.
Per loader: samples/s (median, min, max of ``reps`` timed runs of ``batches`` batches after a
warm-up), peak memory, state size as stored (JSON bytes for rd, pickled bytes for the others),
time to first batch of a fresh loader vs after loading the state saved at step 100 and 3,000
(``--quick``: 100 and 500) (and 1,000,000 for rd, built by editing the cursor), measured
interleaved, median of 3, and whether the 20 batches after the resume are bit-exact against the
uninterrupted run (at 1e6 against the plan's records gathered directly). The worker-count study
runs extra variants (1 worker, ``torch.set_num_threads(1)`` in workers and main, the
``file_system`` sharing strategy) and times what moving one batch into shared memory costs.

Run: ``python -m benchmarks.bench_loader [--quick]``; writes ``benchmarks/results/loader.json``
and ``loader.md``. ``--columns`` runs only the column-types study instead (every Arrow type HF and
Parquet produce, in HF's layout and as Parquet, each against the ceiling of the same type:
``benchmarks/loader_columns.py``; writes ``loader_columns.json``/``.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import pickle
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import RESULTS, summarize, write_results
from benchmarks.data import ensure, records_for

BATCH = 256
SEED = 0
COMPARE_BATCHES = 20
BIG_STEP = 1_000_000
LOADERS = ["rd", "torch_arrow", "torch_hf", "torchdata", "grain", "hf_iterable", "ceiling"]
LABELS = {
    "rd": "rd.DataLoader (ArrowShards)",
    "torch_arrow": "torch DataLoader, Arrow map-style + __getitems__",
    "torch_hf": "torch DataLoader, HF datasets.Dataset",
    "torchdata": "torchdata StatefulDataLoader (Arrow map-style)",
    "grain": "Grain MapDataset",
    "hf_iterable": "HF IterableDataset (shuffle buffer) + StatefulDataLoader",
    "ceiling": "ceiling: raw pyarrow Table.take (one chunk) + arrow_to_tensors",
}


# ---------------------------------------------------------------------------------------------
# memory
class PeakMemory:
    """Samples PSS (process + children) every ``interval`` s in a thread; ``peak_mb`` after stop."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak = 0
        self.kind = "pss"
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _pss(pid: int) -> int | None:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def sample(self) -> int:
        try:
            import psutil
        except ImportError:  # pragma: no cover
            psutil = None
        pids = [os.getpid()]
        if psutil is not None:
            try:
                pids += [c.pid for c in psutil.Process().children(recursive=True)]
            except Exception:
                pass
        total = 0
        for pid in pids:
            v = self._pss(pid)
            if v is None and psutil is not None:
                self.kind = "rss"
                try:
                    v = psutil.Process(pid).memory_info().rss
                except Exception:
                    v = 0
            total += v or 0
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.sample())
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakMemory:
        self._t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self.sample())


# ---------------------------------------------------------------------------------------------
# datasets and collates shared by the baselines (module level: picklable for worker processes)
class ArrowMapDataset:
    """Map-style dataset over the memory-mapped Arrow shards; ``__getitems__`` is one ``take``."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._table = None

    @property
    def table(self):
        if self._table is None:
            from benchmarks.data import open_one_chunk

            self._table = open_one_chunk(self.n)
        return self._table

    def __getstate__(self) -> dict:
        return {"n": self.n, "_table": None}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return self.table.slice(int(i), 1)

    def __getitems__(self, ids: list[int]):
        return self.table.take(ids)


class GatherCollate:
    """Grain's map step: a batch of record ids -> gathered rows -> the default collate (numpy)."""

    def __init__(self, n: int) -> None:
        self.ds = ArrowMapDataset(n)

    def __call__(self, ids: np.ndarray) -> dict:
        from resumable_data.loader.collate import arrow_to_tensors

        return {k: v.numpy() for k, v in arrow_to_tensors(self.ds.table.take(ids)).items()}


def arrow_collate(table):
    from resumable_data.loader.collate import arrow_to_tensors

    return arrow_to_tensors(table)


def hf_pad_collate(rows: list[dict]) -> dict:
    """The padding collate most users write for a HF dataset (same output as ``arrow_to_tensors``)."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

    toks = [torch.tensor(r["tokens"], dtype=torch.int32) for r in rows]
    return {
        "tokens": pad_sequence(toks, batch_first=True, padding_value=0),
        "tokens_lengths": torch.tensor([len(t) for t in toks], dtype=torch.int64),
        "id": torch.tensor([r["id"] for r in rows], dtype=torch.int64),
    }


def _ids(x: list[int]) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def threads1_init(_worker_id: int = 0, *_: Any) -> None:
    import torch

    torch.set_num_threads(1)


class Big:
    """A map-style dataset object of any length (the state depends only on the plan)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


# ---------------------------------------------------------------------------------------------
# adapters: make(workers) -> loader; it(loader) -> iterator; state(loader, it); restore(state)
class Adapter:
    resumable = True

    def __init__(self, n: int, paths: dict[str, Path], workers: int, variant: dict) -> None:
        self.n, self.paths, self.workers, self.variant = n, paths, workers, variant

    def torch_kwargs(self) -> dict:
        kw: dict[str, Any] = {"num_workers": self.workers}
        if self.workers and self.variant.get("worker_threads1"):
            kw["worker_init_fn"] = threads1_init
        if self.workers and self.variant.get("prefetch_factor"):
            kw["prefetch_factor"] = self.variant["prefetch_factor"]
        return kw

    def state_bytes(self, state: Any) -> int:
        return len(pickle.dumps(state))

    def restore(self, state: Any):
        loader = self.make()
        loader.load_state_dict(state)
        return loader, iter(loader)

    def iterate(self, loader):
        return iter(loader)


class RdAdapter(Adapter):
    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        import resumable_data as rd

        self.rd = rd
        self.src = rd.ArrowShards(self.paths["shards"])

    def make(self):
        return self.rd.DataLoader(self.src, batch_size=BATCH, shuffle=True, seed=SEED, **self.torch_kwargs())

    def state(self, loader, it):
        return loader.state_dict()

    def state_bytes(self, state: Any) -> int:
        return len(json.dumps(state).encode())


class TorchArrowAdapter(Adapter):
    resumable = False

    def make(self):
        import torch

        self.ds = getattr(self, "ds", None) or ArrowMapDataset(self.n)
        g = torch.Generator().manual_seed(SEED)
        return torch.utils.data.DataLoader(self.ds, batch_size=BATCH, shuffle=True, generator=g,
                                           collate_fn=arrow_collate, **self.torch_kwargs())


class TorchHFAdapter(Adapter):
    resumable = False

    def make(self):
        import datasets
        import torch

        self.ds = getattr(self, "ds", None) or datasets.Dataset.from_file(str(self.paths["hf_stream"]))
        g = torch.Generator().manual_seed(SEED)
        return torch.utils.data.DataLoader(self.ds, batch_size=BATCH, shuffle=True, generator=g,
                                           collate_fn=hf_pad_collate, **self.torch_kwargs())


class TorchdataAdapter(Adapter):
    def make(self):
        import torch
        from torchdata.stateful_dataloader import StatefulDataLoader

        self.ds = getattr(self, "ds", None) or ArrowMapDataset(self.n)
        g = torch.Generator().manual_seed(SEED)
        return StatefulDataLoader(self.ds, batch_size=BATCH, shuffle=True, generator=g,
                                  collate_fn=arrow_collate, **self.torch_kwargs())

    def state(self, loader, it):
        return loader.state_dict()


class HFIterableAdapter(Adapter):
    def make(self):
        import datasets
        from torchdata.stateful_dataloader import StatefulDataLoader

        self.base = getattr(self, "base", None) or datasets.Dataset.from_file(str(self.paths["hf_stream"]))
        ids = self.base.to_iterable_dataset(num_shards=8).shuffle(seed=SEED, buffer_size=1000)
        return StatefulDataLoader(ids, batch_size=BATCH, collate_fn=hf_pad_collate, **self.torch_kwargs())

    def state(self, loader, it):
        return loader.state_dict()


class GrainAdapter(Adapter):
    class _Loader:
        def __init__(self, ds) -> None:
            self.ds = ds
            self._state = None

        def load_state_dict(self, state) -> None:
            self._state = state

    def make(self):
        import grain

        ds = (grain.MapDataset.range(self.n).shuffle(seed=SEED).batch(BATCH, batch_fn=_ids)
              .map(GatherCollate(self.n)))
        it_ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
        if self.workers:
            it_ds = it_ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=self.workers))
        return self._Loader(it_ds)

    def iterate(self, loader):
        import torch

        it = iter(loader.ds)
        if loader._state is not None:
            it.set_state(loader._state)
        self._raw = it

        class _Torch:
            def __iter__(s):
                return s

            def __next__(s):
                return {k: torch.from_numpy(v) for k, v in next(it).items()}

        return _Torch()

    def restore(self, state: Any):
        loader = self.make()
        loader.load_state_dict(state)
        return loader, self.iterate(loader)

    def state(self, loader, it):
        return self._raw.get_state()


ADAPTERS = {"rd": RdAdapter, "torch_arrow": TorchArrowAdapter, "torch_hf": TorchHFAdapter,
            "torchdata": TorchdataAdapter, "grain": GrainAdapter, "hf_iterable": HFIterableAdapter}


# ---------------------------------------------------------------------------------------------
def same(a: dict, b: dict) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


stats = summarize


def run_ceiling(n: int, paths: dict, batches: int, reps: int, warm: int) -> dict:
    import resumable_data as rd
    from benchmarks.data import open_one_chunk
    from resumable_data.loader.collate import arrow_to_tensors

    with PeakMemory() as mem:
        table = open_one_chunk(n)
        src = rd.ArrowShards(paths["shards"])
        plan = rd.DataLoader(src, batch_size=BATCH, shuffle=True, seed=SEED).plan
        ids = [plan.records(np.arange(*plan.step_span(s))) for s in range(warm + reps * batches)]
        for s in range(warm):
            arrow_to_tensors(table.take(ids[s]))
            arrow_to_tensors(src.take(ids[s]))
        rates, by_gather = [], {"one_chunk_table": [], "arrow_shards": []}
        for r in range(reps):
            span = range(warm + r * batches, warm + (r + 1) * batches)
            for name, take in (("one_chunk_table", table.take), ("arrow_shards", src.take)):
                t0 = time.perf_counter()
                for s in span:
                    arrow_to_tensors(take(ids[s]))
                by_gather[name].append(batches * BATCH / (time.perf_counter() - t0))
            rates.append(by_gather["one_chunk_table"][-1])
    return {"samples_per_s": stats(rates), "by_gather": {k: stats(v) for k, v in by_gather.items()},
            "peak_mem_mb": mem.peak / 2**20, "mem_kind": mem.kind}


def paired_ceiling(ad: RdAdapter, n: int, batches: int, reps: int) -> dict:
    """rd (0 workers) and the raw gathers, alternating run by run in this process: the ratio per
    pair is robust to the machine's load drifting between subprocesses. ``ratio``: against the
    ceiling (one-chunk ``Table.take`` + collate); ``ratio_own_gather``: against rd's own gather
    (``ArrowShards.take`` + collate) in a bare loop, i.e. the loader's own overhead."""
    from benchmarks.data import open_one_chunk
    from resumable_data.loader.collate import arrow_to_tensors

    table = open_one_chunk(n)
    loader = ad.make()
    plan = loader.plan
    it = iter(loader)
    for _ in range(10):
        next(it)
    ratios, own_ratios, ours, ceil = [], [], [], []
    step = 10
    for r in range(reps):
        # rd reads steps [step, step + B); the gathers read the next B steps (pages not yet touched,
        # like rd's), then rd skips over them untimed: every timed pass pays its own first touches
        t0 = time.perf_counter()
        for _ in range(batches):
            next(it)
        t_ours = time.perf_counter() - t0
        step += batches
        ids = [plan.records(np.arange(*plan.step_span(s))) for s in range(step, step + batches)]
        times = {}
        for name, take in (("own", ad.src.take), ("table", table.take)):  # different files: both cold
            t0 = time.perf_counter()
            for i in ids:
                arrow_to_tensors(take(i))
            times[name] = time.perf_counter() - t0
        for _ in range(batches):
            next(it)
        step += batches
        ours.append(batches * BATCH / t_ours)
        ceil.append(batches * BATCH / times["table"])
        ratios.append(times["table"] / t_ours)
        own_ratios.append(times["own"] / t_ours)
    # where the time goes (one pass each, same ids): rd's gather vs pyarrow's one-chunk take
    # (second pass over the same ids: pages already mapped, so first-touch faults are not counted)
    ids = [plan.records(np.arange(*plan.step_span(s))) for s in range(batches)]

    def warm_pass(fn) -> float:
        for i in ids:
            fn(i)
        t0 = time.perf_counter()
        for i in ids:
            fn(i)
        return time.perf_counter() - t0

    t_src = warm_pass(ad.src.take)
    t_tab = warm_pass(table.take)
    t0 = time.perf_counter()
    for s in range(batches):
        plan.records(np.arange(*plan.step_span(s)))
    t_plan = time.perf_counter() - t0
    st = loader.state_dict()
    t0 = time.perf_counter()
    for _ in range(20):
        loader.load_state_dict(st)
    t_load = (time.perf_counter() - t0) / 20
    return {"ratio": stats(ratios), "ratio_own_gather": stats(own_ratios), "rd_samples_per_s": stats(ours),
            "ceiling_samples_per_s": stats(ceil),
            "take_us": {"arrow_shards": t_src / batches * 1e6, "one_chunk_table": t_tab / batches * 1e6},
            "plan_records_us": t_plan / batches * 1e6, "load_state_dict_ms": t_load * 1e3}


def paired_torchdata(ad: RdAdapter, n: int, paths: dict, batches: int, reps: int) -> dict:
    """rd and torchdata's StatefulDataLoader (0 workers), alternating run by run in this process
    (each over its own shuffled stream of the same data): a ratio robust to load drift."""
    td = TorchdataAdapter(n, paths, 0, {})
    its = {"rd": iter(ad.make()), "torchdata": iter(td.make())}
    for it in its.values():
        for _ in range(10):
            next(it)
    ratios, rates = [], {k: [] for k in its}
    for r in range(reps):
        t = {}
        for name in (("rd", "torchdata") if r % 2 == 0 else ("torchdata", "rd")):
            t0 = time.perf_counter()
            for _ in range(batches):
                next(its[name])
            t[name] = time.perf_counter() - t0
            rates[name].append(batches * BATCH / t[name])
        ratios.append(t["torchdata"] / t["rd"])
    return {"ratio": stats(ratios), **{f"{k}_samples_per_s": stats(v) for k, v in rates.items()}}


def ttfb(fn) -> float:
    t0 = time.perf_counter()
    loader, it = fn()
    next(it)
    dt = time.perf_counter() - t0
    del it, loader
    return dt


def state_at(loader, state: dict, step: int) -> dict:
    """``state`` with its cursor moved to ``step`` (what ``load_state_dict`` validates: the
    cursor, the epoch that holds it and the sample counter that follows from it)."""
    st = json.loads(json.dumps(state))
    st["cursor"] = {"committed": step, "delivered": step, "fetched": step}
    if "epoch_base" in st:
        stream = getattr(loader, "_stream", None)
        if stream is not None and hasattr(stream, "locate"):
            st["epoch_base"] = list(stream.locate(step, {0: 0}))
        else:
            spe = loader.plan.steps_per_epoch
            st["epoch_base"] = [step // spe, step // spe * spe]
    if "samples" in st.get("counters", {}):
        p = loader.plan
        short = p.steps_per_epoch * p.global_batch - p.epoch_len
        st["counters"]["samples"] = step * p.global_batch - (step // p.steps_per_epoch) * short
    return st


def run_one(cfg: dict) -> dict:
    """One (loader, workers, variant) in this process."""
    import torch

    n, name, workers, variant = cfg["n"], cfg["loader"], cfg["workers"], cfg.get("variant", {})
    paths = {k: Path(v) for k, v in cfg["paths"].items()}
    batches, reps, warm = cfg["batches"], cfg["reps"], cfg["warmup"]
    if variant.get("sharing") == "file_system":
        torch.multiprocessing.set_sharing_strategy("file_system")
    if variant.get("main_threads1"):
        torch.set_num_threads(1)
    out: dict[str, Any] = {"loader": name, "workers": workers, "variant": variant,
                           "torch_threads": torch.get_num_threads(),
                           "affinity_cpus": len(os.sched_getaffinity(0))}
    if name == "ceiling":
        return {**out, **run_ceiling(n, paths, batches, reps, warm)}
    ad = ADAPTERS[name](n, paths, workers, variant)

    # throughput + peak memory
    with PeakMemory() as mem:
        loader = ad.make()
        it = ad.iterate(loader)
        for _ in range(warm):
            next(it)
        rates = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(batches):
                next(it)
            rates.append(batches * BATCH / (time.perf_counter() - t0))
    out.update(samples_per_s=stats(rates), peak_mem_mb=mem.peak / 2**20, mem_kind=mem.kind)
    del it, loader
    if name == "rd" and workers == 0 and not variant:
        out["paired_ceiling"] = paired_ceiling(ad, n, batches, reps)
        out["paired_torchdata"] = paired_torchdata(ad, n, paths, batches, max(reps, 5))
    if not cfg.get("resume") or not ad.resumable:
        return out

    # one uninterrupted pass: states at the resume steps + the 20 batches after each
    steps = cfg["steps"]
    loader = ad.make()
    it = ad.iterate(loader)
    states, refs, done = {}, {}, 0
    for s in steps:
        while done < s:
            next(it)
            done += 1
        states[s] = ad.state(loader, it)
        refs[s] = [next(it) for _ in range(COMPARE_BATCHES)]
        done += COMPARE_BATCHES
    del it, loader
    if name == "rd":  # 1e6 by editing the cursor; reference = the plan's records gathered directly
        from resumable_data.loader.collate import arrow_to_tensors

        st = state_at(ad.make(), states[steps[0]], BIG_STEP)
        states[BIG_STEP] = st
        plan = ad.make().plan
        refs[BIG_STEP] = [arrow_to_tensors(ad.src.take(plan.records(np.arange(*plan.step_span(BIG_STEP + k)))))
                          for k in range(COMPARE_BATCHES)]
        # state size for 100M records: any map-style object of that length + a dataset version
        big = ad.rd.DataLoader(Big(10**8), batch_size=BATCH, shuffle=True, seed=SEED,
                               dataset_version="0123456789abcdef0123456789abcdef")
        big.load_state_dict(state_at(big, big.state_dict(), BIG_STEP))
        out["state_bytes_100M_records"] = ad.state_bytes(big.state_dict())
        out["state_bytes_1M_records_step_1e6"] = ad.state_bytes(st)
    out["state_bytes"] = {str(s): ad.state_bytes(states[s]) for s in states}
    exact = {}
    for s in states:
        loader, it = ad.restore(states[s])
        got = [next(it) for _ in range(COMPARE_BATCHES)]
        exact[str(s)] = all(same(a, b) for a, b in zip(got, refs[s]))
        del it, loader
    out["bit_exact"] = exact
    del refs
    fresh, resume = [], {str(s): [] for s in states}
    for _ in range(cfg["ttfb_reps"] * (3 if workers == 0 else 1)):  # interleaved (sub-ms at 0 workers: more runs): fresh, then each step, per repetition
        fresh.append(ttfb(lambda: (lambda ld: (ld, ad.iterate(ld)))(ad.make())))
        for s in states:
            resume[str(s)].append(ttfb(lambda: ad.restore(states[s])))
    out["ttfb_fresh_s"] = stats(fresh)
    out["ttfb_resume_s"] = {s: stats(v) for s, v in resume.items()}
    out["resume_over_fresh"] = {s: statistics.median(v) / statistics.median(fresh) for s, v in resume.items()}
    return out


def share_cost(n: int, paths: dict, batches: int = 100) -> dict:
    """What moving a batch costs: the worker's copy of its tensors into shared memory, vs the
    main-process time of producing that batch at all."""
    import torch

    import resumable_data as rd

    dl = rd.DataLoader(rd.ArrowShards(paths["shards"]), batch_size=BATCH, shuffle=True, seed=SEED)
    it = iter(dl)
    bs = [next(it) for _ in range(batches)]
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    produce = (time.perf_counter() - t0) / batches
    out = {}
    for strategy in ("file_descriptor", "file_system"):
        torch.multiprocessing.set_sharing_strategy(strategy)
        fresh = [{k: v.clone() for k, v in b.items()} for b in bs]
        t0 = time.perf_counter()
        for b in fresh:
            for v in b.values():
                v.share_memory_()
        out[f"share_memory_ms_{strategy}"] = (time.perf_counter() - t0) / batches * 1e3
    out["produce_batch_ms_w0"] = produce * 1e3
    out["batch_bytes"] = int(sum(v.numel() * v.element_size() for v in bs[0].values()))
    torch.multiprocessing.set_sharing_strategy("file_descriptor")
    return out


# ---------------------------------------------------------------------------------------------
def configs(quick: bool, paths: dict, n: int, only: list[str] | None) -> list[dict]:
    base = {"n": n, "paths": {k: str(v) for k, v in paths.items()},
            "batches": 40 if quick else 200, "reps": 3 if quick else 5, "warmup": 10 if quick else 20,
            "steps": [100, 500] if quick else [100, 3000], "ttfb_reps": 3 if quick else 5}
    out = []
    for name in LOADERS:
        if only and name not in only:
            continue
        for w in ([0] if name == "ceiling" else [0, 2]):
            if quick and w and name not in ("rd", "torch_arrow"):
                continue  # --quick: 2 workers only for rd and the plain-torch baseline
            resume = not (quick and w and name != "rd")
            out.append({**base, "loader": name, "workers": w, "resume": resume, "key": f"{name}/w{w}"})
    if not quick and (not only or "workers" in only):
        study = [("rd", 1, {}), ("rd", 2, {"worker_threads1": True}),
                 ("rd", 2, {"worker_threads1": True, "main_threads1": True}),
                 ("rd", 2, {"sharing": "file_system"}), ("rd", 2, {"prefetch_factor": 8}),
                 ("torch_arrow", 1, {}), ("torch_arrow", 2, {"worker_threads1": True, "main_threads1": True})]
        for name, w, v in study:
            tag = "+".join(f"{k}={val}" if val is not True else k for k, val in v.items()) or "default"
            out.append({**base, "loader": name, "workers": w, "variant": v, "resume": False,
                        "key": f"{name}/w{w}/{tag}"})
    return out


def run_config(cfg: dict, timeout: float) -> dict:
    t0 = time.perf_counter()
    tmp = RESULTS / f".loader-{os.getpid()}.json"
    RESULTS.mkdir(parents=True, exist_ok=True)
    try:
        p = subprocess.run([sys.executable, "-m", "benchmarks.bench_loader", "--one", json.dumps(cfg), "--out", str(tmp)],
                           capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0 or not tmp.is_file():
            err = (p.stderr or p.stdout).strip().splitlines()[-5:]
            return {"loader": cfg["loader"], "workers": cfg["workers"], "error": " | ".join(err)}
        res = json.loads(tmp.read_text())
    except subprocess.TimeoutExpired:
        return {"loader": cfg["loader"], "workers": cfg["workers"], "error": f"timed out after {timeout:.0f}s"}
    finally:
        tmp.unlink(missing_ok=True)
    res["wall_s"] = time.perf_counter() - t0
    return res


def _f(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


def failure_reason(error: str) -> str:
    """``Type: message (in package/module.py, during <phase>)`` from a stored traceback (whose lines
    may have been joined with `` | ``): the exception line and the innermost frame, not the carets."""
    lines = [ln.strip() for ln in error.replace(" | ", "\n").splitlines() if ln.strip()]
    exc = next((ln for ln in reversed(lines) if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b", ln)),
               lines[-1] if lines else "unknown error")
    frames = [m.group(1) for ln in lines if (m := re.match(r'^File "(?:.*site-packages/)?([^"]+)", line', ln))]
    where = f" in `{frames[-1]}`" if frames else ""
    phase = next((f", during `{ph}`" for ph in ("load_state_dict", "state_dict") if any(ph in ln for ln in lines)), "")
    return f"{exc}{where}{phase}".replace("|", "/")[:160]


def markdown(payload: dict) -> str:
    R = payload["results"]
    quick = payload["quick"]
    steps = payload["steps"]
    lines = [f"# loader benchmark{' (--quick)' if quick else ''}", "",
             f"{payload['records']:,} records (`tokens: list<int32>` 16..256 tokens, `id: int64`), 8 Arrow IPC shards; "
             f"batch {BATCH}, shuffled; samples/s = median (min..max) of {payload['reps']} runs of {payload['batches']} batches "
             f"after a warm-up; resume figures = median of 3, interleaved with a fresh start; machine: {payload['cpus']} CPUs "
             "(shared: read ratios, not absolutes). Peak memory = PSS of the loader's process and its workers.", "",
             "| loader | workers | samples/s | vs ceiling | peak MB | state bytes | fresh TTFB ms | "
             + " | ".join(f"resume/fresh @{s:,}" for s in steps + [BIG_STEP]) + " | bit-exact |",
             "|---|---|---|---|---|---|---|" + "---|" * (len(steps) + 1) + "---|"]
    ceil = R.get("ceiling/w0", {}).get("samples_per_s", {}).get("median")
    for key, r in R.items():
        if "/" in key and key.count("/") > 1:
            continue
        if "error" in r:
            reason = failure_reason(str(r["error"]))
            lines.append(f"| {LABELS.get(r['loader'], r['loader'])} | {r['workers']} | failed: {reason} |" + " |" * (6 + len(steps)))
            continue
        sp = r["samples_per_s"]
        row = [LABELS[r["loader"]], str(r["workers"]),
               f"{_f(sp['median'])} ({_f(sp['min'])}..{_f(sp['max'])})",
               f"{sp['median'] / ceil:.2f}x" if ceil else "", _f(r["peak_mem_mb"])]
        if "ttfb_fresh_s" in r:
            sb = r["state_bytes"]
            row += [f"{sb[str(steps[-1])]:,}", _f(r["ttfb_fresh_s"]["median"] * 1e3, 1)]
            row += [f"{r['resume_over_fresh'][str(s)]:.2f}" if str(s) in r["resume_over_fresh"] else "n/a"
                    for s in steps + [BIG_STEP]]
            row += [", ".join(f"{s}: {'yes' if v else '**no**'}" for s, v in r["bit_exact"].items())]
        else:
            why = "no state (cannot resume)" if r["loader"] != "ceiling" else "(no loader)"
            row += [why, ""] + [""] * (len(steps) + 1) + [""]
        lines.append("| " + " | ".join(row) + " |")
    g = payload.get("goals", {})
    if g:
        lines += ["", "## goals (ratios measured side by side in this run)", "",
                  "| goal | measured | met |", "|---|---|---|"]
        for name, v in g.items():
            lines.append(f"| {name} | {v['value']} | {'yes' if v['met'] else '**no**'} |")
    ws = [r for k, r in R.items() if k.count("/") > 1 and "error" not in r]
    if ws or payload.get("share_cost"):
        lines += ["", "## workers on this machine", "",
                  "| loader | workers | variant | samples/s | vs same loader, 0 workers |", "|---|---|---|---|---|"]
        for key, r in R.items():
            if r.get("loader") in ("rd", "torch_arrow") and "error" not in r and (key.count("/") > 1 or r["workers"] == 2):
                w0 = R.get(f"{r['loader']}/w0", {}).get("samples_per_s", {}).get("median")
                tag = key.split("/", 2)[2] if key.count("/") > 1 else "default"
                sp = r["samples_per_s"]
                lines.append(f"| {r['loader']} | {r['workers']} | {tag} | {_f(sp['median'])} ({_f(sp['min'])}..{_f(sp['max'])}) | "
                             f"{sp['median'] / w0:.2f}x |" if w0 else "|")
        sc = payload.get("share_cost")
        if sc:
            lines += ["", f"Moving one batch ({sc['batch_bytes']:,} bytes) into shared memory costs the worker "
                      f"{sc['share_memory_ms_file_descriptor']:.3f} ms (file_descriptor) / {sc['share_memory_ms_file_system']:.3f} ms "
                      f"(file_system), against {sc['produce_batch_ms_w0']:.3f} ms to produce the batch in-process."]
    if payload.get("state_100M"):
        lines += ["", f"rd state size: {payload['state_1M']:,} bytes at 1M records (step 1e6), "
                  f"{payload['state_100M']:,} bytes at 100M records (JSON)."]
    pc = R.get("rd/w0", {}).get("paired_ceiling")
    if pc:
        lines += ["", f"rd (0 workers) vs the ceiling, alternating in one process (each pass over records whose pages it touches first): "
                  f"{pc['ratio']['median']:.2f}x ({pc['ratio']['min']:.2f}..{pc['ratio']['max']:.2f}). Per batch: "
                  f"ArrowShards.take {pc['take_us']['arrow_shards']:.0f} us vs one-chunk Table.take "
                  f"{pc['take_us']['one_chunk_table']:.0f} us; plan.records {pc['plan_records_us']:.0f} us; "
                  f"load_state_dict {pc['load_state_dict_ms']:.2f} ms."]
    bg = R.get("ceiling/w0", {}).get("by_gather")
    if bg:
        lines += ["", "Raw gathers of the same ids + `arrow_to_tensors` in a bare loop (no loader): one-chunk "
                  f"`Table.take` (the ceiling) {_f(bg['one_chunk_table']['median'])} samples/s, rd's own "
                  f"`ArrowShards.take` (per record batch) {_f(bg['arrow_shards']['median'])} samples/s."]
    if pc and "ratio_own_gather" in pc:
        v = pc["ratio_own_gather"]
        lines += ["", "rd (0 workers) vs its own gather in a bare loop, alternating in one process (the loader's "
                  f"overhead: shuffled ids, cursor, bookkeeping): {v['median']:.2f}x ({v['min']:.2f}..{v['max']:.2f})."]
    pt = R.get("rd/w0", {}).get("paired_torchdata")
    if pt:
        v = pt["ratio"]
        lines += ["", "rd vs torchdata's StatefulDataLoader (0 workers), alternating in one process: "
                  f"{v['median']:.2f}x ({v['min']:.2f}..{v['max']:.2f})."]
    lines += ["", "Left out: MosaicML Streaming (does not import without torchvision here)."]
    return "\n".join(lines)


def goals(R: dict, steps: list[int]) -> dict:
    g: dict[str, dict] = {}

    def med(k):
        return R.get(k, {}).get("samples_per_s", {}).get("median")

    ceil = med("ceiling/w0")
    for w in (0, 2):
        ours = med(f"rd/w{w}")
        if ours is None:
            continue
        pc = R.get("rd/w0", {}).get("paired_ceiling")
        if pc and w == 0:
            v = pc["ratio"]
            g["rd vs ceiling >= 0.9 (0 workers; paired runs in one process)"] = {
                "value": f"{v['median']:.2f}x ({v['min']:.2f}..{v['max']:.2f})", "met": v["median"] >= 0.9}
        if ceil and w == 0:
            g["rd vs ceiling >= 0.9 (0 workers; separate processes)"] = {"value": f"{ours / ceil:.2f}x", "met": ours / ceil >= 0.9}
        pt = R.get("rd/w0", {}).get("paired_torchdata")
        if pt and w == 0:
            v = pt["ratio"]
            g["rd vs torchdata >= 1.5x (0 workers; paired runs in one process)"] = {
                "value": f"{v['median']:.2f}x ({v['min']:.2f}..{v['max']:.2f})", "met": v["median"] >= 1.5}
        for other, goal in (("torchdata", 1.5), ("torch_hf", 3.0)):
            o = med(f"{other}/w{w}")
            if o:
                g[f"rd vs {other} >= {goal}x ({w} workers; separate processes)"] = {"value": f"{ours / o:.2f}x", "met": ours / o >= goal}
        r = R.get(f"rd/w{w}", {})
        for s, v in r.get("resume_over_fresh", {}).items():
            g[f"rd resume/fresh <= 1.2 at step {int(s):,} ({w} workers)"] = {"value": f"{v:.2f}", "met": v <= 1.2}
        for s, v in r.get("bit_exact", {}).items():
            g[f"rd bit-exact after resume at step {int(s):,} ({w} workers)"] = {"value": str(v), "met": bool(v)}
    r = R.get("rd/w0", {})
    if "state_bytes_100M_records" in r:
        for k, label in (("state_bytes_1M_records_step_1e6", "1M"), ("state_bytes_100M_records", "100M")):
            g[f"rd state <= 1 KB ({label} records)"] = {"value": f"{r[k]} B", "met": r[k] <= 1024}
    return g


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200k records, fewer batches, no worker study")
    ap.add_argument("--only", nargs="*", help="loaders to run (plus 'workers' for the study)")
    ap.add_argument("--columns", action="store_true",
                    help="only the column-types study (benchmarks/loader_columns.py): loader_columns.md")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--markdown", action="store_true",
                    help="only rebuild loader.md from the last loader.json (no measurement)")
    args = ap.parse_args(argv)
    if args.markdown:
        payload = json.loads((RESULTS / "loader.json").read_text())
        md = markdown(payload)
        (RESULTS / "loader.md").write_text(md if md.endswith("\n") else md + "\n")
        print(md)
        return payload
    if args.columns:
        from benchmarks import loader_columns

        n = records_for(args.quick)
        rows = loader_columns.run(n, batches=10 if args.quick else 40, rounds=5, parquet_batches=10)
        md = loader_columns.markdown(rows, n)
        write_results("loader_columns", {"quick": args.quick, "records": n, "rows": rows}, md)
        print(md)
        return {"rows": rows}
    if args.one:
        res = run_one(json.loads(args.one))
        Path(args.out).write_text(json.dumps(res))
        return res
    n = records_for(args.quick)
    paths = ensure(n)
    cfgs = configs(args.quick, paths, n, args.only)
    results = {}
    for cfg in cfgs:
        r = run_config(cfg, timeout=120 if args.quick else 600)
        results[cfg["key"]] = r
        msg = r.get("error") or f"{r['samples_per_s']['median']:,.0f} samples/s" + (
            f", resume/fresh {r['resume_over_fresh']}, exact {r['bit_exact']}" if "resume_over_fresh" in r else "")
        print(f"[loader] {cfg['key']}: {msg} ({r.get('wall_s', 0):.1f}s)", flush=True)
    payload = {"quick": args.quick, "records": n, "batch_size": BATCH, "batches": cfgs[0]["batches"], "reps": cfgs[0]["reps"],
               "steps": cfgs[0]["steps"], "cpus": os.cpu_count(), "results": results}
    if not args.quick:
        try:
            payload["share_cost"] = share_cost(n, paths)
        except Exception as e:  # pragma: no cover
            payload["share_cost_error"] = repr(e)
    r0 = results.get("rd/w0", {})
    if "state_bytes_100M_records" in r0:
        payload["state_1M"] = r0["state_bytes_1M_records_step_1e6"]
        payload["state_100M"] = r0["state_bytes_100M_records"]
    payload["goals"] = goals(results, payload["steps"])
    md = markdown(payload)
    write_results("loader", payload, md)
    print(md)
    return payload


if __name__ == "__main__":
    main()
