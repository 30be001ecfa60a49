"""Every read and write of the global generators' memory that seeding does, in one module.

What it writes. Three generators' state, in place, by slice assignment of bytes through views
made once per process (nothing else in the package touches raw memory):

* CPython's ``random._inst`` (a ``RandomObject``): its ``[index, state[624]]`` words, right after
  the ``PyObject`` header; Python's own ``gauss_next`` attribute is set by name;
* numpy's global ``RandomState``'s ``MT19937`` bit generator: ``mt19937_state`` ``[state[624],
  pos]`` at the address numpy itself publishes (``bit_generator.ctypes.state_address``), and the
  ``RandomState``'s cached Gaussian (``has_gauss``, ``gauss``), found at its probed offset;
* torch's default CPU generator: one contiguous region of its ``CPUGeneratorImpl`` (``seed_``,
  the ``mt19937`` engine, the two cached normals), found by :func:`probe_torch`.

The bytes written are only ever (a) a seeding row (``mt19937.fill_rows``: exactly the bytes the
generator holds after the seeding version's public route, :func:`.seed_copy.seed_globals_reference`)
or (b) bytes read from the same place earlier (:class:`PyNpStates`, :func:`save_torch`: a
save and restore around a batch), so no write creates a state the generator could not reach
through its own API.

Why it is safe, and how it is verified at construction. :class:`Layout` probes each generator
once per process (again after one was swapped: :meth:`Layout.current`), before any write: the
interpreter must be a GIL-enabled CPython on a little-endian machine (torch) and the types exactly
the ones probed (``random.Random``'s base, ``np.random.MT19937``, a CPU ``torch.Generator``); the
view of each state must read what the generator's own ``getstate`` / ``get_state`` return after
its seeding function for several keys (Python: four keys; numpy: four keys and both seed-word
versions; torch: the state found by pattern at one offset for five keys, ``seed_`` the one word
equal to the seed each time, the cached-normal flags at the one offset that shows three distinct
``set_state`` values). The copies are then checked against the public routes: numpy's cache by
a write and a draw of the cached value; torch's region by writing rows for seven keys (versions 2
and 3), with both caches engaged before, and comparing ``get_state()`` bytes, ``initial_seed()``
and draws (``rand``, ``randn`` float32/float64 with the cache path, ``randint``) with
``manual_seed`` / ``set_state``. Reads stay inside the objects (:data:`_WINDOW` for torch's). Any
difference leaves that generator's view unset (None): every caller then takes the public route
(the seeding functions, ``getstate``/``setstate``), identical in results. Each probe saves the
generator's state first and sets it back after. Between probes the writes assume what the public
setters also assume: no other thread draws from the generator meanwhile; before each per-sample
write, :func:`seed_function`'s closures check that numpy's bit generator and torch's default
generator are still the probed objects (user code may swap them), and send the call through the
public route when not. ``tests/loader/seeding/test_raw_memory.py`` checks that no other module
of the package imports ``ctypes`` or writes through these views, and the seeding tests compare
every route with the public one.

Cost. The probes: a few ms, once per process (``warm_seeding`` pays them when a loader is built).
A seeding: one ~2.5 KB slice assignment per generator (0.1 us each on the development machine);
a save and restore around a batch: one read and one write per generator.
"""

from __future__ import annotations

import ctypes
import random
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from resumable_data.errors import UsageError, describe
from resumable_data.loader.seeding.mt19937 import NP_COL, PYNP_WORDS, N, hash_state, init_genrand, mt_states, seed_rows
from resumable_data.loader.seeding.sample_seeding import HASHED_VERSIONS, STREAMS, numpy_seed_words
from resumable_data.loader.seeding.seed_copy import (
    RowBuffer,
    check_numpy_generator,
    reference_numpy,
    reference_python,
    reference_route,
    reference_torch,
)
from resumable_data.loader.seeding.torch_state import STATE_SIZE, check_state_layout, state_tensor, with_caches

__all__ = [
    "Layout",
    "PyNpStates",
    "TorchLayout",
    "TorchWatch",
    "UnseededStates",
    "probe_torch",
    "restore_torch",
    "save_torch",
    "seed_function",
]

_N = N
_MASK63 = (1 << 63) - 1


