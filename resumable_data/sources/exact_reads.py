"""Exact reads from a remote file: a short body refused, never padded, and a deadline on every read.

Algorithm. pyarrow's S3 file cannot tell a short body: asked for ``n`` bytes it returns ``n``
whatever the server sent, the rest left as the buffer held it. :func:`read_exact` reads into a
buffer of its own filled first with one byte value, then (when the last byte equals that fill)
again with another: a complete body gives the same bytes both times, a short one leaves a fill
visible. :func:`within_deadline` runs each remote read in a helper thread and gives up on it past
``Retries.read_limit(n)`` seconds (``read_deadline + n / min_read_rate``; pyarrow's client fails a
stalled body, not a trickling one).
:class:`ExactReader` hands pyarrow's IPC readers a file whose every read is exact.

Guarantee. A read returns exactly the bytes asked or says it could not (``None``, ``OSError`` or
:func:`short_body`'s :class:`~resumable_data.DatasetIntegrityError`); a read past its deadline is a
``TimeoutError`` (transient: :mod:`.store` retries it, then raises
:class:`~resumable_data.StoreUnavailableError`). Cost: one fill of the buffer per read, a second
request for about one read in 256, one thread start per read (tens of us); no state, nothing to
restore.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np
import pyarrow as pa

from resumable_data.errors import DatasetIntegrityError, describe
from resumable_data.sources.retry import Retries

__all__ = [
    "FILLS",
    "ExactReader",
    "SeekableRaw",
    "read_exact",
    "short_body",
    "within_deadline",
]

T = TypeVar("T")


class SeekableRaw(io.RawIOBase):
    """A read-only, seekable raw file of ``_size`` bytes at position ``_pos``: what a subclass's
    ``readinto`` reads from (handed to pyarrow's readers wrapped in ``pa.PythonFile``)."""

    _pos: int
    _size: int

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        self._pos = pos if whence == 0 else self._pos + pos if whence == 1 else self._size + pos
        return self._pos

    def tell(self) -> int:
        return self._pos


class ExactReader(SeekableRaw):
    """A remote file (``f``, of object ``where``) whose reads refuse a short body (:func:`read_exact`;
    ``OSError``, which the reader's caller turns into an rd error naming the shard): what
    :meth:`.store.FileSystemStore.open_exact` hands pyarrow's IPC readers, wrapped in ``pa.PythonFile``.
    A read the store refuses for good (``refused(exc, offset, length)`` says so: no permission, the
    object gone) raises the error ``refused`` returns (pyarrow's readers pass it through unchanged),
    so it is reported as the store's answer, never as a damaged shard; a transient one is raised as
    it came, for the caller's retries."""

    def __init__(
        self,
        where: str,
        f: pa.NativeFile,
        retries: Retries,
        refused: Callable[[OSError, int, int], Exception | None] | None = None,
    ) -> None:
        super().__init__()
        self._where, self._f, self._pos, self._size = where, f, 0, f.size()
        self._retries, self._refused = retries, refused

    def readinto(self, b: Any) -> int:
        n = max(0, min(len(b), self._size - self._pos))
        if n == 0:
            return 0
        try:
            data = read_exact(self._f, self._pos, n, self._retries)
        except OSError as exc:
            error = self._refused(exc, self._pos, n) if self._refused is not None else None
            if error is None:
                raise
            raise error from exc
        if data is None:
            raise OSError(
                f"{self._where!r}: the store sent fewer than the {n} bytes asked at offset {self._pos} "
                "(a short body: the store, or a proxy in front of it, cut the answer short)"
            )
        memoryview(b)[:n] = data
        self._pos += n
        return n

    def close(self) -> None:
        self._f.close()
        super().close()


#: What :func:`read_exact` fills a buffer with before a read, then (to tell a short body apart
#: from bytes that happen to end with the first fill) the other.
FILLS = (0xA5, 0x5A)


def within_deadline(length: int, fn: Callable[[], T], retries: Retries) -> T:
    """``fn()`` (one remote read of ``length`` bytes), raising ``TimeoutError`` when it takes longer than
    its deadline, ``retries.read_limit(length)`` seconds: a minute plus a second per 64 KiB by default
    (316 s for a 16 MiB joined read). pyarrow's S3 client on Linux fails a body that stalls (no byte
    for 3 s) but none that trickles (request_timeout is ignored there, and no total time is set): a
    body sent at a few bytes a second held a step, or a loader worker, for its size over that rate.
    The ``TimeoutError`` is transient: retried, then :class:`~resumable_data.StoreUnavailableError`
    naming ``rd.Retries(read_deadline=..., min_read_rate=...)``. It runs in a helper thread (pyarrow releases the GIL while it
    waits): a read past its deadline is left to finish or fail there, its result dropped, and its
    buffer its own (a retry reads into a new one); until the store ends it, pyarrow makes no new
    ``S3FileSystem`` in this process (its client registry waits for requests in flight), while the
    filesystems that exist keep reading. Cost: one thread start per read (tens of us)."""
    deadline = retries.read_limit(length)
    box: list[Any] = []

    def run() -> None:
        try:
            box.append((True, fn()))
        except BaseException as exc:  # handed to the caller's thread
            box.append((False, exc))

    t = threading.Thread(target=run, name="rd-store-read", daemon=True)
    t.start()
    t.join(deadline)
    if not box:
        raise TimeoutError(
            f"no complete answer to a read of {length} bytes within {deadline:.1f} s (the limit: "
            f"read_deadline={retries.read_deadline:g} s plus a second per min_read_rate={retries.min_read_rate} "
            "bytes): the store sent the body slower than that"
        )
    ok, value = box[0]
    if not ok:
        raise value
    return cast(T, value)


def read_exact(f: pa.NativeFile, offset: int, length: int, retries: Retries) -> bytes | None:
    """``length`` bytes at ``offset`` of ``f``, or None when the store sent fewer (within the deadline
    of :func:`within_deadline` under ``retries``, else ``TimeoutError``).

    pyarrow's S3 file cannot tell: asked for ``n`` bytes it returns ``n`` whatever the body held,
    the bytes the server did not send left as they were in the buffer (uninitialized memory with
    ``read_at``: other data of this process). Reading into a buffer of ours, filled first, makes
    them visible: the body is written from the front, so a short one leaves the last byte at the
    fill. If the last byte equals the fill the read is made again into the other fill; a complete
    body gives the same bytes both times, a short one does not. Cost: one fill of the buffer; a
    second request for about one read in 256 (a unit whose last byte is ``0xA5``). The bytes are
    returned in the ``bytearray`` read into (no copy)."""
    return within_deadline(length, lambda: read_exact_now(f, offset, length), retries)


def read_exact_now(f: pa.NativeFile, offset: int, length: int) -> bytes | None:
    """:func:`read_exact` without the deadline."""
    if length == 0:
        return b""
    first: bytearray | None = None
    for fill in FILLS:
        buf = bytearray(length)  # zeroed pages, then one memset: no copy of the body after the read
        np.frombuffer(buf, dtype=np.uint8).fill(fill)
        f.seek(offset)
        view, got = memoryview(buf), 0
        while got < length:  # a filesystem may answer a read in parts (pyarrow's S3 file never does)
            n = f.readinto(view[got:])
            if not n:
                break
            got += n
        view.release()
        if got != length:
            return None
        if buf[-1] != fill:
            # the bytearray read into, typed as the bytes callers read it as (never written after): no copy
            return cast(bytes, buf) if first is None or first == buf else None
        if first is not None:
            return None  # the last byte kept each fill: nothing was written there
        first = buf
    return None  # pragma: no cover (the loop returns)


def short_body(where: str, offset: int, length: int, got: str) -> DatasetIntegrityError:
    """The error for a read answered with fewer bytes than asked (a short body)."""
    return DatasetIntegrityError(
        describe(
            "path",
            where,
            f"{length} bytes at offset {offset} (got {got}: the store answered with a shorter body, or the "
            "object is shorter than its pinned layout)",
            "restore the object, or re-pin deliberately with rd.pin(prefix, filesystem=...); "
            "if the object is intact, the store (or a proxy in front of it) cut the answer short",
        )
    )
