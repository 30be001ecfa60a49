"""The unit cache a rank's processes share: one file per unit, written once, read memory-mapped.

Algorithm: a directory (made fresh per loader by :class:`~.fetcher.Prefetcher`) holds, for
unit ``k`` (its index among the source's units), ``k.unit`` (the unit's bytes, exactly its
span, then :data:`DIGEST_BYTES` of check: the xxh3-128 of those bytes seeded with ``k``
(:func:`seal`); written to a temporary name and renamed: a reader sees the whole file or none), ``k.want``
(the fetcher promised ``k``: it is needed by a step already handed to a worker) and ``k.err`` (the
fetcher's read of ``k`` failed). :meth:`UnitCache.get` returns the memory-mapped bytes of
``k.unit``; while ``k.want`` exists it waits for them; otherwise (never planned, failed, evicted,
waited for longer than :data:`WAIT_S`, or the fetcher's process is gone: a loader worker whose
main process was killed stops waiting within :data:`OWNER_CHECK_S` instead of holding the
killed job's lock for ``WAIT_S`` a unit) it returns None and the caller reads the unit itself,
through the same checked ranged read the fetcher uses, so an error (a store that is down, an
object that changed) is raised by the step that needs the unit, with its own class and message.

Why files, not shared memory: torch's workers are separate processes that start and stop with
each pass; a file per unit needs no handle passing, no lifetime protocol with the workers and no
cleanup after a killed worker, and a mapped file is the page cache's bytes (read without a copy).
An evicted unit is unlinked: a process that mapped it keeps valid bytes (the inode lives on while
mapped); files are never written in place, so a map can never be truncated under a reader.

Files changed by anything but the fetcher (a byte flipped, a file truncated, emptied, replaced by
another unit's file or a link to one, a FIFO, a directory, no permission) are not the fetcher's
unit: a file is opened without following links and without blocking (a FIFO never hangs a reader),
only a regular file is mapped, and its check must be the digest of its bytes seeded with ``k``
(another unit's file, whose check is seeded with its own index, fails too). Such a file is logged
(a warning naming it and the reason for the first of each directory, debug lines for the others),
removed where it can be (never a directory), and ``get`` returns None: the unit is read from the
store by the checked ranged read, so the step delivers the pinned bytes (structural validation
alone cannot see a flipped value).

A file with a right seal and other bytes (the seal is no secret: anyone can compute it) is refused
where the unit has a pinned digest (:mod:`..unit_digests`): ``get(k, digest)`` checks the bytes
against it instead of the seal (the stronger check, one hash per hit), and refuses, logs and removes the file like any other that is not the fetcher's.

Guarantee: :meth:`UnitCache.get` returns the bytes the fetcher wrote for unit ``k`` (read from an
object whose bytes hashed to the unit's pinned digest, or without one whose size and ETag were
checked against the pinned identity; their seal, and the digest where given, checked at every get)
or None; the caller decodes and validates them before any record is used
(:meth:`~..files.OpenShard.decode_unit`).

Cost: a hit is one ``open`` + ``mmap`` (a few microseconds) and one xxh3-128 of the unit's bytes
(tens of GB/s: about 50 us per MiB): the unit's pinned digest where it has one (which a file of
other bytes, another unit's or re-sealed, cannot match), else the seal; 16 bytes per unit on disk; a wait polls every 0.5 to 5 ms.

Abandoned directories. A loader removes its directory when it is closed, which a process killed
with SIGKILL (a preempted job, the OOM killer) never does: each kill left up to ``cache_bytes`` in
the temporary directory. The owner therefore holds an exclusive ``flock`` on the directory's
``.owner`` file for the directory's life (:func:`make_cache_dir`; created under another name,
locked, then renamed, so ``.owner`` never exists unlocked while its owner lives); the kernel
releases it when the process and the loader workers it forked are gone, however they end. Each
new cache directory first sweeps its parent (:func:`sweep_abandoned`): a private (``0700``)
``rd-read-ahead-*`` directory of this user whose ``.owner`` (an empty regular file) can be locked
has no owner left: the files rd writes there are unlinked, by name, and the directory is removed
once empty. A directory without ``.owner`` (being made right now, or made by an earlier version)
is never touched, nor is anything else in the parent, nor a file in a swept directory that rd does
not write (rd deletes only what it made: a ``cache_dir`` pointing into a user's folder, or a
user's folder named like a cache directory, loses nothing), and a FIFO or a link where ``.owner``
should be never blocks or misleads the sweep. The fetcher sweeps again later
(:class:`LaterSweeps`: after :data:`~.fetcher.SWEEP_AGAIN_S`, then twice and four times that, then
every four times that while the loader lives), since a job restarted at once may start while the
killed process's workers still hold its lock (torch's workers notice a dead parent within about 5 s
once their pending steps are done, longer on a loaded machine; a step waiting for a unit the dead
fetcher promised gives up within :data:`OWNER_CHECK_S`). Cost: one listing of the parent per sweep.
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import shutil
import stat
import tempfile
import threading
import time

import pyarrow as pa
import xxhash

from resumable_data.errors import ConfigError, describe
from resumable_data.sources.unit_digests import unit_digest

try:
    import fcntl
except ImportError:  # no flock (Windows): directories are made, never swept
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "DIGEST_BYTES",
    "OWNER",
    "OWNER_CHECK_S",
    "PREFIX",
    "WAIT_S",
    "LaterSweeps",
    "UnitCache",
    "make_cache_dir",
    "process_gone",
    "seal",
    "sweep_abandoned",
]

_log = logging.getLogger(__name__)

#: The name every cache directory starts with.
PREFIX = "rd-read-ahead-"
#: The lock file its owner holds (flock) while the directory is in use.
OWNER = ".owner"

#: The longest a reader waits for a promised unit before reading it itself.
WAIT_S = 120.0
#: How often a wait checks that the fetcher's process (the cache's owner) still lives.
OWNER_CHECK_S = 0.05
#: Bytes of check after each unit's bytes in its file (an xxh3-128 digest).
DIGEST_BYTES = 16
_WARNED: set[str] = set()  # cache directories this process warned about
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def seal(k: int, data: bytes | memoryview) -> bytes:
    """The check the file of unit ``k`` ends with: the xxh3-128 of ``data`` seeded with ``k``."""
    return xxhash.xxh3_128_digest(data, seed=k)


def process_gone(pid: int) -> bool:
    """Whether process ``pid`` has ended: it does not exist or is a zombie (dead, not yet reaped by
    its parent: ``kill(pid, 0)`` alone would call it alive). The caller's own parent is alive."""
    if pid == os.getpid() or pid == os.getppid():
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat_line = f.read()
    except FileNotFoundError:
        return True
    except OSError:  # no /proc (macOS): existence only
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False
    return stat_line[stat_line.rfind(b")") + 2 : stat_line.rfind(b")") + 3] in (b"Z", b"X")


