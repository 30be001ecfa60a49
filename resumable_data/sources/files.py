"""Shard files on any store: discovery, format detection, metadata and opening for reads.

Every function takes the :class:`~resumable_data.sources.store.ShardStore` the files live on
(default: the local store), so local and remote shards share one code path.

Algorithm: a directory is listed recursively; every file whose suffix is one of
:data:`SHARD_SUFFIXES` (and whose name does not start with ``.``) is a shard, ordered by its
relative POSIX path (byte-wise string sort), so the order is the same on every OS and store.
A Hugging Face folder is read as HF defines it (:func:`hf_dataset_files`): the data files its
``state.json`` lists, never HF's ``cache-*.arrow`` files written beside them.
Arrow IPC files are recognised by content (the ``ARROW1`` magic means IPC *file* format, anything
else is read as IPC *stream* format, which is what Hugging Face ``datasets`` writes); ``.parquet``
files are Parquet. :func:`open_shard` splits a shard into units (an IPC record batch, a Parquet row
group): where the store memory-maps (local files) every IPC batch is a zero-copy view of the map;
elsewhere an IPC shard with a :class:`~.layout.ShardLayout` (pinned in the manifest, or built by
:func:`build_layout`, file and stream format alike) costs one open and one read of its schema
message, and each unit is one ranged read of exactly its message, decoded when a record in it is
first requested. Parquet is read by row group on demand everywhere. IPC shards without a layout
(dictionary-encoded) are read as before: an IPC file through its footer and batch headers, an IPC
stream whole, as one unit, on first use. Remote reads go through the store's retries
(:mod:`.retry`).

Guarantee: :func:`canonical_schema` is the schema's text form without schema or field metadata
(``Schema.to_string(show_field_metadata=False, show_schema_metadata=False)``): it names every
field, type and nullability, is stable across pyarrow versions for the types Arrow has had since
1.0, and ignores writer-specific metadata (e.g. the ``huggingface`` key), which does not change
any record. Binary ``Schema.serialize()`` bytes were rejected as the canonical form because the
flatbuffer layout is an implementation detail of the writer. Content hashes are
:func:`resumable_data._io.hash_file` (xxh3-128 of the bytes, streamed): the store decides how the
bytes are streamed, never what the digest is.

Every open or read error of a shard (pyarrow, thrift, decoders, the footer parsing here) is a
:class:`~resumable_data.DatasetIntegrityError` naming the shard (:mod:`.validate`); opening reads
metadata only, so no batch's data is touched before :mod:`.validate` checked it. Opening also
checks what the metadata claims against itself and the data, so a damaged shard that was never
pinned clean (auto-pin hashes the damaged bytes) is still an rd error, never a raw exception: every
field name, nested ones included, must be valid UTF-8 (:func:`check_schema_names`); a Parquet
footer's row counts must agree (file rows = the sum of its row groups' rows; a row group's rows =
each flat column chunk's value count), and a unit read later must hold exactly the rows its
metadata claimed (:meth:`OpenShard.read_unit`). Parquet page CRCs are verified where the writer
stored them. Each opened shard records its file's identity (:mod:`.identity`), which
:meth:`OpenShard.check` compares with the file now.

Cost: discovery is one listing; :func:`read_shard_meta` touches only metadata and builds the
layout (IPC file footer and batch headers, IPC stream message headers, Parquet footer: see
:mod:`.layout`); opening a remote shard with a layout: one open and one small read; hashing reads
every byte once.
"""

from __future__ import annotations

