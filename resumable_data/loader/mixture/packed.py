"""Per-source progress of a packed ``rd.Mixture`` loader: documents and tokens at a packed cursor.

Algorithm. Loader epoch ``e`` holds the mixed positions ``[e*n, (e+1)*n)`` (``n``: the plan's
``num_records``), packed window by window (:mod:`resumable_data.plan.packing`); the epoch's
packing index holds the cumulative sequence count of its windows. In-epoch sequence ``j`` lies
in window ``w`` (the last whose cumulative count is ``<= j``). The windows before ``w`` hold whole
documents, so each source's documents before them are the mixture plan's closed-form counts at
position ``e*n + w*window`` and their tokens the closed-form token prefix of those counts (plus one
EOS each when the spec has one, :mod:`resumable_data.plan.mixture.tokens`); the first
``m = j - cumulative[w]`` sequences of window ``w`` add what they hold of its documents (concat: a
prefix of the window's token stream; best_fit: the pieces in bins ``< m``), from lengths only.
That is :func:`prefix`, a pure function of (plan, ``e``, ``j``).

Documents. A source's ``consumed`` count is its stream position at the cursor: every document of
the earlier epochs (a ``drop`` tail's dropped documents are passed, as a skipped step's records
are; a ``wrap`` tail's re-delivered ones are not counted twice) plus, in the cursor's epoch, the
documents whose first token lies in a sequence before the cursor (concat: a prefix of each
source's documents; best_fit: bins are not in document order, so a count of the window's
documents begun). ``next_step``: per source, the documents with tokens in the next global step's
sequences (a document split across sequences once).

Tokens. The input tokens (non-padding, EOS included) each source delivered before the cursor:
on the ``partial`` tail every sequence of an epoch is delivered once, so they are
``prefix(cursor)``. On ``drop`` an epoch's last ``count mod G`` sequences are never delivered and
on ``wrap`` its first ``S*G - count`` are delivered twice: a correction per earlier epoch (minus
the dropped tail's tokens, plus the wrapped head's), from that epoch's index, computed once as the
loader passes the epoch (memoized). A restore takes the sum of the corrections before the saved
epoch from the saved counts (saved tokens minus the prefix at the saved cursor; on ``partial``
it must be 0, on ``drop`` <= 0, on ``wrap`` >= 0 per source, else a ``ResumeError``), so it needs
no earlier epoch's index (whose documents may even lie before a ``data_change`` rebase). A state
written without the counts on a ``drop``/``wrap`` tail gets them computed from the stream's first
epoch when the plan starts there, else (a rebased run: its early epochs were packed under the old
weights) its loader writes no counts, as such states had none.

Cost. A query is one epoch index (cached) and O(window) over the cursor's window, plus on a
``drop``/``wrap`` tail one index per epoch passed since the restore (cold, from a state without
counts: one per earlier epoch).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from resumable_data.errors import ConfigError, ResumeError, describe
from resumable_data.loader.mixture.progress import MixtureProgress
from resumable_data.loader.state import LoaderState
from resumable_data.plan import Tail
from resumable_data.plan.mixture.plan import SourceProgress
from resumable_data.plan.mixture.section import MAX_EARLIER, MixtureSection, PackedRebase, Rebase
from resumable_data.plan.packing import PackMode, best_fit_bins

__all__ = [
    "MAX_SCHEDULE_EPOCHS",
    "PackedPrefix",
    "PackedSourceCount",
    "change_position",
    "check_schedule_reach",
    "packed_change",
    "packed_progress",
    "prefix",
    "resolve_schedule",
    "step_documents",
    "window_boundary",
    "without_ended_runs",
]


@dataclass(frozen=True)
class PackedPrefix:
    """Per source, documents begun and input tokens in the sequences ``[0, j)`` of an epoch,
    counted from the stream's first position (earlier epochs whole), and the mixed position of
    the cursor window's first document plus the window's documents begun."""

    documents: np.ndarray
    tokens: np.ndarray
    position: int


def _window_part(stream: Any, epoch: int, w: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(documents, begun, tokens held) of the first ``m`` sequences of window ``w``."""
    spec = stream.spec
    docs = stream.window_docs(epoch, w)
    lengths = spec.doc_lengths(stream.lengths[docs])
    if spec.mode is PackMode.CONCAT:  # sequences [0, m) hold the window's stream tokens [0, m * seq_len)
        starts = np.cumsum(lengths) - lengths
        held = np.clip(m * spec.seq_len - starts, 0, lengths)
        begun = (starts < m * spec.seq_len) & (lengths > 0)
    else:
        doc, start, length, bins = best_fit_bins(lengths, spec)
        inside = bins < m
        held = np.bincount(doc[inside], weights=length[inside], minlength=len(docs)).astype(np.int64)
        begun = np.zeros(len(docs), dtype=bool)
        begun[doc[inside & (start == 0)]] = True
        begun &= lengths > 0
    return docs, begun, held


