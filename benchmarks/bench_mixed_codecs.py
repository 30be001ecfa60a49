"""A folder mixing LZ4 and uncompressed Arrow IPC shards against all-LZ4 and all-uncompressed ones.

The same token table (``list<int32>`` of 1-39 tokens and an int64 id, 4 shards of 10,000 records,
1,000-row record batches) written three ways: every shard LZ4 (``feather``'s default), three LZ4
and one uncompressed, every shard uncompressed. Each source is opened with a budget that holds the
decoded dataset and read whole once (every unit decoded and kept), then timed in the same process,
rounds alternating the sources: ``take`` and ``take_numpy`` of 256 random ids, microseconds per
call over 200 calls (``take_numpy``: None is reported as such; the loader then takes).

Run: ``python -m benchmarks.bench_mixed_codecs [--rounds 5]``; results in
``benchmarks/results/mixed_codecs.{json,md}``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather

import resumable_data as rd
from benchmarks._common import write_results

FOLDERS = {
    "all LZ4": ["lz4"] * 4,
    "3 LZ4 + 1 uncompressed": ["lz4", "lz4", "lz4", "uncompressed"],
    "all uncompressed": ["uncompressed"] * 4,
}
N, CALLS, IDS = 40_000, 200, 256


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    t = pa.table(
        {
            "tokens": pa.array(
                [rng.integers(0, 50_000, int(k)).astype(np.int32) for k in rng.integers(1, 40, N)],
                type=pa.list_(pa.int32()),
            ),
            "id": pa.array(np.arange(N)),
        }
    )
    times: dict[str, dict[str, list[float]]] = {k: {"take": [], "take_numpy": []} for k in FOLDERS}
    none: dict[str, bool] = {}
    with tempfile.TemporaryDirectory() as tmp:
        srcs = {}
        for name, codecs in FOLDERS.items():
            d = Path(tmp) / name.replace(" ", "_")
            d.mkdir()
            for s, codec in enumerate(codecs):
                feather.write_feather(
                    t.slice(s * 10_000, 10_000), d / f"s{s}.arrow", compression=codec, chunksize=1_000
                )
            srcs[name] = rd.ArrowShards(d, unpinned="allow", decoded_cache_bytes=1 << 30)
            srcs[name].take(np.arange(N))
        ids = [rng.integers(0, N, IDS) for _ in range(CALLS)]
        for r in range(args.rounds):
            order = list(srcs) if r % 2 == 0 else list(reversed(srcs))
            for name in order:
                src = srcs[name]
                t0 = time.perf_counter()
                for i in ids:
                    src.take(i)
                t1 = time.perf_counter()
                for i in ids:
                    none[name] = src.take_numpy(i) is None
                t2 = time.perf_counter()
                times[name]["take"].append((t1 - t0) / CALLS * 1e6)
                times[name]["take_numpy"].append((t2 - t1) / CALLS * 1e6)
    lines = ["| folder | take of 256 ids, us | take_numpy of 256 ids, us |", "|---|---:|---:|"]
    for name in FOLDERS:
        tk, tn = times[name]["take"], times[name]["take_numpy"]
        numpy_cell = (
            "None (take instead)" if none[name] else f"{statistics.median(tn):.0f} ({min(tn):.0f}..{max(tn):.0f})"
        )
        lines.append(f"| {name} | {statistics.median(tk):.0f} ({min(tk):.0f}..{max(tk):.0f}) | {numpy_cell} |")
    md = "\n".join(lines)
    print(md)
    path = write_results("mixed_codecs", {"times_us": times, "take_numpy_none": none, "rounds": args.rounds}, md)
    print(f"written {path}")


if __name__ == "__main__":
    main()
