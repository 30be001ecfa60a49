"""``rd.DataLoader(seed_per_sample=...)``: how the global generators are seeded around user code,
and with which formula (the seeding version).

The choice, its parsing and its saved record only (torch-free); the seeding itself is
:mod:`.global_rng` and the fetch loop :mod:`.fetch`. Every mode delivers a pure function of the
position where its conditions hold (docs/dropin.md).

Seeding versions. From a sample's 64-bit ``key``:

* version 3 (fresh runs since 2026-12-02): each of the three MT19937 generators (Python's
  ``random``, numpy's global ``RandomState``, torch's default CPU generator) gets a whole state
  of 624 words that are 312 outputs of SplitMix64 started at ``mix(key ^ STREAM)`` (its own
  64-bit stream constant, :data:`STREAMS`), each output as its low then its high word
  (:func:`hash_state`); the generators' positions are set to "state used up" (Python's index and
  numpy's pos 624, torch's ``left_ = 1``), so their first draw twists the state exactly as after
  their own seeding functions; torch's ``initial_seed()`` is ``key & (2**63 - 1)``; cached
  Gaussians are cleared. That is what ``random.setstate``, ``np.random.set_state`` and torch's
  ``set_state`` of those words give (the reference route). Filling a state is one SplitMix64
  step per two words, independent across words, so the compiled kernel runs it in vector lanes:
  about a tenth of what version 2 costs.
* version 2: the seeding functions: Python's ``random.seed(key)``, torch's ``manual_seed(key &
  (2**63 - 1))``, numpy's ``np.random.seed([lo ^ 0x7F4A7C15, hi ^ 0x9E3779B9])`` (``lo, hi``: the
  key's 32-bit words XOR :data:`NUMPY_KEY_XOR`). Each ``init_by_array`` is a chain of 1,247
  dependent steps per key.
* version 1: as version 2 with numpy seeded ``np.random.seed([lo, hi])``, the very words Python's
  ``random.seed`` uses: ``random.random()`` and ``np.random.random_sample()`` returned the same
  numbers draw for draw within a sample (the defect found 2026-12-01).

A fresh run seeds with :data:`SEEDING_VERSION`; a restore continues with the version its state
records (loader schema 5 without the record: version 3; schema 4 without it: version 2; schemas
1-3, which have none: version 1), so a run started before a version change delivers what it
always would have. ``rd.seed_globals(key)`` seeds the globals as a fresh run does, to reproduce
one sample outside the loader.

Guarantee. :class:`SeedingRecord` is what a loader state saves (``sample_seeding``): parsed
all-or-nothing, any bad value a :class:`~resumable_data.ResumeError` naming it. A checkpoint's
loader fingerprint (``meta.data``, what ``rd.check_compatible`` compares) records the mode only,
as ``seed_per_sample`` (:data:`K_FINGERPRINT_MODE`, read by :func:`fingerprint_mode`): the version
is the saved state's to decide on restore, never a mismatch. Cost: nothing per
sample for the version itself (it picks the kernel once per batch; docs/dropin.md).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from resumable_data._schema import coerce_enum, expect_enum, expect_int, expect_mapping
from resumable_data.errors import ResumeError, describe

__all__ = [
    "DEFAULT_SEEDING",
    "HASHED_VERSIONS",
    "K_FINGERPRINT_MODE",
    "NUMPY_KEY_XOR",
    "READABLE_SEEDING_VERSIONS",
    "SCHEMA_DEFAULT_SEEDING",
    "SEEDING_VERSION",
    "STREAMS",
    "UNRECORDED_SEEDING_VERSION",
    "SampleSeeding",
    "SeedingRecord",
    "fingerprint_mode",
    "fingerprint_section",
    "numpy_key_xor",
    "numpy_seed_words",
    "sample_seeding",
]

#: The seeding version a fresh run uses.
SEEDING_VERSION = 3
#: The version of a state without a ``sample_seeding`` record (written before version 2).
UNRECORDED_SEEDING_VERSION = 1
#: The versions a restore can continue with.
READABLE_SEEDING_VERSIONS = (1, 2, 3)
#: The versions whose states are SplitMix64 streams of the key (not the seeding functions').
HASHED_VERSIONS = (3,)
#: Version 3's stream constants (the first words of pi's fraction): Python's, numpy's, torch's.
STREAMS = (0x243F6A8885A308D3, 0x13198A2E03707344, 0xA4093822299F31D0)
#: What version 2 XORs the key with before splitting it into numpy's two seed words.
NUMPY_KEY_XOR = 0x9E3779B97F4A7C15

_NUMPY_XOR = {1: 0, 2: NUMPY_KEY_XOR}

K_MODE = "mode"
K_VERSION = "version"
#: The key of a loader fingerprint (a checkpoint's ``meta.data``) that records the mode.
K_FINGERPRINT_MODE = "seed_per_sample"


class SampleSeeding(str, enum.Enum):
    """How ``rd.DataLoader(seed_per_sample=...)`` seeds the global ``random`` / numpy / torch
    generators around user code that runs per sample (``True`` is ``EAGER``, ``False`` ``OFF``)."""

    #: All three seeded from the sample's key before every sample (the default): exact for any code.
    EAGER = "eager"
    #: The three left unseeded and watched; each seeded before every sample (in that process, for
    #: good) once user code is seen drawing from it (Python's or numpy's: all three), that batch
    #: fetched again seeded. Cheaper for datasets that do not draw from every generator; exact
    #: only for a ``__getitem__`` that keeps no state between calls and reads no generator's state
    #: without drawing (docs/dropin.md).
    LAZY = "lazy"
    #: Nothing seeded (torch's behaviour).
    OFF = "off"


_MODES = {m.value: m for m in SampleSeeding}


def sample_seeding(value: Any) -> SampleSeeding:
    """``seed_per_sample=`` as a :class:`SampleSeeding` (``True``/``False`` or a member or its value)."""
    if value is True:
        return SampleSeeding.EAGER
    if value is False:
        return SampleSeeding.OFF
    return coerce_enum(value, SampleSeeding, "seed_per_sample")


def fingerprint_mode(data: Any, where: str = "data") -> SampleSeeding | None:
    """The ``seed_per_sample`` mode a loader fingerprint records (``data[K_FINGERPRINT_MODE]``, a
    mode's value); None when it records none (metadata written before the key, a state without a
    seeding record). Any other value raises :class:`~resumable_data.ResumeError` naming ``where``."""
    if not isinstance(data, dict) or K_FINGERPRINT_MODE not in data:
        return None
    v = data[K_FINGERPRINT_MODE]
    if type(v) is not str or v not in _MODES:
        raise ResumeError(
            describe(
                f"{where}.{K_FINGERPRINT_MODE}",
                v,
                f"one of {list(_MODES)} (the loader's seed_per_sample mode)",
                "pass an unmodified checkpoint (meta.json) or TrainingState.meta() of the current run",
            )
        )
    return _MODES[v]


def fingerprint_section(record: SeedingRecord | None) -> dict[str, str]:
    """What a loader fingerprint records of ``record``: ``{K_FINGERPRINT_MODE: mode}``, or nothing."""
    return {} if record is None else {K_FINGERPRINT_MODE: record.mode.value}


def numpy_key_xor(version: int) -> int:
    """The 64-bit word seeding ``version`` (1 or 2) XORs a key with for numpy's seed words (0 in version 1)."""
    return _NUMPY_XOR[version]


def numpy_seed_words(key: int, version: int) -> list[int]:
    """numpy's two seed words for ``key`` under seeding ``version`` (1 or 2): ``np.random.seed(words)``."""
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
            raise ResumeError(
                describe(
                    f"{where}.{K_VERSION}",
                    version,
                    f"one of {list(READABLE_SEEDING_VERSIONS)}",
                    "pass a state written by this or an earlier rd version (a newer rd wrote this one: resume with it)",
                )
            )
        return cls(mode, version)


#: What a state without a ``sample_seeding`` key records, by loader schema: the default mode and the
#: version that was current when the schema was. Fixed for good per schema (literals, not
#: SEEDING_VERSION): a new version needs a new schema, or every keyless state would resume under it.
SCHEMA_DEFAULT_SEEDING = {4: SeedingRecord(SampleSeeding.EAGER, 2), 5: SeedingRecord(SampleSeeding.EAGER, 3)}
#: What a state rd writes now omits (schema 5's keyless record).
DEFAULT_SEEDING = SCHEMA_DEFAULT_SEEDING[5]
