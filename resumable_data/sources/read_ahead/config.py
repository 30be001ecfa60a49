"""``rd.ReadAhead``: how far, how wide and into how much space a rank reads remote units ahead.

Algorithm: a frozen value, validated at construction (:class:`~resumable_data.ConfigError`
naming the parameter, the value and the fix); ``rd.DataLoader(..., read_ahead=rd.ReadAhead())``
turns it on for a remote ``rd.ArrowShards`` (off by default; local files are memory-mapped and
never use it).

Guarantee: the knobs change only speed and memory, never a batch: what a step delivers is a
function of the plan, the step and the rank alone (:mod:`.fetcher`).

Cost: none until a loader starts a :class:`~.fetcher.Prefetcher` with it.
"""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from resumable_data._schema import check_int
from resumable_data.errors import ConfigError, describe
from resumable_data.sources.read_ahead.depth import BASE_STEPS

__all__ = ["ReadAhead", "ReadUnit"]


class ReadUnit(Enum):
    """What one fetch reads: one unit (an IPC record batch, a Parquet row group) by a ranged
    request, or a whole shard object (every unit of it at once, one request), for datasets of
    small objects where a request costs more than the bytes a step does not need; ``AUTO`` (the
    default) picks one of the two once, when read-ahead starts, from the object sizes of the
    shards the first ``lookahead`` steps read and ``cache_bytes`` (:mod:`.unit_choice`)."""

    RECORD_BATCH = "record_batch"
    SHARD = "shard"
    AUTO = "auto"


@dataclass(frozen=True)
class ReadAhead:
    """Read remote units ahead of the steps that need them (``docs/object-storage.md``).

    * ``lookahead``: how far ahead the fetcher plans: an integer, that many steps ahead of the
      newest step handed to a worker (default 64); ``None``: sized by bytes, at least 64 steps,
      and further, within the current epoch and up to 1,024 steps, while the units the planned
      steps read take at most half of ``cache_bytes`` (:mod:`.depth`: with small objects, enough
      of them to keep ``concurrency`` requests busy, for a store whose bandwidth grows with the
      requests in flight);
    * ``concurrency``: ranged requests in flight at once (default 16; S3 serves far more per
      prefix, the limit is this host's bandwidth and cores);
    * ``cache_bytes``: the byte budget of the unit cache (default 2 GiB); the units of steps
      already handed to workers are never evicted, and are fetched even past the budget;
    * ``cache_dir``: where the cache directory is made (default: the system's temporary
      directory); a fresh subdirectory per loader, removed when the loader goes away (one left
      by a killed process is removed when the next fetcher starts: :func:`.cache.sweep_abandoned`);
    * ``unit``: what one fetch reads, a :class:`ReadUnit`: ``RECORD_BATCH``, one ranged read per
      record batch or row group; ``SHARD``, the whole object of a shard per read, its object size
      counted against ``cache_bytes``; ``AUTO`` (default), ``SHARD`` where the shards the first
      ``lookahead`` steps (64 with ``lookahead=None``) read take at most half of ``cache_bytes``
      (objects up to 64 MiB, each with a byte layout), else ``RECORD_BATCH`` (:mod:`.unit_choice`; the choice is the
      fetcher's ``unit``).
    """

    lookahead: int | None = 64
    concurrency: int = 16
    cache_bytes: int = 2 << 30
    cache_dir: str | os.PathLike | None = None
    unit: ReadUnit = ReadUnit.AUTO

    @property
    def steps(self) -> int:
        """The steps of the window's floor: ``lookahead``, or 64 where the window is sized by bytes."""
        return BASE_STEPS if self.lookahead is None else self.lookahead

    def __post_init__(self) -> None:
        la: Any = self.lookahead
        if la is not None and (
            isinstance(la, bool) or not isinstance(la, numbers.Integral) or not 1 <= int(la) <= 1 << 20
        ):
            raise ConfigError(
                describe(
                    "lookahead",
                    la,
                    f"None (the window sized by bytes) or a number of steps, an integer in [1, {1 << 20}]",
                    "pass a step count such as lookahead=64 (the default), or lookahead=None",
                )
            )
        check_int(self.concurrency, "concurrency", 1, 1024)
        check_int(self.cache_bytes, "cache_bytes", 1)
        if not isinstance(self.unit, ReadUnit):
            raise ConfigError(
                describe(
                    "unit",
                    self.unit,
                    "an rd.ReadUnit (AUTO, RECORD_BATCH or SHARD)",
                    "pass unit=rd.ReadUnit.AUTO (the default), rd.ReadUnit.RECORD_BATCH or rd.ReadUnit.SHARD",
                )
            )
        d: Any = self.cache_dir
        if d is not None and (not isinstance(d, (str, os.PathLike)) or not Path(d).is_dir()):
            raise ConfigError(
                describe(
                    "cache_dir",
                    d,
                    "None or an existing directory on a local disk",
                    "create the directory first, or pass cache_dir=None for the system's temporary directory",
                )
            )
