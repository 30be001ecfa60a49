"""The positional sampler of a packed ``rd.Mixture``: the mixed stream as runs of weights.

Algorithm. A packed loader's weight change (``data_change``) takes effect at a packing-window
boundary, possibly inside a loader epoch (:mod:`resumable_data.loader.mixture_packed`), so the
documents of that epoch before the boundary keep the plan they were packed under. The sampler's
plan is the current run (from its rebase position on); a :class:`~.mixture_section.PackedRebase`
adds the *earlier* runs, each a :class:`~resumable_data.plan.mixture.MixturePlan` under its own
weights starting at its own position with its own per-source counts, in force until the next
run starts. Position ``p`` is answered by the last run that starts at or before ``p``. A declared
weight schedule is the same chain: the loader places each later segment at a window boundary
(:meth:`PackedMixtureSampler.add_run`, from :func:`resumable_data.loader.mixture_packed.resolve_schedule`);
its runs are then the plan's, so the state section holds the declared schedule only.

Guarantee. Every run continues each source from the records it had consumed where the run
starts, so no record of a source is repeated or skipped within its epoch across the changes; a
stream without earlier runs is the plain :class:`~.mixture.MixtureSampler`'s, byte for byte, and
the state section gains ``earlier`` (at mixture schema 3) only when there are earlier runs.

Cost. One plan per earlier run (built once per rebase); a query is one ``searchsorted`` over the
runs' starts plus the runs' own lookups.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from resumable_data.errors import ResumeError, describe
from resumable_data.plan.mixture import MixturePlan
from resumable_data.plan.mixture_section import (
    EARLIER_SCHEMA_VERSION, K_EARLIER, K_SCHEMA, EarlierRun, PackedRebase, Rebase, Section, parse_section,
)
from resumable_data.plan.weights import WeightSchedule
from resumable_data.sources.mixture import MixtureSampler

__all__ = ["PackedMixtureSampler"]


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
        self._declared = [[step, list(raw)] for step, _, raw in segments]
        self.plan = self._plan_of(tuple(segments[0][2]), None)

    def add_run(self, position: int, weights: tuple[Any, ...]) -> None:
        """Start a run of ``weights`` at ``position`` (a window boundary, at or after the current
        run's start), each source continuing from its count there (a declared schedule's segment)."""
        counts = tuple(int(x) for x in self.counts_before(position))
        rebase = self.plan.rebase
        runs = list(rebase.earlier) if isinstance(rebase, PackedRebase) else []
        start = 0 if rebase is None else rebase.position
        if position > start:  # the current run holds documents: it becomes an earlier one
            runs.append(EarlierRun(start, (0,) * len(counts) if rebase is None else rebase.counts,
                                   tuple(self.plan.segments[0][2])))
        self.plan = self._plan_of(weights, PackedRebase(position, counts, tuple(runs)) if runs
                                  else Rebase(position, counts) if position else None)
        self.pending = self.pending[1:]

    @property
    def declared_rebase(self) -> Rebase | None:
        """The rebase a state records (a declared schedule's runs are the plan's, not the state's)."""
        return None if self.scheduled else self.plan.rebase

    def rebase(self, rebase: Rebase | None) -> None:
        if self.scheduled:
            if rebase is not None:
                raise ResumeError(describe("rebase", rebase.to_list(), "none with a declared weight schedule (its runs "
                                           "follow from the plan)", "resume with the saved schedule"))
            return
        super().rebase(rebase)

    def rebased(self, rebase: Rebase | None) -> MixtureSampler:
        if self.scheduled and rebase is None:
            return self
        return super().rebased(rebase)

    def index_key(self) -> str:
        """What a packing index of this stream depends on: the section, or a schedule's runs."""
        if not self.scheduled:
            return repr(self.state_section())
        rebase = self.plan.rebase
        return repr((self.plan.to_dict(), [r.to_list() for r in getattr(rebase, "earlier", ())], self.pending))

    def _plan_of(self, weights: Any, rebase: Rebase | None) -> MixturePlan:
        m = self.mixture
        schedule = weights if isinstance(weights, WeightSchedule) else WeightSchedule.constant(dict(zip(m.names, weights)))
        return MixturePlan(m.names, m.sizes, m._versions, schedule, block=m.block_size, seed=self.seed,
                           version_hash=m.version.hash, shuffle=m.shuffle, position_of_step=None, rebase=rebase,
                           windows=m.windows)

    def earlier_runs(self) -> tuple[tuple[int, MixturePlan], ...]:
        """(start, plan) of each earlier run, oldest first (empty without a mid-epoch rebase)."""
        rebase = self.plan.rebase
        if self._runs_of is not rebase:
            runs = ()
            if isinstance(rebase, PackedRebase) and rebase.earlier:
                runs = tuple((r.position, self._plan_of(r.weights, Rebase(r.position, r.counts) if r.position else None))
                             for r in rebase.earlier)
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
        if k < len(self.earlier_runs()):
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
        for k in range(1, len(runs)):
            start, _ = runs[k]
            want = tuple(int(x) for x in runs[k - 1][1].counts_before(start))
            have = rebase.earlier[k].counts if k < len(runs) - 1 else rebase.counts
            if tuple(have) != want:
                field = f"state.mixture.earlier[{k}]" if k < len(runs) - 1 else "state.mixture.rebase"
                raise ResumeError(describe(field, [start, list(have)], f"the counts the run before leaves at position "
                                           f"{start}: {list(want)} (each run continues every source)",
                                           "pass an unmodified state"))

    def state_section(self) -> dict[str, Any]:
        section = self.plan.to_dict()
        if self.scheduled:  # the declared schedule: its runs are a pure function of the plan
            return {**section, "schedule": self._declared, "rebase": None}
        rebase = self.plan.rebase
        if isinstance(rebase, PackedRebase) and rebase.earlier:
            section[K_SCHEMA] = EARLIER_SCHEMA_VERSION
            section[K_EARLIER] = [r.to_list() for r in rebase.earlier]
        return section

    def saved(self, section: dict[str, Any] | Section) -> PackedMixtureSampler:
        """A copy ordering the stream a saved (validated) mixture section describes: its weights and
        its rebase with the earlier runs (for the saved epoch's packing index). ``section``: the
        saved dict, or the :class:`~resumable_data.plan.mixture_section.Section` a restore parsed."""
        sec = section if isinstance(section, Section) else parse_section(section)
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
    earlier = tuple(EarlierRun(start, tuple(int(c) for c in counts_at), tuple(weights))
                    for (start, counts_at, weights, _), end in zip(runs, ends)
                    if end > epoch_start and end > start and start < position)
    return PackedRebase(position, counts, earlier) if earlier else Rebase(position, counts)
