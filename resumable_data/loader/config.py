"""The loader's configuration: torch-style arguments resolved into one frozen, typed config.

Algorithm. :func:`resolve_config` applies torch's argument rules (``batch_sampler`` alone,
``shuffle`` or a sampler, ``batch_size=None`` unbatched, ``drop_last``), translates torch
samplers into plan settings (:mod:`.translate`), picks the seed, order, tail, fetch mode and
dataset version, and validates packing against the source.

Batch size. ``batch_size`` is the per-rank batch (torch's meaning) and the global batch is
``batch_size * world_size``. A schedule in its place (an :class:`rd.BatchRamp`, an
:class:`rd.BatchSteps` or a list of ``(step, batch)`` pairs) is per rank too, every count
(batches, and a ramp's samples) scaled by the world size to the plan's global schedule, so each
rank's share of every step is exactly the schedule's batch. A schedule whose batch changes runs
on the ``continuous`` tail (its default; ``drop_last=True``, a DistributedSampler's tail or
packing beside it are refused). Every check of the loader's
arguments lives here, so a bad argument raises :class:`rd.ConfigError` at construction, before
any worker exists or any batch is read.

Guarantee. The function is pure in the sense that matters for testing: it creates no torch
object, starts nothing and writes nothing; it reads only the dataset's length, schema and (when
packing) its token lengths. The same arguments give an equal config.

Cost. O(1) except packing, which reads the offsets of the token column once (no token data).
"""

from __future__ import annotations

import enum
import numbers
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from resumable_data._schema import check_int, coerce_enum
from resumable_data.errors import ConfigError, ConfigTypeError, describe
from resumable_data.loader.order import PlanOrder, SamplerOrder, StreamOrder
from resumable_data.loader.samplers import PositionalRandomSampler, PositionalWeightedSampler
from resumable_data.loader.seeding.sample_seeding import SampleSeeding, SeedingRecord, sample_seeding
from resumable_data.loader.state import CommitMode, Layout, LoaderState
from resumable_data.plan import BatchSchedule, Order, OrderSpec, Plan, Sharding, Tail
from resumable_data.plan.batch_schedule import as_schedule
from resumable_data.plan.packing import Overlong, Packing

__all__ = ["UNPINNED", "FetchMode", "LoaderConfig", "SampleSeeding", "check_worker_options", "resolve_config"]

#: The version hash of a loader whose dataset is not pinned.
UNPINNED = "unpinned"
#: The deepest per-worker prefetch accepted (torch fills prefetch_factor * num_workers slots in a loop at each iter()).
MAX_PREFETCH_FACTOR = 1 << 16
#: The most worker processes one loader starts (torch forks num_workers processes in a loop at each iter(): 2**63
#: forks until the machine gives out, never reaching a batch).
MAX_NUM_WORKERS = 1 << 10


class FetchMode(str, enum.Enum):
    """How a batch of records is read from the dataset."""

    ARROW = "arrow"  #: ``dataset.take(records)`` -> ``pyarrow.Table`` (rd.ArrowShards)
    PACKED = "packed"  #: packed sequences from an rd.ArrowShards token column
    GETITEMS = "getitems"  #: ``dataset.__getitems__(records)``, torch's batched protocol
    GETITEM = "getitem"  #: ``dataset[record]`` per sample


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


def _translate(sampler: Any, batch_sampler: Any, n: int) -> Any:
    if sampler is None and batch_sampler is None:
        return None
    from resumable_data.loader.translate import translate_sampler  # torch's sampler classes

    return translate_sampler(sampler, batch_sampler, n)


