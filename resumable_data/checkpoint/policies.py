"""The training state's two options as enums: how a checkpoint inside a gradient-accumulation
window is made exact, and what a DCP load on more ranks than saved does for the new ranks'
generators. Their own module, so that :mod:`.state` and :mod:`.restore` both import them (no loop).
"""

from __future__ import annotations

import enum

__all__ = ["AccumulationPolicy", "NewRankRNG"]


class AccumulationPolicy(str, enum.Enum):
    """How a checkpoint inside a gradient-accumulation window is made exact."""

    #: Store the accumulated gradients and continue the window after the restore.
    SAVE_GRADIENTS = "save_gradients"
    #: Store the window start's RNG and buffers; the loader repeats the window.
    REWIND = "rewind"


class NewRankRNG(str, enum.Enum):
    """What a DCP load on more ranks than saved does for the ranks without saved generators."""

    #: The load raises :class:`CompatibilityError` on every rank.
    REFUSE = "refuse"
    #: Those ranks keep the generators the process seeded itself (seed them by rank).
    KEEP = "keep"
