"""Batched gather of records from memory-mapped Arrow shards: the engine behind ``take``.

Algorithm: record ids map to (unit, local row) by one compiled pass over the prefix sum of unit
row counts (a unit is an IPC record batch or a Parquet row group), each id searched only among the
units of its bucket of records (:mod:`.unit_index`). Then, column by column, with the compiled
copies of :mod:`.copy_kernels`:

- one address space: the shards' memory maps all live in this process's address space, so one
  Arrow buffer spans from the lowest to the highest mapped address (kept alive by the maps). Every
  buffer the gather reads is checked, when the per-column plan is built, to lie inside some map;
  the gaps between maps are never read. This is what makes the gather a constant number of
  vectorized calls per column whatever the number of shards and record batches touched.
- a column's plan is a small tree that mirrors its Arrow type, one node per level, each holding
  one integer per unit (where that unit's buffer starts in the span):

  * fixed width (integers, floats, temporal): ``view[base[unit] + local]``;
  * ``bool``: the same on bit indices, read and packed by one compiled loop;
  * variable length (``list``, ``large_list``, ``string``, ``large_string``, ``binary``,
    ``large_binary``): the requested rows' start and end offsets are read from the mapped offsets
    buffer (``offsets[base[unit] + local]`` and ``+ 1``; nothing is precomputed per record). When
    the child is fixed width (list of numbers, the bytes of a string) a ``large_list_view`` over
    the span is flattened by Arrow in C++ (one contiguous copy per record, in order); any other
    child (a list of lists, of strings, of structs) is gathered recursively at the expanded child
    rows. Offsets are rebuilt from ``cumsum(lengths)``;
  * ``fixed_size_list<T>`` of size L: for a fixed-width T one compiled loop copies the B rows of
    L values; otherwise the child is gathered at the B*L expanded rows;
  * ``struct``: each field gathered at the same rows;
  * ``dictionary``: the indices gathered as fixed width, when every unit holds the same
    dictionary (an IPC file's one dictionary; decoded units: equal dictionaries, each unit's its
    own object, share a key, :class:`.gather_decoded.Dictionaries`);
  * nulls, at any level: the validity bits gathered as for ``bool`` (units without nulls read
    nothing) and attached to that level's result.
- padded numpy batch (``to_numpy``, the default collate's layout, for integer, floating and
  ``bool`` columns): a fixed-width column is the same indexed read, reinterpreted; a ``bool``
  column one compiled loop unpacking the bits into a numpy ``bool`` array; a list column is
  written straight into the ``[B, max length]`` padded array by one compiled loop; a
  ``fixed_size_list`` is the ``[B, L]`` rows. A column with nulls has no numpy layout (the
  collate makes Python lists of it, from the Arrow result). Every output array is the caller's
  ``alloc(shape, dtype)`` when one is given (a loader worker's shared-memory slot: the batch is
  then written once, where the main process reads it; :class:`Alloc`), else a fresh one.
- decoded units (Parquet row groups, record batches read by range from a remote store: each its
  own record batch in the heap, :mod:`.gather_decoded`): each unit's plan is built once when it is
  decoded and kept as a row of absolute addresses (:func:`flatten_plan`); per batch the touched
  units' rows become the same tree over one span covering their buffers (:func:`rebuild_plan`),
  so they are gathered by the same nodes and kernels as mapped shards.
- fallback (dictionaries that differ between the units a batch touches, compressed IPC,
  ``decimal``, ``map``, unions, extension types, buffers not inside the map or misaligned, a
  ``string`` batch over 2 GiB): ids are grouped
  by unit, each unit does an Arrow ``take``, the pieces are concatenated and reordered with one
  ``take`` on the small result. Never a ``take`` over a multi-chunk table.

Guarantee: the result equals ``Table.take(ids)`` on the shards concatenated into one table, in
the requested order, duplicates included (tests check fast path == fallback == Table.take for
every type above). Offsets are read from a unit only after the unit passed
``RecordBatch.validate(full=True)`` (:mod:`.validate`: the caller validates every unit it touches
first), so every offset is monotone and inside its buffer.

Cost: O(len(ids) + gathered values) per call and a constant number of Python steps per column
and type level (the fallback adds one per touched unit); memory beyond the maps: 8 bytes per unit
per node, built once (the plan reads buffer addresses, never data).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import numpy as np
import pyarrow as pa

from resumable_data.errors import DatasetIntegrityError
from resumable_data.sources.copy_kernels import copy_rows, gather_bits, gather_runs, pad_rows, unpack_bits
from resumable_data.sources.unit_index import Unit

__all__ = [
    "Alloc",
    "ColumnGather",
    "address_span",
    "concat_columns",
    "flatten_plan",
    "has_numpy_layout",
    "numeric_dtype",
    "plan_column",
    "rebuild_plan",
]

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

#: ``alloc(shape, dtype)``: a writable, C-contiguous array of that shape and dtype that the numpy
#: layout's gather writes into (every element is written); ``np.empty`` when none is given.
Alloc = Callable[[tuple[int, ...], np.dtype], np.ndarray]


def _empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return np.empty(shape, dtype=dtype)


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


def numeric_dtype(t: pa.DataType) -> np.dtype | None:
    """The numpy dtype the default collate gives ``t`` (integers and floats only), else None."""
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return np.dtype(t.to_pandas_dtype())
    return None


def has_numpy_layout(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` can have the default collate's numpy layout: integers,
    floats and ``bool``, and (large / fixed-size) lists of integers and floats (its nulls, known per
    batch, may still rule it out)."""
    if pa.types.is_boolean(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        t = t.value_type
    return numeric_dtype(t) is not None


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

    The gaps between maps are never read: every buffer the gather uses is checked, when the plan
    is built, to lie inside some map.
    """
    lo = min(w.address for w in wholes)
    hi = max(w.address + w.size for w in wholes)
    return pa.foreign_buffer(lo, hi - lo, base=tuple(wholes))


class _Span:
    """The address span and its numpy views by item type (made once, on first use)."""

    def __init__(self, span: pa.Buffer, wholes: Sequence[pa.Buffer | None]) -> None:
        self.buffer = span
        self.wholes = wholes
        self._views: dict[np.dtype, np.ndarray] = {}

    def view(self, dtype: np.dtype | type) -> np.ndarray:
        dt = np.dtype(dtype)
        v = self._views.get(dt)
        if v is None:
            v = self._views[dt] = np.frombuffer(self.buffer, dtype=dt, count=self.buffer.size // dt.itemsize)
        return v

    def base(self, buf: pa.Buffer | None, shard: int, width: int) -> int | None:
        """Element index (``width``-byte items) of ``buf`` in the span, if inside shard's map. An
        empty buffer (a unit whose strings or lists are all empty or null: Arrow gives it a static
        address outside any map) is never read (every run in it is empty, and every other read is
        checked against its size): it is placed at the start of the map."""
        whole = self.wholes[shard]
        if buf is not None and whole is not None and buf.size == 0:
            buf = whole
        if buf is None or whole is None or _element_base(buf, whole, 1) is None:
            return None  # not inside this shard's map (e.g. decompressed IPC)
        return _element_base(buf, self.buffer, width)


class _Fail(Exception):
    """A unit's buffers do not fit the fast path: the column takes the fallback."""


def _bounds_error(u: Unit, index: int) -> DatasetIntegrityError:
    return DatasetIntegrityError(
        f"shard #{u.shard}, record batch at record {u.start}: column {index} has offsets or "
        "lengths outside its data buffer (the file is damaged); fix: verify(level='content') "
        "to find it, restore the file, or re-write the shard"
    )


class _Validity:
    """A level's null bitmaps: bit ``base[unit] + local`` of the span; ``base`` -1: no nulls there."""

    def __init__(self, span: _Span, base: np.ndarray) -> None:
        self.span, self.view, self.base = span, span.view(np.uint8), base

    def take(self, unit: np.ndarray, local: np.ndarray) -> tuple[pa.Buffer | None, int]:
        packed = np.zeros((len(unit) + 7) // 8, dtype=np.uint8)
        nulls = len(unit) - int(gather_bits(self.view, self.base, unit, local, packed))
        return (pa.py_buffer(packed) if nulls else None), nulls


class _Node:
    """One type level of a column's plan: ``take(unit, local)`` gathers rows ``local`` of units
    ``unit`` (None: this call must take the fallback); ``valid``: its null bitmaps, or None."""

    kind = ""
    valid: _Validity | None = None

    def __init__(self, dtype: pa.DataType) -> None:
        self.dtype = dtype

    def nulls(self, unit: np.ndarray, local: np.ndarray) -> tuple[pa.Buffer | None, int]:
        return (None, 0) if self.valid is None else self.valid.take(unit, local)

    def take(self, unit: np.ndarray, local: np.ndarray) -> pa.Array | None:
        raise NotImplementedError


class _FixedNode(_Node):
    kind = "fixed"

    def __init__(self, dtype: pa.DataType, width: int, span: _Span, base: np.ndarray) -> None:
        super().__init__(dtype)
        self.width, self.span, self.base = width, span, base
        self.view = span.view(_UINT[width])

    def rows(self, unit: np.ndarray, local: np.ndarray) -> np.ndarray:
        return self.view[self.base[unit] + local]

    def take(self, unit: np.ndarray, local: np.ndarray) -> pa.Array:
        out = self.rows(unit, local)
        vb, nulls = self.nulls(unit, local)
        return pa.Array.from_buffers(self.dtype, len(out), [vb, pa.py_buffer(out)], null_count=nulls)


class _BoolNode(_Node):
    kind = "bool"

    def __init__(self, span: _Span, bit_base: np.ndarray) -> None:
        super().__init__(pa.bool_())
        self.span, self.view, self.base = span, span.view(np.uint8), bit_base

    def take(self, unit: np.ndarray, local: np.ndarray) -> pa.Array:
        packed = np.zeros((len(unit) + 7) // 8, dtype=np.uint8)
        gather_bits(self.view, self.base, unit, local, packed)  # the base of every unit is >= 0
        vb, nulls = self.nulls(unit, local)
        return pa.Array.from_buffers(pa.bool_(), len(unit), [vb, pa.py_buffer(packed)], null_count=nulls)


class _VarNode(_Node):
    """list / large_list / string / binary (and large): offsets read from the map per call."""

    kind = "list"

    def __init__(
        self, dtype: pa.DataType, span: _Span, offset_width: int, base: np.ndarray, child: _Node, is_bytes: bool
    ) -> None:
        super().__init__(dtype)
        self.offsets = span.view(np.int64 if offset_width == 8 else np.int32)
        self.offset_np = np.int64 if offset_width == 8 else np.int32
        self.base, self.child, self.is_bytes = base, child, is_bytes
        self.span = span
        self.kind = "bytes" if is_bytes else "list"

    def bounds(self, unit: np.ndarray, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row: start (child row of its unit) and length, from the mapped offsets."""
        at = self.base[unit] + local
        starts = self.offsets[at].astype(np.int64)
        return starts, self.offsets[at + 1] - starts

    def take(self, unit: np.ndarray, local: np.ndarray) -> pa.Array | None:
        n = len(unit)
        c = self.child
        if isinstance(c, _FixedNode) and c.valid is None:  # one compiled pass: ends, then one copy a run
            out = np.empty(n + 1, dtype=self.offset_np)
            limit = _INT32_MAX if self.offset_np is np.int32 else _INT64_MAX
            data, total = gather_runs(self.offsets, self.base, c.view, c.base, unit, local, limit, out)
            if total < 0:
                return None  # the pieces exceed 32-bit offsets: the fallback's error, not ours
            offsets = pa.py_buffer(out)
            vb, nulls = self.nulls(unit, local)
            if self.is_bytes:
                return pa.Array.from_buffers(self.dtype, n, [vb, offsets, pa.py_buffer(data)], null_count=nulls)
            flat = pa.Array.from_buffers(c.dtype, total, [None, pa.py_buffer(data)], null_count=0)
            return pa.Array.from_buffers(self.dtype, n, [vb, offsets], null_count=nulls, children=[flat])
        starts, lengths = self.bounds(unit, local)
        off64 = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=off64[1:])
        total = int(off64[-1])
        if self.offset_np is np.int32 and total > _INT32_MAX:
            return None  # the pieces exceed 32-bit offsets: the fallback's error, not ours
        offsets = pa.py_buffer(off64.astype(self.offset_np, copy=False))
        vb, nulls = self.nulls(unit, local)
        # any other child (lists of lists, of strings, of structs; children with nulls): gathered at
        # the expanded rows
        cu = np.repeat(unit, lengths)
        cl = np.repeat(starts - off64[:-1], lengths) + np.arange(total)
        flat = self.child.take(cu, cl)
        if flat is None:
            return None
        return pa.Array.from_buffers(self.dtype, n, [vb, offsets], null_count=nulls, children=[flat])


class _FixedListNode(_Node):
    kind = "fixed_list"

    def __init__(self, dtype: pa.DataType, child: _Node) -> None:
        super().__init__(dtype)
        self.size, self.child = dtype.list_size, child

    def rows(self, unit: np.ndarray, local: np.ndarray, alloc: Alloc = _empty) -> np.ndarray:
        """``[B, size]`` raw values (child fixed width only): one compiled copy per row."""
        c = self.child
        assert isinstance(c, _FixedNode)  # ColumnGather and take call it only then
        out = alloc((len(unit), self.size), c.view.dtype)
        copy_rows(c.view, c.base[unit] + local * self.size, out)
        return out

    def take(self, unit: np.ndarray, local: np.ndarray) -> pa.Array | None:
        n, size = len(unit), self.size
        if isinstance(self.child, _FixedNode) and self.child.valid is None:
            flat_np = self.rows(unit, local).reshape(-1)
            flat = pa.Array.from_buffers(self.child.dtype, n * size, [None, pa.py_buffer(flat_np)], null_count=0)
        else:
            cl = (local[:, None] * size + np.arange(size)).reshape(-1)
            flat = self.child.take(np.repeat(unit, size), cl)
            if flat is None:
                return None
        vb, nulls = self.nulls(unit, local)
        return pa.Array.from_buffers(self.dtype, n, [vb], null_count=nulls, children=[flat])


class _StructNode(_Node):
    kind = "struct"

    def __init__(self, dtype: pa.DataType, children: list[_Node]) -> None:
        super().__init__(dtype)
        self.children = children

    def take(self, unit: np.ndarray, local: np.ndarray) -> pa.Array | None:
        cols = [c.take(unit, local) for c in self.children]
        if any(c is None for c in cols):
            return None
        vb, nulls = self.nulls(unit, local)
        return pa.Array.from_buffers(self.dtype, len(unit), [vb], null_count=nulls, children=cols)


class _DictionaryNode(_Node):
    kind = "dictionary"

    def __init__(self, dtype: pa.DataType, indices: _FixedNode, dictionary: pa.Array) -> None:
        super().__init__(dtype)
        self.indices, self.dictionary = indices, dictionary

    def take(self, unit: np.ndarray, local: np.ndarray) -> pa.Array:
        return pa.DictionaryArray.from_arrays(self.indices.take(unit, local), self.dictionary)


def _plan(dtype: pa.DataType, arrays: list[pa.Array], units: Sequence[Unit], span: _Span, index: int) -> _Node:
    """The node for ``dtype`` over per-unit ``arrays`` (offset-adjusted); raises _Fail."""
    if isinstance(dtype, pa.ExtensionType):
        raise _Fail
    node = _plan_values(dtype, arrays, units, span, index)
    if not isinstance(node, _DictionaryNode):  # a dictionary's nulls are its indices' nulls
        node.valid = _validity(arrays, units, span, index)
    return node


def _validity(arrays: list[pa.Array], units: Sequence[Unit], span: _Span, index: int) -> _Validity | None:
    if not any(a.null_count for a in arrays):
        return None
    base = np.full(len(arrays), -1, dtype=np.int64)
    for k, (u, arr) in enumerate(zip(units, arrays)):
        if arr.null_count:
            buf = arr.buffers()[0]
            b = span.base(buf, u.shard, 1)
            if b is None:
                raise _Fail
            if (arr.offset + len(arr) + 7) // 8 > buf.size:
                raise _bounds_error(u, index)
            base[k] = b * 8 + arr.offset
    return _Validity(span, base)


def _plan_values(dtype: pa.DataType, arrays: list[pa.Array], units: Sequence[Unit], span: _Span, index: int) -> _Node:
    width = _fixed_width(dtype)
    if width is not None:
        base = np.empty(len(arrays), dtype=np.int64)
        for k, (u, arr) in enumerate(zip(units, arrays)):
            buf = arr.buffers()[1]
            b = span.base(buf, u.shard, width)
            if b is None:
                raise _Fail
            if (arr.offset + len(arr)) * width > buf.size:
                raise _bounds_error(u, index)
            base[k] = b + arr.offset  # element of the unit's row 0: pos = base[unit] + local
        return _FixedNode(dtype, width, span, base)
    if pa.types.is_boolean(dtype):
        base = np.empty(len(arrays), dtype=np.int64)
        for k, (u, arr) in enumerate(zip(units, arrays)):
            buf = arr.buffers()[1]
            b = span.base(buf, u.shard, 1)
            if b is None:
                raise _Fail
            if (arr.offset + len(arr) + 7) // 8 > buf.size:
                raise _bounds_error(u, index)
            base[k] = b * 8 + arr.offset
        return _BoolNode(span, base)
    is_bytes = (
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
    )
    if is_bytes or pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        ow = (
            8
            if pa.types.is_large_list(dtype) or pa.types.is_large_string(dtype) or pa.types.is_large_binary(dtype)
            else 4
        )
        base = np.empty(len(arrays), dtype=np.int64)
        for k, (u, arr) in enumerate(zip(units, arrays)):
            b = span.base(arr.buffers()[1], u.shard, ow)
            if b is None:
                raise _Fail
            base[k] = b + arr.offset
        if is_bytes:
            data = np.empty(len(arrays), dtype=np.int64)
            for k, (u, arr) in enumerate(zip(units, arrays)):
                b = span.base(arr.buffers()[2], u.shard, 1)
                if b is None:
                    raise _Fail
                data[k] = b
            child: _Node = _FixedNode(pa.uint8(), 1, span, data)
        else:
            child = _plan(dtype.value_type, [a.values for a in arrays], units, span, index)
        return _VarNode(dtype, span, ow, base, child, is_bytes)
    if pa.types.is_fixed_size_list(dtype):
        size = dtype.list_size
        child = _plan(
            dtype.value_type, [a.values.slice(a.offset * size, len(a) * size) for a in arrays], units, span, index
        )
        return _FixedListNode(dtype, child)
    if pa.types.is_struct(dtype):  # field(i): offset-adjusted, the struct's own nulls not merged in
        return _StructNode(
            dtype, [_plan(f.type, [a.field(i) for a in arrays], units, span, index) for i, f in enumerate(dtype)]
        )
    if pa.types.is_dictionary(dtype):
        first = arrays[0].dictionary
        addr = [b.address if b is not None else None for b in first.buffers()]
        for a in arrays[1:]:
            d = a.dictionary
            if [b.address if b is not None else None for b in d.buffers()] != addr and not d.equals(first):
                raise _Fail
        indices = _plan(dtype.index_type, [a.indices for a in arrays], units, span, index)
        assert isinstance(indices, _FixedNode)
        return _DictionaryNode(dtype, indices, first)
    raise _Fail


class ColumnGather:
    """Fast gather for one column; built by :func:`plan_column`, or None when it does not apply."""

    def __init__(self, root: _Node) -> None:
        self.root = root
        self.kind = root.kind
        self.dtype = root.dtype
        r = root
        self.numpy_dtype = None  # nulls anywhere: the collate's Python lists, from take()
        if isinstance(r, _FixedNode) and r.valid is None:
            self.numpy_dtype = numeric_dtype(r.dtype)
        elif isinstance(r, _BoolNode) and r.valid is None:
            self.numpy_dtype = np.dtype(np.bool_)
        elif (
            ((isinstance(r, _VarNode) and not r.is_bytes) or isinstance(r, _FixedListNode))
            and isinstance(r.child, _FixedNode)
            and r.valid is None
            and r.child.valid is None
        ):
            self.numpy_dtype = numeric_dtype(r.child.dtype)

    def to_numpy(
        self, ids: np.ndarray, unit: np.ndarray, local: np.ndarray, pad_value: object, alloc: Alloc | None = None
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray] | None:
        """The default collate's numpy layout of this column for ``ids``: a 1-D array (fixed
        width; ``bool``: a numpy ``bool`` array, one byte a value, as the collate's ``to_numpy``),
        ``(padded [B, max length], lengths int64)`` (lists), ``[B, size]`` (``fixed_size_list``),
        or None (not numeric). Every array returned is ``alloc``'s (when given) or fresh."""
        if self.numpy_dtype is None:
            return None
        r = self.root
        new = _empty if alloc is None else alloc
        if isinstance(r, _BoolNode):
            out = new((len(unit),), np.dtype(np.bool_))
            unpack_bits(r.view, r.base, unit, local, out)
            return out
        if isinstance(r, _FixedNode):
            if alloc is None:
                return r.rows(unit, local).view(self.numpy_dtype)
            out = alloc((len(unit),), r.view.dtype)
            np.take(r.view, r.base[unit] + local, out=out)
            return out.view(self.numpy_dtype)
        if isinstance(r, _FixedListNode):
            return r.rows(unit, local, new).view(self.numpy_dtype)  # a fresh, writable [B, size] copy
        assert isinstance(r, _VarNode) and isinstance(r.child, _FixedNode)
        starts, ln = r.bounds(unit, local)
        out = new((len(ids), int(ln.max()) if len(ids) else 0), np.dtype(self.numpy_dtype))
        pad_rows(r.child.span.view(self.numpy_dtype), r.child.base[unit] + starts, ln, out.dtype.type(pad_value), out)
        if alloc is None:
            return out, ln.astype(np.int64, copy=False)
        lengths = alloc((len(ids),), np.dtype(np.int64))
        lengths[...] = ln
        return out, lengths

    def gather(self, ids: np.ndarray, unit: np.ndarray, local: np.ndarray) -> pa.Array | None:
        """Values of this column for ``ids``, in the requested order (None: use the fallback)."""
        return self.root.take(unit, local)


def plan_column(
    index: int, dtype: pa.DataType, units: Sequence[Unit], wholes: Sequence[pa.Buffer | None], num_records: int
) -> ColumnGather | None:
    """A :class:`ColumnGather` for column ``index`` if every unit qualifies, else None."""
    batches = [u.batch for u in units]
    if not units or any(b is None or wholes[u.shard] is None for b, u in zip(batches, units)):
        return None
    span = _Span(address_span([w for w in wholes if w is not None]), wholes)
    try:
        return ColumnGather(_plan(dtype, [b.column(index) for b in batches if b is not None], units, span, index))
    except _Fail:
        return None


def concat_columns(
    parts: Sequence[ColumnGather | None], counts: Sequence[int], wholes: Sequence[pa.Buffer | None]
) -> ColumnGather | None:
    """One column's plan over several sources' units in order, from each source's own plan
    (``parts``, built over its ``counts`` units and its maps): every per-unit base is moved from the part's
    span onto one span over ``wholes`` (all the sources' maps, in order) and the bases are
    concatenated. Equals :func:`plan_column` over the concatenated units (the same nodes, bases
    and checks: a unit's buffers were checked inside its map when its part was planned; a shift
    that is not a whole number of items, or dictionaries that differ, fail here as they fail
    there), at a cost of one array operation per node and part instead of Python steps per unit."""
    roots = [p.root for p in parts if p is not None]
    if not parts or len(roots) < len(parts):
        return None
    span = _Span(address_span([w for w in wholes if w is not None]), wholes)
    try:
        return ColumnGather(_concat(roots, counts, span))
    except _Fail:
        return None


def _shifted(bases: list[np.ndarray], spans: list[_Span], span: _Span, scale: int, width: int) -> np.ndarray:
    """``bases`` (items of ``width`` bytes, times ``scale`` for bit indices) moved onto ``span``;
    negative entries (no bitmap) stay -1."""
    out = []
    for b, s in zip(bases, spans):
        delta = s.buffer.address - span.buffer.address
        if delta < 0 or delta % width:
            raise _Fail
        out.append(np.where(b >= 0, b + delta // width * scale, b) if scale == 8 else b + delta // width)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def _concat_valid(nodes: Sequence[_Node], counts: Sequence[int], span: _Span) -> _Validity | None:
    valids = [n.valid for n in nodes]
    if all(v is None for v in valids):
        return None
    bases = [np.full(c, -1, dtype=np.int64) if v is None else v.base for c, v in zip(counts, valids)]
    spans = [span if v is None else v.span for v in valids]
    return _Validity(span, _shifted(bases, spans, span, 8, 1))


_N = TypeVar("_N", bound=_Node)


def _same(nodes: Sequence[_Node], cls: type[_N]) -> list[_N]:
    """``nodes``, each exactly a ``cls`` (the same type level in every part), else _Fail."""
    out = [n for n in nodes if isinstance(n, cls)]  # no node class derives from another
    if len(out) < len(nodes):
        raise _Fail
    return out


def _concat(nodes: Sequence[_Node], counts: Sequence[int], span: _Span) -> _Node:
    """The node of ``nodes`` (the same type level of each part's plan) over ``span``."""
    first = nodes[0]
    node: _Node
    if isinstance(first, _FixedNode):
        fx = _same(nodes, _FixedNode)
        node = _FixedNode(
            first.dtype, first.width, span, _shifted([n.base for n in fx], [n.span for n in fx], span, 1, first.width)
        )
    elif isinstance(first, _BoolNode):
        bo = _same(nodes, _BoolNode)
        node = _BoolNode(span, _shifted([n.base for n in bo], [n.span for n in bo], span, 8, 1))
    elif isinstance(first, _VarNode):
        va = _same(nodes, _VarNode)
        ow = 8 if first.offset_np is np.int64 else 4
        base = _shifted([n.base for n in va], [n.span for n in va], span, 1, ow)
        node = _VarNode(first.dtype, span, ow, base, _concat([n.child for n in va], counts, span), first.is_bytes)
    elif isinstance(first, _FixedListNode):
        node = _FixedListNode(first.dtype, _concat([n.child for n in _same(nodes, _FixedListNode)], counts, span))
    elif isinstance(first, _StructNode):
        st = _same(nodes, _StructNode)
        node = _StructNode(
            first.dtype, [_concat([n.children[i] for n in st], counts, span) for i in range(len(first.children))]
        )
    elif isinstance(first, _DictionaryNode):
        di = _same(nodes, _DictionaryNode)
        if any(not n.dictionary.equals(first.dictionary) for n in di[1:]):
            raise _Fail
        indices = _concat([n.indices for n in di], counts, span)
        assert isinstance(indices, _FixedNode)
        return _DictionaryNode(first.dtype, indices, first.dictionary)
    else:
        raise _Fail
    node.valid = _concat_valid(nodes, counts, span)
    return node


# -- plans as rows of addresses (decoded units: :mod:`.gather_decoded`) ---------------------------
def _item_bytes(node: _Node) -> int:
    """Bytes per item of the buffer a node's base indexes (1 for bit-indexed nodes)."""
    if isinstance(node, _FixedNode):
        return node.width
    if isinstance(node, _VarNode):
        return 8 if node.offset_np is np.int64 else 4
    return 1


def _children(node: _Node) -> list[_Node]:
    if isinstance(node, (_VarNode, _FixedListNode)):
        return [node.child]
    if isinstance(node, _StructNode):
        return node.children
    return []


def _flatten(node: _Node, out: list[int], keys: Callable[[pa.Array], int] | None) -> bool:
    """Append ``node``'s absolute addresses (its bitmap's first bit or -1, then its own first item
    in bytes, or first bit for ``bool``; then its children's) to ``out``; a dictionary appends its
    dictionary's key (``keys``, -1: none), then its indices' addresses. False for a dictionary
    without a key or an item not aligned to its width."""
    if isinstance(node, _DictionaryNode):
        key = -1 if keys is None else keys(node.dictionary)
        out.append(key)
        return key >= 0 and _flatten(node.indices, out, keys)
    v = node.valid
    out.append(-1 if v is None or v.base[0] < 0 else v.span.buffer.address * 8 + int(v.base[0]))
    if isinstance(node, _BoolNode):
        out.append(node.span.buffer.address * 8 + int(node.base[0]))
    elif isinstance(node, (_FixedNode, _VarNode)):
        w = _item_bytes(node)
        address = node.span.buffer.address + int(node.base[0]) * w
        if address % w:
            return False
        out.append(address)
    return all(_flatten(c, out, keys) for c in _children(node))


def flatten_plan(plan: ColumnGather, keys: Callable[[pa.Array], int] | None = None) -> np.ndarray | None:
    """A plan over one unit as a row of absolute addresses, one per node and bitmap in depth-first
    order (:func:`rebuild_plan` reads them back), or None where it has none (an item not aligned to
    its width; a dictionary that ``keys`` gives no key, -1, or any dictionary without ``keys``). A
    dictionary's entry is the key ``keys`` gives its dictionary: units whose dictionaries have the
    same key are gathered as one (``keys`` must give one key only to equal dictionaries). The
    addresses are only valid while the unit's buffers live."""
    out: list[int] = []
    return np.array(out, dtype=np.int64) if _flatten(plan.root, out, keys) else None


def _rebuild(
    template: _Node, cols: Iterator[np.ndarray], span: _Span, lo: int, dictionaries: Callable[[int], pa.Array] | None
) -> _Node:
    if isinstance(template, _DictionaryNode):  # one dictionary for every unit, or no plan
        keys = next(cols)
        indices = _rebuild(template.indices, cols, span, lo, dictionaries)
        key = int(keys[0])
        if dictionaries is None or key < 0 or not bool((keys == key).all()):
            raise _Fail
        assert isinstance(indices, _FixedNode)
        return _DictionaryNode(template.dtype, indices, dictionaries(key))
    valid = next(cols)
    node: _Node
    if isinstance(template, _BoolNode):
        node = _BoolNode(span, next(cols) - lo * 8)
    elif isinstance(template, _FixedNode):
        node = _FixedNode(template.dtype, template.width, span, (next(cols) - lo) // template.width)
    elif isinstance(template, _VarNode):
        ow = _item_bytes(template)
        base = (next(cols) - lo) // ow
        child = _rebuild(template.child, cols, span, lo, dictionaries)
        node = _VarNode(template.dtype, span, ow, base, child, template.is_bytes)
    elif isinstance(template, _FixedListNode):
        node = _FixedListNode(template.dtype, _rebuild(template.child, cols, span, lo, dictionaries))
    elif isinstance(template, _StructNode):
        node = _StructNode(template.dtype, [_rebuild(c, cols, span, lo, dictionaries) for c in template.children])
    else:  # flatten_plan gives no row to any other node
        raise AssertionError(f"no row for {type(template).__name__}")
    has = valid >= 0
    if has.any():
        node.valid = _Validity(span, np.where(has, valid - lo * 8, -1))
    return node


def rebuild_plan(
    template: ColumnGather,
    rows: np.ndarray,
    span: pa.Buffer,
    dictionaries: Callable[[int], pa.Array] | None = None,
) -> ColumnGather | None:
    """The plan of ``template``'s type over the units whose :func:`flatten_plan` rows are the
    columns of ``rows`` (``[nodes, units]``), on ``span``: a buffer covering every unit's buffers,
    its address a multiple of 64 (so every item width divides each base's offset) and whose
    ``base`` keeps the units alive. Equals :func:`plan_column` over those units (same nodes; each
    base moved onto the span with one array operation). A dictionary level takes its dictionary
    from ``dictionaries`` by the units' key; units whose keys differ have no plan (None: the
    per-unit fallback, as :func:`plan_column` refuses differing dictionaries)."""
    lo = span.address
    if lo % 64:
        raise ValueError(f"span address {lo:#x}: expected a multiple of 64")
    try:
        return ColumnGather(_rebuild(template.root, iter(rows), _Span(span, [None]), lo, dictionaries))
    except _Fail:
        return None
