"""The one module of the checkpoint layer that touches torch's private optimizer, scheduler and
AMP internals (the DataLoader's live in :mod:`resumable_data.loader.torch_compat`).

Each is a name torch sets on its own objects and exposes no public accessor for;
``tests/checkpoint/test_checkpoint_torch_compat.py`` asserts that every one exists in the
installed torch with the expected shape, so an upgrade that moves one fails loudly and names it:

* ``Optimizer._opt_called``: the flag an LR scheduler's wrapper sets when ``step()`` runs, and
  ``Optimizer._optimizer_step_pre_hooks`` / ``_optimizer_step_post_hooks``: the optimizer's own
  step hooks. :func:`unobserved_step` hides one internal ``step()`` from both (module docs of
  :mod:`.optim`, "Placeholders").
* ``GradScaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"]``: whether the last
  ``scaler.step`` found inf/nan gradients (:func:`found_inf`), and ``GradScaler._device``
  (:func:`scaler_device`).
* the progress keys of an ``LRScheduler.state_dict()`` (:data:`SCHEDULER_PROGRESS_KEYS`).

Cost: a few attribute reads; nothing is copied.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

__all__ = [
    "SCHEDULER_PROGRESS_KEYS",
    "SCHEDULER_STEP_COUNT",
    "STEP_HOOKS",
    "found_inf",
    "scaler_device",
    "unobserved_step",
]

_ABSENT = object()
OPT_CALLED = "_opt_called"
STEP_HOOKS = ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks")

#: ``LRScheduler.state_dict()``'s count of ``step()`` calls (an integer >= 0 in torch's schedulers)
SCHEDULER_STEP_COUNT = "_step_count"

#: ``LRScheduler.state_dict()`` entries that are progress (or the schedule's functions), not settings
SCHEDULER_PROGRESS_KEYS = frozenset(
    {
        "last_epoch",
        SCHEDULER_STEP_COUNT,
        "_last_lr",
        "_get_lr_called_within_step",
        "lr_lambdas",
        "_is_initial",
        "base_lrs",
    }
)


@contextlib.contextmanager
def unobserved_step(optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """Inside, the optimizer's own step hooks are detached; on exit they and the ``_opt_called``
    flag an LR scheduler reads are exactly as they were (present or absent)."""
    called = optimizer.__dict__.get(OPT_CALLED, _ABSENT)
    hooks = {k: optimizer.__dict__[k] for k in STEP_HOOKS if k in optimizer.__dict__}
    try:
        for k, v in hooks.items():
            setattr(optimizer, k, type(v)())
        yield
    finally:
        if called is _ABSENT:
            optimizer.__dict__.pop(OPT_CALLED, None)
        else:
            setattr(optimizer, OPT_CALLED, called)
        for k, v in hooks.items():
            setattr(optimizer, k, v)


def found_inf(scaler: Any, optimizer: torch.optim.Optimizer) -> bool | None:
    """Whether the last ``scaler.step(optimizer)`` found inf/nan gradients (so skipped the update);
    None where the scaler does not expose it (the caller then compares scales)."""
    states = getattr(scaler, "_per_optimizer_states", None)
    if not isinstance(states, dict):
        return None
    st = states.get(id(optimizer))
    if not st or "found_inf_per_device" not in st or not st["found_inf_per_device"]:
        return None
    return bool(sum(float(v.item()) for v in st["found_inf_per_device"].values()) > 0)


def scaler_device(scaler: Any) -> str:
    """The device a ``GradScaler`` was built for (``""`` where it does not say)."""
    return str(getattr(scaler, "_device", ""))
