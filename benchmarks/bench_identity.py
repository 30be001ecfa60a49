"""What the file-identity checks around every read cost (issue 30 item 2), side by side in one run.

``rd.ArrowShards`` checks, around each read, the identity (a ``stat`` of the name) of every
memory-mapped shard the read touches (:mod:`resumable_data.sources.identity`). This times the
loader's two read paths on the benchmark data (``benchmarks/data.py``: 8 IPC shards,
``tokens: list<int32>`` 16..256, ``id: int64``), batch 256 of shuffled ids, with the checks (as
shipped) and with ``ArrowShards._check_files`` replaced by a no-op on a second source over the
same files, in interleaved rounds (ABAB...), and reports the median time per batch of each and their ratio:

* ``take_numpy`` (the default collate's path: padded ``[B, L]`` arrays straight from the maps);
* ``take`` (an Arrow table of the records);

and the check of every shard at once, as a read runs it: the compiled ``statx`` loop
(:mod:`resumable_data.sources.watch`) against the same check in Python, in the same rounds.

Run: ``python -m benchmarks.bench_identity [--quick]``; writes ``benchmarks/results/identity.json``
and ``identity.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

import resumable_data as rd
from benchmarks import data as bdata
from resumable_data.sources.identity import first_changed_at

RESULTS = Path(__file__).resolve().parent / "results"
BATCH = 256


def _time(fn, batches: list[np.ndarray]) -> float:
    t0 = time.perf_counter()
    for ids in batches:
        fn(ids)
    return (time.perf_counter() - t0) / len(batches)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--batches", type=int, default=200)
    args = ap.parse_args(argv)
    root = bdata.shards_dir(bdata.records_for(args.quick))
    checked = rd.ArrowShards(root)
    unchecked = rd.ArrowShards(root)
    unchecked._check_files = lambda shards, when: None  # the same object without the identity checks
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, len(checked), BATCH) for _ in range(args.batches)]
    out = {}
    for name in ("take_numpy", "take"):
        a, b = getattr(checked, name), getattr(unchecked, name)
        a(batches[0]), b(batches[0])  # warm the plans and validation
        ta, tb = [], []
        for _ in range(args.rounds):
            ta.append(_time(a, batches))
            tb.append(_time(b, batches))
        out[name] = {"checked_us": statistics.median(ta) * 1e6, "unchecked_us": statistics.median(tb) * 1e6,
                     "ratio": statistics.median(ta) / statistics.median(tb)}
    shard = checked._shards[0]
    every = np.arange(checked.num_shards, dtype=np.int64)
    per, loop, python = [], [], []
    for _ in range(args.rounds):  # one shard in Python; every shard in the compiled loop, then in Python
        t0 = time.perf_counter()
        for _ in range(2000):
            shard.check("bench")
        per.append((time.perf_counter() - t0) / 2000)
        t0 = time.perf_counter()
        for _ in range(2000):
            checked._watch.first_changed(every)
        loop.append((time.perf_counter() - t0) / 2000)
        t0 = time.perf_counter()
        for _ in range(2000):
            first_changed_at(checked._watch.entries, every.tolist())
        python.append((time.perf_counter() - t0) / 2000)
    out["one_check_us"] = statistics.median(per) * 1e6
    out["compiled"] = checked._watch.compiled
    out["all_shards_compiled_us"] = statistics.median(loop) * 1e6
    out["all_shards_python_us"] = statistics.median(python) * 1e6
    touched = [len(np.unique(checked._unit_shard[checked._locate(ids)[0]])) for ids in batches]
    out["shards_touched_per_batch"] = statistics.mean(touched)
    out["load_average"] = os.getloadavg()[0]
    out["records"] = len(checked)
    out["shards"] = checked.num_shards
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "identity.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = [f"identity checks around reads: {out['records']:,} records in {out['shards']} IPC shards, batch {BATCH} "
             f"of shuffled ids, median of {args.rounds} interleaved rounds of {args.batches} batches", "",
             "| read | with checks (us/batch) | without (us/batch) | ratio |", "|---|---|---|---|"]
    for name in ("take_numpy", "take"):
        r = out[name]
        lines.append(f"| `{name}` | {r['checked_us']:.0f} | {r['unchecked_us']:.0f} | {r['ratio']:.3f} |")
    lines += ["", f"One check of a memory-mapped shard in Python (`os.stat` of its name and a compare): "
              f"{out['one_check_us']:.1f} us; all {out['shards']} shards in one call, as every read checks them "
              f"(`ShardWatch.first_changed`, compiled `statx` loop: {out['compiled']}): "
              f"{out['all_shards_compiled_us']:.1f} us, against {out['all_shards_python_us']:.1f} us for the same "
              f"check in Python (`identity.first_changed_at`); "
              f"shards touched per batch: {out['shards_touched_per_batch']:.1f} (two checks each); "
              f"1-minute load average during the run: {out['load_average']:.1f} on {os.cpu_count()} cores."]
    (RESULTS / "identity.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
