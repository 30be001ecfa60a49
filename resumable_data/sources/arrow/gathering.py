"""The gather of a batch of located ids: which column plans serve it, and the per-unit fallback.

Algorithm: a source whose every unit is a zero-copy batch of a map gathers through column plans
over the maps (:func:`~resumable_data.sources.gather.plan_column`, built on first use and kept;
a view's are its sources' plans rebased, :func:`~resumable_data.sources.gather_rows.concat_columns`),
after validating the batches it touches (:mod:`.unit_validation`). A source with units decoded
when read (:mod:`...unit_reads`) gathers through plans rebuilt over the units a batch touches
(:meth:`~resumable_data.sources.unit_reads.UnitReads.touched`, :mod:`...gather_decoded`). A column
no plan serves is gathered by the fallback: one Arrow ``take`` per touched unit, then one reorder
``take`` of the small result. :meth:`Gathering.numpy` gives the default collate's numpy layout
where every column's plan has one, else None (the caller then takes a Table).

Guarantee: :meth:`Gathering.take` equals ``Table.take(ids)`` on the shards concatenated in
manifest order whichever path serves each column (``tests/sources/test_gather.py`` compares the
plans, the fallback and ``Table.take``); no value of a zero-copy batch is gathered before the
batch was validated.

Cost: a plan over the maps is built once per source (O(units) per column; a view's: one array
operation per column and source); a batch costs one compiled gather per column, the fallback one
Arrow take per touched unit. Nothing to restore: an unpickled source plans again on its first read.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from resumable_data.sources.arrow.unit_table import UnitTable
from resumable_data.sources.arrow.unit_validation import UnitValidation
from resumable_data.sources.gather import ColumnGather, has_numpy_layout, plan_column
from resumable_data.sources.gather_decoded import DecodedUnit
from resumable_data.sources.gather_plan import Alloc
from resumable_data.sources.gather_rows import concat_columns
from resumable_data.sources.unit_index import group_segments
from resumable_data.sources.unit_reads import UnitReads

__all__ = ["Gathering"]


class Gathering:
    """The gather of one source (or view: ``members``, its sources' gatherings) over ``table``,
    reading units through ``reads`` and validating zero-copy batches through ``validation``."""

    def __init__(
        self,
        table: UnitTable,
        reads: UnitReads,
        validation: UnitValidation,
        members: Sequence[Gathering] | None = None,
    ) -> None:
        self._table, self._reads, self._validation = table, reads, validation
        self._members = None if members is None else tuple(members)
        self._fast: list[ColumnGather | None] | None = None
        self._numpy_plans: list[ColumnGather] | None = None  # _fast when every column has a numpy layout

    def unit_data(self, k: int) -> pa.RecordBatch:
        """Unit ``k``'s records: its zero-copy batch (validated once), else its decoded batch."""
        u = self._table.units[k]
        if u.batch is not None:
            self._validation.ensure(k)
            return u.batch
        return self._reads.decoded(k).batch

    def plan(self) -> list[ColumnGather | None]:
        """Per column, its plan over the maps (None: the column gathers by the fallback), built once."""
        if self._fast is None:
            t = self._table
            if self._members is not None:  # a concatenated view: its sources' plans, rebased (cached on them)
                parts = [m.plan() for m in self._members]
                counts = [len(m._table.units) for m in self._members]
                self._fast = [concat_columns([p[i] for p in parts], counts, t.wholes) for i in range(len(parts[0]))]
            else:
                self._fast = [plan_column(i, f.type, t.units, t.wholes, t.num_records) for i, f in enumerate(t.schema)]
            if all(g is not None and g.numpy_dtype is not None for g in self._fast):
                self._numpy_plans = [g for g in self._fast if g is not None]
        return self._fast

    @functools.cached_property
    def _numpy_layout(self) -> bool:
        """Whether every column's type can have the default collate's numpy layout (asked per
        batch by :meth:`numpy` for decoded units; the schema is fixed once open)."""
        return all(has_numpy_layout(f.type) for f in self._table.schema)

    def may_numpy(self) -> bool:
        """False where :meth:`numpy` would answer None whatever the ids (asked before checking them)."""
        if not self._reads.loaded:
            self.plan()  # built once, with _numpy_plans where every column has a numpy layout
            return self._numpy_plans is not None
        return self._numpy_layout and not self._reads.whole_without_numpy()

    def take(self, ids: np.ndarray, unit: np.ndarray, local: np.ndarray) -> pa.Table:
        """The records ``ids`` (in ``unit`` at row ``local``) as a one-chunk Table."""
        held: list[DecodedUnit] | None = None  # the touched decoded units, in unit order
        plans: list[ColumnGather | None]
        schema = self._table.schema
        if self._reads.loaded:
            touched = self._reads.touched(unit)
            if touched is None:
                plans, planned = [None] * len(schema), unit
            else:
                plans, planned, held = touched
        else:
            self._validation.units(unit)
            plans, planned = self.plan(), unit
        columns: list[pa.Array | None] = [None] * len(plans)
        for i, g in enumerate(plans):
            if g is not None:
                columns[i] = g.gather(ids, planned, local)
        slow = [i for i, c in enumerate(columns) if c is None]
        if slow:
            taken = self.fallback(unit, local, slow, held)
            for j, i in enumerate(slow):
                columns[i] = taken[j]
        return pa.Table.from_arrays(columns, schema=schema)

    def numpy(
        self, ids: np.ndarray, unit: np.ndarray, local: np.ndarray, pad_value: Any, alloc: Alloc | None = None
    ) -> list[Any] | None:
        """Per column, the default collate's numpy layout of the records ``ids`` (every array
        ``alloc``'s when given); None where a column's plan has none (after :meth:`may_numpy`
        answered True)."""
        if self._reads.loaded:
            got = self._reads.touched(unit)
            if got is None:
                return None
            plans, renumbered, _ = got
            if any(g is None or g.numpy_dtype is None for g in plans):
                return None
            return [g.to_numpy(ids, renumbered, local, pad_value, alloc) for g in plans if g is not None]
        mapped = self._numpy_plans
        assert mapped is not None
        self._validation.units(unit)
        return [g.to_numpy(ids, unit, local, pad_value, alloc) for g in mapped]

    def fallback(
        self, unit: np.ndarray, local: np.ndarray, cols: list[int], held: list[DecodedUnit] | None = None
    ) -> list[pa.Array]:
        """Per-unit Arrow takes for columns ``cols``, then one reorder take on the small result
        (``held``: the touched units already decoded, in unit order)."""
        order, bounds = group_segments(unit, len(self._table.units))
        local_s = local[order]
        pieces = []
        for j, k in enumerate(np.flatnonzero(np.diff(bounds))):
            a, b = bounds[k], bounds[k + 1]
            data = self.unit_data(int(k)) if held is None else held[j].batch
            pieces.append(data.select(cols).take(pa.array(local_s[a:b])))
        inverse = np.empty(len(order), dtype=np.int64)
        inverse[order] = np.arange(len(order), dtype=np.int64)
        inverse_pa = pa.array(inverse)
        # column-wise: shards may differ in schema/field metadata, never in types
        return [pa.concat_arrays([p.column(j) for p in pieces]).take(inverse_pa) for j in range(len(cols))]

    def list_lengths(self, i: int) -> np.ndarray:
        """Per record, the list length of list column ``i``, from each unit's offsets buffer."""
        t = self._table
        out = np.empty(t.num_records, dtype=np.int64)
        for k, u in enumerate(t.units):
            arr = self.unit_data(k).column(i)
            out[u.start : u.start + u.rows] = np.diff(arr.offsets.to_numpy())
        return out
