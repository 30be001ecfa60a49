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
the same pieces. A JSONL piece reads the bytes the version names: its file's size and modification
time are checked against those taken before hashing, when it opens and when it has read its range
(Arrow shards are checked by :class:`~resumable_data.ArrowShards`); a value Arrow cannot hold (an
integer past 64 bits, a lone surrogate, a field of another JSON type than the records before it) is
a :class:`~resumable_data.DatasetIntegrityError` naming its line. Cost: planning reads metadata
(Arrow) or hashes every JSONL byte once; two ``fstat`` per JSONL piece.
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
    #: each file's modification time (ns) when it was hashed: a piece refuses a file changed since
    mtimes: tuple[int, ...] = ()

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
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed by the with below
        except OSError as exc:
            raise _changed(
                path, f"it cannot be opened any more ({type(exc).__name__}: {exc.strerror or exc})"
            ) from None
        with f:
            self._unchanged(path, f, piece.file)
            if piece.start > 0:
                f.seek(piece.start - 1)
                f.readline()  # the line holding byte start-1 belongs to the previous piece
            pos = f.tell()
            rows: list[dict[str, Any]] = []
            starts: list[int] = []  # the byte offset of each row's line
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
                except (ValueError, RecursionError) as exc:  # RecursionError: nesting too deep
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
                starts.append(at)
                nbytes += len(line)
                if len(rows) == CHUNK_RECORDS or (limit is not None and len(rows) >= limit):
                    yield _table(rows, starts, path), nbytes
                    rows, starts, nbytes = [], [], 0
                    if limit is not None:
                        return
            self._unchanged(path, f, piece.file)
            if rows:
                yield _table(rows, starts, path), nbytes

    def _unchanged(self, path: str, f: Any, i: int) -> None:
        """Refuse a file whose size or modification time is not what was hashed when planning: its
        bytes are not the ones the lineage's input version names."""
        if not self.mtimes:
            return
        st = os.fstat(f.fileno())
        if (st.st_size, st.st_mtime_ns) != (self.sizes[i], self.mtimes[i]):
            raise _changed(
                path,
                f"size {self.sizes[i]} -> {st.st_size} bytes, modification time {self.mtimes[i]} -> "
                f"{st.st_mtime_ns} ns",
            )


def _changed(path: str, how: str) -> DatasetIntegrityError:
    return DatasetIntegrityError(
        describe(
            "source",
            path,
            f"the JSONL file as it was hashed when this run started ({how})",
            "do not change input files while rd.prepare reads them; re-run once they are final "
            "(the input version is their new content)",
        )
    )


def _table(rows: list[dict[str, Any]], starts: list[int], path: str) -> pa.Table:
    """The rows as a table; a value Arrow cannot hold, or a field whose JSON type differs from the
    rows before it, is a DatasetIntegrityError naming the first line that fails (found by bisection,
    only on failure)."""
    try:
        return pa.Table.from_pylist(rows)
    except (pa.ArrowException, OverflowError, UnicodeError) as exc:
        lo, hi = 0, len(rows)  # rows[:lo] convert, rows[:hi] do not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            try:
                pa.Table.from_pylist(rows[:mid])
                lo = mid
            except (pa.ArrowException, OverflowError, UnicodeError):
                hi = mid
        raise DatasetIntegrityError(
            describe(
                "source",
                f"{path} (byte {starts[hi - 1]})",
                "values Arrow can hold (64-bit integers, valid Unicode), each field of one JSON type in "
                "every record (null aside)",
                f"fix that record, or leave the field out of keep_columns ({type(exc).__name__}: {exc})",
            )
        ) from None


PrepareInput = ArrowInput | JsonlInput


def _jsonl(root: str, rel: list[str]) -> JsonlInput:
    h = xxhash.xxh3_128()
    sizes, mtimes = [], []
    for r in rel:
        p = os.path.join(root, r)
        st = os.stat(p)  # before hashing: a change while hashing is seen when the piece is read
        sizes.append(st.st_size)
        mtimes.append(st.st_mtime_ns)
        h.update(json.dumps([r, st.st_size, hash_file(p)]).encode("utf-8"))
    if not rel or sum(sizes) == 0:
        raise ConfigError(
            describe(
                "source",
                root,
                "JSONL files holding at least one record",
                "pass a folder or list of non-empty .jsonl files",
            )
        )
    return JsonlInput(root, tuple(rel), tuple(sizes), h.hexdigest(), tuple(mtimes))


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
            listed = [q for q in p.rglob("*") if _is_jsonl(q) and not q.name.startswith(".")]
            for q in listed:
                if not q.is_file() and not q.is_dir():  # a dangling symlink, a FIFO, a socket: never skipped
                    raise ConfigError(
                        describe(
                            "source",
                            str(q),
                            "a regular .jsonl file (a dangling symlink, FIFO, socket or device is not read)",
                            f"remove {str(q)!r} from the folder, or make it the file it stands for",
                        )
                    )
            found = sorted(q.relative_to(p).as_posix() for q in listed if q.is_file())
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
