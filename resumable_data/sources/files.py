"""Opening one shard for reads: its format's metadata checked, its units counted, its identity recorded.

Every function takes the :class:`~resumable_data.sources.store.ShardStore` the files live on
(default: the local store), so local and remote shards share one code path. Which files are shards
is :mod:`.discovery`; a shard's format and layout :mod:`.shard_format`; schemas
:mod:`.shard_schema`; reading an opened shard's units :mod:`.shard_units`. Their public names are
importable from here too.

Algorithm: :func:`open_shard` splits a shard into units (an IPC record batch, a Parquet row
group): where the store memory-maps (local files) every IPC batch is a zero-copy view of the map,
unless a body is compressed (LZ4/ZSTD, what ``pyarrow.feather.write_feather`` writes by default).
Opening walks the batches while each is a view of the map (free); at the first that is not (its
body was decompressed into memory of its own, then dropped) the shard keeps its map and its
layout (pinned, or built from the map) and each unit is decompressed when a record in it is
requested, never the whole shard at open; elsewhere an IPC shard with a :class:`~.layout.ShardLayout` (pinned in the manifest, or built by
:func:`~.shard_format.build_layout`, file and stream format alike) costs one open and one read of
its schema message, and each unit is one ranged read of exactly its message, decoded when a record
in it is first requested. Parquet is read by row group on demand everywhere. IPC shards without a
layout (dictionary-encoded) are read as before: an IPC file through its footer and batch headers,
an IPC stream whole, as one unit, on first use. Remote reads go through the store's retries
(:mod:`.retry`). Content hashes are :func:`resumable_data._io.hash_file` (xxh3-128 of the bytes,
streamed): the store decides how the bytes are streamed, never what the digest is.

Guarantee: every open or read error of a shard (pyarrow, thrift, decoders, the footer parsing
here) is a :class:`~resumable_data.DatasetIntegrityError` naming the shard (:mod:`.validate`);
opening reads metadata only, so no batch's data is touched before :mod:`.validate` checked it.
Opening also checks what the metadata claims against itself and the data, so a damaged shard that
was never pinned clean (auto-pin hashes the damaged bytes) is still an rd error, never a raw
exception: every field name, nested ones included, must be valid UTF-8
(:func:`~.shard_schema.check_schema_names`); a Parquet footer's row counts must agree (file rows =
the sum of its row groups' rows; a row group's rows = each flat column chunk's value count), and a
unit read later must hold exactly the rows its metadata claimed
(:meth:`~.shard_units.OpenShard.read_unit`). Each opened shard records its file's identity
(:mod:`.identity`), which :meth:`~.shard_units.OpenShard.check` compares with the file now.

A remote shard opened with a pinned layout that has a ``meta_digest`` (manifest schema 4) has the
metadata the open reads (the IPC schema message, the Parquet footer) hashed and compared with it
before it is parsed (:func:`~.unit_digests.check_meta`): an object replaced since the pin, even with
its ETag answered as pinned, fails the open. Layouts built here record that span (``meta_span``) for
``rd.pin`` to hash.

Cost: :func:`read_shard_meta` touches only metadata and builds the layout (IPC file footer and
batch headers, IPC stream message headers, Parquet footer: see :mod:`.layout`); opening a remote
shard with a layout: one open and one small read; a local shard: one memory map. A restore (an
unpickled source) opens each shard again at that cost.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from resumable_data._io import HASH_CHUNK_BYTES, hash_file
from resumable_data.errors import ConfigError, describe
from resumable_data.sources.discovery import (
    LEGACY_MANIFEST_NAME,
    MANIFEST_NAME,
    SHARD_SUFFIXES,
    discover_shards,
    file_list,
    hf_dataset_files,
    refuse_hive_partitions,
    resolve_files,
)
from resumable_data.sources.identity import FileIdentity
from resumable_data.sources.layout import LayoutMismatch, ShardFormat, ShardLayout, parquet_layout
from resumable_data.sources.parquet_footer import open_parquet
from resumable_data.sources.shard_format import build_layout, detect_format, ipc_file_batch_rows
from resumable_data.sources.shard_schema import canonical_schema, check_same_schema, check_schema_names
from resumable_data.sources.shard_units import OpenShard
from resumable_data.sources.store import LOCAL, ShardStore
from resumable_data.sources.unit_digests import check_meta
from resumable_data.sources.validate import FIX, DamagedShardError, guard

__all__ = [
    "HASH_CHUNK_BYTES",
    "LEGACY_MANIFEST_NAME",
    "MANIFEST_NAME",
    "SHARD_SUFFIXES",
    "OpenShard",
    "ShardFormat",
    "ShardMeta",
    "build_layout",
    "canonical_schema",
    "check_same_schema",
    "check_schema_names",
    "detect_format",
    "discover_shards",
    "file_list",
    "hash_file",
    "hf_dataset_files",
    "ipc_file_batch_rows",
    "open_shard",
    "read_shard_meta",
    "refuse_hive_partitions",
    "resolve_files",
]


@dataclass(frozen=True)
class ShardMeta:
    """What a shard's metadata says: its format, row count, canonical schema and unit layout
    (None where :mod:`.layout` has none: IPC with dictionaries)."""

    format: ShardFormat
    num_rows: int
    schema: pa.Schema
    layout: ShardLayout | None = None


def _try_layout(path: Any, store: ShardStore, fmt: ShardFormat, f: Any) -> ShardLayout | None:
    """The layout, or None for bytes pyarrow reads but :mod:`.layout` does not index (read as
    before, without ranges)."""
    try:
        return build_layout(path, store, fmt, f)
    except (LayoutMismatch, struct.error):
        return None


def _views_of(batch: pa.RecordBatch, whole: pa.Buffer) -> bool:
    """Whether every buffer of ``batch`` lies in ``whole`` (a zero-copy view of the map; not so
    for a compressed body, which pyarrow decompresses into memory of its own)."""
    lo, hi = whole.address, whole.address + whole.size
    for column in batch.columns:
        for b in column.buffers():
            if b is not None and b.size and not lo <= b.address <= b.address + b.size <= hi:
                return False
    return True


def open_shard(
    path: Any,
    store: ShardStore = LOCAL,
    fmt: ShardFormat | None = None,
    layout: ShardLayout | None = None,
    *,
    with_layout: bool = False,
    metadata_only: bool = False,
) -> OpenShard:
    """Open one shard for reading (see the module docstring for what each format costs).

    ``layout``: the shard's pinned :class:`~.layout.ShardLayout`: a remote IPC shard then costs one
    open and one read of its schema message, and each unit is read by range. ``with_layout``: build
    the layout while opening (pinning; a remote shard without a pinned one). ``metadata_only``: the
    caller reads the metadata (format, rows, schema, layout) and closes the shard without reading a
    unit, so no identity is recorded (:attr:`OpenShard.identity` None): on a remote store that saves
    the HEAD an identity costs, and leaves the stat of the verify before the open for the open that
    reads (one HEAD per shard less when pinning and when building layouts). Reads only metadata
    (footer, schema, message headers; no batch body is touched); any failure is a
    :class:`~resumable_data.DatasetIntegrityError` naming the shard (:mod:`.validate`)."""
    return guard(
        str(path),
        "metadata (footer/schema/batch headers)",
        lambda: store.retrying(path, "open", lambda: _open_shard(path, store, fmt, layout, with_layout, metadata_only)),
    )


def _parquet_rows(pf: pq.ParquetFile) -> list[int]:
    """Rows per row group, checked against the footer's other counts (ValueError if they differ)."""
    md = pf.metadata
    rows = [md.row_group(g).num_rows for g in range(md.num_row_groups)]
    if md.num_rows != sum(rows) or any(n < 0 for n in rows):
        raise ValueError(f"the footer claims {md.num_rows} rows, its row groups {rows}")
    flat = [i for i in range(md.num_columns) if pf.schema.column(i).max_repetition_level == 0]
    for g, n in enumerate(rows):
        rg = md.row_group(g)
        for i in flat:
            values = rg.column(i).num_values
            if values != n:
                raise ValueError(f"row group {g} claims {n} rows, its column {i} holds {values} values")
    return rows


