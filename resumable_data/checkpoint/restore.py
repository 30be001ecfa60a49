"""The restore path of :class:`rd.TrainingState`: all or nothing.

Algorithm, in three phases:

1. **Validate** (nothing is touched): :func:`.restore_check.validate` type-checks every part the
   label restores against the live objects, runs the optimizer's and scheduler's own code on
   scratch copies, sets the generator states on scratch generators, validates the loader's and
   the metric log's states, and recomputes the checkpoint's oracles from the saved tree (its
   module docs list every check).
2. **Snapshot** what the restore can change (:func:`.undo.snapshot`): parameters and buffers
   (copies), gradients and module modes (references), optimizer state and groups (the original
   dict objects), scheduler, scaler and callback ``state_dict()`` (deep copies), every global
   generator, the loader (its undo point) and the TrainingState's own lineage fields.
3. **Apply** in the order the old restore used (weights, optimizer side, gradients, loader,
   generators last), then verify the live oracles. If anything raises, every object is rolled
   back from the snapshot (:func:`.undo.rollback`) and the error is re-raised (a non-``rd``
   exception is wrapped in :class:`CheckpointError`). The metric log is applied after
   verification: its truncation (which moves records past the checkpoint to
   ``<log>.discarded``) is the one file side effect and the last step, and its inputs were
   validated in phase 1.

Guarantee: a refused or failing load leaves model, optimizer, scheduler, scaler, EMA, callbacks,
generators (Python, NumPy, torch CPU and CUDA), loader, metric log and lineage as they were, and
raises only :class:`~resumable_data.ResumableDataError` subclasses. Not covered: an active
iterator of the loader is closed by the loader's ``reset`` (a restore is meant for fresh objects).

The contract with :class:`rd.TrainingState`: the restore reads the live objects through their
public attributes (``model``, ``optimizer``, ``loader``, ...) and everything else through one
:class:`TrainingHooks` that ``TrainingState.load_state_dict`` hands over (the parameter names
optimizer state is keyed by, the oracles of a tree and of the live objects, the accumulation
window's start snapshot); neither it nor :mod:`.restore_check` / :mod:`.undo` reads a private
attribute of the state. Internal: not part of the ``rd`` API.

Cost: the validation's (:mod:`.restore_check`: scratch optimizer steps, the oracle digests of the
saved tree), one copy of the parameters, buffers (and EMA) for the snapshot, and the live oracles
after the apply (each restored tensor hashed once).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from resumable_data.checkpoint import rng as rng_mod
from resumable_data.checkpoint.compat import CompatibilityReport
from resumable_data.checkpoint.edited import EDITED_FIX
from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.checkpoint.keys import (
    K_ACCUMULATION,
    K_CALLBACKS,
    K_EMA,
    K_GRADIENTS,
    K_LOADER,
    K_METRICS,
    K_MODEL,
    K_MODES,
    K_OPTIMIZER,
    K_ORACLES,
    K_RNG,
    K_SCALER,
    K_SCHEDULER,
)
from resumable_data.checkpoint.meta import new_id
from resumable_data.checkpoint.optim import load_dense_optimizer_state, load_optimizer_state
from resumable_data.checkpoint.restore_check import CHECKS, validate
from resumable_data.checkpoint.undo import rollback, snapshot
from resumable_data.errors import ResumableDataError, describe

__all__ = ["TrainingHooks", "restore"]


@dataclass(frozen=True)
class TrainingHooks:
    """What the restore needs of a :class:`rd.TrainingState` beyond its public attributes, handed
    over explicitly by ``TrainingState.load_state_dict`` (internal; see the module docs)."""

    #: ``id(parameter)`` -> FQN (:func:`.optim.param_fqns`): the names the optimizer state is keyed by
    names: dict[int, str]
    #: the oracles of a state tree (the saved one: was it edited after the save?)
    tree_oracles: Callable[[dict[str, Any]], dict[str, str]]
    #: ``live_oracles(dcp)``: the oracles of the live objects, without the optimizer's placeholder step
    live_oracles: Callable[[bool], dict[str, str]]
    #: an undo (for the rollback) that puts the accumulation window's start snapshot back as it is now
    keep_window: Callable[[], Callable[[], None]]
    #: after the apply phase: a new window starts at an update boundary; mid-window, the old start is dropped
    window_restored: Callable[[], None]


def restore(
    ts: Any,
    hooks: TrainingHooks,
    state: Mapping[str, Any],
    label: Any,
    verify: bool,
    saved_meta: Any,
    report: CompatibilityReport,
    *,
    restores: frozenset[str],
    continues: bool,
    dcp: dict | None,
    loader_options: Mapping[str, Any],
) -> Any:
    """Validate, snapshot, apply (module docs); returns ``report``."""
    facts = validate(
        ts,
        state,
        restores,
        names=hooks.names,
        tree_oracles=hooks.tree_oracles,
        dcp=dcp is not None,
        loader_options=loader_options,
        saved_meta=saved_meta,
    )
    if report.warnings:
        warnings.warn(
            f"resuming with {len(report.warnings)} allowed difference(s) from the checkpoint "
            f"(label={label.value!r}):\n  - " + "\n  - ".join(str(d) for d in report.warnings),
            RuntimeWarning,
            stacklevel=5,
        )
    undo = snapshot(ts, hooks.keep_window)
    try:
        _apply(
            ts,
            hooks,
            state,
            label,
            verify,
            saved_meta,
            report,
            restores=restores,
            continues=continues,
            dcp=dcp,
            uncommitted=facts.uncommitted,
            loader_options=loader_options,
            fresh_data=facts.fresh_data,
        )
    except BaseException as e:
        rollback(undo)
        if isinstance(e, ResumableDataError) or not isinstance(e, Exception):
            raise
        raise CheckpointError(
            describe(
                "checkpoint",
                f"restore failed ({type(e).__name__}: {e})",
                "a state every object accepts (nothing was changed: all objects rolled back)",
                EDITED_FIX,
            )
        ) from e
    return report


def _apply(
    ts: Any,
    hooks: TrainingHooks,
    state: Mapping[str, Any],
    label: Any,
    verify: bool,
    saved_meta: Any,
    report: CompatibilityReport,
    *,
    restores: frozenset[str],
    continues: bool,
    dcp: dict | None,
    uncommitted: int,
    loader_options: Mapping[str, Any],
    fresh_data: str | None = None,
) -> None:
    acc = state[K_ACCUMULATION]

    def want(key: str, obj: Any) -> bool:
        return key in restores and obj is not None and state[key] is not None

    # 1. weights and optimizer side
    if want(K_MODEL, ts.model):
        ts.model.load_state_dict(state[K_MODEL], strict=True)
    if want(K_OPTIMIZER, ts.optimizer):
        if dcp is not None:
            load_dense_optimizer_state(ts.model, ts.optimizer, state[K_OPTIMIZER])
        else:
            load_optimizer_state(ts.optimizer, hooks.names, state[K_OPTIMIZER])
    if want(K_SCHEDULER, ts.scheduler):
        ts.scheduler.load_state_dict(state[K_SCHEDULER])
    if want(K_SCALER, ts.scaler):
        ts.scaler.load_state_dict(state[K_SCALER])
    if want(K_EMA, ts.ema):
        ts.ema.load_state_dict(state[K_EMA])
    if K_CALLBACKS in restores:
        for name, cb in ts.callbacks.items():
            if name in state[K_CALLBACKS]:
                cb.load_state_dict(state[K_CALLBACKS][name])
    if K_MODES in restores:
        for key, obj in ((K_MODEL, ts.model), (K_EMA, ts.ema)):
            if isinstance(obj, torch.nn.Module) and key in state[K_MODES]:
                for n, m in obj.named_modules():
                    if n in state[K_MODES][key]:
                        m.training = bool(state[K_MODES][key][n])
    # 2. gradients (only a continuation keeps an unfinished window's gradients)
    if ts.model is not None:
        saved_grads = state[K_GRADIENTS] if K_GRADIENTS in restores else None
        for n, p in ts.model.named_parameters():
            g = (saved_grads or {}).get(n)
            p.grad = None if g is None else g.detach().clone().to(device=p.device, dtype=p.dtype)
    # 3. data cursor (a label that drops the gradients repeats an unfinished window)
    repeated = False
    if ts.loader is not None:
        if want(K_LOADER, ts.loader) and fresh_data is not None:
            ts.loader.reset()
            warnings.warn(
                f"label='data_change': the data stream restarts at step 0, since the saved cursor "
                f"cannot continue in the current loader ({fresh_data}); to continue an rd.Mixture per "
                "source instead, keep its sources and change the weights (docs/mixtures.md); a single source "
                "over a new dataset version (packed or not, with the saved loader settings) continues at the "
                "same epoch (docs/checkpoints.md)",
                RuntimeWarning,
                stacklevel=6,
            )
        elif want(K_LOADER, ts.loader):
            ts.loader.load_state_dict(
                state[K_LOADER], on_uncommitted="repeat" if uncommitted else None, **loader_options
            )
            if uncommitted and not acc["rewound"] and K_GRADIENTS in restores:
                _advance(ts, uncommitted)
            repeated = bool(uncommitted) and not acc["rewound"] and K_GRADIENTS not in restores
        else:
            ts.loader.reset()
    # 4. randomness last (nothing above may draw from it)
    if want(K_RNG, True):
        rng_mod.restore(state[K_RNG])
    # 5. lineage, then verification, then the metric log (its truncation is the last step)
    if continues:
        ts.run_id = saved_meta.run_id
    elif ts.run_id == saved_meta.run_id:
        ts.run_id = new_id()
    ts.parent_checkpoint_id = saved_meta.checkpoint_id
    ts.recovery_label = label
    hooks.window_restored()
    ts.last_report = report
    if verify:
        # a declared batch change regroups the stream: the next batch holds other samples (the loader
        # checked that it starts at the committed sample), so its oracle cannot match
        regrouped = repeated or report.batch_changed or "label" in loader_options
        skip = ({"next_batch"} if regrouped else set()) | (dcp["skip"] if dcp is not None else set())
        _verify(hooks, state, restores, skip=skip, dcp=dcp is not None)
    if ts.metrics is not None:
        if want(K_METRICS, ts.metrics):
            ts.metrics.load_state_dict(state[K_METRICS], truncate=True)
        ts.metrics.set_run(ts.run_id, label)


def _advance(ts: Any, n: int) -> None:
    """Deliver (and drop) the ``n`` microbatches whose gradients were restored."""
    left = n
    while left:
        got = False
        for _ in ts.loader:
            got = True
            left -= 1
            if not left:
                break
        if not got:  # pragma: no cover - the loader always has a next epoch
            raise CheckpointError("internal: the loader produced no batch while continuing the window")


def _verify(
    hooks: TrainingHooks, state: Mapping[str, Any], restores: frozenset[str], skip: set[str], dcp: bool = False
) -> None:
    saved = state[K_ORACLES]
    now = hooks.live_oracles(dcp)  # the live objects; no optimizer step
    checks = {k: v for k, v in CHECKS.items() if k != "optimizer_groups"}
    bad = [
        f"{k}: saved {saved[k]} vs restored {now.get(k)}"
        for k, part in checks.items()
        if part in restores and k not in skip and k in saved and k in now and saved[k] != now[k]
    ]
    if dcp:  # the file layout required exactly its parts' oracles before the apply (validate)
        bad += [
            f"{k}: no saved oracle for a restored part the checkpoint holds"
            for k, part in checks.items()
            if part in restores
            and k not in skip
            and k != "rng.cuda"  # present only where CUDA is initialized: depends on the machine
            and k in now
            and k not in saved
            and state[part] is not None
        ]
    if bad:
        raise CheckpointError(
            "restored state does not match the checkpoint's oracles (a bug or a stateful object "
            "whose load_state_dict is not exact):\n  - " + "\n  - ".join(bad)
        )
