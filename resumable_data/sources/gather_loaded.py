"""Gather from loaded units: the default collate's numpy layout from decoded record batches.

Algorithm: for units decoded when read (remote units, read-ahead units, local Parquet row groups),
ids are grouped by unit (:func:`.unit_index.group_segments`); per touched unit, an integer/float
column is one indexed read into the batch's rows and a list column one compiled padded copy
(:func:`.copy_kernels.pad_rows_at`) at the rows' positions; lengths are reordered once.

Guarantee: the arrays equal the default collate of ``take(ids)`` (value, dtype, shape), tested on
Hypothesis-drawn ids over IPC and Parquet; None (the caller then takes) when a column is not an
integer/float column or a list of them, or a touched unit holds nulls in it.

Cost: O(len(ids) + values copied) plus a constant number of Python steps per touched unit and
column; nothing kept between calls (the decoded units are the caller's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from resumable_data.sources.copy_kernels import pad_rows_at
from resumable_data.sources.gather import numeric_dtype
from resumable_data.sources.unit_index import group_segments

__all__ = ["gather_loaded_numpy"]


def gather_loaded_numpy(
    unit_batch: Callable[[int], pa.RecordBatch],
    schema: pa.Schema,
    unit: np.ndarray,
    local: np.ndarray,
    num_units: int,
    pad_value: Any,
) -> list[Any] | None:
    """Per column, the default collate's numpy layout of rows ``local`` of units ``unit`` (a 1-D
    array, or ``(padded, lengths)`` for a list column), from the loaded record batches
    ``unit_batch(k)``; None when a column is not an integer/float (or list of them) column or a
    touched unit holds nulls in it (then use ``take``)."""
    kinds = []
    for f in schema:
        t = f.type
        if numeric_dtype(t) is not None:
            kinds.append((False, numeric_dtype(t)))
        elif (pa.types.is_list(t) or pa.types.is_large_list(t)) and numeric_dtype(t.value_type) is not None:
            kinds.append((True, numeric_dtype(t.value_type)))
        else:
            return None
    order, bounds = group_segments(unit, num_units)
    local_s = local[order]
    touched = np.flatnonzero(np.diff(bounds))
    batches = {int(k): unit_batch(int(k)) for k in touched}
    n = len(unit)
    out: list[Any] = []
    for i, (is_list, dtype) in enumerate(kinds):
        if not is_list:
            res = np.empty(n, dtype=dtype)
            for k in touched:
                a, b = bounds[k], bounds[k + 1]
                col = batches[int(k)].column(i)
                if col.null_count:
                    return None
                res[order[a:b]] = col.to_numpy(zero_copy_only=False)[local_s[a:b]]
            out.append(res)
            continue
        starts = np.empty(n, dtype=np.int64)
        lengths = np.empty(n, dtype=np.int64)
        values = {}
        for k in touched:
            a, b = bounds[k], bounds[k + 1]
            col = batches[int(k)].column(i)
            flat = col.values
            if col.null_count or flat.null_count:
                return None
            offs = col.offsets.to_numpy(zero_copy_only=False)
            rows = local_s[a:b]
            starts[a:b] = offs[rows]
            lengths[a:b] = offs[rows + 1] - starts[a:b]
            values[int(k)] = flat.to_numpy(zero_copy_only=False)
        width = int(lengths.max()) if n else 0
        res = np.empty((n, width), dtype=dtype)
        pad = res.dtype.type(pad_value)
        for k in touched:
            a, b = bounds[k], bounds[k + 1]
            pad_rows_at(values[int(k)], starts[a:b], lengths[a:b], order[a:b], pad, res)
        ln = np.empty(n, dtype=np.int64)
        ln[order] = lengths
        out.append((res, ln))
    return out
