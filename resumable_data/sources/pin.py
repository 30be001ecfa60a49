"""Pinning: turn a directory (or list) of shard files into a :class:`DatasetVersion` on disk.

Algorithm: discover the shards (sorted relative POSIX paths) or take the explicit list (kept in
the given order, which is part of the version), read each shard's metadata (rows, schema; shards
in a thread pool), check that all shards share one canonical schema, hash every shard's bytes with
xxh3-128 (streamed in :data:`~resumable_data._io.HASH_CHUNK_BYTES` chunks, shards in a thread
pool: xxhash releases the GIL on large buffers) unless ``hash="size"`` (with ``hash="content"``, in the
same read, each unit's digest: the xxh3-128 of its span in the shard's layout, kept in the layout, so
that a unit read by range is checked against it: :mod:`.unit_digests`; and the digest of the metadata
span a remote open reads, an IPC schema message or a Parquet footer, checked by every remote open:
:attr:`~.layout.ShardLayout.meta_digest`), then write the manifest
atomically: for a directory, ``<directory>/.rd-manifest.json`` (hidden, so pyarrow, pandas and
Hugging Face ``datasets`` keep reading the folder); for an explicit list of files, or with
``save="cache"``, into ``cache_dir()/manifests/<key>`` (never into the files' common parent; see
:mod:`.manifests`). Every shard whose digest was just computed is remembered as verified
(:mod:`.verified`), so the first open does not hash it again. One implementation for every store: local files and a
``pyarrow.fs.FileSystem`` differ only in the :class:`~resumable_data.sources.store.ShardStore`
the bytes are read and written through.

Guarantee: pinning the same bytes twice gives the same hash, wherever they are stored (a local
copy of remote shards pins to the same version); see :mod:`resumable_data.sources.version` for
what changes it.

Cost: one read of every byte in ``content`` mode (disk- or network-bound; remote objects 16 at a
time; the unit digests are one more in-memory xxh3 pass over those bytes, tens of GB/s), metadata only in ``size`` and ``etag`` mode (an ``etag`` pin of a remote dataset reads each
shard's footer or batch headers and one HEAD, never its bodies). A tqdm bar (bytes, stderr) appears only if hashing takes more than half a second.
"""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from resumable_data._schema import coerce_enum
from resumable_data.errors import ConfigError, describe
from resumable_data.sources import verified
from resumable_data.sources.files import (
    SHARD_SUFFIXES,
    canonical_schema,
    check_same_schema,
    discover_shards,
    file_list,
    read_shard_meta,
    refuse_hive_partitions,
    resolve_files,
)
from resumable_data.sources.layout import ShardLayout
from resumable_data.sources.store import FileStat, join, store_for
from resumable_data.sources.unit_digests import SpanHasher
from resumable_data.sources.version import DatasetVersion, HashMode, Selection, ShardInfo, etag_digest

__all__ = ["PinSave", "pin", "resolve_files"]


class PinSave(str, enum.Enum):
    """Where :func:`pin` writes the manifest (its ``save=`` option).

    ``auto`` (``save=True``, the default): ``<directory>/.rd-manifest.json`` for a directory, the
    cache for a list of files; ``folder``: into the directory (a list of files is refused: it is
    never pinned into its common parent); ``cache``: ``cache_dir()/manifests/<key>``, the data
    folder untouched; ``none`` (``save=False``): nowhere, the version is returned only.
    """

    AUTO = "auto"
    FOLDER = "folder"
    CACHE = "cache"
    NONE = "none"


def _coerce_save(save: PinSave | bool | str) -> PinSave:
    """``save=`` as a :class:`PinSave`: a member, its value, or a bool (True: AUTO, False: NONE)."""
    if isinstance(save, (bool, np.bool_)):
        return PinSave.AUTO if save else PinSave.NONE
    if isinstance(save, PinSave) or (isinstance(save, str) and save in PinSave._value2member_map_):
        return PinSave(save)
    raise ConfigError(
        describe(
            "save",
            save,
            "True, False, an rd.PinSave or one of " + ", ".join(repr(m.value) for m in PinSave),
            "pass save=rd.PinSave.CACHE (or save='cache') to keep the manifest out of the data folder",
        )
    )


