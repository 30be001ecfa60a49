"""Shards behind a ``pyarrow.fs.FileSystem`` (S3, GCS, HDFS, Azure, ...): discovery, metadata,
streamed hashing, manifests, and on-demand reading.

Algorithm: every helper here takes the filesystem first; ``None`` (or a
``pyarrow.fs.LocalFileSystem``) means the local code path of :mod:`.files` (memory maps). A remote
path is a POSIX string such as ``"bucket/prefix/shard-00000.arrow"``. Discovery lists the prefix
recursively (:class:`pyarrow.fs.FileSelector`) with the same suffix rule and sort order as a local
directory. Hashing streams the object through ``open_input_stream`` in
:data:`~.files.HASH_CHUNK_BYTES` chunks (never a whole-object read). The manifest is written with
one ``open_output_stream`` (an object appears whole when its upload completes: the atomic write of
object stores).

Reading (see :class:`RemoteShard`): an Arrow IPC *file* shard is opened with
``open_input_file`` (random access); its record batches' row counts come from the IPC footer and
each batch's message header (a few hundred bytes per batch, parsed here: pyarrow's own
``count_rows``/``get_batch`` download the bodies), and a batch's body is read only when a record in
it is first requested (then kept in the source's small LRU cache). Parquet is read by row group the
same way. An IPC *stream* shard has no index, so it is one unit read whole on first use: prefer IPC
file format or Parquet for remote data.

Cost: opening a remote IPC file shard is 2 + (number of record batches) small range reads;
a Parquet shard, its footer. ``pin`` and ``verify("content")`` read every byte once.
"""

from __future__ import annotations

import posixpath
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import xxhash

from resumable_data.errors import ConfigError, describe
from resumable_data.sources import files as _files
from resumable_data.sources.files import (
    HASH_CHUNK_BYTES,
    SHARD_SUFFIXES,
    ShardFormat,
    ShardMeta,
)

__all__ = [
    "RemoteShard",
    "discover_shards",
    "file_size",
    "hash_file",
    "ipc_file_batch_rows",
    "is_dir",
    "normalize_filesystem",
    "read_shard_meta",
    "read_text",
    "resolve_files",
    "write_text",
]

_MAGIC = b"ARROW1"
_MESSAGE_HEADER_RECORD_BATCH = 3


def normalize_filesystem(filesystem: Any) -> pafs.FileSystem | None:
    """``None`` for the local filesystem (memory-mapped code path), else the filesystem."""
    if filesystem is None or isinstance(filesystem, pafs.LocalFileSystem):
        return None
    if not isinstance(filesystem, pafs.FileSystem):
        raise ConfigError(describe("filesystem", type(filesystem).__name__, "a pyarrow.fs.FileSystem",
                                   "pass e.g. pyarrow.fs.S3FileSystem(...) (fsspec filesystems: wrap in "
                                   "pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(fs)))"))
    return filesystem


def _p(path: Any) -> str:
    return path.as_posix() if hasattr(path, "as_posix") else str(path)


# -- listing and stat ---------------------------------------------------------------------------
def file_size(fs: pafs.FileSystem | None, path: Any) -> int | None:
    """Byte size of a file, or None when it does not exist (or is not a file)."""
    if fs is None:
        from pathlib import Path
        p = Path(path)
        return p.stat().st_size if p.is_file() else None
    info = fs.get_file_info(_p(path))
    return info.size if info.type == pafs.FileType.File else None


def is_dir(fs: pafs.FileSystem | None, path: Any) -> bool:
    if fs is None:
        from pathlib import Path
        return Path(path).is_dir()
    return fs.get_file_info(_p(path)).type == pafs.FileType.Directory


def discover_shards(fs: pafs.FileSystem | None, root: Any) -> list[str]:
    """Relative POSIX paths of every shard file under ``root``, sorted (as :func:`.files.discover_shards`)."""
    if fs is None:
        from pathlib import Path
        return _files.discover_shards(Path(root))
    base = _p(root).rstrip("/")
    if fs.get_file_info(base).type != pafs.FileType.Directory:
        raise ConfigError(describe("path", base, "an existing directory (prefix) of shard files",
                                   "check the path and the filesystem's bucket/prefix"))
    found = []
    for info in fs.get_file_info(pafs.FileSelector(base, recursive=True)):
        if info.type != pafs.FileType.File:
            continue
        name = info.base_name
        if name.endswith(SHARD_SUFFIXES) and not name.startswith("."):
            found.append(posixpath.relpath(info.path, base))
    return sorted(found)


