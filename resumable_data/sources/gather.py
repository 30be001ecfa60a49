"""Batched gather of records from memory-mapped Arrow shards: the engine behind ``take``.

Algorithm: record ids map to (unit, local row) with ``np.searchsorted`` over the prefix sum of
unit row counts (a unit is an IPC record batch or a Parquet row group). Then, column by column:

- one address space: the shards' memory maps all live in this process's address space, so one
  Arrow buffer spans from the lowest to the highest mapped address (kept alive by the maps). Every
  element index the gather uses is checked, when the per-column plan is built, to fall inside a
  data buffer of some map; the gaps between maps are never read. This is what makes the gather
  one vectorized call per column whatever the number of shards, with no regrouping per shard.
- fast path, fixed-width columns (integers, floats, temporal; no nulls): each unit's data buffer
  sits at a known element index in the span, so the gather is ``view[base[unit] + local]``.
- fast path, ``list``/``large_list`` of fixed-width (no nulls at either level): the offsets
  buffers are read once (lazily, 16 bytes per record) into absolute ``starts``/``lengths`` in the
  span's element space; a ``large_list_view`` over the span with the requested starts and lengths
  is flattened by Arrow in C++ (one contiguous copy per record, in the requested order) and the
  result is rebuilt as the schema's list type with offsets from ``cumsum(lengths)``.
- padded numpy batch (``to_numpy``, the default collate's layout, for integer and floating
  columns): a fixed-width column is the same indexed read, reinterpreted; a list column is
  written straight into the ``[B, max length]`` padded array by one compiled loop (one copy of
  the values instead of an Arrow flatten followed by a padding copy).
- fallback (anything else: strings, structs, nulls, booleans, Parquet, compressed IPC, buffers
  not inside the map or misaligned): ids are grouped by unit, each unit does an Arrow ``take``,
  the pieces are concatenated and reordered with one ``take`` on the small result. Never a
  ``take`` over a multi-chunk table (that concatenates every chunk per call).

Guarantee: the result equals ``Table.take(ids)`` on the shards concatenated into one table, in
the requested order, duplicates included (tests check fast path == fallback == Table.take).

Cost: O(len(ids) + gathered values) per call and a constant number of Python steps per column
(the fallback adds one per touched unit); memory beyond the maps: 16 bytes per record per
fast list column (built on the first ``take``), 8 bytes per unit per fixed-width column.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from numba import njit

from resumable_data.errors import DatasetIntegrityError

__all__ = ["ColumnGather", "Unit", "group_segments", "plan_column"]


@njit(cache=True, nogil=True)
def _pad_rows(values, starts, lengths, pad, out):  # pragma: no cover - compiled
    """``out[b, :lengths[b]] = values[starts[b]:starts[b] + lengths[b]]``, the rest ``pad``."""
    width = out.shape[1]
    for b in range(starts.shape[0]):
        s = starts[b]
        n = lengths[b]
        row = out[b]
        for t in range(n):
            row[t] = values[s + t]
        for t in range(n, width):
            row[t] = pad

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


class Unit:
    """A contiguous run of records: one IPC record batch (``batch``) or a Parquet row group."""

    __slots__ = ("shard", "start", "rows", "batch", "row_group")

    def __init__(self, shard: int, start: int, rows: int, batch: pa.RecordBatch | None,
                 row_group: int | None) -> None:
        self.shard = shard
        self.start = start
        self.rows = rows
        self.batch = batch
        self.row_group = row_group


def group_segments(keys: np.ndarray, num_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Stable order grouping ``keys`` and the segment bounds (length ``num_keys + 1``)."""
    order = np.argsort(keys, kind="stable")
    bounds = np.zeros(num_keys + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=num_keys), out=bounds[1:])
    return order, bounds


def _fixed_width(t: pa.DataType) -> int | None:
    if isinstance(t, pa.ExtensionType) or pa.types.is_boolean(t) or pa.types.is_dictionary(t):
        return None
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)):
        return None
    try:
        bits = t.bit_width
    except ValueError:
        return None
    return bits // 8 if bits in (8, 16, 32, 64) else None


def _element_base(buf: pa.Buffer | None, whole: pa.Buffer, width: int) -> int | None:
    """Element index of ``buf`` inside ``whole`` (viewed as ``width``-byte items), or None."""
    if buf is None:
        return None
    delta = buf.address - whole.address
    if delta < 0 or delta + buf.size > whole.size or delta % width:
        return None
    return delta // width


def address_span(wholes: Sequence[pa.Buffer]) -> pa.Buffer:
    """One buffer spanning the address range of every shard map (keeps them all alive).

    The gaps between maps are never read: every index the gather uses is checked, when the plan
    is built, to lie inside a data buffer of some map.
    """
    lo = min(w.address for w in wholes)
    hi = max(w.address + w.size for w in wholes)
    return pa.foreign_buffer(lo, hi - lo, base=tuple(wholes))


