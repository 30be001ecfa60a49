"""Where shard bytes live: one :class:`ShardStore` interface, a local and a ``pyarrow.fs`` store.

Algorithm: a store names files by POSIX path strings (:meth:`ShardStore.resolve`: the resolved
absolute path of a local file; ``bucket/prefix/name`` without a trailing slash on a
``pyarrow.fs.FileSystem``) and offers only what the sources need: ``stat`` (size, mtime where the
store keeps one, and the ETag where the store gives one: :attr:`FileStat.etag`), ``is_dir``, a
recursive listing, random-access and sequential opening, a memory map where the bytes are local,
a bounded read of a small file (the manifest), an atomic whole-file write (the manifest), the
streamed content hash, a ranged read and ``retrying`` (a read through a pyarrow reader, retried on
transient failures). Every source feature (discovery, metadata,
pinning, verifying, opening, reading) is written once over this interface
(:mod:`.files`, :mod:`.pin`, :mod:`.version`, :mod:`.arrow_shards`).

* :class:`LocalStore`: the OS. Only regular files are opened (:func:`resumable_data._io.open_regular`:
  a FIFO, socket or device where a shard or manifest should be is a
  :class:`~resumable_data._io.NotRegularFileError`, never a blocking open; a symlink is followed to
  a regular file only, wherever it points, as Hugging Face hub snapshots are symlinks into
  ``blobs/``), and every file is opened through the descriptor that was checked (``/proc/self/fd``),
  so what is read is the file that was checked. IPC shards are memory-mapped
  (:meth:`~LocalStore.memory_map`), Parquet shards read with ``pread`` (no map: a file truncated
  under a reader is a read error, not a SIGBUS), the write is
  :func:`resumable_data._io.atomic_write` with ``durable=True`` (tmp file, fsync, ``os.replace``,
  directory fsync), the hash is :func:`resumable_data._io.hash_file`. :meth:`~LocalStore.identity`
  is the ``fstat`` of an open file (device, inode, size, mtime in ns: :mod:`.identity`).
* :class:`FileSystemStore`: a ``pyarrow.fs.FileSystem`` (S3, GCS, HDFS, Azure, ...). Every
  request is retried on transient failures (:mod:`.retry`; a store that stays down is an
  :class:`~resumable_data.StoreUnavailableError`). On S3 and GCS ``stat`` is one HEAD that
  also returns the ETag (``get_file_info`` drops it). Nothing is
  memory-mapped (reads are on demand, see :mod:`.files`); the write is one
  ``open_output_stream`` upload (an object appears whole when its upload completes: the atomic
  write of object stores); the hash is :func:`resumable_data._io.hash_stream` over
  ``open_input_stream``; :meth:`~FileSystemStore.identity` is the object's size, modification time and ETag.

:func:`store_for` turns a ``filesystem=`` argument into a store: ``None`` or a
``pyarrow.fs.LocalFileSystem`` is the local store (memory maps), any other filesystem its
:class:`FileSystemStore`.

Guarantee: both stores give the same digest for the same bytes (xxh3-128 of the bytes), the same
relative paths for the same tree (sorted), and ``read_small`` never reads more than its bound plus
one byte; ``tests/sources/test_shard_store.py`` runs one contract suite against both.

Cost: ``stat``/``is_dir``/opening are one metadata call each (one request on an object store), a
listing is one recursive walk (one paginated listing), hashing reads every byte once in
:data:`~resumable_data._io.HASH_CHUNK_BYTES` chunks. No torch here.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePath
from stat import S_ISDIR, S_ISREG
from typing import Any, Protocol, TypeVar, runtime_checkable

import pyarrow as pa
import pyarrow.fs as pafs
import xxhash

from resumable_data import _io
from resumable_data.errors import (
    ConfigError,
    DatasetIntegrityError,
    ResumableDataError,
    StoreUnavailableError,
    describe,
)
from resumable_data.sources.exact_reads import ExactReader, read_exact, short_body, within_deadline
from resumable_data.sources.identity import FileIdentity, changed_error, identity_of_stat
from resumable_data.sources.retry import DEFAULT_RETRIES, Retries, call, is_transient

__all__ = ["LOCAL", "FileStat", "FileSystemStore", "LocalStore", "ShardStore", "join", "store_for"]

Progress = Callable[[int], object]
T = TypeVar("T")


@dataclass(frozen=True)
class FileStat:
    """A file's byte size, modification time (seconds since the epoch; None if not kept) and
    ``etag``: what the store guarantees identifies the object's current bytes (S3/GCS: the ETag,
    plus ``@<VersionId>`` on a versioned bucket), None where the store keeps none (local files:
    their identity is the inode and nanosecond times, see :mod:`.verified`)."""

    size: int
    mtime: float | None
    etag: str | None = None


@runtime_checkable
class ShardStore(Protocol):
    """Everything a source needs from storage. Paths are POSIX strings (see :meth:`resolve`)."""

    #: The ``pyarrow.fs.FileSystem`` behind the store; None for local files (what pickles and
    #: what :attr:`DatasetVersion.filesystem <resumable_data.DatasetVersion.filesystem>` holds).
    filesystem: pafs.FileSystem | None
    #: True when the bytes are on this machine (memory maps, disk-bound hashing).
    local: bool

    def resolve(self, path: Any) -> str:
        """The canonical path string of ``path`` on this store."""

    def stat(self, path: Any) -> FileStat | None:
        """Size and mtime of a regular file; None when missing or a directory; a FIFO, socket or
        device raises :class:`~resumable_data._io.NotRegularFileError`."""

    def is_dir(self, path: Any) -> bool:
        """Whether ``path`` is a directory (a prefix holding objects)."""

    def list_files(self, root: Any) -> list[str]:
        """Relative POSIX paths of every file under the directory ``root`` (recursive), sorted."""

    def open_input_file(self, path: Any) -> pa.NativeFile:
        """A random-access file (``read_at``, ``size``); the caller closes it."""

    def open_input_stream(self, path: Any) -> pa.NativeFile:
        """A sequential stream of the file's bytes; the caller closes it."""

    def open_exact(self, path: Any) -> pa.NativeFile:
        """A random-access file like :meth:`open_input_file` for readers rd does not drive (pyarrow's
        IPC readers of shards without a layout): every read refuses fewer bytes than asked where the
        store's own reader cannot tell (remote: a short body is an ``OSError``); the caller closes it."""

    def memory_map(self, path: Any) -> pa.MemoryMappedFile | None:
        """The file memory-mapped (``read_buffer()`` is the whole file, zero copy); None where the
        bytes are not local. The caller keeps it (for :meth:`identity`) and closes it."""

    def identity(self, path: Any, opened: pa.NativeFile | None = None) -> FileIdentity | None:
        """The :class:`~.identity.FileIdentity` of ``opened`` (a file this store opened for
        ``path``), else of ``path``; None when missing."""

    def read_small(self, path: Any, max_bytes: int) -> bytes | None:
        """The bytes of a small file, or None when it does not exist; a file longer than
        ``max_bytes`` raises :class:`~resumable_data.DatasetIntegrityError` (at most
        ``max_bytes + 1`` bytes are read)."""

    def write_atomic(self, path: Any, data: bytes) -> None:
        """Replace the file with ``data`` whole: a reader sees the old bytes or the new."""

    def hash_file(self, path: Any, progress: Progress | None = None, chunks: _io.Chunks | None = None) -> str:
        """xxh3-128 hex digest of the file's bytes, streamed; ``progress(n)`` per chunk, ``chunks(offset,
        data)`` per chunk too (a retried read starts again at offset 0)."""

    def read_range(self, path: Any, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (one ranged request on an object store)."""

    def read_at(self, path: Any, f: pa.NativeFile, length: int, offset: int) -> bytes:
        """``f.read_at(length, offset)`` of ``path``, a file this store opened as ``f``, refusing fewer bytes than
        asked where the store's reader cannot tell (a short body on S3: :class:`~resumable_data.DatasetIntegrityError`
        naming the object, never read as a damaged shard's bytes). Not for
        a handle other threads read at the same time (remote: it seeks)."""

    def retrying(self, path: Any, operation: str, fn: Callable[[], T]) -> T:
        """``fn()`` (a read of ``path`` through a pyarrow reader), retried on transient store
        failures (:mod:`.retry`); local files: ``fn()``."""


def _posix(path: Any) -> str:
    return path.as_posix() if isinstance(path, PurePath) else os.fspath(path)


def join(root: str, rel: str) -> str:
    """``root/rel`` on any store (an empty root, as for files in several buckets, is no prefix)."""
    return rel if root in ("", ".") else f"{root.rstrip('/')}/{rel}"


def _too_large(path: str, max_bytes: int) -> DatasetIntegrityError:
    return DatasetIntegrityError(
        describe(
            "path",
            path,
            f"a small file of at most {max_bytes} bytes (a manifest is about 150 bytes per shard)",
            "check that the path names the dataset's manifest; re-pin with rd.pin(path)",
        )
    )


class LocalStore:
    """Files on this machine's filesystems: memory-mapped reads, durable atomic writes."""

    filesystem = None
    local = True

    def resolve(self, path: Any) -> str:
        return Path(path).resolve().as_posix()

    def stat(self, path: Any) -> FileStat | None:
        try:
            st = os.stat(path)
        except OSError:  # missing, or a path through a non-directory
            return None
        if S_ISDIR(st.st_mode):
            return None
        if not S_ISREG(st.st_mode):
            raise _io.not_regular(path, st.st_mode)
        return FileStat(st.st_size, st.st_mtime)

    def is_dir(self, path: Any) -> bool:
        return Path(path).is_dir()

    def list_files(self, root: Any) -> list[str]:
        base = Path(root)
        found = []
        for dirpath, _dirnames, filenames in os.walk(base):
            for name in filenames:
                found.append((Path(dirpath) / name).relative_to(base).as_posix())
        return sorted(found)

    @staticmethod
    def _open_checked(path: Any, opener: Callable[[str], pa.NativeFile]) -> pa.NativeFile:
        """``opener`` applied to the regular file ``path`` through the checked descriptor."""
        fd = _io.open_regular(path)
        try:
            via = f"/proc/self/fd/{fd}"
            f = opener(via if os.path.exists(via) else os.fspath(path))
            held, got = os.fstat(fd), os.fstat(f.fileno())
            if (held.st_dev, held.st_ino) != (got.st_dev, got.st_ino):  # no /proc: swapped meanwhile
                f.close()
                raise DatasetIntegrityError(
                    describe(
                        "path",
                        _posix(path),
                        "the same file from check to open",
                        "do not replace shard files while rd opens them; retry",
                    )
                )
            return f
        finally:
            os.close(fd)

    def open_input_file(self, path: Any) -> pa.NativeFile:
        return self._open_checked(path, lambda p: pa.OSFile(p, "rb"))

    def open_input_stream(self, path: Any) -> pa.NativeFile:
        return self._open_checked(path, lambda p: pa.OSFile(p, "rb"))

    def open_exact(self, path: Any) -> pa.NativeFile:
        return self.open_input_file(path)  # a local read is short only at the end of the file

    def memory_map(self, path: Any) -> pa.MemoryMappedFile:
        return self._open_checked(path, lambda p: pa.memory_map(p, "r"))

    def identity(self, path: Any, opened: pa.NativeFile | None = None) -> FileIdentity | None:
        try:
            st = os.fstat(opened.fileno()) if opened is not None else os.stat(path)
        except (OSError, ValueError):  # missing, or a closed file
            return None
        return identity_of_stat(st) if S_ISREG(st.st_mode) else None

    def read_small(self, path: Any, max_bytes: int) -> bytes | None:
        try:
            fd = _io.open_regular(path)
            with os.fdopen(fd, "rb") as f:
                data = f.read(max_bytes + 1)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:  # a symlink loop, no permission, an I/O error: not left to escape as OSError
            raise ConfigError(
                describe(
                    "path",
                    _posix(path),
                    f"a readable regular file ({e.strerror or e})",
                    "remove or repair it (a symlink must lead to a regular file rd may read)",
                )
            ) from None
        if len(data) > max_bytes:
            raise _too_large(_posix(path), max_bytes)
        return data

    def write_atomic(self, path: Any, data: bytes) -> None:
        _io.atomic_write(path, data, durable=True)

    def hash_file(self, path: Any, progress: Progress | None = None, chunks: _io.Chunks | None = None) -> str:
        return _io.hash_file(path, progress, chunks)

    def read_range(self, path: Any, offset: int, length: int) -> bytes:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(length)

    def read_at(self, path: Any, f: pa.NativeFile, length: int, offset: int) -> bytes:
        return f.read_at(length, offset)

    def retrying(self, path: Any, operation: str, fn: Callable[[], T]) -> T:
        return fn()

    def __repr__(self) -> str:
        return "LocalStore()"


# the newest stat of each (filesystem, path), taken once by FileSystemStore.identity(): the verify
# that precedes an open already sent the HEAD the identity needs (one request per shard saved)
_RECENT: dict[tuple[int, str], Any] = {}
_MISSING = object()


class FileSystemStore:
    """Files behind a ``pyarrow.fs.FileSystem``: on-demand reads, whole-object writes, every
    request retried on transient failures (:mod:`.retry`)."""

    local = False

    def __init__(self, filesystem: pafs.FileSystem, retries: Retries = DEFAULT_RETRIES) -> None:
        self.filesystem = filesystem
        self.retries = retries

    def resolve(self, path: Any) -> str:
        return _posix(path).rstrip("/")

    def retrying(self, path: Any, operation: str, fn: Callable[[], T]) -> T:
        return call(self.retries, self.resolve(path), operation, fn)

    def _info(self, path: Any) -> pafs.FileInfo:
        return self.retrying(path, "stat", lambda: self.filesystem.get_file_info(self.resolve(path)))

    def stat(self, path: Any) -> FileStat | None:
        st = self._stat(path)
        _RECENT[(id(self.filesystem), self.resolve(path))] = st
        return st

    def _stat(self, path: Any) -> FileStat | None:
        if self.filesystem.type_name in _HEAD_METADATA:
            try:
                return self.retrying(path, "stat (HEAD)", lambda: self._head(path))
            except ResumableDataError:
                raise
            except OSError as exc:  # not transient (a missing object is None, in _head): no permission, ...
                raise _refused(self.resolve(path), "stat (HEAD)", exc) from exc
        info = self._info(path)
        if info.type != pafs.FileType.File:
            return None
        mtime = info.mtime.timestamp() if info.mtime is not None else None
        return FileStat(info.size, mtime)

    def _head(self, path: Any) -> FileStat | None:
        """One HEAD request: size, Last-Modified and the ETag (``get_file_info`` drops the ETag)."""
        try:
            f = self.filesystem.open_input_file(self.resolve(path))
        except FileNotFoundError:
            return None
        except OSError as exc:
            if "not a regular file" in str(exc).lower():  # a bucket
                return None
            raise
        with f:
            return _stat_of_open(f)

    def is_dir(self, path: Any) -> bool:
        return self._info(path).type == pafs.FileType.Directory

    def list_files(self, root: Any) -> list[str]:
        base = self.resolve(root)
        infos = self.retrying(
            root, "listing", lambda: self.filesystem.get_file_info(pafs.FileSelector(base, recursive=True))
        )
        return sorted(posixpath.relpath(i.path, base) for i in infos if i.type == pafs.FileType.File)

    def open_input_file(self, path: Any) -> pa.NativeFile:
        return self._opening(path, lambda where: self.filesystem.open_input_file(where))

    def open_input_stream(self, path: Any) -> pa.NativeFile:
        return self._opening(path, lambda where: self.filesystem.open_input_stream(where))

    def _opening(self, path: Any, fn: Callable[[str], pa.NativeFile]) -> pa.NativeFile:
        """``fn(path)`` (one HEAD on S3), retried; a refusal for good (an object gone, no permission) is
        the rd error naming the object (:func:`_refused`), never a raw ``OSError`` that a caller reading
        the shard's bytes would report as a damaged shard (with a fix that removes a good file)."""
        where = self.resolve(path)
        try:
            return self.retrying(path, "open", lambda: fn(where))
        except ResumableDataError:
            raise
        except OSError as exc:  # not transient: retrying cannot fix it
            raise _refused(where, "open (HEAD)", exc) from exc

    def open_exact(self, path: Any) -> pa.NativeFile:
        where = self.resolve(path)

        def refused(exc: OSError, offset: int, length: int) -> Exception | None:
            """A read refused for good is the store's error (not retried, not a damaged shard)."""
            return None if is_transient(exc) else _refused(where, f"read of bytes [{offset}, {offset + length})", exc)

        return pa.PythonFile(ExactReader(where, self.open_input_file(path), self.retries, refused), mode="r")

    def memory_map(self, path: Any) -> None:
        return None

    def identity(self, path: Any, opened: pa.NativeFile | None = None) -> FileIdentity | None:
        st = _RECENT.pop((id(self.filesystem), self.resolve(path)), _MISSING)
        if st is _MISSING:
            st = self._stat(path)
        if st is None:
            return None
        return FileIdentity(st.size, round(st.mtime * 1e9) if st.mtime is not None else None, etag=st.etag)

    def read_small(self, path: Any, max_bytes: int) -> bytes | None:
        where = self.resolve(path)

        def read() -> bytes | None:
            try:
                f = self.filesystem.open_input_file(where)
            except FileNotFoundError:
                return None
            with f:  # read refusing a short body (a stream's read(n) returns n bytes whatever was sent:
                # a manifest cut short parsed with the reader's buffer for its tail, "damaged, re-pin it")
                n = min(f.size(), max_bytes + 1)
                data = read_exact(f, 0, n, self.retries)
            if data is None:
                raise short_body(where, 0, n, "fewer")
            return bytes(data)

        try:
            data = self.retrying(path, "read", read)
        except ResumableDataError:
            raise
        except OSError as exc:  # not transient: a manifest that vanished mid-read, no permission, ...
            raise _refused(self.resolve(path), "read", exc) from exc
        if data is not None and len(data) > max_bytes:
            raise _too_large(self.resolve(path), max_bytes)
        return data

    def write_atomic(self, path: Any, data: bytes) -> None:
        def write() -> None:
            with self.filesystem.open_output_stream(self.resolve(path)) as f:
                f.write(data)

        self.retrying(path, "write", write)

    def hash_file(self, path: Any, progress: Progress | None = None, chunks: _io.Chunks | None = None) -> str:
        """The digest :func:`resumable_data._io.hash_stream` gives the object's bytes, read in
        :data:`~resumable_data._io.HASH_CHUNK_BYTES` chunks that must each arrive whole
        (:func:`~.exact_reads.read_exact`): a short body was hashed with whatever the reader's buffer held, so a
        pin through a store that cut answers short recorded a digest of bytes the object never had
        (and a verify could pass on a stale buffer's copy)."""
        where = self.resolve(path)

        def digest() -> str:  # a retry restarts from the first byte (and the bar counts those bytes again)
            h = xxhash.xxh3_128()
            with self.filesystem.open_input_file(where) as f:
                size, offset = f.size(), 0
                while offset < size:
                    n = min(_io.HASH_CHUNK_BYTES, size - offset)
                    chunk = read_exact(f, offset, n, self.retries)
                    if chunk is None:
                        raise DatasetIntegrityError(
                            describe(
                                "path",
                                where,
                                f"{n} bytes at offset {offset} while hashing it (the store answered with a "
                                "shorter body)",
                                "hash again once the store (or a proxy in front of it) answers whole bodies",
                            )
                        )
                    h.update(chunk)
                    if chunks is not None:
                        chunks(offset, chunk)
                    if progress is not None:
                        progress(n)
                    offset += n
            return h.hexdigest()

        try:
            return self.retrying(path, "hash", digest)
        except ResumableDataError:
            raise
        except OSError as exc:  # not transient (no permission, gone): the store's error, not a raw OSError
            raise _refused(where, "read while hashing it", exc) from exc

    def read_range(self, path: Any, offset: int, length: int) -> bytes:
        return self.read_range_checked(path, offset, length, None)

    def read_at(self, path: Any, f: pa.NativeFile, length: int, offset: int) -> bytes:
        try:
            data = read_exact(f, offset, length, self.retries)
        except OSError as exc:
            if is_transient(exc):
                raise  # the caller's retrying() retries it
            raise _refused(self.resolve(path), f"read of bytes [{offset}, {offset + length})", exc) from exc
        if data is None:
            raise short_body(self.resolve(path), offset, length, "fewer")
        return data

    def read_range_open(self, path: Any, f: pa.NativeFile, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` through ``f``, the handle this store opened for ``path`` when
        the shard was opened: one ranged GET, no HEAD (the handle knows the size from its open).
        Thread-safe (``read_at``: no seek). Nothing here checks that the object is still the one
        opened, nor that the body was whole (pyarrow's S3 file reports the length asked for and
        leaves the rest of its buffer unwritten): only for callers that check every byte they use
        against a digest they trust (a unit's pinned digest, :mod:`.unit_digests`), which then
        turns a replaced object and a short body alike into an rd error. Errors as
        :meth:`read_range_checked` raises them (retried when transient, else an rd error)."""
        where = self.resolve(path)
        operation = f"read of bytes [{offset}, {offset + length})"
        try:
            return self.retrying(
                path, operation, lambda: within_deadline(length, lambda: f.read_at(length, offset), self.retries)
            )
        except ResumableDataError:
            raise
        except OSError as exc:  # not transient: retrying cannot fix it
            raise _refused(where, operation, exc) from exc

    def read_range_checked(self, path: Any, offset: int, length: int, recorded: FileIdentity | None) -> bytes:
        """``length`` bytes at ``offset`` of the object that is still ``recorded`` (its size and, where
        the store gives one, its ETag): one open (a HEAD on S3, whose answer carries both) and one
        ranged GET on the same handle. An object replaced since it was opened is a
        :class:`~resumable_data.DatasetIntegrityError` (:func:`~.identity.changed_error`), never
        its new bytes; the window left is the one request between the HEAD and the GET (pyarrow
        sends no ``If-Match``), which a caller holding a digest of the bytes closes (a unit with a
        pinned digest is read by :meth:`read_range_open`, and by this only to tell why its bytes
        differ: :mod:`.unit_digests`). A body shorter than asked is a
        :class:`~resumable_data.DatasetIntegrityError` too (:func:`~.exact_reads.read_exact`: pyarrow's S3 file
        reports the length asked for and leaves the rest of its buffer unwritten), an object that is
        gone one naming it, and a request the store refuses for good (no permission, an invalid
        range) a :class:`~resumable_data.StoreUnavailableError` naming the cause: no raw ``OSError``."""
        where = self.resolve(path)

        def read() -> bytes:
            with self.filesystem.open_input_file(where) as f:
                if recorded is not None:
                    now = _stat_of_open(f)
                    if now.size != recorded.size or (recorded.etag is not None and now.etag != recorded.etag):
                        mtime = round(now.mtime * 1e9) if now.mtime is not None else None
                        raise changed_error(
                            where,
                            f"before reading bytes [{offset}, {offset + length})",
                            recorded,
                            FileIdentity(now.size, mtime, etag=now.etag),
                        )
                data = read_exact(f, offset, length, self.retries)
            if data is None or len(data) != length:
                raise short_body(where, offset, length, "fewer" if data is None else str(len(data)))
            return data

        operation = f"read of bytes [{offset}, {offset + length})"
        try:
            return self.retrying(path, operation, read)
        except ResumableDataError:
            raise
        except OSError as exc:  # not transient: retrying cannot fix it
            raise _refused(where, operation, exc) from exc

    def __repr__(self) -> str:
        return f"FileSystemStore({self.filesystem.type_name})"


#: How pyarrow's S3 errors name an object that is not there (matched lowercased).
_GONE = ("no_such_key", "nosuchkey", "resource_not_found", "http status 404")


def _refused(where: str, operation: str, exc: OSError) -> ResumableDataError:
    """The rd error for a request the store answered with a permanent failure (not retried)."""
    text = str(exc)
    cause = f"{type(exc).__name__}: {text if len(text) <= 300 else text[:297] + '...'}"
    low = text.lower()
    if isinstance(exc, FileNotFoundError) or any(t in low for t in _GONE):
        return DatasetIntegrityError(
            describe(
                "path",
                where,
                f"the object this source opened ({operation} found it gone: {cause})",
                "restore the object (a dataset's objects must not change while a job reads them), "
                "or re-pin deliberately with rd.pin(prefix, filesystem=...)",
            )
        )
    if "http status 416" in low or "invalidrange" in low:
        return DatasetIntegrityError(
            describe(
                "path",
                where,
                f"an object holding the pinned byte range ({operation} was refused: {cause})",
                "restore the object, or re-pin deliberately with rd.pin(prefix, filesystem=...)",
            )
        )
    return StoreUnavailableError(
        describe(
            "path",
            where,
            f"an object the store lets this process read ({operation} was refused: {cause}); "
            "nothing was delivered from this read",
            "check the credentials and permissions for the object (an expired token, a changed "
            "bucket policy) and the endpoint, then iterate again (or resume from the saved state)",
        )
    )


def _stat_of_open(f: pa.NativeFile) -> FileStat:
    """Size, Last-Modified and ETag (with the version id where kept) of an opened remote file."""
    size, meta = f.size(), f.metadata()
    meta = {k.lower(): v.decode("utf-8", "replace") for k, v in meta.items()}
    etag = meta.get("etag") or None
    if etag is not None and meta.get("x-amz-version-id"):
        etag = f"{etag}@{meta['x-amz-version-id']}"
    return FileStat(size, _http_time(meta.get("last-modified")), etag)


# Filesystems whose opened files carry the object's HTTP metadata (ETag, Last-Modified).
_HEAD_METADATA = frozenset({"s3", "gcs"})


def _http_time(value: str | None) -> float | None:
    """Seconds since the epoch of an ISO-8601 or RFC 1123 time (Last-Modified), None if absent."""
    if not value:
        return None
    from datetime import datetime
    from email.utils import parsedate_to_datetime

    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        try:
            return parsedate_to_datetime(value).timestamp()
        except (TypeError, ValueError):
            return None


#: The local store (stateless: one instance serves every caller).
LOCAL = LocalStore()


def store_for(filesystem: Any, retries: Retries = DEFAULT_RETRIES) -> ShardStore:
    """The store of a ``filesystem=`` argument: None or ``LocalFileSystem`` -> :data:`LOCAL`;
    ``retries``: how a remote store retries transient failures (:mod:`.retry`)."""
    if filesystem is None or isinstance(filesystem, pafs.LocalFileSystem):
        return LOCAL
    if not isinstance(filesystem, pafs.FileSystem):
        raise ConfigError(
            describe(
                "filesystem",
                type(filesystem).__name__,
                "a pyarrow.fs.FileSystem",
                "pass e.g. pyarrow.fs.S3FileSystem(...) (fsspec filesystems: wrap in "
                "pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(fs)))",
            )
        )
    return FileSystemStore(filesystem, retries)
