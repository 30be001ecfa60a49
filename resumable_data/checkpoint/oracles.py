"""What a checkpoint records about a training state besides its tensors: oracles and status.

* :func:`oracles_of`: one digest per part of the state tree (parameters, buffers, optimizer moments
  and groups, scheduler, scaler, EMA, callbacks, each generator, gradients, module modes) and the
  record ids of the next batch. A restore recomputes them from the live objects and compares, so
  a stateful object that does not restore exactly is caught before the first step.
* :func:`status_of`: the typed progress section (:class:`CheckpointStatus`) that ``inspect`` shows.

Both only read: no object changes, no optimizer step. Cost: one pass over the tensors (xxh3).
"""

from __future__ import annotations

from typing import Any

from torch.optim.lr_scheduler import LRScheduler

from resumable_data.checkpoint import rng as rng_mod
from resumable_data.checkpoint.digest import digest_json, digest_tensors, flatten
from resumable_data.checkpoint.keys import (
    K_ACCUMULATION,
    K_CALLBACKS,
    K_EMA,
    K_GRADIENTS,
    K_MODEL,
    K_MODES,
    K_OPTIMIZER,
    K_RNG,
    K_SCALER,
    K_SCHEDULER,
)
from resumable_data.checkpoint.meta import module_modes
from resumable_data.checkpoint.status import AccumulationStatus, CheckpointStatus
from resumable_data.loader.state import LoaderState

__all__ = ["oracles_of", "status_of"]


def status_of(
    ts: Any, snap: LoaderState | None, accumulation: AccumulationStatus, next_step: int | None
) -> CheckpointStatus:
    """The progress section of a checkpoint of ``ts`` taken now (see the module docs)."""
    lr = sched = scale = modes = None
    if ts.optimizer is not None:
        lr = tuple(None if g.get("lr") is None else float(g["lr"]) for g in ts.optimizer.param_groups)
    if ts.scheduler is not None:
        # a torch scheduler's step count; -1 for another Stateful standing in for one (accelerate's
        # AcceleratedScheduler wraps one and is not one)
        sched = int(ts.scheduler.last_epoch) if isinstance(ts.scheduler, LRScheduler) else -1
    if ts.scaler is not None:
        scale = ts.scaler.state_dict().get("scale")
    if ts.model is not None:
        m = module_modes(ts.model)
        modes = {"training": sum(m.values()), "modules": len(m)}
    return CheckpointStatus(
        accumulation=accumulation,
        cursor=snap.cursor if snap is not None else None,
        epoch_base=snap.epoch_base if snap is not None else None,
        counters=snap.counter_view().to_dict() if snap is not None else None,
        next_step=next_step,
        next_lr=lr,
        scheduler_last_epoch=sched,
        scale=scale,
        modes=modes,
    )


def oracles_of(ts: Any, state: dict[str, Any], next_step: int | None) -> dict[str, str]:
    """The digests of the state tree ``state`` of ``ts`` (see the module docs)."""
    o: dict[str, str] = {}
    if state[K_MODEL] is not None:
        params = {n for n, _ in ts.model.named_parameters(remove_duplicate=False)}
        o["parameters"] = digest_tensors(sorted((k, v) for k, v in state[K_MODEL].items() if k in params))
        o["buffers"] = digest_tensors(sorted((k, v) for k, v in state[K_MODEL].items() if k not in params))
    if state[K_OPTIMIZER] is not None:
        stateless = set(state[K_OPTIMIZER].get("stateless", ()))
        real = {k: v for k, v in state[K_OPTIMIZER]["state"].items() if k not in stateless}
        o["optimizer"] = digest_tensors(flatten("state", real, []))
        o["optimizer_groups"] = digest_json(flatten("groups", state[K_OPTIMIZER]["param_groups"], []))
    if state[K_SCHEDULER] is not None:
        o["scheduler"] = digest_json(flatten("s", state[K_SCHEDULER], []))
    if state[K_SCALER] is not None:
        o["scaler"] = digest_json(state[K_SCALER])
    if state[K_EMA] is not None:
        o["ema"] = digest_tensors(flatten("ema", state[K_EMA], []))
    if state[K_CALLBACKS]:
        o["callbacks"] = digest_tensors(flatten("cb", state[K_CALLBACKS], []))
    if state[K_RNG] is not None:
        for k, v in rng_mod.digests(state[K_RNG]).items():
            o[f"rng.{k}"] = v
    grads = state[K_GRADIENTS]
    if grads and "gradients" in state[K_ACCUMULATION]:  # DCP layout: slots; the saved names are listed
        grads = {n: grads[n] for n in state[K_ACCUMULATION]["gradients"]}
    o["gradients"] = digest_tensors(sorted(grads.items())) if grads else "none"
    if state[K_MODES]:
        o["modes"] = digest_json(state[K_MODES])
    if ts.loader is not None and next_step is not None:
        o["next_batch"] = digest_json(ts.loader.step_info(next_step).records.tolist())  # or a packed batch's documents
    return o
