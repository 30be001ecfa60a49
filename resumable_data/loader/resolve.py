"""torch-style ``DataLoader`` arguments resolved into one frozen :class:`~.config.LoaderConfig`.

Algorithm. :func:`resolve_config` applies torch's argument rules (:mod:`.torch_rules`: ``batch_sampler``
alone, ``shuffle`` or a sampler, ``batch_size=None`` unbatched, ``drop_last``), translates torch
samplers into plan settings (:mod:`.translate`), picks the seed, order and tail
(:mod:`.stream_options`), the dataset version (:mod:`.dataset_version`) and the fetch mode
(:mod:`.fetch_mode`, which validates packing against the source), and builds the plan and the
:class:`~.order.StreamOrder` the positions map to. The worker arguments are checked apart
(:mod:`.worker_options`): they are not part of the config.

Batch size. ``batch_size`` is the per-rank batch (torch's meaning) and the global batch is
``batch_size * world_size``. A schedule in its place (an :class:`rd.BatchRamp`, an
:class:`rd.BatchSteps` or a list of ``(step, batch)`` pairs) is per rank too, every count
(batches, and a ramp's samples) scaled by the world size to the plan's global schedule, so each
rank's share of every step is exactly the schedule's batch. A schedule whose batch changes runs
on the ``continuous`` tail (its default; ``drop_last=True``, a DistributedSampler's tail or
packing beside it are refused). Every check of the loader's arguments is reached from here, so a bad
argument raises :class:`rd.ConfigError` at construction, before any worker exists or any batch is
read.

Guarantee. The function is pure in the sense that matters for testing: it creates no torch
object, starts nothing and writes nothing; it reads only the dataset's length, schema and (when
packing) its token lengths. The same arguments give an equal config.

Cost. O(1) except packing, which reads the offsets of the token column once (no token data).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from resumable_data._schema import check_int, coerce_enum
from resumable_data.errors import ConfigError, describe
from resumable_data.loader.config import LoaderConfig
from resumable_data.loader.dataset_version import resolve_version
from resumable_data.loader.fetch_mode import MapDataset, resolve_fetch_mode
from resumable_data.loader.mixture.options import check_mixture_options
from resumable_data.loader.order import PlanOrder, SamplerOrder, StreamOrder
from resumable_data.loader.positional import Translated
from resumable_data.loader.samplers import PositionalRandomSampler, PositionalWeightedSampler
from resumable_data.loader.seeding.draw_free import draws_nothing
from resumable_data.loader.seeding.sample_seeding import SampleSeeding, sample_seeding
from resumable_data.loader.state import CommitMode
from resumable_data.loader.stream_options import order_spec, resolve_seed, resolve_tail
from resumable_data.loader.torch_rules import check_kinds, check_sampling_rules, is_iterable_dataset
from resumable_data.plan import BatchSchedule, HasReadUnits, OrderSpec, Plan, ReadUnits, Sharding, Tail, WindowBlocks
from resumable_data.plan.batch_schedule import as_schedule
from resumable_data.plan.packing import Packing

__all__ = ["resolve_config"]


def _translate(sampler: Any, batch_sampler: Any, n: int) -> Translated | None:
    if sampler is None and batch_sampler is None:
        return None
    from resumable_data.loader.translate import translate_sampler  # torch's sampler classes

    return translate_sampler(sampler, batch_sampler, n)


def _default_sharding() -> Sharding:
    from resumable_data.loader.environment import sharding_from_environment

    return sharding_from_environment()


def _batch(batch_size: Any) -> tuple[BatchSchedule | None, int]:
    """``(the per-rank schedule or None for a fixed batch, the first per-rank batch)``."""
    schedule = None if batch_size is None or isinstance(batch_size, (int, np.integer)) else as_schedule(batch_size)
    if schedule is not None:
        check_int(schedule.max_batch, "batch_size (the schedule's largest batch)", 1, 1 << 30)
        return schedule, schedule.first_batch
    return None, 1 if batch_size is None else check_int(batch_size, "batch_size", 1, 1 << 30)


def resolve_config(
    dataset: Any,
    *,
    batch_size: int | BatchSchedule | list | None = 1,
    shuffle: bool | None = None,
    sampler: Any = None,
    batch_sampler: Any = None,
    drop_last: bool = False,
    collate_fn: Callable | None = None,
    generator: Any = None,
    in_order: bool = True,
    seed: int | None = None,
    shuffle_window: int | None = None,
    window_blocks: WindowBlocks | str = WindowBlocks.RECORDS,
    sharding: Sharding | None = None,
    elastic: bool = True,
    tail: Tail | str | None = None,
    commit: CommitMode | str = CommitMode.AUTO,
    accumulation_steps: int = 1,
    dataset_version: Any = None,
    packing: Packing | None = None,
    seed_per_sample: bool | SampleSeeding | str = True,
    arrow_collate: Callable | None = None,
    token_column: str | None = None,
    transform: Callable | None = None,
) -> LoaderConfig:
    """The :class:`LoaderConfig` of ``rd.DataLoader(dataset, ...)`` (same arguments, same rules)."""
    check_sampling_rules(dataset, batch_size, shuffle, sampler, batch_sampler, drop_last)
    if not in_order:
        raise ConfigError(
            describe("in_order", in_order, "True", "drop in_order=False: a resumable stream is delivered in order")
        )
    if is_iterable_dataset(dataset):
        raise ConfigError(
            describe(
                "dataset",
                type(dataset).__name__,
                "a map-style dataset (__len__ and __getitem__), not a torch "
                "IterableDataset (a stream has no position to seek to, sized or not)",
                "index the records in a map-style dataset, or write Arrow shards and use rd.ArrowShards",
            )
        )
    if transform is not None and not callable(transform):
        raise ConfigError(describe("transform", transform, "a function of one sample", "pass a callable or None"))
    check_kinds(collate_fn, generator, elastic, shuffle)
    if not isinstance(dataset, MapDataset):
        raise ConfigError(
            describe(
                "dataset",
                type(dataset).__name__,
                "a map-style dataset (__len__ and __getitem__)",
                "wrap an iterable dataset in a map-style one or write Arrow shards and use rd.ArrowShards",
            )
        )
    from resumable_data.sources.mixture import Mixture  # sources import pyarrow only

    mixture = dataset if isinstance(dataset, Mixture) else None
    if mixture is not None:
        check_mixture_options(shuffle, shuffle_window, sampler, batch_sampler, dataset_version, window_blocks)
    n = len(dataset)
    if n < 1:
        raise ConfigError(describe("dataset", f"len {n}", "at least one record", "pass a non-empty dataset"))
    tr = _translate(sampler, batch_sampler, n)
    tr_shuffle = tr.shuffle if tr is not None else None
    tr_seed = tr.seed if tr is not None else None
    tr_sharding = tr.sharding if tr is not None else None
    tr_tail = tr.tail if tr is not None else None
    positional = tr.positional if tr is not None else None
    if tr is not None and batch_sampler is not None:
        batch_size = tr.batch_size
    do_shuffle = bool(shuffle) if tr_shuffle is None else tr_shuffle
    if sharding is not None and tr_sharding is not None:
        raise ConfigError(
            describe("sharding", sharding, "unset when a DistributedSampler is given", "pass one of the two")
        )
    sharding = sharding or tr_sharding or _default_sharding()
    if not isinstance(sharding, Sharding):
        raise ConfigError(describe("sharding", sharding, "an rd.Sharding", "pass rd.Sharding(world_size, rank)"))
    unbatched = batch_size is None
    schedule, per_rank = _batch(batch_size)
    world = sharding.world_size

    keyed = isinstance(positional, (PositionalRandomSampler, PositionalWeightedSampler))  # rd's, keyed by the seed
    seed = resolve_seed(
        seed,
        tr_seed,
        generator,
        do_shuffle or bool(shuffle_window) or keyed or (mixture is not None and mixture.shuffle),
    )
    if isinstance(positional, (PositionalRandomSampler, PositionalWeightedSampler)):
        positional = positional.with_seed(seed)
    order = order_spec(shuffle_window, do_shuffle, shuffle, positional, window_blocks)
    units = _read_units(dataset, order, n)
    changing = None if schedule is None or schedule.is_constant else schedule  # a schedule whose batch changes
    tail = resolve_tail(tail, drop_last, packing, tr_tail, world, changing is not None)

    from resumable_data.plan.mixture.plan import StepPositions

    version_hash, pinned = resolve_version(dataset, dataset_version)
    if mixture is not None:  # the mixture orders the records (see rd.Mixture)
        steps_map = None  # a fixed batch on an epoch tail: step * global batch, epochs of whole batches
        if tail is Tail.CONTINUOUS:  # one continuous stream: the nominal epoch, steps mapped by the schedule
            steps_map = changing.scaled(world).step_start if changing is not None else StepPositions(per_rank * world)
        positional = mixture.sampler(seed, per_rank * world, packed=packing is not None, position_of_step=steps_map)
    mode, lengths, token_column = resolve_fetch_mode(
        dataset,
        mixture=mixture is not None,
        packing=packing,
        transform=transform,
        collate_fn=collate_fn,
        arrow_collate=arrow_collate,
        token_column=token_column,
        positional=positional,
    )

    seeding = sample_seeding(seed_per_sample)
    epoch_records = len(positional) if positional is not None else n
    global_schedule = None if schedule is None else schedule.scaled(world)
    plan = Plan(
        epoch_records,
        per_rank * world if global_schedule is None else global_schedule.max_batch,
        version_hash,
        seed,
        order,
        tail,
        world if tail is Tail.PAD else 1,
        schedule=global_schedule,
        units=units,
        packed=packing is not None,
    )
    sharding.check_global_batch(plan.global_batch)
    return LoaderConfig(
        plan=plan,
        sharding=sharding,
        mode=mode,
        per_rank=per_rank,
        unbatched=unbatched,
        elastic=bool(elastic),
        commit=coerce_enum(commit, CommitMode, "commit"),
        accumulation_steps=check_int(accumulation_steps, "accumulation_steps", 1, 1 << 20),
        pinned=pinned,
        seed_per_sample=seeding is not SampleSeeding.OFF,
        lazy_seeding=seeding is SampleSeeding.LAZY,
        draw_free=transform is None and draws_nothing(dataset),
        token_column=token_column,
        packing=packing,
        lengths=lengths,
        order=_stream_order(plan, positional, mixture is not None, token_column, lengths, packing is not None),
        collate_fn=collate_fn,
        arrow_collate=arrow_collate,
        transform=transform,
        dataset_len=n,
        batch_schedule=schedule,
    )


def _read_units(dataset: Any, order: OrderSpec, n: int) -> ReadUnits | None:
    """The dataset's read units for a window shuffle over read units (else None)."""
    if order.blocks is not WindowBlocks.READ_UNITS:
        return None
    if not isinstance(dataset, HasReadUnits):
        raise ConfigError(
            describe(
                "window_blocks",
                order.blocks.value,
                f"a dataset read in units (rd.ArrowShards), not a {type(dataset).__name__}",
                "drop window_blocks (blocks of records: the default) for this dataset",
            )
        )
    unit_starts = dataset.unit_starts
    if not callable(unit_starts):  # a runtime protocol checks that the name exists, not that it is a method
        raise ConfigError(
            describe(
                "window_blocks",
                order.blocks.value,
                f"a dataset whose unit_starts is a method returning its units' first record ids "
                f"(got a {type(unit_starts).__name__})",
                "define unit_starts(self) returning the array, or drop window_blocks",
            )
        )
    return ReadUnits.of(unit_starts(), n)


def _stream_order(
    plan: Plan, positional: Any, mixture: bool, token_column: str | None, lengths: np.ndarray | None, packed: bool
) -> StreamOrder:
    """The loader's :class:`~.order.StreamOrder`: an ``rd.Mixture``'s (``positional`` is its sampler), a
    positional sampler's, or the plan's own."""
    if mixture:
        from resumable_data.loader.mixture.order import MixtureOrder  # its tokens module: imported for mixtures only

        return MixtureOrder(positional, token_column=token_column, lengths=lengths, packed=packed)
    if positional is not None:
        return SamplerOrder(positional, plan.epoch_len)
    return PlanOrder(plan)
