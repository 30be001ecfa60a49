"""A column's gather plan: a small tree of nodes that mirrors its Arrow type, and how each node reads.

Algorithm:

- one address space: the shards' memory maps all live in this process's address space, so one
  Arrow buffer spans from the lowest to the highest mapped address (kept alive by the maps,
  :func:`address_span`). Every buffer the gather reads is checked, when the per-column plan is
  built, to lie inside some map (:class:`Span`); the gaps between maps are never read. This is
  what makes the gather a constant number of vectorized calls per column whatever the number of
  shards and record batches touched.
- a column's plan (:func:`plan_node`) is a small tree that mirrors its Arrow type, one node per
  level, each holding one integer per unit (where that unit's buffer starts in the span); each
  node's ``take(unit, local)`` reads with the compiled copies of :mod:`.copy_kernels`:

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

  Any other type, or a buffer not inside the map or misaligned, raises :class:`NoPlan` while the
  plan is built; a node's ``take`` answers None (a ``string`` batch over 2 GiB): either way the
  column takes the fallback of :mod:`.gather`.

Guarantee: a node's ``take(unit, local)`` equals Arrow's ``take`` of those rows of those units,
in the requested order, duplicates included. Offsets are read from a unit only after the unit
passed ``RecordBatch.validate(full=True)`` (:mod:`.validate`: the caller validates every unit it
touches first), so every offset is monotone and inside its buffer.

Cost: a ``take`` is O(rows + gathered values), a constant number of Python steps per type level;
memory beyond the maps: 8 bytes per unit per node, built once (the plan reads buffer addresses,
never data).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from resumable_data.errors import DatasetIntegrityError
from resumable_data.sources.copy_kernels import copy_rows, gather_bits, gather_runs
from resumable_data.sources.unit_index import Unit

__all__ = [
    "Alloc",
    "BoolNode",
    "DictionaryNode",
    "FixedListNode",
    "FixedNode",
    "NoPlan",
    "Node",
    "Span",
    "StructNode",
    "Validity",
    "VarNode",
    "address_span",
    "alloc_empty",
    "plan_node",
]

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

#: ``alloc(shape, dtype)``: a writable, C-contiguous array of that shape and dtype that the numpy
#: layout's gather writes into (every element is written); ``np.empty`` when none is given.
Alloc = Callable[[tuple[int, ...], np.dtype], np.ndarray]


def alloc_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """The default :data:`Alloc`: a fresh ``np.empty``."""
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


class Span:
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


class NoPlan(Exception):
    """A unit's buffers do not fit the fast path: the column takes the fallback."""


def _bounds_error(u: Unit, index: int) -> DatasetIntegrityError:
    return DatasetIntegrityError(
        f"shard #{u.shard}, record batch at record {u.start}: column {index} has offsets or "
        "lengths outside its data buffer (the file is damaged); fix: verify(level='content') "
        "to find it, restore the file, or re-write the shard"
    )