def resolve_files(fs: pafs.FileSystem, files: Sequence[Any]) -> tuple[str, list[str]]:
    """(root, relative POSIX paths) for an explicit list of remote shard files, order kept."""
    if len(files) == 0:
        raise ConfigError(describe("path", list(files), "a non-empty list of shard files",
                                   "pass at least one .arrow/.ipc/.feather/.parquet file"))
    paths = [_p(f) for f in files]
    for p in paths:
        if not p.endswith(SHARD_SUFFIXES) or file_size(fs, p) is None:
            raise ConfigError(describe("path", p, f"an existing shard file ({', '.join(SHARD_SUFFIXES)})",
                                       "check the file list and the filesystem"))
    root = posixpath.commonpath([posixpath.dirname(p) for p in paths])
    rel = [posixpath.relpath(p, root) if root else p for p in paths]
    if len(set(rel)) != len(rel):
        raise ConfigError(describe("path", rel, "each shard file listed once", "remove the duplicates"))
    return root, rel


# -- content --------------------------------------------------------------------------------------
def hash_file(fs: pafs.FileSystem | None, path: Any, progress=None) -> str:
    """xxh3-128 hex digest of the file's bytes, streamed (same digest as :func:`.files.hash_file`)."""
    if fs is None:
        from pathlib import Path
        return _files.hash_file(Path(path), progress)
    h = xxhash.xxh3_128()
    with fs.open_input_stream(_p(path)) as f:
        while True:
            chunk = f.read(HASH_CHUNK_BYTES)
            if not chunk:
                break
            h.update(chunk)
            if progress is not None:
                progress(len(chunk))
    return h.hexdigest()


def read_text(fs: pafs.FileSystem, path: Any) -> str | None:
    """The UTF-8 text of a small file, or None when it does not exist."""
    if file_size(fs, path) is None:
        return None
    with fs.open_input_stream(_p(path)) as f:
        return f.read().decode("utf-8")


def write_text(fs: pafs.FileSystem, path: Any, text: str) -> None:
    """Write a small file whole: object stores publish an object when its upload completes."""
    with fs.open_output_stream(_p(path)) as f:
        f.write(text.encode("utf-8"))


def detect_format(fs: pafs.FileSystem, path: Any) -> ShardFormat:
    p = _p(path)
    if p.endswith(".parquet"):
        return ShardFormat.PARQUET
    with fs.open_input_file(p) as f:
        head = f.read_at(len(_MAGIC), 0) if f.size() >= len(_MAGIC) else b""
    return ShardFormat.IPC_FILE if head == _MAGIC else ShardFormat.IPC_STREAM


# -- Arrow IPC file footer (flatbuffers), for row counts without reading bodies --------------------
def _u32(b: bytes, pos: int) -> int:
    return struct.unpack_from("<I", b, pos)[0]


def _field(b: bytes, table: int, field_id: int) -> int | None:
    vtable = table - struct.unpack_from("<i", b, table)[0]
    vt_size = struct.unpack_from("<H", b, vtable)[0]
    slot = 4 + 2 * field_id
    if slot >= vt_size:
        return None
    off = struct.unpack_from("<H", b, vtable + slot)[0]
    return table + off if off else None


def _footer_blocks(footer: bytes) -> list[tuple[int, int]]:
    """(offset, metaDataLength) of every record batch block of an IPC file footer."""
    root = _u32(footer, 0)
    pos = _field(footer, root, 3)  # Footer.recordBatches: [Block]
    if pos is None:
        return []
    vec = pos + _u32(footer, pos)
    n = _u32(footer, vec)
    out = []
    for i in range(n):
        at = vec + 4 + 24 * i  # struct Block { long offset; int metaDataLength; (pad); long bodyLength; }
        offset, meta_len = struct.unpack_from("<qi", footer, at)
        out.append((offset, meta_len))
    return out


def _message_rows(meta: bytes) -> int:
    """RecordBatch.length from an encapsulated message's metadata (continuation marker optional)."""
    start = 8 if meta[:4] == b"\xff\xff\xff\xff" else 4
    fb = meta[start:]
    root = _u32(fb, 0)
    kind = _field(fb, root, 1)  # Message.header_type
    if kind is None or fb[kind] != _MESSAGE_HEADER_RECORD_BATCH:
        raise ValueError("block is not a record batch message")
    hdr = _field(fb, root, 2)
    if hdr is None:
        raise ValueError("record batch message without a header")
    rb = hdr + _u32(fb, hdr)
    length = _field(fb, rb, 0)
    return struct.unpack_from("<q", fb, length)[0] if length is not None else 0


