"""Every read and write of the global generators' memory that seeding does, in four modules: this
one (the probed layout of the three generators, :class:`Layout`), :mod:`.raw_torch` (torch's
region, found and verified), :mod:`.raw_states` (states saved, restored and watched around user
code) and :mod:`.raw_seeding` (a seeding row's bytes copied into the generators).

What they write. Three generators' state, in place, by slice assignment of bytes through views
made once per process (nothing else in the package touches raw memory):

* CPython's ``random._inst`` (a ``RandomObject``): its ``[index, state[624]]`` words, right after
  the ``PyObject`` header; Python's own ``gauss_next`` attribute is set by name;
* numpy's global ``RandomState``'s ``MT19937`` bit generator: ``mt19937_state`` ``[state[624],
  pos]`` at the address numpy itself publishes (``bit_generator.ctypes.state_address``), and the
  ``RandomState``'s cached Gaussian (``has_gauss``, ``gauss``), found at its probed offset;
* torch's default CPU generator: one contiguous region of its ``CPUGeneratorImpl`` (``seed_``,
  the ``mt19937`` engine, the two cached normals), found by :func:`.raw_torch.probe_torch`.

The bytes written are only ever (a) a seeding row (``mt19937.fill_rows``: exactly the bytes the
generator holds after the seeding version's public route, :func:`.seed_copy.seed_globals_reference`)
or (b) bytes read from the same place earlier (:class:`.raw_states.PyNpStates`,
:func:`.raw_states.save_torch`: a save and restore around a batch), so no write creates a state
the generator could not reach through its own API.

Why it is safe, and how it is verified at construction. :class:`Layout` probes each generator
once per process (again after one was swapped: :meth:`Layout.current`), before any write: the
interpreter must be a GIL-enabled CPython on a little-endian machine (torch) and the types exactly
the ones probed (``random.Random``'s base, ``np.random.MT19937``, a CPU ``torch.Generator``); the
view of each state must read what the generator's own ``getstate`` / ``get_state`` return after
its seeding function for several keys (Python: four keys; numpy: four keys and both seed-word
versions; torch: :mod:`.raw_torch`). numpy's cache is then checked by a write and a draw of the
cached value. Any difference leaves that generator's view unset (None): every caller then takes
the public route (the seeding functions, ``getstate``/``setstate``), identical in results. Each
probe saves the generator's state first and sets it back after. Between probes the writes assume
what the public setters also assume: no other thread draws from the generator meanwhile (user
code may swap a generator: :mod:`.raw_seeding` checks before each per-sample write).
``tests/loader/seeding/test_raw_memory.py`` checks that no other module of the package imports
``ctypes`` or writes through these views, and the seeding tests compare every route with the
public one.

Cost. The probes: a few ms, once per process (``warm_seeding`` pays them when a loader is built).
A seeding and a save and restore: :mod:`.raw_seeding`, :mod:`.raw_states`.
"""

from __future__ import annotations

import ctypes
import random
import struct
import sys
from typing import Any, Protocol

import numpy as np

from resumable_data.loader.seeding.mt19937 import NP_COL, PYNP_WORDS, N, mt_states, seed_rows
from resumable_data.loader.seeding.raw_torch import probe_torch
from resumable_data.loader.seeding.sample_seeding import numpy_seed_words
from resumable_data.loader.seeding.seed_copy import RowBuffer

__all__ = ["Gauss", "Layout", "python_random"]

_N = N


class _CPythonRandom(Protocol):
    """``random.Random`` as CPython implements it: ``gauss_next`` is its cached Gaussian."""

    gauss_next: float | None

    def getstate(self) -> tuple[Any, ...]: ...

    def setstate(self, state: tuple[Any, ...]) -> None: ...


def python_random() -> _CPythonRandom:
    """``random._inst`` (the generator ``random``'s module functions are bound to), with ``gauss_next``."""
    return random._inst  # type: ignore[return-value]  # CPython's Random has gauss_next; typeshed leaves it out


def _view(address: int, count: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_uint32 * count).from_address(address))


class Layout:
    """Probed views of the two MT19937 states, or None where the probe failed."""

    def __init__(self) -> None:
        self.py: np.ndarray | None = None  # [index, state[624]] of random._inst
        self.np: np.ndarray | None = None  # [key[624], pos] of numpy's global MT19937
        #: numpy's cached Gaussian (``has_gauss``, ``gauss`` of the global ``RandomState``); None
        #: where the probe failed (``np`` is then None too: the numpy route needs both)
        self.gauss: Gauss | None = None
        # the objects the views point into, held so that they stay alive, and compared with the
        # current ones on every use (np.random.set_bit_generator swaps numpy's; see global_rng._layout)
        self.py_owner = python_random()
        self.rs_owner = np.random.mtrand._rand
        self.np_owner = self.rs_owner._bit_generator
        self._probe_python()
        self._probe_numpy()
        self._probe_gauss()
        if self.gauss is None:
            self.np = None
        #: torch's default generator's region (:func:`.raw_torch.probe_torch`), or None: ``manual_seed`` /
        #: ``get_state`` / ``set_state``
        self.torch = probe_torch()
        # byte views written by one slice assignment each (what a seeding costs)
        self.py_mv = None if self.py is None else memoryview(self.py.view(np.uint8))
        self.np_mv = None if self.np is None else memoryview(self.np.view(np.uint8))
        self.torch_mv = None if self.torch is None else self.torch.view.data
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
        self.gauss_bytes: memoryview | None = None
        #: the same two words as integers (``gauss_words[0]``: the flag word)
        self.gauss_words: memoryview | None = None
        if self.gauss is not None:
            self.gauss_bytes = np.ctypeslib.as_array(
                (ctypes.c_uint8 * 16).from_address(ctypes.addressof(self.gauss))
            ).data
            self.gauss_words = self.gauss_bytes.cast("Q")

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
        saved = rs.get_state(legacy=True)  # the default, spelled out: the legacy tuple of an MT19937
        if not isinstance(saved, tuple):
            return
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
            view = Gauss.from_address(id(rs) + offsets.pop())
            view.has_gauss, view.gauss = 1, 0.625
            if _legacy_cache(rs) != (1, 0.625) or rs.standard_normal() != 0.625 or view.has_gauss != 0:
                return
            view.has_gauss, view.gauss = 0, 0.0
            if _legacy_cache(rs) != (0, 0.0):
                return
            self.gauss = view
        finally:
            rs.set_state(saved)


def _legacy_cache(rs: np.random.RandomState) -> tuple[Any, ...]:
    """``(has_gauss, gauss)`` of ``rs``'s legacy state (empty if it has none: not an MT19937)."""
    state = rs.get_state(legacy=True)
    return state[3:] if isinstance(state, tuple) else ()


class Gauss(ctypes.Structure):
    """numpy's legacy cached Gaussian: ``has_gauss`` and ``gauss`` (natural alignment: 8 bytes on)."""

    _fields_ = [("has_gauss", ctypes.c_int), ("gauss", ctypes.c_double)]
