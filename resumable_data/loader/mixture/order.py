"""``rd.Mixture``'s :class:`~resumable_data.loader.order.StreamOrder`: the loader side of a mixture.

Algorithm. :class:`MixtureOrder` wraps the mixture's positional sampler
(:class:`~resumable_data.sources.mixture.MixtureSampler`, or its packed subclass): the loader's
positions are the mixed stream's, so a position's record is the sampler's concatenated id,
served from runs of a whole span of blocks in one compiled call (:meth:`MixturePlan.span_ids`,
:data:`MIXTURE_RUN` positions a run after the first). Its point is the sampler's rebase: a restore
continues from the saved one or from a ``data_change``'s (:func:`~.state.check_mixture`, packed:
:func:`~.packed.packed_change`), and the loader drops its persistent workers when it moves. With
``token_column=`` or packing it counts each source's tokens (:class:`SourceTokens`; packed,
:class:`~.packed.PackedSourceCount`): written into the state's section by :meth:`snapshot`,
checked and seeded on a restore (:meth:`prepare_restore`, :meth:`apply_restore`), shown by
:meth:`progress`.

Guarantee. The records, states and errors of an ``rd.Mixture`` loader, byte for byte as before
this protocol (the module moved the loader's mixture branches here, it changed no rule); the
counters are process-local (a worker gets the order without them).

Cost. A span is a slice of the held run (one compiled call per :data:`MIXTURE_RUN` positions);
the first span after a start or a seek is ``RUN`` long. A restore costs one counting call per
source (tokens), and for a packed mixture the saved epoch's packing index (cached).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from resumable_data.labels import RecoveryLabel
from resumable_data.loader.mixture.packed import (
    PackedSourceCount,
    packed_progress,
    resolve_schedule,
    without_ended_runs,
)
from resumable_data.loader.mixture.state import (
    TokenStart,
    check_mixture,
    check_saved_tokens,
    mixture_progress,
    saved_plan,
    with_source_tokens,
)
from resumable_data.loader.order import DocumentOrder, OrderCheck
from resumable_data.loader.state import LoaderState, OnUncommitted
from resumable_data.plan.mixture.section import MixtureSection
from resumable_data.plan.mixture.tokens import SourceTokens
from resumable_data.plan.record_runs import RUN, RecordRuns

__all__ = ["MIXTURE_RUN", "MixtureOrder"]

#: Positions per run of an ``rd.Mixture``'s record ids after the first (:meth:`MixturePlan.span_ids`: 16
#: blocks of the default 1024 in one compiled call, 128 KiB held): the per-run Python steps (block
#: counts, keys, the call) spread over 64 batches of 256; the first run after a start or a seek is
#: ``RUN`` long (:class:`RecordRuns`), so the first batch waits for no more than a single source's.
MIXTURE_RUN = 4 * RUN


class MixtureOrder:
    """The order of a loader over an ``rd.Mixture`` (see the module docs). ``sampler``: the
    mixture's positional sampler; ``token_column``: the column counted per source (unpacked);
    ``lengths``: the documents' token lengths (packed); ``packed``: the loader packs sequences."""

    def __init__(
        self, sampler: Any, *, token_column: str | None = None, lengths: np.ndarray | None = None, packed: bool = False
    ) -> None:
        self.sampler = sampler
        self.token_column = token_column
        self.packed = packed
        self._lengths = lengths
        self._runs: tuple[Any, RecordRuns] | None = None  # (the plan they were made on, its runs)
        self._tokens: SourceTokens | None = None  # built on the first snapshot that needs it
        self._packed_count: PackedSourceCount | None = None  # packed: per-source counts, tail corrections
        self._tokens_base = 0  # per-source tokens counters.tokens does not hold (a schema-1 resume)

    def __getstate__(self) -> dict[str, Any]:  # a worker reads records only: no runs, counters or lengths
        return {**self.__dict__, "_runs": None, "_tokens": None, "_packed_count": None, "_lengths": None}

    # -- identity --------------------------------------------------------------------------------
    def fingerprint(self) -> str | None:
        return self.sampler.fingerprint()

    def state_section(self) -> MixtureSection | None:
        return self.sampler.state_section()

    # -- positions -> records --------------------------------------------------------------------
    def records(self, positions: np.ndarray) -> np.ndarray:
        return self.sampler.at_positions(positions)

    def span_records(self, start: int, stop: int) -> np.ndarray:
        plan = self.sampler.plan
        if start - start % RUN < plan.first_position:  # where a run after a seek would start: before the rebase
            return plan.concatenated_ids(np.arange(start, stop, dtype=np.int64))
        held = self._runs
        if held is None or held[0] is not plan:  # a rebase swaps the plan: runs of the current one
            held = self._runs = (plan, RecordRuns(plan.concatenated_ids, ranged=plan.span_ids, run=MIXTURE_RUN))
        return held[1].span(start, stop)

    def batch_records(self, start: int, stop: int, positions: np.ndarray) -> np.ndarray:
        ids = self.span_records(start, stop)
        return ids if len(positions) == stop - start else ids[positions - start]

    def warm_ids(self) -> np.ndarray:
        return np.zeros(1, dtype=np.int64)  # a mixture's blocks are computed where they are used

    def document_order(self) -> DocumentOrder | None:
        return self.sampler

    def bind(self, stream: Any) -> None:
        if self.packed and self.sampler.pending:  # a weight schedule: its segments at window boundaries
            resolve_schedule(self.sampler, stream)

    # -- the rebase and restores -----------------------------------------------------------------
    def point(self) -> Any:
        return self.sampler.declared_rebase

    def move_to(self, point: Any) -> None:
        self.sampler.rebase(point)

    def check_restore(
        self, saved: LoaderState, current: LoaderState, label: RecoveryLabel, choice: OnUncommitted | None, stream: Any
    ) -> OrderCheck:
        found = check_mixture(saved, current, label, choice, stream if self.packed else None)
        return OrderCheck(found.diffs, found.rebase, found.section, found.plan)

    def restore_stream(self, stream: Any, point: Any) -> Any:
        """Packed: the stream on the rebased order (its epochs' indexes follow the rebase it continues from)."""
        return stream.with_order(self.sampler.rebased(point)) if self.packed else stream

    def _source_tokens(self) -> SourceTokens | None:
        """Per-source token counting (``token_column=``, or packed), else None."""
        if self.token_column is None and not self.packed:
            return None
        if self._tokens is None:
            mixture = self.sampler.mixture
            lengths = self._lengths if self.packed else mixture.column_lengths(self.token_column)
            assert lengths is not None  # a packed order is built with its documents' lengths
            offsets = mixture.offsets
            self._tokens = SourceTokens(
                self.sampler.plan, [lengths[offsets[s] : offsets[s + 1]] for s in range(len(offsets) - 1)]
            )
        return self._tokens

    def _packed(self) -> PackedSourceCount:
        """The per-source counts of a packed mixture loader (:mod:`~.packed`)."""
        if self._packed_count is None:
            self._packed_count = PackedSourceCount(self._source_tokens(), self.sampler.mixture.offsets)
        return self._packed_count

    def snapshot(self, state: LoaderState, stream: Any) -> LoaderState:
        counter = self._source_tokens()
        if counter is None:
            return state
        if self.packed:
            return self._packed().with_tokens(without_ended_runs(state), stream, self.sampler)
        assert self.token_column is not None  # unpacked, tokens are counted of the token_column only
        return with_source_tokens(state, self.sampler.plan, counter, self.token_column, self._tokens_base)

    def prepare_restore(self, saved: LoaderState, check: OrderCheck, stream: Any) -> Any:
        """(the token counter's start, the packed per-source seed), both checked before anything changes."""
        return self._saved_tokens(saved, check), self._packed_seed(saved, check, stream)

    def _saved_tokens(self, saved: LoaderState, check: OrderCheck) -> TokenStart | None:
        """The token counter's start at the saved committed cursor, checked against the sources
        (:func:`~.state.check_saved_tokens`), or None for a loader that does not count.
        Unpacked, the counts come from the saved plan (a ``data_change`` rebase may lie after the
        committed cursor; a source's tokens do not depend on the weights); packed counts include
        partial windows and EOS tokens, so they are checked, not seeded."""
        counter = self._source_tokens()
        if counter is None:
            return None
        if self.packed:
            plan = self.sampler.rebased(check.point)  # the sampler: its counts follow the run in force
            end = (saved.epoch_base[0] + 1) * saved.plan.num_records
            return check_saved_tokens(saved, counter, plan, column=None, packed_epoch_end=end)
        plan = check.plan or saved_plan(saved, check.section)  # the section as the restore validated it
        return check_saved_tokens(saved, counter, plan, column=self.token_column)

    def _packed_seed(self, saved: LoaderState, check: OrderCheck, stream: Any) -> Any:
        """A packed restore's per-source token seed (:meth:`~.packed.PackedSourceCount.seed_from`,
        on the order the restore rebases to); None unpacked."""
        if not self.packed:
            return None
        order = self.sampler.rebased(check.point)
        return self._packed().seed_from(saved, stream.with_order(order), order)

    def apply_restore(self, prepared: Any) -> None:
        if prepared is None:  # a fresh start
            self._tokens_base = 0
            if self._packed_count is not None:
                self._packed_count.seed = None
            return
        tokens, seed = prepared
        if tokens is not None:
            self._tokens_base = tokens.base
            counter = self._source_tokens()  # a token start is prepared only where tokens are counted
            if tokens.counts is not None and tokens.tokens is not None and counter is not None:
                counter.seed(tokens.counts, tokens.tokens)
        if self.packed:
            self._packed().seed = seed

    def memento(self) -> Any:
        return self._tokens_base, None if self._packed_count is None else self._packed_count.seed

    def rewind(self, memento: Any) -> None:
        self._tokens_base, seed = memento
        if self._packed_count is not None:
            self._packed_count.seed = seed

    def progress(self, state: LoaderState, stream: Any, ledger: dict[int, int]) -> Any:
        """Packed, the tokens are those of the sequences passed before the cursor (a skipped step's
        included); unpacked, each source's tokens of its consumed records."""
        if self.packed:
            return packed_progress(self.snapshot(state, stream), stream, self.sampler, self._packed(), ledger)
        return mixture_progress(state, self.sampler.plan, tokens=self._source_tokens())
