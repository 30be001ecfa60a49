"""Validating a saved loader state against the current loader, before anything changes.

Algorithm. Parse the JSON into a typed :class:`~resumable_data.loader.state.LoaderState`
(every field type- and range-checked), bound the cursor so that no position overflows the
permutation domain, compare the saved fingerprint with the current one (dataset version, seed,
order, tail, global batch, accumulation, sampler, packing, pinning, layout under the elastic
policy), require an explicit choice for uncommitted batches, and check that the saved epoch base
holds the committed cursor. All differences are reported together in one
:class:`rd.ResumeError`.

Guarantee. Pure: nothing is changed here, so a refused state leaves the loader exactly as it was;
an accepted one yields everything the ledger needs to continue.

Cost. O(size of the state) plus, for a packed stream, the saved epoch's packing index (cached).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from resumable_data._schema import coerce_enum
from resumable_data.errors import ConfigError, ResumeError, describe
from resumable_data.labels import RecoveryLabel
from resumable_data.loader.mixture_state import check_mixture
from resumable_data.loader.state import LoaderState, OnUncommitted, compare
from resumable_data.plan.permutation import MAX_DOMAIN as MAX_POSITION

__all__ = ["Restore", "validate_restore"]


@dataclass(frozen=True)
class Restore:
    """An accepted state: what the ledger continues from."""

    saved: LoaderState
    epoch_ledger: dict[int, int]
    label: RecoveryLabel
    choice: OnUncommitted | None
    #: An ``rd.Mixture`` loader continues from this rebase (the saved one, or a data_change's).
    mixture_rebase: Any = None


def validate_restore(state: Any, current: LoaderState, stream: Any, *, on_uncommitted: Any = None,
                     allow_unpinned: bool = False, label: Any = None) -> Restore:
    """Check ``state`` against the ``current`` fingerprint and ``stream`` (see the module docs)."""
    try:
        json.dumps(state)
    except (TypeError, ValueError, RecursionError) as e:
        raise ResumeError(describe("state", type(state).__name__, f"a JSON-serializable dict ({e})",
                                   "pass state_dict()'s output")) from None
    saved = LoaderState.from_dict(state)
    last = max([saved.cursor.fetched, saved.epoch_base[1]] + [r.stop for r in saved.skipped])
    if (last + 1) * saved.plan.global_batch > MAX_POSITION:
        raise ResumeError(describe("state.cursor", saved.cursor.to_dict(),
                                   f"steps whose positions (step x global batch {saved.plan.global_batch}) stay "
                                   "below 2**62", "pass an unmodified state"))
    declared = None if label is None else coerce_enum(label, RecoveryLabel, "label")
    if declared not in (None, RecoveryLabel.FAITHFUL_CONTINUATION, RecoveryLabel.DATA_CHANGE):
        raise ConfigError(describe("label", declared.value, "'faithful_continuation' or 'data_change' for a loader",
                                   "declare other labels on rd.TrainingState.load_state_dict"))
    diffs, label = compare(saved, current, allow_unpinned=allow_unpinned)
    choice = None if on_uncommitted is None else coerce_enum(on_uncommitted, OnUncommitted, "on_uncommitted")
    mixture_diffs, rebase = check_mixture(saved, current, declared or RecoveryLabel.FAITHFUL_CONTINUATION, choice)
    diffs += mixture_diffs
    if declared is RecoveryLabel.DATA_CHANGE:
        label = RecoveryLabel.DATA_CHANGE
    c = saved.cursor
    if c.delivered > c.committed and choice is None:
        diffs.append(
            f"uncommitted batches: steps [{c.committed}, {c.delivered}) were delivered but never committed; "
            "fix: pass on_uncommitted='repeat' (deliver them again) or on_uncommitted='skip' (treat them as consumed "
            "and record the skipped range) to loader.load_state_dict(state, ...); torch.distributed.checkpoint's "
            "dcp.load passes no options, so there put rd.distributed.LoaderStateful(loader, on_uncommitted='repeat') "
            "in the state dict in place of the loader"
        )
    if diffs:
        raise ResumeError("cannot resume this loader from the given state:\n  - " + "\n  - ".join(diffs))
    return Restore(saved, _epoch_ledger(saved, stream), label, choice, rebase)


def _epoch_ledger(saved: LoaderState, stream: Any) -> dict[int, int]:
    """The epoch ledger implied by the saved ``epoch_base``, checked against the stream."""
    epoch, first = saved.epoch_base
    committed = saved.cursor.committed
    if saved.packing is None:
        ok = (epoch, first) == stream.locate(committed, {0: 0})
    else:
        ok = first <= committed < first + stream.steps_in_epoch(epoch) and (epoch > 0 or first == 0)
    if not ok:
        raise ResumeError(describe("state.epoch_base", [epoch, first],
                                   f"the epoch and first step that hold cursor.committed={committed}",
                                   "pass an unmodified state"))
    return {0: 0, epoch: first}