def prefix(stream: Any, plan: Any, tokens: Any, offsets: np.ndarray, epoch: int, j: int) -> PackedPrefix:
    """The :class:`PackedPrefix` of epoch ``epoch``'s sequences ``[0, j)`` (``0 <= j <= count``);
    ``plan``: the packed mixture's sampler (:class:`~resumable_data.sources.mixture.PackedMixtureSampler`,
    whose counts follow the run in force at each position)."""
    spec, n = stream.spec, stream.plan.num_records
    cumulative = stream.index(epoch).cumulative
    w = int(np.searchsorted(cumulative, j, side="right")) - 1
    at = epoch * n + min(w * spec.window, n)
    counts = np.asarray(plan.counts_before(at), dtype=np.int64)
    toks = tokens.before(counts) + (0 if spec.eos_id is None else counts)
    docs = counts.copy()
    m = j - int(cumulative[w])
    begun_here = 0
    if m:
        ids, begun, held = _window_part(stream, epoch, w, m)
        source = np.searchsorted(offsets, ids, side="right") - 1
        toks = toks + np.bincount(source, weights=held, minlength=len(toks)).astype(np.int64)
        docs = docs + np.bincount(source[begun], minlength=len(docs)).astype(np.int64)
        begun_here = int(begun.sum())
    return PackedPrefix(docs, toks, at + begun_here)


def step_documents(stream: Any, offsets: np.ndarray, epoch: int, sequences: np.ndarray) -> np.ndarray:
    """Per source, the documents with tokens in an epoch's ``sequences`` (each document once)."""
    from resumable_data.loader.packed import window_segments  # packed.py imports the stream's types

    out = np.zeros(len(offsets) - 1, dtype=np.int64)
    for _, docs, _, (_, seg_docs, _, lens, cols) in window_segments(stream, epoch, sequences):
        held = np.unique(seg_docs[(lens > 0) & (cols < stream.spec.seq_len)])  # a concat row's last column: a label
        out += np.bincount(np.searchsorted(offsets, docs[held], side="right") - 1, minlength=len(out))
    return out


