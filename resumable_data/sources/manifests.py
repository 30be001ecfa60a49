"""Where manifests live, so that rd never writes into a user's data folder by surprise.

Algorithm: a manifest is looked for, in order, at

1. ``<folder>/.rd-manifest.json`` (:data:`~.files.MANIFEST_NAME`): what an explicit
   ``rd.pin(folder)`` writes. The leading ``.`` makes every other reader skip it: pyarrow's
   dataset discovery ignores names starting with ``.`` or ``_``, ``pandas.read_parquet`` goes
   through pyarrow, and Hugging Face ``datasets`` ignores hidden files (but not ``_`` ones: a
   ``_rd-manifest.json`` breaks ``load_dataset("parquet", data_dir=...)``).
2. ``<folder>/rd-manifest.json`` (:data:`~.files.LEGACY_MANIFEST_NAME`): folders pinned by
   earlier versions keep working (read only; rd never writes this name again).
3. ``cache_dir()/manifests/<key>/.rd-manifest.json``: what auto-pinning (``rd.ArrowShards(dir)``
   on an unpinned folder), ``rd.pin(list_of_files)`` and ``rd.pin(dir, save="cache")`` write.
   ``<key>`` is the xxh3-128 of the store kind, the resolved root and the shard list (relative
   paths, in order), so another file list or a moved folder never finds a stale manifest.

Guarantee: rd writes into a data folder only when asked (``rd.pin(dir)``, ``save="folder"``);
a list of files never pins into their common parent; a read-only folder pins into the cache.

Cost: one small read per candidate until one is found (a HEAD and a GET on S3).
"""

from __future__ import annotations

import json
from pathlib import Path

import xxhash

from resumable_data._cache import cache_dir
from resumable_data.sources.files import LEGACY_MANIFEST_NAME, MANIFEST_NAME
from resumable_data.sources.store import LOCAL, ShardStore

__all__ = ["MANIFEST_NAMES", "cached_manifest"]

#: The names a folder's manifest may have, looked for in this order (the legacy name last).
MANIFEST_NAMES = (MANIFEST_NAME, LEGACY_MANIFEST_NAME)


def cached_manifest(store: ShardStore, root: str, rel: list[str]) -> Path:
    """Where the cache keeps the manifest of shards ``rel`` under ``root`` on ``store`` (a local
    path; it may not exist yet)."""
    kind = "local" if store is LOCAL or store.filesystem is None else store.filesystem.type_name
    key = xxhash.xxh3_128_hexdigest(json.dumps([kind, root, list(rel)]).encode("utf-8"))
    return cache_dir() / "manifests" / key / MANIFEST_NAME
