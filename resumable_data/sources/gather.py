"""Batched gather of records from memory-mapped Arrow shards: the engine behind ``take``.

Algorithm: record ids map to (unit, local row) by one compiled pass over the prefix sum of unit
row counts (a unit is an IPC record batch or a Parquet row group), each id searched only among the
units of its bucket of records (:mod:`.unit_index`). Then, column by column:

- a column's plan (:func:`plan_column`, :class:`ColumnGather`) is a small tree that mirrors its
  Arrow type, built once over one address span covering every shard's map; its nodes and how each
  reads are :mod:`.gather_plan`'s.
- padded numpy batch (``to_numpy``, the default collate's layout, for integer, floating and
  ``bool`` columns): a fixed-width column is the same indexed read, reinterpreted; a ``bool``
  column one compiled loop unpacking the bits into a numpy ``bool`` array; a list column is
  written straight into the ``[B, max length]`` padded array by one compiled loop; a
  ``fixed_size_list`` is the ``[B, L]`` rows. A column with nulls has no numpy layout (the
  collate makes Python lists of it, from the Arrow result). Every output array is the caller's
  ``alloc(shape, dtype)`` when one is given (a loader worker's shared-memory slot: the batch is
  then written once, where the main process reads it; :data:`.gather_plan.Alloc`), else a fresh
  one.
- concatenated sources and decoded units (Parquet row groups, record batches read by range from a
  remote store): their plans are the same trees, moved between spans (:mod:`.gather_rows`).
- fallback (dictionaries that differ between the units a batch touches, compressed IPC,
  ``decimal``, ``map``, unions, extension types, buffers not inside the map or misaligned, a
  ``string`` batch over 2 GiB): ids are grouped
  by unit, each unit does an Arrow ``take``, the pieces are concatenated and reordered with one
  ``take`` on the small result. Never a ``take`` over a multi-chunk table.

Guarantee: the result equals ``Table.take(ids)`` on the shards concatenated into one table, in
the requested order, duplicates included (tests check fast path == fallback == Table.take for
every type :mod:`.gather_plan` lists).

Cost: O(len(ids) + gathered values) per call and a constant number of Python steps per column
and type level (the fallback adds one per touched unit); the plan's memory: :mod:`.gather_plan`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from resumable_data.sources.copy_kernels import pad_rows, unpack_bits
from resumable_data.sources.gather_plan import (
    Alloc,
    BoolNode,
    FixedListNode,
    FixedNode,
    Node,
    NoPlan,
    Span,
    VarNode,
    address_span,
    alloc_empty,
    plan_node,
)
from resumable_data.sources.unit_index import Unit

__all__ = [
    "ColumnGather",
    "has_numpy_layout",
    "numeric_dtype",
    "plan_column",
]


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


class ColumnGather:
    """Fast gather for one column; built by :func:`plan_column`, or None when it does not apply."""

    def __init__(self, root: Node) -> None:
        self.root = root
        self.kind = root.kind
        self.dtype = root.dtype
        r = root
        self.numpy_dtype = None  # nulls anywhere: the collate's Python lists, from take()
        if isinstance(r, FixedNode) and r.valid is None:
            self.numpy_dtype = numeric_dtype(r.dtype)
        elif isinstance(r, BoolNode) and r.valid is None:
            self.numpy_dtype = np.dtype(np.bool_)
        elif (
            ((isinstance(r, VarNode) and not r.is_bytes) or isinstance(r, FixedListNode))
            and isinstance(r.child, FixedNode)
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
        new = alloc_empty if alloc is None else alloc
        if isinstance(r, BoolNode):
            out = new((len(unit),), np.dtype(np.bool_))
            unpack_bits(r.view, r.base, unit, local, out)
            return out
        if isinstance(r, FixedNode):
            if alloc is None:
                return r.rows(unit, local).view(self.numpy_dtype)
            out = alloc((len(unit),), r.view.dtype)
            np.take(r.view, r.base[unit] + local, out=out)
            return out.view(self.numpy_dtype)
        if isinstance(r, FixedListNode):
            return r.rows(unit, local, new).view(self.numpy_dtype)  # a fresh, writable [B, size] copy
        assert isinstance(r, VarNode) and isinstance(r.child, FixedNode)
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
    span = Span(address_span([w for w in wholes if w is not None]), wholes)
    try:
        return ColumnGather(plan_node(dtype, [b.column(index) for b in batches if b is not None], units, span, index))
    except NoPlan:
        return None
