"""Dataset versions: the pinned manifest of shards plus the schema, and its identity hash.

Algorithm: a :class:`DatasetVersion` is the ordered list of shards (relative path, byte size, row
count, xxh3-128 content hash or ``None`` in ``size`` mode), the canonical schema text (see
:func:`~resumable_data.sources.files.canonical_schema`), the record count, the hash mode and
whether the shard list came from discovering a directory or from an explicit file list, and,
for shards written by ``rd.prepare``, their optional ``lineage`` object (what produced them). Its
``hash`` is the xxh3-128 hex digest of the canonical JSON of those fields (``sort_keys=True``,
separators ``(",", ":")``, the ``hash`` key itself excluded). The root directory it was loaded
from is not part of the hash, so a moved dataset keeps its identity. Loading, saving and
verifying go through the :class:`~resumable_data.sources.store.ShardStore` of ``filesystem``
(local files or a ``pyarrow.fs.FileSystem``): one code path for both. Verifying is
:mod:`.version_verify`; the modes (:class:`HashMode`, :class:`VerifyLevel`, :class:`Selection`)
are :mod:`.version_modes`, importable from here too.

Guarantee: same bytes, same hash; a changed byte (``content`` mode), row count, size, shard,
shard order or schema gives another hash. :meth:`DatasetVersion.load` recomputes the hash from
the fields and refuses a manifest whose stored hash does not match (a hand-edited manifest).
:meth:`DatasetVersion.verify` compares the files on disk with the manifest and raises one
:class:`~resumable_data.DatasetIntegrityError` that lists every difference.

Cost: loading is one small JSON read (at most :data:`MANIFEST_MAX_BYTES`; a larger file is
refused). Saving is one atomic write (local: tmp file, fsync, rename, directory fsync; remote: one
whole-object upload). ``verify("size")`` stats every shard and reads its
metadata (row count, schema; a remote shard with a pinned layout skips that read: its schema and
row counts are checked when it is opened and read); ``verify("content")`` also re-hashes every
byte; ``verify("cached")`` re-hashes only shards whose (path, size, mtime, ctime, inode; remote:
path, size, ETag) changed since they last verified, and accepts a remote shard whose ETag is the
pinned one (:mod:`.verified`). Remote shards are checked 16 at a time.

Manifest schema 2 adds, per shard, its :class:`~.layout.ShardLayout` and the store's ETag, and
``derived_hash`` over them; neither is part of the version's identity (``hash`` covers the schema-1
fields, so a dataset keeps its hash across the upgrade); schema 1 manifests are still read (their
layouts are built at the first open, :mod:`.opening`). Schema 3 adds to each layout the digest of every
unit's bytes (``digests``, null where the pin did not hash the bytes: :mod:`.unit_digests`), covered by
``derived_hash`` like the spans; schema 2 manifests are still read (their layouts have no digests: their
unit reads keep the HEAD check of :mod:`.store`; a re-pin gives them digests and keeps the version hash),
and ``verify("content")`` checks the digests in the same read as the content hash. Schema 4 adds to each
layout ``meta``: the span of the metadata a remote open reads (an IPC schema message, a Parquet footer)
and its digest, null where the pin did not hash the bytes; every remote open checks it before parsing
that metadata. Schema 3 manifests are still read (no ``meta``: their opens trust the metadata read, as
before; a re-pin adds it and keeps the version hash).
``hash_mode="etag"`` versions record the ETag's digest as each shard's ``content_hash`` (:class:`HashMode`).
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import xxhash

from resumable_data._cache import cache_dir
from resumable_data.errors import ConfigError, DatasetIntegrityError, describe
from resumable_data.sources.files import MANIFEST_NAME, discover_shards
from resumable_data.sources.layout import LayoutMismatch, ShardLayout
from resumable_data.sources.manifests import MANIFEST_NAMES, cached_manifest
from resumable_data.sources.store import LOCAL, ShardStore, join, store_for
from resumable_data.sources.version_modes import HashMode, Selection, VerifyLevel, etag_digest
from resumable_data.sources.version_verify import verify_version

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_MAX_BYTES",
    "MANIFEST_SCHEMA_VERSION",
    "DatasetVersion",
    "HashMode",
    "Selection",
    "ShardInfo",
    "VerifyLevel",
    "etag_digest",
]

MANIFEST_FORMAT = "resumable_data.dataset_version"
MANIFEST_SCHEMA_VERSION = 4
#: Manifest schema versions this version reads (1: before layouts, 2: before unit digests, 3: before
#: metadata digests; read, never written).
MANIFEST_READ_VERSIONS = (1, 2, 3, 4)
#: The schema version whose fields the version hash covers (identity is unchanged by schema 2).
IDENTITY_SCHEMA_VERSION = 1

#: The most bytes a manifest may hold (about 1.7 million shards); a larger file is refused unread.
MANIFEST_MAX_BYTES = 256 << 20

# Manifest keys (the on-disk contract; renaming one is a schema_version bump).
K_FORMAT = "format"
K_SCHEMA_VERSION = "schema_version"
K_SHARDS = "shards"
K_SCHEMA = "schema"
K_NUM_RECORDS = "num_records"
K_HASH = "hash"
K_HASH_MODE = "hash_mode"
K_SELECTION = "selection"
K_PATH = "path"
K_SIZE = "size"
K_NUM_ROWS = "num_rows"
K_CONTENT_HASH = "content_hash"
K_LAYOUT = "layout"  # schema 2
K_ETAG = "etag"  # schema 2
K_DERIVED_HASH = "derived_hash"  # schema 2
#: Optional: what produced the shards (``rd.prepare``: input version, function fingerprint,
#: settings, package version). Hashed like every other field; absent from manifests written
#: without it, whose hash is therefore unchanged.
K_LINEAGE = "lineage"

_ROOT_KEYS_V1 = {K_FORMAT, K_SCHEMA_VERSION, K_SHARDS, K_SCHEMA, K_NUM_RECORDS, K_HASH, K_HASH_MODE, K_SELECTION}
_SHARD_KEYS_V1 = {K_PATH, K_SIZE, K_NUM_ROWS, K_CONTENT_HASH}
_ROOT_KEYS = {1: _ROOT_KEYS_V1, **{v: _ROOT_KEYS_V1 | {K_DERIVED_HASH} for v in (2, 3, 4)}}
_SHARD_KEYS = {1: _SHARD_KEYS_V1, **{v: _SHARD_KEYS_V1 | {K_LAYOUT, K_ETAG} for v in (2, 3, 4)}}
#: Since schema 3 a shard's layout object has a ``digests`` key (null, or one per unit: .unit_digests).
_LAYOUT_DIGESTS_SINCE = 3
#: Since schema 4 it has a ``meta`` key (null, or the metadata span an open reads and its digest).
_LAYOUT_META_SINCE = 4


_PIN_FIX = "re-create the manifest with rd.pin(directory)"


def _cache_fix(where: str) -> str:
    return (
        f"delete {where} (a manifest rd keeps in its cache), then open the folder again "
        "(rd.ArrowShards pins it anew) or pin it with rd.pin(directory, save='cache')"
    )


def _manifest_error(
    root: Path | None, what: str, value: Any, expected: str, where: str | None = None
) -> DatasetIntegrityError:
    """``where``: the manifest file when it is not ``root/.rd-manifest.json`` (a cached one)."""
    if where is None:
        where = str(Path(root) / MANIFEST_NAME) if root is not None else "manifest"
        fix = _PIN_FIX
    else:
        fix = _cache_fix(where)
    return DatasetIntegrityError(f"{where}: " + describe(what, value, expected, fix))


def _write_error(param: str, where: Any, exc: OSError, fix: str) -> ConfigError:
    """A manifest that could not be written (no space, read-only, a broken cache directory)."""
    return ConfigError(
        describe(
            param,
            str(where),
            f"a location rd can write its manifest to ({type(exc).__name__}: {exc.strerror or exc})",
            fix,
        )
    )


def _check_int(root: Path | None, key: str, value: Any) -> int:
    if type(value) is not int or value < 0:
        raise _manifest_error(root, key, value, "a non-negative integer")
    return value


@dataclass(frozen=True)
class ShardInfo:
    """One pinned shard: path relative to the root (POSIX), byte size, rows, content hash; and,
    derived, not part of the identity (None where unknown): its unit
    :class:`~resumable_data.sources.layout.ShardLayout` and the store's ETag of the bytes that
    were hashed (:attr:`FileStat.etag <resumable_data.sources.store.FileStat.etag>`)."""

    path: str
    size: int
    num_rows: int
    content_hash: str | None
    layout: ShardLayout | None = field(default=None, compare=False, repr=False)
    etag: str | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The shard as a manifest entry: path, size, row count, content hash, layout and ETag."""
        return {
            K_PATH: self.path,
            K_SIZE: self.size,
            K_NUM_ROWS: self.num_rows,
            K_CONTENT_HASH: self.content_hash,
            K_LAYOUT: self.layout.to_dict() if self.layout is not None else None,
            K_ETAG: self.etag,
        }

    @classmethod
    def from_dict(cls, d: Any, *, root: Path | None = None, schema_version: int = MANIFEST_SCHEMA_VERSION) -> ShardInfo:
        """The shard a manifest entry ``d`` describes (``root``: the dataset directory, named in errors;
        ``schema_version``: the manifest's, which decides the keys).

        Raises :class:`rd.DatasetIntegrityError` on other keys, a path outside the root, a malformed
        content hash, or a size or row count that is not a non-negative integer."""
        keys = _SHARD_KEYS[schema_version]
        if not isinstance(d, dict) or set(d) != keys:
            raise _manifest_error(root, "shards[i]", d, f"an object with keys {sorted(keys)}")
        path = d[K_PATH]
        if not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/"):
            raise _manifest_error(root, "shards[i].path", path, "a relative POSIX path inside the root")
        ch = d[K_CONTENT_HASH]
        if ch is not None and (not isinstance(ch, str) or len(ch) != 32):
            raise _manifest_error(
                root, f"shards[{path}].content_hash", ch, "null or a 32-character xxh3-128 hex digest"
            )
        size = _check_int(root, f"shards[{path}].size", d[K_SIZE])
        num_rows = _check_int(root, f"shards[{path}].num_rows", d[K_NUM_ROWS])
        layout = None
        if d.get(K_LAYOUT) is not None:
            try:
                layout = ShardLayout.from_dict(
                    d[K_LAYOUT],
                    size,
                    digests=schema_version >= _LAYOUT_DIGESTS_SINCE,
                    meta=schema_version >= _LAYOUT_META_SINCE,
                )
            except LayoutMismatch as exc:
                raise _manifest_error(root, f"shards[{path}].layout", d[K_LAYOUT], str(exc)) from None
        etag = d.get(K_ETAG)
        if etag is not None and (not isinstance(etag, str) or not etag or len(etag) > 1024):
            raise _manifest_error(root, f"shards[{path}].etag", etag, "null or the store's ETag string")
        return cls(path=path, size=size, num_rows=num_rows, content_hash=ch, layout=layout, etag=etag)


