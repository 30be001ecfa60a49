"""The reference route of per-sample seeding, and the row buffers the fast route copies from.

Algorithm. :func:`seed_globals_reference` seeds the three global generators from a key through
their public setters, as the seeding version defines it (:mod:`.sample_seeding`): version 3
``random.setstate`` / ``np.random.set_state`` / torch's ``set_state`` of the hashed states,
versions 1-2 the seeding functions (``random.seed(key)``, ``np.random.seed(numpy_seed_words(key,
version))``, ``torch.manual_seed(key & (2**63 - 1))``); :func:`reference_python`,
:func:`reference_numpy`, :func:`reference_torch` are its three parts. A row of
:func:`~.mt19937.fill_rows` holds, for one key, the bytes each generator holds right after that
route (Python's ``RandomObject`` ``[index, state]``, numpy's ``mt19937_state`` ``[state, pos]``,
torch's ``CPUGeneratorImpl`` region); :class:`RowBuffer` is a reusable buffer of such rows with
each row's byte slices made once (making a memoryview slice costs about as much as the copy it
serves). The copies themselves are :func:`.raw_seeding.seed_function`'s (the ``raw_*`` modules
alone write the generators' memory, :mod:`.raw_memory`); this module touches none.

Guarantee. The reference route is the definition the copies must equal (the seeding tests
compare them). Cost: the reference route is microseconds a sample (the fast route's is in
:mod:`.raw_seeding`); a row buffer is made once per batch size and pooled.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import torch

from resumable_data.errors import ConfigError, describe
from resumable_data.loader.seeding.mt19937 import NP_COL, PYNP_WORDS, hash_state
from resumable_data.loader.seeding.mt19937 import N as _N
from resumable_data.loader.seeding.sample_seeding import HASHED_VERSIONS, SEEDING_VERSION, STREAMS, numpy_seed_words
from resumable_data.loader.seeding.torch_state import state_tensor

__all__ = [
    "RowBuffer",
    "check_numpy_generator",
    "reference_numpy",
    "reference_python",
    "reference_route",
    "reference_torch",
    "seed_globals_reference",
]

_MASK63 = (1 << 63) - 1
_PY_BYTES = (_N + 1) * 4  # [index, state] / [state, pos]: one generator's part of a row
_NP_AT = NP_COL * 4
_PYNP_BYTES = PYNP_WORDS * 4


def reference_python(key: int, version: int) -> None:
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


def reference_numpy(key: int, version: int) -> None:
    if version in HASHED_VERSIONS:
        np.random.set_state(("MT19937", hash_state(key, STREAMS[1]), _N, 0, 0.0))
    else:
        np.random.seed(np.array(numpy_seed_words(key, version), dtype=np.uint32))


def reference_torch(key: int, version: int) -> None:
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
    reference_python(key, version)
    reference_numpy(key, version)
    reference_torch(key, version)


def reference_route(key: int, torch_only: bool, version: int) -> None:
    """The reference route of one key: torch's generator alone, or all three."""
    if torch_only:
        reference_torch(key, version)
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
        src = self.rows.data.cast("B")  # the rows' memory (ndarray.data: its memoryview)
        starts = range(0, n * width * 4, width * 4)
        self.py = [src[o : o + _PY_BYTES] for o in starts]  # [index, state]
        self.np = [src[o + _NP_AT : o + _NP_AT + _PY_BYTES] for o in starts]  # [state, pos]
        self.torch = [src[o + _PYNP_BYTES : o + _PYNP_BYTES + torch_bytes] for o in starts] if torch_bytes else []
