"""File identity: what tells rd that a shard's bytes are still those it opened.

Algorithm: a :class:`FileIdentity` is what the store reports about one file: its byte size and
modification time in nanoseconds and, for a local file, its device and inode numbers (``fstat``
of the descriptor rd holds open, so a file swapped under the same name is a different inode; see
:meth:`~resumable_data.sources.store.LocalStore.identity`), for an object store its size and
``LastModified`` (:meth:`~resumable_data.sources.store.FileSystemStore.identity`). An
:class:`~resumable_data.ArrowShards` records the identity of every shard when it opens it and
checks it:

* when a pickled source is opened again in another process (spawn/forkserver workers): the
  identity is part of the pickle, and a file whose identity differs (replaced by another file of
  the same size, rewritten, truncated) is refused (:func:`changed_error`) before any read;
* around every read of a memory-mapped local shard (``take``, ``take_numpy``, ``src[i]``,
  ``column_lengths``): ``stat`` of its name (:func:`unchanged_at`; for the shards one read
  touches, one compiled loop of ``statx``, :class:`~.watch.ShardWatch`, which leaves any doubt to
  :func:`first_changed_at`; the map keeps no descriptor open: why, in :mod:`.watch`) before the
  read (a shorter file is refused before a byte of its memory map is touched: no SIGBUS) and
  after it (any write during or before the read changed ``mtime``: the rows just read are
  refused, never returned);
* at the first read of a unit that is copied out of the file (a Parquet row group, a remote
  record batch): before and after the read, by ``fstat`` of the descriptor the reader holds
  (:func:`unchanged`).

Guarantee: a running source never returns a record read from bytes that changed after it opened
the file, unless the change kept the size, the inode and the nanosecond ``mtime`` (which takes
resetting the clock or the file's times deliberately, or a write within the same timestamp tick
as the file's creation; the filesystem's tick is a few milliseconds on Linux); every such change
is a :class:`~resumable_data.DatasetIntegrityError` naming the file and the fix. An atomic replace
(a new inode under the name) is harmless to a running source: it keeps reading the bytes it
opened; a worker that opens the name again refuses it. Remote files: size and ``LastModified``
(seconds on S3) are all the store reports today; the ETag check of remote reads lives with the
remote store.

Cost: one ``stat`` per mapped shard touched before and after each read (~0.6 us each in the
compiled loop, ~1.3 us by ``os.stat``; ``benchmarks/bench_identity.py``); the pickled identity
is four integers per shard.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from resumable_data.errors import DatasetIntegrityError

__all__ = ["FileIdentity", "changed_error", "identity_of_stat", "unchanged", "unchanged_at"]

K_SIZE = "size"
K_MTIME_NS = "mtime_ns"
K_DEV = "dev"
K_INO = "ino"
K_ETAG = "etag"
_KEYS = (K_SIZE, K_MTIME_NS, K_DEV, K_INO, K_ETAG)

#: The fix for a file that changed under a source.
FIX = (
    "restore the original file (a dataset's files must not change while a job reads them: write a new "
    "version into a new folder instead), then build the source again: rd.ArrowShards(...) re-verifies "
    "the files against their pin (and a changed file that is a deliberate new version must be re-pinned "
    "with rd.pin)"
)


@dataclass(frozen=True)
class FileIdentity:
    """Size, ``mtime`` in ns (None where the store keeps none) and, for local files, device and
    inode numbers."""

    size: int
    mtime_ns: int | None
    dev: int | None = None
    ino: int | None = None
    etag: str | None = None  #: remote objects: the store's ETag (with its version id where kept)

    def to_dict(self) -> dict[str, Any]:
        return {K_SIZE: self.size, K_MTIME_NS: self.mtime_ns, K_DEV: self.dev, K_INO: self.ino, K_ETAG: self.etag}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FileIdentity:
        values: dict[str, Any] = {k: d.get(k) for k in _KEYS}  # a key missing: None (differences() names it)
        return cls(**values)

    def differences(self, now: FileIdentity | None) -> list[str]:
        """What differs between this (recorded) identity and ``now`` (empty when they match)."""
        if now is None:
            return ["the file is gone (or is no longer a regular file)"]
        out = []
        if (self.dev, self.ino) != (now.dev, now.ino):
            out.append(f"another file now has its name (device/inode {self.dev}/{self.ino} -> {now.dev}/{now.ino})")
        if self.etag != now.etag:
            out.append(f"ETag {self.etag} -> {now.etag} (the object was replaced)")
        if self.size != now.size:
            out.append(f"size {self.size} -> {now.size} bytes")
        if self.mtime_ns != now.mtime_ns:
            out.append(f"modification time {self.mtime_ns} -> {now.mtime_ns} ns (written to)")
        return out


def identity_of_stat(st: os.stat_result) -> FileIdentity:
    """The identity of a local file from its ``stat``/``fstat`` result."""
    return FileIdentity(st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino)


def unchanged(fileno: int, recorded: FileIdentity) -> bool:
    """Whether the local file open as ``fileno`` still has ``recorded``'s size and mtime (its
    device and inode cannot change: the descriptor names one file). One ``fstat``: the check
    that runs around every read."""
    try:
        st = os.fstat(fileno)
    except OSError:
        return False
    return st.st_mtime_ns == recorded.mtime_ns and st.st_size == recorded.size


def unchanged_at(path: str, recorded: FileIdentity) -> bool:
    """Whether the memory-mapped local file recorded as ``recorded`` is unchanged, by ``stat`` of
    its name (a map holds no descriptor, so thousands of shards cost no file descriptors): while
    the name gives the recorded device and inode, its size and mtime must match; once the name is
    gone or gives another file, the mapped inode is unlinked, reachable by no name, so nothing can
    write it any more (a writer that opened it before the swap aside) and its bytes are the ones
    that were opened."""
    try:
        st = os.stat(path)
    except OSError:
        return True
    if (st.st_dev, st.st_ino) != (recorded.dev, recorded.ino):
        return True
    return st.st_mtime_ns == recorded.mtime_ns and st.st_size == recorded.size


#: (path, device, inode, mtime in ns, size) of a memory-mapped file (None: a field its store keeps none of)
WatchEntry = tuple[str, int | None, int | None, int | None, int]


def watch_entry(path: str, recorded: FileIdentity) -> WatchEntry:
    """What :func:`first_changed_at` compares for one memory-mapped file (made once, at open)."""
    return (path, recorded.dev, recorded.ino, recorded.mtime_ns, recorded.size)


def first_changed_at(entries: Sequence[WatchEntry | None], which: Sequence[int]) -> int:
    """The first of ``which`` whose file :func:`unchanged_at` would find changed, else -1 (None
    entries: not watched by name). The same test as :func:`unchanged_at`, in one loop over
    prepared tuples: the check that runs around every read of a batch touching many shards."""
    stat = os.stat
    for k in which:
        e = entries[k]
        if e is None:
            continue
        try:
            st = stat(e[0])
        except OSError:
            continue
        if st.st_ino == e[2] and st.st_dev == e[1] and (st.st_mtime_ns != e[3] or st.st_size != e[4]):
            return k
    return -1


def changed_error(path: str, when: str, recorded: FileIdentity, now: FileIdentity | None) -> DatasetIntegrityError:
    """The error for shard ``path`` whose identity is no longer ``recorded``."""
    what = "; ".join(recorded.differences(now))
    return DatasetIntegrityError(
        f"shard {path!r} changed after this source opened it ({what}), found {when}; "
        f"no record read from it is returned; fix: {FIX}"
    )
