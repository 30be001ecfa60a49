"""Where every unit of a shard lies in its bytes: the layout index that makes a remote open cheap.

Algorithm: a shard's :class:`ShardLayout` is its format, the byte range of its schema message
(Arrow IPC) and, per unit (an IPC record batch, a Parquet row group), ``(offset, length, rows)``.

* IPC *file*: the footer (one read of the file's tail) lists every record batch block (offset,
  metadata length, body length); each block's row count is in its message header (one small read
  per block, of exactly its length, several in flight at once on a remote store; the body is never
  read); the schema message is the first message after the leading magic.
* IPC *stream* (what Hugging Face ``datasets.save_to_disk`` writes): no footer, so the messages
  are walked from offset 0, one small read per message header (its metadata says how long the
  body is, which is skipped unread), until the end-of-stream marker or the end of the file.
* Parquet: the footer's row groups (row count; offset and compressed length of the span of their
  column chunks, for byte budgets).

A layout is built once, when the shard is pinned (:func:`~resumable_data.sources.pin.pin` stores
it in the manifest, schema 2; since schema 3 with each unit's digest where the pin hashed the
bytes, since schema 4 with the digest of the metadata span an open reads: :mod:`.unit_digests`) or, for a manifest pinned before layouts existed, at the first open
on a machine (kept in rd's layout cache, :mod:`.layout_cache`). An IPC unit is then read as one
ranged request of exactly its message (:func:`read_ipc_unit`), decoded with the shard's schema; a
stream shard is never downloaded whole to be opened or read. Shards whose IPC messages use
dictionaries (which a reader must see before the batches), and IPC files whose footer lists
batches out of file order, have no layout (None) and are read as before (:mod:`.files`).

Guarantee: the layout is derived from the bytes, never part of the dataset's identity (the version
hash does not cover it; the manifest's ``derived_hash`` does, so a hand-edited layout is refused at
load). Every range is checked to lie inside the pinned size, and every unit read by range is
checked to be a record batch message with the layout's row count before any of its values is used
(a layout that does not match the bytes is a :class:`~resumable_data.DatasetIntegrityError`); a
remote Parquet shard's layout must equal the one its footer gives (read at every open anyway);
a unit with a digest must hash to it before it is decoded, and the metadata a remote open reads
(IPC schema message, Parquet footer) to the layout's ``meta_digest`` before it is parsed
(:mod:`.unit_digests`).

Cost: building: IPC file 2 + (batches) small reads, IPC stream 1 + (messages) small reads,
Parquet the footer; on a local file these are reads of the memory map. Opening a remote IPC shard
with a layout: one open (a HEAD on S3) and one read of the schema message (a few hundred bytes);
reading a unit: one ranged GET of exactly its message (plus a HEAD where the unit has no digest).
"""

from __future__ import annotations

import enum
import itertools
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from resumable_data.sources.unit_digests import is_digest

__all__ = [
    "ShardFormat",
    "ShardLayout",
    "ipc_file_layout",
    "ipc_stream_layout",
    "parquet_layout",
    "read_ipc_unit",
]

K_FORMAT = "format"
K_SCHEMA = "schema"
K_UNITS = "units"
K_DIGESTS = "digests"  # manifest schema 3 (:mod:`.unit_digests`)
K_META = "meta"  # manifest schema 4: [offset, length, digest] of the metadata span the open reads
_KEYS = {K_FORMAT, K_SCHEMA, K_UNITS}

ARROW_FILE_MAGIC = b"ARROW1"
_CONTINUATION = b"\xff\xff\xff\xff"
_HEADER_SCHEMA = 1
_HEADER_DICTIONARY = 2
_HEADER_RECORD_BATCH = 3
_PEEK = 1024  # bytes read at a stream message's start: prefix and metadata in one request, usually
_TAIL = 16384  # bytes read at an IPC file's end: footer, its length and the magic, usually

ReadAt = Callable[[int, int], bytes]  # (offset, length) -> bytes


class ShardFormat(str, enum.Enum):
    """How a shard's bytes are laid out."""

    IPC_FILE = "ipc_file"
    IPC_STREAM = "ipc_stream"
    PARQUET = "parquet"


class LayoutMismatch(ValueError):
    """The bytes do not have the layout expected (a damaged or unsupported shard). Internal: every
    caller turns it into an `rd.DatasetIntegrityError` or a manifest error naming the shard."""


