"""Seeding version 3 written out independently of the package, in plain Python integers.

For generator ``g`` (Python's ``random``, numpy's global ``RandomState``, torch's default CPU
generator) with stream constant ``STREAMS[g]``: ``s = mix(key ^ STREAMS[g])``, then for ``i`` in
``0..311`` ``z = mix(s + (i + 1) * 0x9E3779B97F4A7C15)`` gives the state words ``2i`` (low half)
and ``2i + 1`` (high half); every generator's position is "state used up" (the first draw
twists); torch's ``initial_seed()`` is ``key & (2**63 - 1)``; no cached Gaussians. Nothing here
imports ``resumable_data``: the tests compare every route of the package with this."""

from __future__ import annotations

import random
import struct

import numpy as np
import torch

M64 = (1 << 64) - 1
MASK63 = (1 << 63) - 1
PY_STREAM, NP_STREAM, TORCH_STREAM = 0x243F6A8885A308D3, 0x13198A2E03707344, 0xA4093822299F31D0
GAMMA = 0x9E3779B97F4A7C15


def mix(z: int) -> int:
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & M64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def words(key: int, stream: int) -> list[int]:
    """The 624 32-bit state words of one generator."""
    s = mix((key ^ stream) & M64)
    out = []
    for i in range(312):
        z = mix((s + (i + 1) * GAMMA) & M64)
        out += [z & 0xFFFFFFFF, z >> 32]
    return out


def torch_state(key: int) -> torch.Tensor:
    """torch's serialized CPU state (``THGeneratorStateNew``: the legacy ``THGeneratorState``
    ``{the_initial_seed, left, seeded, next, state[624] as uint64, normal_x, normal_y,
    normal_rho, normal_is_valid}``, then the float cache and its flag) of version 3."""
    legacy = struct.pack("@QiiQ624Qdddi", key & MASK63, 1, 1, 0, *words(key, TORCH_STREAM), 0.0, 0.0, 0.0, 0)
    full = struct.pack("@QiiQ624Qdddi0Qf?0Q", key & MASK63, 1, 1, 0, *words(key, TORCH_STREAM), 0.0, 0.0, 0.0, 0,
                       0.0, False)
    assert full.startswith(legacy)
    return torch.frombuffer(bytearray(full), dtype=torch.uint8).clone()


def seed_python(key: int) -> None:
    random.setstate((3, tuple(words(key, PY_STREAM)) + (624,), None))


def seed_numpy(key: int) -> None:
    np.random.set_state(("MT19937", np.array(words(key, NP_STREAM), dtype=np.uint32), 624, 0, 0.0))


def seed_torch(key: int) -> None:
    torch.random.default_generator.set_state(torch_state(key))


def seed_by_formula(key: int) -> None:
    seed_python(key)
    seed_numpy(key)
    seed_torch(key)
