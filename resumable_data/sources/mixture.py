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

Packed (:class:`PackedMixtureSampler`): the mixed stream as runs of weights.

Algorithm. A packed loader's weight change (``data_change``) takes effect at a packing-window
boundary, possibly inside a loader epoch (:mod:`resumable_data.loader.mixture.packed`), so the
documents of that epoch before the boundary keep the plan they were packed under. The sampler's
plan is the current run (from its rebase position on); a :class:`~resumable_data.plan.mixture.section.PackedRebase`
adds the *earlier* runs, each a :class:`~resumable_data.plan.mixture.MixturePlan` under its own
weights starting at its own position with its own per-source counts, in force until the next
run starts. Position ``p`` is answered by the last run that starts at or before ``p``. A declared
weight schedule is the same chain: the loader places each later segment at a window boundary
(:meth:`PackedMixtureSampler.add_run`, from :func:`resumable_data.loader.mixture.packed.resolve_schedule`);
its runs are then the plan's, so the state section holds the declared schedule only.

Guarantee. Every run continues each source from the records it had consumed where the run
starts, so no record of a source is repeated or skipped within its epoch across the changes; a
stream without earlier runs is the plain :class:`MixtureSampler`'s, byte for byte, and
the state section gains ``earlier`` (at mixture schema 3) only when there are earlier runs.

Cost. One plan per earlier run (built once per rebase); a query is one ``searchsorted`` over the
runs' starts plus the runs' own lookups.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa

from resumable_data.errors import ConfigError, ResumeError, describe
from resumable_data.plan.mixture.plan import MAX_POSITION, MixturePlan, Rebase, mixture_version
from resumable_data.plan.mixture.section import EarlierRun, MixtureSection, PackedRebase
from resumable_data.plan.mixture.weights import StepPositions, WeightSchedule
from resumable_data.sources.arrow_shards import ArrowShards
from resumable_data.sources.gather_plan import Alloc

__all__ = ["DEFAULT_BLOCK_SIZE", "Mixture", "MixtureSampler", "MixtureVersion", "PackedMixtureSampler", "change_rebase"]

#: Positions per block when ``block_size`` is not given (proportions exact to one per block).
DEFAULT_BLOCK_SIZE = 1024