import io
import os
import posixpath
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from resumable_data._io import HASH_CHUNK_BYTES, hash_file
from resumable_data.errors import ConfigError, ConfigTypeError, DatasetIntegrityError, describe
from resumable_data.sources.identity import FileIdentity, changed_error, unchanged, unchanged_at
from resumable_data.sources.layout import (
    ARROW_FILE_MAGIC,
    LayoutMismatch,
    ShardFormat,
    ShardLayout,
    footer_blocks,
    ipc_file_layout,
    ipc_stream_layout,
    parquet_layout,
    read_ipc_unit,
)
from resumable_data.sources.store import LOCAL, ShardStore
from resumable_data.sources.validate import guard, integrity_error

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
    "hash_file",
    "ipc_file_batch_rows",
    "open_shard",
    "read_shard_meta",
    "refuse_hive_partitions",
    "resolve_files",
]

#: The manifest ``rd.pin(folder)`` writes (hidden: other readers skip it, see :mod:`.manifests`).
MANIFEST_NAME = ".rd-manifest.json"
#: The name earlier versions wrote; still read, never written.
LEGACY_MANIFEST_NAME = "rd-manifest.json"
SHARD_SUFFIXES = (".arrow", ".ipc", ".feather", ".parquet")
_HEADER_READS = 8  # a remote IPC file's batch headers read at once while its layout is built


@dataclass(frozen=True)
class ShardMeta:
    """What a shard's metadata says: its format, row count, canonical schema and unit layout
    (None where :mod:`.layout` has none: IPC with dictionaries)."""

    format: ShardFormat
    num_rows: int
    schema: pa.Schema
    layout: ShardLayout | None = None


def canonical_schema(schema: pa.Schema) -> str:
    """The schema's canonical text (names, types, nullability; no metadata)."""
    return schema.to_string(show_field_metadata=False, show_schema_metadata=False)


def _check_type_names(t: pa.DataType) -> None:
    if isinstance(t, pa.DictionaryType):
        _check_type_names(t.value_type)
        return
    if isinstance(t, (pa.ListType, pa.LargeListType, pa.FixedSizeListType)):
        _check_field_names(t.value_field)
        return
    if isinstance(t, pa.MapType):
        _check_field_names(t.key_field)
        _check_field_names(t.item_field)
        return
    for i in range(t.num_fields):  # struct, union, list views, run-end encoded
        _check_field_names(t.field(i))


def _check_field_names(f: pa.Field) -> None:
    f.name.encode("utf-8")  # decoding the name raises UnicodeDecodeError on invalid UTF-8
    _check_type_names(f.type)


def check_schema_names(schema: pa.Schema) -> None:
    """Raise (UnicodeDecodeError) unless every field name, nested ones included, is valid UTF-8."""
    for i in range(len(schema)):
        _check_field_names(schema.field(i))


def check_same_schema(first_rel: str, first: str, rel: str, other: str) -> None:
    """The one schema-mismatch error (pinning and opening, on every store): names the shard and
    shows both canonical schemas."""
    if other != first:
        raise ConfigError(
            describe(
                "shard",
                rel,
                f"the schema of the first shard {first_rel!r} ({first!r})",
                f"rewrite {rel!r} with the common schema or pin it separately; it has {other!r}",
            )
        )


# -- discovery ----------------------------------------------------------------------------------
def discover_shards(root: Any, store: ShardStore = LOCAL) -> list[str]:
    """Relative POSIX paths of every shard file under ``root``, sorted (remote: one listing; a
    prefix holding nothing is not a directory)."""
    if not store.local:
        try:
            found = store.list_files(root)
        except (FileNotFoundError, NotADirectoryError):
            found = []
        if found:
            return [r for r in found if r.endswith(SHARD_SUFFIXES) and not posixpath.basename(r).startswith(".")]
    if not store.is_dir(root):
        raise ConfigError(
            describe(
                "path",
                str(root),
                "an existing directory (or prefix) of shard files",
                "pass the directory that holds the .arrow/.ipc/.feather/.parquet shards "
                "(and, for remote data, the right filesystem and bucket/prefix)",
            )
        )
    listed = store.list_files(root)
    found = [r for r in listed if r.endswith(SHARD_SUFFIXES) and not posixpath.basename(r).startswith(".")]
    return hf_dataset_files(root, store, listed, found)


