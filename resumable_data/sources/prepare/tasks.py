"""One piece of ``rd.prepare``: read, transform, filter and write one output shard, atomically.

Algorithm: the piece's records are read in chunks (:mod:`.inputs`), passed through the record
function (:mod:`.functions`) and the filters (drop empty documents, ``min_tokens`` /
``max_tokens`` on the ``tokens`` column), concatenated and cut into record batches of at most
:data:`ROWS_PER_BATCH` rows and :data:`TOKENS_PER_BATCH` tokens (a cut that depends on the rows
alone), serialized as one Arrow IPC *file* in memory and written to ``shard-NNNNN.arrow`` through
the output's :class:`~resumable_data.sources.store.ShardStore` (local: a hidden temporary file,
fsync, rename; an object store: one whole-object upload, which appears only when complete).
A piece whose records are all dropped writes no file.

Why this layout: the loader memory-maps IPC *file* shards (zero-copy record batches) and
structurally validates each record batch once, on first use; batches of 16,384 rows are what
its benchmarks read fastest (docs/performance.md), and the token cap (4 Mi tokens, 16 MiB of
``int32``) bounds the bytes one validation touches when documents are long.

Guarantee: the shard's bytes are a pure function of (input records, function, filters): no
timestamps, no process ids, no completion order. A reader never sees a partial shard.

Cost: the piece's output is held in memory once (its serialized bytes, plus the tables).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from resumable_data.errors import ConfigError, describe
from resumable_data.sources.prepare.functions import TOKENS, MapRecords, RecordFunction
from resumable_data.sources.prepare.inputs import Piece, PrepareInput
from resumable_data.sources.store import join, store_for

__all__ = [
    "ROWS_PER_BATCH",
    "TOKENS_PER_BATCH",
    "Filters",
    "PieceJob",
    "PieceResult",
    "batch_bounds",
    "run_piece",
    "schema_drift",
    "shard_name",
    "write_error",
]

ROWS_PER_BATCH = 16_384
TOKENS_PER_BATCH = 1 << 22

Report = Callable[[int, int, int], None]  # (records read, tokens written, input bytes read)


@dataclass(frozen=True)
class Filters:
    """Documents dropped after the function ran, judged on the ``tokens`` column."""

    drop_empty: bool = True
    min_tokens: int | None = None
    max_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"drop_empty": self.drop_empty, "min_tokens": self.min_tokens, "max_tokens": self.max_tokens}

    def apply(self, table: pa.Table) -> pa.Table:
        if TOKENS not in table.column_names:
            if self.min_tokens is not None or self.max_tokens is not None:
                raise ConfigError(
                    describe(
                        "min_tokens/max_tokens",
                        (self.min_tokens, self.max_tokens),
                        f"None when the output has no {TOKENS!r} list column (it has {table.column_names})",
                        f"drop them, or return a {TOKENS!r} list from map_fn",
                    )
                )
            return table
        col = table.column(TOKENS)
        if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)):
            raise ConfigError(describe(TOKENS, str(col.type), "a list column", "return a list of token ids"))
        n = pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False)
        keep = np.ones(len(n), dtype=bool)
        if self.drop_empty:
            keep &= n > 0
        if self.min_tokens is not None:
            keep &= n >= self.min_tokens
        if self.max_tokens is not None:
            keep &= n <= self.max_tokens
        return table if keep.all() else table.filter(pa.array(keep))


def write_error(out: str, exc: OSError) -> ConfigError:
    """A file of the output folder that could not be written (local: no space, read-only, a file
    where a folder should be)."""
    return ConfigError(
        describe(
            "out",
            out,
            f"a folder rd.prepare can write to ({type(exc).__name__}: {exc.strerror or exc})",
            "free space or pass a writable folder; re-running the same call continues the work done",
        )
    )


def schema_drift(function: RecordFunction, where: str, detail: str) -> ConfigError:
    """Output of two chunks or pieces with other column types: a fix for each kind of function."""
    if isinstance(function, MapRecords):
        return ConfigError(
            describe(
                "schema",
                function.schema,
                f"one Arrow schema for every record map_fn returns ({where})",
                f"pass schema=pa.schema([...]) naming every column's type ({detail})",
            )
        )
    return ConfigError(
        describe(
            "keep_columns",
            list(function.keep_columns),
            f"fields of one JSON type in every record ({where}; a field null in every record of a chunk or "
            "piece is typed null there)",
            "leave the field out of keep_columns, or give it one type in every record of the input, or "
            f"use map_fn=... with version= and schema= to type it ({detail})",
        )
    )


def shard_name(index: int, count: int) -> str:
    """``shard-NNNNN.arrow``; all names of one output have the same width, so they sort in order."""
    return f"shard-{index:0{max(5, len(str(max(count - 1, 0))))}d}.arrow"


@dataclass(frozen=True)
class PieceJob:
    """Everything a worker needs for one piece (picklable: a process pool or a Ray task)."""

    source: PrepareInput
    function: RecordFunction
    filters: Filters
    piece: Piece
    out: str
    name: str
    filesystem: Any = None


@dataclass(frozen=True)
class PieceResult:
    index: int
    name: str | None  # None: every record was dropped, no file
    size: int
    content_hash: str | None
    rows: int
    records_in: int
    tokens: int
    bytes_in: int


def batch_bounds(lengths: np.ndarray | None, n: int) -> list[tuple[int, int]]:
    """Record batch ranges: at most ROWS_PER_BATCH rows and TOKENS_PER_BATCH tokens (>= 1 row)."""
    if lengths is None:
        return [(a, min(a + ROWS_PER_BATCH, n)) for a in range(0, n, ROWS_PER_BATCH)]
    cum = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    out, a = [], 0
    while a < n:
        b = int(np.searchsorted(cum, cum[a] + TOKENS_PER_BATCH, side="right")) - 1
        b = max(a + 1, min(b, a + ROWS_PER_BATCH, n))
        out.append((a, b))
        a = b
    return out


def _serialize(table: pa.Table) -> pa.Buffer:
    table = table.combine_chunks().replace_schema_metadata(None)
    lengths = None
    if TOKENS in table.column_names:
        lengths = pc.list_value_length(table.column(TOKENS)).fill_null(0).to_numpy(zero_copy_only=False)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        for a, b in batch_bounds(lengths, table.num_rows):
            for batch in table.slice(a, b - a).to_batches(max_chunksize=b - a):
                writer.write_batch(batch)
    return sink.getvalue()


def _no_report(records: int, tokens: int, nbytes: int) -> None:
    return None


def run_piece(job: PieceJob, report: Report = _no_report) -> PieceResult:
    """Do one piece; returns what the progress record keeps about it."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per worker: the pool is the parallelism
    parts: list[pa.Table] = []
    records = tokens = nbytes = 0
    for chunk, chunk_bytes in job.source.read(job.piece, job.function.input_columns):
        out = job.filters.apply(job.function.apply(chunk))
        n_tok = int(pc.sum(pc.list_value_length(out.column(TOKENS))).as_py() or 0) if TOKENS in out.column_names else 0
        parts.append(out)
        records += chunk.num_rows
        tokens += n_tok
        nbytes += chunk_bytes
        report(chunk.num_rows, n_tok, chunk_bytes)
    try:
        table = pa.concat_tables(parts) if parts else None
    except pa.ArrowInvalid as exc:
        raise schema_drift(job.function, f"piece {job.name}", str(exc)) from None
    if table is None or table.num_rows == 0:
        return PieceResult(job.piece.index, None, 0, None, 0, records, 0, nbytes)
    buf = _serialize(table)
    store = store_for(job.filesystem)
    try:
        store.write_atomic(join(job.out, job.name), buf)
    except OSError as exc:  # no space, read-only (remote stores raise rd errors of their own)
        raise write_error(job.out, exc) from None
    return PieceResult(
        job.piece.index,
        job.name,
        buf.size,
        xxhash.xxh3_128_hexdigest(memoryview(buf)),
        table.num_rows,
        records,
        tokens,
        nbytes,
    )
