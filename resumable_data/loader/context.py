"""Per-sample randomness: the sample context and the seeding of the global generators.

Algorithm. Before user code runs for the sample at position ``p``, the loader activates a
:class:`SampleContext` whose generators are seeded from ``sample_key(version, seed, p)`` and, by
default, seeds Python's ``random``, ``numpy.random`` and torch's CPU generator from the same key
(torch's with the key's low 63 bits, so ``torch.initial_seed()`` is a valid signed int64).
In the main process (``num_workers=0``) the global generator states are saved before a batch and
restored after it, so the training loop's own randomness (dropout masks) never depends on the
loader. Seeding, saving and restoring are :mod:`.global_rng`'s (equal to
``seed_globals_reference`` for the run's seeding version, :mod:`.sample_seeding`), all three
before every sample by default; under
``seed_per_sample=rd.SampleSeeding.LAZY`` Python's and numpy's only once user code draws from
them (see ``fetch.py``). The sample context object is built
only when user code calls :func:`sample_context` (one :class:`SampleSlot` per batch). Workers are separate processes whose global state nobody else reads, so nothing is
restored there.

Guarantee. A transform that draws from ``rd.sample_context().rng`` or from the global generators
gets the same numbers for the same position, whatever the worker id, worker count, rank or resume
point. Cost: one hash (batched) and one torch seeding per sample until user code draws from ``random`` /
numpy, three seedings after (a few us: see :mod:`.global_rng`), and nothing at all when no user
code runs per sample (``rd.ArrowShards`` with the default collate).
"""

from __future__ import annotations

import random
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import torch

from resumable_data.errors import UsageError
from resumable_data.loader.seeding.global_rng import GlobalRNGGuard, GlobalSeeder, seed_globals
from resumable_data.plan.sample_keys import numpy_generator, python_random, torch_seed

__all__ = [
    "BatchContext",
    "GlobalRNGGuard",
    "GlobalSeeder",
    "SampleContext",
    "SampleSlot",
    "batch_context",
    "sample_context",
    "seed_globals",
]


@dataclass(frozen=True)
class SampleContext:
    """Where the sample being fetched sits in the stream, and generators seeded from its key."""

    position: int
    epoch: int
    record: int
    key: int

    @cached_property
    def rng(self) -> np.random.Generator:
        """A numpy ``Generator`` seeded from the sample key."""
        return numpy_generator(self.key)

    @cached_property
    def torch_generator(self) -> torch.Generator:
        """A CPU ``torch.Generator`` seeded from the sample key."""
        return torch.Generator().manual_seed(torch_seed(self.key))

    @cached_property
    def random(self) -> random.Random:
        """A ``random.Random`` seeded from the sample key."""
        return python_random(self.key)


@dataclass(frozen=True)
class BatchContext:
    """Positions, records and keys of the batch a dataset's ``__getitems__`` is fetching."""

    positions: np.ndarray
    records: np.ndarray
    keys: np.ndarray
    epoch_len: int = field(repr=False)

    def sample(self, i: int) -> SampleContext:
        """The :class:`SampleContext` of the batch's ``i``-th sample."""
        p = int(self.positions[i])
        return SampleContext(p, p // self.epoch_len, int(self.records[i]), int(self.keys[i]))


_SAMPLE: ContextVar[SampleSlot | None] = ContextVar("rd_sample", default=None)
_BATCH: ContextVar[BatchContext | None] = ContextVar("rd_batch", default=None)


def sample_context() -> SampleContext:
    """The context of the sample being fetched; call it inside ``dataset.__getitem__``."""
    slot = _SAMPLE.get()
    ctx = None if slot is None else slot.context()
    if ctx is None:
        where = "inside __getitems__: use rd.batch_context().sample(i)" if _BATCH.get() else "outside a fetch"
        raise UsageError(
            f"sample_context() called {where}: expected a call from dataset.__getitem__ while "
            "rd.DataLoader fetches a sample; fix: call it from __getitem__ of a dataset iterated by rd.DataLoader"
        )
    return ctx


def batch_context() -> BatchContext:
    """The context of the batch being fetched; call it inside ``dataset.__getitems__``,
    ``collate_fn`` or ``arrow_collate``."""
    ctx = _BATCH.get()
    if ctx is None:
        raise UsageError(
            "batch_context() called outside a batched fetch: expected a call from dataset.__getitems__, "
            "collate_fn or arrow_collate while rd.DataLoader builds a batch; fix: call it from __getitems__, "
            "collate_fn or arrow_collate"
        )
    return ctx


class SampleSlot:
    """The sample context of the sample being fetched, built only if user code asks for it.

    One slot is activated per batch, holding the batch's positions and records (lists) and keys (a
    list or a uint64 array, read as ints);
    assigning :attr:`i` moves it to the next sample (one attribute store: no context object, no
    tuple and no context-variable switch per sample). ``keys=None``: the key is derived on demand
    by ``key_of(position)`` (when nothing is seeded, nobody may ever need it)."""

    __slots__ = ("_ctx", "_ctx_i", "_epoch_len", "_key_of", "_keys", "_positions", "_records", "i")

    def __init__(self, epoch_len: int, positions: list[int], records: list[int], keys: Any, key_of=None) -> None:
        self._epoch_len = epoch_len
        self._key_of = key_of
        self._positions, self._records, self._keys = positions, records, keys
        #: index of the sample being fetched in the batch; the loader assigns it per sample, -1 outside
        self.i = -1
        self._ctx: SampleContext | None = None
        self._ctx_i = -1

    def clear(self) -> None:
        self.i = self._ctx_i = -1
        self._ctx = None

    def context(self) -> SampleContext | None:
        i = self.i
        if i < 0:
            return None
        if self._ctx_i != i:  # first call for this sample: build (and keep) its context
            p = self._positions[i]
            k = int(self._key_of(p) if self._keys is None else self._keys[i])
            self._ctx = SampleContext(p, p // self._epoch_len, self._records[i], k)
            self._ctx_i = i
        return self._ctx


def activate_sample(slot: SampleSlot | None):
    return _SAMPLE.set(slot)


def activate_batch(ctx: BatchContext | None):
    return _BATCH.set(ctx)


def reset_sample(token) -> None:
    _SAMPLE.reset(token)


def reset_batch(token) -> None:
    _BATCH.reset(token)
