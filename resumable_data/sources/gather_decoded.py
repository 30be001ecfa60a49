"""Gather from decoded units: the mapped shards' column plans, over the units one batch touches.

What. A unit that is not memory-mapped (a Parquet row group; a record batch read by range from a
remote store or from the read-ahead cache) is decoded into its own Arrow record batch, somewhere
in this process's heap. A shuffled batch touches many such units (a global shuffle of 200,000
records over 1,000-row row groups: about 200 per batch of 256). Gathering them one unit at a time
costs Python steps per touched unit and column (about 20 us each: Parquet global shuffles ran at
0.00x-0.64x of the ceiling); this module gathers them with the plans and compiled copies of
:mod:`.gather`, a constant number of vectorised calls per column and type level.

Algorithm.

* At decode (:func:`unit_rows`, once per decoded unit): each column is planned over that unit
  alone (:func:`.gather.plan_column` over the batch's own buffers: every buffer it reads is checked
  inside the batch, offsets inside their buffers, as for a mapped shard) and the plan is flattened
  into a row of absolute addresses, one per node and bitmap in depth-first order (a node's first
  item in bytes; a bitmap's or ``bool``'s first bit in bits; -1 for a level without nulls). A column
  whose plan fails (a dictionary, a type without a fast path, a buffer not aligned to its item
  width) has no row there.
* Per batch (:func:`plan_touched`): the touched units' rows are stacked; one span covers their
  batches (from the lowest to the highest buffer address; the gaps are never read, as between
  shard maps) and keeps them alive; each node's per-unit bases are its column of the stacked
  rows moved onto the span (``(address - span start) / item width``, one array operation) and the
  tree is rebuilt with the same node classes. Record ids are renumbered to the touched units
  (``0..t-1``), so the plan is the one :func:`.gather.plan_column` would build over those units.
  The caller (:meth:`.unit_reads.UnitReads.touched`) holds a batch's touched units only while their
  decoded bytes fit the decoded-unit budget; a batch needing more takes them one at a time.

Guarantee: the result equals ``Table.take`` of the ids (tested against it and against the
per-unit Arrow take, on Hypothesis-drawn ids, for every type the gather has a fast path for,
with nulls at every level); a unit's buffers are read only while the span holds its batch.

Cost: per decoded unit, one plan per column (Python steps per type level, once); per batch,
O(touched units) to stack the rows, one array operation per node and one gather as over mapped
shards (O(ids + values copied)); nothing is kept between batches.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from resumable_data.sources.gather import ColumnGather, address_span, flatten_plan, plan_column, rebuild_plan
from resumable_data.sources.unit_index import Unit

__all__ = ["DecodedRows", "DecodedUnit", "plan_touched", "unit_rows"]

_ALIGN = 64  # the span starts on this boundary, so every item width divides its offsets


class DecodedRows:
    """One decoded unit's plan rows: per column its flattened plan (:func:`.gather.flatten_plan`),
    or None where the column has no fast path in this unit; the plans over this unit alone, kept
    as the templates the rows rebuild; ``lo``/``hi``: the address range of its buffers."""

    __slots__ = ("hi", "lo", "rows", "templates")

    def __init__(self, rows: list[np.ndarray | None], templates: list[ColumnGather | None], lo: int, hi: int) -> None:
        self.rows, self.templates, self.lo, self.hi = rows, templates, lo, hi


class DecodedUnit:
    """A decoded unit as its source keeps it: the batch, its buffer bytes, and its plan rows,
    computed on first use (:meth:`plan_rows`; a unit decoded again and again because the batches
    need more units than the decoded-unit budget keeps never pays for them)."""

    __slots__ = ("_rows", "batch", "nbytes")

    def __init__(self, batch: pa.RecordBatch) -> None:
        self.batch, self.nbytes = batch, batch.get_total_buffer_size()
        self._rows: DecodedRows | None = None

    def plan_rows(self) -> DecodedRows:
        """:func:`unit_rows` of the batch (computed once)."""
        rows = self._rows
        if rows is None:
            rows = self._rows = unit_rows(self.batch)
        return rows


def unit_rows(batch: pa.RecordBatch) -> DecodedRows:
    """The plan rows of a decoded record batch, which the caller validated
    (``RecordBatch.validate(full=True)``) first; a column without a fast path here has None."""
    n = batch.num_columns
    buffers = [b for col in batch.columns for b in col.buffers() if b is not None and b.size]
    if not buffers or batch.num_rows == 0:
        return DecodedRows([None] * n, [None] * n, 0, 0)
    whole = address_span(buffers)
    unit = [Unit(0, 0, batch.num_rows, batch, None)]
    rows: list[np.ndarray | None] = []
    templates: list[ColumnGather | None] = []
    for i, f in enumerate(batch.schema):
        plan = plan_column(i, f.type, unit, [whole], batch.num_rows)
        row = None if plan is None else flatten_plan(plan)
        rows.append(row)
        templates.append(None if row is None else plan)
    return DecodedRows(rows, templates, whole.address, whole.address + whole.size)


def plan_touched(units: Sequence[DecodedUnit]) -> list[ColumnGather | None]:
    """Per column, the plan over the touched ``units`` (numbered ``0..t-1`` in this order), or
    None where some touched unit has no row for the column; the plans' span holds the units'
    batches alive."""
    rows = [u.plan_rows() for u in units]
    lo = min(r.lo for r in rows) // _ALIGN * _ALIGN
    hi = max(r.hi for r in rows)
    span = pa.foreign_buffer(lo, hi - lo, base=tuple(u.batch for u in units))
    out: list[ColumnGather | None] = []
    for i, template in enumerate(rows[0].templates):
        cols = [c for c in (r.rows[i] for r in rows) if c is not None]
        if template is None or len(cols) < len(rows):
            out.append(None)
        else:
            out.append(rebuild_plan(template, np.stack(cols, axis=1), span))
    return out
