"""Per-source progress of an ``rd.Mixture`` loader: what ``loader.mixture_progress()`` returns.

A frozen record of each source's records consumed, epoch and in-epoch position at a committed
cursor, the next step's per-source counts and (when counted) each source's tokens. Built by
:func:`~.state.mixture_progress` (unpacked) and :func:`~.packed.packed_progress` (packed);
nothing here computes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from resumable_data.plan.mixture.plan import SourceProgress

__all__ = ["MixtureProgress"]


@dataclass(frozen=True)
class MixtureProgress:
    """Per-source progress at a loader state's committed cursor.

    ``position``: the mixed stream's position of the next step; ``sources``: each source's
    records consumed, its epoch and in-epoch position; ``next_step``: how many records of each
    source the next global step holds.
    """

    step: int
    position: int
    sources: tuple[SourceProgress, ...]
    next_step: dict[str, int]
    #: Non-padding tokens of ``token_column`` in each source's consumed records (None: not counted);
    #: packed, the input tokens of the sequences passed, a skipped step's included (not delivered).
    tokens: dict[str, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        tokens = self.tokens or {}
        return {
            "step": self.step,
            "position": self.position,
            "next_step": dict(self.next_step),
            "sources": {
                p.name: {
                    "consumed": p.consumed,
                    "epoch": p.epoch,
                    "position": p.position,
                    "size": p.size,
                    **({"tokens": tokens[p.name]} if p.name in tokens else {}),
                }
                for p in self.sources
            },
        }
