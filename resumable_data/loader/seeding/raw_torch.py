"""torch's default CPU generator reached through its memory: the region of its ``CPUGeneratorImpl``
that seeding writes, found and verified (:func:`probe_torch`).

Algorithm. The region is one contiguous run of the impl: ``seed_``, the ``mt19937`` engine and
the two cached normals. The probe runs only on a GIL-enabled CPython on a little-endian machine,
for a CPU ``torch.Generator`` whose ``get_state`` has the size rd knows; it finds the state by
pattern at one offset for five keys, ``seed_`` the one word equal to the seed each time, the
cached-normal flags at the one offset that shows three distinct ``set_state`` values. The
template is the region after a ``manual_seed`` (apart from seed and state, a few padding bytes
may differ between keys). Reads stay inside the object (:data:`_WINDOW`).

Guarantee. The copies are checked against the public routes before the layout is returned: rows
for seven keys (versions 2 and 3) written into the region, with both caches engaged before,
compared with ``manual_seed`` / ``set_state`` by ``get_state()`` bytes, ``initial_seed()`` and
draws (``rand``, ``randn`` float32/float64 with the cache path, ``randint``). Any difference (or
any exception) gives None: every caller then takes torch's own functions, identical in results.
The probe saves the generator's state first and sets it back after.

Cost. A few ms, once per process (again after the default generator was swapped:
:meth:`TorchLayout.current`).
"""

from __future__ import annotations

import ctypes
import struct
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from resumable_data.loader.seeding.mt19937 import N, hash_state, init_genrand, seed_rows
from resumable_data.loader.seeding.sample_seeding import STREAMS
from resumable_data.loader.seeding.torch_state import STATE_SIZE, state_tensor, with_caches

__all__ = ["TorchLayout", "probe_torch"]

_MASK63 = (1 << 63) - 1
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
