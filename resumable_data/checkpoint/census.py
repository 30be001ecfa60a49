"""The inventory of a live :class:`~resumable_data.checkpoint.state.TrainingState`: one row per
state category (owner, serialization, restore action, oracle value), built from its file-layout
state tree. :meth:`TrainingState.inventory` and :func:`rd.save_checkpoint` (``inventory.json``)
call it; it only reads, so it costs one pass over the already computed oracles.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import torch

from resumable_data.checkpoint.inventory import Inventory, InventoryEntry
from resumable_data.checkpoint.keys import K_ACCUMULATION, K_GRADIENTS, K_META, K_METRICS, K_ORACLES
from resumable_data.checkpoint.meta import K_STATUS
from resumable_data.checkpoint.status import AccumulationStatus, CheckpointStatus
from resumable_data.loader.stream import StepUnit

__all__ = ["build_inventory"]


def _typename(obj: Any) -> str:
    return type(obj).__name__ if obj is not None else "absent"


def build_inventory(ts: Any, state: Mapping[str, Any]) -> Inventory:
    """``ts``: the live ``TrainingState`` (read only; not imported here: its module calls this one)."""
    o = state[K_ORACLES]
    st = CheckpointStatus.from_dict(state[K_META][K_STATUS], "meta.status")
    acc = AccumulationStatus.from_dict(state[K_ACCUMULATION], "accumulation")
    modes = st.modes or {}
    E = InventoryEntry
    absent = "absent (not part of this run)"

    def val(k: str) -> str:
        return o.get(k, absent)

    master = "parameters are the master weights (fp32)"
    if ts.model is not None and any(p.dtype in (torch.float16, torch.bfloat16) for p in ts.model.parameters()):
        master = "low-precision parameters: master copies, if any, live in the optimizer state"
    rows = [
        E(
            "parameters + persistent buffers",
            f"model ({_typename(ts.model)})",
            "safetensors model.*",
            "model.load_state_dict(strict=True)",
            "xxh3 of parameters / buffers",
            f"{val('parameters')} / {val('buffers')}",
        ),
        E(
            "optimizer moments + step counters",
            f"optimizer ({_typename(ts.optimizer)})",
            "safetensors optimizer.state.<fqn>.*, JSON groups keyed by FQN",
            "matched by parameter FQN, optimizer.load_state_dict in current order",
            "xxh3 of moments / group settings",
            f"{val('optimizer')} / {val('optimizer_groups')}",
        ),
        E(
            "master weights",
            f"optimizer ({_typename(ts.optimizer)})",
            "inside optimizer state if kept",
            "with the optimizer",
            "optimizer digest",
            master,
        ),
        E(
            "LR scheduler",
            f"scheduler ({_typename(ts.scheduler)}), convention {ts.scheduler_convention.value}",
            "JSON state_dict; schedule code fingerprinted in meta",
            "scheduler.load_state_dict",
            "next LR per group",
            f"next_lr={absent if st.next_lr is None else list(st.next_lr)} "
            f"last_epoch={'-' if st.scheduler_last_epoch is None else st.scheduler_last_epoch}",
        ),
        E(
            "AMP grad scaler",
            f"scaler ({_typename(ts.scaler)})",
            "JSON (scale, growth tracker, factors)",
            "scaler.load_state_dict",
            "scale",
            f"scale={absent if st.scale is None else st.scale} ({val('scaler')})",
        ),
        E(
            "accumulated gradients + microstep",
            "model .grad / rd.DataLoader",
            f"policy {acc.policy}: " + ("safetensors gradients.<fqn>" if state[K_GRADIENTS] else "none stored"),
            "set .grad, loader continues the window"
            if state[K_GRADIENTS]
            else (
                "loader repeats the window (on_uncommitted='repeat')"
                if acc.rewound
                else "grads cleared (window boundary)"
            ),
            "xxh3 of gradients, microstep",
            f"{val('gradients')} microstep={acc.microstep} uncommitted={acc.uncommitted}",
        ),
        E("RNG: python random", "process", "JSON (625 ints)", "random.setstate", "xxh3", val("rng.python")),
        E("RNG: numpy global", "process", "JSON (MT19937 keys, pos)", "np.random.set_state", "xxh3", val("rng.numpy")),
        E("RNG: torch CPU", "process", "safetensors uint8", "torch.set_rng_state", "xxh3", val("rng.torch_cpu")),
        E(
            "RNG: CUDA",
            "process",
            "safetensors uint8 per device",
            "torch.cuda.set_rng_state_all",
            "xxh3",
            o.get("rng.cuda", "absent (CUDA not initialized)"),
        ),
        E(
            "data cursor, sampler, shuffle, augmentation keys",
            f"loader ({_typename(ts.loader)})",
            "JSON: plan fingerprint, cursor, counters, skipped ranges; sampler/shuffle/augmentation are "
            "pure functions of the position",
            "loader.load_state_dict(on_uncommitted=...)",
            "next batch's record ids",
            _next_batch_text(ts, st) if ts.loader is not None else absent,
        ),
        E(
            "counters (global step definitions)",
            "rd.DataLoader",
            "JSON",
            "with the loader",
            "attempted == applied + skipped",
            json.dumps(dict(st.counters or {}), sort_keys=True) if ts.loader is not None else absent,
        ),
        E(
            "train/eval modes",
            "model / ema",
            "JSON {module: training}",
            "module.training = saved",
            "xxh3",
            f"{val('modes')} ({modes.get('training', '-')} of {modes.get('modules', '-')} training)",
        ),
        E("EMA weights", f"ema ({_typename(ts.ema)})", "safetensors ema.*", "ema.load_state_dict", "xxh3", val("ema")),
        E(
            "callbacks",
            f"{len(ts.callbacks)} callback(s): {', '.join(sorted(ts.callbacks)) or '-'}",
            "JSON + safetensors callbacks.<name>.*",
            "callback.load_state_dict",
            "xxh3",
            val("callbacks"),
        ),
        E(
            "metric stream (external side effect)",
            f"metrics ({_typename(ts.metrics)})",
            "JSONL outside the checkpoint; boundary (run id, byte offset) in JSON",
            "truncate records past the boundary (continuations); dedupe (run_id, step, name)",
            "records / offset",
            json.dumps(state[K_METRICS]) if state[K_METRICS] else absent,
        ),
        E(
            "lineage + recovery label",
            "TrainingState",
            "meta.json",
            "run id kept (continuation) or new (reset)",
            "label",
            f"run={ts.run_id} parent={ts.parent_checkpoint_id} label={ts.recovery_label.value}",
        ),
    ]
    return Inventory(tuple(rows))


def _next_batch_text(ts: Any, st: CheckpointStatus) -> str:
    step = st.next_step
    if step is None:
        return "-"
    info = ts.loader.step_info(step)
    what = "documents" if info.unit is StepUnit.PACKED_SEQUENCE else "records"
    return f"step {step} (epoch {info.epoch}) {what} {info.records[:6].tolist()}..."