class Validity:
    """A level's null bitmaps: bit ``base[unit] + local`` of the span; ``base`` -1: no nulls there."""

    def __init__(self, span: Span, base: np.ndarray) -> None:
        self.span, self.view, self.base = span, span.view(np.uint8), base

    def take(self, unit: np.ndarray, local: np.ndarray) -> tuple[pa.Buffer | None, int]:
        packed = np.zeros((len(unit) + 7) // 8, dtype=np.uint8)
        nulls = len(unit) - int(gather_bits(self.view, self.base, unit, local, packed))
        return (pa.py_buffer(packed) if nulls else None), nulls


class Node:
    """One type level of a column's plan: ``take(unit, local)`` gathers rows ``local`` of units
    ``unit`` (None: this call must take the fallback); ``valid``: its null bitmaps, or None."""

    kind = ""
    valid: Validity | None = None

    def __init__(self, dtype: pa.DataType) -> None:
        self.dtype = dtype

    def nulls(self, unit: np.ndarray, local: np.ndarray) -> tuple[pa.Buffer | None, int]:
        return (None, 0) if self.valid is None else self.valid.take(unit, local)

    def take(self, unit: np.ndarray, local: np.ndarray) -> pa.Array | None:
        raise NotImplementedError


class FixedNode(Node):
    kind = "fixed"

    def __init__(self, dtype: pa.DataType, width: int, span: Span, base: np.ndarray) -> None:
        super().__init__(dtype)
        self.width, self.span, self.base = width, span, base
        self.view = span.view(_UINT[width])

    def rows(self, unit: np.ndarray, local: np.ndarray) -> np.ndarray:
        return self.view[self.base[unit] + local]

    def take(self, unit: np.ndarray, local: np.ndarray) -> pa.Array:
        out = self.rows(unit, local)
        vb, nulls = self.nulls(unit, local)
        return pa.Array.from_buffers(self.dtype, len(out), [vb, pa.py_buffer(out)], null_count=nulls)


class BoolNode(Node):
    kind = "bool"

    def __init__(self, span: Span, bit_base: np.ndarray) -> None:
        super().__init__(pa.bool_())
        self.span, self.view, self.base = span, span.view(np.uint8), bit_base

    def take(self, unit: np.ndarray, local: np.ndarray) -> pa.Array:
        packed = np.zeros((len(unit) + 7) // 8, dtype=np.uint8)
        gather_bits(self.view, self.base, unit, local, packed)  # the base of every unit is >= 0
        vb, nulls = self.nulls(unit, local)
        return pa.Array.from_buffers(pa.bool_(), len(unit), [vb, pa.py_buffer(packed)], null_count=nulls)


class VarNode(Node):
    """list / large_list / string / binary (and large): offsets read from the map per call."""

    kind = "list"

    def __init__(
        self, dtype: pa.DataType, span: Span, offset_width: int, base: np.ndarray, child: Node, is_bytes: bool
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
        if isinstance(c, FixedNode) and c.valid is None:  # one compiled pass: ends, then one copy a run
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


class FixedListNode(Node):
    kind = "fixed_list"

    def __init__(self, dtype: pa.DataType, child: Node) -> None:
        super().__init__(dtype)
        self.size, self.child = dtype.list_size, child

    def rows(self, unit: np.ndarray, local: np.ndarray, alloc: Alloc = alloc_empty) -> np.ndarray:
        """``[B, size]`` raw values (child fixed width only): one compiled copy per row."""
        c = self.child
        assert isinstance(c, FixedNode)  # ColumnGather and take call it only then
        out = alloc((len(unit), self.size), c.view.dtype)
        copy_rows(c.view, c.base[unit] + local * self.size, out)
        return out

    def take(self, unit: np.ndarray, local: np.ndarray) -> pa.Array | None:
        n, size = len(unit), self.size
        if isinstance(self.child, FixedNode) and self.child.valid is None:
            flat_np = self.rows(unit, local).reshape(-1)
            flat = pa.Array.from_buffers(self.child.dtype, n * size, [None, pa.py_buffer(flat_np)], null_count=0)
        else:
            cl = (local[:, None] * size + np.arange(size)).reshape(-1)
            flat = self.child.take(np.repeat(unit, size), cl)
            if flat is None:
                return None
        vb, nulls = self.nulls(unit, local)
        return pa.Array.from_buffers(self.dtype, n, [vb], null_count=nulls, children=[flat])


class StructNode(Node):
    kind = "struct"

    def __init__(self, dtype: pa.DataType, children: list[Node]) -> None:
        super().__init__(dtype)
        self.children = children

    def take(self, unit: np.ndarray, local: np.ndarray) -> pa.Array | None:
        cols = [c.take(unit, local) for c in self.children]
        if any(c is None for c in cols):
            return None
        vb, nulls = self.nulls(unit, local)
        return pa.Array.from_buffers(self.dtype, len(unit), [vb], null_count=nulls, children=cols)


class DictionaryNode(Node):
    kind = "dictionary"

    def __init__(self, dtype: pa.DataType, indices: FixedNode, dictionary: pa.Array) -> None:
        super().__init__(dtype)
        self.indices, self.dictionary = indices, dictionary

    def take(self, unit: np.ndarray, local: np.ndarray) -> pa.Array:
        return pa.DictionaryArray.from_arrays(self.indices.take(unit, local), self.dictionary)


def plan_node(dtype: pa.DataType, arrays: list[pa.Array], units: Sequence[Unit], span: Span, index: int) -> Node:
    """The node for ``dtype`` over per-unit ``arrays`` (offset-adjusted); raises NoPlan."""
    if isinstance(dtype, pa.ExtensionType):
        raise NoPlan
    node = _plan_values(dtype, arrays, units, span, index)
    if not isinstance(node, DictionaryNode):  # a dictionary's nulls are its indices' nulls
        node.valid = _validity(arrays, units, span, index)
    return node


def _validity(arrays: list[pa.Array], units: Sequence[Unit], span: Span, index: int) -> Validity | None:
    if not any(a.null_count for a in arrays):
        return None
    return Validity(span, _bit_bases(arrays, units, span, index, 0, lambda arr: arr.null_count > 0))


def _bit_bases(
    arrays: list[pa.Array],
    units: Sequence[Unit],
    span: Span,
    index: int,
    buffer: int,
    has: Callable[[pa.Array], bool] = lambda arr: True,
) -> np.ndarray:
    """Per unit, the bit index in ``span`` of row 0 of a bitmap (buffer ``buffer``: 0 the validity,
    1 a ``bool`` column's values); -1 for a unit ``has`` says holds none (no nulls)."""
    base = np.full(len(arrays), -1, dtype=np.int64)
    for k, (u, arr) in enumerate(zip(units, arrays)):
        if has(arr):
            buf = arr.buffers()[buffer]
            b = span.base(buf, u.shard, 1)
            if b is None:
                raise NoPlan
            if (arr.offset + len(arr) + 7) // 8 > buf.size:
                raise _bounds_error(u, index)
            base[k] = b * 8 + arr.offset
    return base


def _plan_values(dtype: pa.DataType, arrays: list[pa.Array], units: Sequence[Unit], span: Span, index: int) -> Node:
    width = _fixed_width(dtype)
    if width is not None:
        base = np.empty(len(arrays), dtype=np.int64)
        for k, (u, arr) in enumerate(zip(units, arrays)):
            buf = arr.buffers()[1]
            b = span.base(buf, u.shard, width)
            if b is None:
                raise NoPlan
            if (arr.offset + len(arr)) * width > buf.size:
                raise _bounds_error(u, index)
            base[k] = b + arr.offset  # element of the unit's row 0: pos = base[unit] + local
        return FixedNode(dtype, width, span, base)
    if pa.types.is_boolean(dtype):
        return BoolNode(span, _bit_bases(arrays, units, span, index, 1))
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
                raise NoPlan
            base[k] = b + arr.offset
        if is_bytes:
            data = np.empty(len(arrays), dtype=np.int64)
            for k, (u, arr) in enumerate(zip(units, arrays)):
                b = span.base(arr.buffers()[2], u.shard, 1)
                if b is None:
                    raise NoPlan
                data[k] = b
            child: Node = FixedNode(pa.uint8(), 1, span, data)
        else:
            child = plan_node(dtype.value_type, [a.values for a in arrays], units, span, index)
        return VarNode(dtype, span, ow, base, child, is_bytes)
    if pa.types.is_fixed_size_list(dtype):
        size = dtype.list_size
        child = plan_node(
            dtype.value_type, [a.values.slice(a.offset * size, len(a) * size) for a in arrays], units, span, index
        )
        return FixedListNode(dtype, child)
    if pa.types.is_struct(dtype):  # field(i): offset-adjusted, the struct's own nulls not merged in
        return StructNode(
            dtype, [plan_node(f.type, [a.field(i) for a in arrays], units, span, index) for i, f in enumerate(dtype)]
        )
    if pa.types.is_dictionary(dtype):
        first = arrays[0].dictionary
        addr = [b.address if b is not None else None for b in first.buffers()]
        for a in arrays[1:]:
            d = a.dictionary
            if [b.address if b is not None else None for b in d.buffers()] != addr and not d.equals(first):
                raise NoPlan
        indices = plan_node(dtype.index_type, [a.indices for a in arrays], units, span, index)
        assert isinstance(indices, FixedNode)
        return DictionaryNode(dtype, indices, first)
    raise NoPlan
