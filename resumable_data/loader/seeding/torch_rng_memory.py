"""torch's default CPU generator reached through its memory: probed once, verified, or not used.

What it is. ``torch.manual_seed(s)`` on the CPU generator resets a ``CPUGeneratorImpl``: its
``mt19937`` data (``seed_``, ``left_ = 1``, ``seeded_ = true``, ``next_ = 0`` and
``state_[624] = init_genrand(s & 0xFFFFFFFF)``) and its two cached normals
(``optional<float>``, ``optional<double>``: disengaged). All of it is one contiguous *region* of
the object, so seeding is one copy of precomputed bytes (``mt19937.seed_rows``), and saving /
restoring the generator is a copy of the region (what ``get_state`` / ``set_state`` convert).

Probe (:func:`probe`, once per process; nothing is hard-coded). The ``CPUGeneratorImpl*`` is the
word after the ``PyObject`` header of ``torch.random.default_generator``. The state is found by
its pattern after ``manual_seed`` of several known keys (the same offset each time), ``seed_``
as the one 64-bit word before it equal to the seed for every key, and both cached-normal flags
by ``set_state`` of states whose float / double caches are valid with distinctive values (the one
offset after the state that holds each value followed by an engaged flag, for every value). The
region runs from ``seed_`` to the later flag; its bytes right after a ``manual_seed`` (state and
seed aside, which must be the only bytes that differ between keys) are the *template*. Then the
route is verified: for keys below 2**32, near 2**63 and above, with both caches engaged before,
writing the region must give ``get_state()`` bytes, ``initial_seed()`` and draws (``rand``,
``randn`` in float32 and float64, the cached path included, ``randint``) equal to
``manual_seed``'s. Any difference, a non-CPython or free-threaded interpreter, a ``get_state``
of another size, a non-little-endian machine: no layout (the callers use ``manual_seed`` /
``get_state`` / ``set_state``, identical in results). Reads stay inside the object: the first
:data:`_HEAD_MAX` bytes to find the state's start, then up to the state's end, then at most
:data:`_TAIL_MAX` bytes after it for the caches. The generator's state is saved before and set
back after the probe.

Cost. The probe: a few ms, once. Afterwards a seeding is one slice assignment of ~2.5 KB into
:attr:`TorchLayout.view` (a fraction of a us; ``manual_seed`` is ~1.5 us, ``get_state`` ~2 us).
Like ``manual_seed`` under a lock, the write assumes no other thread draws from the default
generator meanwhile (a draw racing with a per-sample seeding is not reproducible either way).
"""

from __future__ import annotations

import ctypes
import struct
import sys
from dataclasses import dataclass

import numpy as np
import torch

from resumable_data.errors import ConfigError, describe
from resumable_data.loader.seeding.mt19937 import N, init_genrand

__all__ = ["TorchLayout", "check_state_layout", "probe", "state_tensor"]

_STATE_BYTES = 4 * N
_HEAD_MAX = 256  # where the state may start in the object, at most
_TAIL_MAX = 24  # where the cached normals may end after the state, at most (the object's last fields; 2.13's double flag is at +20)
_WINDOW = _HEAD_MAX + _STATE_BYTES + _TAIL_MAX  # no read from the impl goes further
_PADDING_MAX = 16  # bytes of the region (seed and state aside) that may differ between seedings
_MASK63 = (1 << 63) - 1
# torch's serialized CPU state (get_state / set_state): the legacy THGeneratorState, then the
# float cache and its flag; the double cache is ``normal_y`` with ``normal_is_valid``
_LEGACY = "@QiiQ624Qdddi0Q"
_NORMAL_Y = struct.calcsize("@QiiQ624Qd")
_NORMAL_VALID = struct.calcsize("@QiiQ624Qddd")
_FLOAT = struct.calcsize(_LEGACY)
_FLOAT_VALID = _FLOAT + 4
_STATE_SIZE = struct.calcsize(_LEGACY + "f?0Q")
_HEADER = struct.calcsize("@QiiQ")  # the_initial_seed, left, seeded, next: then the state words
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


def _state_bytes(gen) -> bytes:
    return gen.get_state().numpy().tobytes()