def ipc_file_batch_rows(f: pa.NativeFile) -> list[int]:
    """Row count of every record batch of an Arrow IPC file, from its footer and message headers
    only (the bodies are never read). ``f`` must be a random-access file."""
    size = f.size()
    tail = f.read_at(10, size - 10)
    if tail[4:] != _MAGIC:
        raise ValueError("not an Arrow IPC file (no trailing magic)")
    footer_len = struct.unpack_from("<i", tail, 0)[0]
    footer = f.read_at(footer_len, size - 10 - footer_len)
    return [_message_rows(f.read_at(meta_len, offset)) for offset, meta_len in _footer_blocks(footer)]


def read_shard_meta(fs: pafs.FileSystem | None, path: Any) -> ShardMeta:
    """Format, row count and schema of one shard (as :func:`.files.read_shard_meta`); remote IPC
    file shards read only their footer and message headers."""
    if fs is None:
        from pathlib import Path
        return _files.read_shard_meta(Path(path))
    p = _p(path)
    fmt = detect_format(fs, p)
    try:
        if fmt is ShardFormat.PARQUET:
            with fs.open_input_file(p) as f:
                pf = pq.ParquetFile(f)
                return ShardMeta(fmt, pf.metadata.num_rows, pf.schema_arrow)
        if fmt is ShardFormat.IPC_FILE:
            with fs.open_input_file(p) as f:
                schema = pa.ipc.open_file(f).schema
                return ShardMeta(fmt, sum(ipc_file_batch_rows(f)), schema)
        with fs.open_input_stream(p) as f:
            reader = pa.ipc.open_stream(f)
            return ShardMeta(fmt, sum(b.num_rows for b in reader), reader.schema)
    except (pa.ArrowInvalid, OSError, ValueError, struct.error) as exc:
        raise ConfigError(
            describe("shard", p, f"a readable {fmt.value} shard (read failed: {exc})",
                     "remove or rewrite the damaged file, then pin again")
        ) from exc


# -- reading ----------------------------------------------------------------------------------------
@dataclass
class RemoteShard:
    """One opened remote shard: its schema, per-unit row counts, and a loader of unit ``k``."""

    format: ShardFormat
    schema: pa.Schema
    unit_rows: list[int]
    _file: Any = None
    _reader: Any = None
    _fs: Any = None
    _path: str = ""

    @classmethod
    def open(cls, fs: pafs.FileSystem, path: Any) -> RemoteShard:
        p = _p(path)
        fmt = detect_format(fs, p)
        if fmt is ShardFormat.PARQUET:
            f = fs.open_input_file(p)
            pf = pq.ParquetFile(f)
            rows = [pf.metadata.row_group(g).num_rows for g in range(pf.metadata.num_row_groups)]
            return cls(fmt, pf.schema_arrow, rows, f, pf, fs, p)
        if fmt is ShardFormat.IPC_FILE:
            f = fs.open_input_file(p)
            reader = pa.ipc.open_file(f)
            try:
                rows = ipc_file_batch_rows(f)
            except (ValueError, struct.error):  # unexpected layout: count by reading the batches
                rows = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
            if len(rows) != reader.num_record_batches:
                rows = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
            return cls(fmt, reader.schema, rows, f, reader, fs, p)
        with fs.open_input_stream(p) as f:  # no index: one unit, read whole on first use
            reader = pa.ipc.open_stream(f)
            schema = reader.schema
            rows = sum(b.num_rows for b in reader)
        return cls(fmt, schema, [rows], None, None, fs, p)

    def read_unit(self, k: int) -> pa.RecordBatch:
        if self.format is ShardFormat.PARQUET:
            table = self._reader.read_row_group(k)
        elif self.format is ShardFormat.IPC_FILE:
            return self._reader.get_batch(k)
        else:
            with self._fs.open_input_stream(self._path) as f:
                table = pa.ipc.open_stream(f).read_all()
        table = table.combine_chunks()
        if table.num_rows:
            return table.to_batches()[0]
        return pa.RecordBatch.from_pylist([], schema=table.schema)
