"""Shard files on disk: discovery, format detection, metadata and streamed content hashing.

Algorithm: a directory is walked recursively; every file whose suffix is one of
:data:`SHARD_SUFFIXES` is a shard, ordered by its relative POSIX path (byte-wise string sort), so
the order is the same on every OS and filesystem. Arrow IPC files are recognised by content (the
``ARROW1`` magic means IPC *file* format, anything else is read as IPC *stream* format, which is
what Hugging Face ``datasets`` writes); ``.parquet`` files are Parquet.

Guarantee: :func:`hash_file` is the xxh3-128 of the file's bytes, streamed in
:data:`HASH_CHUNK_BYTES` chunks (never a whole-file read), so memory stays flat for any file size.
:func:`canonical_schema` is the schema's text form without schema or field metadata
(``Schema.to_string(show_field_metadata=False, show_schema_metadata=False)``): it names every
field, type and nullability, is stable across pyarrow versions for the types Arrow has had since
1.0, and ignores writer-specific metadata (e.g. the ``huggingface`` key), which does not change
any record. Binary ``Schema.serialize()`` bytes were rejected as the canonical form because the
flatbuffer layout is an implementation detail of the writer.

Cost: discovery is one directory walk; :func:`read_shard_meta` touches only metadata (IPC file
footer, IPC stream message headers via a memory map, Parquet footer); hashing reads every byte
once.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from resumable_data.errors import ConfigError, describe

__all__ = [
    "HASH_CHUNK_BYTES",
    "MANIFEST_NAME",
    "SHARD_SUFFIXES",
    "ShardFormat",
    "ShardMeta",
    "canonical_schema",
    "detect_format",
    "discover_shards",
    "hash_file",
    "read_shard_meta",
]

MANIFEST_NAME = "rd-manifest.json"
SHARD_SUFFIXES = (".arrow", ".ipc", ".feather", ".parquet")
HASH_CHUNK_BYTES = 8 * 1024 * 1024
_ARROW_FILE_MAGIC = b"ARROW1"


class ShardFormat(str, enum.Enum):
    """How a shard's bytes are laid out."""

    IPC_FILE = "ipc_file"
    IPC_STREAM = "ipc_stream"
    PARQUET = "parquet"


@dataclass(frozen=True)
class ShardMeta:
    """What a shard's metadata says: its format, row count and canonical schema."""

    format: ShardFormat
    num_rows: int
    schema: pa.Schema


def canonical_schema(schema: pa.Schema) -> str:
    """The schema's canonical text (names, types, nullability; no metadata)."""
    return schema.to_string(show_field_metadata=False, show_schema_metadata=False)


def detect_format(path: Path) -> ShardFormat:
    """The shard format of ``path``, by suffix and (for Arrow IPC) by the file magic."""
    if path.suffix == ".parquet":
        return ShardFormat.PARQUET
    with open(path, "rb") as f:
        head = f.read(len(_ARROW_FILE_MAGIC))
    return ShardFormat.IPC_FILE if head == _ARROW_FILE_MAGIC else ShardFormat.IPC_STREAM


def discover_shards(root: Path) -> list[str]:
    """Relative POSIX paths of every shard file under ``root``, sorted."""
    if not root.is_dir():
        raise ConfigError(
            describe("path", str(root), "an existing directory of shard files",
                     "pass the directory that holds the .arrow/.ipc/.feather/.parquet shards")
        )
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            if name.endswith(SHARD_SUFFIXES) and not name.startswith("."):
                found.append((Path(dirpath) / name).relative_to(root).as_posix())
    return sorted(found)


def hash_file(path: Path, progress=None) -> str:
    """xxh3-128 hex digest of the file's bytes, streamed in :data:`HASH_CHUNK_BYTES` chunks.

    ``progress``, when given, is called with the byte count of each chunk (thread-safe callers
    only: tqdm's ``update`` is).
    """
    h = xxhash.xxh3_128()
    buf = bytearray(HASH_CHUNK_BYTES)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            h.update(view[:n])
            if progress is not None:
                progress(n)
    return h.hexdigest()


def read_shard_meta(path: Path) -> ShardMeta:
    """Format, row count and schema of one shard, from its metadata only."""
    fmt = detect_format(path)
    try:
        if fmt is ShardFormat.PARQUET:
            pf = pq.ParquetFile(path)
            return ShardMeta(fmt, pf.metadata.num_rows, pf.schema_arrow)
        with pa.memory_map(str(path), "r") as source:
            if fmt is ShardFormat.IPC_FILE:
                reader = pa.ipc.open_file(source)
                rows = sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
            else:
                reader = pa.ipc.open_stream(source)
                rows = sum(batch.num_rows for batch in reader)
            return ShardMeta(fmt, rows, reader.schema)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ConfigError(
            describe("shard", str(path), f"a readable {fmt.value} shard (read failed: {exc})",
                     "remove or rewrite the damaged file, then pin again")
        ) from exc
