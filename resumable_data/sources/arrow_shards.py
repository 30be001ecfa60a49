"""Random access over pinned Arrow shards: ``len``, ``src[i]``, batched ``take(record_ids)``.

Algorithm: record id ``r`` in ``[0, N)`` is the ``r``-th row of the shards in manifest order
(shard, then row). Arrow IPC shards (file or stream format) are memory-mapped and their record
batches stay zero-copy views of the map; Parquet shards are read one row group at a time on
demand, decoded units kept per process up to a byte budget (:mod:`.decoded_units`). ``take`` is the vectorized gather of
:mod:`resumable_data.sources.gather`.

Guarantee: ``take(ids)`` equals ``Table.take(ids)`` on the shards concatenated in manifest order.
A pinned source checks every shard's byte size, rows and schema when it opens, and by default
(``verify="cached"``) its content hash, verified once per file state and remembered
(:mod:`.verified`: any write, copy or swap re-hashes it); ``verify="size"`` skips the hash,
``verify="content"`` re-hashes every open. Every record batch is structurally validated once,
before its first record is used (:mod:`.validate`), and every read error of a shard is a
:class:`~resumable_data.DatasetIntegrityError` naming the shard and batch: damaged data never
crashes, hangs or silently feeds training at the default settings. An unpinned directory (or file
list) is pinned on first use (``unpinned="pin"``, the default, says so on stderr) into the cache,
never into the folder (:mod:`.manifests`); ``unpinned="allow"`` reads it without a version
(``pinned`` is False, ``version`` is None): resume checks cannot verify such a source.

Storage: every shard is read through a :class:`~resumable_data.sources.store.ShardStore`, the
same code for local files and for a ``pyarrow.fs.FileSystem`` (``filesystem=``, e.g. S3, or an
``s3://``-style URI, which picks its filesystem itself). Where the store memory-maps (local files)
IPC batches are zero-copy views of the map; on a remote store record batches (by one ranged read
each, through the pinned layout: :mod:`.layout`) and Parquet row groups are read on demand into the
per-process decoded-unit cache and nothing is memory-mapped (see :mod:`.files`); ``take`` and ``take_numpy``
gather decoded units with the same column plans as mapped ones, rebuilt over the units a batch touches
(:mod:`.gather_decoded`).
With read-ahead attached (:meth:`ArrowShards.attach_read_ahead`, what ``rd.DataLoader(read_ahead=)``
does: :mod:`.read_ahead`) a unit is decoded from the bytes the rank's fetcher wrote to its cache
directory, else (and without read-ahead) read by the step itself through :meth:`ArrowShards.fetch_unit`
(one ranged GET whose bytes must hash to the unit's pinned digest, :mod:`.unit_digests`; without
digests a HEAD whose size and ETag must equal the identity recorded at open, then the ranged GET), and
validated at every decode. Transient store failures are
retried (``retries=rd.Retries(...)``, :mod:`.retry`); a store that stays down is an
:class:`~resumable_data.StoreUnavailableError`.

Its concepts are one module each: resolving what the argument names and the unpinned policy
(:mod:`.arrow.resolve`), record ids (:mod:`.arrow.record_ids`), the pickled state
(:mod:`.arrow.pickled`), opening one shard (:mod:`.files`), the unit table of the open shards
and its join for a view (:mod:`.arrow.unit_table`), validation once
(:mod:`.arrow.unit_validation`), identity checks around reads (:mod:`.arrow.read_guard`), which
column plans serve a batch and the per-unit fallback (:mod:`.arrow.gathering`, over the plans of
:mod:`.gather`), the units decoded when read, their ranged reads and the read-ahead hooks
(:mod:`.unit_reads`), adopting the layouts rebuilt at open (:mod:`.opening`); this module holds
the class: construction, the closed state, the read paths over those parts and the concatenated
view ``rd.Mixture`` gathers through.

Hugging Face ``datasets``: :meth:`ArrowShards.from_hf` reads a ``datasets.Dataset``'s own Arrow
cache files (zero copy), versioned by their content (:mod:`.hf`).

Files that change under a source (:mod:`.identity`): every shard's identity (local: device,
inode, size, mtime in ns, from the descriptor opened; remote: size, modification time and ETag) is
recorded when it is opened. A pickled source carries those identities, and a process that opens it
again (spawn/forkserver workers) refuses a shard whose identity differs, so a file replaced after
the loader was built is never read as if it were the pinned one. Every read of local shards
(``take``, ``take_numpy``, ``src[i]``, ``column_lengths``) checks the identity of each shard it
touches before (a truncated file is refused before its map is touched: no SIGBUS) and after (a
write during or before the read is refused, the rows read are never returned); each error is a
:class:`~resumable_data.DatasetIntegrityError` naming the file and the fix.

Cost: opening maps the files and reads metadata (remote: per shard a HEAD to verify, an open and
one read of its schema message, 16 shards at a time, :mod:`.opening`; a manifest without layouts
adds the footer and batch headers once per machine); pickling carries only paths, the manifest dict, the files' identities and
(remote) the filesystem's configuration, and each process opens its own files when unpickled
(fork and spawn workers alike), comparing each file's identity with the pickled one. Each read
costs two ``stat`` calls per memory-mapped shard it touches, each one ``statx`` of a compiled loop
over the shards (:mod:`.watch`; ``benchmarks/bench_identity.py``; the figure is in ``docs/data.md``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from resumable_data._schema import coerce_enum
from resumable_data.errors import ConfigError, ResumableDataError, UsageError, describe
from resumable_data.sources.arrow.gathering import Gathering
from resumable_data.sources.arrow.pickled import read_state, source_state
from resumable_data.sources.arrow.read_guard import guarded_read
from resumable_data.sources.arrow.record_ids import RecordIdError, checked_ids, record_index
from resumable_data.sources.arrow.record_ids import locate as locate_ids
from resumable_data.sources.arrow.resolve import UnpinnedPolicy, resolve_source, source_store
from resumable_data.sources.arrow.unit_table import UnitTable, closed_table, joined_table, opened_table
from resumable_data.sources.arrow.unit_validation import UnitValidation
from resumable_data.sources.decoded_units import check_budget
from resumable_data.sources.files import OpenShard, canonical_schema
from resumable_data.sources.gather_plan import Alloc
from resumable_data.sources.identity import FileIdentity
from resumable_data.sources.opening import adopt_layouts, open_shards, with_layouts
from resumable_data.sources.read_ahead.cache import UnitCache
from resumable_data.sources.retry import DEFAULT_RETRIES, Retries
from resumable_data.sources.store import LOCAL, ShardStore, join
from resumable_data.sources.unit_reads import UnitReads
from resumable_data.sources.version import DatasetVersion, VerifyLevel
from resumable_data.sources.watch import ShardWatch

__all__ = ["ArrowShards", "RecordIdError", "UnpinnedPolicy"]


class ArrowShards:
    """A random-access source of records over Arrow IPC (file/stream) or Parquet shards.

    ``path_or_files``: a directory (searched recursively), a list of shard files, or a
    :class:`DatasetVersion`. ``verify``: ``"cached"`` (default: content hash verified once per
    file state and remembered), ``"size"`` (cheap, blind to same-size edits) or ``"content"``
    (re-hash every open).
    ``unpinned``: ``"pin"`` (default), ``"allow"`` or ``"error"``. ``filesystem``: a
    ``pyarrow.fs.FileSystem`` the paths live on (e.g. ``pyarrow.fs.S3FileSystem(...)``); a URI such
    as ``"s3://bucket/prefix"`` picks its filesystem itself. ``decoded_cache_bytes``: bytes of
    decoded units (Parquet row groups, compressed IPC record batches, remote units) this process
    keeps, at least (default None: 256 MiB; the process keeps the largest budget its sources ask
    for): a global shuffle over such units needs one that holds the decoded dataset.
    """

    def __init__(
        self,
        path_or_files: str | os.PathLike | Sequence[str | os.PathLike] | DatasetVersion,
        *,
        verify: VerifyLevel | str = VerifyLevel.CACHED,
        unpinned: UnpinnedPolicy | str = UnpinnedPolicy.PIN,
        filesystem: Any = None,
        retries: Retries = DEFAULT_RETRIES,
        decoded_cache_bytes: int | None = None,
    ) -> None:
        level = coerce_enum(verify, VerifyLevel, "verify")
        decoded = check_budget(decoded_cache_bytes)
        policy = coerce_enum(unpinned, UnpinnedPolicy, "unpinned")
        if not isinstance(retries, Retries):
            raise ConfigError(
                describe(
                    "retries",
                    retries,
                    "an rd.Retries",
                    "pass retries=rd.Retries(attempts=..., base_delay=..., max_delay=...)",
                )
            )
        store, path_or_files = source_store(path_or_files, filesystem, retries)
        version, root, rel = resolve_source(store, path_or_files, policy)
        built: list[int] = []
        if version is not None and not store.local:
            version, built = with_layouts(version, store)
        if version is not None:
            version.verify(level)
        self._init(root, rel, version, store, decoded=decoded)
        if version is not None:
            self._version: DatasetVersion | None = adopt_layouts(version, self._shards, built, level)

    # -- opening ---------------------------------------------------------------------------
    def _init(
        self,
        root: str,
        rel: list[str],
        version: DatasetVersion | None,
        store: ShardStore = LOCAL,
        expected: list[FileIdentity | None] | None = None,
        members: Sequence[ArrowShards] | None = None,
        decoded: int | None = None,
    ) -> None:
        """Open the shards; ``expected``: the identity each must still have (an unpickled source);
        ``members``: a view over these open sources' shards (:meth:`concatenated`), opened by them;
        ``decoded``: the ``decoded_cache_bytes`` asked for."""
        self._broken: ResumableDataError | None = None
        self._watch = ShardWatch([])  # the mapped shards' names, once opened
        self._store = store
        self._root = Path(root)
        self._rel = list(rel)
        self._version = version
        self._shards: list[OpenShard] = []
        self._decoded_request = decoded
        if members is not None:  # a view: its sources' units and arrays, shifted (no Python step per unit)
            self._adopt(
                joined_table([m._table for m in members], self._rel),
                UnitValidation.joined([m._validation for m in members]),
                [m._gathering for m in members],
            )
            return
        self._shards = open_shards(root, self._rel, version, store)
        table = opened_table(root, self._rel, self._shards, expected)
        self._adopt(table, UnitValidation.of_units(table.units, table.unit_index, self._rel))

    def _adopt(self, table: UnitTable, validation: UnitValidation, members: Sequence[Gathering] | None = None) -> None:
        """Read through ``table`` (:mod:`.arrow.unit_table`), the fields this class reads kept as
        attributes, validating its zero-copy batches once through ``validation`` and gathering
        through :mod:`.arrow.gathering` (``members``: a view's sources' gatherings, whose plans it rebases)."""
        self._table = table
        self._shards, self._units, self._unit_index = table.shards, table.units, table.unit_index
        self._unit_shard, self._unit_view, self._watch = table.unit_shard, table.unit_view, table.watch
        self._schema, self._num_records, self._starts = table.schema, table.num_records, table.starts
        self._validation = validation
        self._reads = self._unit_reads()
        self._gathering = Gathering(table, self._reads, validation, members)

    def _unit_reads(self) -> UnitReads:
        """The units decoded when read (:mod:`.unit_reads`), over the unit table just built."""
        v = self._version
        return UnitReads(
            units=self._units,
            unit_index=self._unit_index,
            unit_shard=self._unit_shard,
            unit_view=self._unit_view,
            shards=self._shards,
            store=self._store,
            root=self._root.as_posix(),
            rel=self._rel,
            metadata=self._shards[0].schema.metadata if self._shards else None,
            columns=len(self._schema),
            ensure_valid=self._validation.ensure,
            name=self.__repr__,
            key=(str(self._root), tuple(self._rel), v.hash if v is not None else None),
            budget=self._decoded_request,
        )

    def close(self) -> None:
        """Close the shard files and drop its decoded units (the source is unusable afterwards: a
        read or a pickle raises :class:`~resumable_data.UsageError`)."""
        self._close_shards()
        self._reads.close()
        if self._broken is None:
            self._broken = UsageError(
                describe(
                    "source",
                    self.__repr__(),
                    "an open source (this one was closed: close() released its files and decoded units)",
                    "build the source again (rd.ArrowShards(...)) and read from that one",
                )
            )

    def _close_shards(self) -> None:
        for shard in self._shards:
            shard.close()
        self._watch.close()

    def _closed_because(
        self, exc: ResumableDataError, root: str, rel: list[str], version: DatasetVersion | None, store: ShardStore
    ) -> None:
        """An unpickled source whose files failed their checks: every read raises ``exc``."""
        self._broken = exc
        self._store, self._root, self._rel, self._version = store, Path(root), list(rel), version
        self._decoded_request = None
        self._adopt(
            closed_table(version.num_records if version is not None else 0),
            UnitValidation.of_units([], [], []),
        )

    def _usable(self) -> None:
        if self._broken is not None:
            raise self._broken

    # -- pickling (no pickled Arrow data: each process maps its own files) -------------------
    def __getstate__(self) -> dict[str, Any]:
        self._usable()  # a source whose files failed their checks is not passed on
        identities = [s.identity for s in self._shards]
        cache = self._reads.ahead
        ahead = (cache.root, cache.owner) if cache is not None else None
        return source_state(self._root, self._rel, self._version, identities, self._store, ahead, self._decoded_request)

    def __setstate__(self, state: dict[str, Any]) -> None:
        got = read_state(state)
        try:
            self._init(
                got.root, got.files, got.version, got.store, got.expected, decoded=check_budget(got.decoded_bytes)
            )
        except ResumableDataError as exc:
            # raised at the first read, where a loader worker reports it with the batch it was
            # fetching (an exception while unpickling only says the worker exited)
            self._closed_because(exc, got.root, got.files, got.version, got.store)
            return
        if got.read_ahead is not None:
            self.attach_read_ahead(UnitCache(got.read_ahead, got.read_ahead_owner))

    @classmethod
    def from_hf(
        cls,
        dataset: Any,
        *,
        hash: str = "content",
        verify: VerifyLevel | str = VerifyLevel.CACHED,
        cache_dir: str | os.PathLike | None = None,
        version_of: Any = "files",
    ) -> ArrowShards:
        """A source over a Hugging Face ``datasets.Dataset``'s own Arrow cache files (zero copy),
        versioned by their content; the manifest stays in memory (see :mod:`.hf`).

        An in-memory dataset (``Dataset.from_dict``, ...) is written once as pinned Arrow shards
        into ``cache_dir`` (default ``$RD_CACHE_DIR/hf-in-memory/<version hash>``), re-used when it
        already holds the same version, refused when it holds another. ``version_of="rows"``
        (:class:`~resumable_data.sources.hf.HFVersion`) does the same for a file-backed dataset, so
        that the version follows the rows, not the ``datasets`` cache fingerprint (which changes
        when the script that ran ``map`` is edited)."""
        from resumable_data.sources.hf import hf_shards

        root, rel, version = hf_shards(dataset, hash=hash, cache_dir=cache_dir, version_of=version_of)
        version.verify(coerce_enum(verify, VerifyLevel, "verify"))
        self = cls.__new__(cls)
        self._init(Path(root).as_posix(), rel, version, LOCAL)
        return self

    @classmethod
    def concatenated(cls, sources: Sequence[ArrowShards]) -> ArrowShards | None:
        """One gather engine over several local sources' shards, in order (record ids follow on),
        for ``rd.Mixture``: each source was verified when it was opened, so the view carries no
        version of its own. The view reads the sources' open shards (it opens nothing: closing a
        source closes them for the view too) and its gather plan is the sources' plans rebased
        (``gather_rows.concat_columns``: one array operation per column and source, each source's plan
        built once and kept by it), so a fresh view costs about what its sources already paid.
        None when a source is remote, or the sources' canonical schemas differ where ``rd.Mixture``
        accepts them as equal (a list's child named ``item`` by Arrow IPC, ``element`` by Parquet):
        each then gathers on its own."""
        if any(not s._store.local for s in sources):
            return None
        if len({canonical_schema(s._schema) for s in sources}) > 1:
            return None
        paths = [join(s._root.as_posix(), r) for s in sources for r in s._rel]
        root = os.path.commonpath([os.path.dirname(p) for p in paths])
        rel = [os.path.relpath(p, root) for p in paths]
        view = cls.__new__(cls)
        broken = next((s._broken for s in sources if s._broken is not None), None)
        if broken is not None:
            view._closed_because(broken, root, rel, None, sources[0]._store)
            return view
        try:  # the sources' open shards (no second opening) and, on first use, their gather plans
            asked = [s._decoded_request for s in sources if s._decoded_request is not None]
            view._init(root, rel, None, sources[0]._store, members=sources, decoded=max(asked, default=None))
        except ResumableDataError as exc:
            view._closed_because(exc, root, rel, None, sources[0]._store)
        return view

    @property
    def filesystem(self) -> Any:
        """The ``pyarrow.fs.FileSystem`` of remote shards, None for local (memory-mapped) ones."""
        return self._store.filesystem

    # -- properties ------------------------------------------------------------------------
    @property
    def version(self) -> DatasetVersion | None:
        """The pinned :class:`DatasetVersion`, or None for an unpinned source."""
        return self._version

    @property
    def pinned(self) -> bool:
        """Whether the source has a pinned :class:`DatasetVersion`."""
        return self._version is not None

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of every shard."""
        return self._schema

    @property
    def num_shards(self) -> int:
        """How many shard files the source reads."""
        return len(self._rel)

    @property
    def root(self) -> Path:
        """The directory the shard paths are relative to."""
        return self._root

    def __len__(self) -> int:
        return self._num_records

    def __repr__(self) -> str:
        v = self._version.hash[:12] if self._version is not None else "UNPINNED"
        return f"ArrowShards({str(self._root)!r}, shards={self.num_shards}, records={len(self)}, version={v})"

    # -- read-ahead (.read_ahead): units by index, their byte spans, a checked ranged read ----------
    def unit_starts(self) -> np.ndarray:
        """The first record id of every unit (record batch / row group holding records), in order."""
        return self._starts.copy()

    def unit_spans(self) -> list[tuple[int, int] | None]:
        """Per unit: (offset, length) of the bytes one ranged read fetches ahead, None where the
        unit is not read by range (:meth:`.unit_reads.UnitReads.spans`)."""
        return self._reads.spans()

    def fetch_unit(self, k: int) -> bytes:
        """The bytes of unit ``k``'s span, checked against the identity recorded at open
        (:meth:`.unit_reads.UnitReads.fetch_unit`)."""
        return self._reads.fetch_unit(k)

    def fetch_run(self, first: int, last: int) -> bytes:
        """The bytes of units ``first..last`` of one shard, one checked read
        (:meth:`.unit_reads.UnitReads.fetch_run`)."""
        return self._reads.fetch_run(first, last)

    def unit_shards(self) -> np.ndarray:
        """The shard (index into the source's files) holding every unit, in unit order."""
        return self._unit_shard.copy()

    def shard_size(self, j: int) -> int | None:
        """The byte size of shard ``j``'s object as recorded at open (None where none was)."""
        return self._reads.shard_size(j)

    def fetch_shard(self, j: int, digest: str | None = None) -> bytes:
        """Every byte of shard ``j``'s object, checked against ``digest`` (its pinned content hash:
        one GET, no HEAD) or, without one, by a HEAD first (:meth:`.unit_reads.UnitReads.fetch_shard`;
        read ahead by ``rd.ReadUnit.SHARD``)."""
        return self._reads.fetch_shard(j, digest)

    def attach_read_ahead(self, cache: UnitCache | None) -> None:
        """Read units through ``cache`` (filled ahead by one fetcher per rank), or directly (None)."""
        self._reads.attach(cache)

    @property
    def remote(self) -> bool:
        """Whether the shards are read from a remote store (nothing memory-mapped)."""
        return not self._store.local

    def _locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return locate_ids(self._starts, ids)

    def __getitem__(self, index: int) -> dict[str, Any]:
        self._usable()
        i = record_index(index, self._num_records)
        unit, local = self._locate(np.array([i], dtype=np.int64))
        return guarded_read(
            self._table, unit, lambda: self._gathering.unit_data(int(unit[0])).slice(int(local[0]), 1).to_pylist()[0]
        )

    def __getitems__(self, record_ids: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """One row dict per id (torch's batched fetch protocol)."""
        return self.take(record_ids).to_pylist()

    def take(self, record_ids: Sequence[int] | np.ndarray) -> pa.Table:
        """The records ``record_ids`` (requested order, duplicates allowed) as one-chunk Table."""
        self._usable()
        ids, unit, local, touched = checked_ids(record_ids, self._table)
        if len(ids) == 0:
            return self._schema.empty_table()
        return guarded_read(self._table, unit, lambda: self._gathering.take(ids, unit, local), touched)

    def take_numpy(
        self, record_ids: Sequence[int] | np.ndarray, pad_value: Any = 0, alloc: Alloc | None = None
    ) -> list[Any] | None:
        """Per column, the default collate's numpy layout of ``take(record_ids)`` (a 1-D array, or
        ``(padded, lengths)`` for a list column), straight from the maps (remote units and local
        Parquet row groups: from the decoded units); None unless every column is an integer/float
        (or list of them) or ``bool`` column without nulls on the fast path (then use :meth:`take`).
        ``alloc(shape, dtype)``, when given, makes every array returned (see
        :data:`~resumable_data.sources.gather_plan.Alloc`; a loader worker passes its shared-memory slot's)."""
        self._usable()
        if not self._gathering.may_numpy():
            return None  # before checking the ids: take() checks them
        ids, unit, local, touched = checked_ids(record_ids, self._table)
        if len(ids) == 0:
            return None
        return guarded_read(
            self._table, unit, lambda: self._gathering.numpy(ids, unit, local, pad_value, alloc), touched
        )

    def column_lengths(self, column: str) -> np.ndarray:
        """Per-record list lengths (int64) of list column ``column``, from offsets buffers only.

        Uncompressed IPC shards read only the offsets buffers (no values). Parquet stores no
        offsets buffer and compressed IPC stores them compressed, so each such unit is decoded to
        get them (through the decoded-unit map: a dataset larger than its budget is decoded once
        here, then again by the batches that need it).
        """
        self._usable()
        if column not in self._schema.names:
            raise ConfigError(
                describe("column", column, f"one of {self._schema.names}", "pass a column name of this dataset")
            )
        t = self._schema.field(column).type
        if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
            raise ConfigError(
                describe("column", column, f"a list or large_list column (it is {t})", "pass a list-typed column")
            )
        i = self._schema.get_field_index(column)
        return guarded_read(self._table, np.arange(len(self._units)), lambda: self._gathering.list_lengths(i))
