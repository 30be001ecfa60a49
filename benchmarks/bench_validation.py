"""Cost of structural validation (``RecordBatch.validate(full=True)``, sources/validate.py).

Dataset: 200k records in 1,024-row record batches written as an Arrow IPC stream, as Hugging Face
``datasets`` writes them: ``text`` (string, 40-400 characters), ``input_ids`` (list<int32>,
16-512 tokens) and ``id`` (int64). One round reads every record once through a fresh
``rd.ArrowShards`` with ``take`` in random batches of 256 ids: "validated" is the default (each
record batch validated lazily on first use), "unvalidated" marks every batch as validated up
front (what rd did before issue 13). The two kinds of round alternate (interleaved), so machine
load hits both alike. Also timed: validating every batch at open (the eager alternative).

``python -m benchmarks.bench_validation [--quick]`` writes ``benchmarks/results/validation.json``
and ``.md``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import resumable_data as rd
from benchmarks._common import QUICK, summarize, write_results
from resumable_data.sources.validate import validate_batch

ROWS = 200_000
BATCH_ROWS = 1024
TAKE = 256
ROUNDS = 3 if QUICK else 7


def write(d: Path) -> Path:
    rng = np.random.default_rng(0)
    d.mkdir(parents=True, exist_ok=True)
    lens = rng.integers(16, 513, ROWS)
    off = np.zeros(ROWS + 1, dtype=np.int32)
    np.cumsum(lens, out=off[1:])
    ids = pa.ListArray.from_arrays(pa.array(off), pa.array(rng.integers(0, 50_000, off[-1]).astype(np.int32)))
    words = np.array(["lorem", "ipsum", "dolor", "sit", "amet", "ünïcode", "data", "résumé"])
    text = pa.array([" ".join(words[rng.integers(0, len(words), int(n))]) for n in rng.integers(6, 60, ROWS)])
    t = pa.table({"text": text, "input_ids": ids, "id": pa.array(np.arange(ROWS, dtype=np.int64))})
    path = d / "data-00000-of-00001.arrow"
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
        for b in t.to_batches(max_chunksize=BATCH_ROWS):
            w.write_batch(b)
    return d


def one_round(d: Path, validated: bool, order: np.ndarray) -> float:
    src = rd.ArrowShards(d, unpinned="allow")
    if not validated:
        src._validation.valid[:] = True  # the pre-issue-13 behaviour: no structural validation
        src._validation.all_valid = True
    t0 = time.perf_counter()
    for i in range(0, len(order), TAKE):
        src.take(order[i:i + TAKE])
    return len(order) / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = write(Path(tmp) / "ds")
        size = sum(p.stat().st_size for p in d.iterdir())
        order = np.random.default_rng(1).permutation(ROWS)
        one_round(d, True, order[:4096])  # warm the page cache and imports
        rates: dict[str, list[float]] = {"validated": [], "unvalidated": []}
        for _ in range(ROUNDS):
            for kind in ("validated", "unvalidated"):
                rates[kind].append(one_round(d, kind == "validated", order))
        src = rd.ArrowShards(d, unpinned="allow")
        eager = []
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            for k, u in enumerate(src._units):
                validate_batch(u.batch, "bench", k)
            eager.append(time.perf_counter() - t0)
    v, u = statistics.median(rates["validated"]), statistics.median(rates["unvalidated"])
    payload = {"rows": ROWS, "batch_rows": BATCH_ROWS, "take": TAKE, "bytes": size, "rounds": ROUNDS,
               "samples_per_s": {k: summarize(x) for k, x in rates.items()},
               "ratio_validated_over_unvalidated": v / u,
               "validate_all_at_open_s": summarize(eager)}
    md = (f"# structural validation cost\n\n{ROWS:,} records, {BATCH_ROWS}-row record batches, "
          f"{size / 2**20:.0f} MiB IPC stream (string, list<int32>, int64); every record read once per "
          f"round by `take` in random batches of {TAKE}; {ROUNDS} interleaved rounds each (median).\n\n"
          "| reads | samples/s (median) | min | max |\n|---|---:|---:|---:|\n"
          + "".join(f"| {k} | {summarize(x)['median']:,.0f} | {min(x):,.0f} | {max(x):,.0f} |\n"
                    for k, x in rates.items())
          + f"\nvalidated / unvalidated: **{v / u:.3f}** (lazy: each record batch once, on first use).\n"
          f"Validating every batch at open instead: {statistics.median(eager) * 1e3:.0f} ms "
          f"({size / 2**20 / statistics.median(eager):,.0f} MiB/s).\n")
    print(md)
    write_results("validation", payload, md)


if __name__ == "__main__":
    main()
