"""The unit table of a source's open shards: its units, where each lies, which shards are mapped.

Algorithm: :func:`opened_table` walks the open shards in manifest order (shard, then unit) and
lists every unit (record batch / row group) that holds records as a
:class:`~resumable_data.sources.unit_index.Unit` with its first record id, after comparing each
shard's identity with the one a pickled source carried and its canonical schema with the first
shard's. From the units it builds the arrays a read looks up without a Python step per unit:
``starts`` (first record id per unit) and its ``buckets`` (:func:`~..unit_index.unit_buckets`),
``unit_shard``, ``unit_view`` (a zero-copy batch of a map, else decoded when read), per shard
``mapped`` (its map is read by a step: checked around every read) and the
:class:`~resumable_data.sources.watch.ShardWatch` of the mapped shards' names. :func:`joined_table`
concatenates open sources' tables (``rd.Mixture``'s view: units, arrays and watches shifted, the
schemas compared source by source); :func:`closed_table` is the table of a source whose files
failed their checks (no units).

Guarantee: record id ``r`` is row ``r - starts[k]`` of unit ``k = last start <= r``, in manifest
order; a shard whose identity differs from the pickled one is a
:class:`~resumable_data.DatasetIntegrityError` (:func:`~..identity.changed_error`: every shard
opened is closed first), a shard whose schema differs from the first's a
:class:`~resumable_data.DatasetIntegrityError` naming both (:func:`~..files.check_same_schema`).
A joined table's arrays equal those of the same shards opened as one source.

Cost: O(units) Python steps once per open (and per unpickled source: a restore builds the table
again from the shards it opens); a joined table costs O(sources) array operations, no step per unit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from resumable_data.sources.files import OpenShard, canonical_schema, check_same_schema
from resumable_data.sources.identity import FileIdentity, changed_error, watch_entry
from resumable_data.sources.store import join
from resumable_data.sources.unit_index import Unit, UnitsView, unit_buckets
from resumable_data.sources.watch import ShardWatch

__all__ = ["UnitTable", "closed_table", "joined_table", "opened_table"]


@dataclass(frozen=True)
class UnitTable:
    """The units of a source's open shards and the arrays a read looks them up by (see the module
    docstring); ``wholes``: per shard, the buffer of its map (None: not memory-mapped)."""

    shards: list[OpenShard]
    units: Sequence[Unit]
    unit_index: list[int]  # the unit's record batch / row group index in its shard
    unit_shard: np.ndarray
    mapped: np.ndarray  # int64, per shard
    mapped_bool: np.ndarray
    unit_view: np.ndarray
    watch: ShardWatch
    unwatched: bool  # a mapped shard has no watch entry (checked in Python around every read)
    schema: pa.Schema
    wholes: list[pa.Buffer | None]
    num_records: int
    starts: np.ndarray
    buckets: tuple[np.ndarray, int]


def opened_table(
    root: str, rel: list[str], shards: list[OpenShard], expected: list[FileIdentity | None] | None = None
) -> UnitTable:
    """The table of ``shards`` (opened from ``root``/``rel``); ``expected``: the identity each must
    still have (an unpickled source), the shards closed before a mismatch is raised."""
    units: list[Unit] = []
    unit_index: list[int] = []
    start = 0
    for k, (r, shard) in enumerate(zip(rel, shards)):
        want = expected[k] if expected is not None else None
        if want is not None and shard.identity != want:
            for s in shards:
                s.close()
            raise changed_error(
                join(root, r),
                "when a worker (or another process) opened the pickled source",
                want,
                shard.identity,
            )
        if k:
            check_same_schema(rel[0], canonical_schema(shards[0].schema), r, canonical_schema(shard.schema))
        for g, n in enumerate(shard.unit_rows):
            if n:  # empty units hold no record id
                batch = shard.batches[g] if shard.batches is not None else None
                units.append(Unit(k, start, n, batch, None if batch is not None else g))
                unit_index.append(g)
                start += n
    unit_shard = np.fromiter((u.shard for u in units), dtype=np.int64, count=len(units))
    # checked around every read: a shard whose map a read touches (its zero-copy batches, or a
    # compressed shard's units, whose decoded buffers may still be views of the map: a body
    # stored uncompressed, the -1 length prefix other writers use), cached units included
    mapped = np.fromiter((s.whole is not None for s in shards), dtype=np.int64, count=len(shards))
    mapped_bool = mapped.astype(bool)
    # per unit: a zero-copy batch of the map (else decoded when read); plans over the maps serve
    # only a source whose every unit is one (a folder mixing codecs gathers through UnitReads.touched)
    unit_view = np.fromiter((u.batch is not None for u in units), dtype=bool, count=len(units))
    watch = ShardWatch(  # what OpenShard.check compares, by name, for the mapped shards (one call a read)
        [
            watch_entry(s.mapped_path, s.identity) if s.mapped_path is not None and s.identity is not None else None
            for s in shards
        ],
        root,
    )
    starts = np.fromiter((u.start for u in units), dtype=np.int64, count=len(units))
    return UnitTable(
        shards=shards,
        units=units,
        unit_index=unit_index,
        unit_shard=unit_shard,
        mapped=mapped,
        mapped_bool=mapped_bool,
        unit_view=unit_view,
        watch=watch,
        unwatched=any(e is None for e, m in zip(watch.entries, mapped_bool) if m),
        schema=shards[0].schema,
        wholes=[s.whole for s in shards],
        num_records=start,
        starts=starts,
        buckets=unit_buckets(starts, start),
    )


def joined_table(tables: Sequence[UnitTable], rel: list[str]) -> UnitTable:
    """One table over the open shards of ``tables``, in order (``rel``: the joined shard paths):
    their units, starts and flags concatenated and shifted; the schemas compared table by table
    (each compared its own shards)."""
    shard_off = np.cumsum([0] + [len(t.shards) for t in tables[:-1]], dtype=np.int64)
    first = canonical_schema(tables[0].schema)
    for t, o in zip(tables[1:], shard_off[1:].tolist()):
        check_same_schema(rel[0], first, rel[o], canonical_schema(t.schema))
    record_off = np.cumsum([0] + [t.num_records for t in tables[:-1]], dtype=np.int64)
    shards = [shard for t in tables for shard in t.shards]
    mapped = np.concatenate([t.mapped for t in tables])
    num_records = sum(t.num_records for t in tables)
    starts = np.concatenate([t.starts + o for t, o in zip(tables, record_off)])
    return UnitTable(
        shards=shards,
        units=UnitsView([t.units for t in tables], shard_off.tolist(), record_off.tolist()),
        unit_index=[g for t in tables for g in t.unit_index],
        unit_shard=np.concatenate([t.unit_shard + o for t, o in zip(tables, shard_off)]),
        mapped=mapped,
        mapped_bool=mapped.astype(bool),
        unit_view=np.concatenate([t.unit_view for t in tables]),
        watch=ShardWatch.joined([t.watch for t in tables]),
        unwatched=any(t.unwatched for t in tables),
        schema=shards[0].schema,
        wholes=[s.whole for s in shards],
        num_records=num_records,
        starts=starts,
        buckets=unit_buckets(starts, num_records),
    )


def closed_table(num_records: int) -> UnitTable:
    """The table of a source whose files failed their checks: no shards, no units (``num_records``:
    its pinned version's, else 0, what ``len`` still answers)."""
    none = np.zeros(0, dtype=np.int64)
    return UnitTable(
        shards=[],
        units=[],
        unit_index=[],
        unit_shard=none,
        mapped=none,
        mapped_bool=np.zeros(0, dtype=bool),
        unit_view=np.zeros(0, dtype=bool),
        watch=ShardWatch([]),
        unwatched=False,
        schema=pa.schema([]),
        wholes=[],
        num_records=num_records,
        starts=none,
        buckets=unit_buckets(none, num_records),
    )
