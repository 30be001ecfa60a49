"""Was this mixed-precision update applied or skipped? (feeds ``loader.commit(applied=...)``)

``torch.amp.GradScaler.step`` silently skips ``optimizer.step()`` when the unscaled gradients
hold inf/nan, then ``update()`` backs the scale off. :func:`scaler_step` runs both and returns
whether the update was applied. Algorithm: read the scaler's found-inf flags for this optimizer
after ``step`` (the authoritative signal); where the scaler does not expose them, compare the
scale before and after ``update`` (a skipped step backs off: ``after < before``). With a
disabled scaler it is a plain ``optimizer.step()`` and returns True. Cost: one host sync.
"""

from __future__ import annotations

import torch

from resumable_data.checkpoint.torch_compat import found_inf
from resumable_data.errors import ConfigError, describe

__all__ = ["scaler_step", "step_was_applied"]


def step_was_applied(scale_before: float, scale_after: float) -> bool:
    """The scale-comparison rule: an update was applied unless ``update()`` backed the scale off."""
    return float(scale_after) >= float(scale_before)


def scaler_step(scaler: torch.amp.GradScaler | None, optimizer: torch.optim.Optimizer) -> bool:
    """``scaler.step(optimizer)``; ``scaler.update()``; return True iff the update was applied.

    ``scaler``: a ``torch.amp.GradScaler`` (``torch.cuda.amp.GradScaler`` and FSDP's
    ``ShardedGradScaler`` are ones) or None; a disabled scaler, or None, is a plain
    ``optimizer.step()`` (True). Anything else is a :class:`~resumable_data.ConfigError`."""
    if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
        raise ConfigError(
            describe(
                "scaler",
                type(scaler).__name__,
                "a torch.amp.GradScaler (torch.cuda.amp.GradScaler and FSDP's ShardedGradScaler are ones) or None",
                "pass the GradScaler that scaled the loss, or None without mixed precision",
            )
        )
    if scaler is None or not scaler.is_enabled():
        optimizer.step()
        return True
    before = float(scaler.get_scale())
    scaler.step(optimizer)
    found = found_inf(scaler, optimizer)
    scaler.update()
    if found is not None:
        return not found
    return step_was_applied(before, float(scaler.get_scale()))
