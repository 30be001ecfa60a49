"""Opening a pinned dataset's shards: with their layouts, concurrently where the store is remote.

Algorithm: :func:`with_layouts` gives every shard of a version its
:class:`~resumable_data.sources.layout.ShardLayout`: the manifest's (pinned since schema 2), else
the one this machine remembered for the shard's content hash (:mod:`.layout_cache`), else one
built now from the shard's metadata (:func:`~resumable_data.sources.files.build_layout`;
:func:`adopt_layouts` remembers it once the shard's bytes are verified to be the pinned ones). A
remembered layout that fails the open (a Parquet footer that gives other spans, an IPC schema
message not where it says) is rd's cache problem, not the data's: :func:`open_shards` removes the
entry (a warning names it) and opens the shard with a layout built from the store, which
:func:`adopt_layouts` gives the version. :func:`open_shards`
opens every shard with its layout (:func:`~resumable_data.sources.files.open_shard`): local
shards one after the other (memory maps, no waiting), remote shards from a pool of
:data:`REMOTE_WORKERS` threads (pyarrow releases the GIL while a request waits), and checks each
shard's schema against the pinned one.

Guarantee: the shards are returned in manifest order whatever order the requests complete in; a
remote shard whose metadata (IPC schema message, Parquet footer) does not hash to its layout's pinned
``meta_digest`` (manifest schema 4, :mod:`.unit_digests`) is refused by its open before the metadata
is parsed; a remote shard whose schema is not the pinned schema is a
:class:`~resumable_data.DatasetIntegrityError` naming it (verifying a remote shard with a layout
reads no metadata, see :meth:`DatasetVersion.verify
<resumable_data.sources.version.DatasetVersion.verify>`); a store that does not answer is a
:class:`~resumable_data.StoreUnavailableError` (:mod:`.retry`).

Cost: remote, with layouts: per shard one open (a HEAD on S3) and one read of its schema message,
``REMOTE_WORKERS`` at a time, so about ``2 * shards / REMOTE_WORKERS`` round trips. Without a
layout (a manifest pinned before schema 2, first open on this machine), building it adds the
metadata reads of :mod:`.layout` once.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TypeVar

from resumable_data.errors import ConfigError, DatasetIntegrityError, describe
from resumable_data.sources.files import OpenShard, canonical_schema, open_shard
from resumable_data.sources.layout import ShardLayout
from resumable_data.sources.layout_cache import cached_layout, drop_layout, remember_layout
from resumable_data.sources.store import ShardStore, join
from resumable_data.sources.validate import FIX
from resumable_data.sources.version import DatasetVersion, VerifyLevel

__all__ = ["REMOTE_WORKERS", "adopt_layouts", "open_shards", "pool_map", "with_layouts"]

T = TypeVar("T")
R = TypeVar("R")

#: Remote shards opened (or indexed) at the same time.
REMOTE_WORKERS = 16


def pool_map(store: ShardStore, fn: Callable[[T], R], items: list[T]) -> list[R]:
    """``[fn(x) for x in items]``, from :data:`REMOTE_WORKERS` threads when ``store`` is remote."""
    if store.local or len(items) < 2:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(REMOTE_WORKERS, len(items))) as pool:
        return list(pool.map(fn, items))


def with_layouts(version: DatasetVersion, store: ShardStore) -> tuple[DatasetVersion, list[int]]:
    """``version`` with a layout for every shard that has one, and the indices of the shards whose
    layout was built now (not pinned, not remembered)."""
    missing = [k for k, s in enumerate(version.shards) if s.layout is None]
    if not missing:
        return version, []
    if version.root is None:  # built in memory, never saved: no directory to read the shards from
        raise ConfigError(
            describe(
                "version",
                version.hash,
                "a version with the directory it was pinned in (its root)",
                "use DatasetVersion.load(directory) or rd.pin(directory)",
            )
        )
    root = version.root.as_posix()
    found: dict[int, ShardLayout | None] = {}
    built = []
    for k in missing:
        s = version.shards[k]
        layout = cached_layout(s.content_hash, s.size)
        if layout is not None and layout.num_rows != s.num_rows:  # not this shard's: rebuilt, not read without
            drop_layout(s.content_hash, s.size, layout, f"it counts {layout.num_rows} rows, the manifest {s.num_rows}")
            layout = None
        found[k] = layout
        if layout is None:
            built.append(k)

    def build(k: int) -> ShardLayout | None:
        # metadata only: its identity is the next open's, from the stat of the verify before it
        shard = open_shard(join(root, version.shards[k].path), store, with_layout=True, metadata_only=True)
        shard.close()
        return shard.layout

    for k, layout in zip(built, pool_map(store, build, built)):
        found[k] = layout
    shards = tuple(
        replace(s, layout=layout) if (layout := found.get(k)) is not None and layout.num_rows == s.num_rows else s
        for k, s in enumerate(version.shards)
    )
    return replace(version, shards=shards), [k for k in built if shards[k].layout is not None]


def open_shards(root: str, rel: list[str], version: DatasetVersion | None, store: ShardStore) -> list[OpenShard]:
    """Every shard ``root/rel[k]`` opened (with the version's layouts), in order. A shard whose open
    fails with a layout rd's layout cache holds for it (:mod:`.layout_cache`: the layout does not
    describe the bytes) is opened again with a layout built from the store, the entry removed with
    a warning naming it; the caller finds that layout in :attr:`OpenShard.layout`."""
    layouts = [s.layout for s in version.shards] if version is not None else [None] * len(rel)
    keys = [(s.content_hash, s.size) if s.content_hash is not None else None for s in version.shards] if version else []

    def one(k: int) -> OpenShard:
        path, key = join(root, rel[k]), keys[k] if keys else None
        try:
            shard = open_shard(path, store, layout=layouts[k])
        except DatasetIntegrityError as exc:
            if key is None or drop_layout(key[0], key[1], layouts[k], str(exc)) is None:
                raise
            shard = open_shard(path, store, with_layout=True)  # from the store's bytes (its own error if damaged)
            if shard.layout is None or shard.layout.num_rows != version.shards[k].num_rows:  # type: ignore[union-attr]
                shard.close()
                raise
        shard.layout_key = key
        if version is not None and not store.local and canonical_schema(shard.schema) != version.schema:
            shard.close()
            raise DatasetIntegrityError(
                describe(
                    "shard",
                    rel[k],
                    f"the pinned schema {version.schema!r}",
                    f"{FIX} (on the store: {canonical_schema(shard.schema)!r})",
                )
            )
        return shard

    if store.local or len(rel) < 2:
        return [one(k) for k in range(len(rel))]
    with ThreadPoolExecutor(max_workers=min(REMOTE_WORKERS, len(rel))) as pool:
        futures = [pool.submit(one, k) for k in range(len(rel))]
        shards, error = [], None
        for fut in futures:
            try:
                shards.append(fut.result())
            except BaseException as exc:
                error = error or exc
        if error is not None:
            for shard in shards:
                shard.close()
            raise error
        return shards


def adopt_layouts(
    version: DatasetVersion, shards: list[OpenShard], built: list[int], level: VerifyLevel
) -> DatasetVersion:
    """``version`` with the layout each of its open ``shards`` was opened with where
    :func:`open_shards` rebuilt one (a layout from rd's layout cache that did not describe the
    bytes): the version is what a pickle carries to workers. The layouts built now (``built``, from
    :func:`with_layouts`) and rebuilt are remembered unless ``level`` is ``SIZE`` (then their bytes
    were not verified to be the pinned ones)."""
    rebuilt = [
        k
        for k, (s, shard) in enumerate(zip(version.shards, shards))
        if s.layout is not None and shard.layout is not s.layout
    ]
    if rebuilt:
        pinned = list(version.shards)
        for k in rebuilt:
            pinned[k] = replace(pinned[k], layout=shards[k].layout)
        version = replace(version, shards=tuple(pinned))
    if level is not VerifyLevel.SIZE:  # the layouts' bytes are the pinned ones
        for k in [*built, *rebuilt]:
            s = version.shards[k]
            remember_layout(s.content_hash, s.size, s.layout)
    return version
