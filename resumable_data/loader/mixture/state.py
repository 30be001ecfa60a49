"""The ``mixture`` section of a loader state: resume checks, ``data_change`` rebases, progress.

Algorithm. An ``rd.Mixture`` loader's state carries, beside the cursor, the mixture's names,
source sizes, declared weight schedule, block size, shuffle flag and its latest *rebase*
(``[position, [records consumed per source]]``, or null). With them and the plan's seed, version
hash and global batch, :func:`saved_plan` rebuilds the pure counting plan of the saved stream, so
each source's consumed count, epoch and position at the cursor follow in O(S log + B), without
the sources and without replay.

Resume rules (:func:`check_mixture`). The saved section is validated when the state is loaded,
every key before any is compared (``LoaderState.mixture``, a typed
:class:`~resumable_data.plan.mixture.section.MixtureSection`), then against the state
(:func:`check_section`: ``earlier`` only in a packed constant-weights state, no rebase in a
packed schedule's). Sources, sizes, block and shuffle must match. Different
weights are refused under the default (a faithful continuation) with both schedules named; with
``label="data_change"`` they are accepted and the new loader continues every source from its
consumed count at the resume position (a new rebase), so no record of any source is repeated or
skipped within its epoch. A packed mixture accepts the change at any step: it takes effect at the
first packing-window boundary at or after the step (:func:`~.packed.packed_change`; the
window holding the cursor is finished under the old weights), and the runs that hold the epoch's
documents before the boundary are kept in the section (``earlier``, schema 3); a packed weight
*schedule* is not changed by a ``data_change`` (refused: its segments are placed from its first
step). A faithful resume adopts the saved rebase (the state says where the stream was rebased),
which is what makes chained changes resume exactly. A saved rebase must be
consistent (counts in ``[0, 2**62]`` summing to its position, at or before the cursor's
position, or for a packed state a window start within its ``epoch_base``'s epoch, at or before the
window boundary of the committed cursor); a weight schedule
across a global-batch change (a batch origin) is refused, since its steps would map to other
positions (constant weights need no step map: segment 0 starts at 0).

Tokens per source. A loader that counts tokens (``token_column=``) writes, at mixture schema 2,
``tokens``: each source's non-padding tokens in the records it consumed before the committed
cursor (:func:`with_source_tokens`), a pure function of the position through the per-source
consumed counts (:mod:`resumable_data.plan.mixture.tokens`), with ``token_column`` (the column
counted) and, when not 0, ``tokens_base`` (tokens ``counters.tokens`` does not hold: a schema-1
state resumed by a counting loader). Progress, not identity (not in a checkpoint's fingerprint),
but checked on a resume by :func:`check_saved_tokens` before anything changes: the same column,
counts within their source epochs and within int64, and without skipped steps a sum equal to
``counters.tokens + tokens_base``; a restore then takes them as the counter's starting point
instead of a cold prefix sum, and ``inspect`` shows them from the state alone.

Cost. O(S) integers in the state; a check or a progress query is one counting call (tokens: the
records between the last query and this one, per source).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from resumable_data.errors import ConfigError, ResumeError, describe
from resumable_data.labels import RecoveryLabel
from resumable_data.loader.mixture.packed import packed_change
from resumable_data.loader.mixture.progress import MixtureProgress
from resumable_data.loader.state import LoaderState, OnUncommitted
from resumable_data.plan.mixture.plan import MixturePlan, StepPositions
from resumable_data.plan.mixture.section import K_BLOCK, K_NAMES, K_SHUFFLE, K_SIZES, MixtureSection, Rebase
from resumable_data.plan.mixture.tokens import SourceTokens

__all__ = [
    "MixtureCheck",
    "MixtureProgress",
    "TokenStart",
    "check_mixture",
    "check_saved_tokens",
    "check_section",
    "mixture_progress",
    "saved_plan",
    "saved_tokens",
    "with_source_tokens",
]

_FIXED = (K_NAMES, K_SIZES, K_BLOCK, K_SHUFFLE)


def saved_plan(state: LoaderState, section: MixtureSection | None = None) -> MixturePlan:
    """The counting plan of a saved mixture state (raises ``ResumeError`` on a malformed section,
    a rebase past the state's cursor, or a weight schedule after a global-batch change).
    ``section``: the state's section as :func:`check_section` returned it (a restore validates it
    once and passes it on), else it is validated here."""
    if section is None:
        section = check_section(state)
    pos = None if state.packing is not None else _positions_of_steps(state.plan)
    plan = MixturePlan.from_section(
        section, seed=state.plan.seed, version_hash=state.plan.version_hash, position_of_step=pos
    )
    if plan.rebase is not None:
        packed = state.packing is not None  # a packed epoch e holds the documents at positions [e*n, (e+1)*n)
        n = state.plan.num_records
        resume = (state.epoch_base[0] + 1) * n if packed else state.plan.step_start(state.cursor.committed)
        window = state.packing.window if state.packing is not None else None
        aligned = not (packed and isinstance(window, int) and window > 0 and (plan.rebase.position % n) % window)
        if plan.rebase.position > resume or not aligned:  # packed: checked exactly against the index on a restore
            where = (
                f"a packing-window start (a multiple of window={window} from an epoch's first document, a multiple "
                f"of {n}) within the epoch of epoch_base={list(state.epoch_base)}"
                if packed
                else f"the position of cursor.committed={state.cursor.committed}"
            )
            raise ResumeError(
                describe(
                    "state.mixture.rebase",
                    plan.rebase.to_list(),
                    f"a position <= {resume}, {where}",
                    "pass an unmodified state",
                )
            )
    return plan


def check_section(state: LoaderState) -> MixtureSection:
    """``state``'s mixture section (validated on load, :meth:`MixtureSection.from_dict`), or
    ``ResumeError`` unless the state is a mixture's and the section holds only what its loader
    writes: ``earlier`` runs only with packing and constant weights, no rebase with a packed weight
    schedule (its runs follow from the plan)."""
    section = state.mixture_section()
    if section.earlier and (state.packing is None or len(section.schedule) > 1):
        kind = "an unpacked mixture" if state.packing is None else "a packed weight schedule"
        raise ResumeError(
            describe(
                "state.mixture.earlier",
                [r.to_list() for r in section.earlier],
                f"absent in a state of {kind} "
                "(earlier runs are written only by a packed mixture with constant weights changed "
                "inside an epoch)",
                "pass an unmodified state",
            )
        )
    if state.packing is not None and len(section.schedule) > 1 and section.rebase is not None:
        raise ResumeError(
            describe(
                "state.mixture.rebase",
                section.rebase.to_list(),
                "null in a state of a packed weight schedule (its runs follow from the plan)",
                "pass an unmodified state",
            )
        )
    return section


def _positions_of_steps(plan: Any) -> Any:
    """Step -> mixed position: ``step * global_batch`` for a fixed batch (the common, picklable
    case), else the plan's own map (a batch schedule). After a global-batch change (an origin) a
    weight schedule is refused: its earlier steps have no position in the current plan."""
    if plan.origin is not None:
        return _no_steps_after_a_batch_change
    if plan.schedule is None:
        return StepPositions(plan.global_batch)
    return plan.step_start


def _no_steps_after_a_batch_change(step: int) -> int:
    raise ResumeError(_SCHEDULE_AND_BATCH_CHANGE)


_SCHEDULE_AND_BATCH_CHANGE = (
    "mixture weight schedule with a global batch change: its steps would map to other positions; fix: resume with "
    "the saved batch, or declare the weights as a mapping and change them by a data_change resume"
)


@dataclass(frozen=True)
class MixtureCheck:
    """What :func:`check_mixture` found: the differences that forbid the resume, the rebase the
    current loader continues from, the saved section as validated (None: not a mixture state)
    and the saved counting plan when the check built one (a restore passes both on, so the section
    is validated once and the plan built once)."""

    diffs: list[str]
    rebase: Rebase | None = None
    section: MixtureSection | None = None
    plan: MixturePlan | None = None


def check_mixture(
    saved: LoaderState, current: LoaderState, label: RecoveryLabel, choice: OnUncommitted | None, stream: Any = None
) -> MixtureCheck:
    """The differences that forbid the resume and the rebase the current loader continues from
    (:class:`MixtureCheck`); ``stream``: a packed loader's (it locates the change in the saved
    epoch's index), None for an unpacked one. The saved section is validated once, before any key is read."""
    if saved.mixture is None and current.mixture is None:
        return MixtureCheck([])
    if saved.mixture is None or current.mixture is None:
        side = "saved run" if saved.mixture is None else "current loader"
        return MixtureCheck(
            [
                f"mixture: the {side} is not an rd.Mixture loader; fix: resume a mixture's state into a "
                "loader over the same rd.Mixture"
            ]
        )
    section = check_section(saved)  # every saved key checked before any is read
    diffs, rebase, plan = _check_mixture(saved, current, label, choice, stream, section, current.mixture)
    return MixtureCheck(diffs, rebase, section, plan)


