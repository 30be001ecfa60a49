"""Seeding the global generators by copying precomputed bytes into them, one sample at a time.

Algorithm. A row of :func:`~.mt19937.fill_rows` holds, for one key and one seeding version, the
bytes each generator holds right after seeding from it (Python's ``RandomObject`` ``[index,
state]``, then numpy's ``mt19937_state`` ``[state, pos]``, then torch's ``CPUGeneratorImpl``
region: three separate segments, see :mod:`.sample_seeding` for the formulas). :class:`RowBuffer`
is a reusable buffer of such rows with each row's byte slices made once (making a memoryview
slice costs about as much as the copy it serves). :func:`seed_function` returns ``seed(j)``, which
puts row ``j``'s bytes into the generators: one slice assignment per generator, Python's
``gauss_next`` reset, numpy's cached Gaussian cleared when set (reading is cheaper than writing).

Guarantee. ``seed(j)`` leaves the three generators exactly as :func:`seed_globals_reference`
does for ``key = keys[j]`` and the seeding ``version``: version 3 the public setters of the hashed
states (``random.setstate``, ``np.random.set_state``, torch's ``set_state``), versions 1-2 the
seeding functions (``random.seed(key)``, ``np.random.seed(numpy_seed_words(key, version))``,
``torch.manual_seed(key & (2**63 - 1))``). Each call first checks that what user code can swap
in the middle of a batch is still the probed one (numpy's bit generator, ``np.random.set_bit_generator``;
torch's ``torch.random.default_generator``; rebinding ``random._inst`` or ``mtrand._rand``
redirects no module function); from a swap on it takes the reference route. A
generator whose memory was not found, or (versions 1-2) a key below 2**32 (one word for Python's
``random.seed``; numpy's rows are always valid two-word seeds) takes that generator's reference
route.

Cost. Per sample about 0.3 us on the development machine (three ~2.5 KB slice assignments of
60-70 ns each, the swap checks, the cached Gaussians; 4.8 us for a batch of 16, 2026-12-02); the
copy function is made once per pooled buffer; nothing to restore.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from resumable_data.errors import ConfigError, describe
from resumable_data.loader.seeding.mt19937 import NP_COL, PYNP_WORDS, hash_state
from resumable_data.loader.seeding.mt19937 import N as _N
from resumable_data.loader.seeding.sample_seeding import HASHED_VERSIONS, SEEDING_VERSION, STREAMS, numpy_seed_words
from resumable_data.loader.seeding.torch_rng_memory import check_state_layout, state_tensor

__all__ = ["RowBuffer", "check_numpy_generator", "seed_function", "seed_globals_reference"]

_MASK63 = (1 << 63) - 1
_PY_BYTES = (_N + 1) * 4  # [index, state] / [state, pos]: one generator's part of a row
_NP_AT = NP_COL * 4
_PYNP_BYTES = PYNP_WORDS * 4


def _seed_python(key: int, version: int) -> None:
    if version in HASHED_VERSIONS:
        random.setstate((3, (*hash_state(key, STREAMS[0]).tolist(), _N), None))
    else:
        random.seed(key)


def check_numpy_generator() -> None:
    """Raise :class:`~resumable_data.ConfigError` unless numpy's global generator is an MT19937
    (what every seeding version writes: ``np.random.set_bit_generator`` may have put another there)."""
    bg = np.random.mtrand._rand._bit_generator
    if type(bg) is not np.random.MT19937:
        raise ConfigError(
            describe(
                "numpy's global bit generator",
                type(bg).__name__,
                "MT19937, the generator seed_per_sample seeds before every sample",
                "call np.random.set_bit_generator(np.random.MT19937()) before the loader runs, or pass "
                "seed_per_sample=False and draw from rd.sample_context().rng",
            )
        )


def _seed_numpy(key: int, version: int) -> None:
    if version in HASHED_VERSIONS:
        np.random.set_state(("MT19937", hash_state(key, STREAMS[1]), _N, 0, 0.0))
    else:
        np.random.seed(np.array(numpy_seed_words(key, version), dtype=np.uint32))


def _seed_torch(key: int, version: int) -> None:
    gen = torch.random.default_generator
    if version in HASHED_VERSIONS:
        gen.set_state(state_tensor(key & _MASK63, hash_state(key, STREAMS[2])))
    else:
        gen.manual_seed(key & _MASK63)  # < 2**63: torch.initial_seed() stays a signed int64


def seed_globals_reference(key: int, version: int = SEEDING_VERSION) -> None:
    """Seed the three globals from ``key`` through their public setters, as seeding ``version``
    does (what the copies must equal): versions 1-2 the seeding functions, version 3
    ``random.setstate`` / ``np.random.set_state`` / torch's ``set_state`` of the hashed states."""
    check_numpy_generator()  # before anything is seeded
    _seed_python(key, version)
    _seed_numpy(key, version)
    _seed_torch(key, version)


