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
elsewhere an IPC *file*'s batch row counts come from its footer and each batch's message header (a
few hundred bytes per batch, parsed here: pyarrow's own ``count_rows``/``get_batch`` download the
bodies) and a body is read when a record in it is first requested. Parquet is read by row group on
demand everywhere. A remote IPC *stream* has no index, so it is one unit read whole on first use:
prefer IPC file format or Parquet for remote data.

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
metadata only, so no batch's data is touched before :mod:`.validate` checked it.

Cost: discovery is one listing; :func:`read_shard_meta` touches only metadata (IPC file footer,
IPC stream message headers via a memory map, Parquet footer; a remote IPC file: 2 + (number of
record batches) small range reads); hashing reads every byte once.
"""

from __future__ import annotations

import enum
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
from resumable_data.errors import ConfigError, DatasetIntegrityError, describe
from resumable_data.sources.store import LOCAL, ShardStore
from resumable_data.sources.validate import guard

__all__ = [
    "HASH_CHUNK_BYTES",
    "LEGACY_MANIFEST_NAME",
    "MANIFEST_NAME",
    "SHARD_SUFFIXES",
    "OpenShard",
    "ShardFormat",
    "ShardMeta",
    "canonical_schema",
    "check_same_schema",
    "detect_format",
    "discover_shards",
    "refuse_hive_partitions",
    "hash_file",
    "ipc_file_batch_rows",
    "open_shard",
    "read_shard_meta",
    "resolve_files",
]

#: The manifest ``rd.pin(folder)`` writes (hidden: other readers skip it, see :mod:`.manifests`).
MANIFEST_NAME = ".rd-manifest.json"
#: The name earlier versions wrote; still read, never written.
LEGACY_MANIFEST_NAME = "rd-manifest.json"
SHARD_SUFFIXES = (".arrow", ".ipc", ".feather", ".parquet")
_ARROW_FILE_MAGIC = b"ARROW1"
_MESSAGE_HEADER_RECORD_BATCH = 3


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


def check_same_schema(first_rel: str, first: str, rel: str, other: str) -> None:
    """The one schema-mismatch error (pinning and opening, on every store): names the shard and
    shows both canonical schemas."""
    if other != first:
        raise ConfigError(
            describe("shard", rel, f"the schema of the first shard {first_rel!r} ({first!r})",
                     f"rewrite {rel!r} with the common schema or pin it separately; it has {other!r}"))


# -- discovery ----------------------------------------------------------------------------------
def discover_shards(root: Any, store: ShardStore = LOCAL) -> list[str]:
    """Relative POSIX paths of every shard file under ``root``, sorted."""
    if not store.is_dir(root):
        raise ConfigError(
            describe("path", str(root), "an existing directory (or prefix) of shard files",
                     "pass the directory that holds the .arrow/.ipc/.feather/.parquet shards "
                     "(and, for remote data, the right filesystem and bucket/prefix)"))
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
                raise ConfigError(describe(
                    "path", str(root), f"every data file {state_rel!r} (Hugging Face save_to_disk) lists",
                    f"{missing} missing: restore them, or save the dataset again with save_to_disk"))
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
    keys = sorted({part.split("=", 1)[0] for r in rel_paths for part in r.split("/")[:-1]
                   if "=" in part and not part.startswith("=")})
    if keys:
        example = next(r for r in rel_paths if "=" in r.rsplit("/", 1)[0])
        raise ConfigError(describe(
            "path", str(root),
            f"shard files whose paths hold no data, but {example!r} is in a hive-style partition "
            f"directory: its partition column(s) {keys} live in the directory names, which rd does not "
            "read, so they would vanish from every row",
            f"write the columns into the files once: rd.write_arrow_shards(pyarrow.dataset.dataset("
            f"{str(root)!r}, partitioning='hive').to_table(), NEW_DIR, rows_per_batch=1024) and pass NEW_DIR; "
            "or, to read the files without those columns, pass the list of files instead of the directory"))


def resolve_files(files: Sequence[str | os.PathLike], store: ShardStore = LOCAL) -> tuple[str, list[str]]:
    """(root, relative POSIX paths) for an explicit list of shard files, order kept; the root is
    their deepest common directory."""
    if len(files) == 0:
        raise ConfigError(describe("path", list(files), "a non-empty list of shard files",
                                   "pass at least one .arrow/.ipc/.feather/.parquet file"))
    paths = []
    for f in files:
        p = store.resolve(f)
        if not p.endswith(SHARD_SUFFIXES) or store.stat(p) is None:
            raise ConfigError(describe("path", str(f), f"an existing shard file ({', '.join(SHARD_SUFFIXES)})",
                                       "check the file list (and the filesystem)"))
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
        head = f.read(len(_ARROW_FILE_MAGIC))
    return ShardFormat.IPC_FILE if head == _ARROW_FILE_MAGIC else ShardFormat.IPC_STREAM


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
    count = _u32(footer, vec)
    if vec + 4 + 24 * count > len(footer):
        raise ValueError("record batch blocks run past the footer")
    out = []
    for i in range(count):
        at = vec + 4 + 24 * i  # struct Block { long offset; int metaDataLength; (pad); long bodyLength; }
        offset, meta_len = struct.unpack_from("<qi", footer, at)
        out.append((offset, meta_len))
    return out


def _message_rows(meta: bytes) -> int:
    """RecordBatch.length from an encapsulated message's metadata (continuation marker optional)."""
    fb = meta[8 if meta[:4] == b"\xff\xff\xff\xff" else 4:]
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
    if tail[4:] != _ARROW_FILE_MAGIC:
        raise ValueError("not an Arrow IPC file (no trailing magic)")
    footer_len = struct.unpack_from("<i", tail, 0)[0]
    footer = f.read_at(footer_len, size - 10 - footer_len)
    return [_message_rows(f.read_at(meta_len, offset)) for offset, meta_len in _footer_blocks(footer)]