def compute_hash(body: dict[str, Any]) -> str:
    """xxh3-128 hex of the canonical JSON of ``body``'s identity fields: the manifest as schema 1
    wrote it (without its ``hash`` key) plus the optional ``lineage``, so layouts (schema 2) never
    change a version's hash."""
    payload = {k: v for k, v in body.items() if (k in _ROOT_KEYS_V1 or k == K_LINEAGE) and k != K_HASH}
    payload[K_SCHEMA_VERSION] = IDENTITY_SCHEMA_VERSION
    shards = payload.get(K_SHARDS)
    if isinstance(shards, list):
        payload[K_SHARDS] = [
            {k: v for k, v in sh.items() if k in _SHARD_KEYS_V1} if isinstance(sh, dict) else sh for sh in shards
        ]
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return xxhash.xxh3_128_hexdigest(text.encode("utf-8"))


def compute_derived_hash(shards: list[dict[str, Any]]) -> str:
    """xxh3-128 hex of the canonical JSON of every shard's derived fields (layout, ETag): what the
    manifest's ``derived_hash`` holds (schema 2), so a hand-edited layout is refused at load."""
    payload = [[sh.get(K_LAYOUT), sh.get(K_ETAG)] for sh in shards]
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return xxhash.xxh3_128_hexdigest(text.encode("utf-8"))


