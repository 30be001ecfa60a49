"""Benchmark data, built once and cached under ``benchmarks/data/`` (gitignored).

``tokens: list<int32>`` with lengths uniform in 16..256 (values in [0, 50000)), ``id: int64``;
1,000,000 records (``--quick``: 200,000) written as 8 pinned Arrow IPC shards of 16,384-row
record batches (and, for the drop-in benchmark, a copy in 1,024-row record batches), plus an Arrow *stream* copy of the same table for Hugging Face
``datasets.Dataset.from_file`` and a one-record-batch IPC copy (fast single-chunk ``take``). The content is a pure function of (records, seed).

Run: ``python -m benchmarks.data [--quick]`` (prints the paths).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa

DATA = Path(__file__).resolve().parent / "data"
FULL_RECORDS = 1_000_000
QUICK_RECORDS = 200_000
NUM_SHARDS = 8
ROWS_PER_BATCH = 16_384


def records_for(quick: bool) -> int:
    return QUICK_RECORDS if quick else FULL_RECORDS


def build_table(n: int, seed: int = 0) -> pa.Table:
    """The benchmark table: ``n`` records, token lengths uniform in 16..256."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(16, 257, n)
    off = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lens, out=off[1:])
    tokens = pa.ListArray.from_arrays(pa.array(off), pa.array(rng.integers(0, 50_000, off[-1], dtype=np.int32)))
    return pa.table({"tokens": tokens, "id": pa.array(np.arange(n, dtype=np.int64))})


def shards_dir(n: int, table: pa.Table | None = None) -> Path:
    """Directory of ``n`` records as 8 Arrow IPC shards, pinned (built and pinned on first use)."""
    import resumable_data as rd
    from resumable_data.sources.files import MANIFEST_NAME

    d = DATA / f"sources-{n}x{NUM_SHARDS}"
    if not (d / f"shard-{NUM_SHARDS - 1:05d}.arrow").is_file():
        shutil.rmtree(d, ignore_errors=True)
        rd.write_arrow_shards(table if table is not None else build_table(n), d, num_shards=NUM_SHARDS,
                              rows_per_batch=ROWS_PER_BATCH)
    if not (d / MANIFEST_NAME).is_file():
        rd.pin(d)
    return d


def small_batches_dir(n: int, rows_per_batch: int = 1024) -> Path:
    """The same records as 8 pinned Arrow IPC shards of ``rows_per_batch``-row record batches (the
    layout Hugging Face ``datasets`` writes: 1,024 rows), built and pinned on first use."""
    import resumable_data as rd
    from resumable_data.sources.files import MANIFEST_NAME

    d = DATA / f"sources-{n}x{NUM_SHARDS}-rb{rows_per_batch}"
    if not (d / f"shard-{NUM_SHARDS - 1:05d}.arrow").is_file():
        shutil.rmtree(d, ignore_errors=True)
        rd.write_arrow_shards(open_mmap_table(n), d, num_shards=NUM_SHARDS, rows_per_batch=rows_per_batch)
    if not (d / MANIFEST_NAME).is_file():
        rd.pin(d)
    return d


def shard_paths(n: int) -> list[Path]:
    return sorted(shards_dir(n).glob("shard-*.arrow"))


def open_mmap_table(n: int) -> pa.Table:
    """The shards, memory-mapped and concatenated in manifest order (zero-copy, chunked)."""
    tables = [pa.ipc.open_file(pa.memory_map(str(p), "r")).read_all() for p in shard_paths(n)]
    return pa.concat_tables(tables)


def hf_stream_file(n: int) -> Path:
    """An Arrow stream copy of the same records (what ``datasets.Dataset.from_file`` reads)."""
    path = DATA / f"hf-{n}.arrow"
    if not path.is_file():
        table = open_mmap_table(n)
        tmp = path.with_suffix(".tmp")
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            for b in table.to_batches(max_chunksize=ROWS_PER_BATCH):
                w.write_batch(b)
        tmp.replace(path)
    return path


def one_chunk_file(n: int) -> Path:
    """An Arrow IPC file of the same records as ONE record batch: memory-mapped, its ``Table.take``
    is pyarrow's fast single-chunk gather (a chunked table's ``take`` of list columns is far
    slower), so the plain-torch baseline and the ceiling read the same bytes at their best."""
    path = DATA / f"onechunk-{n}.arrow"
    if not path.is_file():
        table = open_mmap_table(n).combine_chunks()
        tmp = path.with_suffix(".tmp")
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_batch(table.to_batches()[0])
        tmp.replace(path)
    return path


def open_one_chunk(n: int) -> pa.Table:
    """The one-chunk copy, memory-mapped (zero-copy)."""
    table = pa.ipc.open_file(pa.memory_map(str(one_chunk_file(n)), "r")).read_all()
    assert all(c.num_chunks == 1 for c in table.columns)
    return table


def ensure(n: int) -> dict[str, Path]:
    """Build everything the benchmarks read for ``n`` records (idempotent)."""
    d = shards_dir(n)
    return {"shards": d, "hf_stream": hf_stream_file(n), "one_chunk": one_chunk_file(n)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    for k, v in ensure(records_for(args.quick)).items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    main()