HF_STATE = "state.json"  # datasets' save_to_disk: lists the folder's data files
HF_INFO = "dataset_info.json"  # datasets' folders (save_to_disk and load_dataset's cache)
_HF_CACHE_FILE = re.compile(r"cache-[0-9a-f]{16}(_\d{5}_of_\d{5})?\.arrow")
_HF_STATE_MAX_BYTES = 1 << 20


def hf_dataset_files(root: Any, store: ShardStore, listed: list[str], found: list[str]) -> list[str]:
    """``found`` without the files Hugging Face ``datasets`` writes beside a dataset's own data.

    A folder holding HF's ``state.json`` (written by ``save_to_disk``) is read as HF defines the
    dataset: its shards are exactly the ``_data_files`` that ``state.json`` lists (a listed file
    that is missing is an error); anything else there (``cache-*.arrow`` written by ``.shuffle()``,
    ``.select()``, ``.flatten_indices()``, ``.map()`` on a ``load_from_disk`` dataset) is not part
    of it. A folder holding only ``dataset_info.json`` (``load_dataset``'s cache) leaves out the
    files named like HF's cache files (``cache-<16 hex digits>[_NNNNN_of_NNNNN].arrow``).
    ``state.json`` that is not HF's shape (no ``_data_files`` list of ``{"filename": ...}``) changes
    nothing. The JSON files are never shards (their suffix is not a shard suffix).
    """
    names = set(listed)
    dirs = {posixpath.dirname(r) for r in found}
    keep: dict[str, set[str] | None] = {}  # dir -> the only shard names kept (None: HF cache names out)
    for d in dirs:
        state_rel = posixpath.join(d, HF_STATE) if d else HF_STATE
        info_rel = posixpath.join(d, HF_INFO) if d else HF_INFO
        files = _hf_state_files(store, posixpath.join(str(root), state_rel)) if state_rel in names else None
        if files is not None:
            missing = [f for f in files if (posixpath.join(d, f) if d else f) not in names]
            if missing:
                raise ConfigError(
                    describe(
                        "path",
                        str(root),
                        f"every data file {state_rel!r} (Hugging Face save_to_disk) lists",
                        f"{missing} missing: restore them, or save the dataset again with save_to_disk",
                    )
                )
            twice = sorted({f for f in files if files.count(f) > 1})
            if twice:  # HF would read such a file twice; a set of names would silently read it once
                raise ConfigError(
                    describe(
                        "path",
                        str(root),
                        f"each data file listed once in {state_rel!r} (Hugging Face save_to_disk)",
                        f"{twice} listed more than once (a damaged or hand-edited file): save the dataset again "
                        "with save_to_disk, or restore state.json",
                    )
                )
            keep[d] = set(files)
        elif info_rel in names:
            keep[d] = None
    if not keep:
        return found
    out = []
    for r in found:
        d, name = posixpath.split(r)
        if d not in keep:
            out.append(r)
        elif keep[d] is None:
            if not _HF_CACHE_FILE.fullmatch(name):
                out.append(r)
        elif name in keep[d]:
            out.append(r)
    return out


def _hf_state_files(store: ShardStore, path: str) -> list[str] | None:
    """The ``_data_files`` names of HF's ``state.json`` at ``path``, or None if not HF's shape."""
    import json

    raw = store.read_small(path, _HF_STATE_MAX_BYTES)
    try:
        state = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    files = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(files, list) or not files:
        return None
    names = [f.get("filename") if isinstance(f, dict) else None for f in files]
    if not all(isinstance(n, str) and n and "/" not in n and n.endswith(SHARD_SUFFIXES) for n in names):
        return None
    return names