class UnitCache:
    """The cache directory ``root`` (see the module docstring) that process ``owner`` (the
    fetcher's: by default this one) fills; pickles as both."""

    def __init__(self, root: str, owner: int | None = None) -> None:
        self.root = str(root)
        self.owner = os.getpid() if owner is None else int(owner)

    def unit_path(self, k: int) -> str:
        return os.path.join(self.root, f"{k}.unit")

    def want_path(self, k: int) -> str:
        return os.path.join(self.root, f"{k}.want")

    def err_path(self, k: int) -> str:
        return os.path.join(self.root, f"{k}.err")

    def _mapped(self, k: int, digest: str | None = None) -> pa.Buffer | None:
        """Unit ``k``'s bytes from its file, None where there is none, or where it is not what the
        fetcher wrote, or (``digest``: the unit's pinned digest) not the pinned bytes (then logged
        and removed: the caller reads the unit from the store)."""
        path = self.unit_path(k)
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except FileNotFoundError:
            return None
        except OSError as exc:  # a link (ELOOP), no permission, ...
            self._damaged(k, f"cannot be opened as a regular file ({exc.strerror or exc})")
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                self._damaged(k, "is not a regular file", remove=not stat.S_ISDIR(st.st_mode))
                return None
            if st.st_size < DIGEST_BYTES:
                self._damaged(k, f"holds {st.st_size} bytes, fewer than its {DIGEST_BYTES}-byte check")
                return None
            try:
                mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as exc:
                self._damaged(k, f"cannot be mapped ({exc})")
                return None
        finally:
            os.close(fd)
        whole = pa.py_buffer(mapped)  # the buffer keeps the map alive
        body, check = whole.slice(0, whole.size - DIGEST_BYTES), whole.slice(whole.size - DIGEST_BYTES)
        if digest is not None:  # the pinned digest decides alone: one hash, not two, of every hit
            if unit_digest(body) != digest:  # damaged, another unit's file, or re-sealed other bytes
                self._damaged(k, "does not hold the unit's pinned bytes (its pinned unit digest differs)")
                return None
        elif seal(k, body) != check.to_pybytes():
            self._damaged(k, "does not hold the bytes the fetcher wrote for it (its check differs)")
            return None
        return body

    def _damaged(self, k: int, why: str, *, remove: bool = True) -> None:
        """Log that unit ``k``'s file is not the fetcher's, and remove it (``remove``)."""
        path = self.unit_path(k)
        first = self.root not in _WARNED  # one warning per cache directory and process, then debug lines
        _WARNED.add(self.root)
        _log.log(
            logging.WARNING if first else logging.DEBUG,
            "resumable_data: read-ahead cache file %s %s: something other than rd changed the cache "
            "directory; unit %d is read from the store instead (keep other processes and cleaners out of "
            "the read-ahead cache_dir)%s",
            path,
            why,
            k,
            "; further such files of this directory are logged at debug level" if first else "",
        )
        if remove:
            try:
                os.unlink(path)
            except OSError:
                pass

    def get(self, k: int, digest: str | None = None) -> pa.Buffer | None:
        """The bytes of unit ``k`` (waiting while the fetcher has promised them), or None;
        ``digest``: the unit's pinned digest (:mod:`..unit_digests`), which they must hash to."""
        data = self._mapped(k, digest)
        if data is not None:
            return data
        now = time.monotonic()
        deadline, pause, check = now + WAIT_S, 0.0005, now + OWNER_CHECK_S
        while os.path.exists(self.want_path(k)) and now < deadline:
            time.sleep(pause)
            pause = min(pause * 1.5, 0.005)
            data = self._mapped(k, digest)
            if data is not None:
                return data
            now = time.monotonic()
            if now >= check:  # the promise dies with its fetcher: a killed job's worker reads it itself
                if process_gone(self.owner):
                    break
                check = now + OWNER_CHECK_S
        return self._mapped(k, digest)  # written just as the promise was dropped, or None: read it yourself

    def __getstate__(self) -> dict[str, str | int]:
        return {"root": self.root, "owner": self.owner}

    def __setstate__(self, d: dict[str, str | int]) -> None:
        self.root, self.owner = str(d["root"]), int(d["owner"])

    def __repr__(self) -> str:
        return f"UnitCache({self.root!r}, owner={self.owner})"