class PackedSourceCount:
    """The per-source counts of one packed mixture loader: the tail corrections of the epochs it
    passed (memoized per epoch and rebase) and the seed a restore took from a saved state."""

    def __init__(self, tokens: Any, offsets: np.ndarray) -> None:
        self.tokens = tokens  # the loader's SourceTokens over its packed document lengths
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self._memo: dict[tuple[Any, int], np.ndarray] = {}
        #: (rebase, epoch, sum of the corrections before that epoch), or None: from the first epoch.
        self.seed: tuple[Any, int, np.ndarray] | None = None

    def _correction(self, stream: Any, plan: Any, epoch: int) -> np.ndarray:
        """Tokens per source that the delivered sequences of ``epoch`` differ from its documents by."""
        key = (plan.plan.rebase, epoch)
        hit = self._memo.get(key)
        if hit is None:
            tail, g = stream.plan.tail, stream.plan.global_batch
            count = stream.index(epoch).num_sequences
            delivered = stream.steps_in_epoch(epoch) * g
            if tail is Tail.DROP and delivered < count:
                hit = (
                    prefix(stream, plan, self.tokens, self.offsets, epoch, delivered).tokens
                    - prefix(stream, plan, self.tokens, self.offsets, epoch, count).tokens
                )
            elif tail is Tail.WRAP and delivered > count:
                hit = self._wrapped(stream, plan, epoch, delivered - count)
            else:
                hit = np.zeros(len(self.offsets) - 1, dtype=np.int64)
            self._memo[key] = hit
        return hit

    def _wrapped(self, stream: Any, plan: Any, epoch: int, extra: int) -> np.ndarray:
        return (
            prefix(stream, plan, self.tokens, self.offsets, epoch, extra).tokens
            - prefix(stream, plan, self.tokens, self.offsets, epoch, 0).tokens
        )

    def _before(self, stream: Any, plan: Any, epoch: int) -> np.ndarray | None:
        """Sum of the corrections of the epochs before ``epoch`` (None: not known, see the module)."""
        zero = np.zeros(len(self.offsets) - 1, dtype=np.int64)
        if stream.plan.tail is Tail.PARTIAL:
            return zero
        if self.seed is not None and self.seed[0] == plan.plan.rebase and self.seed[1] <= epoch:
            start, total = self.seed[1], self.seed[2].copy()
        elif plan.first_position == 0:
            start, total = 0, zero
        else:
            return None
        for e in range(start, epoch):
            total += self._correction(stream, plan, e)
        return total

    def at(self, state: LoaderState, stream: Any, plan: Any) -> tuple[PackedPrefix, np.ndarray | None]:
        """The prefix at ``state``'s committed cursor and each source's tokens delivered before it."""
        epoch, first = state.epoch_base
        count = stream.index(epoch).num_sequences
        j = (state.cursor.committed - first) * stream.plan.global_batch
        here = prefix(stream, plan, self.tokens, self.offsets, epoch, min(j, count))
        before = self._before(stream, plan, epoch)
        if before is None:
            return here, None
        tokens = here.tokens + before
        if j > count and stream.plan.tail is Tail.WRAP:  # after the epoch's last step: its wrapped head
            tokens = tokens + self._wrapped(stream, plan, epoch, j - count)
        return here, tokens

    def with_tokens(self, state: LoaderState, stream: Any, plan: Any) -> LoaderState:
        """``state`` with its mixture section at schema 2 holding each source's tokens delivered
        before the committed cursor (unchanged when they are not known)."""
        _, tokens = self.at(state, stream, plan)
        if tokens is None:
            return state
        section = replace(state.mixture_section(), tokens=tuple(int(x) for x in tokens))
        return replace(state, mixture=section)

    def seed_from(self, saved: LoaderState, stream: Any, plan: Any) -> tuple[Any, int, np.ndarray] | None:
        """The seed a restore of ``saved`` takes (``stream`` and ``plan``: the current loader's,
        rebased as the restore will be); checked, nothing changed. None: the state has no counts."""
        section = saved.mixture_section()
        if section.tokens is None:
            return None
        epoch, first = saved.epoch_base
        count = stream.index(epoch).num_sequences
        j = (saved.cursor.committed - first) * stream.plan.global_batch
        tail = stream.plan.tail
        here = prefix(stream, plan, self.tokens, self.offsets, epoch, min(j, count)).tokens
        if j > count and tail is Tail.WRAP:  # after the epoch's last step: its wrapped head
            here = here + self._wrapped(stream, plan, epoch, j - count)
        corr = np.asarray(section.tokens, dtype=np.int64) - here
        ok = {Tail.PARTIAL: (corr == 0).all(), Tail.DROP: (corr <= 0).all(), Tail.WRAP: (corr >= 0).all()}[tail]
        if not ok:
            expected = {Tail.PARTIAL: "equal to", Tail.DROP: "at most", Tail.WRAP: "at least"}[tail]
            raise ResumeError(
                describe(
                    "state.mixture.tokens",
                    dict(zip(section.names, section.tokens)),
                    f"per source {expected} the tokens of the packed sequences before the committed "
                    f"step on the {tail.value} tail ({[int(x) for x in here]})",
                    "pass an unmodified state",
                )
            )
        return (plan.plan.rebase, epoch, corr)


