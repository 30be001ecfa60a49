"""The identity check around every read of memory-mapped shards, for all the shards one read touches in one call.

Algorithm: a :class:`ShardWatch` holds, for each memory-mapped shard of a source, its name and
the identity recorded when it was opened (size, ``mtime`` in ns, inode, device major and minor).
:meth:`ShardWatch.first_changed` first runs one compiled loop that calls libc's ``statx`` on the
name of each shard the read touches (Linux, glibc >= 2.28; the function's address is an argument,
so the loop is cached on disk like every other kernel of the package). The name is looked up from
the source's root directory, held open (one descriptor per source, not per shard: a walk of one
or two path components instead of the whole path, ~0.4 us a shard against ~0.6 us by full path
and ~1.3 us by ``os.stat``). The loop clears a shard only when its name gives the recorded device
and inode with the recorded size and mtime, that is when the mapped file itself is seen unchanged;
at the first shard it cannot clear (its identity differs, its name is gone or gives another file,
``statx`` failed: a seccomp profile, an old kernel, a closed directory) the check of
:func:`~.identity.first_changed_at` runs in Python, by the full path, and its answer is the one
acted on, exactly as before this loop existed. Where there is no ``statx`` (another OS, an old
libc) every check is that Python one.

What must be refused, and why a name is enough. A memory map holds the pages of one inode: a
rename over the shard's name (``os.replace``, what every atomic writer does) leaves that inode
whole, reachable by no name, so nothing opened afterwards can write it and the map keeps reading
the bytes that were opened and verified: harmless, not refused (a process that opens the name
again, a spawn worker, compares the pickled identity and refuses the new file). An in-place write
(same inode, a new mtime) or a truncation (a new size; reading a page past the new end would be
SIGBUS) changes the inode the name still gives: refused, before the read for a truncation, after
it for a write during it. What no check by name can see is a write through a descriptor opened on
the old file before it was renamed away.

Why not a descriptor per shard (``fstat``, ~0.2 us, which would watch the mapped inode whatever
its name): a source of thousands of shards would hold thousands of descriptors in every worker
process, against the usual limit of 1,024 open files; this check holds one per source
(``tests/sources/test_identity.py`` counts them).

Guarantee: :meth:`ShardWatch.first_changed` returns what :func:`~.identity.first_changed_at`
returns for the same shards (tests compare the two on unchanged, rewritten, shortened,
renamed-away and replaced files, compiled and not): the compiled loop only ever decides that a
shard's mapped file is unchanged, from that file's own identity, never that a shard changed.

Cost: per check one call into the compiled loop (~1 us) plus one ``statx`` a shard touched;
memory: the names' bytes, 56 bytes a shard and one descriptor a source; nothing to restore
(rebuilt when a source is opened or unpickled).
"""

from __future__ import annotations

import ctypes
import os
import sys
import weakref
from collections.abc import Sequence

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from resumable_data.sources.identity import WatchEntry, first_changed_at

__all__ = ["ShardWatch", "statx_address"]

_AT_FDCWD = -100
_STATX_WANT = 0x40 | 0x100 | 0x200  # STATX_MTIME | STATX_INO | STATX_SIZE
_BUF_WORDS = 32  # struct statx is 256 bytes on every architecture


def statx_address() -> int:
    """The address of libc's ``statx``, 0 where there is none (not Linux, or a libc without it)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        fn = ctypes.CDLL(None).statx
    except (AttributeError, OSError):
        return 0
    return ctypes.cast(fn, ctypes.c_void_p).value or 0


_STATX = statx_address()


@intrinsic
def _statx(typingctx, fn, dirfd, paths, at, buf):  # pragma: no cover - compiled
    """``statx(dirfd, &paths[at], 0, STATX_MTIME | STATX_INO | STATX_SIZE, buf)`` through the
    function at address ``fn`` (a uint8 buffer of NUL-terminated names, a 256-byte int64 ``buf``);
    its return code."""

    def codegen(context, builder, sig, args):
        fn_, dirfd_, paths_, at_, buf_ = args
        i32, i8p = ir.IntType(32), ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(i32, [i32, i8p, i32, i32, i8p])
        call = builder.inttoptr(fn_, fnty.as_pointer())
        name = builder.gep(context.make_array(sig.args[2])(context, builder, paths_).data, [at_])
        out = builder.bitcast(context.make_array(sig.args[4])(context, builder, buf_).data, i8p)
        flags, want = ir.Constant(i32, 0), ir.Constant(i32, _STATX_WANT)
        rc = builder.call(call, [builder.trunc(dirfd_, i32), name, flags, want, out])
        return builder.sext(rc, ir.IntType(64))

    if not (isinstance(paths, types.Array) and paths.dtype == types.uint8 and paths.layout == "C"):
        return None
    if not (isinstance(buf, types.Array) and buf.dtype == types.int64 and buf.layout == "C"):
        return None
    return types.int64(types.int64, types.int64, paths, types.int64, buf), codegen


@njit(cache=True, nogil=True)
def _first_unclear(fn, which, paths, want):  # pragma: no cover - compiled
    """The first shard of ``which`` that this loop cannot clear, else -1. ``want[k]``: the offset
    of shard ``k``'s name in ``paths`` (< 0: not watched), the directory it is relative to, then
    its recorded size, mtime in ns, inode, device major and minor. A shard is cleared only when
    its name gives the recorded device and inode with the recorded size and mtime: the mapped
    file itself, unchanged."""
    buf = np.empty(_BUF_WORDS, dtype=np.int64)
    half = buf.view(np.uint32)
    for j in range(which.shape[0]):
        k = which[j]
        w = want[k]
        if w[0] < 0:
            continue
        if _statx(fn, w[1], paths, w[0], buf) != 0 or (half[0] & _STATX_WANT) != _STATX_WANT:
            return k
        if buf[4] != w[4] or half[34] != w[5] or half[35] != w[6]:
            return k
        if buf[5] != w[2] or buf[14] * 1_000_000_000 + half[30] != w[3]:
            return k
    return -1


class _Directory:
    """A directory held open, names under it looked up from it (closed when closed or collected)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        self.close = weakref.finalize(self, os.close, self.fd)