def make_cache_dir(parent: str | None) -> tuple[str, int | None]:
    """A fresh cache directory under ``parent`` (None: the system's temporary directory), after
    sweeping the abandoned ones there, and the descriptor holding its ``.owner`` lock (None without
    flock); close the descriptor after removing the directory."""
    sweep_abandoned(parent)
    where = parent if parent is not None else tempfile.gettempdir()
    try:
        root = tempfile.mkdtemp(prefix=PREFIX, dir=parent)
    except OSError as exc:
        raise _unusable(where, "create its read-ahead cache directory in", exc) from exc
    if fcntl is None:
        return root, None
    fd = -1
    try:
        fd, tmp = tempfile.mkstemp(prefix=".owner-", dir=root)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a file no one else can know yet: never busy
        os.replace(tmp, os.path.join(root, OWNER))
    except BaseException as exc:
        if fd >= 0:
            os.close(fd)
        shutil.rmtree(root, ignore_errors=True)
        if isinstance(exc, OSError):  # no room, or a filesystem without flock (some NFS mounts: ENOLCK)
            raise _unusable(where, "create and flock the lock file of its cache directory in", exc) from exc
        raise
    return root, fd


def _unusable(where: str, what: str, exc: OSError) -> ConfigError:
    """The error for a ``cache_dir`` this process cannot use (``what`` it could not do there)."""
    return ConfigError(
        describe(
            "cache_dir",
            where,
            f"a directory this process can {what} (it could not: {exc})",
            "pass rd.ReadAhead(cache_dir=...) naming a writable directory on a local disk (one that supports flock)",
        )
    )


