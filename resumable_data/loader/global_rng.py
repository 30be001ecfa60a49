"""Seeding, saving and restoring the global generators cheaply, bit-identically.

What users get. Seeding the globals from a 64-bit ``key`` means exactly what
``random.seed(key)``, ``np.random.seed(np.array([key & 0xFFFFFFFF, key >> 32], np.uint32))`` and
``torch.manual_seed(key & (2**63 - 1))`` give: every draw afterwards is the same number.

Algorithm. Python's ``random.seed(int)`` and numpy's legacy ``seed(array)`` both run MT19937's
``init_by_array`` over the key's 32-bit words (Python: as many words as the key needs; numpy: the
two words given), so one compiled kernel computes the 624-word state of every key of a batch at
once (one call per batch), and each sample's state is then *copied* into the two generators
through numpy views of their state memory (the ``mt19937_state`` struct numpy exposes through
``bit_generator.ctypes``, and the ``RandomObject`` of CPython's ``random``). What the seeding
functions also reset is reset here: Python's ``gauss_next``; numpy's cached Gaussian
(``has_gauss``), which is reset with a cheap ``np.random.seed(0)`` only when a draw since the
last seeding could have set it (the state is not byte-identical to the one written). torch's
generator is seeded with ``manual_seed`` (already cheap). :class:`GlobalRNGGuard` saves and
restores the three states the same way (numpy's cached Gaussian is read by one probing draw).

Safety. The memory layouts are probed once per process, against the real ``random.seed`` /
``np.random.seed`` / ``get_state``, on several keys; if anything differs (another interpreter, a
free-threaded build, a numpy whose layout changed) the slow, always-correct route
(``random.seed``, ``np.random.seed``, ``getstate``/``setstate``) is used instead, silently
identical in results. ``tests/loader/test_global_rng.py`` checks both routes against each other.

Cost (2 shared CPUs, measured side by side with the reference route, ``timeit``): seeding a
batch of 16 about 3x cheaper per sample (kernel share + two copies + ``manual_seed``, 10-22 us
under heavy load vs 31-69 us), the guard about 5x (21-48 us a batch vs ~200 us). The end-to-end
figure is the "per-sample seeding costs" line of ``benchmarks/bench_dropin.py``.
"""

from __future__ import annotations

import ctypes
import random
import sys

import numpy as np
import torch
from numba import njit

__all__ = ["GlobalRNGGuard", "GlobalSeeder", "mt_states", "seed_globals", "seed_globals_reference"]

_N = 624
_MASK63 = (1 << 63) - 1


