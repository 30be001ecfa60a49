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
  item in bytes; a bitmap's or ``bool``'s first bit in bits; -1 for a level without nulls; a
  dictionary level: the key of its dictionary among the source's distinct ones,
  :class:`Dictionaries`). A column whose plan fails (a type without a fast path, a buffer not
  aligned to its item width, a dictionary past the kept ones) has no row there.
* Per batch (:func:`plan_touched`): the touched units' rows are stacked; one span covers their
  batches (from the lowest to the highest buffer address; the gaps are never read, as between
  shard maps) and keeps them alive; each node's per-unit bases are its column of the stacked
  rows moved onto the span (``(address - span start) / item width``, one array operation) and the
  tree is rebuilt with the same node classes (a dictionary level only where every touched unit
  has the same key: its dictionary is the kept one; differing keys send the column to the
  per-unit fallback). Record ids are renumbered to the touched units
  (``0..t-1``), so the plan is the one :func:`.gather.plan_column` would build over those units.
  The caller (:meth:`.unit_reads.UnitReads.touched`) holds a batch's touched units only while their
  decoded bytes fit the decoded-unit budget; a batch needing more takes them one at a time.
* Per batch over units planned before (:class:`PlanTable`, one per source): every unit's row is
  also kept in one table per column, row ``k`` for unit ``k``, beside a weak reference to the
  decoded unit it came from. A batch whose touched units all still live takes their rows with
  one fancy index per column (no Python step per touched unit: stacking ~200 rows cost about 1 us
  each) and holds the units for the batch; a touched unit that was let go (evicted, dropped, never
  decoded) sends the batch to the per-unit stacking above, which publishes the rows it planned.
  The table never keeps a unit alive: the decoded-unit map alone bounds memory.

Guarantee: the result equals ``Table.take`` of the ids (tested against it and against the
per-unit Arrow take, on Hypothesis-drawn ids, for every type the gather has a fast path for,
with nulls at every level); a unit's buffers are read only while the span holds its batch.

Cost: per decoded unit, one plan per column (Python steps per type level, once); per batch,
O(touched units) to stack the rows (from the table: one fancy index per column and a weak
reference called per touched unit), one array operation per node and one gather as over mapped
shards (O(ids + values copied)); between batches, the table's rows: 8 bytes per node, column and
unit of the source (tens of bytes a unit), and one weak reference a unit.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from resumable_data.sources.gather import ColumnGather, plan_column
from resumable_data.sources.gather_plan import address_span
from resumable_data.sources.gather_rows import flatten_plan, rebuild_plan
from resumable_data.sources.unit_index import Unit

__all__ = ["DecodedRows", "DecodedUnit", "Dictionaries", "PlanRows", "PlanTable", "plan_touched", "unit_rows"]

_ALIGN = 64  # the span starts on this boundary, so every item width divides its offsets


class Dictionaries:
    """The distinct dictionaries of one source's decoded units, each under a key (its number here),
    so that units whose dictionaries are equal are gathered as one plan (:func:`.gather_rows.flatten_plan`
    puts a unit's key in its row; a batch whose touched units share one key takes its dictionary
    from here). Parquet gives every row group a dictionary object of its own, equal across the
    row groups pyarrow wrote from one dictionary array: comparing each unit's dictionary with the
    few kept here (once, when the unit is first planned) is what lets a batch over ~200 row groups
    skip the per-row-group take.

    At most :attr:`MAX_KEPT` dictionaries and :attr:`MAX_BYTES` of their buffers are kept, each
    copied into the heap (never a view of a unit's buffers, whatever map they come from); they live
    as long as the source, outside the decoded-unit budget, as the plan templates do. A dictionary
    past either bound gets no key (its units take the per-unit fallback, as before)."""

    MAX_KEPT = 8
    MAX_BYTES = 4 << 20

    def __init__(self) -> None:
        self._kept: list[pa.Array] = []
        self._bytes = 0
        self._lock = threading.Lock()  # units may be planned from several threads at once

    def key(self, dictionary: pa.Array) -> int:
        """The key of the kept dictionary equal to ``dictionary`` (type and values; a new one is
        kept when none is), or -1 past the bounds."""
        kept = self._kept
        seen = len(kept)
        for k in range(seen):  # a list only appended to: read without the lock
            if kept[k].equals(dictionary):
                return k
        size = dictionary.get_total_buffer_size()
        with self._lock:
            for k in range(seen, len(kept)):  # appended by another thread since
                if kept[k].equals(dictionary):
                    return k
            if len(kept) >= self.MAX_KEPT or self._bytes + size > self.MAX_BYTES:
                return -1
            # a copy in the heap: the unit's own may be a view of a shard's memory map (a folder
            # mixing codecs), which must not be read by a batch that touches (and checks) no unit of it
            kept.append(dictionary.take(pa.array(np.arange(len(dictionary), dtype=np.int64))))
            self._bytes += size
            return len(kept) - 1

    def __getitem__(self, key: int) -> pa.Array:
        return self._kept[key]


