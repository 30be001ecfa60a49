"""Sources benchmark: ``ArrowShards.take`` vs the one-chunk ``Table.take`` ceiling, and pinning
throughput vs plainly reading the files.

Run: ``.venv/bin/python -m benchmarks.bench_sources [--quick]``. Builds its data under
``benchmarks/data/`` (gitignored): 1M records, ``tokens: list<int32>`` with lengths uniform in
16..256, ``id: int64``, 8 Arrow IPC shards of several record batches each. Writes
``benchmarks/results/sources.json`` and ``sources.md``. Every figure is the median of >= 5
repetitions with min/max; ratios are speed ratios (higher is better for ``ArrowShards``/``pin``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import resumable_data as rd
from benchmarks._common import timed, write_results
from benchmarks.data import FULL_RECORDS, NUM_SHARDS, build_table, records_for, shards_dir
from resumable_data.sources.files import HASH_CHUNK_BYTES, MANIFEST_NAME

NUM_RECORDS = FULL_RECORDS
BATCH = 256


def dataset_dir(table: pa.Table) -> Path:
    return shards_dir(table.num_rows, table)


def read_plainly(paths: list[Path]) -> None:
    buf = bytearray(HASH_CHUNK_BYTES)
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def stats_ms(t: dict, per: int) -> dict:
    return {k: (v / per * 1e3 if k != "runs" else v) for k, v in t.items()}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer batches and repetitions (< 1 min)")
    args = ap.parse_args(argv)
    repeats = 5 if args.quick else 9
    batches = 100 if args.quick else 400

    global NUM_RECORDS
    NUM_RECORDS = records_for(args.quick)  # --quick: 200k records (the loader benchmark's quick data)
    table = build_table(NUM_RECORDS)
    d = dataset_dir(table)
    ceiling = table.combine_chunks()
    assert all(c.num_chunks == 1 for c in ceiling.columns)
    del table

    # (b) pinning first (cold-ish data would favour nobody: warm the page cache once)
    paths = sorted(d.glob("*.arrow"))
    total_bytes = sum(p.stat().st_size for p in paths)
    read_plainly(paths)
    t_read = timed(lambda: read_plainly(paths), repeats=repeats)
    t_pin = timed(lambda: rd.pin(d), repeats=repeats)
    t_pin_size = timed(lambda: rd.pin(d, hash="size"), repeats=repeats)
    rd.pin(d)
    assert (d / MANIFEST_NAME).is_file()

    # (a) take: same random id batches for both sides
    src = rd.ArrowShards(d)
    rng = np.random.default_rng(1)
    id_batches = [rng.integers(0, NUM_RECORDS, BATCH) for _ in range(batches)]
    assert src.take(id_batches[0]).equals(ceiling.take(id_batches[0]))
    t_src = timed(lambda: [src.take(ids) for ids in id_batches], repeats=repeats)
    t_ceil = timed(lambda: [ceiling.take(ids) for ids in id_batches], repeats=repeats)

    take_ratio = t_ceil["median"] / t_src["median"]
    mbps = lambda t: total_bytes / t["median"] / 1e6  # noqa: E731
    pin_ratio = mbps(t_pin) / mbps(t_read)
    num_units = len(src._units)
    payload = {
        "quick": args.quick,
        "data": {"records": NUM_RECORDS, "shards": NUM_SHARDS, "record_batches": num_units,
                 "bytes": total_bytes, "tokens_per_record": "uniform 16..256", "batch_size": BATCH,
                 "batches_per_repetition": batches},
        "take_ms_per_batch": {"arrow_shards": stats_ms(t_src, batches),
                              "table_take_one_chunk": stats_ms(t_ceil, batches)},
        "take_speed_ratio": take_ratio,
        "take_goal": 0.9,
        "pin_seconds": {"content": t_pin, "size": t_pin_size, "plain_read": t_read},
        "pin_mb_per_s": {"content": mbps(t_pin), "plain_read": mbps(t_read)},
        "pin_speed_ratio": pin_ratio,
    }
    fmt = lambda t: f"{t['median']:.3f} ({t['min']:.3f}..{t['max']:.3f})"  # noqa: E731
    md = f"""# sources benchmark{' (--quick)' if args.quick else ''}

Data: {NUM_RECORDS:,} records (`tokens: list<int32>`, 16..256 tokens; `id: int64`), {NUM_SHARDS} Arrow IPC
shards, {num_units} record batches, {total_bytes / 1e6:.0f} MB. Median (min..max) of {repeats} repetitions.

| measure | ArrowShards / rd.pin | reference | speed ratio (goal) |
|---|---|---|---|
| take, {BATCH} random ids, ms per batch | {fmt(stats_ms(t_src, batches))} | one-chunk `Table.take`: {fmt(stats_ms(t_ceil, batches))} | **{take_ratio:.2f}x** (>= 0.9) |
| pin (content hash), MB/s | {mbps(t_pin):.0f} | plain file read: {mbps(t_read):.0f} | **{pin_ratio:.2f}x** |
| pin (hash="size"), s | {fmt(t_pin_size)} | | |
"""
    out = write_results("sources", payload, md)
    print(md)
    print(f"wrote {out}")
    return payload


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"total {time.perf_counter() - t0:.1f}s")
