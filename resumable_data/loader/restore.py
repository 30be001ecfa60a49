"""Validating a saved loader state against the current loader, before anything changes.

Algorithm. Parse the JSON into a typed :class:`~resumable_data.loader.state.LoaderState`
(every field type- and range-checked), bound the cursor so that no position overflows the
permutation domain, compare the saved fingerprint with the current one (dataset version, seed,
order, tail, global batch, accumulation, sampler, packing, pinning, layout under the elastic
policy), require an explicit choice for uncommitted batches, and check that the saved epoch base
holds the committed cursor. All differences are reported together in one
:class:`rd.ResumeError`.

A global-batch change. A different batch (or schedule) is refused unless the caller declares
``on_batch_change="continue"``; then the stream continues at the first step the resume delivers
(``cursor.committed``, or ``cursor.delivered`` under ``on_uncommitted="skip"``), at that step's
first sample under the saved plan: the current plan gets the :class:`~resumable_data.plan.BatchOrigin`
``saved.plan.origin_at(step)``, so no sample before it is delivered again and none after it is
skipped. Skipped ranges after that step name steps of the saved batch, so they are refused.
Without a change the current plan takes the saved origin (a segment a previous change began).

Guarantee. Pure: nothing is changed here, so a refused state leaves the loader exactly as it was;
an accepted one yields everything the ledger needs to continue.

Cost. O(size of the state) plus, for a packed stream, the saved epoch's packing index (cached).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from resumable_data._schema import coerce_enum
from resumable_data.errors import ResumeError, describe
from resumable_data.labels import RecoveryLabel
from resumable_data.loader.state import LoaderState, OnBatchChange, OnUncommitted, compare
from resumable_data.plan import Plan
from resumable_data.plan.permutation import MAX_DOMAIN as MAX_POSITION

__all__ = ["Restore", "validate_restore"]


@dataclass(frozen=True)
class Restore:
    """An accepted state: what the ledger continues from."""

    saved: LoaderState
    epoch_ledger: dict[int, int]
    label: RecoveryLabel
    choice: OnUncommitted | None
    #: The plan the loader continues with: the current plan at the saved (or a new) batch origin.
    plan: Plan


def validate_restore(state: Any, current: LoaderState, stream: Any, *, on_uncommitted: Any = None,
                     allow_unpinned: bool = False, on_batch_change: Any = None) -> Restore:
    """Check ``state`` against the ``current`` fingerprint and ``stream`` (see the module docs)."""
    try:
        json.dumps(state)
    except (TypeError, ValueError, RecursionError) as e:
        raise ResumeError(describe("state", type(state).__name__, f"a JSON-serializable dict ({e})",
                                   "pass state_dict()'s output")) from None
    saved = LoaderState.from_dict(state)
    last = max([saved.cursor.fetched, saved.epoch_base[1]] + [r.stop for r in saved.skipped])
    origin = saved.plan.origin
    if (last + 1) * saved.plan.global_batch + (0 if origin is None else origin.position) > MAX_POSITION:
        raise ResumeError(describe("state.cursor", saved.cursor.to_dict(),
                                   f"steps whose positions (step x global batch {saved.plan.global_batch}) stay "
                                   "below 2**62", "pass an unmodified state"))
    if origin is not None and saved.cursor.committed < origin.step:
        raise ResumeError(describe("state.batch_origin", origin.to_dict(), f"a step <= cursor.committed="
                                   f"{saved.cursor.committed}", "pass an unmodified state"))
    change = OnBatchChange.REFUSE if on_batch_change is None else coerce_enum(on_batch_change, OnBatchChange,
                                                                               "on_batch_change")
    diffs, label = compare(saved, current, allow_unpinned=allow_unpinned, on_batch_change=change)
    choice = None if on_uncommitted is None else coerce_enum(on_uncommitted, OnUncommitted, "on_uncommitted")
    c = saved.cursor
    if c.delivered > c.committed and choice is None:
        diffs.append(
            f"uncommitted batches: steps [{c.committed}, {c.delivered}) were delivered but never committed; "
            "fix: pass on_uncommitted='repeat' (deliver them again) or on_uncommitted='skip' (treat them as consumed "
            "and record the skipped range)"
        )
    changed = saved.plan.batch_dict() != current.plan.batch_dict() and change is OnBatchChange.CONTINUE
    resume = c.delivered if choice is OnUncommitted.SKIP else c.committed
    later = [r for r in saved.skipped if r.stop > resume]
    if changed and later:
        diffs.append(
            f"skipped steps {[[r.start, r.stop] for r in later][:5]} lie after the resume step {resume} and name steps "
            "of the saved batch, which a global batch change renumbers; fix: resume with the saved batch")
    if diffs:
        raise ResumeError("cannot resume this loader from the given state:\n  - " + "\n  - ".join(diffs))
    ledger = _epoch_ledger(saved, stream)
    plan = replace(current.plan, origin=saved.plan.origin_at(resume) if changed else origin)
    return Restore(saved, ledger, label, choice, plan)


def _epoch_ledger(saved: LoaderState, stream: Any) -> dict[int, int]:
    """The epoch ledger implied by the saved ``epoch_base``, checked against the stream."""
    epoch, first = saved.epoch_base
    committed = saved.cursor.committed
    if saved.packing is None:
        plan = saved.plan
        ok = (epoch, first) == (plan.epoch_of_step(committed), plan.epoch_first_step(plan.epoch_of_step(committed)))
    else:
        ok = first <= committed < first + stream.steps_in_epoch(epoch) and (epoch > 0 or first == 0)
    if not ok:
        raise ResumeError(describe("state.epoch_base", [epoch, first],
                                   f"the epoch and first step that hold cursor.committed={committed}",
                                   "pass an unmodified state"))
    return {0: 0, epoch: first}
