"""One opened shard and its units: a unit read whole, by one ranged read, or decoded from bytes read ahead.

Algorithm: a shard is a list of units (an IPC record batch, a Parquet row group). Where the store
memory-maps (local files) every IPC batch is a zero-copy view of the map and :meth:`OpenShard.read_unit`
returns it; a mapped IPC shard whose bodies are compressed (LZ4/ZSTD: ``pyarrow.feather``'s default)
keeps the map and its layout, and unit ``k`` is its message sliced from the map and decompressed on
each read (the caller keeps decoded units: :mod:`.decoded_units`). Elsewhere, with a :class:`~.layout.ShardLayout`, unit ``k`` is one ranged read of
exactly its message (IPC) or its column chunks (Parquet, decoded through :class:`_SpanFile`, which
refuses any read outside the span); without a layout an IPC file is read through its footer, an
IPC stream whole (one unit), a Parquet row group by ``read_row_group``.

Guarantee: a read or decode failure, or a unit holding other than the rows its metadata claimed,
is a :class:`~resumable_data.DatasetIntegrityError` naming the shard and unit; a store that does
not answer, after its retries, a :class:`~resumable_data.StoreUnavailableError`. The file's
identity (:mod:`.identity`) is checked before and after every read from a file (local: ``fstat``
of the descriptor, or ``stat`` of a memory-mapped file's name; remote: by the store's checked ranged
read, or, for a shard read by pyarrow's reader (no layout), a HEAD before and after the read), so
a file that changed is never read as the one opened. Parquet page CRCs are verified where the writer
stored them. Reads through the shard's one reader (a Parquet row group, an IPC file's batch) hold
the shard's lock: a ``pyarrow.parquet.ParquetFile`` is not thread-safe (two threads reading row
groups of one file at once crashed the interpreter or hung), and a user may take from one source in
several threads; a forked child starts with fresh locks.

Cost: a memory-mapped unit: nothing; a compressed mapped unit: its decompression; a ranged unit: one read of its bytes; two identity checks per
read from a file. A restore reopens the shard (see :mod:`.files`); no unit is read until used.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from resumable_data.errors import DatasetIntegrityError, describe
from resumable_data.sources.exact_reads import SeekableRaw
from resumable_data.sources.identity import FileIdentity, changed_error, unchanged, unchanged_at
from resumable_data.sources.layout import ShardFormat, ShardLayout, read_ipc_unit
from resumable_data.sources.layout_cache import drop_layout
from resumable_data.sources.store import LOCAL, ShardStore
from resumable_data.sources.validate import guard, integrity_error

__all__ = ["OpenShard"]


class OpenShard:
    """One opened shard: format, schema, rows per unit and, where memory-mapped, the units'
    zero-copy record batches (``batches``) and the whole map (``whole``); :meth:`read_unit` loads
    unit ``k`` otherwise (by range where the shard has a ``layout``)."""

    def __init__(
        self,
        fmt: ShardFormat,
        schema: pa.Schema,
        unit_rows: list[int],
        *,
        batches: list[pa.RecordBatch] | None = None,
        whole: pa.Buffer | None = None,
        file: Any = None,
        reader: Any = None,
        store: ShardStore = LOCAL,
        path: str = "",
        identity: FileIdentity | None = None,
        layout: ShardLayout | None = None,
    ) -> None:
        self.format, self.schema, self.unit_rows = fmt, schema, unit_rows
        self.batches, self.whole, self.layout = batches, whole, layout
        #: the file's identity when it was opened (:mod:`.identity`)
        self.identity = identity
        self._file, self._reader, self._store, self._path = file, reader, store, path
        self._lock = threading.Lock()  # held around reads through the shared reader (not thread-safe)
        _OPEN.add(self)
        # local files: fstat of the descriptor a reader holds, stat of a memory-mapped file's name
        # (a map keeps no descriptor: no limit on shards); remote ones are checked by their store
        watched = store.local and identity is not None
        self._fileno = file.fileno() if watched and file is not None else None
        self._mapped_path = str(path) if watched and file is None and whole is not None else None
        # a remote shard read by pyarrow's reader (no layout: dictionaries) is checked by a HEAD around
        # each read; units read by range are checked by the store's read itself (read_range_checked)
        self._remote_watch = not store.local and identity is not None
        #: (content hash, size) of the pinned shard, set by :func:`.opening.open_shards`: where a layout
        #: that does not match the bytes may have come from rd's layout cache (:meth:`checked_decode`)
        self.layout_key: tuple[str, int] | None = None

    @property
    def file(self) -> Any:
        """The random-access file opened with the shard (a remote shard read by range: the handle its
        ranged reads without a HEAD go through, :meth:`.store.FileSystemStore.read_range_open`), or None."""
        return self._file

    @property
    def mapped_path(self) -> str | None:
        """The name :meth:`check` stats (a memory-mapped local file with an identity), else None."""
        return self._mapped_path

    def check(self, when: str) -> None:
        """Raise :func:`~.identity.changed_error` if the open file is no longer what was opened
        (local files: ``fstat`` of the reader's descriptor, or ``stat`` of a memory-mapped file's
        name; remote: a HEAD, its size and ETag; a remote unit read by range is checked by the
        store's read instead and never comes here)."""
        recorded = self.identity
        if recorded is None:  # nothing recorded, nothing watched (see __init__)
            return
        if self._fileno is not None:
            same = unchanged(self._fileno, recorded)
        elif self._mapped_path is not None:
            same = unchanged_at(self._mapped_path, recorded)
        elif self._remote_watch:
            now = self._store.retrying(self._path, "stat (HEAD)", lambda: self._store.identity(self._path))
            if recorded.differences(now):
                raise changed_error(str(self._path), when, recorded, now)
            return
        else:
            return
        if same:
            return
        raise changed_error(str(self._path), when, recorded, self._store.identity(self._path, self._file))

    def read_unit(self, k: int) -> pa.RecordBatch:
        """Unit ``k`` as one record batch (read from the store unless memory-mapped); a read or
        decode failure, or a unit holding other than the rows its metadata claimed, is a
        DatasetIntegrityError naming the shard and unit (not yet validated: see :mod:`.validate`);
        a store that does not answer, after its retries, a
        :class:`~resumable_data.StoreUnavailableError`. The file's identity is checked before and
        after the read."""
        if self.batches is not None:
            return self.batches[k]
        self.check(f"before reading record batch {k}")
        batch = guard(
            str(self._path),
            f"record batch {k}",
            lambda: self._store.retrying(self._path, f"read of unit {k}", lambda: self._read_unit(k)),
        )
        self.check(f"after reading record batch {k}")
        return self._rows_checked(k, batch)

    def unit_span(self, k: int) -> tuple[int, int] | None:
        """(offset, length) of unit ``k``'s bytes where one ranged read holds all it needs (a remote
        shard with a layout: an IPC message, a Parquet row group's column chunks); else None."""
        if self.layout is None or self.whole is not None:  # no layout, or memory-mapped (read from the map)
            return None
        offset, length, _ = self.layout.units[k]
        return offset, length

    def decode_unit(self, k: int, data: pa.Buffer) -> pa.RecordBatch:
        """Unit ``k`` decoded from ``data``, the bytes of :meth:`unit_span` (read ahead): the IPC
        message with the schema read at open, or the row group through the footer read at open
        (the bytes outside the span are never asked for). Checked as :meth:`read_unit` checks."""
        span = self.unit_span(k)
        assert span is not None, "decode_unit: unit k is read by range (the caller checked unit_span)"
        offset = span[0]
        batch = guard(str(self._path), f"record batch {k}", lambda: self._decode_unit(k, offset, data))
        return self._rows_checked(k, batch)

    def checked_decode(self, k: int, decode: Callable[[], pa.RecordBatch]) -> pa.RecordBatch:
        """``decode()`` (unit ``k`` decoded from its span's bytes, validated); where it fails and the
        shard's layout is the one rd's layout cache holds for it (:mod:`.layout_cache`), the cache
        entry is removed and the error names it, with the fix that works: open the dataset again
        (its layout is then built from the store's bytes)."""
        try:
            return decode()
        except DatasetIntegrityError as exc:
            key = self.layout_key
            entry = drop_layout(key[0], key[1], self.layout, str(exc)) if key is not None else None
            if entry is None:
                raise
            raise DatasetIntegrityError(
                describe(
                    "shard",
                    str(self._path),
                    f"record batch {k} where the layout from rd's layout cache entry {entry} says it is "
                    f"(the entry does not describe the object's bytes: {exc}); the entry was removed, "
                    "nothing of this unit was delivered",
                    "open the dataset again (rd.ArrowShards builds the layout from the store's bytes, "
                    "then remembers it); or re-pin with rd.pin(prefix, filesystem=...) to keep layouts in the manifest",
                )
            ) from exc

    def _rows_checked(self, k: int, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` (unit ``k``), unless its row count is not the one its metadata claims."""
        if batch.num_rows != self.unit_rows[k]:
            raise integrity_error(
                str(self._path),
                f"record batch {k}",
                ValueError(f"it holds {batch.num_rows} rows, its metadata claims {self.unit_rows[k]}"),
            )
        return batch

    def _decode_unit(self, k: int, offset: int, data: pa.Buffer) -> pa.RecordBatch:
        if self.format is not ShardFormat.PARQUET:
            return read_ipc_unit(data, self.schema, self.unit_rows[k])
        span = pa.PythonFile(_SpanFile(offset, data, self._reader.metadata.serialized_size, self._file), mode="r")
        table = pq.ParquetFile(span, metadata=self._reader.metadata, page_checksum_verification=True).read_row_group(k)
        table = table.combine_chunks()
        if table.num_rows:
            return table.to_batches()[0]
        return pa.RecordBatch.from_pylist([], schema=table.schema)

    def _read_unit(self, k: int) -> pa.RecordBatch:
        if self.layout is not None and self.format is not ShardFormat.PARQUET:
            offset, length, rows = self.layout.units[k]
            if self.whole is not None:  # a compressed IPC shard's map: the message, decompressed here
                return read_ipc_unit(self.whole.slice(offset, length), self.schema, rows)
            return read_ipc_unit(self._file.read_at(length, offset), self.schema, rows)
        if self.format is ShardFormat.IPC_FILE:
            with self._lock:
                return self._reader.get_batch(k)
        if self.format is ShardFormat.PARQUET:
            with self._lock:
                table = self._reader.read_row_group(k)
        else:
            with self._store.open_exact(self._path) as f:  # a short body refused
                table = pa.ipc.open_stream(f).read_all()
        table = table.combine_chunks()
        if table.num_rows:
            return table.to_batches()[0]
        return pa.RecordBatch.from_pylist([], schema=table.schema)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


#: every open shard of this process, whose locks a forked child replaces (a thread of the parent
#: may have held one at the fork)
_OPEN: weakref.WeakSet[OpenShard] = weakref.WeakSet()


def _reset_locks() -> None:
    for shard in list(_OPEN):
        shard._lock = threading.Lock()


if sys.platform != "win32":  # Windows has no fork, hence nothing to reset
    os.register_at_fork(after_in_child=_reset_locks)


class _SpanFile(SeekableRaw):
    """The bytes ``[offset, offset + len(data))`` of a file, read-only and seekable: reads outside
    the span raise (a Parquet row group decoded from its column chunks alone)."""

    def __init__(self, offset: int, data: pa.Buffer, footer_size: int, file: Any) -> None:
        self._offset, self._data, self._pos = offset, memoryview(data), 0
        self._size = file.size() if file is not None else offset + len(data) + footer_size

    def readinto(self, b: Any) -> int:
        a = self._pos - self._offset
        if a < 0 or a + len(b) > len(self._data):
            raise OSError(f"read of bytes [{self._pos}, {self._pos + len(b)}) outside the unit's span")
        b[: len(b)] = self._data[a : a + len(b)]
        self._pos += len(b)
        return len(b)
