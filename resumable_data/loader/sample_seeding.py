"""``rd.DataLoader(seed_per_sample=...)``: how the global generators are seeded around user code,
and with which formula (the seeding version).

The choice, its parsing and its saved record only (torch-free); the seeding itself is
:mod:`.global_rng` and the fetch loop :mod:`.fetch`. Every mode delivers a pure function of the
position where its conditions hold (docs/dropin.md).

Seeding versions. From a sample's 64-bit key (``lo, hi``: its low and high 32-bit words) Python's
generator is seeded with ``random.seed(key)`` and torch's with ``manual_seed(key & (2**63 - 1))``
in every version; numpy's global generator with ``np.random.seed([lo ^ 0x7F4A7C15, hi ^
0x9E3779B9])`` (the key XOR :data:`NUMPY_KEY_XOR`, split into two words) in version 2, and with
``np.random.seed([lo, hi])`` in version 1: the very ``init_by_array`` words Python's ``random.seed``
uses, so in version 1 ``random.random()`` and ``np.random.random_sample()`` returned the same
numbers draw for draw within a sample (the defect found 2026-12-01). A fresh run seeds with
:data:`SEEDING_VERSION`; a restore continues with the version its state records (a state without
the record is version 1), so a run started before version 2 delivers what it always would have.

Guarantee. :class:`SeedingRecord` is what a loader state saves (``sample_seeding``): parsed
all-or-nothing, any bad value a :class:`~resumable_data.ResumeError` naming it. Cost: nothing per
sample for the version itself (it picks two constants for the seeding kernel once per batch);
version 2's separate numpy state costs the kernel about 0.7 us a sample (docs/dropin.md).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from resumable_data._schema import coerce_enum, expect_enum, expect_int, expect_mapping
from resumable_data.errors import ResumeError, describe

__all__ = ["DEFAULT_SEEDING", "NUMPY_KEY_XOR", "READABLE_SEEDING_VERSIONS", "SEEDING_VERSION", "UNRECORDED_SEEDING_VERSION", "SampleSeeding",
           "SeedingRecord",
           "numpy_key_xor", "numpy_seed_words", "sample_seeding"]

#: The seeding version a fresh run uses.
SEEDING_VERSION = 2
#: The version of a state without a ``sample_seeding`` record (written before version 2).
UNRECORDED_SEEDING_VERSION = 1
#: The versions a restore can continue with.
READABLE_SEEDING_VERSIONS = (1, 2)
#: What version 2 XORs the key with before splitting it into numpy's two seed words.
NUMPY_KEY_XOR = 0x9E3779B97F4A7C15

_NUMPY_XOR = {1: 0, 2: NUMPY_KEY_XOR}

K_MODE = "mode"
K_VERSION = "version"


class SampleSeeding(str, enum.Enum):
    """How ``rd.DataLoader(seed_per_sample=...)`` seeds the global ``random`` / numpy / torch
    generators around user code that runs per sample (``True`` is ``EAGER``, ``False`` ``OFF``)."""

    #: All three seeded from the sample's key before every sample (the default): exact for any code.
    EAGER = "eager"
    #: torch's seeded before every sample; Python's and numpy's left unseeded and watched, and
    #: seeded eagerly (in that process, for good) once user code is seen drawing from them, that
    #: batch fetched again seeded. Cheaper for datasets that never draw from them; exact only for
    #: a ``__getitem__`` that keeps no state between calls (docs/dropin.md).
    LAZY = "lazy"
    #: Nothing seeded (torch's behaviour).
    OFF = "off"


def sample_seeding(value: Any) -> SampleSeeding:
    """``seed_per_sample=`` as a :class:`SampleSeeding` (``True``/``False`` or a member or its value)."""
    if value is True:
        return SampleSeeding.EAGER
    if value is False:
        return SampleSeeding.OFF
    return coerce_enum(value, SampleSeeding, "seed_per_sample")


def numpy_key_xor(version: int) -> int:
    """The 64-bit word seeding ``version`` XORs a key with for numpy's seed words (0 in version 1)."""
    return _NUMPY_XOR[version]


def numpy_seed_words(key: int, version: int) -> list[int]:
    """numpy's two seed words for ``key`` under seeding ``version``: ``np.random.seed(words)``."""
    k = key ^ numpy_key_xor(version)
    return [k & 0xFFFFFFFF, k >> 32]


@dataclass(frozen=True)
class SeedingRecord:
    """A state's ``sample_seeding``: the loader's mode and the seeding version its run uses."""

    mode: SampleSeeding
    version: int = SEEDING_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {K_MODE: self.mode.value, K_VERSION: self.version}

    @classmethod
    def from_dict(cls, d: Any, where: str = "state.sample_seeding") -> SeedingRecord:
        expect_mapping(d, where, {K_MODE, K_VERSION})
        mode = expect_enum(d[K_MODE], SampleSeeding, f"{where}.{K_MODE}")
        version = expect_int(d[K_VERSION], f"{where}.{K_VERSION}")
        if version not in READABLE_SEEDING_VERSIONS:
            raise ResumeError(describe(f"{where}.{K_VERSION}", version, f"one of {list(READABLE_SEEDING_VERSIONS)}",
                                       "pass a state written by this or an earlier rd version (a newer rd wrote "
                                       "this one: resume with it)"))
        return cls(mode, version)


#: What a schema-4 state without a ``sample_seeding`` key records: the default mode, the current version.
#: Fixed for schema 4 for good (the literal 2, not SEEDING_VERSION): a version 3 would need a
#: schema that says so, or every keyless schema-4 state would resume under it.
DEFAULT_SEEDING = SeedingRecord(SampleSeeding.EAGER, 2)
