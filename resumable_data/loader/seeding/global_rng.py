"""Seeding, saving and restoring the global generators cheaply, bit-identically.

What users get. Seeding the globals from a 64-bit ``key`` means exactly what
:func:`~.seed_copy.seed_globals_reference` gives for the run's seeding version
(:mod:`.sample_seeding`): version 3, ``random.setstate`` / ``np.random.set_state`` / torch's
``set_state`` of each generator's SplitMix64 state words; versions 1-2, ``random.seed(key)``,
``np.random.seed`` of the version's two words and ``torch.manual_seed(key & (2**63 - 1))``. Every
draw afterwards is the same number, and ``random.getstate()``, ``np.random.get_state()``,
``torch.get_rng_state()`` and ``torch.initial_seed()`` are the same too.

Algorithm. Seeding is a pure function of the key, so one compiled kernel (``mt19937.py``)
computes, for every key of a batch at once (one call per batch), the bytes each generator holds
after seeding: the MT19937 states of Python's ``RandomObject`` and of numpy's ``mt19937_state``,
and torch's ``CPUGeneratorImpl`` region (seed, engine, disengaged cached normals;
``torch_rng_memory.py``). :class:`GlobalSeeder` then *copies* (``seed_copy.py``) each sample's bytes into
the generators through byte views of their memory: one memoryview slice assignment per
generator (the slices are made once per pooled buffer), Python's ``gauss_next`` reset, and
numpy's cached Gaussian (``has_gauss``, ``gauss`` of the global ``RandomState``, found at its
probed offset) cleared only when set (reading is cheaper than writing). :class:`GlobalRNGGuard`
saves the three states (and the caches) as bytes and writes them back (one slice assignment each:
cheaper than comparing 2.5 KB first).

Lazy seeding. :class:`UnseededWatch` leaves Python's and numpy's generators unseeded while user
code runs and tells afterwards whether anything drew from them: it saves both states, clears both
cached Gaussians (so that even a draw of a cached value moves a state) and compares the whole
states and the caches afterwards; whatever the answer, it puts states and caches back. The
fetcher (``fetch.py``) uses it to fetch a batch unseeded first and to fetch it again seeded, once
per process, when a draw is seen; torch's generator is seeded per sample meanwhile
(``GlobalSeeder(keys, torch_only=True)``: the kernel's torch part and one copy).

Safety. The memory layouts are probed once per process, against the real ``random.seed`` /
``np.random.seed`` / ``manual_seed`` / ``get_state`` / ``set_state``, on several keys and values,
and re-probed at the next batch when a global generator was swapped (a swap inside a batch sends the
rest of that batch through the seeding functions); if anything differs (another interpreter, a
free-threaded build, a numpy or torch whose layout changed) that generator takes the slow,
always-correct route (the version's seeding functions or public setters,
``getstate``/``get_state`` and their setters), identical in results, and seeding is eager.
``tests/loader/test_global_rng.py`` and ``test_torch_rng_memory.py`` check the routes against
each other. A restore costs one copy per generator.

Cost (batch 16, the development machine; micro-benchmarks of the parts, not the end-to-end
figure): the version-3 kernel 2.2 us a batch (``time.perf_counter`` medians, 2026-12-02; version
2's was 19-21 us the same morning). Earlier figures (2 CPUs shared with other jobs, CPU time by
``time.process_time``, medians of 7 interleaved rounds): the kernel 24 us a batch under version 1 (Python's and numpy's one shared ``init_by_array``, 1,247 lockstep
steps, ~11 us, torch's 623 ~14 us, about half of it the stores into the rows), the 16 seedings
10.5 us (0.66 us a sample for all three generators, where ``manual_seed`` alone is 1.46 us), the
guard 2.8 us a batch; before this rewrite 39 us + 16 x 4 us + 10 us. Version 2's separate numpy
state (twice the lanes, twice the stores) costs the kernel about 10 us more a batch of 16
(``time.perf_counter`` medians, docs/dropin.md). The end-to-end figure is the "per-sample seeding costs" line
of ``benchmarks/bench_dropin.py``.
"""

from __future__ import annotations

import ctypes
import random
import struct
import sys

