"""The positional-sampler protocol, and what a torch sampler means in plan terms.

A sampler the loader can resume by seeking is a pure function of ``(epoch, offset)``:
:class:`PositionalSampler` (``len``, ``indices(epoch, offsets)``, ``fingerprint()``). A torch sampler
translated by :mod:`.translate` becomes a :class:`Translated`: the shuffle, seed, sharding, tail and
batch size it implies, and a positional sampler where it orders the records itself.

Guarantee. Torch-free: the resolver (:mod:`.resolve`) types the translation without importing torch.
A positional sampler's fingerprint is stored in the loader state and compared on resume, so a
sampler that would map positions differently is refused rather than silently resumed.

Cost. Nothing here runs: types only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from resumable_data.plan import Sharding, Tail

__all__ = ["PositionalSampler", "Translated"]


@runtime_checkable
class PositionalSampler(Protocol):
    """A sampler that can be resumed by seeking: a pure function of (epoch, offset).

    * ``len(sampler)``: positions per epoch;
    * ``sampler.indices(epoch, offsets)``: the dataset indices at ``offsets`` (an int64 array with
      values in ``[0, len(sampler))``) of epoch ``epoch``; it must not depend on call history;
    * ``sampler.fingerprint()``: a short string naming the sampler and its settings; it is stored
      in the loader state and a resume with another fingerprint is refused.
    """

    def __len__(self) -> int: ...

    def indices(self, epoch: int, offsets: np.ndarray) -> np.ndarray:
        """The dataset indices at ``offsets`` of ``epoch``: a pure function of its arguments."""

    def fingerprint(self) -> str:
        """A string that changes whenever ``indices`` would (recorded in the state, compared on resume)."""


@dataclass(frozen=True)
class Translated:
    """What a torch sampler means in plan terms (``None``: not implied by the sampler)."""

    shuffle: bool | None = None
    seed: int | None = None
    sharding: Sharding | None = None
    tail: Tail | None = None
    batch_size: int | None = None
    positional: PositionalSampler | None = None