def _schema_difference(schema: pa.Schema, first: pa.Schema, first_name: str) -> str:
    """What differs from the first source's schema, column by column (the printed schemas are
    long, and a list column's item type, int64 against int32, is easy to miss in them)."""
    mine = {f.name: f for f in schema}
    theirs = {f.name: f for f in first}
    parts = [f"missing {[n for n in theirs if n not in mine]}"] if any(n not in mine for n in theirs) else []
    if any(n not in theirs for n in mine):
        parts.append(f"not in {first_name!r}: {[n for n in mine if n not in theirs]}")
    for n, f in mine.items():
        g = theirs.get(n)
        if g is None or f.equals(g):
            continue
        if f.type.equals(g.type):
            parts.append(f"{n!r} nullable={f.nullable} here, {g.nullable} in {first_name!r}")
        else:
            parts.append(f"{n!r} is {f.type} here, {g.type} in {first_name!r}")
    if not parts:
        parts.append(f"the same columns in another order: {schema.names} here, {first.names} in {first_name!r}")
    return "differs: " + "; ".join(parts)


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

    def __init__(
        self,
        sources: Mapping[str, Any],
        weights: Mapping[str, float] | WeightSchedule,
        *,
        block_size: int = DEFAULT_BLOCK_SIZE,
        shuffle: bool = True,
        epoch_len: int | None = None,
        shuffle_window: int | Mapping[str, int | None] | None = None,
    ) -> None:
        if not isinstance(sources, Mapping) or not sources:
            raise ConfigError(
                describe(
                    "sources",
                    sources,
                    "a non-empty mapping name -> rd.ArrowShards",
                    "pass {'web': rd.ArrowShards(...), 'code': rd.ArrowShards(...)}",
                )
            )
        for name, src in sources.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(describe("sources", name, "non-empty string names", "name each source"))
            if not isinstance(src, ArrowShards):
                raise ConfigError(
                    describe(
                        f"sources[{name!r}]",
                        type(src).__name__,
                        "an rd.ArrowShards (a Hugging Face dataset: rd.ArrowShards.from_hf(ds))",
                        "write the records as Arrow shards, or convert with rd.ArrowShards.from_hf",
                    )
                )
        self.names = tuple(sources)
        self.sources = tuple(sources[n] for n in self.names)
        first = self.sources[0].schema
        for name, src in zip(self.names, self.sources):
            if not src.schema.equals(first):
                raise ConfigError(
                    describe(
                        f"sources[{name!r}].schema",
                        str(src.schema)[:120],
                        f"the schema of {self.names[0]!r} ({first}); "
                        f"{_schema_difference(src.schema, first, self.names[0])}",
                        "write every source with the same columns and types: cast the others to the "
                        f"first's (pyarrow: table.cast(sources[{self.names[0]!r}].schema) before "
                        "rd.write_arrow_shards; a Hugging Face dataset: "
                        f"ds.cast(datasets.Features.from_arrow_schema(sources[{self.names[0]!r}].schema)) "
                        "before rd.ArrowShards.from_hf)",
                    )
                )
            if len(src) < 1:
                raise ConfigError(
                    describe(f"sources[{name!r}]", "0 records", "at least one record", "drop the empty source")
                )
        self.schedule = (
            weights
            if isinstance(weights, WeightSchedule)
            else WeightSchedule.constant(weights)
            if isinstance(weights, Mapping)
            else None
        )
        if self.schedule is None:
            raise ConfigError(
                describe(
                    "weights",
                    weights,
                    "a mapping name -> weight or an rd.WeightSchedule",
                    "pass weights={'web': 0.7, 'code': 0.3}",
                )
            )
        self.schedule.resolve(self.names)  # validated now, not at the first batch
        self.block_size = int(block_size) if not isinstance(block_size, bool) and isinstance(block_size, int) else -1
        if not 1 <= self.block_size <= 1 << 24:
            raise ConfigError(
                describe("block_size", block_size, "an integer in [1, 2**24]", "pass e.g. block_size=1024")
            )
        if not isinstance(shuffle, bool):
            raise ConfigError(describe("shuffle", shuffle, "True or False", "pass a bool"))
        self.shuffle = shuffle
        self.windows = _windows(shuffle_window, self.names, shuffle)
        self.sizes = tuple(len(s) for s in self.sources)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        total = int(self.offsets[-1])
        if epoch_len is not None and (
            isinstance(epoch_len, bool) or not isinstance(epoch_len, int) or not 1 <= epoch_len <= MAX_POSITION
        ):
            raise ConfigError(
                describe(
                    "epoch_len",
                    epoch_len,
                    "an integer in [1, 2**62] (positions of an epoch) or None",
                    "drop epoch_len= (default: the sources' total records)",
                )
            )
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
    def source_versions(self) -> tuple[str, ...]:
        """Each source's pinned version hash (``"unpinned"`` for one that is not), in ``names`` order."""
        return self._versions

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
            raise ConfigError(
                describe("record_ids", int(ids.max()), f"ids in [0, {len(self)})", "pass ids of this mixture")
            )
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
            return self.sources[int(used[0])].take(local).cast(self.schema)
        order = np.argsort(src, kind="stable")
        schema = self.schema  # the first source's (the others equal it up to a list child's name)
        pieces = [self.sources[int(s)].take(local[src == s]).cast(schema) for s in used]
        table = pa.concat_tables(pieces).combine_chunks()
        inverse = np.empty(len(order), dtype=np.int64)
        inverse[order] = np.arange(len(order), dtype=np.int64)
        return table.take(pa.array(inverse))

    def take_numpy(self, record_ids, pad_value: Any = 0, alloc: Alloc | None = None) -> list[Any] | None:
        """Per column, the default collate's numpy arrays of ``take(record_ids)`` in one gather
        over every source (``ArrowShards.take_numpy``, ``alloc`` included); None where that has no
        fast path, or the sources gather apart (remote): the loader then uses :meth:`take`."""
        if self._gather is None:
            return None
        return self._gather.take_numpy(record_ids, pad_value, alloc)  # ids outside [0, len): rd.RecordIdError

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
    def plan(
        self, seed: int, position_of_step: Callable[[int], int] | None = None, rebase: Rebase | None = None
    ) -> MixturePlan:
        """The pure plan of this mixture's stream under ``seed``."""
        return MixturePlan(
            self.names,
            self.sizes,
            self._versions,
            self.schedule,
            block=self.block_size,
            seed=seed,
            version_hash=self._version.hash,
            shuffle=self.shuffle,
            position_of_step=position_of_step,
            rebase=rebase,
            windows=self.windows,
        )

    def sampler(
        self,
        seed: int,
        global_batch: int,
        *,
        packed: bool = False,
        position_of_step: Callable[[int], int] | None = None,
    ) -> MixtureSampler:
        """The positional sampler ``rd.DataLoader`` orders this mixture with. ``position_of_step``:
        the loader's step -> position map under a batch schedule (the epoch is then the nominal
        ``epoch_len``, not rounded to whole batches: schedules run on the continuous tail)."""
        if position_of_step is not None:
            return MixtureSampler(self, seed, self.epoch_len, position_of_step)
        if packed:  # a weight schedule's segments start at packing-window boundaries (the loader places them)
            return PackedMixtureSampler(self, seed, self.epoch_len, None)
        length = -(-self.epoch_len // global_batch) * global_batch
        if length > MAX_POSITION:  # rounding up to whole global batches passed the position limit
            raise ConfigError(
                describe(
                    "epoch_len",
                    self.epoch_len,
                    f"at most {MAX_POSITION // global_batch * global_batch} "
                    f"(2**62 rounded down to a multiple of the global batch {global_batch})",
                    "pass a smaller epoch_len",
                )
            )
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
        windows = (
            ""
            if not any(w is not None for w in m.windows)
            else ", windows=" + ",".join("-" if w is None else str(w) for w in m.windows)
        )  # absent: as before, byte for byte
        return (
            f"rd.Mixture(sources={len(m.names)}, epoch_len={self._len}, block={m.block_size}, "
            f"shuffle={m.shuffle}{windows})"
        )

    def state_section(self) -> MixtureSection:
        return self.plan.section()

    @property
    def declared_rebase(self) -> Rebase | None:
        """The rebase a state records: the plan's (a packed schedule's runs are the plan's, see
        :class:`PackedMixtureSampler`)."""
        return self.plan.rebase

    def index_key(self) -> str:
        """What a packing index of this stream depends on: its state section."""
        return repr(self.state_section().to_dict())


def _windows(shuffle_window: Any, names: tuple[str, ...], shuffle: bool) -> tuple[int | None, ...]:
    """One shuffle window (or None: the global shuffle) per source, validated."""
    if shuffle_window is None:
        return (None,) * len(names)
    if not shuffle:
        raise ConfigError(
            describe(
                "shuffle_window",
                shuffle_window,
                "None with shuffle=False (a window shuffles)",
                "drop shuffle_window= or drop shuffle=False",
            )
        )
    given = dict(shuffle_window) if isinstance(shuffle_window, Mapping) else {n: shuffle_window for n in names}
    unknown = sorted(set(given) - set(names), key=str)
    if unknown:
        raise ConfigError(
            describe(
                "shuffle_window",
                unknown[0],
                f"a source name (one of {list(names)})",
                "key the windows by the Mixture's source names",
            )
        )
    out = []
    for n in names:
        w = given.get(n)
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 1 << 40):
            raise ConfigError(
                describe(
                    f"shuffle_window[{n!r}]",
                    w,
                    "a window of at least 1 record, or None",
                    "pass e.g. shuffle_window=4096",
                )
            )
        out.append(w)
    return tuple(out)


