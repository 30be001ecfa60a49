"""The identity check around every read of memory-mapped shards, for all the shards one read touches in one call.

Algorithm: a :class:`ShardWatch` holds, for each memory-mapped shard of a source, its name (the
bytes of its path, NUL-terminated, in one buffer) and the identity recorded when it was opened
(size, ``mtime`` in ns, inode, device major and minor). :meth:`ShardWatch.first_changed` runs the
test of :func:`~.identity.unchanged_at` (while the name gives the recorded device and inode, its
size and mtime must match) for the shards one read touches, in one compiled loop that calls
libc's ``statx`` on each name (Linux, glibc >= 2.28: the function's address is passed to the
loop, so the compiled loop is cached on disk like every other kernel of the package). The loop
answers "nothing changed" or the first shard it could not clear: one whose identity differs, or
one it could not stat (the name is gone, or ``statx`` refused: a seccomp profile, an old
kernel). Then, and only then, the same test runs in Python by ``os.stat``
(:func:`~.identity.first_changed_at`), whose answer is the one acted on: a name that is gone is
no change, exactly as before. Where there is no ``statx`` (another OS, an old libc) every check
runs that Python loop.

Why by name, not by a descriptor kept open: a descriptor per mapped shard would make each check
cheaper (``fstat``, ~0.2 us against ~0.55 us a name here, measured in one loop) and would watch
the mapped inode itself even after its name moved, but a source of thousands of shards would then
hold thousands of descriptors in every worker process, against the usual limit of 1,024 open
files; checking by name holds none (``tests/sources/test_identity.py``). What a name can miss is
harmless to the bytes read: a rename over the name (``os.replace``, what every atomic writer
does) leaves the mapped inode whole and reachable by no name, so the map keeps the bytes that
were opened and verified, and nothing opened after the swap can write them; an in-place write or
truncation changes the inode the name still gives, and is refused. The one write the name cannot
see is one through a descriptor opened on the old file before it was swapped out and written
after (a writer racing its own atomic replace).

Guarantee: :meth:`ShardWatch.first_changed` returns what
:func:`~.identity.first_changed_at` returns for the same shards (tests compare the two on
unchanged, rewritten, shortened, renamed-away and replaced files, compiled and not); the
compiled loop only decides that nothing changed, never that something did.

Cost: per check one call into the compiled loop (~1 us) plus one ``statx`` a shard touched
(~0.55 us, against ~1.3 us for ``os.stat`` and its result object); memory: the paths' bytes
and 40 bytes a shard; nothing to restore (rebuilt from the shards when a source is opened).
"""

from __future__ import annotations

import ctypes
import os
import sys
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
_NONE = -1  # no entry: the shard is not watched by name


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
def _statx(typingctx, fn, paths, at, buf):  # pragma: no cover - compiled
    """``statx(AT_FDCWD, &paths[at], 0, STATX_MTIME | STATX_INO | STATX_SIZE, buf)`` through the
    function at address ``fn`` (a uint8 path buffer, a 256-byte int64 ``buf``); its return code."""

    def codegen(context, builder, sig, args):
        fn_, paths_, at_, buf_ = args
        i32, i8p = ir.IntType(32), ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(i32, [i32, i8p, i32, i32, i8p])
        call = builder.inttoptr(fn_, fnty.as_pointer())
        name = builder.gep(context.make_array(sig.args[1])(context, builder, paths_).data, [at_])
        out = builder.bitcast(context.make_array(sig.args[3])(context, builder, buf_).data, i8p)
        rc = builder.call(
            call, [ir.Constant(i32, _AT_FDCWD), name, ir.Constant(i32, 0), ir.Constant(i32, _STATX_WANT), out]
        )
        return builder.sext(rc, ir.IntType(64))

    if not (isinstance(paths, types.Array) and paths.dtype == types.uint8 and paths.layout == "C"):
        return None
    if not (isinstance(buf, types.Array) and buf.dtype == types.int64 and buf.layout == "C"):
        return None
    return types.int64(types.int64, paths, types.int64, buf), codegen


@njit(cache=True, nogil=True)
def _first_unclear(fn, which, paths, at, want):  # pragma: no cover - compiled
    """The first shard of ``which`` whose name could not be stat'ed or gives the recorded inode
    with another size or mtime, else -1 (``at[k] < 0``: not watched; ``want[k]``: size, mtime in
    ns, inode, device major, device minor)."""
    buf = np.empty(_BUF_WORDS, dtype=np.int64)
    half = buf.view(np.uint32)
    for j in range(which.shape[0]):
        k = which[j]
        if at[k] < 0:
            continue
        if _statx(fn, paths, at[k], buf) != 0 or (half[0] & _STATX_WANT) != _STATX_WANT:
            return k
        w = want[k]
        same_inode = buf[4] == w[2] and half[34] == w[3] and half[35] == w[4]  # the bytes the map reads
        if same_inode and (buf[5] != w[0] or buf[14] * 1_000_000_000 + half[30] != w[1]):
            return k
    return -1


class ShardWatch:
    """The memory-mapped shards of one source, checked by name (see the module docstring)."""

    def __init__(self, entries: Sequence[WatchEntry | None], compiled: bool = True) -> None:
        self._entries = list(entries)
        self._fn = _STATX if compiled else 0
        at = np.full(len(self._entries), _NONE, dtype=np.int64)
        want = np.zeros((len(self._entries), 5), dtype=np.int64)
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
            at[k] = len(blob)
            blob += os.fsencode(path) + b"\0"
            ino64 = np.array([ino], dtype=np.uint64).view(np.int64)[0]
            want[k] = (size, mtime_ns, ino64, os.major(dev), os.minor(dev))
        self._paths = np.frombuffer(bytes(blob) or b"\0", dtype=np.uint8)
        self._at, self._want = at, want
        #: whether the entries are checked by the compiled loop
        self.compiled = bool(self._fn)

    @property
    def entries(self) -> list[WatchEntry | None]:
        """Per shard, its name and recorded identity (None: not watched by name)."""
        return self._entries

    def first_changed(self, which: np.ndarray) -> int:
        """The first shard of ``which`` (int64 shard indexes) whose file
        :func:`~.identity.unchanged_at` finds changed, else -1."""
        if self._fn and _first_unclear(self._fn, which, self._paths, self._at, self._want) < 0:
            return -1
        return first_changed_at(self._entries, which.tolist())