class _CPythonRandom(Protocol):
    """``random.Random`` as CPython implements it: ``gauss_next`` is its cached Gaussian."""

    gauss_next: float | None

    def getstate(self) -> tuple[Any, ...]: ...

    def setstate(self, state: tuple[Any, ...]) -> None: ...


def _python_random() -> _CPythonRandom:
    """``random._inst`` (the generator ``random``'s module functions are bound to), with ``gauss_next``."""
    return random._inst  # type: ignore[return-value]  # CPython's Random has gauss_next; typeshed leaves it out


# -- torch's default CPU generator ------------------------------------------------------------
_STATE_BYTES = 4 * N
_HEAD_MAX = 256  # where the state may start in the object, at most
_TAIL_MAX = 24  # where the cached normals may end after the state, at most (the object's last fields; 2.13's double flag is at +20)
_WINDOW = _HEAD_MAX + _STATE_BYTES + _TAIL_MAX  # no read from the impl goes further
_PADDING_MAX = 16  # bytes of the region (seed and state aside) that may differ between seedings
_PROBE_KEYS = (0x0123456789ABCDEF, 7, _MASK63, 0xDEADBEEFCAFE, 2**32 + 5)
_CHECK_KEYS = (3, 2**32 - 1, 2**32, 0x9E3779B97F4A7C15 & _MASK63, _MASK63, 0x7FFFFFFF00000001, 123456789012345)


@dataclass(frozen=True)
class TorchLayout:
    """torch's default CPU generator region, as probed (see the module docstring)."""

    owner: object  #: the generator probed (``torch.random.default_generator``)
    impl: int  #: address of its ``CPUGeneratorImpl``
    offset: int  #: where the region starts in the impl (``seed_``)
    size: int  #: region bytes (``seed_`` to the later cached-normal flag)
    template: np.ndarray  #: uint32 words: the region after a ``manual_seed`` (padded to a word)
    seed_word: int  #: word offset of ``seed_`` in the region (0)
    state_word: int  #: word offset of ``state_[0]`` in the region
    view: np.ndarray  #: writable uint8 view of the region

    @property
    def rows_spec(self) -> tuple:
        """What ``mt19937.seed_rows`` needs to fill torch's region."""
        return self.template, self.seed_word, self.state_word

    def current(self) -> bool:
        """Whether the probed generator is still the default one."""
        return torch.random.default_generator is self.owner


def _impl(gen: object) -> int:
    return ctypes.c_void_p.from_address(id(gen) + object.__basicsize__).value or 0


def _state_bytes(gen: torch.Generator) -> bytes:
    return gen.get_state().numpy().tobytes()


def _draws(gen: torch.Generator) -> tuple[Any, ...]:
    return (
        gen.initial_seed(),
        torch.rand(5, generator=gen).tolist(),
        torch.randn(1, dtype=torch.float64, generator=gen).item(),
        torch.randn(3, generator=gen).tolist(),
        torch.randint(0, 2**62, (3,), generator=gen).tolist(),
        torch.randn(1, generator=gen).item(),
    )


def probe_torch() -> TorchLayout | None:
    """The layout of ``torch.random.default_generator``, verified; None where anything differs."""
    gen = torch.random.default_generator
    if (
        sys.implementation.name != "cpython"
        or getattr(sys, "_is_gil_enabled", lambda: True)() is False
        or sys.byteorder != "little"
        or type(gen) is not torch.Generator
        or gen.device.type != "cpu"
        or type(gen).__basicsize__ < object.__basicsize__ + 8
    ):
        return None
    saved = gen.get_state()
    if saved.numel() != STATE_SIZE:
        return None
    try:
        return _probe(gen)
    except Exception:  # a torch that refuses a crafted state (or any other surprise): its own functions instead
        return None
    finally:
        gen.set_state(saved)


