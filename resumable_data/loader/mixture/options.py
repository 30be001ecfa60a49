"""The loader arguments an ``rd.Mixture`` leaves no room for.

Algorithm. A mixture orders its records itself (its ``shuffle`` and per-source windows) and its
sources carry their versions, so ``shuffle``, ``shuffle_window``, ``sampler``, ``batch_sampler`` and
``dataset_version`` must stay unset on the loader; the first one given is refused.

Guarantee. A mixture's order comes from one place; a loader option that would contradict it raises
:class:`rd.ConfigError` at construction instead of being silently ignored.

Cost. O(1).
"""

from __future__ import annotations

from typing import Any

from resumable_data._schema import coerce_enum
from resumable_data.errors import ConfigError, describe
from resumable_data.plan import WindowBlocks

__all__ = ["check_mixture_options"]


def check_mixture_options(
    shuffle: Any,
    shuffle_window: Any,
    sampler: Any,
    batch_sampler: Any,
    dataset_version: Any,
    window_blocks: Any = WindowBlocks.RECORDS,
) -> None:
    """A mixture defines its own order: the loader's order options must stay unset."""
    if coerce_enum(window_blocks, WindowBlocks, "window_blocks") is not WindowBlocks.RECORDS:
        raise ConfigError(
            describe(
                "window_blocks",
                window_blocks,
                "unset for an rd.Mixture (its sources' windows are blocks of records)",
                "drop window_blocks=",
            )
        )
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
