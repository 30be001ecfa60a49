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
(local files or a ``pyarrow.fs.FileSystem``): one code path for both.

Guarantee: same bytes, same hash; a changed byte (``content`` mode), row count, size, shard,
shard order or schema gives another hash. :meth:`DatasetVersion.load` recomputes the hash from
the fields and refuses a manifest whose stored hash does not match (a hand-edited manifest).
:meth:`DatasetVersion.verify` compares the files on disk with the manifest and raises one
:class:`~resumable_data.DatasetIntegrityError` that lists every difference.

Cost: loading is one small JSON read (at most :data:`MANIFEST_MAX_BYTES`; a larger file is
refused). Saving is one atomic write (local: tmp file, fsync, rename, directory fsync; remote: one
whole-object upload). ``verify("size")`` stats every shard and reads its
metadata (row count, schema); ``verify("content")`` also re-hashes every byte; ``verify("cached")``
re-hashes only shards whose (path, size, mtime, ctime, inode) changed since they last verified
(:mod:`.verified`).
"""

from __future__ import annotations

import enum
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import xxhash

from resumable_data._schema import coerce_enum
from resumable_data.errors import ConfigError, DatasetIntegrityError, describe
from resumable_data.sources import verified
from resumable_data.sources.files import (
    MANIFEST_NAME,
    canonical_schema,
    discover_shards,
    read_shard_meta,
)
from resumable_data.sources.manifests import cached_manifest, folder_manifest
from resumable_data.sources.store import LOCAL, ShardStore, join, store_for

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_MAX_BYTES",
    "MANIFEST_SCHEMA_VERSION",
    "DatasetVersion",
    "HashMode",
    "Selection",
    "ShardInfo",
    "VerifyLevel",
]

MANIFEST_FORMAT = "resumable_data.dataset_version"
MANIFEST_SCHEMA_VERSION = 1
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
#: Optional: what produced the shards (``rd.prepare``: input version, function fingerprint,
#: settings, package version). Hashed like every other field; absent from manifests written
#: without it, whose hash is therefore unchanged.
K_LINEAGE = "lineage"

_ROOT_KEYS = {K_FORMAT, K_SCHEMA_VERSION, K_SHARDS, K_SCHEMA, K_NUM_RECORDS, K_HASH, K_HASH_MODE,
              K_SELECTION}
_SHARD_KEYS = {K_PATH, K_SIZE, K_NUM_ROWS, K_CONTENT_HASH}


class HashMode(str, enum.Enum):
    """What the version hash covers: file ``content`` (xxh3-128 of bytes) or only ``size``."""

    CONTENT = "content"
    SIZE = "size"


class VerifyLevel(str, enum.Enum):
    """How hard :meth:`DatasetVersion.verify` looks: ``size`` (stat + metadata), ``cached`` (also
    the content hash, verified once per file state and remembered: :mod:`.verified`; the default
    of :class:`~resumable_data.ArrowShards`) or ``content`` (re-hash every byte every time)."""

    SIZE = "size"
    CACHED = "cached"
    CONTENT = "content"


class Selection(str, enum.Enum):
    """Where the shard list came from: a discovered ``directory`` or an explicit ``files`` list.

    Only a discovered directory can have "extra" shard files: with an explicit list, other shard
    files next to the listed ones are not part of the dataset.
    """

    DIRECTORY = "directory"
    FILES = "files"


def _manifest_error(root: Path | None, what: str, value: Any, expected: str) -> DatasetIntegrityError:
    where = str(Path(root) / MANIFEST_NAME) if root is not None else "manifest"
    return DatasetIntegrityError(
        f"{where}: "
        + describe(what, value, expected, "re-create the manifest with rd.pin(directory)")
    )


def _check_int(root: Path | None, key: str, value: Any) -> int:
    if type(value) is not int or value < 0:
        raise _manifest_error(root, key, value, "a non-negative integer")
    return value


@dataclass(frozen=True)
class ShardInfo:
    """One pinned shard: path relative to the root (POSIX), byte size, rows, content hash."""

    path: str
    size: int
    num_rows: int
    content_hash: str | None

    def to_dict(self) -> dict[str, Any]:
        return {K_PATH: self.path, K_SIZE: self.size, K_NUM_ROWS: self.num_rows,
                K_CONTENT_HASH: self.content_hash}

    @classmethod
    def from_dict(cls, d: Any, *, root: Path | None = None) -> ShardInfo:
        if not isinstance(d, dict) or set(d) != _SHARD_KEYS:
            raise _manifest_error(root, "shards[i]", d, f"an object with keys {sorted(_SHARD_KEYS)}")
        path = d[K_PATH]
        if not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/"):
            raise _manifest_error(root, "shards[i].path", path, "a relative POSIX path inside the root")
        ch = d[K_CONTENT_HASH]
        if ch is not None and (not isinstance(ch, str) or len(ch) != 32):
            raise _manifest_error(root, f"shards[{path}].content_hash", ch,
                                  "null or a 32-character xxh3-128 hex digest")
        return cls(path=path, size=_check_int(root, f"shards[{path}].size", d[K_SIZE]),
                   num_rows=_check_int(root, f"shards[{path}].num_rows", d[K_NUM_ROWS]),
                   content_hash=ch)


def compute_hash(body: dict[str, Any]) -> str:
    """xxh3-128 hex of the canonical JSON of ``body`` (without its ``hash`` key)."""
    payload = {k: v for k, v in body.items() if k != K_HASH}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return xxhash.xxh3_128_hexdigest(text.encode("utf-8"))


def lineage_text(lineage: Any) -> str:
    """The canonical JSON text of a lineage object (a dict of JSON values); ConfigError otherwise."""
    try:
        if not isinstance(lineage, dict):
            raise TypeError(type(lineage).__name__)
        return json.dumps(lineage, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                          allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(describe("lineage", repr(lineage)[:200], "a dict of JSON values",
                                   f"pass plain str/int/float/bool/None/list/dict values ({exc})")) from None


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
            **({} if self.lineage_json is None else {K_LINEAGE: self.lineage}),
        }

    @classmethod
    def from_dict(cls, d: Any, *, root: str | os.PathLike | None = None) -> DatasetVersion:
        """Validate and build; a malformed or tampered manifest raises DatasetIntegrityError."""
        root = Path(root) if root is not None else None
        if not isinstance(d, dict):
            raise _manifest_error(root, "manifest", type(d).__name__, "a JSON object")
        if d.get(K_FORMAT) != MANIFEST_FORMAT:
            raise _manifest_error(root, K_FORMAT, d.get(K_FORMAT), f"{MANIFEST_FORMAT!r}")
        saved = d.get(K_SCHEMA_VERSION)
        if saved != MANIFEST_SCHEMA_VERSION or type(saved) is not int:
            raise _manifest_error(
                root, K_SCHEMA_VERSION, saved,
                f"{MANIFEST_SCHEMA_VERSION} (saved {saved!r}, this version reads "
                f"{MANIFEST_SCHEMA_VERSION})",
            )
        if set(d) - {K_LINEAGE} != _ROOT_KEYS:
            raise _manifest_error(root, "manifest keys", sorted(d),
                                  f"exactly {sorted(_ROOT_KEYS)} (and optionally {K_LINEAGE!r})")
        lineage = d.get(K_LINEAGE)
        if K_LINEAGE in d and not isinstance(lineage, dict):
            raise _manifest_error(root, K_LINEAGE, lineage, "a JSON object")
        try:
            hash_mode = HashMode(d[K_HASH_MODE])
            selection = Selection(d[K_SELECTION])
        except ValueError as exc:
            raise _manifest_error(root, "hash_mode/selection", (d[K_HASH_MODE], d[K_SELECTION]),
                                  f"known values ({exc})") from None
        if not isinstance(d[K_SCHEMA], str):
            raise _manifest_error(root, K_SCHEMA, d[K_SCHEMA], "the canonical schema text")
        if not isinstance(d[K_SHARDS], list):
            raise _manifest_error(root, K_SHARDS, d[K_SHARDS], "a list of shard objects")
        shards = tuple(ShardInfo.from_dict(s, root=root) for s in d[K_SHARDS])
        if len({s.path for s in shards}) != len(shards):
            raise _manifest_error(root, K_SHARDS, [s.path for s in shards], "unique shard paths")
        for s in shards:
            if (s.content_hash is None) != (hash_mode is HashMode.SIZE):
                raise _manifest_error(root, f"shards[{s.path}].content_hash", s.content_hash,
                                      f"{'null' if hash_mode is HashMode.SIZE else 'a digest'} "
                                      f"in hash_mode={hash_mode.value!r}")
        num_records = _check_int(root, K_NUM_RECORDS, d[K_NUM_RECORDS])
        if num_records != sum(s.num_rows for s in shards):
            raise _manifest_error(root, K_NUM_RECORDS, num_records,
                                  f"the sum of shard rows ({sum(s.num_rows for s in shards)})")
        stored = d[K_HASH]
        recomputed = compute_hash(d)
        if stored != recomputed:
            raise _manifest_error(root, K_HASH, stored,
                                  f"{recomputed!r}, the hash of the manifest's fields (the manifest "
                                  "was edited by hand or damaged)")
        return cls(shards=shards, schema=d[K_SCHEMA], num_records=num_records, hash=stored,
                   hash_mode=hash_mode, selection=selection, root=root,
                   lineage_json=None if lineage is None else _checked_lineage(root, lineage))

    @classmethod
    def build(cls, shards: list[ShardInfo], schema: str, hash_mode: HashMode,
              selection: Selection, root: Path | None, filesystem: Any = None,
              lineage: dict[str, Any] | None = None) -> DatasetVersion:
        """A version from its fields, computing ``num_records`` and ``hash``."""
        shards_t = tuple(shards)
        num = sum(s.num_rows for s in shards_t)
        text = None if lineage is None else lineage_text(lineage)
        proto = cls(shards=shards_t, schema=schema, num_records=num, hash="", hash_mode=hash_mode,
                    selection=selection, root=root, lineage_json=text)
        return cls(shards=shards_t, schema=schema, num_records=num,
                   hash=compute_hash(proto.to_dict()), hash_mode=hash_mode, selection=selection,
                   root=root, filesystem=filesystem, lineage_json=text)

    @classmethod
    def load(cls, directory: str | os.PathLike, filesystem: Any = None, *,
             files: list[str] | None = None) -> DatasetVersion:
        """Read and validate the manifest of ``directory`` (on ``filesystem`` when given):
        ``.rd-manifest.json`` in it, else the legacy ``rd-manifest.json``, else the one the cache
        keeps for it (auto-pinned folders, pinned file lists ``files``; see :mod:`.manifests`)."""
        found = cls.locate(directory, filesystem, files=files)
        if found is None:
            raise ConfigError(
                describe("directory", str(directory), f"a directory (or prefix) holding {MANIFEST_NAME} "
                         "(or pinned into the cache)",
                         "pin it first with rd.pin(directory) (remote: rd.pin(path, filesystem=...))")
            )
        return found

    @classmethod
    def locate(cls, directory: str | os.PathLike, filesystem: Any = None, *,
               files: list[str] | None = None) -> DatasetVersion | None:
        """Like :meth:`load`, but None when no manifest exists anywhere."""
        store = store_for(filesystem)
        root = Path(directory) if store.local else Path(store.resolve(directory))
        where = folder_manifest(store, root.as_posix()) if files is None else None
        reader = store
        if where is None:
            rel = files
            if rel is None:
                if not store.is_dir(root.as_posix()):
                    return None
                rel = discover_shards(root.as_posix(), store)
            cached = cached_manifest(store, store.resolve(root.as_posix()), rel)
            where, reader = cached.as_posix(), LOCAL
        data = reader.read_small(where, MANIFEST_MAX_BYTES)
        if data is None:
            return None
        try:
            d = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise _manifest_error(Path(where).parent, "manifest", str(exc) or "nested too deeply",
                                  "valid UTF-8 JSON") from None
        if store.local:
            return cls.from_dict(d, root=root.resolve())
        return replace(cls.from_dict(d, root=root), filesystem=store.filesystem)

    def save(self, directory: str | os.PathLike | None = None, filesystem: Any = None, *,
             to_cache: bool = False) -> Path:
        """Write the manifest atomically (local: tmp file, fsync, ``os.replace``, directory fsync;
        on a remote ``filesystem``: one whole-object upload); returns its path.

        ``directory/.rd-manifest.json`` by default; ``to_cache=True`` writes it into the cache
        instead (``cache_dir()/manifests/<key>``, see :mod:`.manifests`), never into the folder."""
        root = Path(directory) if directory is not None else self.root
        if root is None:
            raise ConfigError(describe("directory", None, "a directory to write the manifest to",
                                       "pass save(directory)"))
        store = store_for(filesystem if filesystem is not None else self.filesystem)
        text = (json.dumps(self.to_dict(), sort_keys=True, indent=1) + "\n").encode("utf-8")
        if to_cache:
            path = cached_manifest(store, store.resolve(root.as_posix()), [s.path for s in self.shards])
            path.parent.mkdir(parents=True, exist_ok=True)
            LOCAL.write_atomic(path, text)
            return path
        path = root / MANIFEST_NAME
        try:
            store.write_atomic(join(root.as_posix(), MANIFEST_NAME), text)
        except PermissionError as exc:
            raise ConfigError(describe("directory", str(root), "a folder rd may write its manifest into "
                                       f"({exc.strerror})", "pin into the cache instead: "
                                       "rd.pin(directory, save='cache') (rd.ArrowShards(directory) "
                                       "does that by itself)")) from None
        return path

    @property
    def store(self) -> ShardStore:
        """The :class:`~resumable_data.sources.store.ShardStore` ``root`` lives on."""
        return store_for(self.filesystem)

    # -- verification ----------------------------------------------------------------------
    def verify(self, level: VerifyLevel | str = VerifyLevel.SIZE) -> None:
        """Compare the files under ``root`` with the manifest; one error lists every difference.

        ``size``: every listed shard exists with the pinned byte size, row count and schema, and
        (for a discovered directory) no unlisted shard file is present. ``content``: also the
        xxh3-128 of every shard's bytes (requires ``hash_mode="content"``).
        """
        level = coerce_enum(level, VerifyLevel, "level")
        if self.root is None:
            raise ConfigError(describe("root", None, "the directory this version was loaded from",
                                       "use DatasetVersion.load(directory) or rd.pin(directory)"))
        if level is VerifyLevel.CACHED and self.hash_mode is HashMode.SIZE:
            level = VerifyLevel.SIZE  # no digest to compare: sizes, rows and schema only
        if level is VerifyLevel.CONTENT and self.hash_mode is HashMode.SIZE:
            raise ConfigError(
                describe("level", level.value, "'size' for a version pinned with hash='size'",
                         "verify(level='size'), or re-pin with rd.pin(directory, hash='content')")
            )
        problems: list[str] = []
        store = self.store
        root = self.root.as_posix()
        for s in self.shards:
            p = join(root, s.path)
            st = store.stat(p)
            if st is None:
                problems.append(f"shard {s.path!r}: missing file")
                continue
            if st.size != s.size:
                problems.append(f"shard {s.path!r}: size {st.size} bytes on disk, pinned {s.size}")
                continue
            try:
                meta = read_shard_meta(p, store)
            except ConfigError as exc:
                problems.append(f"shard {s.path!r}: unreadable ({exc})")
                continue
            if meta.num_rows != s.num_rows:
                problems.append(f"shard {s.path!r}: rows {meta.num_rows} on disk, pinned {s.num_rows}")
            got_schema = canonical_schema(meta.schema)
            if got_schema != self.schema:
                problems.append(f"shard {s.path!r}: schema differs from the pinned schema "
                                f"(on disk: {got_schema!r}; pinned: {self.schema!r})")
            if level is not VerifyLevel.SIZE:
                key = verified.file_key(store, p)  # taken before hashing (see .verified)
                if level is VerifyLevel.CACHED and verified.is_verified(key, s.content_hash):
                    continue
                h = store.hash_file(p)
                if h == s.content_hash:
                    verified.remember(key, h)
                else:
                    problems.append(f"shard {s.path!r}: content hash {h} on disk, "
                                    f"pinned {s.content_hash}")
        if self.selection is Selection.DIRECTORY and store.is_dir(root):
            listed = {s.path for s in self.shards}
            for extra in discover_shards(root, store):
                if extra not in listed:
                    problems.append(f"shard {extra!r}: extra shard file not listed in the manifest")
        if problems:
            raise DatasetIntegrityError(
                f"dataset at {str(self.root)!r} (version {self.hash}) does not match its manifest "
                f"({len(problems)} difference(s), verify level={level.value!r}):\n  - "
                + "\n  - ".join(problems)
                + "\nfix: restore the original files, or re-pin deliberately with "
                "rd.pin(directory) (save='cache' keeps the folder untouched; a new version: resumed "
                "states will refuse it)"
            )
