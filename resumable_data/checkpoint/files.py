"""Reading checkpoint files that may be hostile, and the single-writer lock of a checkpoint folder.

Reads. Every checkpoint file (``COMMITTED``, ``state.json``, ``meta.json``, ``inventory.json``,
``tensors.safetensors``, ``latest``) is first ``os.lstat``-ed: anything but a regular file (a
FIFO, a device, a socket, a directory, a symlink, e.g. one to ``/dev/zero``) is refused without
being opened. A file larger than its format allows (:data:`LIMITS`) is refused before it is read.
The file is then opened with ``O_NOFOLLOW | O_NONBLOCK`` (a file swapped for a FIFO or a link
between the check and the open still cannot block or redirect the read), checked again with
``fstat``, and read for at most the limit plus one byte. Every refusal is a
:class:`CheckpointError` naming the file, what it is (or its size) and the limit.
:func:`read_exact` reads a file of a known size once, through that one descriptor, into memory:
the loader hashes those bytes against the ``COMMITTED`` marker and parses the same bytes, so no
file is opened twice (a file swapped between a hash and a parse was parsed unchecked). The tensor
file is read through :func:`open_checked` too, by :mod:`.tensor_file`, which hashes it while it
reads each tensor into its own storage (no whole-file buffer).

Lock. :func:`writer_lock` takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``<folder>/.lock`` for a
save and its retention pass; a second writer gets a :class:`CheckpointError` at once (no waiting),
naming the folder and the fix. The kernel releases the lock when its holder dies, so a killed
writer never leaves a stale lock. Where ``fcntl`` is missing (Windows) the lock is a no-op.

Cost: one ``lstat`` + one ``fstat`` per file; reads are single buffered passes; :func:`read_exact`
holds the whole file in memory (the JSON files; the tensor file is streamed: :mod:`.tensor_file`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from resumable_data._io import hash_stream
from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.errors import describe

__all__ = ["LIMITS", "LOCK", "hash_regular", "open_checked", "read_exact", "read_regular", "writer_lock"]

LOCK = ".lock"
#: The most bytes each checkpoint file may hold (the format's bound; larger is refused unread).
LIMITS = {
    "COMMITTED": 64 << 10,  # format, step, id, four sizes and hashes: ~1 KiB
    "latest": 256,  # "step-" + 12 digits + newline
    "state.json": 1 << 30,  # every non-tensor value of the state
    "meta.json": 256 << 20,  # parameter names, shapes, module tree
    "inventory.json": 256 << 20,
    "tensors.safetensors": 1 << 50,  # bounded by the marker's size (checked first), not by this
}
_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _what(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def open_checked(path: Path, limit: int | None = None) -> tuple[int, int]:
    """``(fd, size)`` of a regular file within ``limit`` (default: :data:`LIMITS` by name), opened
    with ``O_NOFOLLOW | O_NONBLOCK``; refuses anything else unopened (module docs)."""
    limit = LIMITS.get(path.name, 1 << 30) if limit is None else limit
    try:
        st = os.lstat(path)
    except OSError as e:
        raise CheckpointError(
            describe(
                "checkpoint file", str(path), f"an existing regular file ({e.strerror})", "load another checkpoint"
            )
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointError(
            describe(
                "checkpoint file",
                str(path),
                f"a regular file, not {_what(st.st_mode)}",
                "replace it with the file the save wrote, or load another checkpoint",
            )
        )
    if st.st_size > limit:
        raise CheckpointError(
            describe(
                "checkpoint file",
                f"{path} ({st.st_size} bytes)",
                f"at most {limit} bytes",
                "the file is not one this package wrote: load another checkpoint",
            )
        )
    try:
        fd = os.open(path, _FLAGS)
    except OSError as e:
        raise CheckpointError(
            describe("checkpoint file", str(path), f"a readable regular file ({e.strerror})", "load another checkpoint")
        ) from None
    st2 = os.fstat(fd)
    if not stat.S_ISREG(st2.st_mode) or st2.st_size > limit:
        os.close(fd)
        raise CheckpointError(
            describe(
                "checkpoint file",
                str(path),
                f"a regular file of at most {limit} bytes (it changed while it was opened)",
                "load another checkpoint",
            )
        )
    return fd, st2.st_size


def read_regular(path: str | os.PathLike, limit: int | None = None) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (default: :data:`LIMITS` by name)."""
    p = Path(path)
    fd, _ = open_checked(p, limit)
    with os.fdopen(fd, "rb") as f:
        cap = LIMITS.get(p.name, 1 << 30) if limit is None else limit
        data = f.read(cap + 1)
    if len(data) > cap:
        raise CheckpointError(
            describe(
                "checkpoint file",
                f"{p} (more than {cap} bytes)",
                f"at most {cap} bytes",
                "the file grew while it was read: load another checkpoint",
            )
        )
    return data


def hash_regular(path: str | os.PathLike, size: int) -> str | None:
    """xxh3-128 of a regular file that holds exactly ``size`` bytes; None if its size differs."""
    p = Path(path)
    fd, got = open_checked(p)
    with os.fdopen(fd, "rb") as f:
        if got != size:
            return None
        return hash_stream(f)


def read_exact(path: str | os.PathLike, size: int) -> bytes | None:
    """The bytes of a regular file that holds exactly ``size`` bytes, read through one descriptor;
    None if it holds fewer or more. A loader hashes and parses these same bytes, so a file swapped
    (renamed over, or rewritten in place) after they were read cannot be parsed unchecked."""
    p = Path(path)
    fd, got = open_checked(p)
    with os.fdopen(fd, "rb") as f:
        if got != size:
            return None
        data = f.read(size + 1)  # one more byte: a file that grew since fstat is not the marker's
    return data if len(data) == size else None


def is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


@contextlib.contextmanager
def writer_lock(root: Path) -> Iterator[None]:
    """Hold ``root/.lock`` exclusively for the body (module docs)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no flock on this platform
        yield
        return
    flags = (
        os.O_RDWR
        | os.O_CREAT
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_NONBLOCK", 0)
        | getattr(os, "O_CLOEXEC", 0)
    )
    try:
        fd = os.open(root / LOCK, flags, 0o644)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(f"{LOCK} is not a regular file")
    except OSError as e:
        raise CheckpointError(
            describe(
                "directory",
                str(root),
                f"a writable folder with a regular {LOCK} file ({e})",
                f"check the folder's permissions, or remove {root / LOCK} if it is not a file",
            )
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CheckpointError(
                describe(
                    "directory",
                    str(root),
                    "one writer at a time (another process is saving into this folder now)",
                    "give each job its own checkpoint folder (or save from one rank only); wait for the other save to "
                    "finish and call save_checkpoint again",
                )
            ) from None
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