class DecodedRows:
    """One decoded unit's plan rows: per column its flattened plan (:func:`.gather_rows.flatten_plan`),
    or None where the column has no fast path in this unit; the plans over this unit alone, kept
    as the templates the rows rebuild; ``lo``/``hi``: the address range of its buffers;
    ``dictionaries``: where its dictionary keys point (None: its dictionary columns have no row)."""

    __slots__ = ("dictionaries", "hi", "lo", "rows", "templates")

    def __init__(
        self,
        rows: list[np.ndarray | None],
        templates: list[ColumnGather | None],
        lo: int,
        hi: int,
        dictionaries: Dictionaries | None = None,
    ) -> None:
        self.rows, self.templates, self.lo, self.hi = rows, templates, lo, hi
        self.dictionaries = dictionaries


class DecodedUnit:
    """A decoded unit as its source keeps it: the batch, its buffer bytes, and its plan rows,
    computed on first use (:meth:`plan_rows`; a unit decoded again and again because the batches
    need more units than the decoded-unit budget keeps never pays for them), their dictionary
    keys from its source's ``dictionaries``."""

    __slots__ = ("__weakref__", "_rows", "batch", "dictionaries", "nbytes")

    def __init__(self, batch: pa.RecordBatch, dictionaries: Dictionaries | None = None) -> None:
        self.batch, self.nbytes = batch, batch.get_total_buffer_size()
        self.dictionaries = dictionaries
        self._rows: DecodedRows | None = None

    def plan_rows(self) -> DecodedRows:
        """:func:`unit_rows` of the batch (computed once)."""
        rows = self._rows
        if rows is None:
            rows = self._rows = unit_rows(self.batch, self.dictionaries)
        return rows


def unit_rows(batch: pa.RecordBatch, dictionaries: Dictionaries | None = None) -> DecodedRows:
    """The plan rows of a decoded record batch, which the caller validated
    (``RecordBatch.validate(full=True)``) first; a column without a fast path here has None (a
    dictionary column: unless ``dictionaries`` gives its dictionary a key)."""
    n = batch.num_columns
    buffers = [b for col in batch.columns for b in col.buffers() if b is not None and b.size]
    if not buffers or batch.num_rows == 0:
        return DecodedRows([None] * n, [None] * n, 0, 0, dictionaries)
    whole = address_span(buffers)
    unit = [Unit(0, 0, batch.num_rows, batch, None)]
    keys = None if dictionaries is None else dictionaries.key
    rows: list[np.ndarray | None] = []
    templates: list[ColumnGather | None] = []
    for i, f in enumerate(batch.schema):
        plan = plan_column(i, f.type, unit, [whole], batch.num_rows)
        row = None if plan is None else flatten_plan(plan, keys)
        rows.append(row)
        templates.append(None if row is None else plan)
    return DecodedRows(rows, templates, whole.address, whole.address + whole.size, dictionaries)


def plan_touched(units: Sequence[DecodedUnit]) -> list[ColumnGather | None]:
    """Per column, the plan over the touched ``units`` (numbered ``0..t-1`` in this order), or
    None where some touched unit has no row for the column (or their dictionaries differ); the
    plans' span holds the units' batches alive."""
    rows = [u.plan_rows() for u in units]
    columns: list[np.ndarray | None] = []
    for i in range(len(rows[0].templates)):
        cols = [c for c in (r.rows[i] for r in rows) if c is not None]
        columns.append(np.stack(cols, axis=1) if len(cols) == len(rows) else None)
    lo, hi = min(r.lo for r in rows), max(r.hi for r in rows)
    return _plans(rows[0].templates, columns, lo, hi, units, rows[0].dictionaries)


