"""Weighted mixtures of sources as a pure function of the position.

Algorithm. The mixed stream is cut into *runs*: a run starts at a position with normalised
weights ``w_s`` (exact rationals, :class:`fractions.Fraction` of the given numbers, so results do
not depend on floating point) and the count of every source consumed before it. A weight schedule
declared in steps becomes runs through a step -> position function the loader supplies; a
``data_change`` resume adds a run (a *rebase*) at the resume position. Inside a run, positions
form aligned blocks of ``B`` positions. Block ``j`` gives source ``s`` ``floor(w_s B)`` slots plus
one extra slot when a point of the grid ``u_j + k`` (``k`` integer, ``u_j = frac(j a / 2**64)``,
``a`` the golden-ratio constant) falls in the interval ``[G_s, G_s + f_s)``, where ``f_s`` is the
fractional part of ``w_s B`` and ``G_s`` the sum of the ``f_t`` before ``s``. The grid has exactly
``r = B - sum floor(w_s B)`` points in ``[0, r)`` and an interval shorter than one holds at most
one, so every block has exactly ``B`` slots. Slots are laid out source by source and the block's
positions visit them through a keyed permutation of ``[0, B)`` (:mod:`.permutation`). Source
``s``'s ``q``-th record is record ``perm_e(q mod n_s)`` of its own epoch ``e = q // n_s``
(:mod:`.cache` computes a block's arrays and caches them).

Guarantee. In every aligned block of a run, source ``s`` gets ``floor(w_s B)`` or
``ceil(w_s B)`` positions (exactly ``w_s B`` when that is an integer). The cumulative count after
``J`` blocks is ``J floor(w_s B) + E_s(J)`` with ``E_s(J)`` the grid hits of a golden-ratio
rotation, so ``|count - J w_s B|`` grows at most logarithmically in ``J`` (measured: at most 4
samples over 10**9 blocks for random weights, see ``tests/plan/test_mixture.py``). A new run
continues every source from its consumed count: no record of a source is repeated or skipped
within its epoch across a weight change; an upsampled source is seen once per source epoch, each
epoch in a new order.

Cost. ``counts_before(p)`` is O(S log) (a floor sum, no walk) plus O(B) for the partial block;
``locate`` / ``records`` / ``concatenated_ids`` are O(len) plus, per block touched, one compiled
O(S + B) pass, cached (:mod:`.cache`); a query of consecutive positions at least a block
long computes its blocks in one compiled call instead. The loader's runs of upcoming positions
(4,096, then 16,384 positions) ask by their bounds (:meth:`MixturePlan.span_ids`), which
computes the ids alone. No index of the stream exists; a restore costs one block and the
counts before it (one floor sum per grid point of the run, :meth:`.runs.Run.extras_before`).
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import xxhash

from resumable_data._schema import check_int
from resumable_data.errors import ConfigError, ResumeError, describe
from resumable_data.plan.mixture.block import is_span
from resumable_data.plan.mixture.cache import Block, BlockCache
from resumable_data.plan.mixture.runs import Run, floor_sum
from resumable_data.plan.mixture.section import (
    MixtureSection,
    Rebase,
    parse_section,
)
from resumable_data.plan.mixture.weights import StepPositions, WeightSchedule
from resumable_data.plan.order import Order, OrderSpec
from resumable_data.plan.permutation import MAX_DOMAIN as MAX_POSITION

__all__ = ["MixturePlan", "Rebase", "SourceProgress", "StepPositions", "WeightSchedule", "floor_sum", "mixture_version"]

_SPAN_POSITIONS = 4096  # positions per compiled span call (a longer query is cut into such chunks)
_SPAN_MAX = 1 << 16  # the most positions :meth:`MixturePlan.span_ids` computes in one call


@dataclass(frozen=True)
class SourceProgress:
    """One source's progress at a position: records consumed, its epoch and in-epoch position."""

    name: str
    consumed: int
    epoch: int
    position: int
    size: int


def mixture_version(names: Sequence[str], versions: Sequence[str], block: int) -> str:
    """The version hash of a mixture's data: its sources' names and versions and the block size."""
    h = xxhash.xxh3_128()
    h.update(b"rd.mixture/1" + struct.pack("<QQ", len(names), block))
    for n, v in zip(names, versions):
        for part in (n.encode(), v.encode()):
            h.update(struct.pack("<I", len(part)) + part)
    return "mix-" + h.hexdigest()


