"""``rd.Mixture``: named, pinned sources mixed by weight, usable wherever one source is.

Algorithm. The sources' records form one concatenated id space (source ``s`` holds ids
``[offset_s, offset_s + n_s)``), so ``take``, ``column_lengths`` and ``len`` behave as for one
``rd.ArrowShards``. The order is the mixture's own: :meth:`Mixture.sampler` returns a positional
sampler whose position ``p`` is the ``p``-th position of the mixed stream
(:mod:`resumable_data.plan.mixture`), and ``rd.DataLoader`` uses it in place of its own order.

Guarantee. What the loader delivers at position ``p`` is a pure function of (the sources' names
and pinned versions, weights or schedule, block size, seed, ``p``). The version hash
(:meth:`Mixture.version`) combines the sources' names and versions and the block size; the
weights live in the loader state's ``mixture`` section, so a weight change is a difference a
resume names (and accepts under ``data_change``), not an unknown dataset.

Cost. A ``take`` is one vectorized gather over every source's shards (per source plus one
reorder when a source is remote); ``take_numpy``, the loader's default batch, is that gather
straight into numpy arrays. A restore costs
what :mod:`resumable_data.plan.mixture` says (one block composition).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from resumable_data.errors import ConfigError, describe
from resumable_data.plan.mixture import MixturePlan, Rebase, mixture_version
from resumable_data.plan.weights import StepPositions, WeightSchedule
from resumable_data.sources.arrow_shards import ArrowShards

__all__ = ["DEFAULT_BLOCK_SIZE", "Mixture", "MixtureSampler", "MixtureVersion"]

#: Positions per block when ``block_size`` is not given (proportions exact to one per block).
DEFAULT_BLOCK_SIZE = 1024


class MixtureVersion:
    """The pinned identity of a mixture's data (``.hash``, as a :class:`DatasetVersion` has)."""

    def __init__(self, hash: str) -> None:
        self.hash = hash

    def __repr__(self) -> str:
        return f"MixtureVersion({self.hash!r})"