def _probe(gen: torch.Generator) -> TorchLayout | None:
    impl = _impl(gen)
    if not impl:
        return None
    state_at = seed_at = None
    for key in _PROBE_KEYS:
        gen.manual_seed(key)
        want = init_genrand(key & 0xFFFFFFFF).tobytes()
        pos = ctypes.string_at(impl, _HEAD_MAX).find(want[:16])  # the state's start: where it begins...
        if pos < 0 or pos % 4 or (state_at is not None and pos != state_at):
            return None
        raw = ctypes.string_at(impl, pos + _STATE_BYTES)  # ...and all of it (no read past the object)
        if raw[pos:] != want:
            return None
        state_at = pos
        hits = {o for o in range(0, pos - 7, 4) if struct.unpack_from("<Q", raw, o)[0] == key}
        seed_at = hits if seed_at is None else seed_at & hits
    if state_at is None or not seed_at or len(seed_at) != 1:
        return None
    seed_off = seed_at.pop()
    end_state = state_at + _STATE_BYTES
    base = _state_bytes(gen)
    flags = _cache_flags(gen, impl, base, end_state)
    if flags is None:
        return None
    end = max(flags) + 1
    size = end - seed_off
    # the template: the region after manual_seed; apart from seed and state, the keys' regions
    # may differ in padding only (manual_seed copies a temporary engine, padding bytes included):
    # a few bytes, which the verification below shows to be inert
    after = []
    for key in _PROBE_KEYS:
        gen.manual_seed(key)
        after.append(ctypes.string_at(impl + seed_off, size))
    regions = [bytearray(r) for r in after]
    for r in regions:
        for a, b in ((seed_off, seed_off + 8), (state_at, end_state)):
            r[a - seed_off : b - seed_off] = bytes(b - a)
    table = np.frombuffer(b"".join(regions), dtype=np.uint8).reshape(len(regions), size)
    if int((table != table[0]).any(axis=0).sum()) > _PADDING_MAX:
        return None
    padded = after[0] + bytes(-size % 4)
    template = np.frombuffer(padded, dtype=np.uint32).copy()
    view = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(impl + seed_off))
    lay = TorchLayout(gen, impl, seed_off, size, template, 0, (state_at - seed_off) // 4, view)
    return lay if _verified(gen, lay, base) else None


def _cache_flags(gen: torch.Generator, impl: int, base: bytes, end_state: int) -> tuple[int, int] | None:
    """Offsets of the float and the double cache's engaged flags (each right after its value)."""
    fl = dl = None
    for fv, dv in ((0.375, -2.75e10), (-7.25, 0.3125), (123.0625, 6.02e23)):  # float32-exact
        gen.set_state(with_caches(base, fv, dv))
        raw = ctypes.string_at(impl, end_state + _TAIL_MAX)
        fh = {
            o + 4
            for o in range(end_state, len(raw) - 4, 4)
            if struct.unpack_from("<f", raw, o)[0] == fv and raw[o + 4] == 1
        }
        dh = {
            o + 8
            for o in range(end_state, len(raw) - 8, 4)
            if struct.unpack_from("<d", raw, o)[0] == dv and raw[o + 8] == 1
        }
        fl = fh if fl is None else fl & fh
        dl = dh if dl is None else dl & dh
    if not fl or not dl or len(fl) != 1 or len(dl) != 1:
        return None
    f, d = fl.pop(), dl.pop()
    gen.set_state(with_caches(base, None, None))
    raw = ctypes.string_at(impl, end_state + _TAIL_MAX)
    return (f, d) if raw[f] == 0 and raw[d] == 0 else None


def _verified(gen: torch.Generator, lay: TorchLayout, base: bytes) -> bool:
    """Writing the region equals ``manual_seed``: state bytes, seed and draws, caches engaged before."""
    keys = np.array(_CHECK_KEYS, dtype=np.uint64)
    mv = lay.view.data
    for version in (2, 3):  # the seeding functions' states, and version 3's hashed ones
        rows = seed_rows(keys, False, lay.rows_spec, version)[:, -lay.template.size :]
        for key, row in zip(_CHECK_KEYS, rows):
            if version == 3:
                gen.set_state(state_tensor(key & _MASK63, hash_state(key, STREAMS[2])))
            else:
                gen.manual_seed(key)
            want_state = _state_bytes(gen)
            want = _draws(gen)
            gen.set_state(with_caches(base, 0.5, -1.25))
            mv[:] = row.view(np.uint8).data[: lay.size]
            if _state_bytes(gen) != want_state or _draws(gen) != want:
                return False
    return True


# -- Python's and numpy's generators, and the layout of all three ----------------------------
def _view(address: int, count: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_uint32 * count).from_address(address))


