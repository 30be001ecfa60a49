"""A Parquet footer's column chunk metadata checked before pyarrow's Python accessors read it.

Why. ``RowGroupMetaData.column(i)`` (pyarrow's Cython binding of ``RowGroupMetaData::ColumnChunk``)
is not declared to raise: a C++ exception in it ends the interpreter (``std::terminate``, SIGABRT)
instead of raising. A footer that C++ parses but whose column chunk it refuses does that: a level
histogram whose length is not the column's maximum level + 1 (one flipped bit of a footer pyarrow
wrote with size statistics), unencoded byte-array bytes on a column that is not a byte array, a
row group with fewer column chunks than the schema has columns, an encrypted column's metadata.
Opening a Parquet shard reads its row counts and byte ranges through that accessor (:mod:`.files`,
:mod:`.layout`), so a damaged never-pinned file crashed the interpreter.

Algorithm. :func:`open_parquet` reads the footer itself (one read of the file's last 64 KiB, as
pyarrow does, and one more for a longer footer), has pyarrow parse it (``pq.read_metadata`` of those
bytes) and hands the metadata to ``pq.ParquetFile``, so the file's tail is read once (and pyarrow's
``FileMetaData.__reduce__``, which re-serializes a damaged footer, segfaulted: never called). The
footer's Thrift bytes are walked once by a compiled loop over the Thrift compact protocol (an
explicit stack of the structs, lists and maps it is inside, each value skipped unless it is on the
path row groups -> column chunks -> column metadata -> size statistics), which records per column chunk its level
histograms' lengths, whether it carries unencoded byte-array bytes or encrypted metadata, and per
row group its column chunk count. Then, per row group, the chunk count must equal the schema's
leaf columns and each chunk must fit its column (histogram lengths, byte-array bytes) and carry no
encrypted metadata; else :func:`check_column_chunks` raises ``ValueError``, which the opening
guard turns into a :class:`~resumable_data.DatasetIntegrityError` naming the shard.

Guarantee: a footer that passes never makes ``RowGroupMetaData.column(i)`` throw for the
conditions above (the ones C++ checks when it builds a column chunk's metadata); a footer the
decoder cannot read (truncated, a list running past the end) raises ``ValueError``.

Cost: the footer read as before (one read of the last 64 KiB) and one compiled pass over its bytes
at open (a 660 KB footer of 200 row groups of 30 columns: a few ms, as walking it through pyarrow's
accessors); a restore reopens the shard at that cost.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from numba import njit

__all__ = ["check_column_chunks", "open_parquet"]

_TAIL = 64 << 10  # the footer read size pyarrow uses
_MAGIC = b"PAR1"

# Thrift compact protocol types
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)
# where a value sits (the roles the walk tracks; everything else is skipped)
_OTHER, _FILE, _GROUPS, _GROUP, _CHUNKS, _CHUNK, _META, _SIZES, _REP, _DEF = range(10)
_MAX_DEPTH = 64


@njit(cache=True, nogil=True)
def _varint(data, pos):  # pragma: no cover - compiled
    """(value, next position) of the varint at ``pos``; position -1 past the end or over 10 bytes."""
    out = 0
    shift = 0
    while pos < data.shape[0] and shift < 70:
        b = np.int64(data[pos])
        pos += 1
        out |= (b & 0x7F) << shift
        if not b & 0x80:
            return out, pos
        shift += 7
    return 0, -1


@njit(cache=True, nogil=True)
def _walk(data, sizes, chunks):  # pragma: no cover - compiled
    """Walk the FileMetaData struct in ``data``; ``sizes[g, j]``: (repetition histogram length,
    definition histogram length, flags: 1 unencoded byte-array bytes, 2 encrypted metadata) of
    chunk ``j`` of row group ``g`` (-1, -1, 0 before); ``chunks[g]``: its chunk count. Returns
    False when the bytes are not one well-formed struct."""
    n = data.shape[0]
    role = np.zeros(_MAX_DEPTH, dtype=np.int64)
    frame = np.zeros(_MAX_DEPTH, dtype=np.int64)  # 0 struct, 1 list, 2 map
    left = np.zeros(_MAX_DEPTH, dtype=np.int64)  # items left (lists; maps: keys and values)
    kinds = np.zeros(_MAX_DEPTH, dtype=np.int64)  # item kind (maps: key << 4 | value)
    field = np.zeros(_MAX_DEPTH, dtype=np.int64)  # last field id (structs)
    depth, pos, g, j = 1, 0, -1, -1
    role[0] = _FILE
    n_groups, n_leaves = sizes.shape[0], sizes.shape[1]
    while depth > 0:
        top = depth - 1
        r = role[top]
        child = _OTHER
        if frame[top] == 0:  # a struct: the next field header
            if pos >= n:
                return False
            head = np.int64(data[pos])
            pos += 1
            kind = head & 0x0F
            if kind == _STOP:
                depth -= 1
                continue
            if head >> 4:
                field[top] += head >> 4
            else:
                v, pos = _varint(data, pos)
                if pos < 0:
                    return False
                field[top] = (v >> 1) ^ -(v & 1)
            f = field[top]
            here = 0 <= g < n_groups and 0 <= j < n_leaves
            if r == _FILE and f == 4 and kind == _LIST:
                child = _GROUPS
            elif r == _GROUP and f == 1 and kind == _LIST:
                child = _CHUNKS
            elif r == _CHUNK:
                if f == 3 and kind == _STRUCT:
                    child = _META
                elif (f == 8 or f == 9) and here:
                    sizes[g, j, 2] |= 2
            elif r == _META and f == 16 and kind == _STRUCT:
                child = _SIZES
            elif r == _SIZES:
                if f == 1 and here:
                    sizes[g, j, 2] |= 1
                elif f == 2 and kind == _LIST:
                    child = _REP
                elif f == 3 and kind == _LIST:
                    child = _DEF
            if kind in (_TRUE, _FALSE):
                continue  # a struct field's bool is its type
        else:  # a list or a map: the next item
            if left[top] == 0:
                depth -= 1
                continue
            left[top] -= 1
            if frame[top] == 1:
                kind = kinds[top]
            else:
                kind = (kinds[top] >> 4) if left[top] % 2 else (kinds[top] & 0x0F)
            if r == _GROUPS:
                child = _GROUP
                g += 1
                j = -1
            elif r == _CHUNKS:
                child = _CHUNK
                j += 1
                if 0 <= g < n_groups:
                    chunks[g] += 1
            if kind in (_TRUE, _FALSE):  # a list's bool is one byte
                pos += 1
                continue
        # the value of ``kind`` at ``pos``, whose role is ``child``
        if kind == _BYTE:
            pos += 1
        elif kind in (_I16, _I32, _I64):
            _, pos = _varint(data, pos)
        elif kind == _DOUBLE:
            pos += 8
        elif kind == _BINARY:
            v, pos = _varint(data, pos)
            if pos < 0 or v < 0 or v > n:
                return False
            pos += v
        elif kind in (_LIST, _SET, _MAP, _STRUCT):
            if depth == _MAX_DEPTH or pos >= n:
                return False
            if kind == _STRUCT:
                frame[depth], field[depth], left[depth] = 0, 0, 0
            elif kind == _MAP:
                v, pos = _varint(data, pos)
                if pos < 0 or v > n:
                    return False
                frame[depth], left[depth], kinds[depth] = 2, 2 * v, 0
                if v:
                    if pos >= n:
                        return False
                    kinds[depth] = np.int64(data[pos])
                    pos += 1
            else:
                head = np.int64(data[pos])
                pos += 1
                v = head >> 4
                if v == 15:
                    v, pos = _varint(data, pos)
                    if pos < 0 or v > n:
                        return False
                frame[depth], left[depth], kinds[depth] = 1, v, head & 0x0F
                if 0 <= g < n_groups and 0 <= j < n_leaves:
                    if child == _REP:
                        sizes[g, j, 0] = v
                    elif child == _DEF:
                        sizes[g, j, 1] = v
            role[depth] = child
            depth += 1
        else:
            return False
        if pos < 0 or pos > n:
            return False
    return True


def open_parquet(f: Any, read_at: Any = None, on_footer: Any = None, **options: Any) -> pq.ParquetFile:
    """``pq.ParquetFile(f, **options)`` over the random-access file ``f`` (``read_at``, ``size``),
    its footer checked by :func:`check_column_chunks` first (``ValueError`` where it fails).
    ``read_at(length, offset)``: how the tail is read (default ``f.read_at``; a remote store's
    :meth:`~.store.ShardStore.read_at` refuses a short body). ``on_footer(offset, data)``: called
    with the footer's span (its Thrift bytes, their length and the magic: the file's last bytes) and
    its bytes as read, before anything parses them (it may raise: a pinned digest they must match)."""
    read_at = read_at if read_at is not None else f.read_at
    size = f.size()
    tail = read_at(min(size, _TAIL), max(0, size - _TAIL))
    if size < 12 or tail[-4:] != _MAGIC:
        raise ValueError(f"not a Parquet file: {size} bytes, ending {bytes(tail[-4:])!r} (expected {_MAGIC!r})")
    length = int.from_bytes(tail[-8:-4], "little")
    if length <= 0 or length + 12 > size:
        raise ValueError(f"a footer of {length} bytes in a file of {size}")
    if length + 8 > len(tail):  # a footer longer than the first read
        tail = read_at(length + 8 - len(tail), size - length - 8) + tail
    footer = bytes(tail[len(tail) - length - 8 : len(tail) - 8])
    if on_footer is not None:
        on_footer(size - length - 8, footer + bytes(tail[-8:]))
    metadata = pq.read_metadata(pa.BufferReader(_MAGIC + footer + tail[-8:]))
    check_column_chunks(metadata, footer)
    return pq.ParquetFile(f, metadata=metadata, **options)


def check_column_chunks(metadata: pq.FileMetaData, footer: bytes) -> None:
    """Raise ``ValueError`` unless every column chunk of the footer ``metadata`` (parsed from the
    Thrift bytes ``footer``) can be read through ``RowGroupMetaData.column(i)`` (see the module docs)."""
    leaves = [metadata.schema.column(i) for i in range(len(metadata.schema))]
    groups = metadata.num_row_groups
    sizes = np.full((groups, len(leaves), 3), -1, dtype=np.int64)
    sizes[:, :, 2] = 0
    chunks = np.zeros(groups, dtype=np.int64)
    if not _walk(np.frombuffer(footer, dtype=np.uint8), sizes, chunks):
        raise ValueError("the footer's metadata is not well-formed Thrift")
    short = np.flatnonzero(chunks != len(leaves))
    if short.size:
        g = int(short[0])
        raise ValueError(f"row group {g} has {chunks[g]} column chunks, the schema {len(leaves)} columns")
    if not leaves:
        return
    levels = np.array([[c.max_repetition_level + 1, c.max_definition_level + 1] for c in leaves], dtype=np.int64)
    not_bytes = np.array([c.physical_type != "BYTE_ARRAY" for c in leaves], dtype=bool)
    bad = ((sizes[:, :, :2] > 0) & (sizes[:, :, :2] != levels)).any(axis=2)
    bad |= (sizes[:, :, 2] & 2) != 0
    bad |= ((sizes[:, :, 2] & 1) != 0) & not_bytes
    if bad.any():
        g, j = (int(x) for x in np.argwhere(bad)[0])
        rep, dfn, flags = sizes[g, j].tolist()
        raise ValueError(
            f"row group {g}, column {j} ({leaves[j].physical_type}): repetition and definition level histograms "
            f"of {rep} and {dfn} entries (expected {levels[j].tolist()} or none), flags {flags} (1: unencoded "
            "byte-array bytes, 2: encrypted metadata; expected neither)"
        )