import numpy as np
import torch

from resumable_data.errors import ConfigError, describe
from resumable_data.loader.seeding import torch_rng_memory
from resumable_data.loader.seeding.mt19937 import NP_COL, PYNP_WORDS, fill_rows, mt_states, seed_rows
from resumable_data.loader.seeding.mt19937 import N as _N
from resumable_data.loader.seeding.sample_seeding import (
    HASHED_VERSIONS,
    READABLE_SEEDING_VERSIONS,
    SEEDING_VERSION,
    numpy_seed_words,
)
from resumable_data.loader.seeding.seed_copy import RowBuffer, seed_function, seed_globals_reference

__all__ = [
    "GlobalRNGGuard",
    "GlobalSeeder",
    "UnseededWatch",
    "layout",
    "lazy_seeding_available",
    "mt_states",
    "seed_globals",
    "seed_globals_reference",
    "warm_seeding",
]


def _view(address: int, count: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_uint32 * count).from_address(address))


class _Layout:
    """Probed views of the two MT19937 states, or None where the probe failed."""

    def __init__(self) -> None:
        self.py: np.ndarray | None = None  # [index, state[624]] of random._inst
        self.np: np.ndarray | None = None  # [key[624], pos] of numpy's global MT19937
        #: numpy's cached Gaussian (``has_gauss``, ``gauss`` of the global ``RandomState``); None
        #: where the probe failed (``np`` is then None too: the numpy route needs both)
        self.gauss: _Gauss | None = None
        # the objects the views point into, held so that they stay alive, and compared with the
        # current ones on every use (np.random.set_bit_generator swaps numpy's; see _layout)
        self.py_owner = random._inst
        self.rs_owner = np.random.mtrand._rand
        self.np_owner = self.rs_owner._bit_generator
        self._probe_python()
        self._probe_numpy()
        self._probe_gauss()
        if self.gauss is None:
            self.np = None
        #: torch's default generator's region (``torch_rng_memory``), or None: ``manual_seed`` /
        #: ``get_state`` / ``set_state``
        self.torch = torch_rng_memory.probe()
        # byte views written by one slice assignment each (what a seeding costs)
        self.py_mv = None if self.py is None else memoryview(self.py.view(np.uint8))
        self.np_mv = None if self.np is None else memoryview(self.np.view(np.uint8))
        self.torch_mv = None if self.torch is None else memoryview(self.torch.view)
        #: reusable row buffers by (keys, words per row): see :class:`~.seed_copy.RowBuffer`
        self.pool: dict[tuple[int, int], list[RowBuffer]] = {}
        #: every generator reached through its memory: (torch's rows spec, row width, torch's bytes,
        #: the pools of that width by key count), what :class:`GlobalSeeder`'s short route needs; else None
        self.rows = (
            None
            if self.py is None or self.np is None or self.torch is None
            else (self.torch.rows_spec, PYNP_WORDS + self.torch.template.size, self.torch.size, {})
        )
        #: numpy's cached Gaussian as two 64-bit words (flag word, value): read before clearing
        self.gauss_bytes = (
            None
            if self.gauss is None
            else memoryview(np.ctypeslib.as_array((ctypes.c_uint8 * 16).from_address(ctypes.addressof(self.gauss))))
        )
        self.gauss_words = None if self.gauss is None else self.gauss_bytes.cast("Q")

    @property
    def fast(self) -> bool:
        """Whether both generators are reached through their memory (what lazy seeding needs)."""
        return self.py is not None and self.np is not None

    def current(self) -> bool:
        """Whether the probed generators are still the global ones."""
        rs = np.random.mtrand._rand
        return (
            random._inst is self.py_owner
            and rs is self.rs_owner
            and rs._bit_generator is self.np_owner
            and (self.torch is None or self.torch.current())
        )

    def _probe_python(self) -> None:
        inst = random._inst
        if sys.implementation.name != "cpython" or getattr(sys, "_is_gil_enabled", lambda: True)() is False:
            return
        saved = inst.getstate()
        try:
            view = _view(id(inst) + object.__basicsize__, _N + 1)
            keys = (0x9E3779B97F4A7C15, 1 << 32, 0xFFFFFFFFFFFFFFFF, 123456789012345)  # all >= 2**32
            rows = seed_rows(np.array(keys, np.uint64))
            for key, row in zip(keys, rows):
                random.seed(key)
                st = inst.getstate()[1]
                if view[0] != st[_N] or view[1:].tolist() != list(st[:_N]) or not np.array_equal(view, row[: _N + 1]):
                    return
            self.py = view
        finally:
            inst.setstate(saved)

    def _probe_numpy(self) -> None:
        rs = np.random.mtrand._rand
        bg = rs._bit_generator
        if type(bg) is not np.random.MT19937:
            return
        saved = rs.get_state()
        try:
            view = _view(bg.ctypes.state_address, _N + 1)
            for key, version in ((0x9E3779B97F4A7C15, 2), (7, 2), ((1 << 40) + 3, 1), (7, 1)):
                np.random.seed(np.array(numpy_seed_words(key, version), dtype=np.uint32))
                _, st, pos, _, _ = rs.get_state()
                if int(view[_N]) != pos or not np.array_equal(view[:_N], st):
                    return
                row = seed_rows(np.array([key], np.uint64), version=version)[0]
                if not np.array_equal(view, row[NP_COL : NP_COL + _N + 1]):
                    return
                if version == 1 and not np.array_equal(view[:_N], mt_states(np.array([key], np.uint64))[0]):
                    return
            self.np = view
        finally:
            rs.set_state(saved)

    def _probe_gauss(self) -> None:
        """Find ``has_gauss`` (an int) and ``gauss`` (the double 8 bytes on) inside the global
        ``RandomState`` object: the one offset where several set states show up, checked by
        writing through it and by a draw of the cached value."""
        rs = self.rs_owner
        if self.np is None:
            return
        saved = rs.get_state()
        try:
            size = type(rs).__basicsize__
            key = saved[1]
            offsets = None
            for value in (1.2345678e-3, -7.5e10, 3.25):
                rs.set_state(("MT19937", key, _N, 1, value))
                raw = ctypes.string_at(id(rs), size)
                hits = {
                    off
                    for off in range(16, size - 15, 8)
                    if struct.unpack_from("=i", raw, off)[0] == 1 and struct.unpack_from("=d", raw, off + 8)[0] == value
                }
                offsets = hits if offsets is None else offsets & hits
            if not offsets or len(offsets) != 1:
                return
            view = _Gauss.from_address(id(rs) + offsets.pop())
            view.has_gauss, view.gauss = 1, 0.625
            if rs.get_state()[3:] != (1, 0.625) or rs.standard_normal() != 0.625 or view.has_gauss != 0:
                return
            view.has_gauss, view.gauss = 0, 0.0
            if rs.get_state()[3:] != (0, 0.0):
                return
            self.gauss = view
        finally:
            rs.set_state(saved)