def packed_progress(
    state: LoaderState, stream: Any, plan: Any, count: PackedSourceCount, ledger: dict[int, int]
) -> MixtureProgress:
    """Per-source progress of a packed mixture loader at ``state``'s committed cursor."""
    here, tokens = count.at(state, stream, plan)
    step = state.cursor.committed
    epoch, first = stream.locate(step, dict(ledger))
    start, stop, n_seq = stream.epoch_positions(epoch, step - first)
    nxt = step_documents(stream, count.offsets, epoch, np.arange(start, stop, dtype=np.int64) % n_seq)
    names, sizes = plan.plan.names, plan.plan.sizes
    sources = tuple(
        SourceProgress(name, int(c), int(c) // size, int(c) % size, size)
        for name, c, size in zip(names, here.documents, sizes)
    )
    return MixtureProgress(
        step,
        here.position,
        sources,
        {n: int(x) for n, x in zip(names, nxt)},
        None if tokens is None else {n: int(t) for n, t in zip(names, tokens)},
    )


def change_position(saved: LoaderState, stream: Any, step: int) -> tuple[int, int]:
    """(loader epoch, mixed position) where a weight change declared at ``step`` of ``saved``
    takes effect: the first packing-window boundary at or after the step's first sequence, in the
    saved stream (``stream``: ordered as the saved state's mixture section says)."""
    return window_boundary(stream, step, {saved.epoch_base[0]: saved.epoch_base[1]})


def window_boundary(stream: Any, step: int, ledger: dict[int, int]) -> tuple[int, int]:
    """(loader epoch, mixed position) of the first packing-window boundary at or after the first
    sequence of ``step`` (located from ``ledger``, epoch -> first step, in ``stream``'s indexes)."""
    epoch, first = stream.locate(step, dict(ledger))
    cumulative = stream.index(epoch).cumulative
    j = min((step - first) * stream.plan.global_batch, int(cumulative[-1]))
    w = int(np.searchsorted(cumulative, j, side="right")) - 1
    boundary = w if j == int(cumulative[w]) else w + 1
    n = stream.plan.num_records
    return epoch, epoch * n + min(boundary * stream.spec.window, n)


def packed_change(
    saved: LoaderState, stream: Any, step: int, change: bool, section: MixtureSection | None = None
) -> Rebase | None:
    """The rebase a packed mixture continues from after a restore of ``saved`` at ``step``: with
    ``change`` (other weights, ``data_change``) a new one at :func:`change_position` (the sequences
    of the window holding the cursor stay the old plan's; each source continues from its count
    there; the runs holding the earlier documents of the saved epoch and of the change's epoch are
    kept; ``ResumeError`` when they would be more than ``MAX_EARLIER``, before anything changes),
    else the saved one, which must lie at or before the window boundary of the committed cursor
    (``ResumeError``). ``section``: ``saved``'s mixture section as :func:`~.state.check_section`
    checked it (else ``saved.mixture``)."""
    from resumable_data.sources.mixture import change_rebase

    order = stream.order.saved(saved.mixture_section() if section is None else section)
    order.check_runs()
    old = stream.with_order(order)
    rebase = order.plan.rebase
    if rebase is not None:
        _, limit = change_position(saved, old, saved.cursor.committed)
        if rebase.position > limit:
            raise ResumeError(
                describe(
                    "state.mixture.rebase",
                    rebase.to_list(),
                    f"a position <= {limit}, the first packing-window boundary at or after the committed cursor",
                    "pass an unmodified state",
                )
            )
    if not change:
        return rebase
    epoch, position = change_position(saved, old, step)
    # the runs holding the saved epoch's documents are kept: a skipped step may lie in a later epoch
    # than the committed cursor, whose epoch the restored loader still locates steps in
    new = change_rebase(order, min(saved.epoch_base[0], epoch) * stream.plan.num_records, position)
    runs = len(new.earlier) if isinstance(new, PackedRebase) else 0
    if runs > MAX_EARLIER:
        raise ResumeError(
            describe(
                "label",
                "data_change",
                f"a weight change that leaves at most {MAX_EARLIER} earlier "
                f"runs in the loader epoch (this one would leave {runs}: the weights changed in "
                f"{runs} packing windows of epoch {saved.epoch_base[0]})",
                "resume with the saved weights (no label) and declare the change from the next loader epoch on",
            )
        )
    return new


def without_ended_runs(state: LoaderState) -> LoaderState:
    """``state`` without the ``earlier`` runs that end at or before the first position of its
    ``epoch_base``'s epoch (a restore needs only the runs that hold that epoch's documents); schema
    3 only while some remain (then 2 with per-source tokens, else 1)."""
    section = state.mixture
    rebase = None if section is None else section.rebase
    if section is None or not isinstance(rebase, PackedRebase):
        return state
    start = state.epoch_base[0] * state.plan.num_records
    runs = rebase.earlier
    ends = [r.position for r in runs[1:]] + [rebase.position]
    kept = tuple(r for r, end in zip(runs, ends) if end > start)
    if len(kept) == len(runs):
        return state
    return replace(state, mixture=replace(section, rebase=PackedRebase(rebase.position, rebase.counts, kept)))


#: A packed schedule's segments are placed by walking one packing index per loader epoch up to each
#: (:func:`resolve_schedule`): a segment must start within this many loader epochs.
MAX_SCHEDULE_EPOCHS = 4096


def _out_of_reach(step: int, why: str) -> ConfigError:
    return ConfigError(
        describe(
            "weights",
            f"a segment from step {step} with packing",
            f"segments within the first {MAX_SCHEDULE_EPOCHS} loader epochs ({why}; placing a packed "
            "schedule builds one packing index per epoch up to its last segment)",
            "drop the schedule entries that start that late, or change the weights when the run gets there: "
            "load_state_dict(state, label='data_change') into a loader with the new weights",
        )
    )


def check_schedule_reach(pending: Any, stream: Any) -> None:
    """Refuse at once a segment that cannot start within ``MAX_SCHEDULE_EPOCHS`` loader epochs: a
    packed sequence holds at least one token, so an epoch of ``n`` documents has at most ``n *
    (longest + 1)`` sequences, hence steps (O(1) after the lengths' maximum; the walk itself is bounded
    too)."""
    if not pending:
        return
    n, g = stream.plan.num_records, stream.plan.global_batch
    longest = int(stream.lengths.max(initial=0)) + 1  # an EOS each at most
    most = -(-n * longest // g) + 1  # steps of an epoch, at most (a tail's short step included)
    step = pending[-1][0]
    if step >= MAX_SCHEDULE_EPOCHS * most:
        raise _out_of_reach(step, f"an epoch here has at most {most} steps")


def resolve_schedule(order: Any, stream: Any) -> None:
    """Place a declared weight schedule's segments on a packed mixture stream, in order: segment
    ``k`` (from step ``s_k``) starts at :func:`window_boundary` of ``s_k`` in the stream of the runs
    before it, each source continuing from its count there. A pure function of the plan; costs one
    packing index per epoch up to the last segment's (cached on disk): a run placed in epoch ``e``
    leaves the epochs before ``e`` and ``e``'s first step as they were, so the next segment is
    located from there. A segment past ``MAX_SCHEDULE_EPOCHS`` loader epochs is a ``ConfigError``
    (at once when no epoch could hold its step: :func:`check_schedule_reach`), never an endless walk."""
    import copy

    check_schedule_reach(order.pending, stream)
    ledger = {0: 0}
    while order.pending:
        step, weights = order.pending[0]
        probe = stream.with_order(copy.copy(order))  # a fresh index memo for the runs placed so far
        ((epoch, first),) = ledger.items()
        while step >= first + (n := probe.steps_in_epoch(epoch)):  # the walk of probe.locate, bounded
            first, epoch = first + n, epoch + 1
            if epoch >= MAX_SCHEDULE_EPOCHS:
                raise _out_of_reach(step, f"it lies past them (epoch {epoch} starts at step {first})")
        _, position = window_boundary(probe, step, {epoch: first})
        order.add_run(position, weights)
        ledger = {epoch: first}