def _plans(
    templates: Sequence[ColumnGather | None],
    columns: Sequence[np.ndarray | None],
    lo: int,
    hi: int,
    units: Sequence[DecodedUnit],
    dictionaries: Dictionaries | None,
) -> list[ColumnGather | None]:
    """Per column, ``templates[i]`` rebuilt over the stacked rows ``columns[i]`` (``[nodes,
    units]``; None: the column has no plan), on one span from ``lo`` to ``hi`` whose base holds
    ``units`` (and so their batches); dictionary keys point into ``dictionaries``."""
    lo = lo // _ALIGN * _ALIGN
    span = pa.foreign_buffer(lo, hi - lo, base=tuple(units))
    get = None if dictionaries is None else dictionaries.__getitem__
    return [
        None if template is None or rows is None else rebuild_plan(template, rows, span, get)
        for template, rows in zip(templates, columns)
    ]


class _Nothing:
    __slots__ = ("__weakref__",)


_GONE = weakref.ref(_Nothing())  # a reference whose object is gone: a unit never published


class PlanTable:
    """The plan rows of one source's decoded units, one table per column, so that a batch whose
    touched units were all planned before is planned by array operations, not by Python steps per
    unit (:func:`plan_touched` stacks each touched unit's rows: about 1 us a unit, 200 units a
    batch of a global shuffle over 1,000-row units).

    Row ``k`` of a column's table holds unit ``k``'s row (:func:`unit_rows`); beside it the table
    keeps a weak reference to the :class:`DecodedUnit` the row was taken from, so it never keeps
    a unit alive that the decoded-unit map let go (the map alone bounds the memory). A lookup
    (:meth:`lookup`) succeeds only when every touched unit's reference is still alive; it then
    holds them (strongly) for the batch, and their rows are the addresses of those very batches.
    The caller serialises :meth:`publish` and :meth:`lookup` (they read and write the same rows);
    :meth:`plans` runs outside that lock."""

    def __init__(self, num_units: int, num_columns: int, dictionaries: Dictionaries | None = None) -> None:
        self._n, self._cols, self._dictionaries = num_units, num_columns, dictionaries
        self._refs = np.full(num_units, _GONE, dtype=object)  # weakref.ref to the unit (_GONE: none)
        self._lo = np.zeros(num_units, dtype=np.int64)
        self._hi = np.zeros(num_units, dtype=np.int64)
        self._has = np.zeros((num_units, num_columns), dtype=bool)  # the unit has a row for the column
        self._tables: list[np.ndarray | None] = [None] * num_columns  # [units, nodes] per column
        self._templates: list[ColumnGather | None] = [None] * num_columns
        self.published = 0  # units published at least once
        self.publishes = 0  # rows published, in all

    def publish(self, ks: Sequence[int], units: Sequence[DecodedUnit]) -> None:
        """Keep the rows of ``units`` (unit numbers ``ks``), whose rows are computed."""
        for k, u in zip(ks, units):
            rows = u.plan_rows()
            if rows.hi == rows.lo:  # no buffers: nothing to plan over
                continue
            for i, row in enumerate(rows.rows):
                table = self._tables[i]
                if row is not None and table is None:
                    table = self._tables[i] = np.zeros((self._n, len(row)), dtype=np.int64)
                    self._templates[i] = rows.templates[i]
                ok = row is not None and table is not None and table.shape[1] == len(row)
                if ok and table is not None:
                    table[k] = row
                self._has[k, i] = ok
            self._lo[k], self._hi[k] = rows.lo, rows.hi
            self.published += self._refs[k] is _GONE
            self.publishes += 1
            self._refs[k] = weakref.ref(u)

    def lookup(self, touched: np.ndarray) -> PlanRows | None:
        """The rows of the units ``touched`` (increasing unit numbers), each unit held for the
        batch, or None unless every one was published and is still alive."""
        units = [r() for r in self._refs[touched].tolist()]
        if None in units:  # identity comparisons (a DecodedUnit has no __eq__)
            return None
        has = self._has[touched].all(axis=0)
        columns = [
            table[touched].T if table is not None and ok else None for table, ok in zip(self._tables, has.tolist())
        ]
        return PlanRows(units, columns, int(self._lo[touched].min()), int(self._hi[touched].max()))

    def plans(self, got: PlanRows) -> list[ColumnGather | None]:
        """Per column, the plan over the units of ``got`` (numbered ``0..t-1``), as
        :func:`plan_touched` gives it."""
        return _plans(self._templates, got.columns, got.lo, got.hi, got.units, self._dictionaries)


class PlanRows:
    """What :meth:`PlanTable.lookup` found: the touched units (held), per column their stacked
    rows (``[nodes, units]``) or None, and their buffers' address range."""

    __slots__ = ("columns", "hi", "lo", "units")

    def __init__(self, units: list[DecodedUnit], columns: list[np.ndarray | None], lo: int, hi: int) -> None:
        self.units, self.columns, self.lo, self.hi = units, columns, lo, hi