class _Gauss(ctypes.Structure):
    """numpy's legacy cached Gaussian: ``has_gauss`` and ``gauss`` (natural alignment: 8 bytes on)."""

    _fields_ = [("has_gauss", ctypes.c_int), ("gauss", ctypes.c_double)]


_LAYOUT: _Layout | None = None


def _layout() -> _Layout:
    global _LAYOUT
    if _LAYOUT is None or not _LAYOUT.current():  # probed once, again after a generator was swapped
        _LAYOUT = _Layout()
    return _LAYOUT


#: The probed layout of the global generators (probed again after one was swapped).
layout = _layout


def warm_seeding(version: int) -> None:
    """Probe the generators' memory (once per process) and load seeding ``version``'s compiled
    kernel, computing one key's rows and writing nothing: what the first seeded batch would
    otherwise pay (``fetch.py`` calls it when a loader is built)."""
    lay = _layout()
    seed_rows(np.zeros(1, dtype=np.uint64), True, None if lay.torch is None else lay.torch.rows_spec, version)


def seed_globals(key: int, version: int = SEEDING_VERSION) -> None:
    """Seed Python's ``random``, ``numpy.random`` and torch's CPU generator from ``key`` exactly as
    ``rd.DataLoader`` does before a sample (``rd.sample_context().key``) under seeding ``version``
    (:mod:`.sample_seeding`; the default is a fresh run's, ``rd inspect`` shows a checkpoint's):
    to reproduce one sample's augmentation outside the loader.

    Raises :class:`~resumable_data.ConfigError` for a key outside ``[0, 2**64)`` or an unknown version."""
    if type(key) is bool or not isinstance(key, (int, np.integer)) or not 0 <= int(key) < 1 << 64:
        raise ConfigError(
            describe("key", key, "an integer in [0, 2**64)", "pass a sample's key (rd.sample_context().key)")
        )
    if type(version) is not int or version not in READABLE_SEEDING_VERSIONS:
        raise ConfigError(
            describe(
                "version",
                version,
                f"one of {list(READABLE_SEEDING_VERSIONS)}",
                "pass the run's seeding version (rd inspect shows it), or leave the default",
            )
        )
    seeder = GlobalSeeder(np.array([int(key)], dtype=np.uint64), version=version)
    seeder.seed(0)
    seeder.release()


