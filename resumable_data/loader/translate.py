"""Translating torch samplers into plan settings, and the positional-sampler protocol.

A sampler that draws from a generator as it goes (history-dependent) cannot be resumed by
seeking, so ``rd.DataLoader`` accepts only samplers it can express as a pure function of the
position: torch's ``SequentialSampler``, ``RandomSampler`` (without replacement),
``DistributedSampler`` and ``BatchSampler`` over those are translated into the equivalent order,
seed, sharding and tail; anything else must implement :class:`PositionalSampler`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler, SequentialSampler

from resumable_data.plan import Sharding, ShardingPolicy, Tail

__all__ = ["PositionalSampler", "Translated", "translate_sampler"]


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

    def indices(self, epoch: int, offsets: np.ndarray) -> np.ndarray: ...

    def fingerprint(self) -> str: ...


@dataclass(frozen=True)
class Translated:
    """What a torch sampler means in plan terms (``None``: not implied by the sampler)."""

    shuffle: bool | None = None
    seed: int | None = None
    sharding: Sharding | None = None
    tail: Tail | None = None
    batch_size: int | None = None
    positional: Any = None


def _reject(sampler: Any, param: str) -> TypeError:
    return TypeError(
        f"{param}={type(sampler).__name__}: expected None, a torch SequentialSampler, RandomSampler "
        "(replacement=False), DistributedSampler or BatchSampler over those, or a sampler implementing "
        "rd.PositionalSampler (__len__, indices(epoch, offsets), fingerprint()); a sampler that draws "
        "from a generator as it iterates depends on its history and cannot be resumed by seeking; fix: "
        "use shuffle=True with seed=, or give the sampler the positional methods"
    )


def translate_sampler(sampler: Any, batch_sampler: Any, dataset_len: int) -> Translated:
    """The plan settings equivalent to ``sampler`` / ``batch_sampler`` (raises ``TypeError``)."""
    if batch_sampler is not None:
        if not isinstance(batch_sampler, BatchSampler):
            raise _reject(batch_sampler, "batch_sampler")
        inner = translate_sampler(batch_sampler.sampler, None, dataset_len)
        tail = Tail.DROP if batch_sampler.drop_last else inner.tail
        return Translated(inner.shuffle, inner.seed, inner.sharding, tail, batch_sampler.batch_size, inner.positional)
    if sampler is None:
        return Translated()
    if isinstance(sampler, DistributedSampler):
        return Translated(
            shuffle=bool(sampler.shuffle),
            seed=int(sampler.seed),
            sharding=Sharding(int(sampler.num_replicas), int(sampler.rank), ShardingPolicy.STRIDED),
            tail=Tail.DROP if sampler.drop_last else Tail.WRAP,
        )
    if isinstance(sampler, SequentialSampler):
        return Translated(shuffle=False)
    if isinstance(sampler, RandomSampler):
        if sampler.replacement or sampler.num_samples != dataset_len:
            raise _reject(sampler, "sampler")
        gen = sampler.generator
        return Translated(shuffle=True, seed=None if gen is None else int(gen.initial_seed()))
    if isinstance(sampler, PositionalSampler):
        return Translated(positional=sampler)
    raise _reject(sampler, "sampler")