# -- opening --------------------------------------------------------------------------------------
class OpenShard:
    """One opened shard: format, schema, rows per unit and, where memory-mapped, the units'
    zero-copy record batches (``batches``) and the whole map (``whole``); :meth:`read_unit` loads
    unit ``k`` otherwise."""

    def __init__(self, fmt: ShardFormat, schema: pa.Schema, unit_rows: list[int], *,
                 batches: list[pa.RecordBatch] | None = None, whole: pa.Buffer | None = None,
                 file: Any = None, reader: Any = None, store: ShardStore = LOCAL, path: str = "") -> None:
        self.format, self.schema, self.unit_rows = fmt, schema, unit_rows
        self.batches, self.whole = batches, whole
        self._file, self._reader, self._store, self._path = file, reader, store, path

    def read_unit(self, k: int) -> pa.RecordBatch:
        """Unit ``k`` as one record batch (read from the store unless memory-mapped); a read or
        decode failure is a DatasetIntegrityError naming the shard and unit (not yet validated:
        see :mod:`.validate`)."""
        if self.batches is not None:
            return self.batches[k]
        return guard(str(self._path), f"record batch {k}", lambda: self._read_unit(k))

    def _read_unit(self, k: int) -> pa.RecordBatch:
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


def open_shard(path: Any, store: ShardStore = LOCAL, fmt: ShardFormat | None = None) -> OpenShard:
    """Open one shard for reading (see the module docstring for what each format costs).

    Reads only metadata (footer, schema, message headers; no batch body is touched); any failure
    is a :class:`~resumable_data.DatasetIntegrityError` naming the shard (:mod:`.validate`)."""
    return guard(str(path), "metadata (footer/schema/batch headers)", lambda: _open_shard(path, store, fmt))


def _open_shard(path: Any, store: ShardStore, fmt: ShardFormat | None) -> OpenShard:
    fmt = fmt or detect_format(path, store)
    if fmt is ShardFormat.PARQUET:
        f = store.open_input_file(path)
        pf = pq.ParquetFile(f)
        rows = [pf.metadata.row_group(g).num_rows for g in range(pf.metadata.num_row_groups)]
        return OpenShard(fmt, pf.schema_arrow, rows, file=f, reader=pf, store=store, path=path)
    whole = store.memory_map(path)
    if whole is not None:  # every record batch is a zero-copy view of the map
        if fmt is ShardFormat.IPC_FILE:
            reader = pa.ipc.open_file(pa.BufferReader(whole))
            batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        else:
            reader = pa.ipc.open_stream(pa.BufferReader(whole))
            batches = list(reader)
        return OpenShard(fmt, reader.schema, [b.num_rows for b in batches], batches=batches,
                         whole=whole, store=store, path=path)
    if fmt is ShardFormat.IPC_FILE:
        f = store.open_input_file(path)
        reader = pa.ipc.open_file(f)
        try:
            rows = ipc_file_batch_rows(f)
        except (ValueError, struct.error):  # unexpected layout: count by reading the batches
            rows = []
        if len(rows) != reader.num_record_batches:
            rows = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
        return OpenShard(fmt, reader.schema, rows, file=f, reader=reader, store=store, path=path)
    with store.open_input_stream(path) as f:  # no index: one unit, read whole on first use
        reader = pa.ipc.open_stream(f)
        schema, rows = reader.schema, sum(b.num_rows for b in reader)
    return OpenShard(fmt, schema, [rows], store=store, path=path)


def read_shard_meta(path: Any, store: ShardStore = LOCAL) -> ShardMeta:
    """Format, row count and schema of one shard, from its metadata only."""
    fmt = guard(str(path), "format detection", lambda: detect_format(path, store))
    try:
        shard = open_shard(path, store, fmt)
    except DatasetIntegrityError as exc:
        raise ConfigError(
            describe("shard", str(path), f"a readable {fmt.value} shard (read failed: {exc})",
                     "remove or rewrite the damaged file, then pin again")
        ) from exc
    shard.close()
    return ShardMeta(fmt, sum(shard.unit_rows), shard.schema)
