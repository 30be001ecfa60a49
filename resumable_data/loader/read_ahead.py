"""Wiring ``rd.DataLoader(read_ahead=rd.ReadAhead(...))`` to the rank's fetcher.

Algorithm: checked at construction (an ``rd.ReadAhead``; an ``rd.ArrowShards`` over a remote
store), then a :class:`~resumable_data.sources.read_ahead.Prefetcher` is started with
``records_of(step)``: this rank's record ids of global step ``step`` (the ledger's span, the
sharding's positions, a private copy of the loader's order), the same function the workers fetch
with; with ``packing=``, the documents the step's packed sequences hold
(:func:`~.stream.describe_step`: the packer's step -> documents mapping, pure, from the documents'
lengths only). The step sampler tells it each step it hands out (:class:`~.fetch.StepSampler`).

Guarantee: the loader's state is untouched (the cursor): a resume seeks, and the next pass plans
from the resumed step. Cost: a copy of the order (a plan: a few integers).
"""

from __future__ import annotations

import copy
import logging
import weakref
from typing import Any

import numpy as np

from resumable_data.errors import ConfigError, describe
from resumable_data.loader.config import FetchMode, LoaderConfig
from resumable_data.loader.stream import describe_step
from resumable_data.plan import Order, WindowBlocks
from resumable_data.sources.arrow_shards import ArrowShards
from resumable_data.sources.read_ahead import Prefetcher, ReadAhead
from resumable_data.sources.version import HashMode

_log = logging.getLogger(__name__)

__all__ = ["start_read_ahead"]


def start_read_ahead(owner: Any, read_ahead: Any, dataset: Any, cfg: LoaderConfig, ledger: Any) -> Prefetcher | None:
    """The fetcher of ``read_ahead`` (None when off); stopped when ``owner`` (the loader) goes away."""
    if read_ahead is None:
        return None
    if not isinstance(read_ahead, ReadAhead):
        raise ConfigError(
            describe("read_ahead", read_ahead, "None or an rd.ReadAhead", "pass read_ahead=rd.ReadAhead(lookahead=...)")
        )
    if not isinstance(dataset, ArrowShards) or not dataset.remote:
        raise ConfigError(
            describe(
                "read_ahead",
                read_ahead,
                "a dataset that is an rd.ArrowShards over a remote store (local shards are memory-mapped: "
                "nothing to read ahead)",
                "drop read_ahead= for local files, or open the shards with filesystem=pyarrow.fs.S3FileSystem(...)",
            )
        )
    spec = cfg.plan.order
    if spec.kind is Order.WINDOW and spec.blocks is WindowBlocks.RECORDS:
        _log.info(
            "read_ahead with shuffle_window=%d over blocks of %d records: a record batch split between blocks of "
            "windows far apart is fetched again by a cache smaller than the dataset (1.4-1.9x the bytes at 25-50%%); "
            "window_blocks=rd.WindowBlocks.READ_UNITS makes each record batch belong to one window "
            "(docs/object-storage.md#window-shuffle-over-read-units)",
            spec.window,
            spec.block,
        )
    order, sharding = copy.deepcopy(cfg.order), cfg.sharding

    def records_of(step: int) -> np.ndarray:
        start, stop = ledger.span(step)
        return order.batch_records(start, stop, sharding.local_positions(start, stop))

    def documents_of(step: int) -> np.ndarray:
        # packed sequences: the documents the step's sequences hold (the packer's pure mapping),
        # from the ledger's current stream (a resume or a new plan replaces it)
        info = describe_step(ledger.stream, ledger.epoch_ledger(), sharding, step)
        return np.zeros(0, dtype=np.int64) if info.records is None else info.records

    version = dataset.version  # its shards are the source's, in order: their pinned content hashes
    digests = (
        [s.content_hash for s in version.shards]
        if version is not None and version.hash_mode is HashMode.CONTENT and len(version.shards) == dataset.num_shards
        else None
    )
    prefetcher = Prefetcher(
        dataset, read_ahead, documents_of if cfg.mode is FetchMode.PACKED else records_of, digests=digests
    )
    weakref.finalize(owner, prefetcher.close)
    return prefetcher
