"""Content hashes verified once per file state and remembered: the default ``verify="cached"``.

Algorithm: after a shard's bytes hash to the pinned xxh3-128 digest (at ``rd.pin`` or at a
``verify``), an empty marker ``cache_dir()/verified/<key>`` is written, where ``<key>`` is the
xxh3-128 of (store kind, resolved path, size, ``st_mtime_ns``, ``st_ino``, ``st_dev``,
``st_ctime_ns``, the digest). ``verify("cached")`` re-hashes a shard only when its marker is
missing, i.e. when any of those changed (any write to the file changes ``mtime``/``ctime``; a
copy or swap changes the inode). The stat is taken *before* hashing, so a write during hashing
leaves a stale key that never matches again. Remote stores keep no inode or ctime: their key is
(path, size, mtime), and a store without mtimes re-hashes on every ``verify("cached")``.

Guarantee: a content change is detected at the next open unless the file's size, mtime (ns),
ctime (ns), inode and device all stay the same (which takes deliberately resetting the clock of
the machine or the filesystem's metadata); ``verify="content"`` re-hashes regardless.

Cost: one stat and one marker lookup per shard when the marker exists; otherwise one read of
every byte (disk-bound, as at pin time) and one empty-file write.
"""

from __future__ import annotations

import json
import os

import xxhash

from resumable_data import _io
from resumable_data._cache import cache_dir
from resumable_data.sources.store import ShardStore

__all__ = ["file_key", "is_verified", "remember"]


def file_key(store: ShardStore, path: str) -> str | None:
    """The state key of ``path`` (None when the store cannot tell a changed file apart)."""
    if store.local:
        try:
            st = os.stat(path)
        except OSError:
            return None
        parts = ["local", os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev,
                 st.st_ctime_ns]
    else:
        info = store.stat(path)
        if info is None or info.mtime is None:
            return None
        parts = [store.filesystem.type_name, store.resolve(path), info.size, info.mtime]
    return json.dumps(parts)


def _marker(key: str, digest: str):
    return cache_dir() / "verified" / xxhash.xxh3_128_hexdigest(f"{key}|{digest}".encode())


def is_verified(key: str | None, digest: str) -> bool:
    """Whether the file in state ``key`` was verified to hash to ``digest``."""
    return key is not None and _marker(key, digest).is_file()


def remember(key: str | None, digest: str) -> None:
    """Record that the file in state ``key`` hashes to ``digest`` (best effort: a read-only
    cache only costs a re-hash next time)."""
    if key is None:
        return
    m = _marker(key, digest)
    try:
        m.parent.mkdir(parents=True, exist_ok=True)
        _io.atomic_write(m, b"", durable=False)
    except OSError:
        pass
