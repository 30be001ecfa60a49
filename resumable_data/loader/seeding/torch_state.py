"""torch's serialized CPU generator state (``get_state`` / ``set_state``), written field by field.

What it is. torch's CPU generator serializes as the legacy ``THGeneratorState`` (``the_initial_seed``,
``left``, ``seeded``, ``next``, 624 state words as 64-bit integers, the double normal cache
``normal_x/y/rho`` with ``normal_is_valid``), then the float cache and its flag: the layout rd
knows for torch 2.x (:func:`check_state_layout` refuses another size). :func:`state_tensor`
builds the state seeding version 3 sets through torch's public ``set_state`` (the reference
route, and what the probe in :mod:`.raw_torch` verifies its copies against). No raw memory:
bytes built with :mod:`struct`, handed to torch. Cost: a few us a state (the reference route only).
"""

from __future__ import annotations

import struct

import numpy as np
import torch

from resumable_data.errors import ConfigError, describe

__all__ = ["STATE_SIZE", "check_state_layout", "state_tensor", "with_caches"]

_MASK63 = (1 << 63) - 1
# torch's serialized CPU state (get_state / set_state): the legacy THGeneratorState, then the
# float cache and its flag; the double cache is ``normal_y`` with ``normal_is_valid``
_LEGACY = "@QiiQ624Qdddi0Q"
_NORMAL_Y = struct.calcsize("@QiiQ624Qd")
_NORMAL_VALID = struct.calcsize("@QiiQ624Qddd")
_FLOAT = struct.calcsize(_LEGACY)
_STATE_SIZE = struct.calcsize(_LEGACY + "f?0Q")
_HEADER = struct.calcsize("@QiiQ")  # the_initial_seed, left, seeded, next: then the state words
#: bytes of torch's serialized CPU state, as rd knows it
STATE_SIZE = _STATE_SIZE


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


def with_caches(base: bytes, fvalue: float | None, dvalue: float | None) -> torch.Tensor:
    """``base`` (a serialized state) with the float / double normal caches set to ``fvalue`` /
    ``dvalue`` (None: disengaged)."""
    b = bytearray(base)
    struct.pack_into("@d", b, _NORMAL_Y, 0.0 if dvalue is None else dvalue)
    struct.pack_into("@i", b, _NORMAL_VALID, int(dvalue is not None))
    struct.pack_into("@f?", b, _FLOAT, 0.0 if fvalue is None else fvalue, fvalue is not None)
    return torch.frombuffer(b, dtype=torch.uint8).clone()