class Layout:
    """Probed views of the two MT19937 states, or None where the probe failed."""

    def __init__(self) -> None:
        self.py: np.ndarray | None = None  # [index, state[624]] of random._inst
        self.np: np.ndarray | None = None  # [key[624], pos] of numpy's global MT19937
        #: numpy's cached Gaussian (``has_gauss``, ``gauss`` of the global ``RandomState``); None
        #: where the probe failed (``np`` is then None too: the numpy route needs both)
        self.gauss: _Gauss | None = None
        # the objects the views point into, held so that they stay alive, and compared with the
        # current ones on every use (np.random.set_bit_generator swaps numpy's; see global_rng._layout)
        self.py_owner = _python_random()
        self.rs_owner = np.random.mtrand._rand
        self.np_owner = self.rs_owner._bit_generator
        self._probe_python()
        self._probe_numpy()
        self._probe_gauss()
        if self.gauss is None:
            self.np = None
        #: torch's default generator's region (:func:`probe_torch`), or None: ``manual_seed`` /
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
            view = _Gauss.from_address(id(rs) + offsets.pop())
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


class _Gauss(ctypes.Structure):
    """numpy's legacy cached Gaussian: ``has_gauss`` and ``gauss`` (natural alignment: 8 bytes on)."""

    _fields_ = [("has_gauss", ctypes.c_int), ("gauss", ctypes.c_double)]


# -- saving, restoring and watching states ----------------------------------------------------
class PyNpStates:
    """The states of Python's and numpy's global generators with their cached Gaussians: saved
    (:meth:`save`) and written back (:meth:`restore`) through the probed memory, or through
    ``getstate``/``get_state`` where the probe failed."""

    __slots__ = ("_lay", "_np", "_npg", "_py", "_pyg")
    _lay: Layout
    #: Python's state: the view's bytes (probed), or ``random.getstate()``; its cached Gaussian
    _py: bytes | tuple[Any, ...]
    _pyg: float | None
    #: numpy's state: the view's bytes (probed), or ``np.random.get_state()``; its cache's 16 bytes
    _np: bytes | dict[str, Any] | tuple[Any, ...]
    _npg: bytes

    def save(self, lay: Layout) -> None:
        """Save both states (and caches) of the generators ``lay`` was probed on."""
        self._lay = lay
        if lay.py is not None:
            self._py = lay.py.tobytes()
            self._pyg = _python_random().gauss_next
        else:
            self._py = random.getstate()
        if lay.np is not None and lay.gauss_bytes is not None:  # (np is None without the cache's view)
            self._np = lay.np.tobytes()
            self._npg = lay.gauss_bytes.tobytes()  # has_gauss, padding, gauss
        else:
            self._np = np.random.get_state(legacy=True)

    @property
    def layout(self) -> Layout:
        """The probed layout the states were saved through."""
        return self._lay

    @property
    def fast(self) -> bool:
        """Whether the states were saved through the probed memory (lazy seeding can start from them)."""
        return self._lay.fast

    def restore(self) -> None:
        """Write the saved states (and caches) back."""
        lay = self._lay
        if isinstance(self._py, tuple):  # saved by getstate (no probed view)
            random.setstate(self._py)
        elif lay.py_mv is not None:
            lay.py_mv[:] = self._py  # writing 2.5 KB back is cheaper than comparing them first
            lay.py_owner.gauss_next = self._pyg
        if not isinstance(self._np, bytes):  # saved by get_state (no probed view)
            np.random.set_state(self._np)
        elif lay.np_mv is not None and lay.gauss_bytes is not None:
            lay.np_mv[:] = self._np
            lay.gauss_bytes[:] = self._npg


class UnseededStates(PyNpStates):
    """Python's ``random`` and numpy's global generator left unseeded while user code runs, and
    watched: on construction their states are saved (or taken from ``saved``, states saved just
    before with nothing run since) and their cached Gaussians cleared (so that a draw of a cached
    value moves the state too); :meth:`finish` says whether anything drew from (or reseeded)
    either since, comparing the whole states and the caches, and puts states and caches back as
    they were. Needs ``lay.fast``."""

    __slots__ = ()

    def __init__(self, lay: Layout, saved: PyNpStates | None = None) -> None:
        if saved is None:
            self.save(lay)
        else:
            self._lay, self._py, self._pyg, self._np, self._npg = (
                saved._lay,
                saved._py,
                saved._pyg,
                saved._np,
                saved._npg,
            )
        lay = self._lay
        _, _, gauss, _ = _fast_views(lay)
        lay.py_owner.gauss_next = None
        gauss.has_gauss = 0

    def finish(self) -> bool:
        """Whether user code drew since construction; either way the saved states are back."""
        lay = self._lay
        py, npv, gauss, gauss_bytes = _fast_views(lay)
        drew = (
            not lay.current()  # a generator was swapped meanwhile: assume the worst
            or lay.py_owner.gauss_next is not None
            or gauss.has_gauss != 0
            or py.tobytes() != self._py
            or npv.tobytes() != self._np
        )
        if drew:
            self.restore()
        else:  # the states are untouched: only the cleared caches go back
            lay.py_owner.gauss_next = self._pyg
            gauss_bytes[:] = self._npg
        return drew


