"""What a source argument names: the store, the pinned version (if any), the root and the shard paths.

Algorithm: the store is ``filesystem`` (a ``pyarrow.fs.FileSystem``, wrapped with ``retries``),
else a ``DatasetVersion``'s own filesystem, else the filesystem an ``s3://``-style URI names, else
the local store. Then, in order: a ``DatasetVersion`` is used as it is (it must have a root); a
directory's manifest (its own, or one in the cache: :mod:`..manifests`) is located, else its
shards are discovered (:mod:`..discovery`); a file or a list of files is resolved to a root and
relative paths, matched against a pinned parent folder's manifest or the cache. Shards without a
manifest follow the :class:`UnpinnedPolicy`: pinned now into the cache (never into the folder:
``PIN``, the default, says so through ``logging``), read without a version (``ALLOW``), or refused
(``ERROR``).

Guarantee: the shards come in manifest order (or discovery order when unpinned and allowed); a
hive-partitioned folder, an empty folder, a missing path or a bad URI is a
:class:`~resumable_data.ConfigError` naming the argument and the fix; nothing is written into the
user's folder.

Cost: one listing and one manifest read (remote: a few small reads); pinning an unpinned folder
hashes every byte once. A restore (an unpickled source) skips all of this: the pickled state holds
the root, the paths and the version (:mod:`.pickled`).
"""

from __future__ import annotations

import enum
import logging
import os
from dataclasses import replace
from typing import Any

import pyarrow as pa

from resumable_data._cache import cache_dir
from resumable_data.errors import ConfigError, describe
from resumable_data.sources.discovery import (
    MANIFEST_NAME,
    SHARD_SUFFIXES,
    discover_shards,
    file_list,
    refuse_hive_partitions,
    resolve_files,
)
from resumable_data.sources.pin import PinSave, pin
from resumable_data.sources.retry import Retries
from resumable_data.sources.store import ShardStore, join, store_for
from resumable_data.sources.version import DatasetVersion

__all__ = ["UnpinnedPolicy", "resolve_source", "source_store"]

_LOG = logging.getLogger("resumable_data.sources.arrow_shards")


class UnpinnedPolicy(str, enum.Enum):
    """What :class:`~resumable_data.sources.arrow_shards.ArrowShards` does with shards that have no manifest."""

    PIN = "pin"  # pin them now (content hash), report on stderr
    ALLOW = "allow"  # read them unpinned: no version, resume cannot verify
    ERROR = "error"  # refuse


def source_store(path_or_files: Any, filesystem: Any, retries: Retries) -> tuple[ShardStore, Any]:
    """(store, path_or_files with a URI's scheme and host taken off) for a source argument."""
    store = store_for(filesystem, retries)
    if isinstance(path_or_files, DatasetVersion) and store.filesystem is None:
        store = store_for(path_or_files.filesystem, retries)
    elif store.filesystem is None and isinstance(path_or_files, str) and "://" in path_or_files:
        import pyarrow.fs as pafs

        try:
            raw_fs, path_or_files = pafs.FileSystem.from_uri(path_or_files)
        except (pa.ArrowInvalid, OSError) as exc:
            raise ConfigError(
                describe(
                    "path_or_files",
                    path_or_files,
                    f"a filesystem URI ({exc})",
                    "fix the URI, or pass filesystem=pyarrow.fs.S3FileSystem(...) and a bucket/prefix path",
                )
            ) from None
        store = store_for(raw_fs, retries)
    return store, path_or_files