class MixturePlan(BlockCache):
    """Which source, source position and record each position of a mixed stream holds.

    ``position_of_step`` turns a schedule's steps into positions (the loader supplies it); the
    plan is immutable and the same arguments give the same stream. Its caches (blocks, round
    keys, the last span's end) are per plan and not locked: give each thread its own plan (the
    loader's workers are processes, each with its own).
    """

    def __init__(
        self,
        names: Sequence[str],
        sizes: Sequence[int],
        versions: Sequence[str],
        schedule: WeightSchedule,
        *,
        block: int,
        seed: int,
        version_hash: str,
        shuffle: bool = True,
        position_of_step: Callable[[int], int] | None = None,
        rebase: Rebase | None = None,
        windows: Sequence[int | None] | None = None,
    ) -> None:
        self.names = tuple(names)
        self.sizes = tuple(int(n) for n in sizes)
        self.versions = tuple(versions)
        self.block = check_int(block, "block_size", 1, 1 << 24)
        self.seed = seed
        self.version_hash = version_hash
        self.shuffle = bool(shuffle)
        self.schedule = schedule
        self.segments = schedule.resolve(self.names)
        if len(self.segments) > 1 and position_of_step is None:
            raise ConfigError(
                describe(
                    "weights",
                    schedule,
                    "a constant mapping here (no step -> position map)",
                    "pass a mapping of weights, or use the mixture through rd.DataLoader",
                )
            )
        self._pos = position_of_step
        self.rebase = rebase
        #: Per source, a shuffle window (its epochs in window-shuffle order) or None (a global shuffle).
        self.windows = tuple(windows) if windows is not None else (None,) * len(self.names)
        if len(self.windows) != len(self.names):
            raise ConfigError(
                describe(
                    "windows",
                    self.windows,
                    f"one entry per source ({len(self.names)})",
                    "pass a window or None per source",
                )
            )
        self._orders = tuple(None if w is None else OrderSpec(Order.WINDOW, w) for w in self.windows)
        self._windowed = self.shuffle and any(w is not None for w in self.windows)  # a source ordered by its window
        self._init_cache()
        self._runs = self._build_runs()
        self._starts = np.array([r.start for r in self._runs], dtype=np.int64)
        self._run_starts = [r.start for r in self._runs]

    # -- runs -------------------------------------------------------------------------------------
    def _new_run(self, start: int, weights: tuple[Fraction, ...], base: tuple[int, ...]) -> Run:
        return Run.of(start, weights, base, self.block)

    def _build_runs(self) -> list[Run]:
        starts = [(0, self.segments[0][1])]  # segment 0 starts the stream (no step -> position call)
        for step, w, _ in self.segments[1:]:
            assert self._pos is not None  # a schedule without a step map is refused in __init__
            start = self._pos(step)
            if not 0 <= start <= MAX_POSITION:
                raise ConfigError(
                    describe(
                        "weights",
                        f"a segment from step {step} (position {start})",
                        f"segments starting below position 2**62={MAX_POSITION}",
                        "drop the schedule entries that start that late",
                    )
                )
            starts.append((start, w))
        if self.rebase is None:
            runs = [self._new_run(0, starts[0][1], tuple(0 for _ in self.names))]
            for start, w in starts[1:]:
                runs.append(self._new_run(start, w, self._counts_in_runs(runs, start)))
        else:
            rb = self.rebase
            if len(rb.counts) != len(self.names):
                raise ResumeError(
                    describe("mixture.rebase", rb.to_list(), f"{len(self.names)} counts", "pass an unmodified state")
                )
            w = [seg for (start, seg) in starts if start <= rb.position][-1]
            runs = [self._new_run(rb.position, w, rb.counts)]
            for start, w2 in starts:
                if start > rb.position:
                    runs.append(self._new_run(start, w2, self._counts_in_runs(runs, start)))
        return runs

    def _counts_in_runs(self, runs: list[Run], p: int) -> tuple[int, ...]:
        k = max(i for i, r in enumerate(runs) if r.start <= p)
        return tuple(int(c) for c in self._run_counts(runs, k, p))

    def _run_counts(self, runs: list[Run], k: int, p: int) -> np.ndarray:
        run = runs[k]
        j, t = divmod(p - run.start, self.block)
        out = np.array(run.base, dtype=np.int64) + j * np.array(run.floors, dtype=np.int64) + run.extras_before(j)
        if t:
            out += np.bincount(self._layout(run, j).src[:t], minlength=len(self.names))
        return out

    def _run_of(self, p: np.ndarray) -> np.ndarray:
        return np.searchsorted(self._starts, p, side="right") - 1

    # -- queries ----------------------------------------------------------------------------------
    def counts_before(self, position: int) -> np.ndarray:
        """Records of each source in positions ``[0, position)`` (from the first run on)."""
        p = check_int(position, "position", 0)
        if p < self._runs[0].start:
            raise ConfigError(
                describe(
                    "position",
                    p,
                    f"at least {self._runs[0].start} (the rebase position)",
                    "ask about positions after the data change",
                )
            )
        return self._run_counts(self._runs, int(self._run_of(np.array([p]))[0]), p)

    def block_counts(self, run: int, j: int) -> np.ndarray:
        """Positions of each source in block ``j`` of run ``run``."""
        return self._runs[run].block_counts(j)

    @property
    def first_position(self) -> int:
        """The first position this plan answers for (the rebase position after a data change, else 0)."""
        return self._runs[0].start

    def locate(self, positions) -> tuple[np.ndarray, np.ndarray]:
        """(source index, position in that source's own stream) at each of ``positions``."""
        return self._lookup(positions, self._layout, ("src", "pos"))

    def records(self, positions) -> tuple[np.ndarray, np.ndarray]:
        """(source index, record id inside that source) at each of ``positions``."""
        return self._lookup(positions, self._block_records, ("src", "rec"))

    def concatenated_ids(self, positions) -> np.ndarray:
        """Record ids at ``positions`` in the sources' concatenated id space (source ``s``'s
        records follow those of the sources before it, as in ``rd.Mixture``)."""
        return self._lookup(positions, self._block_records, ("ids",))[0]

    def span_ids(self, start: int, stop: int) -> np.ndarray:
        """``concatenated_ids(arange(start, stop))`` without the array of positions, for the
        loader's runs of upcoming positions (:class:`~.record_runs.RecordRuns`). A span of at
        least a block inside one run is its blocks in one compiled call that computes the ids
        only (``_span_records(full=False)``); anything else is :meth:`concatenated_ids`."""
        runs = self._runs
        k = bisect_right(self._run_starts, start) - 1
        if (
            k < 0
            or self._windowed
            or not self.block <= stop - start <= _SPAN_MAX
            or (k + 1 < len(runs) and stop > runs[k + 1].start)
        ):
            return self.concatenated_ids(np.arange(start, stop, dtype=np.int64))
        run = runs[k]
        j = (start - run.start) // self.block
        origin = run.start + j * self.block
        b = self._span_records(run, j, (stop - 1 - origin) // self.block + 1, full=False)
        assert b.ids is not None  # a span's concatenated ids are always computed
        return b.ids[start - origin : stop - origin]

    def _lookup(self, positions, block: Callable[[Run, int], Block], fields: tuple[str, ...]) -> tuple:
        """Per position, ``fields`` of its block's cached arrays; a batch inside one block (the
        common case) is one gather per field from its block's arrays."""
        pos = np.asarray(positions, dtype=np.int64).reshape(-1)
        if not pos.size:
            return tuple(np.empty(0, dtype=np.int64) for _ in fields)
        span = is_span(pos)  # consecutive positions in order (a run of upcoming positions)
        lo, hi = (int(pos[0]), int(pos[-1])) if span else (int(pos.min()), int(pos.max()))
        if lo < self._runs[0].start:
            raise ConfigError(
                describe(
                    "positions", lo, f"at least {self._runs[0].start}", "ask about positions after the data change"
                )
            )
        k = bisect_right(self._run_starts, lo) - 1
        run = self._runs[k]
        j = (lo - run.start) // self.block
        origin = run.start + j * self.block
        if hi < origin + self.block and (k + 1 == len(self._runs) or hi < self._runs[k + 1].start):
            b = block(run, j)
            inner = pos - origin
            return tuple(getattr(b, f)[inner] for f in fields)
        if span and (k + 1 == len(self._runs) or hi < self._runs[k + 1].start):
            # a contiguous span inside one run (a run of upcoming positions)
            if block == self._block_records and pos.size >= self.block:  # its blocks in compiled calls
                nb = (hi - origin) // self.block + 1
                step = max(1, _SPAN_POSITIONS // self.block)  # blocks per call: memory stays O(run), not O(query)
                if nb <= step:
                    arrays = self._span_records(run, j, nb)
                    return tuple(getattr(arrays, f)[lo - origin : hi + 1 - origin] for f in fields)
                out = tuple(np.empty_like(pos) for _ in fields)
                for c in range(0, nb, step):
                    arrays = self._span_records(run, j + c, min(step, nb - c))
                    first = origin + c * self.block  # the chunk's first position
                    a, b = max(lo, first), min(hi + 1, first + arrays.src.shape[0])
                    for o, f in zip(out, fields):
                        o[a - lo : b - lo] = getattr(arrays, f)[a - first : b - first]
                return out
            out = tuple(np.empty_like(pos) for _ in fields)
            at = lo
            while at <= hi:
                b = block(run, j)
                end = min(hi + 1, origin + self.block)
                for o, f in zip(out, fields):
                    o[at - lo : end - lo] = getattr(b, f)[at - origin : end - origin]
                at, j, origin = end, j + 1, origin + self.block
            return out
        out = tuple(np.empty_like(pos) for _ in fields)
        runs = self._run_of(pos) if len(self._runs) > 1 else np.zeros(pos.shape, dtype=np.int64)
        for k, sel_k in _groups(runs):
            run = self._runs[k]
            where = np.flatnonzero(sel_k) if isinstance(sel_k, np.ndarray) else np.arange(pos.size)
            blocks, inner = np.divmod(pos[where] - run.start, self.block)
            for j, sel in _groups(blocks):
                b = block(run, j)
                for o, f in zip(out, fields):
                    o[where[sel]] = getattr(b, f)[inner[sel]]
        return out

    def progress(self, position: int) -> list[SourceProgress]:
        """Each source's consumed count, epoch and in-epoch position before ``position``."""
        counts = self.counts_before(position)
        return [
            SourceProgress(n, int(c), int(c) // size, int(c) % size, size)
            for n, c, size in zip(self.names, counts, self.sizes)
        ]

    # -- state ------------------------------------------------------------------------------------
    def section(self) -> MixtureSection:
        """The mixture's part of a loader state (names, sizes, declared schedule, block, rebase),
        typed; the rebase as a plain one (a packed sampler adds its earlier runs)."""
        rebase = None if self.rebase is None else Rebase(self.rebase.position, self.rebase.counts)
        return MixtureSection(
            self.names,
            self.sizes,
            tuple((step, tuple(raw)) for step, _, raw in self.segments),
            self.block,
            self.shuffle,
            rebase,
        )

    def to_dict(self) -> dict[str, Any]:
        """:meth:`section` as a state holds it."""
        return self.section().to_dict()

    def with_rebase(self, rebase: Rebase | None) -> MixturePlan:
        return MixturePlan(
            self.names,
            self.sizes,
            self.versions,
            self.schedule,
            block=self.block,
            seed=self.seed,
            version_hash=self.version_hash,
            shuffle=self.shuffle,
            position_of_step=self._pos,
            rebase=rebase,
            windows=self.windows,
        )

    @classmethod
    def from_dict(
        cls,
        d: Any,
        *,
        seed: int,
        version_hash: str,
        position_of_step: Callable[[int], int] | None,
        where: str = "state.mixture",
    ) -> MixturePlan:
        """The counting plan a saved mixture section describes (source versions are not saved:
        it answers counts and progress, not record ids); the section is validated first
        (:func:`.section.parse_section`)."""
        return cls.from_section(
            parse_section(d, where), seed=seed, version_hash=version_hash, position_of_step=position_of_step
        )

    @classmethod
    def from_section(
        cls, sec: MixtureSection, *, seed: int, version_hash: str, position_of_step: Callable[[int], int] | None
    ) -> MixturePlan:
        """:meth:`from_dict` of a section already validated (:func:`.section.parse_section`):
        a restore parses the saved section once and passes the typed result on."""
        try:
            return cls(
                sec.names,
                sec.sizes,
                ["?"] * len(sec.names),
                WeightSchedule(sec.segments),
                block=sec.block,
                seed=seed,
                version_hash=version_hash,
                shuffle=sec.shuffle,
                position_of_step=position_of_step,
                rebase=sec.rebase,
            )
        except ConfigError as e:
            raise ResumeError(f"state.mixture is inconsistent: {e}") from None


def _groups(values: np.ndarray):
    """(value, selector) per distinct value; one group without a scan of uniques when all agree."""
    if values.size and values[0] == values[-1] and (values == values[0]).all():
        yield int(values[0]), slice(None)
        return
    for v in np.unique(values):
        yield int(v), values == v
