"""Random access over pinned Arrow shards: ``len``, ``src[i]``, batched ``take(record_ids)``.

Algorithm: record id ``r`` in ``[0, N)`` is the ``r``-th row of the shards in manifest order
(shard, then row). Arrow IPC shards (file or stream format) are memory-mapped and their record
batches stay zero-copy views of the map; Parquet shards are read one row group at a time on
demand through a small LRU cache. ``take`` is the vectorized gather of
:mod:`resumable_data.sources.gather`.

Guarantee: ``take(ids)`` equals ``Table.take(ids)`` on the shards concatenated in manifest order.
A pinned source checks every shard's byte size, rows and schema when it opens (``verify="size"``)
or also re-hashes the bytes (``verify="content"``). An unpinned directory is pinned on first use
(``unpinned="pin"``, the default, says so on stderr); ``unpinned="allow"`` reads it without a
version (``pinned`` is False, ``version`` is None): resume checks cannot verify such a source.

Remote shards: with ``filesystem=`` (a ``pyarrow.fs.FileSystem``, e.g. S3) or an ``s3://``-style
URI, shards are opened through the filesystem (:mod:`.remote`): IPC file record batches and Parquet
row groups are read on demand into a small LRU cache; nothing is memory-mapped.

Hugging Face ``datasets``: :meth:`ArrowShards.from_hf` reads a ``datasets.Dataset``'s own Arrow
cache files (zero copy), versioned by their content (:mod:`.hf`).

Cost: opening maps the files and reads metadata; pickling carries only paths and the manifest
dict, and each process maps its own files when unpickled (fork and spawn workers alike).
"""

from __future__ import annotations

import enum
import operator
import os
import sys
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from resumable_data.errors import ConfigError, describe
from resumable_data.sources.files import (
    MANIFEST_NAME,
    ShardFormat,
    canonical_schema,
    detect_format,
    discover_shards,
)
from resumable_data.sources import remote as _remote
from resumable_data.sources.gather import ColumnGather, Unit, group_segments, plan_column
from resumable_data.sources.pin import pin, resolve_files
from resumable_data.sources.version import DatasetVersion, VerifyLevel, coerce_enum

__all__ = ["ArrowShards", "RecordIdError", "UnpinnedPolicy"]

_PARQUET_CACHE_ROW_GROUPS = 8
_REMOTE_CACHE_UNITS = 32  # remote reads are slow: keep more record batches / row groups
_STATE_FORMAT = "resumable_data.arrow_shards"
_STATE_SCHEMA_VERSION = 1
K_FORMAT = "format"
K_SCHEMA_VERSION = "schema_version"
K_ROOT = "root"
K_FILES = "files"
K_VERSION = "version"
K_FILESYSTEM = "filesystem"


class UnpinnedPolicy(str, enum.Enum):
    """What :class:`ArrowShards` does with shards that have no manifest."""

    PIN = "pin"  # pin them now (content hash), report on stderr
    ALLOW = "allow"  # read them unpinned: no version, resume cannot verify
    ERROR = "error"  # refuse


class RecordIdError(ConfigError, IndexError):
    """A record id passed to ``take``/``__getitems__`` is not an integer in ``[0, N)``."""