class Mixture:
    """Weighted mixture of named sources: ``rd.Mixture({"web": a, "code": b}, weights={...})``.

    ``weights``: a mapping name -> weight (normalised, exact) or an :class:`rd.WeightSchedule` of
    the step. ``block_size``: every aligned block of this many positions holds ``floor`` or
    ``ceil`` of ``weight * block_size`` records of each source (default 1024). ``shuffle``: order
    each block and each source epoch by keyed permutations (default True); False keeps each
    source's records in id order and a block's records grouped by source. ``epoch_len``:
    positions of the loader's nominal epoch (default: the sources' total records; rounded up to
    a multiple of the global batch), which only sets ``len(loader)``: the mixed stream runs on
    across epochs, each source through its own epochs. ``shuffle_window``: order each source's
    epochs by the window shuffle (``rd.DataLoader(shuffle_window=)``'s, per source) instead of a
    global permutation: one window for every source, or a mapping name -> window (a source left
    out, or mapped to None, keeps the global shuffle).
    """

    def __init__(self, sources: Mapping[str, Any], weights: Mapping[str, float] | WeightSchedule, *,
                 block_size: int = DEFAULT_BLOCK_SIZE, shuffle: bool = True, epoch_len: int | None = None,
                 shuffle_window: int | Mapping[str, int | None] | None = None) -> None:
        if not isinstance(sources, Mapping) or not sources:
            raise ConfigError(describe("sources", sources, "a non-empty mapping name -> rd.ArrowShards",
                                       "pass {'web': rd.ArrowShards(...), 'code': rd.ArrowShards(...)}"))
        for name, src in sources.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(describe("sources", name, "non-empty string names", "name each source"))
            if not isinstance(src, ArrowShards):
                raise ConfigError(describe(f"sources[{name!r}]", type(src).__name__,
                                           "an rd.ArrowShards (a Hugging Face dataset: rd.ArrowShards.from_hf(ds))",
                                           "write the records as Arrow shards, or convert with rd.ArrowShards.from_hf"))
        self.names = tuple(sources)
        self.sources = tuple(sources[n] for n in self.names)
        first = self.sources[0].schema
        for name, src in zip(self.names, self.sources):
            if not src.schema.equals(first):
                raise ConfigError(describe(f"sources[{name!r}].schema", str(src.schema)[:120],
                                           f"the schema of {self.names[0]!r} ({first})",
                                           "write every source with the same columns and types"))
            if len(src) < 1:
                raise ConfigError(describe(f"sources[{name!r}]", "0 records", "at least one record", "drop the empty source"))
        self.schedule = weights if isinstance(weights, WeightSchedule) else WeightSchedule.constant(weights) \
            if isinstance(weights, Mapping) else None
        if self.schedule is None:
            raise ConfigError(describe("weights", weights, "a mapping name -> weight or an rd.WeightSchedule",
                                       "pass weights={'web': 0.7, 'code': 0.3}"))
        self.schedule.resolve(self.names)  # validated now, not at the first batch
        self.block_size = int(block_size) if not isinstance(block_size, bool) and isinstance(block_size, int) else -1
        if not 1 <= self.block_size <= 1 << 24:
            raise ConfigError(describe("block_size", block_size, "an integer in [1, 2**24]", "pass e.g. block_size=1024"))
        if not isinstance(shuffle, bool):
            raise ConfigError(describe("shuffle", shuffle, "True or False", "pass a bool"))
        self.shuffle = shuffle
        self.windows = _windows(shuffle_window, self.names, shuffle)
        self.sizes = tuple(len(s) for s in self.sources)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        total = int(self.offsets[-1])
        if epoch_len is not None and (isinstance(epoch_len, bool) or not isinstance(epoch_len, int) or epoch_len < 1):
            raise ConfigError(describe("epoch_len", epoch_len, "a positive integer or None", "drop epoch_len="))
        self.epoch_len = total if epoch_len is None else epoch_len
        versions = [s.version.hash if s.pinned else "unpinned" for s in self.sources]
        self._versions = tuple(versions)
        self._gather = ArrowShards.concatenated(self.sources)  # one vectorized take for all sources
        self._version = MixtureVersion(mixture_version(self.names, versions, self.block_size))

    # -- the ArrowShards surface the loader uses ----------------------------------------------------
    @property
    def version(self) -> MixtureVersion:
        """The mixture's data identity: its sources' names and pinned versions and the block size, hashed
        (weights and seed are part of the plan, not of this version)."""
        return self._version

    @property
    def pinned(self) -> bool:
        """Whether every source is pinned."""
        return all(s.pinned for s in self.sources)

    @property
    def schema(self) -> pa.Schema:
        """The sources' common Arrow schema."""
        return self.sources[0].schema

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}: {s}" for n, s in zip(self.names, self.sizes))
        return f"rd.Mixture({{{parts}}}, weights={self.schedule!r}, block_size={self.block_size})"

    def split(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source index, record id inside it) of concatenated ids."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= len(self)):
            raise ConfigError(describe("record_ids", int(ids.max()), f"ids in [0, {len(self)})", "pass ids of this mixture"))
        src = np.searchsorted(self.offsets, ids, side="right") - 1
        return src, ids - self.offsets[src]

    def take(self, record_ids) -> pa.Table:
        """The records at concatenated ids (requested order) as one-chunk Table."""
        src, local = self.split(record_ids)
        if src.size == 0:
            return self.schema.empty_table()
        if self._gather is not None:
            return self._gather.take(np.asarray(record_ids, dtype=np.int64))
        used = np.unique(src)
        if used.size == 1:
            return self.sources[int(used[0])].take(local)
        order = np.argsort(src, kind="stable")
        pieces = [self.sources[int(s)].take(local[src == s]) for s in used]
        table = pa.concat_tables(pieces).combine_chunks()
        inverse = np.empty(len(order), dtype=np.int64)
        inverse[order] = np.arange(len(order), dtype=np.int64)
        return table.take(pa.array(inverse))

    def take_numpy(self, record_ids, pad_value: Any = 0) -> list[Any] | None:
        """Per column, the default collate's numpy arrays of ``take(record_ids)`` in one gather
        over every source (``ArrowShards.take_numpy``); None where that has no fast path, or the
        sources gather apart (remote): the loader then uses :meth:`take`."""
        if self._gather is None:
            return None
        return self._gather.take_numpy(record_ids, pad_value)  # ids outside [0, len): rd.RecordIdError

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.take(np.array([index])).to_pylist()[0]

    def __getitems__(self, record_ids) -> list[dict[str, Any]]:
        return self.take(np.asarray(record_ids)).to_pylist()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_gather": None, "_sources_local": self._gather is not None}

    def __setstate__(self, d: dict[str, Any]) -> None:
        local = d.pop("_sources_local")
        self.__dict__.update(d)
        self._gather = ArrowShards.concatenated(self.sources) if local else None

    def column_lengths(self, column: str) -> np.ndarray:
        """Per-record lengths of a list column, in the mixture's record-id order."""
        return np.concatenate([s.column_lengths(column) for s in self.sources])

    # -- the order ----------------------------------------------------------------------------------
    def plan(self, seed: int, position_of_step: Callable[[int], int] | None = None,
             rebase: Rebase | None = None) -> MixturePlan:
        """The pure plan of this mixture's stream under ``seed``."""
        return MixturePlan(self.names, self.sizes, self._versions, self.schedule, block=self.block_size, seed=seed,
                           version_hash=self._version.hash, shuffle=self.shuffle, position_of_step=position_of_step,
                           rebase=rebase, windows=self.windows)

    def sampler(self, seed: int, global_batch: int, *, packed: bool = False,
                position_of_step: Callable[[int], int] | None = None) -> MixtureSampler:
        """The positional sampler ``rd.DataLoader`` orders this mixture with. ``position_of_step``:
        the loader's step -> position map under a batch schedule (the epoch is then the nominal
        ``epoch_len``, not rounded to whole batches: schedules run on the continuous tail)."""
        if position_of_step is not None:
            return MixtureSampler(self, seed, self.epoch_len, position_of_step)
        if packed:  # a weight schedule's segments start at packing-window boundaries (the loader places them)
            from resumable_data.sources.mixture_packed import PackedMixtureSampler  # a subclass: imports this module

            return PackedMixtureSampler(self, seed, self.epoch_len, None)
        length = -(-self.epoch_len // global_batch) * global_batch
        return MixtureSampler(self, seed, length, StepPositions(global_batch))


class MixtureSampler:
    """An ``rd.PositionalSampler`` over a :class:`Mixture`: epoch ``e``, offset ``o`` is mixed
    position ``e * len(self) + o`` (the loader's epochs cut the endless mixed stream)."""

    def __init__(self, mixture: Mixture, seed: int, length: int, position_of_step: Callable[[int], int] | None) -> None:
        self.mixture = mixture
        self.seed = seed
        self._len = length
        self.position_of_step = position_of_step
        self.plan = mixture.plan(seed, position_of_step)

    def __len__(self) -> int:
        return self._len

    def rebase(self, rebase: Rebase | None) -> None:
        """Continue the stream from ``rebase`` (a ``data_change`` resume, or the saved one)."""
        self.plan = self.plan.with_rebase(rebase)

    def rebased(self, rebase: Rebase | None) -> MixtureSampler:
        """A copy that continues from ``rebase`` (this sampler unchanged: for checks before a restore)."""
        if rebase == self.plan.rebase:
            return self
        other = copy.copy(self)
        other.plan = self.plan.with_rebase(rebase)
        return other

    def positions(self, epoch: int, offsets: np.ndarray) -> np.ndarray:
        return epoch * self._len + np.asarray(offsets, dtype=np.int64)

    def indices(self, epoch: int, offsets: np.ndarray) -> np.ndarray:
        return self.at_positions(self.positions(epoch, offsets))

    def at_positions(self, positions: np.ndarray) -> np.ndarray:
        """Concatenated record ids at mixed-stream ``positions`` (the loader's epochs are
        ``len(self)`` positions long, so its positions are the mixture's)."""
        return self.plan.concatenated_ids(positions)

    def fingerprint(self) -> str:
        m = self.mixture
        windows = "" if not any(w is not None for w in m.windows) else \
            ", windows=" + ",".join("-" if w is None else str(w) for w in m.windows)  # absent: as before, byte for byte
        return (f"rd.Mixture(sources={len(m.names)}, epoch_len={self._len}, block={m.block_size}, "
                f"shuffle={m.shuffle}{windows})")

    def state_section(self) -> dict[str, Any]:
        return self.plan.to_dict()


def _windows(shuffle_window: Any, names: tuple[str, ...], shuffle: bool) -> tuple[int | None, ...]:
    """One shuffle window (or None: the global shuffle) per source, validated."""
    if shuffle_window is None:
        return (None,) * len(names)
    if not shuffle:
        raise ConfigError(describe("shuffle_window", shuffle_window, "None with shuffle=False (a window shuffles)",
                                   "drop shuffle_window= or drop shuffle=False"))
    given = dict(shuffle_window) if isinstance(shuffle_window, Mapping) else {n: shuffle_window for n in names}
    unknown = sorted(set(given) - set(names), key=str)
    if unknown:
        raise ConfigError(describe("shuffle_window", unknown[0], f"a source name (one of {list(names)})",
                                   "key the windows by the Mixture's source names"))
    out = []
    for n in names:
        w = given.get(n)
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 1 << 40):
            raise ConfigError(describe(f"shuffle_window[{n!r}]", w, "a window of at least 1 record, or None",
                                       "pass e.g. shuffle_window=4096"))
        out.append(w)
    return tuple(out)
