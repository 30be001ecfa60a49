"""Validating a saved loader state against the current loader, before anything changes.

Algorithm. Check that the state is plain JSON data (:func:`~resumable_data._schema.check_json`:
one walk, exact types, no NaN), parse it into a typed :class:`~resumable_data.loader.state.LoaderState`
(every field type- and range-checked), bound the cursor so that no position overflows the
permutation domain, compare the saved fingerprint with the current one (dataset version, seed,
order, tail, global batch, accumulation, sampler, packing, pinning, layout under the elastic
policy), require an explicit choice for uncommitted batches, and check that the saved epoch base
holds the committed cursor (a packed epoch base's epoch is bounded first: at most its first
step, its documents below 2**62). All differences are reported together in one
:class:`rd.ResumeError`. :func:`compare` is the contract: every difference that forbids the resume
(saved vs current, with the fix) and the recovery label.

A global-batch change. A different batch (or schedule) is refused unless the caller declares
``on_batch_change="continue"``; then the stream continues at the first step the resume delivers
(``cursor.committed``, or ``cursor.delivered`` under ``on_uncommitted="skip"``), at that step's
first sample under the saved plan: the current plan gets the :class:`~resumable_data.plan.BatchOrigin`
``saved.plan.origin_at(step)``, so no sample before it is delivered again and none after it is
skipped. Skipped ranges after that step name steps of the saved batch, so they are refused.
Without a change the current plan takes the saved origin (a segment a previous change began).

A dataset change. Under ``label="data_change"`` a single source (no ``rd.Mixture``) whose
dataset version or record count changed is *rebased*: the saved version and count are not
compared. Unpacked, the current plan continues at the :class:`~resumable_data.plan.BatchOrigin`
``rebase_origin(saved.plan, step, current.plan)`` (:mod:`resumable_data.plan.rebase`: the same
step, epoch and fraction of the epoch) for the first step the resume delivers. Packed (the same
packing spec on both sides), the epoch ledger continues from ``rebase_packed(saved.epoch_base,
step, ...)`` (the same step, epoch and in-epoch step of the new version's packing, or the next
epoch when the new version's epoch is shorter); a changed packing spec with it is a
:class:`rd.ConfigError` naming ``packing`` (no rule maps one packing onto another). Skipped
ranges after that step name the saved version's steps, so they are refused, as under a batch
change. Without the label the change is refused (``dataset_version``, ``num_records``).

Seeding. A saved ``seed_per_sample`` mode other than the loader's is refused (the globals would be
seeded otherwise than the run was) unless the caller declares ``label="data_change"``; the run
keeps the saved seeding version either way (:mod:`.sample_seeding`). A state without a seeding
record (schema 1-3) continues with version 1 under the loader's mode.

Guarantee. Pure: nothing is changed here, so a refused state leaves the loader exactly as it was;
an accepted one yields everything the ledger needs to continue.

Cost. O(size of the state) plus, for a packed stream, the saved epoch's packing index (cached).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from resumable_data._schema import check_json, coerce_enum
from resumable_data.errors import ConfigError, ResumeError, describe
from resumable_data.labels import RecoveryLabel
from resumable_data.loader.order import OrderCheck, StreamOrder
from resumable_data.loader.skips import SkipIndex
from resumable_data.loader.state import LoaderState, OnBatchChange, OnUncommitted
from resumable_data.plan import BatchOrigin, Plan, Tail
from resumable_data.plan.permutation import MAX_DOMAIN as MAX_POSITION
from resumable_data.plan.rebase import rebase_origin, rebase_packed
from resumable_data.plan.sharding import world_sizes_text

__all__ = ["Restore", "compare", "dataset_changed", "rounded_epoch_fix", "tail_fix", "validate_restore"]


@dataclass(frozen=True)
class Restore:
    """An accepted state: what the ledger continues from."""

    saved: LoaderState
    epoch_ledger: dict[int, int]
    label: RecoveryLabel
    choice: OnUncommitted | None
    #: The plan the loader continues with: the current plan at the saved (or a new) batch origin.
    plan: Plan
    #: The order's check of the saved state: the point it continues from (an ``rd.Mixture``'s rebase:
    #: the saved one, or a data_change's), and the saved section as validated and the saved counting
    #: plan when the check built one (what later restore steps use instead of parsing again).
    check: OrderCheck = OrderCheck([])


def validate_restore(
    state: Any,
    current: LoaderState,
    stream: Any,
    order: StreamOrder,
    *,
    on_uncommitted: Any = None,
    allow_unpinned: bool = False,
    label: Any = None,
    on_batch_change: Any = None,
) -> Restore:
    """Check ``state`` against the ``current`` fingerprint, ``stream`` and ``order`` (see the module docs)."""
    check_json(state, "state")  # pure JSON before any field is read: nothing that would need unpickling
    saved = LoaderState.from_dict(state)
    last = max([saved.cursor.fetched, saved.epoch_base[1]] + [r.stop for r in saved.skipped])
    origin = saved.plan.origin
    if (last + 1) * saved.plan.global_batch + (0 if origin is None else origin.position) > MAX_POSITION:
        raise ResumeError(
            describe(
                "state.cursor",
                saved.cursor.to_dict(),
                f"steps whose positions (step x global batch {saved.plan.global_batch}) stay below 2**62",
                "pass an unmodified state",
            )
        )
    epoch, first = saved.epoch_base
    if saved.packing is not None and (epoch > first or (epoch + 1) * saved.plan.num_records > MAX_POSITION):
        raise ResumeError(
            describe(
                "state.epoch_base[0]",
                epoch,
                f"a packed epoch <= its first step {first} (each "
                f"epoch holds a step) whose documents (epoch x {saved.plan.num_records} records) "
                "stay below 2**62",
                "pass an unmodified state",
            )
        )
    declared = None if label is None else coerce_enum(label, RecoveryLabel, "label")
    if declared not in (None, RecoveryLabel.FAITHFUL_CONTINUATION, RecoveryLabel.DATA_CHANGE):
        raise ConfigError(
            describe(
                "label",
                declared.value,
                "'faithful_continuation' or 'data_change' for a loader",
                "declare other labels on rd.TrainingState.load_state_dict",
            )
        )
    if origin is not None and saved.cursor.committed < origin.step:
        raise ResumeError(
            describe(
                "state.batch_origin",
                origin.to_dict(),
                f"a step <= cursor.committed={saved.cursor.committed}",
                "pass an unmodified state",
            )
        )
    change = (
        OnBatchChange.REFUSE
        if on_batch_change is None
        else coerce_enum(on_batch_change, OnBatchChange, "on_batch_change")
    )
    rebased = declared is RecoveryLabel.DATA_CHANGE and dataset_changed(saved, current)
    if declared is RecoveryLabel.DATA_CHANGE:
        _refuse_packing_change(saved, current)
    diffs, label = compare(
        saved, current, allow_unpinned=allow_unpinned, on_batch_change=change, dataset_change=rebased
    )
    choice = None if on_uncommitted is None else coerce_enum(on_uncommitted, OnUncommitted, "on_uncommitted")
    check = order.check_restore(saved, current, declared or RecoveryLabel.FAITHFUL_CONTINUATION, choice, stream)
    diffs += check.diffs
    if declared is RecoveryLabel.DATA_CHANGE:
        label = RecoveryLabel.DATA_CHANGE
    else:
        diffs += _seeding_mode_change(saved, current)
    c = saved.cursor
    if c.delivered > c.committed and choice is None:
        diffs.append(
            f"uncommitted batches: steps [{c.committed}, {c.delivered}) were delivered but never committed; "
            "fix: pass on_uncommitted='repeat' (deliver them again) or on_uncommitted='skip' (treat them as consumed "
            "and record the skipped range) to loader.load_state_dict(state, ...); torch.distributed.checkpoint's "
            "dcp.load passes no options, so there put rd.distributed.LoaderStateful(loader, on_uncommitted='repeat') "
            "in the state dict in place of the loader"
        )
    changed = saved.plan.batch_dict() != current.plan.batch_dict() and change is OnBatchChange.CONTINUE
    resume = c.delivered if choice is OnUncommitted.SKIP else c.committed
    later = [r for r in saved.skipped if r.stop > resume]
    if changed and later:
        diffs.append(
            f"skipped steps {[[r.start, r.stop] for r in later][:5]} lie after the resume step {resume} and name steps "
            "of the saved batch, which a global batch change renumbers; fix: resume with the saved batch"
        )
    elif rebased and later:
        diffs.append(
            f"skipped steps {[[r.start, r.stop] for r in later][:5]} lie after the resume step {resume} and name steps "
            "of the saved dataset version, which a data_change rebases; fix: resume with the saved dataset version, "
            "or from a checkpoint committed past those steps"
        )
    if diffs:
        raise ResumeError("cannot resume this loader from the given state:\n  - " + "\n  - ".join(diffs))
    stream = order.restore_stream(stream, check.point)  # a packed mixture: indexes of the order it continues from
    if rebased and saved.packing is not None:  # the saved epochs' step counts were the old version's
        ledger = _rebased_ledger(saved, stream, resume)
    else:
        ledger = _epoch_ledger(saved, stream)
    new_origin: BatchOrigin | None
    if rebased and saved.packing is None:
        new_origin = rebase_origin(saved.plan, resume, current.plan)
    else:
        new_origin = saved.plan.origin_at(resume) if changed else origin
    plan = current.plan if new_origin is None else replace(current.plan, origin=new_origin)
    _check_end_of_pass(saved, stream, ledger)
    return Restore(saved, ledger, label, choice, plan, check)


def _check_end_of_pass(saved: LoaderState, stream: Any, ledger: dict[int, int]) -> None:
    """``end_of_pass`` (honoured when nothing is uncommitted) marks a state taken right after an
    epoch's last batch: the committed step starts its epoch (not the first), or every step from it to
    the epoch's end is skipped. Elsewhere it would make ``loader.epoch`` the epoch before the cursor's
    and the next pass empty."""
    c = saved.cursor
    if not saved.end_of_pass or c.committed != c.delivered:
        return
    epoch, first = max(ledger.items())
    if (epoch > 0 and c.committed == first) or SkipIndex((r.start, r.stop) for r in saved.skipped).first_unskipped(
        c.committed
    ) >= first + stream.steps_in_epoch(epoch):
        return
    raise ResumeError(
        describe(
            "state.end_of_pass",
            True,
            f"false at cursor.committed={c.committed}, inside epoch {epoch} (steps from {first}): true only "
            "right after an epoch's last batch",
            "pass an unmodified state",
        )
    )


def _refuse_packing_change(saved: LoaderState, current: LoaderState) -> None:
    """A declared ``data_change`` of a single source whose dataset and packing spec both changed:
    refused (``rd.ConfigError``), since no rule maps one packing of an epoch onto another."""
    single = saved.mixture is None and current.mixture is None
    sp, cp = saved.plan, current.plan
    changed = sp.version_hash != cp.version_hash or sp.num_records != cp.num_records
    if not (single and changed and _spec(saved.packing) != _spec(current.packing)):
        return
    want = "None" if saved.packing is None else f"rd.Packing(**{saved.packing.to_dict()!r})"
    raise ConfigError(
        describe(
            "packing",
            _spec(current.packing),
            f"the saved packing spec {_spec(saved.packing)} under label='data_change' (the dataset changed too, "
            "and no rule maps one packing of an epoch onto another)",
            f"build the loader with packing={want} to continue the stream over the new dataset version; or "
            "start the new packing's stream at step 0 with label='warm_start' (it keeps the weights)",
        )
    )


def _rebased_ledger(saved: LoaderState, stream: Any, step: int) -> dict[int, int]:
    """The epoch ledger a packed single source continues from over a new dataset version
    (:func:`~resumable_data.plan.rebase.rebase_packed`), after checking the saved epoch base's
    own shape (its step counts were the saved version's, which cannot be rebuilt)."""
    epoch, first = saved.epoch_base
    if first > saved.cursor.committed or (epoch == 0 and first != 0):
        raise ResumeError(
            describe(
                "state.epoch_base",
                [epoch, first],
                f"the epoch and first step that hold cursor.committed={saved.cursor.committed}",
                "pass an unmodified state",
            )
        )
    rebased = rebase_packed((epoch, first), step, stream.steps_in_epoch(epoch), stream.plan.num_records)
    return {0: 0, rebased[0]: rebased[1]}


def _seeding_mode_change(saved: LoaderState, current: LoaderState) -> list[str]:
    """The refusal of a saved ``seed_per_sample`` mode other than the current one (none when equal
    or when the state records no mode)."""
    a, b = saved.sample_seeding, current.sample_seeding
    if a is None or b is None or a.mode is b.mode:
        return []
    return [
        f"seed_per_sample: saved {a.mode.value!r} vs current {b.mode.value!r} (the global generators would be "
        f"seeded otherwise than the run was); fix: build the loader with seed_per_sample="
        f"rd.SampleSeeding.{a.mode.name}, or load with label='data_change' to continue deliberately under "
        f"{b.mode.value!r}"
    ]


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
        raise ResumeError(
            describe(
                "state.epoch_base",
                [epoch, first],
                f"the epoch and first step that hold cursor.committed={committed}",
                "pass an unmodified state",
            )
        )
    return {0: 0, epoch: first}


def dataset_changed(saved: LoaderState, current: LoaderState) -> bool:
    """Whether a single source's dataset changed (version or record count) where a ``data_change``
    can rebase the stream onto it: neither loader is an ``rd.Mixture`` (its sources continue per
    source) and both have the same packing spec (or none)."""
    sp, cp = saved.plan, current.plan
    return _rebasable(saved, current) and (sp.version_hash != cp.version_hash or sp.num_records != cp.num_records)


def _rebasable(saved: LoaderState, current: LoaderState) -> bool:
    """Single sources on both sides, the same packing spec (or none): what a ``data_change``
    rebases onto a new version."""
    single = saved.mixture is None and current.mixture is None
    return single and _spec(saved.packing) == _spec(current.packing)


def compare(
    saved: LoaderState,
    current: LoaderState,
    *,
    allow_unpinned: bool,
    on_batch_change: OnBatchChange = OnBatchChange.REFUSE,
    dataset_change: bool = False,
) -> tuple[list[str], RecoveryLabel]:
    """Every difference that forbids the resume (saved vs current, with the fix), and the label.

    A different global batch (or schedule) is refused unless ``on_batch_change`` is
    ``continue``; then it is allowed where the stream can continue at the committed sample (a
    tail whose epoch length does not depend on the batch, no packing) and labelled
    ``elastic_reshard``, like a change of layout. ``dataset_change=True`` (a declared
    ``data_change`` the caller rebases, see :func:`dataset_changed`) leaves the dataset version
    and record count uncompared."""
    diffs: list[str] = []
    sp, cp = saved.plan, current.plan

    def differ(name: str, a: Any, b: Any, fix: str) -> None:
        if a != b:
            diffs.append(f"{name}: saved {a!r} vs current {b!r}; fix: {fix}")

    where = "fraction of" if saved.packing is None else "in-epoch step of the packing of"
    declare = (
        f", or declare the change with label='data_change' (the stream continues at the same epoch and {where} "
        "the new version's epoch)"
        if _rebasable(saved, current)
        else ""
    )
    if not dataset_change:
        differ(
            "dataset_version",
            sp.version_hash,
            cp.version_hash,
            (
                "build the rd.Mixture over the sources (each an rd.ArrowShards of its pinned directory) the run was "
                "trained on"
                if saved.mixture is not None or current.mixture is not None
                else "open the dataset version the run was trained on (rd.ArrowShards on the pinned directory)"
            )
            + declare,
        )
    batch_changed = sp.batch_dict() != cp.batch_dict()
    rounded = batch_changed and sp.num_records != cp.num_records and _same_mixture_sizes(saved, current)
    if rounded:  # the epoch length follows the batch: on_batch_change='continue' cannot continue it
        diffs.append(_rounded_epoch_text(sp, cp))
    elif not dataset_change:
        differ(
            "num_records",
            sp.num_records,
            cp.num_records,
            (
                "build the rd.Mixture as saved (the same sources and epoch_len)"
                if saved.mixture is not None or current.mixture is not None
                else "open the dataset version the run was trained on (rd.ArrowShards on the pinned directory)"
            )
            + declare,
        )
    differ("seed", sp.seed, cp.seed, "pass seed= as saved")
    differ("order", sp.order.to_dict(), cp.order.to_dict(), "pass the same shuffle / shuffle_window / window_blocks")
    # a declared data_change reads another version: its units may differ; and a loader whose
    # window_blocks differ (reported under order, with its fix) has a unit layout on one side only
    blocks_differ = sp.order.to_dict() != cp.order.to_dict() and None in (sp.unit_layout, cp.unit_layout)
    if not dataset_change and not blocks_differ:
        differ(
            "unit_layout",
            sp.unit_layout,
            cp.unit_layout,
            "read the records in the units the run was trained on (the same files; for a dataset of your own, "
            "the same unit_starts()): the window over read units permutes those units",
        )
    differ("tail", sp.tail.value, cp.tail.value, tail_fix(sp.tail.value, current.layout.world_size))
    differ("pad_to", sp.pad_to, cp.pad_to, "resume a DistributedSampler(drop_last=False) run on the same world size")
    declared = on_batch_change is OnBatchChange.CONTINUE
    alternative = (
        ""
        if rounded
        else (
            "; or, to continue at the committed sample with the current batch (no sample "
            "lost or repeated), load with on_batch_change='continue'"
        )
    )
    if batch_changed and declared:
        diffs.extend(_batch_change_problems(saved, current))
    elif batch_changed and (sp.schedule is not None or cp.schedule is not None):
        diffs.append(
            f"batch schedule: saved {_batch_text(sp)} vs current {_batch_text(cp)} (global, batch_size x "
            f"world_size {current.layout.world_size}); fix: pass the saved schedule as batch_size= (per rank)"
            + alternative
        )
    elif batch_changed:
        w, g = current.layout.world_size, sp.global_batch
        here = (
            f"at world_size {w} pass batch_size={g // w}, or"
            if g % w == 0
            else f"no integer batch_size does at world_size {w} ({g} / {w} = {g / w:.4g}):"
        )
        diffs.append(
            f"global batch size: saved {g} vs current {cp.global_batch} "
            f"(batch_size {cp.global_batch // w} x world_size {w}); fix: keep batch_size * world_size == "
            f"{g}: {here} run on one of the world sizes that divide {g}: {world_sizes_text(g)}, "
            f"with batch_size = {g} / world_size" + alternative
        )
    differ(
        "accumulation_steps", saved.accumulation_steps, current.accumulation_steps, "pass the same accumulation_steps"
    )
    mixed = saved.mixture is not None or current.mixture is not None  # an rd.Mixture is the loader's sampler
    differ(
        "sampler",
        saved.sampler,
        current.sampler,
        "build the rd.Mixture as saved (its sources, block_size, shuffle and epoch_len)"
        if mixed
        else "pass the same positional sampler",
    )
    differ("packing", _spec(saved.packing), _spec(current.packing), "pass the same packing spec")
    if not (saved.pinned and current.pinned) and not allow_unpinned:
        diffs.append(
            f"pinned: the {'saved run' if not saved.pinned else 'current loader'}'s dataset is not pinned "
            f"(saved pinned={saved.pinned}, current pinned={current.pinned}), so its version cannot be verified; "
            "fix: build both loaders over a pinned version: an rd.ArrowShards of a folder rd.pin pinned, or, for "
            "any other dataset, dataset_version='<a string naming this data's version>' (a hash of its files, a "
            "release tag) on the saving and the resuming loader; or load with allow_unpinned=True"
        )
    layout_changed = saved.layout != current.layout
    if layout_changed and not (saved.elastic and current.elastic):
        diffs.append(
            f"layout: saved {saved.layout.to_dict()} vs current {current.layout.to_dict()} under a "
            "non-elastic policy; fix: resume on the saved layout, or construct both loaders with elastic=True"
        )
    label = RecoveryLabel.ELASTIC_RESHARD if layout_changed or batch_changed else RecoveryLabel.FAITHFUL_CONTINUATION
    return diffs, label


def tail_fix(saved_tail: str, world_size: int) -> str:
    """The fix of a tail difference: the saved tail, unless it is ``partial`` (refused on several
    ranks), which only a single rank can continue."""
    if saved_tail == Tail.PARTIAL.value and world_size > 1:
        return (
            f"the run's tail='partial' (the default on one rank without drop_last) cannot run on world_size "
            f"{world_size} (a short last batch would leave ranks idle): resume this state on world_size 1; a run "
            "meant to change its world size starts with tail='wrap' or drop_last=True"
        )
    return f"pass tail={saved_tail!r} (or the drop_last and sampler settings the run was started with)"


def _spec(packing: Any) -> dict[str, Any] | None:
    """A packing spec as the state writes it (how a difference is shown)."""
    return None if packing is None else packing.to_dict()


def _same_mixture_sizes(saved: LoaderState, current: LoaderState) -> bool:
    """Both are ``rd.Mixture`` loaders over sources of the same sizes."""
    return saved.mixture is not None and current.mixture is not None and saved.mixture.sizes == current.mixture.sizes


def _rounded_epoch_text(sp: Plan, cp: Plan) -> str:
    """An ``rd.Mixture`` whose epoch length was rounded to the global batch, across a batch change."""
    return (
        f"mixture epoch length: saved {sp.num_records} vs current {cp.num_records} records an epoch; fix: "
        + rounded_epoch_fix(sp.num_records, sp.global_batch, cp.global_batch)
    )


def rounded_epoch_fix(saved_records: int, saved_batch: int, current_batch: int) -> str:
    """The fix for an ``rd.Mixture`` epoch rounded to the global batch across a batch change (the
    loader's and the checkpoint's refusal name it alike)."""
    step = math.lcm(saved_batch, current_batch)
    example = max(step, -(-saved_records // step) * step)
    return (
        f"the rd.Mixture rounds its epoch to the global batch ({saved_batch} vs {current_batch}), so the new batch "
        "plays another stream and on_batch_change='continue' cannot continue it: resume with the saved batch; a "
        "run whose batch will change must start with an explicit rd.Mixture(..., epoch_len=L), L a multiple of "
        f"every global batch it will use (for {saved_batch} and {current_batch}: a multiple of {step}, e.g. "
        f"{example})"
    )


def _batch_text(plan: Plan) -> str:
    return f"{plan.global_batch}" if plan.schedule is None else f"{plan.schedule.to_dict()}"


def _batch_change_problems(saved: LoaderState, current: LoaderState) -> list[str]:
    """Why a declared batch change cannot continue this stream (empty when it can)."""
    problems = []
    tail = saved.plan.tail
    if tail in (Tail.DROP, Tail.WRAP):
        problems.append(
            f"global batch change (on_batch_change='continue'): saved {_batch_text(saved.plan)} vs current "
            f"{_batch_text(current.plan)} under tail={tail.value!r}, whose epochs are shaped by the batch (a changed "
            "batch would drop or repeat other records); fix: resume with the saved batch, or start runs whose batch "
            "will change with tail='continuous' (or 'partial' on one process)"
        )
    if saved.packing is not None:
        problems.append(
            "global batch change (on_batch_change='continue') of a packed stream: packed epochs are cut "
            "into batches by their packing index; fix: resume with the saved batch"
        )
    return problems