def sweep_abandoned(parent: str | None) -> list[str]:
    """Remove the cache directories under ``parent`` whose owner is gone (their ``.owner`` lock
    can be taken); the removed paths. Only what rd made is considered and removed (module
    docstring): a directory named ``rd-read-ahead-*`` of this user, private (mode ``0700``, as
    ``mkdtemp`` makes it), holding an empty regular ``.owner`` file (opened without following a
    link and without blocking: a FIFO never hangs the sweep); of its entries only the names rd
    writes (:func:`_ours`) are unlinked, and the directory is removed once that empties it (a file
    someone else put there keeps it, untouched)."""
    if fcntl is None:
        return []
    parent = parent or tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(parent) if n.startswith(PREFIX)]
    except OSError:
        return []
    removed = []
    for name in names:
        root = os.path.join(parent, name)
        try:
            st = os.lstat(root)
        except OSError:
            continue
        # a symlink, a file, another user's, or a directory rd did not make (mkdtemp's is private)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            continue
        try:
            fd = os.open(os.path.join(root, OWNER), _OPEN_FLAGS)
        except OSError:  # no .owner: being made, or an earlier version's
            continue
        try:
            own = os.fstat(fd)
            if not stat.S_ISREG(own.st_mode) or own.st_uid != os.getuid() or own.st_size:
                continue  # not the empty lock file rd makes
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: its owner (or a worker it forked) is alive
                continue
            if _remove_ours(root):
                removed.append(root)
        finally:
            os.close(fd)
    return removed


_OURS = re.compile(r"(\d+\.(unit|want|err)|\.\d+\.\d+\.tmp|\.owner(-[A-Za-z0-9_]+)?)")


def _ours(name: str) -> bool:
    """Whether ``name`` is one rd writes into a cache directory: ``k.unit``, ``k.want``, ``k.err``,
    a unit's temporary ``.k.thread.tmp``, ``.owner`` and its temporary ``.owner-*``."""
    return _OURS.fullmatch(name) is not None


def _remove_ours(root: str) -> bool:
    """Unlink rd's own files in the abandoned cache directory ``root`` (regular files with rd's
    names; ``.owner`` last) and remove the directory if that empties it; whether it did."""
    try:
        names = os.listdir(root)
    except OSError:
        return False
    for name in sorted(names, key=lambda n: n == OWNER):
        path = os.path.join(root, name)
        try:
            if _ours(name) and stat.S_ISREG(os.lstat(path).st_mode):
                os.unlink(path)
        except OSError:
            pass
    try:
        os.rmdir(root)
    except OSError:  # something rd did not write is left there: so is the directory
        return False
    return True


class LaterSweeps:
    """Sweep ``parent`` again after ``first_s`` seconds, then after twice and four times that, then
    every ``4 * first_s`` on a daemon thread, until :meth:`cancel`. A restarted job's first sweep can
    find the killed job's lock still held by its workers; a later one removes the directory once
    they have gone, however long they take (module docstring). Cost: one listing of ``parent`` a sweep."""

    def __init__(self, parent: str | None, first_s: float) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(parent, first_s), name="rd-read-ahead-sweep", daemon=True
        )
        self._thread.start()

    def _run(self, parent: str | None, first_s: float) -> None:
        delay = first_s
        while not self._stop.wait(delay):
            sweep_abandoned(parent)
            delay = min(delay * 2, 4 * first_s)

    def cancel(self) -> None:
        """Stop sweeping (does not wait for a sweep in progress)."""
        self._stop.set()