def resolve_source(store: ShardStore, src: Any, policy: UnpinnedPolicy) -> tuple[DatasetVersion | None, str, list[str]]:
    """(version or None, root, relative shard paths) of ``src`` on ``store``."""
    if isinstance(src, DatasetVersion):
        src_root = src.root
        if src_root is None:
            raise ConfigError(
                describe(
                    "path_or_files",
                    src.hash,
                    "a DatasetVersion with a root",
                    "use DatasetVersion.load(directory) or rd.pin(directory) "
                    "(remote: DatasetVersion.load(prefix, filesystem=...))",
                )
            )
        version = src if src.filesystem is store.filesystem else replace(src, filesystem=store.filesystem)
        return version, src_root.as_posix(), [s.path for s in version.shards]
    if isinstance(src, (str, os.PathLike)) and store.is_dir(src):
        root = store.resolve(src)
        located = DatasetVersion.locate(root, filesystem=store.filesystem, store=store)
        if located is not None:
            refuse_hive_partitions(root, [s.path for s in located.shards])
            return located, root, [s.path for s in located.shards]
        rel = discover_shards(root, store)
        refuse_hive_partitions(root, rel)
        if not rel:
            raise ConfigError(describe("path_or_files", str(src), *_no_shards(store, root)))
        pinned = _unpinned(store, root, policy, str(src))
        return pinned, root, ([s.path for s in pinned.shards] if pinned is not None else rel)
    if isinstance(src, (str, os.PathLike)):
        if store.stat(src) is None:
            if store.local:
                rel_note = "" if os.path.isabs(src) else f" (relative to the working directory {os.getcwd()!r})"
                expected = f"an existing directory or shard file; nothing exists there{rel_note}"
                fix = (
                    "pass the folder that holds the dataset's .arrow/.ipc/.feather/.parquet files (an absolute "
                    "path is safest); remote data: 's3://bucket/prefix' or a bucket/prefix with filesystem="
                )
            else:
                expected = "an existing bucket/prefix or object; the store holds nothing there"
                fix = (
                    "pass the bucket/prefix the shards were uploaded to (no 's3://' with filesystem=), and check "
                    "filesystem= (endpoint, region, credentials) points at that store"
                )
            raise ConfigError(describe("path_or_files", str(src), expected, fix))
        src = [src]
    root, rel = resolve_files(file_list(src), store)
    found = DatasetVersion.locate(root, filesystem=store.filesystem, store=store)  # a pinned parent folder
    if found is not None and [s.path for s in found.shards] == rel:
        return found, root, rel
    found = DatasetVersion.locate(root, filesystem=store.filesystem, files=rel, store=store)  # in the cache
    if found is not None:
        return found, root, rel
    return _unpinned(store, root, policy, rel, files=[join(root, r) for r in rel]), root, rel


def _no_shards(store: ShardStore, root: str) -> tuple[str, str]:
    """(expected, fix) for a folder that holds no shard: what it holds instead, and how to get shards."""
    others = [r for r in store.list_files(root) if not r.rsplit("/", 1)[-1].startswith(".")]
    suffixes = ", ".join(SHARD_SUFFIXES)
    write = "rd.write_arrow_shards(table, path), datasets' save_to_disk(path) or pandas' to_parquet"
    if not others:
        return (
            f"a directory (or prefix) with shard files ({suffixes}) or a manifest; it is empty",
            f"write the dataset into it first ({write}), or pass the folder that holds it",
        )
    shown = ", ".join(repr(r) for r in others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    return (
        f"a directory (or prefix) with shard files ({suffixes}) or a manifest; "
        f"it holds {len(others)} file(s), none a shard: {shown}",
        "pass the folder that holds the shards, or convert the files into shards (e.g. "
        "rd.write_arrow_shards(pyarrow.csv.read_csv(f), path) for CSV, or pandas' to_parquet)",
    )


def _unpinned(
    store: ShardStore, root: str, policy: UnpinnedPolicy, shown: Any, files: list[str] | None = None
) -> DatasetVersion | None:
    if policy is UnpinnedPolicy.ERROR:
        raise ConfigError(
            describe(
                "path_or_files",
                shown,
                f"pinned shards ({MANIFEST_NAME})",
                "run rd.pin(path) first, or pass unpinned='pin'/'allow'",
            )
        )
    if policy is UnpinnedPolicy.ALLOW:
        return None
    if files is None:
        what = root
    else:  # a file or a list of files: name them, not the folder that holds them (it is not pinned)
        names = ", ".join(repr(r) for r in shown[:3]) + (f" and {len(shown) - 3} more" if len(shown) > 3 else "")
        what = f"{names} in {root}"
    _LOG.warning(
        "resumable_data: %s is not pinned; pinning it now (content hash) into the cache (%s; the folder is "
        "not written). To read it unpinned instead, open it with rd.ArrowShards(path, unpinned='allow') "
        "(and pass that source where you passed the path).",
        what,
        cache_dir() / "manifests",
    )
    return pin(files if files is not None else root, filesystem=store.filesystem, save=PinSave.CACHE)