_POOL_MAX = 4  # buffers kept per size (more are live only while seeders nest or run in threads)


class GlobalSeeder:
    """Seeds the globals for each key of a batch: ``GlobalSeeder(keys).seed(i)`` for the i-th.

    One kernel call computes every key's bytes (``mt19937.fill_rows``) into a pooled
    :class:`~.seed_copy.RowBuffer`; ``seed(i)`` copies them into the generators
    (:func:`~.seed_copy.seed_function`). ``torch_only``: torch's generator only (lazy seeding
    leaves the other two unseeded); ``version``: the seeding version (:mod:`.sample_seeding`).
    :meth:`release` gives the buffer back once no more ``seed`` calls follow (optional: an
    unreleased buffer is simply freed)."""

    __slots__ = ("_buf", "_lay", "_pool", "seed")

    def __init__(self, keys: np.ndarray, torch_only: bool = False, version: int = SEEDING_VERSION) -> None:
        if type(keys) is not np.ndarray or keys.dtype != np.uint64 or keys.ndim != 1:
            keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
        lay = self._lay = _layout()  # the views point into the probed generators, which it keeps alive
        n = keys.shape[0]
        rows = lay.rows
        if (
            rows is not None
            and n
            and version in HASHED_VERSIONS  # the usual case, in fewer steps
            and lay.py_mv is not None
            and lay.np_mv is not None
            and lay.torch is not None
        ):
            spec, width, tbytes, pools = rows
            pool = self._pool = pools.get(n)
            if pool is None:
                pool = self._pool = pools[n] = lay.pool.setdefault((n, width), [])
            buf = self._buf = pool.pop() if pool else RowBuffer(n, width, tbytes)
            fill_rows(keys, buf.rows, not torch_only, spec, version)
            fn = buf.fns.get((torch_only, version))
            buf.keys = keys
            self.seed = fn if fn is not None else seed_function(lay, buf, keys, torch_only, 0, version)
            return
        tlay = lay.torch
        pynp = not torch_only and (lay.py_mv is not None or lay.np_mv is not None)
        small = 0
        self._buf = self._pool = None
        if n and (pynp or tlay is not None):
            width = PYNP_WORDS + (0 if tlay is None else tlay.template.size)
            self._pool = pool = lay.pool.setdefault((n, width), [])
            buf = self._buf = pool.pop() if pool else RowBuffer(n, width, 0 if tlay is None else tlay.size)
            small = fill_rows(keys, buf.rows, pynp, None if tlay is None else tlay.rows_spec, version)
        self.seed = seed_function(lay, self._buf, keys, torch_only, small, version)

    def release(self) -> None:
        """Give the rows buffer back to the pool: ``seed`` must not be called afterwards."""
        buf, self._buf = self._buf, None
        if buf is not None and len(self._pool) < _POOL_MAX:
            self._pool.append(buf)


