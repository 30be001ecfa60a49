"""The loader's configuration: one frozen, typed record of everything a loader's behaviour depends on.

A :class:`LoaderConfig` is built by :func:`~resumable_data.loader.resolve.resolve_config` from
torch-style arguments (every check lives there and in the modules it calls). It holds the plan, the
sharding, the fetch mode, the batch and commit settings, per-sample seeding, packing and the
:class:`~.order.StreamOrder` the positions map to.

Guarantee. Frozen: nothing changes a config after construction; the same arguments give an equal
config (the callables, the order object and the token lengths are left out of the comparison).
:meth:`LoaderConfig.fingerprint` is the state of a fresh loader with this config (progress all zero).

Cost. O(1) to build and to fingerprint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from resumable_data.loader.dataset_version import UNPINNED
from resumable_data.loader.fetch_mode import FetchMode
from resumable_data.loader.order import PlanOrder, StreamOrder
from resumable_data.loader.seeding.sample_seeding import SampleSeeding, SeedingRecord
from resumable_data.loader.state import CommitMode, Layout, LoaderState
from resumable_data.plan import BatchSchedule, Plan, Sharding
from resumable_data.plan.packing import Packing

# FetchMode, UNPINNED and SampleSeeding: re-exported (their modules are .fetch_mode, .dataset_version, .seeding)
__all__ = ["UNPINNED", "FetchMode", "LoaderConfig", "SampleSeeding"]


@dataclass(frozen=True)
class LoaderConfig:
    """Everything a loader's behaviour depends on, resolved and validated (see the module docs)."""

    plan: Plan
    sharding: Sharding
    mode: FetchMode
    #: The per-rank batch (the first step's, under a schedule).
    per_rank: int
    unbatched: bool
    elastic: bool
    commit: CommitMode
    accumulation_steps: int
    pinned: bool
    seed_per_sample: bool
    #: SampleSeeding.LAZY: Python's and numpy's generators seeded only once user code draws
    lazy_seeding: bool = False
    #: The dataset's ``__getitem__`` is library code that draws nothing (``draw_free.draws_nothing``)
    #: and no ``transform=`` runs: per-sample seeding would change nothing observable, so it is skipped.
    draw_free: bool = False
    token_column: str | None = None
    packing: Packing | None = None
    #: Token lengths of every document (packing only), from the offsets of the token column.
    lengths: np.ndarray | None = field(default=None, compare=False, repr=False)
    #: What the positions map to (:class:`~.order.StreamOrder`): the plan's own order by default, a
    #: user's :class:`rd.PositionalSampler` (:class:`~.order.SamplerOrder`) or an ``rd.Mixture``'s.
    order: StreamOrder = field(default=None, compare=False)  # type: ignore[assignment]  # set in __post_init__
    collate_fn: Callable | None = field(default=None, compare=False)
    arrow_collate: Callable | None = field(default=None, compare=False)
    #: A per-sample function applied with ``rd.sample_context()`` active (``transform=``).
    transform: Callable | None = field(default=None, compare=False)
    #: ``len(dataset)`` at construction (a changed length is refused at ``iter()``).
    dataset_len: int = 0
    #: The per-rank batch schedule as given (``batch_size=``), or None for a fixed batch.
    batch_schedule: BatchSchedule | None = None

    def __post_init__(self) -> None:
        if self.order is None:
            object.__setattr__(self, "order", PlanOrder(self.plan))

    def fingerprint(self) -> LoaderState:
        """The state of a fresh loader with this config (progress all zero)."""
        return LoaderState(
            plan=self.plan,
            layout=Layout(self.sharding.world_size, self.sharding.policy),
            elastic=self.elastic,
            commit=self.commit,
            accumulation_steps=self.accumulation_steps,
            packing=self.packing,
            pinned=self.pinned,
            sampler=self.order.fingerprint(),
            mixture=self.order.state_section(),
            sample_seeding=SeedingRecord(
                SampleSeeding.OFF
                if not self.seed_per_sample
                else SampleSeeding.LAZY
                if self.lazy_seeding
                else SampleSeeding.EAGER
            ),
        )