def _fast_views(lay: Layout) -> tuple[np.ndarray, np.ndarray, _Gauss, memoryview]:
    """Python's and numpy's state views and numpy's cache (its structure and bytes), which watching needs."""
    if lay.py is None or lay.np is None or lay.gauss is None or lay.gauss_bytes is None:
        raise UsageError(
            describe(
                "Layout.fast",
                False,
                "True: Python's and numpy's generators reached through their memory (lazy seeding watches them)",
                "check lazy_seeding_available() before watching the generators",
            )
        )
    return lay.py, lay.np, lay.gauss, lay.gauss_bytes


def save_torch(lay: Layout) -> bytes | torch.Tensor:
    """torch's default generator's state: its region's bytes, or ``get_state()`` without a layout."""
    tlay = lay.torch
    return torch.random.default_generator.get_state() if tlay is None else tlay.view.tobytes()


def restore_torch(lay: Layout, saved: bytes | torch.Tensor) -> None:
    """Write :func:`save_torch`'s ``saved`` back (one slice assignment, or ``set_state``)."""
    if isinstance(saved, torch.Tensor):  # saved by get_state (no probed region)
        torch.random.default_generator.set_state(saved)
    elif lay.torch_mv is not None:
        lay.torch_mv[:] = saved


class TorchWatch:
    """torch's default generator left unseeded while user code runs, and watched: its state is
    saved on construction (or taken from ``saved``, :func:`save_torch`'s bytes taken just before
    with nothing run since); :meth:`finish` says whether anything drew from (or reseeded, or
    swapped) it since, comparing the whole region (seed, engine, both cached normals: a draw of a
    cached normal clears its flag, so it shows too), and writes the saved state back if so."""

    __slots__ = ("_lay", "_saved")

    def __init__(self, lay: Layout, saved: bytes | torch.Tensor | None = None) -> None:
        self._lay = lay
        self._saved = save_torch(lay) if saved is None else saved

    def finish(self) -> bool:
        """Whether user code drew since construction; either way the saved state is back."""
        lay, saved, tlay = self._lay, self._saved, self._lay.torch
        if isinstance(saved, torch.Tensor):  # saved by get_state (no probed region)
            drew = not torch.equal(torch.random.default_generator.get_state(), saved)
        else:
            drew = tlay is None or not tlay.current() or tlay.view.tobytes() != saved
        if drew:
            restore_torch(lay, self._saved)
        return drew