def _check_mixture(
    saved: LoaderState,
    current: LoaderState,
    label: RecoveryLabel,
    choice: OnUncommitted | None,
    stream: Any,
    section: MixtureSection,
    current_section: MixtureSection,
) -> tuple[list[str], Rebase | None, MixturePlan | None]:
    s, c = section, current_section
    batch_changed = saved.plan.batch_dict() != current.plan.batch_dict()
    if (batch_changed or saved.plan.origin is not None) and len(c.schedule) > 1:
        return [_SCHEDULE_AND_BATCH_CHANGE], None, None
    if s == c and s.rebase is None:  # the current loader's own section, field for field: nothing to check
        return [], None, None
    if saved.packing is not None and (len(s.schedule) > 1 or len(c.schedule) > 1):
        same = _fixed(s) == _fixed(c) and s.schedule == c.schedule and s.rebase is None
        if same:  # a packed weight schedule: its runs follow from the plan, nothing saved to adopt
            return [], None, None
        return (
            [
                f"mixture weights with packing and a weight schedule: saved {_shown(s)} vs current {_shown(c)}; a "
                "packed schedule's segments are placed at packing-window boundaries from its first step, so it is "
                "not changed by a data_change; fix: resume with the saved schedule (or, with constant weights, "
                "declare the change by load_state_dict(state, label='data_change'))"
            ],
            None,
            None,
        )
    plan = saved_plan(saved, section)  # the section validated by check_mixture, not again
    if batch_changed and len(s.schedule) > 1:
        return [_SCHEDULE_AND_BATCH_CHANGE], None, plan
    saved_fixed, current_fixed = _fixed(s), _fixed(c)
    diffs = [
        f"mixture {k}: saved {saved_fixed[k]!r} vs current {current_fixed[k]!r}; fix: build the rd.Mixture with "
        f"the saved {k}"
        for k in _FIXED
        if saved_fixed[k] != current_fixed[k]
    ]
    if diffs:
        return diffs, None, plan
    packed = saved.packing is not None and stream is not None  # the stream is given to a packed loader's check only
    if s.schedule == c.schedule:
        if packed and plan.rebase is not None and not batch_changed:  # a batch change: refused (or continued) there
            return [], packed_change(saved, stream, saved.cursor.committed, change=False, section=section), plan
        return [], plan.rebase, plan
    if label is not RecoveryLabel.DATA_CHANGE:
        return (
            [
                f"mixture weights: saved {_shown(s)} vs current {_shown(c)}; fix: build the rd.Mixture with the saved "
                "weights, or declare the change: load_state_dict(state, label='data_change') (each source continues "
                "from its consumed position)"
            ],
            None,
            plan,
        )
    step = saved.cursor.delivered if choice is OnUncommitted.SKIP else saved.cursor.committed
    if packed:
        return [], packed_change(saved, stream, step, change=True, section=section), plan
    position = saved.plan.step_start(step)
    return [], Rebase(position, tuple(int(x) for x in plan.counts_before(position))), plan


