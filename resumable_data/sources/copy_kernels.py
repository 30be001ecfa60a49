"""Compiled copy kernels of the gather: byte runs and bits moved between numpy views.

Algorithm: each kernel is one compiled loop over the requested rows. A run of values (a string's
bytes, a list's numbers, a ``fixed_size_list`` row) is one ``memcpy`` (:func:`memcpy`, a numba
intrinsic that accepts only one contiguous block of one item type, checked at compile time);
``pad_rows`` / ``pad_rows_at`` write list rows into a ``[B, width]`` padded array (fill, then
copy); ``copy_runs`` packs runs back to back at given offsets; ``gather_bits`` reads bit ``base +
local`` of every row (validity bitmaps, ``bool`` values) and packs them, returning the count of
set bits.

Guarantee: pure functions of their arrays: no allocation, no Python objects, no reads outside
the indices the caller passes (the caller, :mod:`.gather`, checks every index against the
validated buffers first).

Cost: O(rows + bytes copied) per call, ~150 ns of call overhead; nothing kept between calls.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["copy_rows", "copy_runs", "gather_bits", "memcpy", "pad_rows", "pad_rows_at"]


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
    set bits. One pass, no intermediate array of bits."""
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