class ShardWatch:
    """The memory-mapped shards of one source, checked by name (see the module docstring).
    ``entries``: per shard, :func:`~.identity.watch_entry` or None (not watched); ``root``: the
    directory whose names the compiled loop looks up from a descriptor (its shards' common root;
    None: full paths); ``compiled``: False runs the Python check only."""

    def __init__(self, entries: Sequence[WatchEntry | None], root: str | None = None, compiled: bool = True) -> None:
        self._entries = list(entries)
        self._fn = _STATX if compiled else 0
        self._dirs: list[_Directory] = []
        prefix = None
        if self._fn and root not in (None, "", "."):
            try:
                self._dirs.append(_Directory(root))
                prefix = f"{root.rstrip('/')}/"
            except OSError:  # full paths then
                pass
        want = np.full((len(self._entries), 7), -1, dtype=np.int64)
        blob = bytearray()
        for k, e in enumerate(self._entries):
            if e is None:
                continue
            path, dev, ino, mtime_ns, size = e
            if dev is None or ino is None:
                continue  # no inode to compare: never found changed, in Python either
            if mtime_ns is None:  # never a mapped local file (its fstat records all): left to Python
                self._fn = 0
                continue
            relative = prefix is not None and path.startswith(prefix)
            name = path[len(prefix) :] if relative and prefix is not None else path
            dirfd = self._dirs[0].fd if relative else _AT_FDCWD
            ino64 = int(np.array([ino], dtype=np.uint64).view(np.int64)[0])
            want[k] = (len(blob), dirfd, size, mtime_ns, ino64, os.major(dev), os.minor(dev))
            blob += os.fsencode(name) + b"\0"
        self._paths = np.frombuffer(bytes(blob) or b"\0", dtype=np.uint8)
        self._want = want

    @classmethod
    def joined(cls, watches: Sequence[ShardWatch]) -> ShardWatch:
        """One watch over the shards of ``watches``, in order (``rd.Mixture``'s view): their
        names and open directories, shared (closing a source closes its directory for the view too)."""
        out = cls.__new__(cls)
        out._entries = [e for w in watches for e in w._entries]
        out._fn = _STATX if watches and all(w._fn for w in watches) else 0
        out._dirs = [d for w in watches for d in w._dirs]
        offsets = np.cumsum([0] + [len(w._paths) for w in watches[:-1]], dtype=np.int64)
        parts = []
        for w, o in zip(watches, offsets.tolist()):
            part = w._want.copy()
            part[part[:, 0] >= 0, 0] += o
            parts.append(part)
        out._want = np.concatenate(parts) if parts else np.full((0, 7), -1, dtype=np.int64)
        out._paths = np.concatenate([w._paths for w in watches]) if watches else np.zeros(1, dtype=np.uint8)
        return out

    @property
    def compiled(self) -> bool:
        """Whether the compiled loop checks the shards first (else only the Python check runs)."""
        return bool(self._fn)

    @property
    def entries(self) -> list[WatchEntry | None]:
        """Per shard, its name and recorded identity (None: not watched by name)."""
        return self._entries

    def first_changed(self, which: np.ndarray) -> int:
        """The first shard of ``which`` (int64 shard indexes) whose file
        :func:`~.identity.unchanged_at` finds changed, else -1."""
        if self._fn and _first_unclear(self._fn, which, self._paths, self._want) < 0:
            return -1
        return first_changed_at(self._entries, which.tolist())

    def close(self) -> None:
        """Close the directories this watch opened (the Python check by full path goes on)."""
        for d in self._dirs:
            d.close()
        self._fn = 0