@dataclass(frozen=True)
class ShardLayout:
    """Format, schema message range (IPC; None for Parquet), ``(offset, length, rows)`` per unit and,
    where ``rd.pin`` hashed the bytes, each unit's digest (:mod:`.unit_digests`; None otherwise).

    ``meta_span``: the bytes an open of the remote shard reads as metadata before any unit: an IPC
    shard's schema message (equal to ``schema``), a Parquet file's footer (its Thrift metadata, its
    4-byte length and the trailing magic: the file's last ``length + 8`` bytes); None where unknown
    (a layout from rd's layout cache or an earlier manifest). ``meta_digest``: the xxh3-128 of those
    bytes as ``rd.pin`` hashed them (manifest schema 4), checked by every remote open before the
    metadata is parsed (:func:`~.unit_digests.meta_digest_error`)."""

    format: ShardFormat
    schema: tuple[int, int] | None
    units: tuple[tuple[int, int, int], ...]
    digests: tuple[str, ...] | None = None
    #: ``(offset, length)`` of the metadata an open of the shard reads (:attr:`meta_span` docs)
    meta_span: tuple[int, int] | None = field(default=None, compare=False)
    #: the pinned xxh3-128 of the bytes of :attr:`meta_span` (schema 4, :mod:`.unit_digests`), None where
    #: none was pinned
    meta_digest: str | None = None

    @property
    def unit_rows(self) -> list[int]:
        return [u[2] for u in self.units]

    @property
    def num_rows(self) -> int:
        return sum(u[2] for u in self.units)

    def unit_digest(self, k: int) -> str | None:
        """The pinned digest of unit ``k``'s span, None where none was pinned."""
        return self.digests[k] if self.digests is not None else None

    def to_dict(self, *, digests: bool = True) -> dict[str, Any]:
        """The layout as JSON values; ``digests``: with the ``digests`` and ``meta`` keys (manifest
        schema 4), else without (schema 2, the layout cache), which requires a layout without digests
        (its ``meta_span`` is not kept)."""
        d: dict[str, Any] = {
            K_FORMAT: self.format.value,
            K_SCHEMA: list(self.schema) if self.schema else None,
            K_UNITS: [list(u) for u in self.units],
        }
        if digests:
            d[K_DIGESTS] = list(self.digests) if self.digests is not None else None
            meta = self.meta_span is not None and self.meta_digest is not None
            d[K_META] = [*self.meta_span, self.meta_digest] if meta else None  # type: ignore[misc]
        elif self.digests is not None or self.meta_digest is not None:
            raise ValueError("a layout with unit digests written where none are kept")
        return d

    @classmethod
    def from_dict(cls, d: Any, size: int, *, digests: bool = False, meta: bool = False) -> ShardLayout:
        """Validated: every range inside ``size`` bytes; ``digests``: the ``digests`` key must be
        there (null, or one digest per unit), else it must not; ``meta`` (schema 4): likewise the
        ``meta`` key (null, or ``[offset, length, digest]``: an IPC shard's schema message range, a
        Parquet file's last bytes); raises :class:`LayoutMismatch`."""
        keys = (_KEYS | {K_DIGESTS} if digests else _KEYS) | ({K_META} if meta else set())
        if not isinstance(d, dict) or set(d) != keys:
            raise LayoutMismatch(f"a layout object with keys {sorted(keys)}")
        try:
            fmt = ShardFormat(d[K_FORMAT])
        except ValueError:
            raise LayoutMismatch(f"format one of {[f.value for f in ShardFormat]}") from None
        if (d[K_SCHEMA] is None) != (fmt is ShardFormat.PARQUET):
            raise LayoutMismatch("a schema range for IPC shards, null for Parquet")
        schema: tuple[int, int] | None = None
        if d[K_SCHEMA] is not None:
            offset, length = _range(d[K_SCHEMA], size, 2)
            schema = (offset, length)
        if not isinstance(d[K_UNITS], list):
            raise LayoutMismatch("a list of units")
        units: list[tuple[int, int, int]] = []
        for u in d[K_UNITS]:
            offset, length, rows = _range(u, size, 3)
            units.append((offset, length, rows))
        if schema is not None:  # IPC messages follow each other: no unit overlaps another or the schema
            end = schema[0] + schema[1]
            for off, length, _ in units:
                if off < end:
                    raise LayoutMismatch(
                        f"units in file order, each after the previous one (unit at {off} starts before byte {end})"
                    )
                end = off + length
        found = d.get(K_DIGESTS)
        if found is not None and (
            not isinstance(found, list) or len(found) != len(units) or not all(is_digest(x) for x in found)
        ):
            raise LayoutMismatch(
                f"null or a list of {len(units)} unit digests (32 lowercase hex characters each, one per unit)"
            )
        span, digest = _meta(d.get(K_META), fmt, schema, size)
        return cls(fmt, schema, tuple(units), tuple(found) if found is not None else None, span, digest)


