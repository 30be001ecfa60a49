"""The inputs of ``rd.prepare``: pinned Arrow/Parquet shards (or a Hugging Face dataset) and JSONL.

Algorithm: every input is cut into *pieces*, planned from the input alone (never from the number
of processes): each input file is split into ``ceil(file bytes / bytes_per_shard)`` near-equal
pieces. An Arrow/Parquet shard is split by rows (record ids of the pinned
:class:`~resumable_data.ArrowShards`, read by ``take`` in chunks); a JSONL file by bytes, a line
belonging to the piece its first byte lies in (a reader seeks to the byte before its start and
skips to the end of that line). Piece ``k`` of the plan becomes output shard ``k``.

The input's version: an Arrow input's pinned :class:`~resumable_data.DatasetVersion` hash
(an unpinned folder is pinned into the cache, never into the folder); a JSONL input's xxh3-128 of
its files' relative names, sizes and content hashes, in order.

Guarantee: the pieces cover every record exactly once, in input order; the same input bytes give
the same pieces. Cost: planning reads metadata (Arrow) or hashes every JSONL byte once.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import xxhash

from resumable_data._io import hash_file
from resumable_data.errors import ConfigError, ConfigTypeError, DatasetIntegrityError, describe
from resumable_data.sources.arrow_shards import ArrowShards
from resumable_data.sources.discovery import LEGACY_MANIFEST_NAME, MANIFEST_NAME, SHARD_SUFFIXES
from resumable_data.sources.version import DatasetVersion

__all__ = ["ArrowInput", "JsonlInput", "Piece", "PrepareInput", "open_input"]

JSONL_SUFFIXES = (".jsonl", ".json")
CHUNK_RECORDS = 1024  # records read, transformed and counted at a time inside a piece


@dataclass(frozen=True)
class Piece:
    """One planned unit of work: input ``file`` index, and a row or byte range in it."""

    index: int
    file: int
    start: int
    stop: int


def _split(n_units: int, size_bytes: int, bytes_per_shard: int) -> list[tuple[int, int]]:
    k = max(1, -(-size_bytes // bytes_per_shard))
    k = min(k, max(1, n_units))
    return [(n_units * i // k, n_units * (i + 1) // k) for i in range(k)]


def _select(table: pa.Table, columns: tuple[str, ...] | None, where: str) -> pa.Table:
    if columns is None:
        return table
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise ConfigError(
            describe(
                "text_column/keep_columns",
                missing,
                f"columns of the input {where} (it has {table.column_names})",
                "name existing columns (text_column=...)",
            )
        )
    return table.select(list(columns))


@dataclass(frozen=True)
class ArrowInput:
    """Pinned Arrow IPC / Parquet shards (a folder, a file list or a Hugging Face dataset)."""

    source: ArrowShards
    #: the source's version (set from ``source``; an unpinned source is refused here)
    pinned: DatasetVersion = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.source.version is None:
            raise ConfigError(
                describe(
                    "source",
                    repr(self.source),
                    "a pinned source (rd.prepare records its version)",
                    "open it with rd.ArrowShards(path) (the default unpinned='pin')",
                )
            )
        object.__setattr__(self, "pinned", self.source.version)  # a frozen dataclass sets it once here

    @property
    def where(self) -> str:
        """The folder the input lives in."""
        return str(self.source.root)

    def version(self) -> dict[str, Any]:
        v = self.pinned
        return {"kind": "arrow", "version": v.hash, "records": v.num_records}

    def check(self, columns: tuple[str, ...] | None, text_column: str | None) -> None:
        schema = self.source.schema
        _select(schema.empty_table(), columns, f"at {str(self.source.root)!r}")
        if text_column is not None:
            t = schema.field(text_column).type
            if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
                raise ConfigError(
                    describe(
                        "text_column",
                        text_column,
                        f"a string column (it is {t})",
                        "pass text_column= naming the text column, or map_fn=...",
                    )
                )

    def pieces(self, bytes_per_shard: int) -> list[Piece]:
        out: list[Piece] = []
        first = 0
        for f, s in enumerate(self.pinned.shards):
            for a, b in _split(s.num_rows, s.size, bytes_per_shard):
                if b > a:
                    out.append(Piece(len(out), f, first + a, first + b))
            first += s.num_rows
        return out

    def read(self, piece: Piece, columns: tuple[str, ...] | None) -> Iterator[tuple[pa.Table, int]]:
        """Chunks of the piece's records (only ``columns``) and their input bytes."""
        for a in range(piece.start, piece.stop, CHUNK_RECORDS):
            t = self.source.take(np.arange(a, min(a + CHUNK_RECORDS, piece.stop), dtype=np.int64))
            t = _select(t, columns, f"at {str(self.source.root)!r}")
            yield t, t.nbytes