def _default_sharding() -> Sharding:
    from resumable_data.loader.environment import sharding_from_environment

    return sharding_from_environment()


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
    sharding: Sharding | None = None,
    elastic: bool = True,
    tail: Tail | str | None = None,
    commit: CommitMode | str = CommitMode.AUTO,
    accumulation_steps: int = 1,
    dataset_version: Any = None,
    packing: Any = None,
    seed_per_sample: bool | SampleSeeding | str = True,
    arrow_collate: Callable | None = None,
    token_column: str | None = None,
    transform: Callable | None = None,
) -> LoaderConfig:
    """The :class:`LoaderConfig` of ``rd.DataLoader(dataset, ...)`` (same arguments, same rules)."""
    _torch_rules(dataset, batch_size, shuffle, sampler, batch_sampler, drop_last)
    if not in_order:
        raise ConfigError(
            describe("in_order", in_order, "True", "drop in_order=False: a resumable stream is delivered in order")
        )
    if _is_iterable_dataset(dataset):
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
    _check_kinds(collate_fn, generator, elastic)
    if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
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
        _check_mixture(shuffle, shuffle_window, sampler, batch_sampler, dataset_version)
    n = len(dataset)
    if n < 1:
        raise ConfigError(describe("dataset", f"len {n}", "at least one record", "pass a non-empty dataset"))
    tr = _translate(sampler, batch_sampler, n)
    tr_shuffle = tr.shuffle if tr is not None else None
    tr_seed = tr.seed if tr is not None else None
    tr_sharding = tr.sharding if tr is not None else None
    tr_tail = tr.tail if tr is not None else None
    positional = tr.positional if tr is not None else None
    if batch_sampler is not None:
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
    schedule = None if batch_size is None or isinstance(batch_size, (int, np.integer)) else as_schedule(batch_size)
    if schedule is not None:
        check_int(schedule.max_batch, "batch_size (the schedule's largest batch)", 1, 1 << 30)
        per_rank = schedule.first_batch
    else:
        per_rank = 1 if unbatched else check_int(batch_size, "batch_size", 1, 1 << 30)
    world = sharding.world_size

    keyed = isinstance(positional, (PositionalRandomSampler, PositionalWeightedSampler))  # rd's, keyed by the seed
    seed = _seed(
        seed,
        tr_seed,
        generator,
        do_shuffle or bool(shuffle_window) or keyed or (mixture is not None and mixture.shuffle),
    )
    if keyed:
        positional = positional.with_seed(seed)
    order = _order(shuffle_window, do_shuffle, shuffle, positional)
    scheduled = schedule is not None and not schedule.is_constant
    if scheduled:
        for name, value, why in (
            ("drop_last", drop_last or None, "False"),
            ("packing", packing, "None"),
            ("sampler", tr_tail, "a sampler without its own tail (not a DistributedSampler)"),
        ):
            if value is None:
                continue
            if name == "packing":  # packed epochs are cut into steps by their packing index, for one batch size
                raise ConfigError(
                    describe(
                        name,
                        value,
                        "None with a batch schedule (a packed epoch is cut into "
                        "steps of one batch size by its packing index)",
                        "keep packing= with a fixed batch_size and ramp the number of packed "
                        "microbatches per optimizer step in your loop (docs/schedules.md"
                        "#packing-and-a-batch-ramp), or drop packing=",
                    )
                )
            raise ConfigError(
                describe(
                    name,
                    value,
                    f"{why} with a batch schedule (it runs on tail='continuous': "
                    "an epoch is not a whole number of changing batches)",
                    f"drop {name}= (pass sharding=rd.Sharding(world, rank) for ranks)",
                )
            )
        tail = Tail.CONTINUOUS if tail is None else tail
    if tail is None:
        # the loader's drop_last=True wins over a DistributedSampler(drop_last=False), as in torch
        tail = Tail.DROP if drop_last else tr_tail or (Tail.PARTIAL if world == 1 else Tail.WRAP)
    tail = coerce_enum(tail, Tail, "tail")
    if tail is Tail.CONTINUOUS and packing is not None:
        raise ConfigError(
            describe(
                "tail",
                "continuous",
                "drop, wrap or partial when packing (packed epochs are cut "
                "into batches by their packing index, not one continuous stream)",
                "drop tail= (or pass tail='drop' / 'wrap')",
            )
        )
    if tail is Tail.PAD and packing is not None:
        tail = Tail.WRAP  # packed sequences are not records: pad by wrapping whole global batches
    if tail is Tail.PARTIAL and world > 1:
        raise ConfigError(
            describe(
                "tail",
                "partial",
                "drop or wrap when world_size > 1 (a short batch would leave ranks idle)",
                "pass drop_last=True or tail='wrap'",
            )
        )

    from resumable_data.plan.mixture.plan import StepPositions
    from resumable_data.sources import ArrowShards  # sources import pyarrow only

    version_hash, pinned = _version(dataset, dataset_version, ArrowShards)
    if mixture is not None:  # the mixture orders the records (see rd.Mixture)
        steps_map = None  # a fixed batch on an epoch tail: step * global batch, epochs of whole batches
        if tail is Tail.CONTINUOUS:  # one continuous stream: the nominal epoch, steps mapped by the schedule
            steps_map = schedule.scaled(world).step_start if scheduled else StepPositions(per_rank * world)
        positional = mixture.sampler(seed, per_rank * world, packed=packing is not None, position_of_step=steps_map)
    lengths = None
    if packing is not None:
        mode = FetchMode.PACKED
        if transform is not None:
            raise ConfigError(
                describe("transform", transform, "None when packing (the packer builds the batch)", "drop transform=")
            )
        lengths = _check_packing(
            packing,
            dataset,
            (ArrowShards, Mixture),
            collate_fn,
            arrow_collate,
            token_column,
            None if mixture is not None else positional,
        )
        token_column = None
    elif isinstance(dataset, (ArrowShards, Mixture)):
        mode = FetchMode.ARROW
    elif arrow_collate is not None:
        raise ConfigError(
            describe("arrow_collate", arrow_collate, "an rd.ArrowShards dataset", "use collate_fn instead")
        )
    elif hasattr(dataset, "__getitems__"):
        mode = FetchMode.GETITEMS
    else:
        mode = FetchMode.GETITEM
    if token_column is not None and mode is not FetchMode.ARROW:
        raise ConfigError(describe("token_column", token_column, "an rd.ArrowShards dataset", "drop token_column"))
    if token_column is not None and token_column not in dataset.schema.names:
        raise ConfigError(
            describe("token_column", token_column, f"one of the columns {dataset.schema.names}", "name a list column")
        )

    seeding = sample_seeding(seed_per_sample)
    epoch_records = len(positional) if positional is not None else n
    global_schedule = None if schedule is None else schedule.scaled(world)
    plan = Plan(
        epoch_records,
        per_rank * world if schedule is None else global_schedule.max_batch,
        version_hash,
        seed,
        order,
        tail,
        world if tail is Tail.PAD else 1,
        schedule=global_schedule,
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


def _torch_rule(rule: str, param: str, value: Any, expected: str, fix: str, kind: type = ConfigError) -> ConfigError:
    """A refusal of one of torch's own argument rules: rd's ``param=value: expected ...; fix: ...``
    with torch's sentence inside, so code that matches torch's messages keeps working."""
    return kind(describe(param, value, f"{expected} (torch's rule: {rule})", fix))


def _torch_rules(dataset: Any, batch_size: Any, shuffle: Any, sampler: Any, batch_sampler: Any, drop_last: Any) -> None:
    """torch's ``DataLoader`` rules on the sampling arguments, in torch's order, with its texts."""
    if _is_iterable_dataset(dataset):
        pipe = any(c.__name__ == "IterDataPipe" for c in type(dataset).__mro__)  # torch lets a datapipe shuffle
        for name, value, ok in (
            ("shuffle", shuffle, pipe or shuffle in (False, None)),
            ("sampler", sampler, sampler is None),
            ("batch_sampler", batch_sampler, batch_sampler is None),
        ):
            if not ok:
                raise _torch_rule(
                    f"DataLoader with IterableDataset: expected unspecified {name} option, but got {name}={value}",
                    name,
                    value,
                    "unset with an IterableDataset",
                    f"drop {name}= (and see below: rd needs a map-style dataset)",
                )
        return
    if sampler is not None and shuffle not in (False, None):
        raise _torch_rule(
            "sampler option is mutually exclusive with shuffle",
            "shuffle",
            shuffle,
            "unset when sampler= is given (the sampler decides the order)",
            "drop shuffle=",
        )
    if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
        raise _torch_rule(
            "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last",
            "batch_sampler",
            type(batch_sampler).__name__,
            "alone: no batch_size, shuffle, sampler or drop_last beside it (the batch sampler decides them)",
            "pass batch_sampler= alone",
        )
    if batch_size is None and drop_last:
        raise _torch_rule(
            "batch_size=None option disables auto-batching and is mutually exclusive with drop_last",
            "drop_last",
            drop_last,
            "False with batch_size=None (there are no batches to drop)",
            "drop drop_last=",
        )
    if batch_size is not None and batch_sampler is None and not isinstance(drop_last, bool):
        # torch's BatchSampler refuses it at construction; rd's own tail logic must not see a truthy 2 or "no"
        raise _torch_rule(
            f"drop_last should be a boolean value, but got drop_last={drop_last}",
            "drop_last",
            drop_last,
            "True or False",
            "pass drop_last=True or drop_last=False",
        )


def check_snapshot_every(value: Any) -> int | None:
    """torchdata's ``snapshot_every_n_steps``: None or an integer >= 0 (it changes nothing here:
    the state is exact after every batch); torchdata checks nothing, rd refuses other values."""
    if isinstance(value, np.integer):
        value = int(value)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ConfigError(
            describe(
                "snapshot_every_n_steps",
                value,
                "None or an integer >= 0",
                "snapshot_every_n_steps=1 (or leave it out: it changes nothing here)",
            )
        )
    return value


def check_worker_options(
    num_workers: Any, timeout: Any, multiprocessing_context: Any, prefetch_factor: Any, persistent_workers: Any
) -> None:
    """torch's rules on the worker arguments, with its texts, checked before anything is built
    (torch's start method names: ``torch.multiprocessing.get_all_start_methods()``)."""
    if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 0:
        raise _torch_rule(
            "num_workers option should be non-negative",
            "num_workers",
            num_workers,
            "an integer >= 0",
            "use num_workers=0 to load in the main process",
        )
    if num_workers > MAX_NUM_WORKERS:
        raise ConfigError(
            describe(
                "num_workers",
                num_workers,
                f"an integer in [0, {MAX_NUM_WORKERS}] (worker processes this loader starts)",
                "pass num_workers=min(os.cpu_count(), 8)",
            )
        )
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or timeout != timeout:  # NaN too
        raise ConfigError(
            describe(
                "timeout",
                timeout,
                "a number of seconds >= 0 (0: wait forever)",
                "pass timeout=0 or a positive number of seconds",
            )
        )
    if timeout < 0:
        raise _torch_rule(
            "timeout option should be non-negative",
            "timeout",
            timeout,
            "seconds >= 0 (0: wait forever)",
            "pass timeout=0 or a positive number of seconds",
        )
    if timeout > threading.TIMEOUT_MAX:  # the worker queue's get() raises OverflowError past it
        raise ConfigError(
            describe(
                "timeout",
                timeout,
                f"seconds in [0, {threading.TIMEOUT_MAX:.0f}] (0: wait forever)",
                "pass timeout=0 to wait forever",
            )
        )
    if num_workers == 0 and prefetch_factor is not None:
        raise _torch_rule(
            "prefetch_factor option could only be specified in multiprocessing",
            "prefetch_factor",
            prefetch_factor,
            "None with num_workers=0",
            "drop prefetch_factor= or pass num_workers > 0",
        )
    if prefetch_factor is not None and (
        isinstance(prefetch_factor, bool) or not isinstance(prefetch_factor, numbers.Integral)
    ):
        raise ConfigTypeError(
            describe(
                "prefetch_factor",
                prefetch_factor,
                "an integer >= 0 (batches loaded in advance per worker) or None",
                "pass prefetch_factor=2",
            )
        )
    if prefetch_factor is not None and prefetch_factor < 0:
        raise _torch_rule(
            "prefetch_factor option should be non-negative",
            "prefetch_factor",
            prefetch_factor,
            "an integer >= 0 (batches loaded in advance per worker)",
            "pass prefetch_factor=2",
        )
    if prefetch_factor is not None and not 1 <= prefetch_factor <= MAX_PREFETCH_FACTOR:
        # torch accepts 0 and then asserts in its worker iterator; a huge depth loops for ever filling the queue
        raise ConfigError(
            describe(
                "prefetch_factor",
                prefetch_factor,
                f"an integer in [1, {MAX_PREFETCH_FACTOR}] (batches loaded in advance per worker) or None",
                "pass prefetch_factor=2",
            )
        )
    if persistent_workers and num_workers == 0:
        raise _torch_rule(
            "persistent_workers option needs num_workers > 0",
            "persistent_workers",
            persistent_workers,
            "False with num_workers=0",
            "drop persistent_workers= or pass num_workers > 0",
        )
    if multiprocessing_context is None:
        return
    if num_workers == 0:
        raise _torch_rule(
            "multiprocessing_context can only be used with multi-process loading (num_workers > 0), but "
            "got num_workers=0",
            "multiprocessing_context",
            multiprocessing_context,
            "None with num_workers=0",
            "drop multiprocessing_context= or pass num_workers > 0",
        )
    import multiprocessing.context

    import torch.multiprocessing

    valid = torch.multiprocessing.get_all_start_methods()
    if isinstance(multiprocessing_context, str):
        if multiprocessing_context not in valid:
            raise _torch_rule(
                f"multiprocessing_context option should specify a valid start method in {valid!r}, but got "
                f"multiprocessing_context={multiprocessing_context!r}",
                "multiprocessing_context",
                multiprocessing_context,
                f"one of {valid}",
                f"pass multiprocessing_context={valid[0]!r}",
            )
    elif not isinstance(multiprocessing_context, multiprocessing.context.BaseContext):
        raise _torch_rule(
            "multiprocessing_context option should be a valid context object or a string specifying the start method",
            "multiprocessing_context",
            type(multiprocessing_context).__name__,
            f"a start method's name (one of {valid}) or a multiprocessing context",
            "pass multiprocessing_context='spawn' or multiprocessing.get_context('spawn')",
            ConfigTypeError,
        )


def _check_kinds(collate_fn: Any, generator: Any, elastic: Any) -> None:
    """Arguments torch would only trip over at the first batch (or, for ``elastic``, a truthy string
    silently read as True) are refused here, before anything is built (torch is imported only to check a
    generator that was passed: the resolver stays torch-free otherwise)."""
    if collate_fn is not None and not callable(collate_fn):
        raise ConfigTypeError(
            describe("collate_fn", collate_fn, "a function of a list of samples, or None", "pass a callable or None")
        )
    if generator is not None:
        import torch

        if not isinstance(generator, torch.Generator):
            raise ConfigTypeError(
                describe("generator", generator, "a torch.Generator or None", "pass seed=1234 (or a torch.Generator)")
            )
    if not isinstance(elastic, (bool, np.bool_)):
        raise ConfigTypeError(describe("elastic", elastic, "True or False", "pass elastic=True or elastic=False"))


def _is_iterable_dataset(dataset: Any) -> bool:
    return any(
        c.__name__ == "IterableDataset" and c.__module__.startswith("torch.utils.data") for c in type(dataset).__mro__
    )


def _seed(seed: int | None, sampler_seed: int | None, generator: Any, shuffling: bool) -> int:
    if seed is None and sampler_seed is not None:
        seed = sampler_seed
    if seed is None and generator is not None:
        seed = int(generator.initial_seed())
    if seed is None and shuffling:
        raise ConfigError(
            describe(
                "seed",
                None,
                "an integer seed when shuffling or sampling at random (shuffle=True, a RandomSampler "
                "or WeightedRandomSampler), or a generator= (the loader's or the sampler's) with a known seed",
                "pass seed=1234: a loader whose seed is unknown cannot resume (torch would draw one from the "
                "global generator at every iter())",
            )
        )
    return check_int(0 if seed is None else seed, "seed", 0, (1 << 64) - 1)


def _order(shuffle_window: int | None, do_shuffle: bool, shuffle: bool | None, positional: Any) -> OrderSpec:
    if shuffle_window is not None:
        if not do_shuffle and shuffle is not None:
            raise ConfigError(describe("shuffle_window", shuffle_window, "shuffle=True or unset", "drop shuffle=False"))
        order = OrderSpec(Order.WINDOW, shuffle_window)
    else:
        order = OrderSpec(Order.GLOBAL if do_shuffle else Order.SEQUENTIAL)
    if positional is not None and (do_shuffle or shuffle_window):
        raise ConfigError(
            describe("shuffle", True, "unset with a positional sampler (it orders the records)", "drop shuffle")
        )
    return order


def _version(dataset: Any, dataset_version: Any, arrow_type: type) -> tuple[str, bool]:
    given = getattr(dataset_version, "hash", dataset_version)
    if given is not None and (not isinstance(given, str) or not given):
        raise ConfigError(
            describe("dataset_version", dataset_version, "an rd.DatasetVersion or its hash string", "pass rd.pin(path)")
        )
    from resumable_data.sources.mixture import Mixture  # sources import pyarrow only

    if isinstance(dataset, (arrow_type, Mixture)):
        own = dataset.version.hash if dataset.pinned else None
        if given is not None and own is not None and given != own:
            raise ConfigError(
                describe(
                    "dataset_version",
                    given,
                    f"the source's own pinned version {own}",
                    "drop dataset_version= or open the pinned data",
                )
            )
        given = given or own
    return (given, True) if given else (UNPINNED, False)


def _check_mixture(shuffle: Any, shuffle_window: Any, sampler: Any, batch_sampler: Any, dataset_version: Any) -> None:
    """A mixture defines its own order: the loader's order options must stay unset."""
    for name, value in (
        ("shuffle", shuffle),
        ("shuffle_window", shuffle_window),
        ("sampler", sampler),
        ("batch_sampler", batch_sampler),
        ("dataset_version", dataset_version),
    ):
        if value is not None:
            raise ConfigError(
                describe(
                    name,
                    value,
                    "unset for an rd.Mixture (the mixture orders the records and its sources carry their versions)",
                    f"drop {name}= (rd.Mixture(shuffle=..., shuffle_window=...) sets the order, a window per source)",
                )
            )


def _check_packing(
    packing: Any,
    dataset: Any,
    arrow_type: type,
    collate_fn: Any,
    arrow_collate: Any,
    token_column: Any,
    positional: Any,
) -> np.ndarray:
    """Validate a packing spec against the source before any batch; returns the token lengths."""
    import pyarrow as pa

    if not isinstance(packing, Packing):
        raise ConfigError(describe("packing", packing, "an rd.Packing", "pass rd.Packing(seq_len=...)"))
    if not isinstance(dataset, arrow_type):
        raise ConfigError(
            describe(
                "dataset",
                type(dataset).__name__,
                "an rd.ArrowShards when packing",
                "write the documents as Arrow shards and open them with rd.ArrowShards",
            )
        )
    for name, value in (("collate_fn", collate_fn), ("arrow_collate", arrow_collate), ("sampler", positional)):
        if value is not None:
            raise ConfigError(describe(name, value, "None when packing (the packer builds the batch)", f"drop {name}="))
    if token_column not in (None, packing.tokens):
        raise ConfigError(describe("token_column", token_column, f"None or {packing.tokens!r} when packing", "drop it"))
    names = dataset.schema.names
    if packing.tokens not in names:
        raise ConfigError(
            describe("Packing.tokens", packing.tokens, f"one of the columns {names}", "name the token column")
        )
    t = dataset.schema.field(packing.tokens).type
    if not ((pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_integer(t.value_type)):
        raise ConfigError(
            describe(
                "Packing.tokens",
                packing.tokens,
                f"a list<integer> column (it is {t})",
                "tokenize into a list of integer ids",
            )
        )
    _check_token_ids(packing, np.dtype(t.value_type.to_pandas_dtype()))
    lengths = dataset.column_lengths(packing.tokens)
    empty = np.flatnonzero(lengths == 0)
    if empty.size:
        raise ConfigError(
            describe(
                "documents",
                f"{empty.size} empty, first record ids {empty[:5].tolist()}",
                "documents with at least one token",
                "filter empty documents out before pinning",
            )
        )
    if packing.overlong is Overlong.ERROR:  # both modes: in concat too, a longer document is refused
        long = np.flatnonzero(packing.doc_lengths(lengths) > packing.seq_len)
        if long.size:
            raise ConfigError(
                describe(
                    "overlong",
                    "error",
                    f"no document longer than seq_len={packing.seq_len} "
                    f"({long.size} are, first record ids {long[:5].tolist()})",
                    "use overlong='split', a larger seq_len, or filter them",
                )
            )
    return lengths


def _check_token_ids(packing: Packing, dtype: np.dtype) -> None:
    """``eos_id`` and ``pad_id`` become ``input_ids`` values of the token column's dtype: each must fit it
    (numpy would wrap 2**40 to 0 in int32 without a word)."""
    info = np.iinfo(dtype)
    for name, value in (("eos_id", packing.eos_id), ("pad_id", packing.pad_id)):
        if value is not None and not info.min <= value <= info.max:
            raise ConfigError(
                describe(
                    f"Packing.{name}",
                    value,
                    f"a token id that fits the token column's dtype {dtype} ([{info.min}, {info.max}])",
                    f"pass a {name} in that range (a token id of the tokenizer)",
                )
            )
