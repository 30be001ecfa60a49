"""How a batch of records is read from the dataset: the fetch mode the dataset and the arguments call for.

Algorithm. Packing (``packing=``) reads packed sequences from an ``rd.ArrowShards`` token column
(checked by :mod:`.packing_check`); an ``rd.ArrowShards`` or ``rd.Mixture`` is read with
``take(records)`` into a ``pyarrow.Table``; any other map-style dataset through torch's batched
``__getitems__`` when it has one, else ``dataset[record]`` per sample. ``arrow_collate`` and
``token_column`` need an Arrow source and are refused elsewhere.

Guarantee. The mode depends on the dataset's type and the arguments only, never on the data; the
records read at a position are the same in every mode (the mode changes how, not what).

Cost. O(1), except packing: one read of the token column's offsets.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from resumable_data.errors import ConfigError, describe
from resumable_data.loader.packing_check import check_packing

__all__ = ["BatchedDataset", "FetchMode", "MapDataset", "resolve_fetch_mode"]


@runtime_checkable
class MapDataset(Protocol):
    """torch's map-style dataset: ``len(dataset)`` records, ``dataset[record]`` each."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


@runtime_checkable
class BatchedDataset(Protocol):
    """torch's batched protocol: ``dataset.__getitems__(records)`` -> the samples, in order."""

    def __getitems__(self, indices: list[int]) -> Any: ...


class FetchMode(str, enum.Enum):
    """How a batch of records is read from the dataset."""

    ARROW = "arrow"  #: ``dataset.take(records)`` -> ``pyarrow.Table`` (rd.ArrowShards)
    PACKED = "packed"  #: packed sequences from an rd.ArrowShards token column
    GETITEMS = "getitems"  #: ``dataset.__getitems__(records)``, torch's batched protocol
    GETITEM = "getitem"  #: ``dataset[record]`` per sample


def resolve_fetch_mode(
    dataset: Any,
    *,
    mixture: bool,
    packing: Any,
    transform: Callable | None,
    collate_fn: Callable | None,
    arrow_collate: Callable | None,
    token_column: str | None,
    positional: Any,
) -> tuple[FetchMode, np.ndarray | None, str | None]:
    """``(mode, token lengths (packing only), token column (None when packing))`` of the loader."""
    from resumable_data.sources import ArrowShards  # sources import pyarrow only
    from resumable_data.sources.mixture import Mixture

    lengths = None
    if packing is not None:
        mode = FetchMode.PACKED
        if transform is not None:
            raise ConfigError(
                describe("transform", transform, "None when packing (the packer builds the batch)", "drop transform=")
            )
        lengths = check_packing(
            packing,
            dataset,
            collate_fn,
            arrow_collate,
            token_column,
            None if mixture else positional,
        )
        token_column = None
    elif isinstance(dataset, (ArrowShards, Mixture)):
        mode = FetchMode.ARROW
    elif arrow_collate is not None:
        raise ConfigError(
            describe("arrow_collate", arrow_collate, "an rd.ArrowShards dataset", "use collate_fn instead")
        )
    elif isinstance(dataset, BatchedDataset):
        mode = FetchMode.GETITEMS
    else:
        mode = FetchMode.GETITEM
    if token_column is not None and mode is not FetchMode.ARROW:
        raise ConfigError(describe("token_column", token_column, "an rd.ArrowShards dataset", "drop token_column"))
    if token_column is not None and token_column not in dataset.schema.names:
        raise ConfigError(
            describe("token_column", token_column, f"one of the columns {dataset.schema.names}", "name a list column")
        )
    return mode, lengths, token_column
