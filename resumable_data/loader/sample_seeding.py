"""``rd.DataLoader(seed_per_sample=...)``: how the global generators are seeded around user code.

The choice and its parsing only (torch-free); the seeding itself is :mod:`.global_rng` and the
fetch loop :mod:`.fetch`. Nothing here is saved in a state: every mode delivers a pure function of
the position where its conditions hold (docs/dropin.md).
"""

from __future__ import annotations

import enum
from typing import Any

from resumable_data._schema import coerce_enum

__all__ = ["SampleSeeding", "sample_seeding"]


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