def refuse_hive_partitions(root: Any, rel_paths: list[str]) -> None:
    """Shards under ``key=value`` directories carry columns in their paths, which rd does not read.

    pyarrow, pandas and Spark add those partition columns to every row; reading the files alone
    would make them vanish without a word, so a directory laid out that way is refused."""
    keys = sorted(
        {
            part.split("=", 1)[0]
            for r in rel_paths
            for part in r.split("/")[:-1]
            if "=" in part and not part.startswith("=")
        }
    )
    if keys:
        example = next(r for r in rel_paths if "=" in r.rsplit("/", 1)[0])
        raise ConfigError(
            describe(
                "path",
                str(root),
                f"shard files whose paths hold no data, but {example!r} is in a hive-style partition "
                f"directory: its partition column(s) {keys} live in the directory names, which rd does not "
                "read, so they would vanish from every row",
                f"write the columns into the files once: rd.write_arrow_shards(pyarrow.dataset.dataset("
                f"{str(root)!r}, partitioning='hive').to_table(), NEW_DIR, rows_per_batch=1024) and pass NEW_DIR; "
                "or, to read the files without those columns, pass the list of files instead of the directory",
            )
        )


def file_list(files: Any) -> list[str | os.PathLike]:
    """``files`` (anything but a path: a list, tuple or other iterable of shard paths) as a list, or
    :class:`ConfigTypeError` when it is not an iterable of ``str`` / ``os.PathLike`` (``None``, a number,
    bytes, a tensor: a dataset path mistyped)."""
    try:
        out = None if isinstance(files, (bytes, bytearray)) else list(files)
    except TypeError:
        out = None
    if out is None or not all(isinstance(f, (str, os.PathLike)) for f in out):
        raise ConfigTypeError(
            describe(
                "path",
                files,
                "a directory or shard file (str or os.PathLike), or a list of shard files",
                "pass the dataset's folder, e.g. 'data/' or pathlib.Path('data')",
            )
        )
    return out


def resolve_files(files: Sequence[str | os.PathLike], store: ShardStore = LOCAL) -> tuple[str, list[str]]:
    """(root, relative POSIX paths) for an explicit list of shard files, order kept; the root is
    their deepest common directory."""
    if len(files) == 0:
        raise ConfigError(
            describe(
                "path",
                list(files),
                "a non-empty list of shard files",
                "pass at least one .arrow/.ipc/.feather/.parquet file",
            )
        )
    paths = []
    for f in files:
        p = store.resolve(f)
        if not p.endswith(SHARD_SUFFIXES) or store.stat(p) is None:
            raise ConfigError(
                describe(
                    "path",
                    str(f),
                    f"an existing shard file ({', '.join(SHARD_SUFFIXES)})",
                    "check the file list (and the filesystem)",
                )
            )
        paths.append(p)
    root = posixpath.commonpath([posixpath.dirname(p) for p in paths])
    rel = [posixpath.relpath(p, root) if root else p for p in paths]
    if len(set(rel)) != len(rel):
        raise ConfigError(describe("path", rel, "each shard file listed once", "remove the duplicates"))
    return root, rel


def detect_format(path: Any, store: ShardStore = LOCAL) -> ShardFormat:
    """The shard format of ``path``, by suffix and (for Arrow IPC) by the file magic."""
    if str(path).endswith(".parquet"):
        return ShardFormat.PARQUET
    with store.open_input_stream(path) as f:
        head = f.read(len(ARROW_FILE_MAGIC))
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
    from resumable_data.sources.layout import message_info

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
                parquet_metadata = pq.ParquetFile(f).metadata
        return parquet_layout(parquet_metadata)
    own = file is None
    f = store.open_input_file(path) if own else file
    try:
        size = f.size()
        read_at = lambda offset, length: store.retrying(
            path, f"read of bytes [{offset}, {offset + length})", lambda: f.read_at(length, offset)
        )
        if fmt is ShardFormat.IPC_FILE:
            return ipc_file_layout(read_at, size, 1 if store.local else _HEADER_READS)
        return ipc_stream_layout(read_at, size)
    finally:
        if own:
            f.close()