def _reference(key: int, torch_only: bool, version: int) -> None:
    """The reference route of one key: torch's generator alone, or all three."""
    if torch_only:
        _seed_torch(key, version)
    else:
        seed_globals_reference(key, version)


class RowBuffer:
    """``rows``: ``[n, width]`` uint32 seeding rows; ``py`` / ``np`` / ``torch``: each row's byte
    slice for that generator (``torch``: empty without a torch layout); ``keys``: the keys the rows
    were last filled for; ``fns``: the seed functions made for this buffer's rows (by torch-only
    flag and version), reused while the buffer is (they read ``keys`` from it)."""

    __slots__ = ("fns", "keys", "np", "py", "rows", "torch")

    def __init__(self, n: int, width: int, torch_bytes: int) -> None:
        self.keys: np.ndarray | None = None
        self.fns: dict[tuple[bool, int], Callable[[int], None]] = {}
        self.rows = np.empty((n, width), np.uint32)
        src = memoryview(self.rows).cast("B")
        starts = range(0, n * width * 4, width * 4)
        self.py = [src[o : o + _PY_BYTES] for o in starts]  # [index, state]
        self.np = [src[o + _NP_AT : o + _NP_AT + _PY_BYTES] for o in starts]  # [state, pos]
        self.torch = [src[o + _PYNP_BYTES : o + _PYNP_BYTES + torch_bytes] for o in starts] if torch_bytes else []


def seed_function(
    lay: Any, buf: RowBuffer | None, keys: np.ndarray, torch_only: bool, small: int, version: int
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
    inst = random._inst
    gw, gauss = lay.gauss_words, lay.gauss
    rmod, mtrand, trand = random, np.random.mtrand, torch.random
    py_owner, rs_owner, np_owner = lay.py_owner, lay.rs_owner, lay.np_owner
    t_owner = None if tlay is None else tlay.owner

    def by_functions(j: int) -> None:  # a generator was swapped during this batch
        _reference(int(keys[j]), torch_only, version)

    def seed_torch(j: int) -> None:
        if t_mv is not None:
            if trand.default_generator is not t_owner:
                return by_functions(j)
            t_mv[:] = ts[j]
        else:
            _seed_torch(key_list[j], version)

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
            _seed_python(key, version)
        if np_mv is not None:
            np_mv[:] = nps[j]
            if gw[0] or gw[1]:
                gauss.has_gauss = 0
                gauss.gauss = 0.0
        else:
            _seed_numpy(key, version)
        seed_torch(j)

    return seed_each


def _copy_function(lay: Any, buf: RowBuffer, torch_only: bool, version: int) -> Callable[[int], None]:
    """``seed(j)`` through the generators' memory from ``buf``'s row ``j`` (every generator's layout
    found; versions 1-2: no key below 2**32), the keys read from ``buf.keys``; a generator swapped
    meanwhile sends the call through the reference route."""
    py_mv, np_mv, t_mv = lay.py_mv, lay.np_mv, lay.torch_mv
    pys, nps, ts = buf.py, buf.np, buf.torch
    inst = lay.py_owner  # the probed instance: the one random's module functions are bound to
    gw, gauss = lay.gauss_words, lay.gauss
    trand = torch.random
    rs_owner, np_owner, t_owner = lay.rs_owner, lay.np_owner, lay.torch.owner

    def by_functions(j: int) -> None:  # a generator was swapped during this batch
        _reference(int(buf.keys[j]), torch_only, version)

    if torch_only:

        def seed_torch(j: int) -> None:
            if trand.default_generator is not t_owner:
                return by_functions(j)
            t_mv[:] = ts[j]

        return seed_torch

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