def _fixed(section: MixtureSection) -> dict[str, Any]:
    """The keys a resume never changes, as the state writes them (how a difference is shown)."""
    return {
        K_NAMES: list(section.names),
        K_SIZES: list(section.sizes),
        K_BLOCK: section.block,
        K_SHUFFLE: section.shuffle,
    }


def _shown(section: MixtureSection) -> str:
    names = section.names
    return "; ".join(
        f"from step {step}: " + ", ".join(f"{n}={_number(w)}" for n, w in zip(names, ws))
        for step, ws in section.schedule
    )


def _number(w: Any) -> str:
    return f"{w:g}" if isinstance(w, float) else str(w)


def with_source_tokens(
    state: LoaderState, plan: MixturePlan, tokens: SourceTokens, column: str, base: int = 0
) -> LoaderState:
    """``state`` with its mixture section at schema 2, holding each source's tokens consumed
    before the committed cursor (unpacked mixture loaders that count tokens), the column counted
    and, when not 0, the tokens among them that ``counters.tokens`` does not hold."""
    counts = plan.counts_before(state.plan.step_start(state.cursor.committed))
    section = state.mixture_section()
    section = replace(
        section,
        tokens=tuple(tokens.before(counts).tolist()),
        token_column=column,
        tokens_base=base if base else section.tokens_base,
    )
    return replace(state, mixture=section)


@dataclass(frozen=True)
class TokenStart:
    """Where a restored loader's per-source token counter starts: each source's records consumed
    and tokens at the saved committed cursor (None: packed, nothing to seed) and the tokens among
    them that ``counters.tokens`` does not hold."""

    counts: list[int] | None
    tokens: list[int] | None
    base: int