def _open_shard(
    path: Any,
    store: ShardStore,
    fmt: ShardFormat | None,
    layout: ShardLayout | None,
    with_layout: bool,
    metadata_only: bool = False,
) -> OpenShard:
    def identity_of(path: Any, opened: Any = None) -> FileIdentity | None:
        return None if metadata_only else store.identity(path, opened)

    if layout is not None:
        fmt = layout.format
    fmt = fmt or detect_format(path, store)
    if fmt is ShardFormat.PARQUET:
        f = store.open_input_file(path)
        identity = identity_of(path, f)
        footer: list[tuple[int, int]] = []

        def on_footer(offset: int, data: bytes) -> None:  # before the footer is parsed
            footer.append((offset, len(data)))
            if layout is not None and not store.local:
                check_meta(str(path), layout, offset, data, "its Parquet footer")

        pf = open_parquet(  # its footer checked (.parquet_footer), read refusing a short body
            f, lambda n, o: store.read_at(path, f, n, o), on_footer, page_checksum_verification=True
        )
        check_schema_names(pf.schema_arrow)
        rows = _parquet_rows(pf)
        if layout is not None and layout.unit_rows != rows:
            raise LayoutMismatch(f"row groups of {rows} rows where the layout says {layout.unit_rows}")
        if layout is not None and not store.local:  # the footer just read gives the spans ranged reads use
            spans = parquet_layout(pf.metadata).units
            if layout.units != spans:
                bad = next(g for g, (a, b) in enumerate(zip(layout.units, spans)) if a != b)
                raise LayoutMismatch(
                    f"row group {bad} spans {list(spans[bad][:2])} in the footer where the layout says "
                    f"{list(layout.units[bad][:2])}"
                )
        if layout is None and with_layout:
            layout = parquet_layout(pf.metadata, footer[-1])
        return OpenShard(
            fmt, pf.schema_arrow, rows, file=f, reader=pf, store=store, path=path, identity=identity, layout=layout
        )
    mapped = store.memory_map(path)
    if mapped is not None:  # every record batch is a zero-copy view of the map
        identity = identity_of(path, mapped)
        whole = mapped.read_buffer()
        mapped.close()  # the buffer keeps the map alive; no descriptor held per shard
        if fmt is ShardFormat.IPC_FILE:
            reader = pa.ipc.open_file(pa.BufferReader(whole))
            each = (reader.get_batch(i) for i in range(reader.num_record_batches))
        else:
            reader = pa.ipc.open_stream(pa.BufferReader(whole))
            each = iter(reader)
        check_schema_names(reader.schema)
        batches: list[pa.RecordBatch] = []
        for batch in each:
            if not _views_of(batch, whole):  # a compressed body: every unit decoded on demand instead
                if layout is None:
                    layout = _try_layout(path, store, fmt, pa.BufferReader(whole))
                if layout is not None:
                    if layout.units and layout.units[-1][0] + layout.units[-1][1] > whole.size:
                        raise LayoutMismatch(f"the file has {whole.size} bytes, fewer than its layout spans")
                    return OpenShard(
                        fmt,
                        reader.schema,
                        layout.unit_rows,
                        whole=whole,
                        store=store,
                        path=path,
                        identity=identity,
                        layout=layout,
                    )
                batches.append(batch)  # no layout (dictionaries): every batch decoded now and held
                batches.extend(each)
                break
            batches.append(batch)
        if layout is None and with_layout:
            layout = _try_layout(path, store, fmt, pa.BufferReader(whole))
        return OpenShard(
            fmt,
            reader.schema,
            [b.num_rows for b in batches],
            batches=batches,
            whole=whole,
            store=store,
            path=path,
            identity=identity,
            layout=layout,
        )
    if layout is not None or with_layout:  # one open, one read of the schema message; units by range
        f = store.open_input_file(path)
        if layout is None:
            layout = _try_layout(path, store, fmt, f)
            if layout is None:
                f.close()
    if layout is not None:
        if layout.units and layout.units[-1][0] + layout.units[-1][1] > f.size():
            f.close()
            raise LayoutMismatch(f"the object has {f.size()} bytes, fewer than its layout spans")
        message = layout.schema  # (offset, length) of the IPC schema message; None only for Parquet
        if message is None:
            f.close()
            raise LayoutMismatch("an IPC layout without its schema message")
        data = store.read_at(path, f, message[1], message[0])
        check_meta(str(path), layout, message[0], data, "its IPC schema message")  # before it is parsed
        schema = pa.ipc.read_schema(pa.py_buffer(data))
        check_schema_names(schema)
        return OpenShard(
            fmt,
            schema,
            layout.unit_rows,
            file=f,
            store=store,
            path=path,
            identity=identity_of(path, f),
            layout=layout,
        )
    if fmt is ShardFormat.IPC_FILE:  # not memory-mapped, no layout: pyarrow's reader, a short body refused
        f = store.open_exact(path)
        reader = pa.ipc.open_file(f)
        try:
            rows = ipc_file_batch_rows(f)
        except (ValueError, struct.error):  # unexpected layout: count by reading the batches
            rows = []
        if len(rows) != reader.num_record_batches:
            rows = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
        check_schema_names(reader.schema)
        return OpenShard(
            fmt, reader.schema, rows, file=f, reader=reader, store=store, path=path, identity=identity_of(path, f)
        )
    identity = identity_of(path)
    with store.open_exact(path) as f:  # dictionaries, no layout: one unit, read whole on first use
        reader = pa.ipc.open_stream(f)
        schema, rows = reader.schema, sum(b.num_rows for b in reader)
    check_schema_names(schema)
    return OpenShard(fmt, schema, [rows], store=store, path=path, identity=identity)


def read_shard_meta(path: Any, store: ShardStore = LOCAL) -> ShardMeta:
    """Format, row count, schema and layout of one shard, from its metadata only."""
    fmt = guard(str(path), "format detection", lambda: detect_format(path, store))
    try:
        shard = open_shard(path, store, fmt, with_layout=True, metadata_only=True)  # closed below
    except DamagedShardError as exc:  # its bytes (a store refusing or cutting a read short: its own error)
        raise ConfigError(
            describe(
                "shard",
                str(path),
                f"a readable {fmt.value} shard (read failed: {str(exc).removesuffix(f'; fix: {FIX}')})",
                f"remove or rewrite the file, then pin again (a file that is not a shard must not be named "
                f"*{', *'.join(SHARD_SUFFIXES)} in the dataset's folder)",
            )
        ) from exc
    shard.close()
    return ShardMeta(fmt, sum(shard.unit_rows), shard.schema, shard.layout)