class PackedMixtureSampler(MixtureSampler):
    """A :class:`MixtureSampler` whose stream may hold earlier runs (see the module docs)."""

    _runs_of: Any = None
    _runs: tuple[tuple[int, MixturePlan], ...] = ()

    def __init__(self, mixture: Any, seed: int, length: int, position_of_step: Any) -> None:
        segments = mixture.schedule.resolve(mixture.names)
        #: A declared weight schedule's later segments (step, weights as given), which the loader
        #: turns into runs at packing-window boundaries (:meth:`add_run`); empty for constant weights.
        self.pending = tuple((step, tuple(raw)) for step, _, raw in segments[1:])
        self.scheduled = bool(self.pending)
        if not self.scheduled:
            super().__init__(mixture, seed, length, position_of_step)
            return
        self.mixture, self.seed, self._len, self.position_of_step = mixture, seed, length, None
        self._declared = tuple((step, tuple(raw)) for step, _, raw in segments)
        self.plan = self._plan_of(tuple(segments[0][2]), None)

    def add_run(self, position: int, weights: tuple[Any, ...]) -> None:
        """Start a run of ``weights`` at ``position`` (a window boundary, at or after the current
        run's start), each source continuing from its count there (a declared schedule's segment)."""
        counts = tuple(int(x) for x in self.counts_before(position))
        rebase = self.plan.rebase
        runs = list(rebase.earlier) if isinstance(rebase, PackedRebase) else []
        start = 0 if rebase is None else rebase.position
        if position > start:  # the current run holds documents: it becomes an earlier one
            runs.append(
                EarlierRun(
                    start, (0,) * len(counts) if rebase is None else rebase.counts, tuple(self.plan.segments[0][2])
                )
            )
        self.plan = self._plan_of(
            weights,
            PackedRebase(position, counts, tuple(runs)) if runs else Rebase(position, counts) if position else None,
        )
        self.pending = self.pending[1:]

    @property
    def declared_rebase(self) -> Rebase | None:
        """The rebase a state records (a declared schedule's runs are the plan's, not the state's)."""
        return None if self.scheduled else self.plan.rebase

    def rebase(self, rebase: Rebase | None) -> None:
        if self.scheduled:
            if rebase is not None:
                raise ResumeError(
                    describe(
                        "rebase",
                        rebase.to_list(),
                        "none with a declared weight schedule (its runs follow from the plan)",
                        "resume with the saved schedule",
                    )
                )
            return
        super().rebase(rebase)

    def rebased(self, rebase: Rebase | None) -> MixtureSampler:
        if self.scheduled and rebase is None:
            return self
        return super().rebased(rebase)

    def index_key(self) -> str:
        """What a packing index of this stream depends on: the section, or a schedule's runs."""
        if not self.scheduled:
            return repr(self.state_section().to_dict())
        rebase = self.plan.rebase
        earlier = [r.to_list() for r in rebase.earlier] if isinstance(rebase, PackedRebase) else []
        return repr((self.plan.to_dict(), earlier, self.pending))

    def _plan_of(self, weights: Any, rebase: Rebase | None) -> MixturePlan:
        m = self.mixture
        schedule = (
            weights if isinstance(weights, WeightSchedule) else WeightSchedule.constant(dict(zip(m.names, weights)))
        )
        return MixturePlan(
            m.names,
            m.sizes,
            m.source_versions,
            schedule,
            block=m.block_size,
            seed=self.seed,
            version_hash=m.version.hash,
            shuffle=m.shuffle,
            position_of_step=None,
            rebase=rebase,
            windows=m.windows,
        )

    def earlier_runs(self) -> tuple[tuple[int, MixturePlan], ...]:
        """(start, plan) of each earlier run, oldest first (empty without a mid-epoch rebase)."""
        rebase = self.plan.rebase
        if self._runs_of is not rebase:
            runs: tuple[tuple[int, MixturePlan], ...] = ()
            if isinstance(rebase, PackedRebase) and rebase.earlier:
                runs = tuple(
                    (r.position, self._plan_of(r.weights, Rebase(r.position, r.counts) if r.position else None))
                    for r in rebase.earlier
                )
            self._runs, self._runs_of = runs, rebase
        return self._runs

    def _which(self, positions: np.ndarray) -> tuple[np.ndarray, list[MixturePlan]]:
        runs = self.earlier_runs()
        starts = np.array([s for s, _ in runs] + [self.plan.first_position], dtype=np.int64)
        return np.searchsorted(starts, positions, side="right") - 1, [p for _, p in runs] + [self.plan]

    def at_positions(self, positions: np.ndarray) -> np.ndarray:
        pos = np.asarray(positions, dtype=np.int64)
        if not self.earlier_runs() or (pos.size and int(pos.min()) >= self.plan.first_position):
            return super().at_positions(pos)  # all in the run in force (the usual case after a change)
        which, plans = self._which(pos)
        out = np.empty_like(pos)
        for k in np.unique(which).tolist():
            sel = which == k
            out[sel] = plans[max(k, 0)].concatenated_ids(pos[sel])
        return out

    def counts_before(self, position: int) -> np.ndarray:
        """Records of each source in the mixed positions ``[0, position)``, from the run in force."""
        which, plans = self._which(np.array([position], dtype=np.int64))
        return plans[max(int(which[0]), 0)].counts_before(position)

    @property
    def first_position(self) -> int:
        """The first position this stream answers for (its oldest run's start)."""
        runs = self.earlier_runs()
        return runs[0][0] if runs else self.plan.first_position

    def run_at(self, position: int) -> tuple[int, tuple[int, ...], tuple[Any, ...], MixturePlan]:
        """(start, counts at the start, weights as given, plan) of the run in force at ``position``."""
        which, plans = self._which(np.array([position], dtype=np.int64))
        k = max(int(which[0]), 0)
        rebase = self.plan.rebase
        if isinstance(rebase, PackedRebase) and k < len(self.earlier_runs()):  # earlier runs: a packed rebase's
            r = rebase.earlier[k]
            return r.position, r.counts, r.weights, plans[k]
        start = 0 if rebase is None else rebase.position
        counts = (0,) * len(self.plan.names) if rebase is None else rebase.counts
        return start, counts, tuple(self.plan.segments[0][2]), self.plan

    def check_runs(self) -> None:
        """``ResumeError`` unless each run starts where the run before it left every source (its
        counts are that run's counts at its start): a saved chain that does not continue each
        source would repeat or skip records."""
        runs = list(self.earlier_runs()) + [(self.plan.first_position, self.plan)]
        rebase = self.plan.rebase
        if not isinstance(rebase, PackedRebase):  # no earlier run (earlier_runs): one run, nothing to chain
            return
        for k in range(1, len(runs)):
            start, _ = runs[k]
            want = tuple(int(x) for x in runs[k - 1][1].counts_before(start))
            have = rebase.earlier[k].counts if k < len(runs) - 1 else rebase.counts
            if tuple(have) != want:
                field = f"state.mixture.earlier[{k}]" if k < len(runs) - 1 else "state.mixture.rebase"
                raise ResumeError(
                    describe(
                        field,
                        [start, list(have)],
                        f"the counts the run before leaves at position "
                        f"{start}: {list(want)} (each run continues every source)",
                        "pass an unmodified state",
                    )
                )

    def state_section(self) -> MixtureSection:
        section = self.plan.section()
        if self.scheduled:  # the declared schedule: its runs are a pure function of the plan
            return replace(section, schedule=self._declared, rebase=None)
        rebase = self.plan.rebase
        if isinstance(rebase, PackedRebase) and rebase.earlier:
            return replace(section, rebase=rebase)
        return section

    def saved(self, sec: MixtureSection) -> PackedMixtureSampler:
        """A copy ordering the stream a saved (validated) mixture section describes: its weights and
        its rebase with the earlier runs (for the saved epoch's packing index)."""
        other = copy.copy(self)
        other.plan = self._plan_of(WeightSchedule(sec.segments), sec.rebase)
        other._runs_of = None
        return other


def change_rebase(order: PackedMixtureSampler, epoch_start: int, position: int) -> Rebase:
    """The rebase of a weight change taking effect at ``position`` (a window boundary of the epoch
    starting at ``epoch_start``): each source's count there under ``order``, and the runs of
    ``order`` that hold the epoch's documents before it (none when ``position`` starts the epoch)."""
    counts = tuple(int(x) for x in order.counts_before(position))
    runs = [order.run_at(s) for s in [s for s, _ in order.earlier_runs()] + [order.plan.first_position]]
    ends = [r[0] for r in runs[1:]] + [position]
    earlier = tuple(
        EarlierRun(start, tuple(int(c) for c in counts_at), tuple(weights))
        for (start, counts_at, weights, _), end in zip(runs, ends)
        if end > epoch_start and end > start and start < position
    )
    return PackedRebase(position, counts, earlier) if earlier else Rebase(position, counts)
