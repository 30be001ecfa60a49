"""A shard's format and its metadata-only reads: format detection, IPC footer row counts, the unit layout.

Algorithm: ``.parquet`` files are Parquet; other shards are recognised by content (the ``ARROW1``
magic means Arrow IPC *file* format, anything else is read as IPC *stream* format, which is what
Hugging Face ``datasets`` writes). :func:`ipc_file_batch_rows` reads an IPC file's footer and each
batch's message header (never a body). :func:`build_layout` builds a shard's
:class:`~.layout.ShardLayout` (IPC file footer and batch headers, IPC stream message headers,
Parquet footer: see :mod:`.layout`), reading a remote IPC file's batch headers
:data:`_HEADER_READS` at a time, each read through the store's retries (:mod:`.retry`).

Guarantee: only metadata is read; bytes that do not parse raise (``LayoutMismatch``,
``struct.error`` or ``ValueError``), which the callers turn into a fallback (no layout) or a
:class:`~resumable_data.DatasetIntegrityError` naming the shard (:mod:`.validate`).

Cost: detection reads 6 bytes (none for Parquet); a layout reads the footer and the message
headers once (remote: once per machine, then pinned in the manifest). A restore reads nothing
here when the manifest holds the layouts.
"""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa

from resumable_data.sources.layout import (
    ARROW_FILE_MAGIC,
    ShardFormat,
    ShardLayout,
    footer_blocks,
    ipc_file_layout,
    ipc_stream_layout,
    message_info,
    parquet_layout,
)
from resumable_data.sources.parquet_footer import open_parquet
from resumable_data.sources.store import LOCAL, FileSystemStore, ShardStore

__all__ = ["build_layout", "detect_format", "ipc_file_batch_rows"]

_HEADER_READS = 8  # a remote IPC file's batch headers read at once while its layout is built


def detect_format(path: Any, store: ShardStore = LOCAL) -> ShardFormat:
    """The shard format of ``path``, by suffix and (for Arrow IPC) by the file magic."""
    if str(path).endswith(".parquet"):
        return ShardFormat.PARQUET
    with store.open_input_file(path) as f:  # a short body refused (a stream's read(n) cannot tell one)
        n = min(len(ARROW_FILE_MAGIC), f.size())
        head = store.retrying(path, f"read of bytes [0, {n})", lambda: store.read_at(path, f, n, 0))
    return ShardFormat.IPC_FILE if head == ARROW_FILE_MAGIC else ShardFormat.IPC_STREAM


# -- Arrow IPC file footer, for row counts without reading bodies ---------------------------------
def ipc_file_batch_rows(f: pa.NativeFile) -> list[int]:
    """Row count of every record batch of an Arrow IPC file, from its footer and message headers
    only (the bodies are never read). ``f`` must be a random-access file."""
    size = f.size()
    tail = f.read_at(10, size - 10)
    if tail[4:] != ARROW_FILE_MAGIC:
        raise ValueError("not an Arrow IPC file (no trailing magic)")
    footer_len = struct.unpack_from("<i", tail, 0)[0]
    footer = f.read_at(footer_len, size - 10 - footer_len)
    rows = []
    for offset, meta_len, _ in footer_blocks(footer)[0]:
        meta = f.read_at(meta_len, offset)
        rows.append(message_info(meta[8 if meta[:4] == b"\xff\xff\xff\xff" else 4 :])[2])
    return rows


def build_layout(
    path: Any, store: ShardStore, fmt: ShardFormat, file: pa.NativeFile | None = None, parquet_metadata: Any = None
) -> ShardLayout | None:
    """The :class:`~.layout.ShardLayout` of one shard (see :mod:`.layout` for what it reads);
    ``file``: the shard already opened for random access. Raises LayoutMismatch/struct.error on bytes
    that do not parse."""
    if fmt is ShardFormat.PARQUET:
        if parquet_metadata is None:
            with store.open_input_file(path) as f:
                parquet_metadata = open_parquet(f).metadata
        return parquet_layout(parquet_metadata)
    own = file is None
    f = file if file is not None else store.open_input_file(path)
    try:
        size = f.size()
        if isinstance(store, FileSystemStore):  # thread-safe reads; a refusal is the store's rd error
            read_at = lambda offset, length: store.read_range_open(path, f, offset, length)
        else:
            read_at = lambda offset, length: f.read_at(length, offset)
        if fmt is ShardFormat.IPC_FILE:
            return ipc_file_layout(read_at, size, 1 if store.local else _HEADER_READS)
        return ipc_stream_layout(read_at, size)
    finally:
        if own:
            f.close()
