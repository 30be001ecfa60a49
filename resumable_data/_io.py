"""Local file primitives shared by every layer: one content hash, one atomic write.

* :func:`hash_file`: the xxh3-128 hex digest of a file's bytes, streamed in fixed chunks (memory
  stays at one chunk whatever the file size). The same digest is what a pinned manifest records
  and what a checkpoint's marker records.
* :func:`hash_stream`: the same digest over any binary file-like object (``pyarrow.fs`` streams).
* :func:`atomic_write`: write to a temporary file in the target's directory, then
  ``os.replace`` it over the target, so a reader sees the old bytes or the new, never a mix.
  ``durable=True`` also fsyncs the file before the rename and the directory after it, so the
  new bytes survive a power loss once the call returns; ``durable=False`` skips both fsyncs
  (caches and other data that is cheap to rebuild).

Pure standard library + xxhash: no torch, no pyarrow.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import xxhash

__all__ = ["HASH_CHUNK_BYTES", "atomic_write", "fsync_dir", "hash_file", "hash_stream"]

#: Bytes read per chunk when hashing (4 MiB: large enough to amortize calls, small enough to stream).
HASH_CHUNK_BYTES = 4 << 20


def hash_stream(f: BinaryIO, progress: Callable[[int], object] | None = None) -> str:
    """xxh3-128 hex digest of everything ``f`` yields, read in :data:`HASH_CHUNK_BYTES` chunks.

    ``progress``, when given, is called with the byte count of each chunk."""
    h = xxhash.xxh3_128()
    while True:
        chunk = f.read(HASH_CHUNK_BYTES)
        if not chunk:
            break
        h.update(chunk)
        if progress is not None:
            progress(len(chunk))
    return h.hexdigest()


def hash_file(path: str | os.PathLike, progress: Callable[[int], object] | None = None) -> str:
    """xxh3-128 hex digest of the file's bytes (see :func:`hash_stream`)."""
    with open(path, "rb") as f:
        return hash_stream(f, progress)


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
