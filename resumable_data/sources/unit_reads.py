"""A source's units that are decoded when read: where their bytes come from, where they are kept,
how a batch gathers them.

What. ``rd.ArrowShards`` holds two kinds of units (record batches / row groups holding records).
A zero-copy record batch of a memory-mapped, uncompressed IPC shard is read in place, through the
column plans over the maps (:mod:`.gather`). Every other unit (a local Parquet row group, a
compressed IPC record batch, any unit of a remote store) is decoded when a batch first needs it.
This module is that second path, for one open source: :class:`UnitReads`.

Algorithm.

* Unit ``k`` (:meth:`UnitReads.decoded`) is looked up in the process's decoded-unit map
  (:mod:`.decoded_units`) under ``(owner, shard, index in shard)``, ``owner`` a number no other
  source of the process holds. A miss reads the unit: from the read-ahead cache when one is
  attached (:mod:`.read_ahead`, filled by the rank's fetcher), else on a remote store by one
  ranged read of its span (:meth:`UnitReads.fetch_unit`), else from the local shard
  (:meth:`.files.OpenShard.read_unit`); the batch is validated and put in the map. A zero-copy
  batch of a map in a folder that also holds decoded units is kept at 0 bytes, for its plan rows.
* A batch's touched units (:meth:`UnitReads.touched`) are gathered together: from the source's
  :class:`.gather_decoded.PlanTable` when every one was planned before and still lives (array
  operations only), else through :func:`.gather_decoded.plan_touched` when their decoded bytes fit
  the budget (estimated from the mean unit size so far before decoding any, then checked while
  collecting them), whose rows the table then keeps. Past the budget the caller takes unit by unit
  (one held at a time), and the process is told once per dataset (a ``RuntimeWarning`` with the
  figures and the ``decoded_cache_bytes=`` that fixes it). A batch served from the table does not
  refresh its units' recency in the map (the map is then evicted in insertion order among them).
* Once every unit of the source was planned and is kept, and the decoded dataset fits the budget,
  the plans over every unit are built once (:meth:`UnitReads._whole_plans`) and serve every batch
  as the mapped shards' plans do: no ``unique``, no renumbering, no rebuild. Their span holds every
  unit, so the map tells the source when one of its units leaves (:meth:`.decoded_units.DecodedUnits.watch`)
  and the plans are dropped at once: they never keep a unit past the budget.

Guarantee. Every decoded unit comes from bytes that were checked before the decode: a remote unit
whose pinned layout has a digest (:mod:`.unit_digests`) against that digest, whether its bytes came
from the read-ahead cache or from this process's ranged read (:meth:`UnitReads.fetch_unit`: one GET
through the handle opened with the shard, no HEAD; a mismatch is read again through the checked read
and is :func:`~.identity.changed_error` when the object changed, else
:func:`~.unit_digests.digest_error`): an object replaced after the open, in whatever window, never
yields a sample. A remote unit without a digest: the object's size and ETag as recorded at open
(:meth:`.store.FileSystemStore.read_range_checked`: a HEAD, then the GET; the bytes of an object
replaced between the two are read, then refused only if they fail the structural validation); a
local shard's identity, around the read, by the source. Every unit is structurally validated at
every decode (:func:`.validate.validate_batch`), never gathered by raw offsets. A unit whose layout
came from rd's layout cache and does not match its bytes is an error naming the cache entry, which
is removed (:meth:`.files.OpenShard.checked_decode`). A batch never holds more decoded bytes than the
budget beyond what the map keeps.

Cost. A hit: one map lookup. A miss: one decode, plus (remote, not read ahead) one ranged GET and one
xxh3-128 of the unit's bytes (about 50 us per MiB) with a digest, a HEAD and a ranged GET without; a whole shard read
ahead (:meth:`UnitReads.fetch_shard`) one GET checked against the shard's pinned content hash, a
HEAD and the GET where none is pinned
(``benchmarks/results/remote_unit_digests.md``: requests per step halved, samples/s 1.2-1.6x at 30 ms
a request). A restored or unpickled source starts with nothing here (the map is per process); its
units are read again when first needed, which is what read-ahead hides.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Hashable, Sequence

import numpy as np
import pyarrow as pa

from resumable_data.errors import ConfigError, describe
from resumable_data.sources.decoded_units import new_owner, over_budget_warning, process_units, warn_once
from resumable_data.sources.files import OpenShard
from resumable_data.sources.gather import ColumnGather
from resumable_data.sources.gather_decoded import DecodedUnit, Dictionaries, PlanTable, plan_touched
from resumable_data.sources.read_ahead.cache import UnitCache
from resumable_data.sources.store import FileSystemStore, ShardStore, join
from resumable_data.sources.unit_digests import digest_error, shard_digest_error, unit_digest
from resumable_data.sources.unit_index import Unit
from resumable_data.sources.validate import validate_batch

__all__ = ["UnitReads"]

#: What :meth:`UnitReads.touched` returns: the column plans over the touched units, the batch's
#: unit numbers renumbered to them, and the touched units (in unit order; the plans' span keeps
#: them alive while they are read).
Touched = tuple[list[ColumnGather | None], np.ndarray, list[DecodedUnit] | None]


class UnitReads:
    """The units of one open source that are decoded when read (see the module docstring).

    ``units``, ``unit_index``, ``unit_shard``, ``unit_view``: the source's unit table (per unit: its
    :class:`.unit_index.Unit`, its index in its shard, its shard, whether it is a zero-copy batch of
    a map); ``shards``: the open shards; ``root``/``rel``: where they are; ``metadata``: the schema
    metadata decoded batches get; ``ensure_valid(k)``: validates a zero-copy batch once (the
    source's bookkeeping); ``name()``: the source as the budget warning names it; ``key``: the
    dataset in the process (the warning is said once per key); ``budget``: the
    ``decoded_cache_bytes`` asked for (None: the process's default)."""

    def __init__(
        self,
        *,
        units: Sequence[Unit],
        unit_index: Sequence[int],
        unit_shard: np.ndarray,
        unit_view: np.ndarray,
        shards: Sequence[OpenShard],
        store: ShardStore,
        root: str,
        rel: Sequence[str],
        metadata: dict[bytes, bytes] | None,
        columns: int,
        ensure_valid: Callable[[int], None],
        name: Callable[[], str],
        key: Hashable,
        budget: int | None,
    ) -> None:
        self._units, self._unit_index, self._unit_shard, self._unit_view = units, unit_index, unit_shard, unit_view
        self._shards, self._store, self._rel, self._metadata = shards, store, rel, metadata
        self._paths = [join(root, r) for r in rel]
        self._ensure_valid, self._name, self._key = ensure_valid, name, key
        self._owner = new_owner()  # keys this source's units in the process's decoded-unit map
        self._map = process_units()
        if budget is not None:
            self._map.reserve(budget)
        self._estimate = [0, 0]  # bytes and count of the units decoded so far (touched()'s estimate)
        self.ahead: UnitCache | None = None  # the read-ahead cache attached (attach())
        self._columns = columns
        self._table: PlanTable | None = None  # the plan rows of the units planned so far (touched())
        self._dictionaries = Dictionaries()  # the units' distinct dictionaries (one plan over equal ones)
        # the plans over every unit, while every one is kept (their span holds them): see _whole_plans
        self._whole: list[ColumnGather | None] | None = None
        self._whole_numpy = False  # every column of _whole has the collate's numpy layout (whole_without_numpy)
        self._tried = -(1 << 62)  # PlanTable.publishes at the last try of _whole_plans
        self._left = 0  # units let go so far (_let_go): a plan over every unit built before one left is not kept
        self._map.watch(self._owner, self._let_go)
        # a source dropped without close() (a loader built anew each epoch) leaves no units behind
        # to fill the process's budget: they go when it is collected
        weakref.finalize(self, self._map.drop_later, self._owner)

    @functools.cached_property
    def loaded(self) -> bool:
        """Whether units are decoded when read (a remote store, local Parquet row groups, compressed
        IPC record batches; a folder mixing them with zero-copy batches too): a batch is then
        gathered through :meth:`touched`, not through plans over the maps (fixed once the shards
        are open: asked once, not per batch)."""
        return not self._store.local or not bool(self._unit_view.all())

    def close(self) -> None:
        """Drop this source's decoded units from the process's map."""
        self._table = self._whole = None
        self._map.drop(self._owner)
        self._map.unwatch(self._owner)

    def _let_go(self) -> None:
        """The map let one of this source's units go (evicted, dropped): the plans over every unit
        would keep it alive past the budget, so they go too (called under the map's lock)."""
        self._whole = None
        self._left += 1

    def attach(self, cache: UnitCache | None) -> None:
        """Read units through ``cache`` (filled ahead by one fetcher per rank), or directly (None);
        the units decoded from other bytes are dropped, at the map's next call (before any lookup):
        a loader collected by the garbage collector detaches its read-ahead here, possibly inside
        an allocation of a thread that holds the map's lock (taking it would deadlock)."""
        self.ahead = cache
        self._table = self._whole = None
        self._map.drop_later(self._owner, gone=False)

    # -- one unit --------------------------------------------------------------------------------
    def decoded(self, k: int) -> DecodedUnit:
        """Unit ``k`` decoded and validated, from this process's map of decoded units or read now."""
        u = self._units[k]
        g = self._unit_index[k]  # the unit's row group / record batch in its shard
        key = (self._owner, u.shard, g)
        hit = self._map.entry(key)
        if hit is not None:
            return hit[1]
        if u.batch is not None:  # a zero-copy batch of a map (a folder mixing codecs): validated once, no bytes held
            self._ensure_valid(k)
            view = DecodedUnit(u.batch, self._dictionaries)
            view.nbytes = 0
            self._map.put(key, u.batch, view, size=0)
            return view
        shard = self._shards[u.shard]
        if shard.unit_span(g) is not None and (self.ahead is not None or not self._store.local):
            # read ahead by the rank's fetcher (.read_ahead), else read here; either way checked before
            # it is decoded: against the unit's pinned digest where it has one (.unit_digests: the
            # cache's bytes too), else against the identity recorded at open (size and ETag)
            data = self.ahead.get(k, self._digest(k)) if self.ahead is not None else None
            raw = data if data is not None else pa.py_buffer(self.fetch_unit(k))
            # validated at every decode (bytes read without a digest may be an object replaced between
            # the HEAD and the GET: refused here if damaged, never gathered by raw offsets)
            batch = shard.checked_decode(g, lambda: self._decode(shard, u.shard, g, raw))
        else:
            batch = self._decode(shard, u.shard, g, None)
        unit = DecodedUnit(batch, self._dictionaries)
        self._estimate[0] += unit.nbytes
        self._estimate[1] += 1
        self._map.put(key, batch, unit)
        return unit

    def _decode(self, shard: OpenShard, j: int, g: int, raw: pa.Buffer | None) -> pa.RecordBatch:
        """Unit ``g`` of shard ``j`` decoded from ``raw`` (its span's bytes; None: read by the shard),
        with the source's schema metadata, structurally validated."""
        batch = shard.read_unit(g) if raw is None else shard.decode_unit(g, raw)
        batch = batch.replace_schema_metadata(self._metadata)
        return validate_batch(batch, self._rel[j], g)

    def _digest(self, k: int) -> str | None:
        """Unit ``k``'s pinned digest (:mod:`.unit_digests`), None where its layout has none."""
        layout = self._shards[self._units[k].shard].layout
        return layout.unit_digest(self._unit_index[k]) if layout is not None else None

    # -- the units of one batch ----------------------------------------------------------------
    def touched(self, unit: np.ndarray) -> Touched | None:
        """The column plans over the units ``unit`` (the batch's unit of every record) touches,
        ``unit`` renumbered to them and the touched units; None when their decoded bytes exceed the
        decoded-unit budget (the caller then takes unit by unit, holding one)."""
        whole = self._whole
        if whole is not None:  # every unit kept and planned: the batch's units are the plans' own
            return whole, unit, None
        touched, renumbered = np.unique(unit, return_inverse=True)
        renumbered = renumbered.astype(np.int64, copy=False)
        table = self._table
        if table is not None:  # every touched unit planned before and still alive: array operations only
            with self._map.lock:
                found = table.lookup(touched)
            if found is not None:
                return table.plans(found), renumbered, found.units
        ks = touched.tolist()
        limit = self._map.budget
        total, count = self._estimate
        decoding = len(ks) - int(self._unit_view[touched].sum())  # zero-copy batches of a map hold nothing
        if count and decoding * total > limit * count:  # the touched units at the mean size so far
            self._over_budget(decoding, decoding * total // count)
            return None
        owner, shard_of, index_of = self._owner, self._unit_shard, self._unit_index
        hits = self._map.extras([(owner, int(shard_of[k]), index_of[k]) for k in ks])  # decoded()'s keys
        held, held_units, units = 0, 0, list[DecodedUnit]()
        for k, got in zip(ks, hits):
            if got is None:
                got = self.decoded(k)
            held += got.nbytes
            held_units += got.nbytes > 0
            if held > limit:
                self._over_budget(decoding, held * decoding // max(held_units, 1))
                return None
            units.append(got)
        plans = plan_touched(units)
        if table is None:
            table = self._table = PlanTable(len(self._units), self._columns, self._dictionaries)
        with self._map.lock:
            table.publish(ks, units)
        n = len(self._units)
        if table.published == n and table.publishes - self._tried >= max(1, n // 8):  # O(units) a try
            self._tried = table.publishes
            self._whole_plans(table)
        return plans, renumbered, units

    def whole_without_numpy(self) -> bool:
        """Whether the plans over every unit serve the batches and some column has no numpy layout
        in them (nulls in a numeric column, a ``bool`` with nulls): ``take_numpy`` then answers
        None before checking the ids, which ``take`` checks again."""
        return self._whole is not None and not self._whole_numpy

    def _whole_plans(self, table: PlanTable) -> None:
        """Plans over every unit of the source (numbered as the source numbers them), kept while no
        unit leaves the map, when every unit was planned and the decoded dataset fits the budget:
        then a batch needs no ``unique``, no renumbering and no rebuild (the mapped shards' case,
        whose plans are built once). The plans' span holds every unit; they are kept only if every
        unit is still the map's entry when they are (a unit another thread's source evicted while
        a batch held it is alive, planned, and would never leave the map again), and the map's
        watch (:meth:`_let_go`) drops them as soon as one unit leaves, so they never keep a unit
        past the map's budget."""
        total, count = self._estimate
        decoded = int((~self._unit_view).sum())
        if count and total * decoded > self._map.budget * count:  # the decoded dataset does not fit
            return
        left = self._left
        with self._map.lock:
            found = table.lookup(np.arange(len(self._units), dtype=np.int64))
        if found is None:
            return
        plans = table.plans(found)
        owner, shard_of, index_of = self._owner, self._unit_shard.tolist(), self._unit_index
        keys = [(owner, shard_of[k], index_of[k]) for k in range(len(self._units))]  # decoded()'s keys
        with self._map.lock:  # _let_go runs under this lock: no unit left since the lookup
            # and every unit is still the map's: a unit alive only because a batch in flight holds it
            # (evicted by another thread's source before the lookup) would never leave the map again
            if self._map.holding(keys, found.units) and self._left == left:
                self._whole_numpy = all(g is not None and g.numpy_dtype is not None for g in plans)
                self._whole = plans

    def _over_budget(self, units: int, need: int) -> None:
        """Warn once per process and dataset (every copy of the source: the loader's workers open
        their own) that a batch's ``units`` decoded units (about ``need`` bytes) exceed the budget,
        so such batches decode their units again. Not for one unit alone: the map always keeps the
        newest unit, whatever its size."""
        if units <= 1:
            return

        def message() -> str:  # composed only the first time (an over-budget batch comes every step)
            total, count = self._estimate
            decoded = int((~self._unit_view).sum())  # the units decoded when read (not zero-copy views)
            dataset = total * decoded // max(count, 1)
            return over_budget_warning(self._name(), units, need, self._map.budget, dataset)

        warn_once(self._key, message)

    # -- ranged reads (what read-ahead fetches: .read_ahead.fetcher.ReadAheadSource) ---------------
    def spans(self) -> list[tuple[int, int] | None]:
        """Per unit: (offset, length) of the bytes one ranged read fetches, None where the unit is
        not read by range (memory-mapped, or a shard without a layout)."""
        return [self._shards[u.shard].unit_span(g) for u, g in zip(self._units, self._unit_index)]

    def fetch_unit(self, k: int) -> bytes:
        """The bytes of unit ``k``'s span: checked against the unit's pinned digest where it has one
        (one ranged GET, no HEAD: :meth:`_read_units`), else read from an object that still has the
        identity recorded at open (size and ETag: a HEAD, then the GET); a store that does not
        answer is a :class:`~resumable_data.StoreUnavailableError`."""
        u = self._units[k]
        span = self._shards[u.shard].unit_span(self._unit_index[k])
        if span is None:
            raise ConfigError(
                describe("k", k, "a unit read by range (unit_spans()[k] is not None)", "fetch only such units")
            )
        return self._read_units(k, k, span[0], span[1])

    def fetch_run(self, first: int, last: int) -> bytes:
        """The bytes from unit ``first``'s span start to unit ``last``'s span end, one read checked as
        :meth:`fetch_unit` checks (every unit of the run against its digest, or the object's
        identity): neighbouring units of one shard read ahead by one request."""
        units = self._units
        if not 0 <= first <= last < len(units) or units[first].shard != units[last].shard:
            raise ConfigError(
                describe(
                    "first, last",
                    (first, last),
                    "unit indexes first <= last of one shard",
                    "pass two units of the same shard, or read each with fetch_unit(k)",
                )
            )
        spans = [self._shards[units[k].shard].unit_span(self._unit_index[k]) for k in (first, last)]
        if spans[0] is None or spans[1] is None:
            raise ConfigError(
                describe(
                    "first, last", (first, last), "units read by range (unit_spans() not None)", "fetch only such units"
                )
            )
        offset, end = spans[0][0], spans[1][0] + spans[1][1]
        return self._read_units(first, last, offset, end - offset)

    def _read_units(self, first: int, last: int, offset: int, length: int) -> bytes:
        """The ``length`` bytes at ``offset`` of the shard of units ``first..last``, which they lie in.

        Where every one of the units has a pinned digest (:mod:`.unit_digests`) and the store is
        remote: one ranged GET through the handle opened with the shard (no HEAD), each unit's bytes
        checked against its digest. A mismatch is read again through the checked read (a HEAD, then
        the GET: an object replaced since the open is :func:`~.identity.changed_error`, a short body
        its own error) and checked again: still other bytes is :func:`~.unit_digests.digest_error`
        naming the shard and the unit. Without digests: the checked read alone (today's HEAD + GET)."""
        j = self._units[first].shard
        ks = range(first, last + 1)
        if any(self._digest(k) is None for k in ks):
            return self._read_span(j, offset, length)
        f = self._shards[j].file
        if isinstance(self._store, FileSystemStore) and f is not None:
            try:
                data = self._store.read_range_open(self._paths[j], f, offset, length)
            except ValueError:  # the handle was closed (the source was closed): read as below
                pass
            else:
                if self._mismatch(ks, offset, data) is None:
                    return data
        data = self._read_span(j, offset, length)  # the object changed since the open, or a short body: said there
        bad = self._mismatch(ks, offset, data)
        if bad is not None:
            k, got = bad
            raise digest_error(self._paths[j], self._unit_index[k], self._digest(k) or "", got)
        return data

    def _mismatch(self, ks: range, base: int, data: bytes) -> tuple[int, str] | None:
        """The first unit of ``ks`` whose bytes in ``data`` (read from offset ``base``) do not hash to
        its digest, with the digest they have; None when every unit's do."""
        with memoryview(data) as view:
            for k in ks:
                span = self._shards[self._units[k].shard].unit_span(self._unit_index[k])
                assert span is not None  # the caller read these units by range
                a, b = span[0] - base, span[0] - base + span[1]
                got = unit_digest(view[a:b]) if b <= len(data) else "none (the store sent fewer bytes)"
                if got != self._digest(k):
                    return k, got
        return None

    def shard_size(self, j: int) -> int | None:
        """The byte size of shard ``j``'s object as recorded at open (None where none was)."""
        identity = self._shards[j].identity
        return identity.size if identity is not None else None

    def fetch_shard(self, j: int, digest: str | None = None) -> bytes:
        """Every byte of shard ``j``'s object (read ahead by ``rd.ReadUnit.SHARD``).

        ``digest``: the shard's pinned content hash (xxh3-128 of the whole object, ``hash="content"``):
        one GET of the whole object through the handle opened with the shard (no HEAD), its bytes
        hashed and refused unless they are the pinned ones (:func:`shard_digest_error`: an object
        replaced since the pin, whatever its size or ETag, or a short body). None (pinned by size or
        ETag): the checked read, a HEAD whose size and ETag must be those recorded at open, then the GET."""
        size = self.shard_size(j)
        if size is None or not isinstance(self._store, FileSystemStore):
            raise ConfigError(
                describe(
                    "shard",
                    j,
                    "a shard of a remote store whose size was recorded at open",
                    "read it by record batch: rd.ReadAhead(unit=rd.ReadUnit.RECORD_BATCH)",
                )
            )
        f = self._shards[j].file
        if digest is None or f is None:
            data = self._read_span(j, 0, size)
        else:
            try:
                data = self._store.read_range_open(self._paths[j], f, 0, size)
            except ValueError:  # the handle was closed (the source was closed): the checked read
                data = self._read_span(j, 0, size)
        if digest is not None and (got := unit_digest(data)) != digest:
            raise shard_digest_error(self._paths[j], digest, got)
        return data

    def _read_span(self, j: int, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` of shard ``j``, from an object with the identity recorded
        at open where the store can tell (a remote store: size and ETag)."""
        if not isinstance(self._store, FileSystemStore):
            return self._store.read_range(self._paths[j], offset, length)
        return self._store.read_range_checked(self._paths[j], offset, length, self._shards[j].identity)