def state_tensor(seed: int, words: np.ndarray) -> torch.Tensor:
    """torch's serialized CPU state (what ``set_state`` takes) of a generator seeded with state
    ``words`` (624 uint32) and ``initial_seed() == seed``: ``left_ = 1``, ``next_ = 0`` (the first
    draw twists, as after ``manual_seed``), no cached normals. A torch whose serialized state is
    not the layout rd knows (its size differs) is a :class:`~resumable_data.ConfigError`: a field
    rd does not know of (a cached value) could carry one sample's draws into the next."""
    check_state_layout()
    b = bytearray(_STATE_SIZE)
    struct.pack_into("@QiiQ", b, 0, seed, 1, 1, 0)
    struct.pack_into("@624Q", b, _HEADER, *np.asarray(words, dtype=np.uint32).tolist())
    return torch.frombuffer(b, dtype=torch.uint8).clone()


def check_state_layout() -> None:
    """Raise :class:`~resumable_data.ConfigError` unless torch's serialized CPU state has the
    layout :func:`state_tensor` writes."""
    size = torch.random.default_generator.get_state().numel()
    if size != _STATE_SIZE:
        raise ConfigError(
            describe(
                "torch.random.default_generator.get_state()",
                f"{size} bytes",
                f"the {_STATE_SIZE}-byte layout rd knows, so that seeding version 3 writes every field exactly "
                f"(torch {torch.__version__})",
                "in rd.DataLoader pass seed_per_sample=False and seed augmentation from rd.sample_context().torch_generator; "
                "in rd.seed_globals pass version=2; or use torch 2.x as pinned in constraints.txt",
            )
        )


def _with_caches(base: bytes, fvalue: float | None, dvalue: float | None) -> torch.Tensor:
    b = bytearray(base)
    struct.pack_into("@d", b, _NORMAL_Y, 0.0 if dvalue is None else dvalue)
    struct.pack_into("@i", b, _NORMAL_VALID, int(dvalue is not None))
    struct.pack_into("@f?", b, _FLOAT, 0.0 if fvalue is None else fvalue, fvalue is not None)
    return torch.frombuffer(b, dtype=torch.uint8).clone()


def _draws(gen) -> tuple:
    return (
        gen.initial_seed(),
        torch.rand(5, generator=gen).tolist(),
        torch.randn(1, dtype=torch.float64, generator=gen).item(),
        torch.randn(3, generator=gen).tolist(),
        torch.randint(0, 2**62, (3,), generator=gen).tolist(),
        torch.randn(1, generator=gen).item(),
    )


def probe() -> TorchLayout | None:
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
    if saved.numel() != _STATE_SIZE:
        return None
    try:
        return _probe(gen)
    except Exception:  # a torch that refuses a crafted state (or any other surprise): its own functions instead
        return None
    finally:
        gen.set_state(saved)


def _probe(gen) -> TorchLayout | None:
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
    if not seed_at or len(seed_at) != 1:
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


def _cache_flags(gen, impl: int, base: bytes, end_state: int) -> tuple[int, int] | None:
    """Offsets of the float and the double cache's engaged flags (each right after its value)."""
    fl = dl = None
    for fv, dv in ((0.375, -2.75e10), (-7.25, 0.3125), (123.0625, 6.02e23)):  # float32-exact
        gen.set_state(_with_caches(base, fv, dv))
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
    gen.set_state(_with_caches(base, None, None))
    raw = ctypes.string_at(impl, end_state + _TAIL_MAX)
    return (f, d) if raw[f] == 0 and raw[d] == 0 else None


def _verified(gen, lay: TorchLayout, base: bytes) -> bool:
    """Writing the region equals ``manual_seed``: state bytes, seed and draws, caches engaged before."""
    from resumable_data.loader.seeding.mt19937 import hash_state, seed_rows
    from resumable_data.loader.seeding.sample_seeding import STREAMS

    keys = np.array(_CHECK_KEYS, dtype=np.uint64)
    mv = memoryview(lay.view)
    for version in (2, 3):  # the seeding functions' states, and version 3's hashed ones
        rows = seed_rows(keys, False, lay.rows_spec, version)[:, -lay.template.size :]
        for key, row in zip(_CHECK_KEYS, rows):
            if version == 3:
                gen.set_state(state_tensor(key & _MASK63, hash_state(key, STREAMS[2])))
            else:
                gen.manual_seed(key)
            want_state = _state_bytes(gen)
            want = _draws(gen)
            gen.set_state(_with_caches(base, 0.5, -1.25))
            mv[:] = memoryview(row.view(np.uint8))[: lay.size]
            if _state_bytes(gen) != want_state or _draws(gen) != want:
                return False
    return True
