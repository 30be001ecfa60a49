"""Local file primitives shared by every layer: one content hash, one atomic write.

* :func:`hash_file`: the xxh3-128 hex digest of a file's bytes, streamed in fixed chunks (memory
  stays at one chunk whatever the file size). The same digest is what a pinned manifest records
  and what a checkpoint's marker records.
* :func:`hash_stream`: the same digest over any binary file-like object (``pyarrow.fs`` streams).
* :func:`open_regular`: open a file for reading only if it is a regular file (a symlink is followed
  to one): a FIFO, socket or device is refused before any blocking open, so a named pipe where a
  shard or manifest should be can never hang a reader (``O_NONBLOCK`` open, then ``fstat`` of the
  descriptor, so a swap between the check and the open is caught too).
* :func:`atomic_write`: write to a temporary file in the target's directory, then
  ``os.replace`` it over the target, so a reader sees the old bytes or the new, never a mix.
  ``durable=True`` also fsyncs the file before the rename and the directory after it, so the
  new bytes survive a power loss once the call returns; ``durable=False`` skips both fsyncs
  (caches and other data that is cheap to rebuild).

Pure standard library + xxhash (+ the error hierarchy): no torch, no pyarrow.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import xxhash

from resumable_data.errors import NotRegularFileError, describe

__all__ = [
    "HASH_CHUNK_BYTES",
    "Chunks",
    "NotRegularFileError",
    "atomic_write",
    "fsync_dir",
    "hash_file",
    "hash_stream",
    "not_regular",
    "open_regular",
]

#: Bytes read per chunk when hashing (4 MiB: large enough to amortize calls, small enough to stream).
HASH_CHUNK_BYTES = 4 << 20


#: What :func:`hash_stream` hands every chunk it hashed to, with the offset the chunk starts at
#: (other digests of the same bytes computed in the same read: the per-unit digests of a pin).
Chunks = Callable[[int, bytes], object]


def hash_stream(f: BinaryIO, progress: Callable[[int], object] | None = None, chunks: Chunks | None = None) -> str:
    """xxh3-128 hex digest of everything ``f`` yields, read in :data:`HASH_CHUNK_BYTES` chunks.

    ``progress``, when given, is called with the byte count of each chunk; ``chunks`` with the
    offset and the bytes of each chunk."""
    h = xxhash.xxh3_128()
    offset = 0
    while True:
        chunk = f.read(HASH_CHUNK_BYTES)
        if not chunk:
            break
        h.update(chunk)
        if chunks is not None:
            chunks(offset, chunk)
        offset += len(chunk)
        if progress is not None:
            progress(len(chunk))
    return h.hexdigest()


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def not_regular(path: str | os.PathLike, mode: int) -> NotRegularFileError:
    """The error for ``path`` whose ``st_mode`` is ``mode`` (not a regular file)."""
    return NotRegularFileError(
        describe(
            "path",
            os.fspath(path),
            f"a regular file (it is {_kind(mode)}; rd never opens one, so it cannot block or read a device)",
            "remove or rename it, or point rd at the regular file it stands for "
            "(a symlink is followed only to a regular file)",
        )
    )


def open_regular(path: str | os.PathLike) -> int:
    """A read-only descriptor of ``path``, which must be a regular file (a symlink is followed to
    one). Raises :class:`NotRegularFileError` for a FIFO, socket, device or directory without a
    blocking open (``stat`` first, then an ``O_NONBLOCK`` open and ``fstat`` of the descriptor);
    ``OSError`` (``FileNotFoundError``, ...) as ``os.open`` raises it. The caller closes it."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise not_regular(path, st.st_mode)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped between the stat and the open
            raise not_regular(path, st.st_mode)
        if getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def hash_file(
    path: str | os.PathLike, progress: Callable[[int], object] | None = None, chunks: Chunks | None = None
) -> str:
    """xxh3-128 hex digest of the file's bytes (see :func:`hash_stream`); only a regular file is
    opened (:func:`open_regular`)."""
    with os.fdopen(open_regular(path), "rb") as f:
        return hash_stream(f, progress, chunks)


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory so that renames inside it are durable (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # platforms without directory file descriptors
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, data: bytes, *, durable: bool) -> Path:
    """Replace ``path`` with ``data`` atomically; with ``durable`` also fsync file and directory.

    The temporary file (``.<name>.<pid>.<random>.tmp`` beside the target) is removed if the write
    fails, so an error leaves the old file untouched and nothing behind."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(target.parent)
    return target