# -- opening --------------------------------------------------------------------------------------
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
        # local files: fstat of the descriptor a reader holds, stat of a memory-mapped file's name
        # (a map keeps no descriptor: no limit on shards); remote ones are checked by their store
        watched = store.local and identity is not None
        self._fileno = file.fileno() if watched and file is not None else None
        self._mapped_path = str(path) if watched and file is None and batches is not None else None

    @property
    def mapped_path(self) -> str | None:
        """The name :meth:`check` stats (a memory-mapped local file with an identity), else None."""
        return self._mapped_path

    def check(self, when: str) -> None:
        """Raise :func:`~.identity.changed_error` if the open file is no longer what was opened
        (local files: ``fstat`` of the reader's descriptor, or ``stat`` of a memory-mapped file's
        name; remote ones are checked by their store)."""
        if self._fileno is not None:
            same = unchanged(self._fileno, self.identity)
        elif self._mapped_path is not None:
            same = unchanged_at(self._mapped_path, self.identity)
        else:
            return
        if same:
            return
        raise changed_error(str(self._path), when, self.identity, self._store.identity(self._path, self._file))

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
        if self.layout is None or self.batches is not None:
            return None
        offset, length, _ = self.layout.units[k]
        return offset, length

    def decode_unit(self, k: int, data: pa.Buffer) -> pa.RecordBatch:
        """Unit ``k`` decoded from ``data``, the bytes of :meth:`unit_span` (read ahead): the IPC
        message with the schema read at open, or the row group through the footer read at open
        (the bytes outside the span are never asked for). Checked as :meth:`read_unit` checks."""
        offset, _ = self.unit_span(k)
        batch = guard(str(self._path), f"record batch {k}", lambda: self._decode_unit(k, offset, data))
        return self._rows_checked(k, batch)

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
            return read_ipc_unit(self._file.read_at(length, offset), self.schema, rows)
        if self.format is ShardFormat.IPC_FILE:
            return self._reader.get_batch(k)
        if self.format is ShardFormat.PARQUET:
            table = self._reader.read_row_group(k)
        else:
            with self._store.open_input_stream(self._path) as f:
                table = pa.ipc.open_stream(f).read_all()
        table = table.combine_chunks()
        if table.num_rows:
            return table.to_batches()[0]
        return pa.RecordBatch.from_pylist([], schema=table.schema)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class _SpanFile(io.RawIOBase):
    """The bytes ``[offset, offset + len(data))`` of a file, read-only and seekable: reads outside
    the span raise (a Parquet row group decoded from its column chunks alone)."""

    def __init__(self, offset: int, data: pa.Buffer, footer_size: int, file: Any) -> None:
        self._offset, self._data, self._pos = offset, memoryview(data), 0
        self._size = file.size() if file is not None else offset + len(data) + footer_size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        self._pos = pos if whence == 0 else self._pos + pos if whence == 1 else self._size + pos
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, b: Any) -> int:
        a = self._pos - self._offset
        if a < 0 or a + len(b) > len(self._data):
            raise OSError(f"read of bytes [{self._pos}, {self._pos + len(b)}) outside the unit's span")
        b[: len(b)] = self._data[a : a + len(b)]
        self._pos += len(b)
        return len(b)


def _try_layout(path: Any, store: ShardStore, fmt: ShardFormat, f: Any) -> ShardLayout | None:
    """The layout, or None for bytes pyarrow reads but :mod:`.layout` does not index (read as
    before, without ranges)."""
    try:
        return build_layout(path, store, fmt, f)
    except (LayoutMismatch, struct.error):
        return None