def lineage_text(lineage: Any) -> str:
    """The canonical JSON text of a lineage object (a dict of JSON values); ConfigError otherwise."""
    try:
        if not isinstance(lineage, dict):
            raise TypeError(type(lineage).__name__)
        return json.dumps(lineage, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            describe(
                "lineage",
                repr(lineage)[:200],
                "a dict of JSON values",
                f"pass plain str/int/float/bool/None/list/dict values ({exc})",
            )
        ) from None


def _checked_lineage(root: Path | None, lineage: Any) -> str:
    try:
        return lineage_text(lineage)
    except ConfigError:
        raise _manifest_error(root, K_LINEAGE, repr(lineage)[:200], "a JSON object") from None


@dataclass(frozen=True)
class DatasetVersion:
    """A pinned dataset: ordered shards, canonical schema text, record count and identity hash.

    ``root`` is the directory the manifest lives in; it is not part of ``hash``. ``filesystem``
    (a ``pyarrow.fs.FileSystem``, None for local files) is where ``root`` lives; not hashed either.
    """

    shards: tuple[ShardInfo, ...]
    schema: str
    num_records: int
    hash: str
    hash_mode: HashMode
    selection: Selection = Selection.DIRECTORY
    root: Path | None = field(default=None, compare=False)
    filesystem: Any = field(default=None, compare=False, repr=False)
    #: canonical JSON text of the ``lineage`` object, or None (see :attr:`lineage`)
    lineage_json: str | None = None

    @property
    def lineage(self) -> dict[str, Any] | None:
        """What produced these shards (written by ``rd.prepare``), or None."""
        return None if self.lineage_json is None else json.loads(self.lineage_json)

    # -- serialization ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The manifest as a JSON-ready dict (``root`` excluded)."""
        return {
            K_FORMAT: MANIFEST_FORMAT,
            K_SCHEMA_VERSION: MANIFEST_SCHEMA_VERSION,
            K_HASH_MODE: self.hash_mode.value,
            K_SELECTION: self.selection.value,
            K_SCHEMA: self.schema,
            K_NUM_RECORDS: self.num_records,
            K_SHARDS: [s.to_dict() for s in self.shards],
            K_HASH: self.hash,
            K_DERIVED_HASH: compute_derived_hash([s.to_dict() for s in self.shards]),
            **({} if self.lineage_json is None else {K_LINEAGE: self.lineage}),
        }

    @classmethod
    def from_dict(cls, d: Any, *, root: str | os.PathLike | None = None, source: str | None = None) -> DatasetVersion:
        """Validate and build; a malformed or tampered manifest raises DatasetIntegrityError
        (naming ``source``, the manifest file, when it is not ``root/.rd-manifest.json``)."""
        root = Path(root) if root is not None else None
        if source is None:
            return cls._from_dict(d, root=root)
        try:  # errors name the cached file (its name is MANIFEST_NAME too) and the cache's fix
            return replace(cls._from_dict(d, root=Path(source).parent), root=root)
        except DatasetIntegrityError as exc:
            raise DatasetIntegrityError(str(exc).replace(_PIN_FIX, _cache_fix(source))) from None

    @classmethod
    def _from_dict(cls, d: Any, *, root: Path | None) -> DatasetVersion:
        if not isinstance(d, dict):
            raise _manifest_error(root, "manifest", type(d).__name__, "a JSON object")
        if d.get(K_FORMAT) != MANIFEST_FORMAT:
            raise _manifest_error(root, K_FORMAT, d.get(K_FORMAT), f"{MANIFEST_FORMAT!r}")
        saved = d.get(K_SCHEMA_VERSION)
        if saved not in MANIFEST_READ_VERSIONS or type(saved) is not int:
            raise _manifest_error(
                root,
                K_SCHEMA_VERSION,
                saved,
                f"{MANIFEST_SCHEMA_VERSION} (saved {saved!r}, this version reads "
                f"{', '.join(map(str, MANIFEST_READ_VERSIONS))})",
            )
        if set(d) - {K_LINEAGE} != _ROOT_KEYS[saved]:
            raise _manifest_error(
                root, "manifest keys", sorted(d), f"exactly {sorted(_ROOT_KEYS[saved])} (and optionally {K_LINEAGE!r})"
            )
        lineage = d.get(K_LINEAGE)
        if K_LINEAGE in d and not isinstance(lineage, dict):
            raise _manifest_error(root, K_LINEAGE, lineage, "a JSON object")
        try:
            hash_mode = HashMode(d[K_HASH_MODE])
            selection = Selection(d[K_SELECTION])
        except ValueError as exc:
            raise _manifest_error(
                root, "hash_mode/selection", (d[K_HASH_MODE], d[K_SELECTION]), f"known values ({exc})"
            ) from None
        if not isinstance(d[K_SCHEMA], str):
            raise _manifest_error(root, K_SCHEMA, d[K_SCHEMA], "the canonical schema text")
        if not isinstance(d[K_SHARDS], list):
            raise _manifest_error(root, K_SHARDS, d[K_SHARDS], "a list of shard objects")
        shards = tuple(ShardInfo.from_dict(s, root=root, schema_version=saved) for s in d[K_SHARDS])
        if len({s.path for s in shards}) != len(shards):
            raise _manifest_error(root, K_SHARDS, [s.path for s in shards], "unique shard paths")
        for s in shards:
            if hash_mode is HashMode.ETAG and (s.etag is None or s.content_hash != etag_digest(s.etag)):
                raise _manifest_error(
                    root,
                    f"shards[{s.path}].etag",
                    s.etag,
                    "the ETag whose digest is the shard's content_hash (hash_mode='etag')",
                )
            if (s.content_hash is None) != (hash_mode is HashMode.SIZE):
                raise _manifest_error(
                    root,
                    f"shards[{s.path}].content_hash",
                    s.content_hash,
                    f"{'null' if hash_mode is HashMode.SIZE else 'a digest'} in hash_mode={hash_mode.value!r}",
                )
        num_records = _check_int(root, K_NUM_RECORDS, d[K_NUM_RECORDS])
        if num_records != sum(s.num_rows for s in shards):
            raise _manifest_error(
                root, K_NUM_RECORDS, num_records, f"the sum of shard rows ({sum(s.num_rows for s in shards)})"
            )
        stored = d[K_HASH]
        recomputed = compute_hash(d)
        if stored != recomputed:
            raise _manifest_error(
                root,
                K_HASH,
                stored,
                f"{recomputed!r}, the hash of the manifest's fields (the manifest was edited by hand or damaged)",
            )
        if saved >= 2:
            want = compute_derived_hash(d[K_SHARDS])
            if d[K_DERIVED_HASH] != want:
                raise _manifest_error(
                    root,
                    K_DERIVED_HASH,
                    d[K_DERIVED_HASH],
                    f"{want!r}, the hash of the shards' layouts and ETags (the manifest was edited by hand or damaged)",
                )
        for s in shards:
            if s.layout is not None and s.layout.num_rows != s.num_rows:
                raise _manifest_error(
                    root, f"shards[{s.path}].layout", f"{s.layout.num_rows} rows", f"the shard's {s.num_rows} rows"
                )
        return cls(
            shards=shards,
            schema=d[K_SCHEMA],
            num_records=num_records,
            hash=stored,
            hash_mode=hash_mode,
            selection=selection,
            root=root,
            lineage_json=None if lineage is None else _checked_lineage(root, lineage),
        )

    @classmethod
    def build(
        cls,
        shards: list[ShardInfo],
        schema: str,
        hash_mode: HashMode,
        selection: Selection,
        root: Path | None,
        filesystem: Any = None,
        lineage: dict[str, Any] | None = None,
    ) -> DatasetVersion:
        """A version from its fields, computing ``num_records`` and ``hash``."""
        shards_t = tuple(shards)
        num = sum(s.num_rows for s in shards_t)
        text = None if lineage is None else lineage_text(lineage)
        proto = cls(
            shards=shards_t,
            schema=schema,
            num_records=num,
            hash="",
            hash_mode=hash_mode,
            selection=selection,
            root=root,
            lineage_json=text,
        )
        return cls(
            shards=shards_t,
            schema=schema,
            num_records=num,
            hash=compute_hash(proto.to_dict()),
            hash_mode=hash_mode,
            selection=selection,
            root=root,
            filesystem=filesystem,
            lineage_json=text,
        )

    @classmethod
    def load(
        cls, directory: str | os.PathLike, filesystem: Any = None, *, files: list[str] | None = None
    ) -> DatasetVersion:
        """Read and validate the manifest of ``directory`` (on ``filesystem`` when given):
        ``.rd-manifest.json`` in it, else the legacy ``rd-manifest.json``, else the one the cache
        keeps for it (auto-pinned folders, pinned file lists ``files``; see :mod:`.manifests`)."""
        found = cls.locate(directory, filesystem, files=files)
        if found is None:
            raise ConfigError(
                describe(
                    "directory",
                    str(directory),
                    f"a directory (or prefix) holding {MANIFEST_NAME} (or pinned into the cache)",
                    "pin it first with rd.pin(directory) (remote: rd.pin(path, filesystem=...))",
                )
            )
        return found

    @classmethod
    def locate(
        cls,
        directory: str | os.PathLike,
        filesystem: Any = None,
        *,
        files: list[str] | None = None,
        store: ShardStore | None = None,
    ) -> DatasetVersion | None:
        """Like :meth:`load`, but None when no manifest exists anywhere. ``store``: read through it
        (a source's store, with the source's ``retries=``) instead of ``filesystem``'s default one."""
        store = store if store is not None else store_for(filesystem)
        root = Path(directory) if store.local else Path(store.resolve(directory))
        data, source = None, None  # source: the cached manifest, named in errors
        if files is None:
            for name in MANIFEST_NAMES:  # one small read per candidate until found
                where = join(root.as_posix(), name)
                data = store.read_small(where, MANIFEST_MAX_BYTES)
                if data is not None:
                    break
        if data is None:
            rel = files
            if rel is None:
                if not store.is_dir(root.as_posix()):
                    return None
                rel = discover_shards(root.as_posix(), store)
            where = cached_manifest(store, store.resolve(root.as_posix()), rel).as_posix()
            source = where
            data = LOCAL.read_small(where, MANIFEST_MAX_BYTES)
        if data is None:
            return None
        try:
            d = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise _manifest_error(
                Path(where).parent, "manifest", str(exc) or "nested too deeply", "valid UTF-8 JSON", where=source
            ) from None
        if store.local:
            return cls.from_dict(d, root=root.resolve(), source=source)
        return replace(cls.from_dict(d, root=root, source=source), filesystem=store.filesystem)

    def save(
        self, directory: str | os.PathLike | None = None, filesystem: Any = None, *, to_cache: bool = False
    ) -> Path:
        """Write the manifest atomically (local: tmp file, fsync, ``os.replace``, directory fsync;
        on a remote ``filesystem``: one whole-object upload); returns its path.

        ``directory/.rd-manifest.json`` by default; ``to_cache=True`` writes it into the cache
        instead (``cache_dir()/manifests/<key>``, see :mod:`.manifests`), never into the folder."""
        root = Path(directory) if directory is not None else self.root
        if root is None:
            raise ConfigError(
                describe("directory", None, "a directory to write the manifest to", "pass save(directory)")
            )
        store = store_for(filesystem if filesystem is not None else self.filesystem)
        text = (json.dumps(self.to_dict(), sort_keys=True, indent=1) + "\n").encode("utf-8")
        if to_cache:
            path = cached_manifest(store, store.resolve(root.as_posix()), [s.path for s in self.shards])
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                LOCAL.write_atomic(path, text)
            except OSError as exc:
                raise _write_error(
                    "RD_CACHE_DIR",
                    cache_dir(),
                    exc,
                    (
                        f"free space on the disk holding {cache_dir()} (or remove what blocks {path}), or "
                        "set RD_CACHE_DIR to a writable directory with free space; or pin into the data folder "
                        "with rd.pin(directory), or read it unpinned with rd.ArrowShards(..., unpinned='allow')"
                    ),
                ) from None
            return path
        path = root / MANIFEST_NAME
        try:
            store.write_atomic(join(root.as_posix(), MANIFEST_NAME), text)
        except OSError as exc:
            denied = isinstance(exc, PermissionError) or exc.errno == errno.EROFS
            raise _write_error(
                "directory",
                root,
                exc,
                (
                    "pin into the cache instead: rd.pin(directory, save='cache') (rd.ArrowShards(directory) "
                    "does that by itself)"
                    if denied
                    else f"free space on the disk holding {root} (or remove what blocks {path}), or pin into the "
                    "cache instead: rd.pin(directory, save='cache')"
                ),
            ) from None
        return path

    @property
    def store(self) -> ShardStore:
        """The :class:`~resumable_data.sources.store.ShardStore` ``root`` lives on."""
        return store_for(self.filesystem)

    # -- verification (.version_verify) ---------------------------------------------------
    def verify(self, level: VerifyLevel | str = VerifyLevel.SIZE) -> None:
        """Compare the files under ``root`` with the manifest; one error lists every difference
        (:func:`~.version_verify.verify_version`).

        ``size``: every listed shard exists with the pinned byte size, row count and schema, and
        (for a discovered directory) no unlisted shard file is present. ``content``: also the
        xxh3-128 of every shard's bytes (requires ``hash_mode="content"``).
        """
        verify_version(self, level)