class ColumnGather:
    """Fast gather for one column; built by :func:`plan_column`, or None when it does not apply."""

    def __init__(self, kind: str, dtype: pa.DataType, width: int, span: pa.Buffer,
                 unit_base: np.ndarray | None, starts: np.ndarray | None,
                 lengths: np.ndarray | None) -> None:
        self.kind = kind  # "fixed" or "list"
        self.dtype = dtype
        self.unit_base = unit_base
        self.starts = starts
        self.lengths = lengths
        self.span = span
        self.width = width
        if kind == "fixed":
            self.view = np.frombuffer(span, dtype=_UINT[width], count=span.size // width)
        else:
            self.values = pa.Array.from_buffers(dtype.value_type, span.size // width, [None, span])
            self.offset_np = np.int64 if pa.types.is_large_list(dtype) else np.int32
        item = dtype if kind == "fixed" else dtype.value_type
        # integers and floats only: what the default collate turns into tensors
        self.numpy_dtype = (np.dtype(item.to_pandas_dtype())
                            if pa.types.is_integer(item) or pa.types.is_floating(item) else None)
        self._values_np: np.ndarray | None = None

    def to_numpy(self, ids: np.ndarray, unit: np.ndarray, local: np.ndarray, pad_value: object
                 ) -> np.ndarray | tuple[np.ndarray, np.ndarray] | None:
        """The default collate's numpy layout of this column for ``ids``: a 1-D array (fixed
        width), ``(padded [B, max length], lengths int64)`` (lists), or None (not numeric)."""
        if self.numpy_dtype is None:
            return None
        if self.kind == "fixed":
            return self.view[self.unit_base[unit] + local].view(self.numpy_dtype)
        if self._values_np is None:
            self._values_np = np.frombuffer(self.span, dtype=self.numpy_dtype, count=self.span.size // self.width)
        ln = self.lengths[ids]
        out = np.empty((len(ids), int(ln.max()) if len(ids) else 0), dtype=self.numpy_dtype)
        _pad_rows(self._values_np, self.starts[ids], ln, out.dtype.type(pad_value), out)
        return out, ln

    def gather(self, ids: np.ndarray, unit: np.ndarray, local: np.ndarray) -> pa.Array:
        """Values of this column for ``ids``, in the requested order."""
        n = len(ids)
        if self.kind == "fixed":
            out = self.view[self.unit_base[unit] + local]
            return pa.Array.from_buffers(self.dtype, n, [None, pa.py_buffer(out)])
        ln = self.lengths[ids]
        flat = pa.LargeListViewArray.from_arrays(self.starts[ids], ln, self.values).flatten()
        offsets = np.zeros(n + 1, dtype=self.offset_np)
        np.cumsum(ln, out=offsets[1:])
        return pa.Array.from_buffers(self.dtype, n, [None, pa.py_buffer(offsets)], children=[flat])


def _bounds_error(u: Unit, index: int) -> DatasetIntegrityError:
    return DatasetIntegrityError(
        f"shard #{u.shard}, record batch at record {u.start}: column {index} has offsets or "
        "lengths outside its data buffer (the file is damaged); fix: verify(level='content') "
        "to find it, restore the file, or re-write the shard")


def plan_column(index: int, dtype: pa.DataType, units: Sequence[Unit],
                wholes: Sequence[pa.Buffer | None], num_records: int) -> ColumnGather | None:
    """A :class:`ColumnGather` for column ``index`` if every unit qualifies, else None."""
    if not units or any(u.batch is None or wholes[u.shard] is None for u in units):
        return None
    if isinstance(dtype, pa.ExtensionType):
        return None
    span = address_span([w for w in wholes if w is not None])

    def element(buf: pa.Buffer | None, shard: int, width: int) -> int | None:
        whole = wholes[shard]
        if buf is None or _element_base(buf, whole, 1) is None:
            return None  # not inside this shard's map (e.g. decompressed IPC)
        return _element_base(buf, span, width)

    width = _fixed_width(dtype)
    if width is not None:
        base = np.empty(len(units), dtype=np.int64)
        for k, u in enumerate(units):
            arr = u.batch.column(index)
            if arr.null_count:
                return None
            buf = arr.buffers()[1]
            b = element(buf, u.shard, width)
            if b is None:
                return None
            if (arr.offset + u.rows) * width > buf.size:
                raise _bounds_error(u, index)
            base[k] = b + arr.offset  # element of the unit's row 0; pos = base[unit] + local
        return ColumnGather("fixed", dtype, width, span, base, None, None)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        width = _fixed_width(dtype.value_type)
        if width is None:
            return None
        starts = np.empty(num_records, dtype=np.int64)
        lengths = np.empty(num_records, dtype=np.int64)
        for u in units:
            arr = u.batch.column(index)
            child = arr.values
            if arr.null_count or child.null_count:
                return None
            buf = child.buffers()[1]
            b = element(buf, u.shard, width)
            if b is None:
                return None
            offs = arr.offsets.to_numpy()
            # never trust offsets read from disk: every gathered byte must lie in the buffer
            if offs[0] < 0 or (child.offset + int(offs[-1])) * width > buf.size or (np.diff(offs) < 0).any():
                raise _bounds_error(u, index)
            starts[u.start:u.start + u.rows] = offs[:-1]
            starts[u.start:u.start + u.rows] += b + child.offset
            lengths[u.start:u.start + u.rows] = np.diff(offs)
        return ColumnGather("list", dtype, width, span, None, starts, lengths)
    return None
