"""The default batch of an Arrow source: a dict of tensors built with vectorized numpy.

Per column of the gathered ``pyarrow.Table``:

* numeric and boolean columns become 1-D tensors (zero-copy where Arrow allows it);
* ``list<numeric>`` columns become a ``[B, L]`` tensor padded with :data:`PAD_VALUE` (0) to the
  batch's longest list, plus ``<name>_lengths``, an int64 ``[B]`` tensor of true lengths (a null
  list has length 0);
* ``fixed_size_list<numeric>`` columns become ``[B, size]`` tensors;
* anything else (strings, structs, ...) becomes a Python list.

A source with ``take_numpy`` (``rd.ArrowShards``) can build the same arrays straight from its
memory maps (:func:`gathered_to_numpy`): one copy of the values, no intermediate Arrow table.

Cost: one pass over the gathered values; no per-row Python loop for numeric data. Workers build
the batch as numpy arrays, which reach the main process through a reused shared-memory slot
(:mod:`.transport`) and become tensors there without a copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import torch

__all__ = [
    "LENGTHS_SUFFIX",
    "PAD_VALUE",
    "arrow_to_numpy",
    "arrow_to_tensors",
    "gathered_to_numpy",
    "list_lengths",
    "to_torch",
]

PAD_VALUE = 0
LENGTHS_SUFFIX = "_lengths"


def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def _single(col: pa.ChunkedArray) -> pa.Array:
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def list_lengths(arr: pa.Array) -> np.ndarray:
    """True lengths of a (large) list array, 0 for nulls (int64)."""
    offsets = arr.offsets.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    lengths = np.diff(offsets)
    if arr.null_count:
        lengths = np.where(arr.is_null().to_numpy(zero_copy_only=False), 0, lengths)
    return lengths


def _pad(arr: pa.Array, pad_value: Any) -> tuple[np.ndarray, np.ndarray]:
    lengths = list_lengths(arr)
    flat = arr.flatten().to_numpy(zero_copy_only=False)
    width = int(lengths.max()) if lengths.size else 0
    out = np.full((len(arr), width), pad_value, dtype=flat.dtype)
    out[np.arange(width)[None, :] < lengths[:, None]] = flat
    return out, lengths


def arrow_to_numpy(table: pa.Table, pad_value: Any = PAD_VALUE) -> dict[str, Any]:
    """The default batch of ``table`` as numpy arrays (what workers send: see :func:`to_torch`)."""
    out: dict[str, Any] = {}
    for name, col in zip(table.column_names, table.columns):
        t = col.type
        if _is_numeric(t) and col.null_count == 0:
            out[name] = np.array(col.to_numpy(), copy=True)
        elif (pa.types.is_list(t) or pa.types.is_large_list(t)) and _is_numeric(t.value_type):
            out[name], out[name + LENGTHS_SUFFIX] = _pad(_single(col), pad_value)
        elif pa.types.is_fixed_size_list(t) and _is_numeric(t.value_type) and col.null_count == 0:
            flat = _single(col).flatten().to_numpy(zero_copy_only=False)
            out[name] = np.array(flat.reshape(len(col), t.list_size), copy=True)  # writable, like torch's
        else:
            out[name] = col.to_pylist()
    return out


def gathered_to_numpy(names: list[str], columns: list[Any]) -> dict[str, Any]:
    """The :func:`arrow_to_numpy` batch from a source's ``take_numpy`` columns (same arrays)."""
    out: dict[str, Any] = {}
    for name, col in zip(names, columns):
        if isinstance(col, tuple):
            out[name], out[name + LENGTHS_SUFFIX] = col
        else:
            out[name] = col
    return out


def to_torch(batch: dict[str, Any]) -> dict[str, Any]:
    """numpy arrays (and numpy scalars) of a batch dict as tensors, zero-copy; the rest as is."""
    return {
        k: torch.from_numpy(v) if isinstance(v, np.ndarray) else torch.as_tensor(v) if isinstance(v, np.generic) else v
        for k, v in batch.items()
    }


def arrow_to_tensors(table: pa.Table, pad_value: Any = PAD_VALUE) -> dict[str, Any]:
    """The default batch of ``table`` (see the module docstring)."""
    return to_torch(arrow_to_numpy(table, pad_value))