# -- seeding: a row's bytes into the generators ------------------------------------------------
def seed_function(
    lay: Layout, buf: RowBuffer | None, keys: np.ndarray, torch_only: bool, small: int, version: int
) -> Callable[[int], None]:
    """``seed(j)``: the globals seeded from ``keys[j]`` as seeding ``version`` does, from ``buf``'s
    row ``j`` (filled by ``fill_rows`` for these keys, this layout and ``version``). ``lay``: the
    probed layout (``global_rng``'s); ``torch_only``: torch's generator only; ``small``: how many
    keys are below 2**32."""
    if buf is not None and (torch_only or not small):
        fn = buf.fns.get((torch_only, version))  # made for this buffer before (every generator through its memory)
        if fn is not None:
            buf.keys = keys
            return fn
    py_mv, np_mv = (None, None) if torch_only else (lay.py_mv, lay.np_mv)
    tlay, t_mv = lay.torch, lay.torch_mv
    pys, nps, ts = (buf.py, buf.np, buf.torch) if buf is not None else ((), (), ())
    if t_mv is not None and buf is not None and (torch_only or (py_mv is not None and np_mv is not None and not small)):
        buf.keys = keys  # every generator through its memory: the function made once for this buffer, reused
        fn = buf.fns[torch_only, version] = _copy_function(lay, buf, torch_only, version)
        return fn
    if lay.torch is None and version in HASHED_VERSIONS:
        check_state_layout()  # torch's reference route writes its serialized state: refused before any seeding
    if not torch_only and lay.np is None:
        check_numpy_generator()
    key_list = keys.tolist()  # for the functions' routes
    inst = _python_random()
    gw, gauss = lay.gauss_words, lay.gauss
    rmod, mtrand, trand = random, np.random.mtrand, torch.random
    py_owner, rs_owner, np_owner = lay.py_owner, lay.rs_owner, lay.np_owner
    t_owner = None if tlay is None else tlay.owner

    def by_functions(j: int) -> None:  # a generator was swapped during this batch
        reference_route(int(keys[j]), torch_only, version)

    def seed_torch(j: int) -> None:
        if t_mv is not None:
            if trand.default_generator is not t_owner:
                return by_functions(j)
            t_mv[:] = ts[j]
        else:
            reference_torch(key_list[j], version)

    if torch_only:
        return seed_torch

    def seed_each(j: int) -> None:  # a generator whose memory was not found, or a key < 2**32
        if (
            rmod._inst is not py_owner
            or mtrand._rand is not rs_owner
            or rs_owner._bit_generator is not np_owner
            or (t_owner is not None and trand.default_generator is not t_owner)
        ):
            return by_functions(j)
        key = key_list[j]
        if py_mv is not None and (key >> 32 or version in HASHED_VERSIONS):
            py_mv[:] = pys[j]
            inst.gauss_next = None
        else:  # versions 1-2: a key below 2**32 is one word for Python: its own route (one key in 2**32)
            reference_python(key, version)
        if np_mv is not None:
            np_mv[:] = nps[j]
            if gw[0] or gw[1]:
                gauss.has_gauss = 0
                gauss.gauss = 0.0
        else:
            reference_numpy(key, version)
        seed_torch(j)

    return seed_each


def _unprobed(which: str) -> UsageError:
    return UsageError(
        describe(
            "Layout",
            f"{which} generator memory not found",
            "every generator's memory probed (the copy route writes through it)",
            "take seed_function's route, which checks the layout first",
        )
    )


def _copy_function(lay: Layout, buf: RowBuffer, torch_only: bool, version: int) -> Callable[[int], None]:
    """``seed(j)`` through the generators' memory from ``buf``'s row ``j`` (every generator's layout
    found; versions 1-2: no key below 2**32), the keys read from ``buf.keys``; a generator swapped
    meanwhile sends the call through the reference route."""
    py_mv, np_mv, t_mv, tlay = lay.py_mv, lay.np_mv, lay.torch_mv, lay.torch
    pys, nps, ts = buf.py, buf.np, buf.torch
    inst = lay.py_owner  # the probed instance: the one random's module functions are bound to
    gw, gauss = lay.gauss_words, lay.gauss
    trand = torch.random
    if t_mv is None or tlay is None:
        raise _unprobed("torch")
    rs_owner, np_owner, t_owner = lay.rs_owner, lay.np_owner, tlay.owner

    def by_functions(j: int) -> None:  # a generator was swapped during this batch
        keys = buf.keys  # this batch's (seed_function sets them before each batch)
        if keys is None:
            raise UsageError(describe("RowBuffer.keys", None, "the batch's keys", "call seed_function first"))
        reference_route(int(keys[j]), torch_only, version)

    if torch_only:

        def seed_torch(j: int) -> None:
            if trand.default_generator is not t_owner:
                return by_functions(j)
            t_mv[:] = ts[j]

        return seed_torch
    if py_mv is None or np_mv is None or gw is None or gauss is None:
        raise _unprobed("Python's and numpy's")

    def seed_all(j: int) -> None:  # the usual case: every generator through its memory
        # what user code can swap in the middle of a batch and draw from: numpy's bit generator
        # (np.random.set_bit_generator) and torch's default (torch.manual_seed follows the name);
        # rebinding random._inst or mtrand._rand redirects no module function (they are bound at import)
        if rs_owner._bit_generator is not np_owner or trand.default_generator is not t_owner:
            return by_functions(j)
        py_mv[:] = pys[j]
        inst.gauss_next = None
        np_mv[:] = nps[j]
        if gw[0] or gw[1]:  # what np.random.seed resets besides the state: the cached Gaussian
            gauss.has_gauss = 0
            gauss.gauss = 0.0
        t_mv[:] = ts[j]

    return seed_all
