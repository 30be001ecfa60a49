"""Compiled copy kernels of the gather: byte runs and bits moved between numpy views.

Algorithm: each kernel is one compiled loop over the requested rows. A run of values (a string's
bytes, a list's numbers, a ``fixed_size_list`` row) is one ``memcpy`` (:func:`memcpy`, a numba
intrinsic that accepts only one contiguous block of one item type, checked at compile time);
``pad_rows`` / ``pad_rows_at`` write list rows into a ``[B, width]`` padded array (fill, then
copy); ``copy_runs`` packs runs back to back at given offsets; ``gather_runs`` reads the rows'
runs from a mapped offsets buffer and packs them (their offsets, then one copy each); ``gather_bits`` reads bit ``base +
local`` of every row (validity bitmaps, ``bool`` values) and packs them, returning the count of
set bits; ``unpack_bits`` reads them into a numpy ``bool`` array.

Guarantee: pure functions of their arrays: no allocation (``gather_runs``: its result), no Python objects, no reads outside
the indices the caller passes (the caller, :mod:`.gather_plan`, checks every index against the
validated buffers first).

Cost: O(rows + bytes copied) per call, ~150 ns of call overhead; nothing kept between calls.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["copy_rows", "copy_runs", "gather_bits", "gather_runs", "memcpy", "pad_rows", "pad_rows_at", "unpack_bits"]


@intrinsic
def memcpy(typingctx, out, at, values, start, count):  # pragma: no cover - compiled
    """``out[at:at + count] = values[start:start + count]`` as one ``memcpy`` (1-D contiguous
    arrays of one item type; no bounds check, as numba's slices have none: callers pass runs
    checked against their buffers). Numba's slice assignment is a per-item loop, ~8x slower."""

    def codegen(context, builder, sig, args):
        out_, at_, values_, start_, count_ = args
        dst = builder.gep(context.make_array(sig.args[0])(context, builder, out_).data, [at_])
        src = builder.gep(context.make_array(sig.args[2])(context, builder, values_).data, [start_])
        item = context.get_abi_sizeof(context.get_data_type(sig.args[0].dtype))
        cgutils.raw_memcpy(builder, dst, src, count_, item)
        return context.get_dummy_value()

    if not (out.layout == values.layout == "C" and out.dtype == values.dtype):
        return None  # not one contiguous block of one item type: a typing error, never a wrong copy
    return types.void(out, types.int64, values, types.int64, types.int64), codegen


@njit(cache=True, nogil=True)
def pad_rows(values, starts, lengths, pad, out):  # pragma: no cover - compiled
    """``out[b, :lengths[b]] = values[starts[b]:starts[b] + lengths[b]]``, the rest ``pad``."""
    width = out.shape[1]
    flat = out.reshape(out.size)
    for b in range(starts.shape[0]):
        n = lengths[b]
        memcpy(flat, np.int64(b * width), values, np.int64(starts[b]), np.int64(n))
        row = out[b]
        for t in range(n, width):
            row[t] = pad


@njit(cache=True, nogil=True)
def pad_rows_at(values, starts, lengths, rows, pad, out):  # pragma: no cover - compiled
    """``out[rows[j], :lengths[j]] = values[starts[j]:starts[j] + lengths[j]]``, the rest ``pad``."""
    width = out.shape[1]
    flat = out.reshape(out.size)
    for j in range(starts.shape[0]):
        n = lengths[j]
        memcpy(flat, np.int64(rows[j] * width), values, np.int64(starts[j]), np.int64(n))
        row = out[rows[j]]
        for t in range(n, width):
            row[t] = pad


@njit(cache=True, nogil=True)
def copy_runs(values, starts, lengths, offsets, out):  # pragma: no cover - compiled
    """``out[offsets[b]:offsets[b] + lengths[b]] = values[starts[b]:starts[b] + lengths[b]]``."""
    for b in range(starts.shape[0]):
        memcpy(out, np.int64(offsets[b]), values, np.int64(starts[b]), np.int64(lengths[b]))


@njit(cache=True, nogil=True)
def unpack_bits(data, base, unit, local, out):  # pragma: no cover - compiled
    """``out[j]`` (a ``bool`` array) = bit ``base[unit[j]] + local[j]`` of ``data`` (LSB first,
    Arrow's order): a ``bool`` column as the default collate's numpy array, in one pass."""
    for j in range(unit.shape[0]):
        b = base[unit[j]] + local[j]
        out[j] = (data[b >> 3] >> (b & 7)) & 1


@njit(cache=True, nogil=True)
def gather_runs(offsets, base, values, values_base, unit, local, limit, out_offsets):  # pragma: no cover - compiled
    """The runs of a variable-length column's rows, back to back: row ``j`` is item
    ``a = base[unit[j]] + local[j]`` of ``offsets``, its run ``values[values_base[unit[j]] +
    offsets[a]:... + offsets[a + 1]]``. Writes ``out_offsets`` (``[0, end of row 0, ...]``) and
    returns ``(the runs' values, their total)``; ``(empty, -1)`` as soon as the total exceeds
    ``limit`` (the item count ``out_offsets``' type can hold). Two passes: the ends, then one
    ``memcpy`` a run into the array allocated between them."""
    n = unit.shape[0]
    starts = np.empty(n, np.int64)
    total = 0
    out_offsets[0] = 0
    for j in range(n):
        at = base[unit[j]] + local[j]
        first = offsets[at]
        total += offsets[at + 1] - first
        if total > limit:
            return np.empty(0, values.dtype), -1
        starts[j] = values_base[unit[j]] + first
        out_offsets[j + 1] = total
    data = np.empty(total, values.dtype)
    for j in range(n):
        at = out_offsets[j]
        memcpy(data, np.int64(at), values, np.int64(starts[j]), np.int64(out_offsets[j + 1] - at))
    return data, total


@njit(cache=True, nogil=True)
def copy_rows(values, starts, out):  # pragma: no cover - compiled
    """``out[b] = values[starts[b]:starts[b] + out.shape[1]]`` (fixed-size rows)."""
    m = out.shape[1]
    flat = out.reshape(out.size)
    for b in range(starts.shape[0]):
        memcpy(flat, np.int64(b * m), values, np.int64(starts[b]), np.int64(m))


@njit(cache=True, nogil=True)
def gather_bits(data, base, unit, local, out):  # pragma: no cover - compiled
    """Bit ``j`` of ``out`` (zeroed, LSB first, Arrow's order) = bit ``base[unit[j]] + local[j]``
    of ``data``, or 1 where that base is negative (a unit without a bitmap); returns the count of
    set bits; ``unpack_bits`` reads them into a numpy ``bool`` array. One pass, no intermediate array of bits."""
    ones = 0
    for j in range(unit.shape[0]):
        b = base[unit[j]]
        if b < 0:
            bit = 1
        else:
            b += local[j]
            bit = (data[b >> 3] >> (b & 7)) & 1
        if bit:
            out[j >> 3] |= np.uint8(1 << (j & 7))
            ones += 1
    return ones