class ArrowShards:
    """A random-access source of records over Arrow IPC (file/stream) or Parquet shards.

    ``path_or_files``: a directory (searched recursively), a list of shard files, or a
    :class:`DatasetVersion`. ``verify``: ``"size"`` (default, cheap) or ``"content"``.
    ``unpinned``: ``"pin"`` (default), ``"allow"`` or ``"error"``. ``filesystem``: a
    ``pyarrow.fs.FileSystem`` the paths live on (e.g. ``pyarrow.fs.S3FileSystem(...)``); a URI such
    as ``"s3://bucket/prefix"`` picks its filesystem itself.
    """

    def __init__(self, path_or_files: str | os.PathLike | Sequence[str | os.PathLike] | DatasetVersion,
                 *, verify: VerifyLevel | str = VerifyLevel.SIZE,
                 unpinned: UnpinnedPolicy | str = UnpinnedPolicy.PIN, filesystem: Any = None) -> None:
        level = coerce_enum(VerifyLevel, "verify", verify)
        policy = coerce_enum(UnpinnedPolicy, "unpinned", unpinned)
        fs = _remote.normalize_filesystem(filesystem)
        if isinstance(path_or_files, DatasetVersion) and fs is None:
            fs = path_or_files.filesystem
        elif fs is None and isinstance(path_or_files, str) and "://" in path_or_files:
            import pyarrow.fs as pafs
            try:
                raw_fs, path_or_files = pafs.FileSystem.from_uri(path_or_files)
            except (pa.ArrowInvalid, OSError) as exc:
                raise ConfigError(describe("path_or_files", path_or_files, f"a filesystem URI ({exc})",
                                           "fix the URI, or pass filesystem=pyarrow.fs.S3FileSystem(...) "
                                           "and a bucket/prefix path")) from None
            fs = _remote.normalize_filesystem(raw_fs)
        if fs is not None:
            version, root_s, rel_s = self._open_remote(fs, path_or_files, policy)
            if version is not None:
                version.verify(level)
            self._init(Path(root_s), rel_s, version, fs)
            return
        version: DatasetVersion | None = None
        if isinstance(path_or_files, DatasetVersion):
            version = path_or_files
            if version.root is None:
                raise ConfigError(describe("path_or_files", version.hash, "a DatasetVersion with a root",
                                           "use DatasetVersion.load(directory) or rd.pin(directory)"))
            root, rel = version.root, [s.path for s in version.shards]
        elif isinstance(path_or_files, (str, os.PathLike)) and Path(path_or_files).is_dir():
            root = Path(path_or_files).resolve()
            rel = None
            if (root / MANIFEST_NAME).is_file():
                version = DatasetVersion.load(root)
            else:
                rel = discover_shards(root)
                if not rel:
                    raise ConfigError(describe("path_or_files", str(path_or_files),
                                               "a directory with shard files or a manifest",
                                               "check the path"))
                version = self._unpinned(root, policy, str(path_or_files))
            rel = [s.path for s in version.shards] if version is not None else rel
        else:
            if isinstance(path_or_files, (str, os.PathLike)):
                if not Path(path_or_files).exists():
                    raise ConfigError(describe("path_or_files", str(path_or_files),
                                               "an existing directory or shard file", "check the path"))
                path_or_files = [path_or_files]
            root, rel = resolve_files(list(path_or_files))
            if (root / MANIFEST_NAME).is_file():
                found = DatasetVersion.load(root)
                if [s.path for s in found.shards] == rel:
                    version = found
                elif policy is not UnpinnedPolicy.ALLOW:
                    raise ConfigError(describe(
                        "path_or_files", rel,
                        f"the shard list pinned in {root / MANIFEST_NAME} "
                        f"({[s.path for s in found.shards]})",
                        "pass the directory itself, move these files into their own directory, "
                        "or pass unpinned='allow'"))
            else:
                version = self._unpinned(root, policy, rel, files=[root / r for r in rel])
        if version is not None:
            version.verify(level)
        self._init(root, rel, version)

    @classmethod
    def _open_remote(cls, fs: Any, path: Any, policy: UnpinnedPolicy
                     ) -> tuple[DatasetVersion | None, str, list[str]]:
        """(version, root, relative paths) of shards on a remote filesystem."""
        if isinstance(path, DatasetVersion):
            if path.root is None:
                raise ConfigError(describe("path_or_files", path.hash, "a DatasetVersion with a root",
                                           "use DatasetVersion.load(prefix, filesystem=...)"))
            v = path if path.filesystem is fs else DatasetVersion.from_dict(path.to_dict(), root=path.root)
            from dataclasses import replace
            v = replace(v, filesystem=fs)
            return v, _remote._p(v.root), [s.path for s in v.shards]
        if isinstance(path, (str, os.PathLike)) and _remote.is_dir(fs, path):
            root = _remote._p(path).rstrip("/")
            if _remote.file_size(fs, f"{root}/{MANIFEST_NAME}") is not None:
                version = DatasetVersion.load(root, filesystem=fs)
                return version, root, [s.path for s in version.shards]
            rel = _remote.discover_shards(fs, root)
            if not rel:
                raise ConfigError(describe("path_or_files", root, "a prefix with shard files or a manifest",
                                           "check the path"))
            version = cls._unpinned(Path(root), policy, root, fs=fs)
            return version, root, ([s.path for s in version.shards] if version is not None else rel)
        files = [path] if isinstance(path, (str, os.PathLike)) else list(path)
        root, rel = _remote.resolve_files(fs, files)
        if _remote.file_size(fs, f"{root}/{MANIFEST_NAME}") is not None:
            found = DatasetVersion.load(root, filesystem=fs)
            if [s.path for s in found.shards] == rel:
                return found, root, rel
            if policy is not UnpinnedPolicy.ALLOW:
                raise ConfigError(describe(
                    "path_or_files", rel, f"the shard list pinned in {root}/{MANIFEST_NAME}",
                    "pass the prefix itself, or pass unpinned='allow'"))
            return None, root, rel
        version = cls._unpinned(Path(root), policy, rel, files=[f"{root}/{r}" for r in rel], fs=fs)
        return version, root, rel

    @staticmethod
    def _unpinned(root: Path, policy: UnpinnedPolicy, shown: Any,
                  files: list[Path] | None = None, fs: Any = None) -> DatasetVersion | None:
        if policy is UnpinnedPolicy.ERROR:
            raise ConfigError(describe("path_or_files", shown, f"pinned shards ({MANIFEST_NAME})",
                                       "run rd.pin(path) first, or pass unpinned='pin'/'allow'"))
        if policy is UnpinnedPolicy.ALLOW:
            return None
        print(f"resumable_data: {root} has no {MANIFEST_NAME}; pinning it now (content hash). "
              f"Pass unpinned='allow' to read it unpinned.", file=sys.stderr)
        return pin(files if files is not None else root, filesystem=fs)

    # -- opening ---------------------------------------------------------------------------
    def _init(self, root: Path, rel: list[str], version: DatasetVersion | None,
              filesystem: Any = None) -> None:
        self._fs = filesystem
        self._remote: dict[int, _remote.RemoteShard] = {}
        self._cache_units = _PARQUET_CACHE_ROW_GROUPS if filesystem is None else _REMOTE_CACHE_UNITS
        self._root = Path(root)
        self._rel = list(rel)
        self._version = version
        self._units: list[Unit] = []
        self._wholes: list[pa.Buffer | None] = []
        self._parquet: dict[int, pq.ParquetFile] = {}
        self._rg_cache: OrderedDict[tuple[int, int], pa.RecordBatch] = OrderedDict()
        self._fast: list[ColumnGather | None] | None = None
        schema: pa.Schema | None = None
        start = 0
        for k, r in enumerate(self._rel):
            path = self._root / r
            if filesystem is not None:
                shard = _remote.RemoteShard.open(filesystem, path)
                self._remote[k] = shard
                self._wholes.append(None)
                s = shard.schema
                for g, n in enumerate(shard.unit_rows):
                    if n:
                        self._units.append(Unit(k, start, n, None, g))
                        start += n
                fmt = None
            else:
                fmt = detect_format(path)
            if fmt is None:
                pass
            elif fmt is ShardFormat.PARQUET:
                pf = pq.ParquetFile(path)
                self._parquet[k] = pf
                self._wholes.append(None)
                s = pf.schema_arrow
                for g in range(pf.metadata.num_row_groups):
                    n = pf.metadata.row_group(g).num_rows
                    self._units.append(Unit(k, start, n, None, g))
                    start += n
            else:
                whole = pa.memory_map(str(path), "r").read_buffer()
                reader = (pa.ipc.open_file(pa.BufferReader(whole)) if fmt is ShardFormat.IPC_FILE
                          else pa.ipc.open_stream(pa.BufferReader(whole)))
                batches = ([reader.get_batch(i) for i in range(reader.num_record_batches)]
                           if fmt is ShardFormat.IPC_FILE else list(reader))
                self._wholes.append(whole)
                s = reader.schema
                for b in batches:
                    if b.num_rows:
                        self._units.append(Unit(k, start, b.num_rows, b, None))
                        start += b.num_rows
            if schema is None:
                schema = s
            elif canonical_schema(s) != canonical_schema(schema):
                raise ConfigError(describe("shard", r, f"the schema of {self._rel[0]!r}",
                                           "rewrite the shard with the common schema"))
        assert schema is not None
        self._schema = schema
        self._num_records = start
        self._starts = np.fromiter((u.start for u in self._units), dtype=np.int64,
                                   count=len(self._units))
        self._unit_shard = np.fromiter((u.shard for u in self._units), dtype=np.int64,
                                       count=len(self._units))

    # -- pickling (no pickled Arrow data: each process maps its own files) -------------------
    def __getstate__(self) -> dict[str, Any]:
        state = {K_FORMAT: _STATE_FORMAT, K_SCHEMA_VERSION: _STATE_SCHEMA_VERSION,
                 K_ROOT: str(self._root), K_FILES: list(self._rel),
                 K_VERSION: self._version.to_dict() if self._version is not None else None}
        if self._fs is not None:
            state[K_FILESYSTEM] = self._fs  # pyarrow filesystems pickle their configuration
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state.get(K_FORMAT) != _STATE_FORMAT or state.get(K_SCHEMA_VERSION) != _STATE_SCHEMA_VERSION:
            raise ConfigError(describe("state", {k: state.get(k) for k in (K_FORMAT, K_SCHEMA_VERSION)},
                                       f"format {_STATE_FORMAT!r} schema_version {_STATE_SCHEMA_VERSION}",
                                       "pickle and unpickle with the same resumable_data version"))
        version = None
        fs = state.get(K_FILESYSTEM)
        if state[K_VERSION] is not None:
            version = DatasetVersion.from_dict(state[K_VERSION], root=state[K_ROOT])
            if fs is not None:
                from dataclasses import replace
                version = replace(version, filesystem=fs)
        self._init(Path(state[K_ROOT]), state[K_FILES], version, fs)
        if version is not None:
            for k, s in enumerate(version.shards):  # cheap: sizes only
                size = _remote.file_size(fs, self._root / s.path)
                if size != s.size:
                    version.verify(VerifyLevel.SIZE)

    @classmethod
    def from_hf(cls, dataset: Any, *, hash: str = "content",
                verify: VerifyLevel | str = VerifyLevel.SIZE,
                cache_dir: str | os.PathLike | None = None) -> ArrowShards:
        """A source over a Hugging Face ``datasets.Dataset``'s own Arrow cache files (zero copy),
        versioned by their content; the manifest stays in memory (see :mod:`.hf`).

        An in-memory dataset (``Dataset.from_dict``, ...) is written once as pinned Arrow shards
        into ``cache_dir`` (default ``$RD_CACHE_DIR/hf-in-memory/<version hash>``), re-used when it
        already holds the same version, refused when it holds another."""
        from resumable_data.sources.hf import hf_shards
        root, rel, version = hf_shards(dataset, hash=hash, cache_dir=cache_dir)
        version.verify(coerce_enum(VerifyLevel, "verify", verify))
        self = cls.__new__(cls)
        self._init(root, rel, version)
        return self

    @property
    def filesystem(self) -> Any:
        """The ``pyarrow.fs.FileSystem`` of remote shards, None for local (memory-mapped) ones."""
        return self._fs

    # -- properties ------------------------------------------------------------------------
    @property
    def version(self) -> DatasetVersion | None:
        """The pinned :class:`DatasetVersion`, or None for an unpinned source."""
        return self._version

    @property
    def pinned(self) -> bool:
        return self._version is not None

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    @property
    def num_shards(self) -> int:
        return len(self._rel)

    @property
    def root(self) -> Path:
        return self._root

    def __len__(self) -> int:
        return self._num_records

    def __repr__(self) -> str:
        v = self._version.hash[:12] if self._version is not None else "UNPINNED"
        return f"ArrowShards({str(self._root)!r}, shards={self.num_shards}, records={len(self)}, version={v})"

    # -- access ----------------------------------------------------------------------------
    def _unit_data(self, k: int) -> pa.RecordBatch:
        u = self._units[k]
        if u.batch is not None:
            return u.batch
        key = (u.shard, u.row_group)
        hit = self._rg_cache.get(key)
        if hit is not None:
            self._rg_cache.move_to_end(key)
            return hit
        if u.shard in self._remote:
            batch = self._remote[u.shard].read_unit(u.row_group)
        else:
            table = self._parquet[u.shard].read_row_group(u.row_group).combine_chunks()
            batch = table.to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], schema=self._schema)
        batch = batch.replace_schema_metadata(self._schema.metadata)
        self._rg_cache[key] = batch
        if len(self._rg_cache) > self._cache_units:
            self._rg_cache.popitem(last=False)
        return batch

    def _locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        unit = np.searchsorted(self._starts, ids, side="right") - 1
        return unit, ids - self._starts[unit]

    def __getitem__(self, index: int) -> dict[str, Any]:
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError(describe("index", index, "an integer record id",
                                     "use take(ids) for arrays of ids")) from None
        n = self._num_records
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(describe("index", index, f"a record id in [-{n}, {n})",
                                      "pass an id within the dataset"))
        unit, local = self._locate(np.array([i], dtype=np.int64))
        return self._unit_data(int(unit[0])).slice(int(local[0]), 1).to_pylist()[0]

    def __getitems__(self, record_ids: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """One row dict per id (torch's batched fetch protocol)."""
        return self.take(record_ids).to_pylist()

    def _check_ids(self, record_ids: Any) -> np.ndarray:
        ids = np.asarray(record_ids)
        n = self._num_records
        if ids.size == 0:
            return np.zeros(0, dtype=np.int64)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise RecordIdError(describe("record_ids", record_ids,
                                         f"a 1-D sequence of integer record ids in [0, {n})",
                                         f"pass integers (got dtype {ids.dtype}, ndim {ids.ndim})"))
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= n:
            bad = lo if lo < 0 else hi
            raise RecordIdError(describe("record_ids", bad, f"record ids in [0, {n})",
                                         "pass ids of this dataset's records"))
        return ids.astype(np.int64, copy=False)

    def _plan(self) -> list[ColumnGather | None]:
        if self._fast is None:
            self._fast = [
                plan_column(i, f.type, self._units, self._wholes, self._num_records)
                for i, f in enumerate(self._schema)
            ]
        return self._fast

    def take(self, record_ids: Sequence[int] | np.ndarray) -> pa.Table:
        """The records ``record_ids`` (requested order, duplicates allowed) as one-chunk Table."""
        ids = self._check_ids(record_ids)
        if len(ids) == 0:
            return self._schema.empty_table()
        unit, local = self._locate(ids)
        fast = self._plan()
        columns: list[pa.Array | None] = [None] * len(fast)
        for i, g in enumerate(fast):
            if g is not None:
                columns[i] = g.gather(ids, unit, local)
        slow = [i for i, c in enumerate(columns) if c is None]
        if slow:
            got = self._fallback(unit, local, slow)
            for j, i in enumerate(slow):
                columns[i] = got[j]
        return pa.Table.from_arrays(columns, schema=self._schema)

    def _fallback(self, unit: np.ndarray, local: np.ndarray, cols: list[int]) -> list[pa.Array]:
        """Per-unit Arrow takes for columns ``cols``, then one reorder take on the small result."""
        order, bounds = group_segments(unit, len(self._units))
        local_s = local[order]
        pieces = []
        for k in np.flatnonzero(np.diff(bounds)):
            a, b = bounds[k], bounds[k + 1]
            pieces.append(self._unit_data(int(k)).select(cols).take(pa.array(local_s[a:b])))
        inverse = np.empty(len(order), dtype=np.int64)
        inverse[order] = np.arange(len(order), dtype=np.int64)
        inverse_pa = pa.array(inverse)
        # column-wise: shards may differ in schema/field metadata, never in types
        return [pa.concat_arrays([p.column(j) for p in pieces]).take(inverse_pa)
                for j in range(len(cols))]

    def column_lengths(self, column: str) -> np.ndarray:
        """Per-record list lengths (int64) of list column ``column``, from offsets buffers only.

        IPC shards read only the offsets buffers (no values). Parquet stores no offsets buffer,
        so a Parquet row group's column is decoded to get them.
        """
        if column not in self._schema.names:
            raise ConfigError(describe("column", column, f"one of {self._schema.names}",
                                       "pass a column name of this dataset"))
        t = self._schema.field(column).type
        if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
            raise ConfigError(describe("column", column, f"a list or large_list column (it is {t})",
                                       "pass a list-typed column"))
        i = self._schema.get_field_index(column)
        out = np.empty(self._num_records, dtype=np.int64)
        for k, u in enumerate(self._units):
            arr = self._unit_data(k).column(i)
            out[u.start:u.start + u.rows] = np.diff(arr.offsets.to_numpy())
        return out
