"""The stream's seed, order and tail, resolved from torch-style arguments.

Algorithm. :func:`resolve_seed` takes the first known of ``seed=``, the translated sampler's seed and
``generator.initial_seed()``; a stream that shuffles or samples at random with none of them is
refused (torch would draw a fresh seed from the global generator at every ``iter()``, which nothing
can resume). :func:`order_spec` maps ``shuffle`` / ``shuffle_window`` to an
:class:`rd.OrderSpec` (sequential, global shuffle, window shuffle). :func:`resolve_tail` picks the
end of an epoch: ``tail=`` if given, else ``drop`` for ``drop_last=True``, else a
DistributedSampler's own tail, else ``partial`` on one rank and ``wrap`` on several; a batch
schedule whose batch changes runs on ``continuous`` and refuses what cannot sit beside it.

Guarantee. The same arguments give the same seed, order and tail; a combination that cannot be
resumed exactly (an unknown seed while shuffling, a short batch leaving ranks idle, packing on a
continuous stream) raises :class:`rd.ConfigError` at construction.

Cost. O(1).
"""

from __future__ import annotations

from typing import Any

from resumable_data._schema import check_int, coerce_enum
from resumable_data.errors import ConfigError, describe
from resumable_data.plan import Order, OrderSpec, Tail, WindowBlocks

__all__ = ["order_spec", "resolve_seed", "resolve_tail"]


def resolve_seed(seed: int | None, sampler_seed: int | None, generator: Any, shuffling: bool) -> int:
    """The stream's seed: ``seed``, else the sampler's, else the generator's initial seed (0 if none
    is known and nothing is random)."""
    if seed is None and sampler_seed is not None:
        seed = sampler_seed
    if seed is None and generator is not None:
        seed = int(generator.initial_seed())
    if seed is None and shuffling:
        raise ConfigError(
            describe(
                "seed",
                None,
                "an integer seed when shuffling or sampling at random (shuffle=True, shuffle_window=, a "
                "RandomSampler or WeightedRandomSampler, an rd.Mixture, which shuffles by default), or a "
                "generator= (the loader's or the sampler's) with a known seed",
                "pass seed=1234 to the DataLoader: a loader whose seed is unknown cannot resume (torch would "
                "draw one from the global generator at every iter())",
            )
        )
    return check_int(0 if seed is None else seed, "seed", 0, (1 << 64) - 1)


def order_spec(
    shuffle_window: int | None,
    do_shuffle: bool,
    shuffle: bool | None,
    positional: Any,
    window_blocks: WindowBlocks | str = WindowBlocks.RECORDS,
) -> OrderSpec:
    """The plan's order; a positional sampler (which orders the records itself) excludes shuffling."""
    blocks = coerce_enum(window_blocks, WindowBlocks, "window_blocks")
    if shuffle_window is not None:
        if not do_shuffle and shuffle is not None:
            raise ConfigError(describe("shuffle_window", shuffle_window, "shuffle=True or unset", "drop shuffle=False"))
        order = OrderSpec(Order.WINDOW, shuffle_window, blocks=blocks)
    else:
        if blocks is not WindowBlocks.RECORDS:
            raise ConfigError(
                describe(
                    "window_blocks",
                    blocks.value,
                    "the default 'records' without shuffle_window (blocks belong to the window shuffle)",
                    "pass shuffle_window=N too, or drop window_blocks",
                )
            )
        order = OrderSpec(Order.GLOBAL if do_shuffle else Order.SEQUENTIAL)
    if positional is not None and (do_shuffle or shuffle_window):
        raise ConfigError(
            describe("shuffle", True, "unset with a positional sampler (it orders the records)", "drop shuffle")
        )
    return order


def resolve_tail(
    tail: Tail | str | None, drop_last: bool, packing: Any, sampler_tail: Tail | None, world: int, scheduled: bool
) -> Tail:
    """The epoch's tail (see the module docs); ``scheduled``: a batch schedule whose batch changes."""
    if scheduled:
        _check_scheduled(drop_last, packing, sampler_tail)
        tail = Tail.CONTINUOUS if tail is None else tail
    if tail is None:
        # the loader's drop_last=True wins over a DistributedSampler(drop_last=False), as in torch
        tail = Tail.DROP if drop_last else sampler_tail or (Tail.PARTIAL if world == 1 else Tail.WRAP)
    resolved = coerce_enum(tail, Tail, "tail")
    if drop_last and resolved is not Tail.DROP:  # tail= decides: drop_last=True would be ignored silently
        raise ConfigError(
            describe(
                "drop_last",
                True,
                f"False beside tail={resolved.value!r} (tail= decides the epoch's end; drop_last=True asks "
                "for tail='drop')",
                f"drop drop_last=True to keep tail={resolved.value!r}, or drop tail= to drop the short last batch",
            )
        )
    if resolved is Tail.CONTINUOUS and packing is not None:
        raise ConfigError(
            describe(
                "tail",
                "continuous",
                "drop, wrap or partial when packing (packed epochs are cut "
                "into batches by their packing index, not one continuous stream)",
                "drop tail= (or pass tail='drop' / 'wrap')",
            )
        )
    if resolved is Tail.PAD and packing is not None:
        resolved = Tail.WRAP  # packed sequences are not records: pad by wrapping whole global batches
    if resolved is Tail.PARTIAL and world > 1:
        raise ConfigError(
            describe(
                "tail",
                "partial",
                "drop or wrap when world_size > 1 (a short batch would leave ranks idle)",
                "pass tail='wrap' (the last batch completed from the epoch's start) or tail='drop', or drop tail= "
                "(at world_size > 1 the default is 'wrap'; with drop_last=True, 'drop')",
            )
        )
    return resolved


def _check_scheduled(drop_last: bool, packing: Any, sampler_tail: Tail | None) -> None:
    """What a batch schedule whose batch changes (on the continuous tail) cannot sit beside."""
    for name, value, why in (
        ("drop_last", drop_last or None, "False"),
        ("packing", packing, "None"),
        ("sampler", sampler_tail, "a sampler without its own tail (not a DistributedSampler)"),
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