def check_saved_tokens(
    saved: LoaderState,
    counter: SourceTokens,
    plan: MixturePlan,
    *,
    column: str | None,
    packed_epoch_end: int | None = None,
) -> TokenStart:
    """Check a saved state's per-source tokens against the current loader before anything changes
    (``ResumeError`` naming the field): the counted column must be the current ``token_column``; every
    source's tokens must fit 2**62 through its current epoch; each count must lie within the source
    epoch its consumed count is in; and without skipped steps they sum to ``counters.tokens`` (plus
    the saved ``tokens_base``). A state without the counts (schema 1) gets them computed (a cold
    prefix) and the difference to its ``counters.tokens`` becomes the base. ``plan``: the saved plan
    (unpacked: counts at the committed cursor) or the rebased current plan (packed, with
    ``packed_epoch_end``, the mixed position the epoch ends at: only the range and the sum apply)."""
    section = saved.mixture_section()
    names = section.names
    at = saved.plan.step_start(saved.cursor.committed) if packed_epoch_end is None else packed_epoch_end
    counts = [int(x) for x in plan.counts_before(at)]
    try:
        counter.check_range(counts)
    except ConfigError as e:
        raise ResumeError(
            describe(
                "state.cursor",
                saved.cursor.to_dict(),
                f"a position whose per-source token counts fit int64 ({e})",
                "pass an unmodified state",
            )
        ) from None
    saved_column = section.token_column
    if section.tokens is not None and saved_column is not None and saved_column != column:
        raise ResumeError(
            describe(
                "state.mixture.token_column",
                saved_column,
                f"the current loader's token_column={column!r} (its counts and counters.tokens are of that column)",
                f"build the loader with token_column={saved_column!r}, as saved",
            )
        )
    base = section.tokens_base or 0
    if section.tokens is not None:
        tokens = [int(t) for t in section.tokens]
        if packed_epoch_end is None:
            try:
                counter.check(counts, tokens)
            except ConfigError as e:
                raise ResumeError(f"state.mixture.tokens is inconsistent with the sources: {e}") from None
    elif packed_epoch_end is None:
        tokens = [int(t) for t in counter.before(counts)]
        base = sum(tokens) - saved.counters.tokens
        if base < 0:
            raise ResumeError(
                describe(
                    "state.counters.tokens",
                    saved.counters.tokens,
                    f"at most {sum(tokens)}, the tokens of column {column!r} in the records consumed",
                    "build the loader with the token_column the run counted (or without token_column=)",
                )
            )
        return TokenStart(counts, tokens, base)
    else:
        return TokenStart(None, None, 0)
    if not saved.skipped and sum(tokens) != saved.counters.tokens + base:
        raise ResumeError(
            describe(
                "state.mixture.tokens",
                dict(zip(names, tokens)),
                f"per-source counts summing to counters.tokens={saved.counters.tokens}"
                + (f" + tokens_base={base}" if base else "")
                + f" (they sum to {sum(tokens)}; "
                "the state has no skipped steps)",
                "pass an unmodified state",
            )
        )
    return TokenStart(
        None if packed_epoch_end is not None else counts, None if packed_epoch_end is not None else tokens, base
    )


def saved_tokens(state: LoaderState) -> dict[str, int] | None:
    """The per-source tokens a state holds (at its committed cursor), else None."""
    m = state.mixture
    if m is None or m.tokens is None:
        return None
    return dict(zip(m.names, m.tokens))


def mixture_progress(
    state: LoaderState, plan: MixturePlan | None = None, step: int | None = None, tokens: SourceTokens | None = None
) -> MixtureProgress:
    """Each source's progress before ``step`` (default: ``state``'s committed cursor; unpacked
    mixture loaders). Tokens per source come from ``tokens`` (the loader's length index), else
    from the state when ``step`` is its committed cursor, else are None."""
    if state.packing is not None:
        raise ResumeError(
            "mixture progress of a packed state: positions are packed sequences, whose documents "
            "follow from the packing index (built from the documents' lengths), not the state alone; "
            "fix: load the state into a loader over the same rd.Mixture and packing and call "
            "loader.mixture_progress()"
        )
    plan = plan or saved_plan(state)
    step = state.cursor.committed if step is None else step
    p, stop = state.plan.step_span(step)
    here = plan.counts_before(p)
    after = plan.counts_before(stop)
    per_source: dict[str, int] | None
    if tokens is not None:
        per_source = dict(zip(plan.names, tokens.before(here).tolist()))
    else:
        per_source = saved_tokens(state) if step == state.cursor.committed else None
    return MixtureProgress(
        step, p, tuple(plan.progress(p)), {n: int(x) for n, x in zip(plan.names, np.asarray(after - here))}, per_source
    )