@dataclass(frozen=True)
class JsonlInput:
    """JSON Lines files (one JSON object per line), local, read in the given order."""

    root: str
    files: tuple[str, ...]  # relative POSIX paths
    sizes: tuple[int, ...]
    digest: str

    @property
    def where(self) -> str:
        return self.root

    def version(self) -> dict[str, Any]:
        return {"kind": "jsonl", "version": self.digest, "files": list(self.files)}

    def check(self, columns: tuple[str, ...] | None, text_column: str | None) -> None:
        for chunk, _ in self.read(Piece(0, 0, 0, min(self.sizes[0], 1 << 20)), columns, limit=1):
            if text_column is not None and len(chunk):
                t = chunk.schema.field(text_column).type
                if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)):
                    raise ConfigError(
                        describe(
                            "text_column",
                            text_column,
                            f"a string field (it is {t})",
                            "pass text_column= naming the text field, or map_fn=...",
                        )
                    )

    def pieces(self, bytes_per_shard: int) -> list[Piece]:
        out: list[Piece] = []
        for f, size in enumerate(self.sizes):
            for a, b in _split(size, size, bytes_per_shard):
                if b > a:
                    out.append(Piece(len(out), f, a, b))
        return out

    def read(
        self, piece: Piece, columns: tuple[str, ...] | None, limit: int | None = None
    ) -> Iterator[tuple[pa.Table, int]]:
        path = os.path.join(self.root, self.files[piece.file])
        with open(path, "rb") as f:
            if piece.start > 0:
                f.seek(piece.start - 1)
                f.readline()  # the line holding byte start-1 belongs to the previous piece
            pos = f.tell()
            rows: list[dict[str, Any]] = []
            nbytes = 0
            while pos < piece.stop:
                line = f.readline()
                if not line:
                    break
                at = pos
                pos += len(line)
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError as exc:
                    raise DatasetIntegrityError(
                        describe(
                            "source",
                            f"{path} (byte {at})",
                            "one JSON object per line",
                            f"fix or remove that line ({exc})",
                        )
                    ) from None
                if not isinstance(rec, dict):
                    raise DatasetIntegrityError(
                        describe(
                            "source",
                            f"{path} (byte {at})",
                            "a JSON object per line",
                            f"wrap the value in an object (got {type(rec).__name__})",
                        )
                    )
                if columns is not None:
                    missing = [c for c in columns if c not in rec]
                    if missing:
                        raise ConfigError(
                            describe(
                                "text_column/keep_columns",
                                missing,
                                f"fields of every record ({path}, byte {at} has {sorted(rec)[:10]})",
                                "name existing fields (text_column=...), or fix the record",
                            )
                        )
                    rec = {c: rec[c] for c in columns}
                rows.append(rec)
                nbytes += len(line)
                if len(rows) == CHUNK_RECORDS or (limit is not None and len(rows) >= limit):
                    yield pa.Table.from_pylist(rows), nbytes
                    rows, nbytes = [], 0
                    if limit is not None:
                        return
            if rows:
                yield pa.Table.from_pylist(rows), nbytes


PrepareInput = ArrowInput | JsonlInput


def _jsonl(root: str, rel: list[str]) -> JsonlInput:
    h = xxhash.xxh3_128()
    sizes = []
    for r in rel:
        p = os.path.join(root, r)
        size = os.path.getsize(p)
        sizes.append(size)
        h.update(json.dumps([r, size, hash_file(p)]).encode("utf-8"))
    if not rel or sum(sizes) == 0:
        raise ConfigError(
            describe(
                "source",
                root,
                "JSONL files holding at least one record",
                "pass a folder or list of non-empty .jsonl files",
            )
        )
    return JsonlInput(root, tuple(rel), tuple(sizes), h.hexdigest())