class _PyNp:
    """The states of Python's and numpy's global generators with their cached Gaussians: saved
    (:meth:`save`) and written back (:meth:`restore`) through the probed memory, or through
    ``getstate``/``get_state`` where the probe failed."""

    __slots__ = ("_lay", "_np", "_npg", "_py", "_pyg")

    def save(self) -> None:
        lay = self._lay = _layout()
        if lay.py is not None:
            self._py = lay.py.tobytes()
            self._pyg = random._inst.gauss_next
        else:
            self._py = random.getstate()
        if lay.np is not None:
            self._np = lay.np.tobytes()
            self._npg = lay.gauss_bytes.tobytes()  # has_gauss, padding, gauss
        else:
            self._np = np.random.get_state()

    @property
    def fast(self) -> bool:
        """Whether the states were saved through the probed memory (lazy seeding can start from them)."""
        return self._lay.fast

    def restore(self) -> None:
        lay = self._lay
        if lay.py is not None:
            lay.py_mv[:] = self._py  # writing 2.5 KB back is cheaper than comparing them first
            lay.py_owner.gauss_next = self._pyg
        else:
            random.setstate(self._py)
        if lay.np is not None:
            lay.np_mv[:] = self._np
            lay.gauss_bytes[:] = self._npg
        else:
            np.random.set_state(self._np)


class GlobalRNGGuard:
    """Saves the global generator states on enter and restores them on exit (exactly): Python's
    and numpy's as :class:`_PyNp`, torch's as the bytes of its region (``torch_rng_memory``),
    written back (unconditionally: cheaper than a comparison), or through ``get_state``/``set_state``."""

    __slots__ = ("_tlay", "_torch", "python_numpy_clean", "saved")

    def __enter__(self) -> GlobalRNGGuard:
        #: Python's and numpy's saved states (an :class:`UnseededWatch` started before any other
        #: code ran may reuse them)
        self.saved = _PyNp()
        self.saved.save()
        tlay = self._tlay = self.saved._lay.torch
        self._torch = torch.random.default_generator.get_state() if tlay is None else tlay.view.tobytes()
        #: set by a caller that knows Python's and numpy's states are the saved ones (a finished
        #: watch found them untouched and no user code ran since): see :meth:`restore_torch_only`
        self.python_numpy_clean = False
        return self

    def __exit__(self, *exc) -> None:
        self.saved.restore()
        self.restore_torch_only()

    def restore_torch_only(self) -> None:
        """Exit when Python's and numpy's states are known to be the saved ones: torch's only."""
        tlay = self._tlay
        if tlay is None:
            torch.random.default_generator.set_state(self._torch)
        else:
            self.saved._lay.torch_mv[:] = self._torch


def lazy_seeding_available() -> bool:
    """Whether :class:`UnseededWatch` can watch both generators here (their memory was found)."""
    return _layout().fast


class UnseededWatch(_PyNp):
    """Python's ``random`` and numpy's global generator left unseeded while user code runs, and
    watched: on construction their states are saved and their cached Gaussians cleared (so that
    a draw of a cached value moves the state too); :meth:`finish` says whether anything drew from
    (or reseeded) either since, comparing the whole states and the caches, and puts states and
    caches back as they were. ``saved``: states saved just before (by a :class:`GlobalRNGGuard`,
    nothing run since) to start from instead of saving again. Needs :func:`lazy_seeding_available`."""

    __slots__ = ()

    def __init__(self, saved: _PyNp | None = None) -> None:
        if saved is None:
            self.save()
        else:
            self._lay, self._py, self._pyg, self._np, self._npg = (
                saved._lay,
                saved._py,
                saved._pyg,
                saved._np,
                saved._npg,
            )
        lay = self._lay
        lay.py_owner.gauss_next = None
        lay.gauss.has_gauss = 0

    def finish(self) -> bool:
        """Whether user code drew since construction; either way the saved states are back."""
        lay = self._lay
        drew = (
            not lay.current()  # a generator was swapped meanwhile: assume the worst
            or lay.py_owner.gauss_next is not None
            or lay.gauss.has_gauss != 0
            or lay.py.tobytes() != self._py
            or lay.np.tobytes() != self._np
        )
        if drew:
            self.restore()
        else:  # the states are untouched: only the cleared caches go back
            lay.py_owner.gauss_next = self._pyg
            lay.gauss_bytes[:] = self._npg
        return drew
