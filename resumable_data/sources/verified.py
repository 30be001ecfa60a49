"""Content hashes verified once per file state and remembered: the default ``verify="cached"``.

Algorithm: after a shard's bytes hash to the pinned xxh3-128 digest (at ``rd.pin`` or at a
``verify``), an empty marker ``cache_dir()/verified/<key>`` is written, where ``<key>`` is the
xxh3-128 of (store kind, resolved path, size, ``st_mtime_ns``, ``st_ino``, ``st_dev``,
``st_ctime_ns``, the digest). ``verify("cached")`` re-hashes a shard only when its marker is
missing, i.e. when any of those changed (any write to the file changes ``mtime``/``ctime``; a
copy or swap changes the inode). The stat is taken *before* hashing, so a write during hashing
leaves a stale key that never matches again. Remote stores keep no inode or ctime: their key is
(path, size, ETag) where the store gives an ETag (:attr:`FileStat.etag
<resumable_data.sources.store.FileStat.etag>`: S3 and GCS; plus the version id on a versioned
bucket), never its ``Last-Modified`` time, which has a resolution of one second: an object
replaced by another of the same size within the second it was verified in kept its key, and its
new bytes were accepted unread. A store with neither ETags nor mtimes re-hashes on every
``verify("cached")``; one with mtimes only keys on (path, size, mtime) and says so here: it is as
weak as that store's clock.

Trust model for remote objects (ETags): ``rd.pin`` records, per shard, the ETag the store gave
the bytes it hashed (the manifest's ``etag``, schema 2). ``verify("cached")`` then accepts a
remote shard without a marker, on any machine, when its current ETag equals the pinned one and
its size is the pinned size: it trusts the store's promise that an ETag names one content (S3:
the MD5 of a single-part upload, a digest of the parts' MD5s for a multipart one; a new upload of
other bytes gets another ETag). A new training node therefore opens a pinned remote dataset
without downloading it; ``verify("content")`` re-hashes regardless, for a store you do not trust.

Guarantee: a local content change is detected at the next open unless the file's size, mtime
(ns), ctime (ns), inode and device all stay the same (which takes deliberately resetting the
clock of the machine or the filesystem's metadata); a remote one whenever the store gives the
new bytes another ETag (S3: every upload of other bytes; the ETag is the MD5 of a single-part
upload's bytes and changes with any part of a multipart one); ``verify="content"`` re-hashes
regardless.

Cost: one stat and one marker lookup per shard when the marker exists; otherwise one read of
every byte (disk-bound, as at pin time) and one empty-file write.
"""

from __future__ import annotations

import json
import os

import xxhash

from resumable_data import _io
from resumable_data._cache import cache_dir
from resumable_data.sources.store import FileStat, ShardStore

__all__ = ["file_key", "is_verified", "remember"]


def file_key(store: ShardStore, path: str, info: FileStat | None = None) -> str | None:
    """The state key of ``path`` (None when the store cannot tell a changed file apart);
    ``info``: a remote object's stat already taken (saves a request)."""
    if store.local:
        try:
            st = os.stat(path)
        except OSError:
            return None
        parts = ["local", os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, st.st_ctime_ns]
    else:
        info = info if info is not None else store.stat(path)
        if info is None or store.filesystem is None:  # a store not local names its filesystem
            return None
        kind = store.filesystem.type_name
        if info.etag is not None:
            parts = [kind, store.resolve(path), info.size, "etag", info.etag]
        elif info.mtime is not None:
            parts = [kind, store.resolve(path), info.size, info.mtime]
        else:
            return None
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