def _init_genrand(s: int) -> np.ndarray:
    mt = np.empty(_N, dtype=np.uint32)
    mt[0] = s
    for i in range(1, _N):
        prev = int(mt[i - 1])
        mt[i] = (1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF
    return mt


_BASE = _init_genrand(19650218)  # init_by_array's starting state (a constant)


@njit(cache=True, nogil=True)
def _init_by_array2(base, lo, hi, out):  # pragma: no cover - compiled
    """init_by_array over the two-word keys ``[lo[b], hi[b]]`` into ``out[:, 1:625]``; the keys
    advance in lockstep (same indices), so the inner loop runs over keys, contiguous in memory
    and free of dependency chains."""
    n = 624
    nb = lo.shape[0]
    m = np.uint64(0xFFFFFFFF)
    mt = np.empty((n, nb), dtype=np.uint32)
    for t in range(n):
        for b in range(nb):
            mt[t, b] = base[t]
    i = 1
    j = 0
    for _ in range(n):
        for b in range(nb):
            prev = np.uint64(mt[i - 1, b])
            w = np.uint64(lo[b]) if j == 0 else np.uint64(hi[b])
            mt[i, b] = np.uint32(((np.uint64(mt[i, b]) ^ (((prev ^ (prev >> np.uint64(30))) * np.uint64(1664525)) & m)) + w + np.uint64(j)) & m)
        i += 1
        j = 1 - j
        if i >= n:
            for b in range(nb):
                mt[0, b] = mt[n - 1, b]
            i = 1
    for _ in range(n - 1):
        for b in range(nb):
            prev = np.uint64(mt[i - 1, b])
            mt[i, b] = np.uint32(((np.uint64(mt[i, b]) ^ (((prev ^ (prev >> np.uint64(30))) * np.uint64(1566083941)) & m)) - np.uint64(i)) & m)
        i += 1
        if i >= n:
            for b in range(nb):
                mt[0, b] = mt[n - 1, b]
            i = 1
    for b in range(nb):
        mt[0, b] = np.uint32(0x80000000)
        out[b, 0] = np.uint32(n)  # Python's index field, before the state
        out[b, n + 1] = np.uint32(n)  # numpy's pos field, after the state
        for t in range(n):
            out[b, t + 1] = mt[t, b]


def _rows(keys: np.ndarray) -> np.ndarray:
    """``[len(keys), 626]`` uint32: ``[624, state[624], 624]`` per key: ``row[:625]`` is
    CPython's ``RandomObject`` (index, state) and ``row[1:]`` numpy's ``mt19937_state`` (key, pos)."""
    keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
    out = np.empty((keys.size, _N + 2), dtype=np.uint32)
    lo = (keys & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    hi = (keys >> np.uint64(32)).astype(np.uint32)
    _init_by_array2(_BASE, lo, hi, out)
    return out


def mt_states(keys: np.ndarray) -> np.ndarray:
    """MT19937 states (``[len(keys), 624]`` uint32) after ``init_by_array`` of each 64-bit key
    as two words (numpy's ``seed([lo, hi])``; Python's ``random.seed(key)`` for ``key >= 2**32``)."""
    return _rows(keys)[:, 1:_N + 1]


def _view(address: int, count: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_uint32 * count).from_address(address))


class _Layout:
    """Probed views of the two MT19937 states, or None where the probe failed."""

    def __init__(self) -> None:
        self.py: np.ndarray | None = None  # [index, state[624]] of random._inst
        self.np: np.ndarray | None = None  # [key[624], pos] of numpy's global MT19937
        # the objects the views point into, held so that they stay alive, and compared with the
        # current ones on every use (np.random.set_bit_generator swaps numpy's; see _layout)
        self.py_owner = random._inst
        self.np_owner = np.random.mtrand._rand._bit_generator
        self._probe_python()
        self._probe_numpy()

    def current(self) -> bool:
        """Whether the probed generators are still the global ones."""
        return random._inst is self.py_owner and np.random.mtrand._rand._bit_generator is self.np_owner

    def _probe_python(self) -> None:
        inst = random._inst
        if sys.implementation.name != "cpython" or getattr(sys, "_is_gil_enabled", lambda: True)() is False:
            return
        saved = inst.getstate()
        try:
            view = _view(id(inst) + object.__basicsize__, _N + 1)
            for key in (0x9E3779B97F4A7C15, 1 << 32, 0xFFFFFFFFFFFFFFFF, 123456789012345):  # all >= 2**32
                random.seed(key)
                st = inst.getstate()[1]
                if view[0] != st[_N] or view[1:].tolist() != list(st[:_N]):
                    return
                if not np.array_equal(view[1:], mt_states(np.array([key], np.uint64))[0]):
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
            for key in (0x9E3779B97F4A7C15, 7, (1 << 40) + 3):
                np.random.seed(np.array([key & 0xFFFFFFFF, key >> 32], dtype=np.uint32))
                _, st, pos, _, _ = rs.get_state()
                if int(view[_N]) != pos or not np.array_equal(view[:_N], st):
                    return
                if not np.array_equal(view[:_N], mt_states(np.array([key], np.uint64))[0]):
                    return
            self.np = view
        finally:
            rs.set_state(saved)


_LAYOUT: _Layout | None = None


def _layout() -> _Layout:
    global _LAYOUT
    if _LAYOUT is None or not _LAYOUT.current():  # probed once, again after a generator was swapped
        _LAYOUT = _Layout()
    return _LAYOUT


def seed_globals(key: int) -> None:
    """Seed Python's ``random``, ``numpy.random`` and torch's CPU generator from ``key``."""
    GlobalSeeder(np.array([key], dtype=np.uint64)).seed(0)


def seed_globals_reference(key: int) -> None:
    """:func:`seed_globals` through the seeding functions themselves (what the fast route must equal)."""
    random.seed(key)
    np.random.seed(np.array([key & 0xFFFFFFFF, key >> 32], dtype=np.uint32))
    torch.random.default_generator.manual_seed(key & _MASK63)  # < 2**63: torch.initial_seed() stays a signed int64


_ROW_BYTES = (_N + 2) * 4
_STATE_BYTES = (_N + 1) * 4
_memmove = ctypes.memmove


class GlobalSeeder:
    """Seeds the globals for each key of a batch: ``GlobalSeeder(keys).seed(i)`` for the i-th."""

    __slots__ = ("_keys", "_rows", "_base", "_py", "_np", "_npv", "_written", "_manual_seed", "_inst")

    def __init__(self, keys: np.ndarray) -> None:
        lay = _layout()
        keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
        self._keys = keys.tolist()
        self._py = 0 if lay.py is None else lay.py.ctypes.data  # addresses; 0: the reference route
        self._np = 0 if lay.np is None else lay.np.ctypes.data
        self._npv = lay.np
        self._rows = _rows(keys) if (self._py or self._np) and keys.size else None
        self._base = 0 if self._rows is None else self._rows.ctypes.data
        self._written: bytes | None = None  # the numpy state last written, while no draw could have changed it
        self._manual_seed = torch.random.default_generator.manual_seed
        self._inst = random._inst

    def seed(self, i: int) -> None:
        key = self._keys[i]
        src = self._base + i * _ROW_BYTES
        if self._py and key >> 32:
            _memmove(self._py, src, _STATE_BYTES)  # [index, state]
            self._inst.gauss_next = None
        else:  # a key below 2**32 is one word for Python: its own route (one key in 2**32)
            random.seed(key)
        if self._np:
            npv = self._npv
            if self._written is None or npv.tobytes() != self._written:
                np.random.seed(0)  # resets the cached Gaussian a draw may have left
            _memmove(self._np, src + 4, _STATE_BYTES)  # [key, pos]
            self._written = npv.tobytes()
        else:
            np.random.seed(np.array([key & 0xFFFFFFFF, key >> 32], dtype=np.uint32))
        self._manual_seed(key & _MASK63)


class GlobalRNGGuard:
    """Saves the global generator states on enter and restores them on exit (exactly)."""

    __slots__ = ("_py", "_np", "_gauss", "_torch", "_lay")

    def __enter__(self) -> GlobalRNGGuard:
        lay = self._lay = _layout()
        if lay.py is not None:
            self._py = (lay.py.copy(), random._inst.gauss_next)
        else:
            self._py = random.getstate()
        if lay.np is not None:
            before = lay.np.tobytes()
            g = np.random.standard_normal()  # a cached Gaussian is returned without touching the MT state
            self._gauss = g if lay.np.tobytes() == before else None
            self._np = np.frombuffer(before, dtype=np.uint32)
        else:
            self._np = np.random.get_state()
        self._torch = torch.random.default_generator.get_state()
        return self

    def __exit__(self, *exc) -> None:
        lay = self._lay
        if lay.py is not None:
            state, gauss = self._py
            lay.py[:] = state
            random._inst.gauss_next = gauss
        else:
            random.setstate(self._py)
        if lay.np is not None:
            if self._gauss is None:
                np.random.seed(0)  # no cached Gaussian, as before the batch
                lay.np[:] = self._np
            else:
                np.random.set_state(("MT19937", self._np[:_N], int(self._np[_N]), 1, float(self._gauss)))
        else:
            np.random.set_state(self._np)
        torch.random.default_generator.set_state(self._torch)