def _is_jsonl(p: Any) -> bool:
    return str(p).endswith(JSONL_SUFFIXES)


def _refuse_plain_text(p: Path) -> None:
    """A local file or folder holding neither .jsonl nor shards (plain .txt, .csv, ...): say how to
    make JSONL of it, instead of the shard reader's error, which knows nothing of JSONL."""
    names = {MANIFEST_NAME, LEGACY_MANIFEST_NAME}
    files = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file() and not q.name.startswith("."))
    if p.is_dir() and any((p / n).is_file() for n in names):
        return
    if any(str(q).endswith(SHARD_SUFFIXES) for q in files):
        return
    if p.is_file():
        held, listing = f"it is a {p.suffix or 'suffix-less'!r} file", f"[{str(p)!r}]"
    else:
        shown = ", ".join(repr(q.name) for q in files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
        held = f"it holds {len(files)} other file(s): {shown}" if files else "it holds no file"
        listing = f"sorted(glob.glob({os.path.join(str(p), '**', '*.txt')!r}, recursive=True))"
    raise ConfigError(
        describe(
            "source",
            str(p),
            "Arrow/Parquet shards (.arrow, .ipc, .feather, .parquet) or .jsonl files (one JSON object per line, "
            f"the text in a 'text' field); {held}",
            "write the text as JSONL first, one document per record; for text files: import glob, json; "
            f"out = open('corpus.jsonl', 'w'); [out.write(json.dumps({{'text': open(f).read()}}) + '\\n') "
            f"for f in {listing}]; out.close(); then prepare 'corpus.jsonl'",
        )
    )


def open_input(source: Any) -> PrepareInput:
    """The prepare input for ``source`` (see :func:`resumable_data.prepare`)."""
    if isinstance(source, ArrowShards):
        return ArrowInput(source)  # refuses an unpinned source
    if isinstance(source, DatasetVersion):
        return ArrowInput(ArrowShards(source))
    datasets = sys.modules.get("datasets")  # never imported here: a user's Dataset brings it
    if datasets is not None and isinstance(source, (datasets.Dataset, datasets.DatasetDict, datasets.IterableDataset)):
        return ArrowInput(ArrowShards.from_hf(source))
    if isinstance(source, (str, os.PathLike)):
        p = Path(source)
        if p.is_file() and _is_jsonl(p):
            return _jsonl(str(p.parent), [p.name])
        if p.is_dir():
            found = sorted(
                q.relative_to(p).as_posix()
                for q in p.rglob("*")
                if q.is_file() and _is_jsonl(q) and not q.name.startswith(".")
            )
            # a save_to_disk folder holds state.json and dataset_info.json beside its .arrow shards:
            # .json files beside shards are metadata, not a corpus (.jsonl files still are)
            shards = any(q.is_file() and str(q).endswith(SHARD_SUFFIXES) for q in p.rglob("*"))
            if found and not (shards and not any(f.endswith(".jsonl") for f in found)):
                return _jsonl(str(p), found)
        if not p.exists():
            raise ConfigError(
                describe(
                    "source",
                    str(source),
                    "an existing folder or file",
                    "check the path (Arrow/Parquet shards or .jsonl files)",
                )
            )
        _refuse_plain_text(p)
        return ArrowInput(ArrowShards(source))
    if isinstance(source, Sequence) and source and all(isinstance(s, (str, os.PathLike)) for s in source):
        if all(_is_jsonl(s) for s in source):
            paths = [Path(s).resolve() for s in source]
            for q in paths:
                if not q.is_file():
                    raise ConfigError(describe("source", str(q), "an existing .jsonl file", "check the path"))
            root = os.path.commonpath([str(q.parent) for q in paths])
            return _jsonl(root, [q.relative_to(root).as_posix() for q in paths])
        return ArrowInput(ArrowShards(list(source)))
    raise ConfigTypeError(
        describe(
            "source",
            type(source).__name__,
            "a folder or list of Arrow/Parquet shards or .jsonl files, an rd.ArrowShards, "
            "a DatasetVersion or a datasets.Dataset",
            "pass the folder path",
        )
    )