def _meta(
    v: Any, fmt: ShardFormat, schema: tuple[int, int] | None, size: int
) -> tuple[tuple[int, int] | None, str | None]:
    """The ``meta`` value ``v`` checked: ``(span, digest)``, ``(None, None)`` for null."""
    if v is None:
        return None, None
    want = (
        f"the schema message range {list(schema)}"
        if schema is not None
        else f"a span ending at the shard's {size} bytes"
    )
    if not isinstance(v, list) or len(v) != 3 or not is_digest(v[2]):
        raise LayoutMismatch(f"null or [offset, length, digest] of the metadata span ({want}, a unit digest)")
    offset, length = _range(v[:2], size, 2)
    if (schema is not None and (offset, length) != schema) or (
        schema is None and (offset + length != size or length < 12)
    ):
        raise LayoutMismatch(f"a metadata span of {want} (got {v[:2]!r})")
    return (offset, length), v[2]


def _range(v: Any, size: int, n: int) -> tuple[int, ...]:
    if not isinstance(v, list) or len(v) != n or any(type(x) is not int or x < 0 for x in v) or v[0] + v[1] > size:
        raise LayoutMismatch(
            f"[offset, length{', rows' if n == 3 else ''}] of non-negative integers "
            f"inside the shard's {size} bytes (got {v!r})"
        )
    return tuple(v)


# -- flatbuffers (Arrow's Message and Footer tables) -------------------------------------------
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


def _vector(b: bytes, table: int, field_id: int) -> tuple[int, int]:
    """(start, count) of a vector field (count 0 when absent)."""
    pos = _field(b, table, field_id)
    if pos is None:
        return 0, 0
    vec = pos + _u32(b, pos)
    return vec + 4, _u32(b, vec)


def footer_blocks(footer: bytes) -> tuple[list[tuple[int, int, int]], int]:
    """(offset, metaDataLength, bodyLength) of every record batch block of an IPC file footer,
    and the number of dictionary blocks."""
    root = _u32(footer, 0)
    _, n_dict = _vector(footer, root, 2)  # Footer.dictionaries
    start, count = _vector(footer, root, 3)  # Footer.recordBatches: [Block]
    if start + 24 * count > len(footer):
        raise LayoutMismatch("record batch blocks run past the footer")
    # struct Block { long offset; int metaDataLength; (pad); long bodyLength; }
    return [
        (
            struct.unpack_from("<q", footer, start + 24 * i)[0],
            struct.unpack_from("<i", footer, start + 24 * i + 8)[0],
            struct.unpack_from("<q", footer, start + 24 * i + 16)[0],
        )
        for i in range(count)
    ], n_dict


def message_info(meta: bytes) -> tuple[int, int, int]:
    """(header type, body length, rows; rows 0 unless a record batch) of a message's flatbuffer."""
    root = _u32(meta, 0)
    kind = _field(meta, root, 1)  # Message.header_type
    body = _field(meta, root, 3)  # Message.bodyLength
    htype = meta[kind] if kind is not None else 0
    body_len = struct.unpack_from("<q", meta, body)[0] if body is not None else 0
    rows = 0
    if htype == _HEADER_RECORD_BATCH:
        hdr = _field(meta, root, 2)
        if hdr is None:
            raise LayoutMismatch("record batch message without a header")
        rb = hdr + _u32(meta, hdr)
        length = _field(meta, rb, 0)
        rows = struct.unpack_from("<q", meta, length)[0] if length is not None else 0
    if body_len < 0 or rows < 0:
        raise LayoutMismatch("negative body length or row count")
    return htype, body_len, rows


def _message_at(read_at: ReadAt, size: int, pos: int, peek: int = _PEEK) -> tuple[int, int, int, int] | None:
    """(header type, total message length, body length, rows) of the message at ``pos``; None at
    the end-of-stream marker or the end of the bytes. ``peek``: bytes read first."""
    if pos + 4 > size:
        return None
    head = read_at(pos, min(peek, size - pos))
    if head[:4] == _CONTINUATION:
        if len(head) < 8:
            raise LayoutMismatch("truncated message prefix")
        prefix, meta_len = 8, struct.unpack_from("<i", head, 4)[0]
    else:  # the pre-1.0 prefix: the length alone
        prefix, meta_len = 4, struct.unpack_from("<i", head, 0)[0]
    if meta_len == 0:
        return None
    if meta_len < 0 or pos + prefix + meta_len > size:
        raise LayoutMismatch(f"message metadata at {pos} runs past the end")
    meta = head[prefix : prefix + meta_len]
    if len(meta) < meta_len:
        meta = read_at(pos + prefix, meta_len)
    htype, body_len, rows = message_info(meta)
    total = prefix + meta_len + body_len
    if pos + total > size:
        raise LayoutMismatch(f"message body at {pos} runs past the end")
    return htype, total, body_len, rows


