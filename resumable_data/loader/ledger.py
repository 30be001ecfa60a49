"""The progress ledger: the only mutable part of a loader, and torch-free.

What it holds. The cursor (``committed <= delivered <= fetched``, in steps), the counted
progress (attempted / applied / skipped updates, samples, tokens; the pending tallies of batches
delivered but not yet committed), the skipped step ranges, the epoch ledger (first step of each
known epoch: epochs of packed streams differ in length), the recovery label and the stream
itself, and the seeding version (:mod:`.sample_seeding`: a fresh run seeds with the current
version, a restore with the version its state records, version 1 for a state without one): a
restore may continue at a batch origin (a declared global-batch change, or a segment
an earlier one began), so the stream the ledger walks is the constructed one with the restored
plan (:meth:`ProgressLedger.stream`); a fresh start puts the constructed one back.

Interface. ``start_pass`` (the window a new ``iter()`` fetches), ``on_fetch``, ``deliver``,
``commit_delivered``, ``commit``, ``skip``, ``restore`` (from a typed, already validated
:class:`~resumable_data.loader.state.LoaderState`), ``snapshot`` (the typed state, without
changing anything). The step sampler, the fetcher and the iterator talk to the loader's ledger
through these methods and nothing else.

Guarantee. Every counter that can be derived (microbatches, skipped steps) is derived from the
cursor and the skipped ranges, never counted twice. ``snapshot(auto=True)`` is what ``state_dict()``
returns in ``commit="auto"`` mode (delivered batches counted as committed) without committing.

The batch in hand. In ``commit="auto"`` mode at most one batch is delivered and not committed:
the last one (the next ``next()`` commits it). A state counts it as consumed, unless the ledger
is *watched* (:meth:`ProgressLedger.watch`: the loader observes a model's training forward) and
no training forward ran since it was delivered: then the state is the one taken just before it
was delivered, and a resume delivers it again. So a loop that fetches the next batch before the
backward of the current one (and saves between the two) resumes exactly, as does a plain loop.

End of a pass. A pass (``start_pass`` .. ``end_pass``) covers the rest of one epoch. When the
loop holds the epoch's last batch and the pass has not yet ended (no ``StopIteration`` yet), the
ledger is *at the end of the pass*: a state taken then (``end_of_pass``), a restore of it, and a
new ``iter()`` in the same process all give an empty pass first, and the pass after it starts the
next epoch (torch's ``StatefulDataLoader`` semantics); once the pass ended, the next pass is the
next epoch. :attr:`ProgressLedger.epoch` is the epoch of the current (or next) pass.

Cost. Every call is O(log R) in the number R of skipped ranges (merged once into a
:class:`~resumable_data.loader.skips.SkipIndex` after each change, O(R log R)) except ``locate``
on a packed stream, which may build one epoch's packing index (cached); a restore sets a few
integers.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from resumable_data._schema import check_int
from resumable_data.errors import ConfigError, UsageError, describe
from resumable_data.labels import RecoveryLabel
from resumable_data.loader.seeding.sample_seeding import SEEDING_VERSION, UNRECORDED_SEEDING_VERSION
from resumable_data.loader.skips import SkipIndex
from resumable_data.loader.state import (
    CommitMode,
    Counters,
    CounterView,
    Cursor,
    LoaderState,
    OnUncommitted,
    SkippedRange,
)
from resumable_data.plan import Plan

__all__ = ["CounterView", "EpochStream", "ProgressLedger"]


class EpochStream(Protocol):
    """What the ledger needs of a stream: epoch lengths, where a step sits, and its plan."""

    plan: Plan

    def steps_in_epoch(self, epoch: int) -> int: ...

    def locate(self, step: int, ledger: dict[int, int]) -> tuple[int, int]: ...

    def span(self, step: int) -> tuple[int, int] | None: ...

    def with_plan(self, plan: Plan) -> EpochStream: ...


class ProgressLedger:
    """Cursor, counters, skips, epoch ledger and label of one loader (see the module docs)."""

    #: Epoch -> its first step; the skipped ranges; their merged index (None: rebuilt on the next lookup).
    _ledger: dict[int, int]
    _skipped: list[SkippedRange]
    _skip_index: SkipIndex | None

    def __init__(self, stream: EpochStream, commit: CommitMode, accumulation_steps: int) -> None:
        self._base = stream
        self._stream = stream
        self._mode = commit
        self._k = accumulation_steps
        #: A model's training forward is watched (:meth:`watch`): the batch in hand counts once it ran.
        self._watched = False
        self.restart()

    # -- reading ----------------------------------------------------------------------------------
    @property
    def stream(self) -> EpochStream:
        """The stream the cursor walks (its plan carries the restored batch origin, if any)."""
        return self._stream

    def span(self, step: int) -> tuple[int, int] | None:
        """Global positions of ``step`` (record streams; ``None`` for packed ones)."""
        return self._stream.span(step)

    @property
    def cursor(self) -> Cursor:
        return Cursor(self._committed, self._delivered, max(self._fetched, self._delivered))

    @property
    def delivered(self) -> int:
        return self._delivered

    @property
    def seeding_version(self) -> int:
        """The seeding version every request of this run carries (see the module docs)."""
        return self._seeding

    @property
    def label(self) -> RecoveryLabel:
        return self._label

    @property
    def skipped(self) -> tuple[SkippedRange, ...]:
        return tuple(self._skipped)

    @property
    def end_of_pass(self) -> bool:
        """Whether the current pass delivered its epoch's last batch but has not ended yet."""
        if self._pass_epoch is None:
            return False
        return self.locate(self._skips().first_unskipped(self._delivered))[0] > self._pass_epoch

    @property
    def epoch(self) -> int:
        """The epoch of the current pass, else of the pass the next ``iter()`` starts: the epoch
        that just ended while :attr:`end_of_pass`, else the epoch of the next batch."""
        if self.end_of_pass:
            return self._pass_epoch  # type: ignore[return-value]
        return self.locate(self._skips().first_unskipped(self._delivered))[0]

    def is_skipped(self, step: int) -> bool:
        if not self._skipped:  # the common case, asked twice per batch: nothing skipped
            return False
        return self._skips().covers(step)

    def _skips(self) -> SkipIndex:
        """The skipped ranges merged for O(log R) lookups; every change of ``_skipped`` drops it."""
        if self._skip_index is None:
            self._skip_index = SkipIndex((r.start, r.stop) for r in self._skipped)
        return self._skip_index

    def locate(self, step: int) -> tuple[int, int]:
        """(epoch, first step of that epoch) of ``step``; extends the epoch ledger as it walks."""
        return self._stream.locate(step, self._ledger)

    def epoch_ledger(self) -> dict[int, int]:
        return dict(self._ledger)

    def steps_in_current_epoch(self) -> int:
        return self._stream.steps_in_epoch(self.locate(self._delivered)[0])

    def _microbatches_before(self, step: int) -> int:
        return step - self._skips().skipped_before(step)

    @property
    def microstep(self) -> int:
        """Index, inside the accumulation window, of the last delivered microbatch (0-based)."""
        if self._mode is CommitMode.EXPLICIT:
            return (self._pending_mb - 1) % self._k
        return (self._microbatches_before(self._delivered) - 1) % self._k

    @property
    def microstep_is_last(self) -> bool:
        """Whether the last delivered microbatch closes its accumulation window."""
        if self._mode is CommitMode.EXPLICIT:
            return self._pending_mb >= self._k
        mb = self._microbatches_before(self._delivered)
        return mb > 0 and mb % self._k == 0

    def counters(self) -> CounterView:
        c = self._committed
        return CounterView(
            attempted_updates=self._attempted,
            applied_updates=self._applied,
            skipped_updates=self._skipped_updates,
            microbatches=self._microbatches_before(c),
            samples=self._samples,
            tokens=self._tokens,
            skipped_steps=self._skips().skipped_before(c),
        )

    def snapshot(self, template: LoaderState, *, auto: bool | None = None) -> LoaderState:
        """The typed state: ``template`` (the loader's fingerprint) with this ledger's progress.

        ``auto`` (default: the commit mode is ``auto``) presents delivered batches as committed,
        as ``state_dict()`` would after its auto-commit; nothing here changes."""
        if auto is None:
            auto = self._mode is CommitMode.AUTO
        committed, samples, tokens = self._committed, self._samples, self._tokens
        delivered = self._delivered
        if auto and not self._hand_trained:
            delivered = committed  # the batch in hand never reached a training forward: deliver it again
        elif auto:
            committed = self._delivered
            samples += self._pending_samples
            tokens += self._pending_tokens
        return replace(
            template,
            plan=self._stream.plan,
            epoch_base=self._stream.locate(committed, dict(self._ledger)),
            cursor=Cursor(committed, delivered, max(self._fetched, self._delivered)),
            counters=Counters(self._attempted, self._applied, self._skipped_updates, samples, tokens),
            skipped=tuple(self._skipped),
            recovery_label=self._label,
            end_of_pass=self.end_of_pass and committed == self._delivered and delivered == self._delivered,
            sample_seeding=None
            if template.sample_seeding is None
            else replace(template.sample_seeding, version=self._seeding),
        )

    # -- changing ---------------------------------------------------------------------------------
    def memento(self) -> dict:
        """Everything that changes, copied: :meth:`rewind` to it puts this ledger back exactly."""
        m = dict(self.__dict__)
        m["_ledger"], m["_skipped"] = dict(self._ledger), list(self._skipped)
        return m

    def rewind(self, memento: dict) -> None:
        self.__dict__.update(memento)
        self._ledger, self._skipped = dict(memento["_ledger"]), list(memento["_skipped"])
        self._skip_index = None

    def restart(self) -> None:
        """A fresh start: everything zero, nothing skipped, a faithful continuation."""
        self._stream = self._base
        self._committed = self._delivered = self._fetched = 0
        self._attempted = self._applied = self._skipped_updates = self._tokens = self._samples = 0
        self._pending_tokens = self._pending_samples = self._pending_mb = 0
        self._ledger = {0: 0}
        self._skipped = []
        self._skip_index = None
        self._label = RecoveryLabel.FAITHFUL_CONTINUATION
        self._pass_epoch: int | None = None
        self._resumed_at_end = False  # restored from a state taken at the end of a pass
        self._seeding = SEEDING_VERSION
        self._hand_trained = True  # nothing in hand

    def restore(
        self,
        saved: LoaderState,
        ledger: dict[int, int],
        label: RecoveryLabel,
        choice: OnUncommitted | None,
        plan: Plan | None = None,
    ) -> None:
        """Continue from a validated ``saved`` state (with ``plan``: the validated plan to continue
        with, see :class:`~resumable_data.loader.restore.Restore`); uncommitted steps are repeated
        or skipped."""
        self._stream = self._base if plan is None else self._base.with_plan(plan)
        c = saved.cursor
        skipped = list(saved.skipped)
        committed = c.committed
        if c.delivered > c.committed and choice is OnUncommitted.SKIP:
            skipped.append(SkippedRange(c.committed, c.delivered, "uncommitted at resume (on_uncommitted='skip')"))
            committed = c.delivered
        self._committed = self._delivered = committed
        # what was handed to workers stays as saved until the first pass (a state taken right
        # after a load is the loaded one, as torchdata's StatefulDataLoader keeps it); a rewound
        # window starts from the committed step
        self._fetched = c.fetched if committed == c.delivered else committed
        k = saved.counters
        self._attempted, self._applied, self._skipped_updates = (
            k.attempted_updates,
            k.applied_updates,
            k.skipped_updates,
        )
        self._samples, self._tokens = k.samples, k.tokens
        self._pending_tokens = self._pending_samples = self._pending_mb = 0
        self._ledger = dict(ledger)
        self._skipped = skipped
        self._skip_index = None
        self._label = label
        self._pass_epoch = None
        self._resumed_at_end = False
        self._seeding = UNRECORDED_SEEDING_VERSION if saved.sample_seeding is None else saved.sample_seeding.version
        self._hand_trained = True  # nothing in hand
        if saved.end_of_pass and committed == c.delivered:  # a rewound window is inside the epoch again
            self._pass_epoch = self.locate(self._skips().first_unskipped(committed))[0] - 1
            self._resumed_at_end = True

    def start_pass(self) -> tuple[int, int, int, int]:
        """(epoch, its first step, first step to fetch, end of the epoch) for a new pass; an empty
        window when the current pass is at its end (see the module docs)."""
        start = self._skips().first_unskipped(self._delivered)
        epoch, first = self.locate(start)
        self._fetched = start
        if self.end_of_pass and self._resumed_at_end:
            # restored from a state taken right after an epoch's last batch: the rest of that pass
            # is empty (torch's StatefulDataLoader semantics), the pass after it the next epoch
            self._resumed_at_end = False
            return epoch, first, start, start
        # (a live pass abandoned after its last batch, by a break or a zip, ends here: like torch,
        # a new iter() starts the next epoch)
        self._resumed_at_end = False
        self._pass_epoch = epoch
        return epoch, first, start, first + self._stream.steps_in_epoch(epoch)

    def end_pass(self) -> None:
        """The pass ended (``StopIteration`` reached the loop): the next pass is the next epoch."""
        self._pass_epoch = None

    def on_fetch(self, step: int) -> None:
        self._fetched = step + 1

    def deliver(self, step: int, tokens: int, samples: int) -> None:
        if step < self._delivered:
            raise UsageError(
                f"step={step}: expected a step after the last delivered one ({self._delivered - 1}); this is an "
                "internal ordering error; fix: report it with the loader's state_dict(), and resume from that state"
            )
        self._delivered = step + 1
        self._hand_trained = not self._watched
        self._pending_tokens += tokens
        self._pending_samples += samples
        self._pending_mb += 1

    def watch(self) -> None:
        """From now on, in ``commit="auto"`` mode, the batch in hand (the last delivered) counts as
        consumed in a state only after :meth:`mark_trained` (a training forward ran on it)."""
        self._watched = True

    def mark_trained(self) -> None:
        """The batch in hand went through a training forward."""
        self._hand_trained = True

    def commit_in_hand(self) -> None:
        """``state_dict()``'s auto-commit: every delivered batch, unless the batch in hand is
        watched and untrained (it then stays delivered and is left out of the state)."""
        if self._hand_trained:
            self.commit_delivered()

    def commit_delivered(self) -> None:
        self._committed = self._delivered
        self._hand_trained = True  # nothing in hand
        self._tokens += self._pending_tokens
        self._samples += self._pending_samples
        self._pending_tokens = self._pending_samples = self._pending_mb = 0

    def commit(self, applied: bool) -> None:
        """One attempted update over every delivered batch (``applied=False``: AMP skipped it)."""
        if not isinstance(applied, bool):
            raise ConfigError(
                describe("applied", applied, "True or False", "pass whether the optimizer step was applied")
            )
        if self._delivered == self._committed:
            raise UsageError(
                f"commit(): cursor.delivered={self._delivered} == cursor.committed: expected at least one batch "
                "delivered since the last commit; fix: call commit() once per optimizer step, after its batches"
            )
        self.commit_delivered()
        self._attempted += 1
        if applied:
            self._applied += 1
        else:
            self._skipped_updates += 1

    def skip(self, start: int, stop: int, reason: str) -> None:
        """Never deliver steps ``[start, stop)``; recorded in the state."""
        start = check_int(start, "start", 0)
        stop = check_int(stop, "stop", start + 1)
        if start < self._delivered:
            raise ConfigError(
                describe(
                    "start",
                    start,
                    f"a future step (>= cursor.delivered={self._delivered})",
                    "skip only steps not yet delivered; use load_state_dict(on_uncommitted='skip') for delivered ones",
                )
            )
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigError(describe("reason", reason, "a non-empty explanation", "say why the steps are skipped"))
        self._skipped.append(SkippedRange(start, stop, reason))
        self._skip_index = None
