"""Pinning: turn a directory (or list) of shard files into a :class:`DatasetVersion` on disk.

Algorithm: discover the shards (sorted relative POSIX paths) or take the explicit list (kept in
the given order, which is part of the version), read each shard's metadata (rows, schema), check
that all shards share one canonical schema, hash every shard's bytes with xxh3-128 (streamed in
8 MiB chunks, shards in a thread pool: xxhash releases the GIL on large buffers) unless
``hash="size"``, then write ``rd-manifest.json`` atomically next to the shards (in the directory,
or in the deepest common directory of an explicit list).

Guarantee: pinning the same bytes twice gives the same hash; see
:mod:`resumable_data.sources.version` for what changes it.

Cost: one read of every byte in ``content`` mode (disk-bound), metadata only in ``size`` mode. A
tqdm bar (bytes, stderr) appears only if hashing takes more than half a second.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from resumable_data.errors import ConfigError, describe
from resumable_data.sources.files import (
    MANIFEST_NAME,
    SHARD_SUFFIXES,
    canonical_schema,
    discover_shards,
    hash_file,
    read_shard_meta,
)
from resumable_data.sources import remote as _remote
from resumable_data.sources.version import (
    DatasetVersion,
    HashMode,
    Selection,
    ShardInfo,
    coerce_enum,
)

__all__ = ["pin", "resolve_files"]


def resolve_files(files: Sequence[str | os.PathLike]) -> tuple[Path, list[str]]:
    """(root, relative POSIX paths) for an explicit list of shard files, order kept."""
    if len(files) == 0:
        raise ConfigError(describe("path", list(files), "a non-empty list of shard files",
                                   "pass at least one .arrow/.ipc/.feather/.parquet file"))
    paths = []
    for f in files:
        p = Path(f).resolve()
        if not p.is_file() or not p.name.endswith(SHARD_SUFFIXES):
            raise ConfigError(describe("path", str(f), f"an existing shard file ({', '.join(SHARD_SUFFIXES)})",
                                       "check the file list"))
        paths.append(p)
    root = Path(os.path.commonpath([str(p.parent) for p in paths]))
    rel = [p.relative_to(root).as_posix() for p in paths]
    if len(set(rel)) != len(rel):
        raise ConfigError(describe("path", rel, "each shard file listed once", "remove the duplicates"))
    return root, rel


def pin(path: str | os.PathLike | Sequence[str | os.PathLike], *,
        hash: HashMode | str = HashMode.CONTENT, max_workers: int | None = None,
        filesystem: Any = None, save: bool = True) -> DatasetVersion:
    """Pin the shards at ``path`` (a directory, searched recursively, or a list of files).

    Writes ``rd-manifest.json`` atomically next to them and returns the :class:`DatasetVersion`.
    ``hash="content"`` (default) hashes every byte; ``hash="size"`` records sizes, rows and the
    schema only (cheaper, weaker: an in-place edit that keeps the size goes unnoticed).
    ``filesystem``: a ``pyarrow.fs.FileSystem`` the paths live on (e.g. S3; the bytes are streamed
    through it). ``save=False`` keeps the manifest in memory only (read-only storage).
    """
    mode = coerce_enum(HashMode, "hash", hash)
    fs = _remote.normalize_filesystem(filesystem)
    if fs is not None:
        return _pin_remote(fs, path, mode, max_workers, save)
    if isinstance(path, (str, os.PathLike)):
        root = Path(path).resolve()
        rel = discover_shards(root)
        selection = Selection.DIRECTORY
        if not rel:
            raise ConfigError(describe("path", str(path), "a directory with at least one shard file "
                                       f"({', '.join(SHARD_SUFFIXES)})",
                                       "write shards first (e.g. rd.write_arrow_shards)"))
    else:
        root, rel = resolve_files(list(path))
        selection = Selection.FILES

    metas = [read_shard_meta(root / r) for r in rel]
    schema = canonical_schema(metas[0].schema)
    for r, m in zip(rel, metas):
        other = canonical_schema(m.schema)
        if other != schema:
            raise ConfigError(
                describe("shard", r, f"the schema of the first shard {rel[0]!r} ({schema!r})",
                         f"rewrite {r!r} with the common schema or pin it separately; "
                         f"it has {other!r}")
            )
    sizes = [(root / r).stat().st_size for r in rel]

    hashes: list[str | None] = [None] * len(rel)
    if mode is HashMode.CONTENT:
        workers = max_workers or min(len(rel), os.cpu_count() or 1, 8)
        with tqdm(total=sum(sizes), unit="B", unit_scale=True, unit_divisor=1024, delay=0.5,
                  desc="rd.pin", file=sys.stderr, leave=False) as bar:
            with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                hashes = list(pool.map(lambda r: hash_file(root / r, bar.update), rel))

    shards = [ShardInfo(path=r, size=sz, num_rows=m.num_rows, content_hash=h)
              for r, sz, m, h in zip(rel, sizes, metas, hashes)]
    version = DatasetVersion.build(shards, schema, mode, selection, root)
    if save:
        version.save(root)
        assert (root / MANIFEST_NAME).is_file()
    return version


def _pin_remote(fs: Any, path: Any, mode: HashMode, max_workers: int | None, save: bool) -> DatasetVersion:
    """:func:`pin` on a ``pyarrow.fs.FileSystem``: same checks, bytes streamed through ``fs``."""
    if isinstance(path, (str, os.PathLike)):
        root = _remote._p(path).rstrip("/")
        rel = _remote.discover_shards(fs, root)
        selection = Selection.DIRECTORY
        if not rel:
            raise ConfigError(describe("path", root, "a prefix with at least one shard file "
                                       f"({', '.join(SHARD_SUFFIXES)})", "upload shards first"))
    else:
        root, rel = _remote.resolve_files(fs, list(path))
        selection = Selection.FILES
    full = [f"{root}/{r}" if root else r for r in rel]
    workers = max(1, max_workers or min(len(rel), 8))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        metas = list(pool.map(lambda p: _remote.read_shard_meta(fs, p), full))
    schema = canonical_schema(metas[0].schema)
    for r, m in zip(rel, metas):
        if canonical_schema(m.schema) != schema:
            raise ConfigError(describe("shard", r, f"the schema of the first shard {rel[0]!r} ({schema!r})",
                                       f"rewrite {r!r} with the common schema or pin it separately"))
    sizes = [_remote.file_size(fs, p) for p in full]
    hashes: list[str | None] = [None] * len(rel)
    if mode is HashMode.CONTENT:
        with tqdm(total=sum(sizes), unit="B", unit_scale=True, unit_divisor=1024, delay=0.5,
                  desc="rd.pin", file=sys.stderr, leave=False) as bar:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                hashes = list(pool.map(lambda p: _remote.hash_file(fs, p, bar.update), full))
    shards = [ShardInfo(path=r, size=sz, num_rows=m.num_rows, content_hash=h)
              for r, sz, m, h in zip(rel, sizes, metas, hashes)]
    version = replace(DatasetVersion.build(shards, schema, mode, selection, Path(root)), filesystem=fs)
    if save:
        version.save()
    return version