def open_shard(
    path: Any,
    store: ShardStore = LOCAL,
    fmt: ShardFormat | None = None,
    layout: ShardLayout | None = None,
    *,
    with_layout: bool = False,
) -> OpenShard:
    """Open one shard for reading (see the module docstring for what each format costs).

    ``layout``: the shard's pinned :class:`~.layout.ShardLayout`: a remote IPC shard then costs one
    open and one read of its schema message, and each unit is read by range. ``with_layout``: build
    the layout while opening (pinning; a remote shard without a pinned one). Reads only metadata
    (footer, schema, message headers; no batch body is touched); any failure is a
    :class:`~resumable_data.DatasetIntegrityError` naming the shard (:mod:`.validate`)."""
    return guard(
        str(path),
        "metadata (footer/schema/batch headers)",
        lambda: store.retrying(path, "open", lambda: _open_shard(path, store, fmt, layout, with_layout)),
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
    path: Any, store: ShardStore, fmt: ShardFormat | None, layout: ShardLayout | None, with_layout: bool
) -> OpenShard:
    if layout is not None:
        fmt = layout.format
    fmt = fmt or detect_format(path, store)
    if fmt is ShardFormat.PARQUET:
        f = store.open_input_file(path)
        identity = store.identity(path, f)
        pf = pq.ParquetFile(f, page_checksum_verification=True)
        check_schema_names(pf.schema_arrow)
        rows = _parquet_rows(pf)
        if layout is not None and layout.unit_rows != rows:
            raise LayoutMismatch(f"row groups of {rows} rows where the layout says {layout.unit_rows}")
        if layout is None and with_layout:
            layout = parquet_layout(pf.metadata)
        return OpenShard(
            fmt, pf.schema_arrow, rows, file=f, reader=pf, store=store, path=path, identity=identity, layout=layout
        )
    mapped = store.memory_map(path)
    if mapped is not None:  # every record batch is a zero-copy view of the map
        identity = store.identity(path, mapped)
        whole = mapped.read_buffer()
        mapped.close()  # the buffer keeps the map alive; no descriptor held per shard
        if fmt is ShardFormat.IPC_FILE:
            reader = pa.ipc.open_file(pa.BufferReader(whole))
            batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        else:
            reader = pa.ipc.open_stream(pa.BufferReader(whole))
            batches = list(reader)
        check_schema_names(reader.schema)
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
        schema = pa.ipc.read_schema(pa.py_buffer(f.read_at(layout.schema[1], layout.schema[0])))
        check_schema_names(schema)
        return OpenShard(
            fmt,
            schema,
            layout.unit_rows,
            file=f,
            store=store,
            path=path,
            identity=store.identity(path, f),
            layout=layout,
        )
    if fmt is ShardFormat.IPC_FILE:
        f = store.open_input_file(path)
        reader = pa.ipc.open_file(f)
        try:
            rows = ipc_file_batch_rows(f)
        except (ValueError, struct.error):  # unexpected layout: count by reading the batches
            rows = []
        if len(rows) != reader.num_record_batches:
            rows = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
        check_schema_names(reader.schema)
        return OpenShard(
            fmt, reader.schema, rows, file=f, reader=reader, store=store, path=path, identity=store.identity(path, f)
        )
    identity = store.identity(path)
    with store.open_input_stream(path) as f:  # dictionaries, no layout: one unit, read whole on first use
        reader = pa.ipc.open_stream(f)
        schema, rows = reader.schema, sum(b.num_rows for b in reader)
    check_schema_names(schema)
    return OpenShard(fmt, schema, [rows], store=store, path=path, identity=identity)


def read_shard_meta(path: Any, store: ShardStore = LOCAL) -> ShardMeta:
    """Format, row count, schema and layout of one shard, from its metadata only."""
    fmt = guard(str(path), "format detection", lambda: detect_format(path, store))
    try:
        shard = open_shard(path, store, fmt, with_layout=True)
    except DatasetIntegrityError as exc:
        raise ConfigError(
            describe(
                "shard",
                str(path),
                f"a readable {fmt.value} shard (read failed: {exc})",
                "remove or rewrite the damaged file, then pin again",
            )
        ) from exc
    shard.close()
    return ShardMeta(fmt, sum(shard.unit_rows), shard.schema, shard.layout)