def ipc_stream_layout(read_at: ReadAt, size: int, start: int = 0) -> ShardLayout | None:
    """The layout of the IPC stream at ``start`` (None when it uses dictionaries)."""
    first = _message_at(read_at, size, start)
    if first is None or first[0] != _HEADER_SCHEMA:
        raise LayoutMismatch("the stream does not start with a schema message")
    units, pos = [], start + first[1]
    while True:
        msg = _message_at(read_at, size, pos)
        if msg is None:
            break
        htype, total, _, rows = msg
        if htype == _HEADER_DICTIONARY:
            return None
        if htype != _HEADER_RECORD_BATCH:
            raise LayoutMismatch(f"unexpected message type {htype} at {pos}")
        units.append((pos, total, rows))
        pos += total
    fmt = ShardFormat.IPC_STREAM if start == 0 else ShardFormat.IPC_FILE
    return ShardLayout(fmt, (start, first[1]), tuple(units), meta_span=(start, first[1]))


def ipc_file_layout(read_at: ReadAt, size: int, concurrency: int = 1) -> ShardLayout | None:
    """The layout of an IPC file, from its footer and message headers (None with dictionaries);
    ``concurrency``: header reads in flight at once (remote stores: they are independent)."""
    if size < 20:
        raise LayoutMismatch("too short for an Arrow IPC file")
    tail = read_at(max(0, size - _TAIL), min(size, _TAIL))
    if tail[-6:] != ARROW_FILE_MAGIC:
        raise LayoutMismatch("not an Arrow IPC file (no trailing magic)")
    footer_len = struct.unpack_from("<i", tail, len(tail) - 10)[0]
    if footer_len <= 0 or footer_len > size - 18:
        raise LayoutMismatch("footer length out of range")
    end = len(tail) - 10
    footer = tail[end - footer_len : end] if footer_len <= end else read_at(size - 10 - footer_len, footer_len)
    blocks, n_dict = footer_blocks(footer)
    if n_dict or any(a[0] >= b[0] for a, b in itertools.pairwise(blocks)):
        return None  # dictionaries, or batches listed out of file order: read without a layout
    schema = _message_at(read_at, size, 8)
    if schema is None or schema[0] != _HEADER_SCHEMA:
        raise LayoutMismatch("no schema message after the leading magic")

    def unit(block: tuple[int, int, int]) -> tuple[int, int, int]:
        offset, meta_len, body_len = block
        msg = _message_at(read_at, size, offset, peek=meta_len)  # the footer says how long it is
        if msg is None or msg[0] != _HEADER_RECORD_BATCH or msg[1] != meta_len + body_len:
            raise LayoutMismatch(f"block at {offset} is not the record batch its footer describes")
        return offset, meta_len + body_len, msg[3]

    if concurrency > 1 and len(blocks) > 1:
        with ThreadPoolExecutor(max_workers=min(concurrency, len(blocks))) as pool:
            units = list(pool.map(unit, blocks))
    else:
        units = [unit(b) for b in blocks]
    return ShardLayout(ShardFormat.IPC_FILE, (8, schema[1]), tuple(units), meta_span=(8, schema[1]))


def parquet_layout(metadata: Any, footer: tuple[int, int] | None = None) -> ShardLayout:
    """Row groups of a ``pyarrow.parquet.FileMetaData`` (from :func:`.parquet_footer.open_parquet`,
    whose footer check makes ``RowGroupMetaData.column`` safe): the span of their column chunks, rows;
    ``footer``: the footer's span (the layout's ``meta_span``), where known."""
    units = []
    for g in range(metadata.num_row_groups):
        rg = metadata.row_group(g)
        lo, hi = None, 0
        for j in range(rg.num_columns):
            c = rg.column(j)
            first = c.data_page_offset
            if c.has_dictionary_page and c.dictionary_page_offset:
                first = min(first, c.dictionary_page_offset)
            lo = first if lo is None else min(lo, first)
            hi = max(hi, first + c.total_compressed_size)
        lo = lo or 0
        units.append((lo, max(0, hi - lo), rg.num_rows))
    return ShardLayout(ShardFormat.PARQUET, None, tuple(units), meta_span=footer)


def read_ipc_unit(data: bytes | pa.Buffer, schema: pa.Schema, rows: int) -> pa.RecordBatch:
    """Decode one unit's message bytes (as :func:`read_ipc_unit`'s caller read them by range)."""
    msg = pa.ipc.read_message(pa.py_buffer(data) if isinstance(data, bytes) else data)
    if msg.type != "record batch":
        raise LayoutMismatch(f"expected a record batch message, found {msg.type!r}")
    batch = pa.ipc.read_record_batch(msg, schema)
    if batch.num_rows != rows:
        raise LayoutMismatch(f"record batch of {batch.num_rows} rows where the layout says {rows}")
    return batch