_MAX_WORKERS = 8  # local: disk- and CPU-bound
_REMOTE_WORKERS = 16  # remote: requests wait on the network


def pin(
    path: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    hash: HashMode | str = HashMode.CONTENT,
    max_workers: int | None = None,
    filesystem: Any = None,
    save: PinSave | bool | str = PinSave.AUTO,
    lineage: dict[str, Any] | None = None,
) -> DatasetVersion:
    """Pin the shards at ``path`` (a directory, searched recursively, or a list of files).

    Writes the manifest and returns the :class:`DatasetVersion`. ``save`` (a :class:`PinSave`, its
    value, or a bool): ``AUTO`` (default; also ``True``) writes ``<directory>/.rd-manifest.json``
    for a directory (a read-only one: ConfigError naming ``save="cache"``) and the cache for a
    list of files; ``FOLDER`` / ``CACHE`` (``"folder"`` / ``"cache"``) choose; ``NONE`` (also
    ``False``) keeps the manifest in memory only.
    ``hash="content"`` (default) hashes every byte; ``hash="size"`` records sizes, rows and the
    schema only (cheaper, weaker: an in-place edit that keeps the size goes unnoticed);
    ``hash="etag"`` (object stores that give ETags) records each object's ETag and reads no shard
    body: the store is trusted to give other bytes another ETag (see :mod:`.verified`).
    ``filesystem``: a ``pyarrow.fs.FileSystem`` the paths live on (e.g. S3; the bytes are streamed
    through it); without it, a URI ``path`` (``s3://bucket/prefix``, with pyarrow's query options such as
    ``?endpoint_override=host:port&scheme=http``) names its filesystem, as for ``rd.ArrowShards``.
    ``lineage``: an optional dict of JSON values recorded in (and hashed with) the manifest: what
    produced the shards (``rd.prepare`` passes its input version and function fingerprint).
    """
    mode = coerce_enum(hash, HashMode, "hash")
    where = _coerce_save(save)
    if filesystem is None and isinstance(path, str) and "://" in path:  # as rd.ArrowShards reads it
        filesystem, path = _filesystem_of_uri(path)
    store = store_for(filesystem)
    if isinstance(path, (str, os.PathLike)):
        root = store.resolve(path)
        rel = discover_shards(root, store)
        refuse_hive_partitions(root, rel)
        selection = Selection.DIRECTORY
        if not rel:
            raise ConfigError(
                describe(
                    "path",
                    str(path),
                    f"a directory (or prefix) with at least one shard file ({', '.join(SHARD_SUFFIXES)})",
                    "write shards first (e.g. rd.write_arrow_shards), or upload them",
                )
            )
    else:
        root, rel = resolve_files(file_list(path), store)
        selection = Selection.FILES
        if where is PinSave.FOLDER:
            raise ConfigError(
                describe(
                    "save",
                    save,
                    "rd.PinSave.CACHE or AUTO ('cache' or True) for a list of files",
                    "a list of files is never pinned into its common parent; pass save=True, or pin their directory",
                )
            )
    full = [join(root, r) for r in rel]
    # local hashing is disk- and CPU-bound (one worker per core); remote reads wait on the network
    cap = min(os.cpu_count() or 1, _MAX_WORKERS) if store.local else _REMOTE_WORKERS
    workers = max(1, max_workers or min(len(rel), cap))

    with ThreadPoolExecutor(max_workers=workers) as pool:
        metas = list(pool.map(lambda p: read_shard_meta(p, store), full))
    schema = canonical_schema(metas[0].schema)
    for r, m in zip(rel, metas):
        check_same_schema(rel[0], schema, r, canonical_schema(m.schema))
    with ThreadPoolExecutor(max_workers=workers) as pool:  # before hashing (see .verified)
        found = list(pool.map(store.stat, full))
    stats: list[FileStat] = []
    for r, st in zip(rel, found):
        if st is None:  # listed and read a moment ago, gone (or now a directory) before its stat
            raise ConfigError(
                describe(
                    "path",
                    r,
                    f"a shard file that stays in place while it is pinned (it is gone from {store!r})",
                    "pin again once nothing is writing or deleting shards under the path",
                )
            )
        stats.append(st)
    sizes = [st.size for st in stats]

    hashes: list[str | None] = [None] * len(rel)
    if mode is HashMode.ETAG:  # the store's ETags, no byte read (the trust model of .verified)
        hashes = []
        for r, st in zip(rel, stats):
            if st.etag is None:
                raise ConfigError(
                    describe(
                        "hash",
                        "etag",
                        f"a store that gives every object an ETag ({r!r} has none on {store!r})",
                        "pin with hash='content' (every byte hashed, in parallel)",
                    )
                )
            hashes.append(etag_digest(st.etag))
    elif mode is HashMode.CONTENT:
        with tqdm(
            total=sum(sizes),
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            delay=0.5,
            desc="rd.pin",
            file=sys.stderr,
            leave=False,
            disable=None,
        ) as bar:  # no bar into logs
            keys = [verified.file_key(store, p, None if store.local else st) for p, st in zip(full, stats)]
            # every unit's digest from the same read (.unit_digests): no byte read twice
            # and, last, the digest of the metadata span an open reads (an IPC schema message, a Parquet footer)
            spans = [SpanHasher(_spans_of(m.layout)) if m.layout else None for m in metas]

            def digest(k: int) -> str:
                hasher = spans[k]
                return store.hash_file(full[k], bar.update, hasher.update if hasher is not None else None)

            with ThreadPoolExecutor(max_workers=workers) as pool:
                digests = list(pool.map(digest, range(len(full))))
        for key, h in zip(keys, digests):
            verified.remember(key, h)
        hashes = list(digests)
        for k, (r, m, hasher) in enumerate(zip(rel, metas, spans)):
            if m.layout is None or hasher is None:
                continue
            try:
                got = hasher.digests()
                n = len(m.layout.units)
                meta = got[n] if m.layout.meta_span is not None else None
                metas[k] = replace(m, layout=replace(m.layout, digests=got[:n], meta_digest=meta))
            except ValueError:  # fewer bytes hashed than its layout spans: it changed since its metadata was read
                raise ConfigError(
                    describe(
                        "path",
                        r,
                        "a shard file that stays in place while it is pinned (it is shorter than the units "
                        "its metadata listed a moment before)",
                        "pin again once nothing is writing or deleting shards under the path",
                    )
                ) from None

    shards = [
        ShardInfo(
            path=r,
            size=st.size,
            num_rows=m.num_rows,
            content_hash=h,
            layout=m.layout,
            etag=st.etag if h is not None else None,
        )
        for r, st, m, h in zip(rel, stats, metas, hashes)
    ]
    version = DatasetVersion.build(
        shards, schema, mode, selection, Path(root), filesystem=store.filesystem, lineage=lineage
    )
    if where is not PinSave.NONE:
        version.save(to_cache=where is PinSave.CACHE or selection is Selection.FILES)
    return version


def _filesystem_of_uri(uri: str) -> tuple[Any, str]:
    """(pyarrow filesystem, path) of a URI such as ``s3://bucket/prefix?endpoint_override=...``."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    try:
        return pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ConfigError(
            describe(
                "path",
                uri,
                f"a filesystem URI ({exc})",
                "fix the URI, or pass filesystem=pyarrow.fs.S3FileSystem(...) and a bucket/prefix path",
            )
        ) from None


def _spans_of(layout: ShardLayout) -> list[tuple[int, int]]:
    """The spans ``rd.pin`` hashes besides the whole file: every unit's, then the metadata span's."""
    spans = [(o, n) for o, n, _ in layout.units]
    return spans + [layout.meta_span] if layout.meta_span is not None else spans
