"""Phase 1 of the restore of :class:`rd.TrainingState` (:mod:`.restore`): validate everything, change nothing.

Algorithm. The caller has parsed the header and the metadata and run the compatibility contract;
:func:`validate` then type-checks every part the label restores against the live objects, in
this order:

* parts (:func:`_check_parts`): each restored part present exactly when the saved metadata
  records it (a ``null`` model, optimizer, ... restored nothing), the callbacks its metadata names,
  mid-window gradients exactly when the accumulation record says they were saved;
* the accumulation record (keys, types; its ``uncommitted`` equal to the loader cursor's);
* model and EMA tensors (names, shapes, dtypes) and mid-window gradients (names, shapes);
* the optimizer by parameter name (group partition, each parameter in one group once, group
  settings' structure and flags, their ranges through the optimizer's constructor, in both
  layouts; in the file layout every state entry against the optimizer's own ``step()`` on
  scratch tensors: :mod:`.optim_check`);
* the scheduler (structure, torch's own classes' ``base_lrs``/``last_epoch``/``_step_count`` in
  the ranges they can hold, and ``get_lr()`` on a scratch copy); scaler keys and value kinds (a
  GradScaler's values in its constructor's ranges); callbacks and module modes;
* every generator state (each field in range, :func:`.rng.host_states`, then set on scratch
  generators: ``random.Random``, ``numpy.random.RandomState``, ``torch.Generator``); ``rng: null``
  under a label that restores the generators is refused when the TrainingState captures them
  (``capture_rng=True``): nothing would restore them (:func:`_check_no_rng`);
* the loader's full state (:meth:`rd.DataLoader.validate_state_dict`, with ``allow_unpinned`` and
  ``on_batch_change``) and the metric log boundary (:meth:`MetricLog.validate_state_dict`);
* the checkpoint's own oracles recomputed from the saved tree (file layout: a tree edited after
  the save is refused here, before any object changes; the DCP layout's tensors are loaded in
  place and verified after the apply).

Guarantee: nothing is changed (live objects are only read; scratch copies and generators are
thrown away), and everything the apply phase would refuse or trip on raises an rd error here:
an error that is not an :class:`~resumable_data.ResumableDataError` (a malformed tree) comes out
as a :class:`CheckpointError` naming it. Internal: not part of the ``rd`` API.

Cost: two optimizer steps per parameter on scratch tensors (:mod:`.optim_check`), one
``get_lr()``, the scratch generators, the loader's validation, and the oracle digests of the
saved tree (each tensor hashed once more).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from resumable_data._schema import expect_bool, expect_enum, expect_int, expect_mapping
from resumable_data.checkpoint import rng as rng_mod
from resumable_data.checkpoint.edited import edited, value_kind
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
from resumable_data.checkpoint.optim import group_fqns, match_groups
from resumable_data.checkpoint.optim_check import (
    probe_optimizer,
    probe_scheduler,
    probe_settings,
    same_flags,
    same_structure,
)
from resumable_data.checkpoint.policies import AccumulationPolicy
from resumable_data.errors import ResumableDataError, ResumeError, describe
from resumable_data.loader.state import LoaderState

__all__ = ["CHECKS", "NO_RNG_FIX", "Facts", "validate"]


@dataclass(frozen=True)
class Facts:
    """What the apply phase needs from the validation."""

    #: microbatches the loader delivered past its last commit (``accumulation.uncommitted``)
    uncommitted: int
    #: under ``label=data_change``: why the saved cursor cannot continue in the live loader (it restarts)
    fresh_data: str | None


#: oracle -> the part of the state it checks (only restored parts are compared).
CHECKS = {
    "parameters": K_MODEL,
    "buffers": K_MODEL,
    "optimizer": K_OPTIMIZER,
    "optimizer_groups": K_OPTIMIZER,
    "scheduler": K_SCHEDULER,
    "scaler": K_SCALER,
    "ema": K_EMA,
    "callbacks": K_CALLBACKS,
    "gradients": K_GRADIENTS,
    "modes": K_MODES,
    "next_batch": K_LOADER,
    "rng.python": K_RNG,
    "rng.numpy": K_RNG,
    "rng.torch_cpu": K_RNG,
    "rng.cuda": K_RNG,
}


def _same_shape(saved: Any, current: Mapping[str, Any], where: str) -> None:
    """``saved`` has exactly ``current``'s keys, each value of the same kind (tensors: shape, dtype)."""
    if not isinstance(saved, Mapping) or set(saved) != set(current):
        got = sorted(map(str, saved))[:6] if isinstance(saved, Mapping) else type(saved).__name__
        raise edited(where, got, f"the keys {sorted(current)[:6]}{'...' if len(current) > 6 else ''}")
    for k, cur in current.items():
        v = saved[k]
        if isinstance(cur, torch.Tensor):
            if not isinstance(v, torch.Tensor) or v.shape != cur.shape or v.dtype != cur.dtype:
                shown = f"{tuple(v.shape)} {v.dtype}" if isinstance(v, torch.Tensor) else type(v).__name__
                raise edited(f"{where}.{k}", shown, f"a tensor of shape {tuple(cur.shape)} and dtype {cur.dtype}")
        elif value_kind(v) != value_kind(cur) and not (cur is None or v is None):
            raise edited(f"{where}.{k}", value_kind(v), f"a {value_kind(cur)} (as the live object holds)")


def _check_scaler(saved: Mapping[str, Any]) -> None:
    """A GradScaler's values in the ranges its constructor allows (``load_state_dict`` checks none: a
    scale of 0 or NaN skips every step, a fractional ``growth_interval`` fails at ``update()``)."""

    def num(key: str, ok: Callable[[float], bool], expected: str) -> None:
        v = saved[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not ok(v):
            raise edited(f"scaler.{key}", v, expected)

    def count(key: str, lo: int) -> None:
        v = saved[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise edited(f"scaler.{key}", v, f"an integer >= {lo}")

    for key, check in (
        ("scale", lambda: num("scale", lambda v: v > 0, "a finite number > 0")),
        ("growth_factor", lambda: num("growth_factor", lambda v: v > 1, "a finite number > 1")),
        ("backoff_factor", lambda: num("backoff_factor", lambda v: 0 < v < 1, "a number in (0, 1)")),
        ("growth_interval", lambda: count("growth_interval", 1)),
        ("_growth_tracker", lambda: count("_growth_tracker", 0)),
    ):
        if key in saved:
            check()


def _check_optimizer(ts: Any, names: Mapping[int, str], saved: Any, *, dcp: bool = False) -> None:
    """The saved optimizer against the live one: its groups (partition by name, each setting's
    structure and flags) and, in the file layout, every state entry (:func:`probe_optimizer`). The
    DCP layout's state tensors were loaded in place by DCP (verified by the oracles after the
    apply); its groups travel in the JSON and are checked here as the file layout's are."""
    opt = ts.optimizer
    keys = {"state", "param_groups"} | ({"stateless"} if dcp else set())
    if not isinstance(saved, Mapping) or set(saved) != keys:
        raise edited("optimizer", type(saved).__name__, f"{{{', '.join(repr(k) for k in sorted(keys))}}}")
    groups, state = saved["param_groups"], saved["state"]
    if not isinstance(groups, list) or not all(
        isinstance(g, dict) and isinstance(g.get("params"), list) and all(isinstance(n, str) for n in g["params"])
        for g in groups
    ):
        raise edited(
            "optimizer.param_groups", type(groups).__name__, "a list of groups, each with 'params': [name, ...]"
        )
    if not isinstance(state, dict) or not all(isinstance(v, dict) for v in state.values()):
        raise edited("optimizer.state", type(state).__name__, "{parameter name: {key: tensor or number}}")
    if dcp and (not isinstance(saved["stateless"], list) or not all(isinstance(n, str) for n in saved["stateless"])):
        raise edited("optimizer.stateless", type(saved["stateless"]).__name__, "a list of parameter names")
    listed = [n for g in groups for n in g["params"]]
    if len(listed) != len(set(listed)):  # a group matched by set: a repeated one would win with its settings
        twice = sorted({n for n in listed if listed.count(n) > 1})
        raise edited(
            "optimizer.param_groups", f"parameters listed twice: {twice[:6]}", "each parameter in one group, once"
        )
    current = group_fqns(opt, dict(names))
    ordered = match_groups(current, saved)  # CompatibilityError naming every mismatch
    for gi, (g, live) in enumerate(zip(ordered, opt.param_groups)):
        same_structure(
            {k: v for k, v in g.items() if k != "params"},
            {k: v for k, v in live.items() if k != "params"},
            f"optimizer.param_groups[{gi}]",
        )
        same_flags(g, live, f"optimizer.param_groups[{gi}]")
    probe_settings(opt, ordered)  # ranges: what the optimizer's constructor refuses (a NaN lr)
    if not dcp:
        probe_optimizer(opt, ordered, current, state)  # every moment against the optimizer's own step()


def _check_rng(state: Any) -> None:
    """Set the saved states on scratch generators: what restore() would accept, nothing global changes."""
    if not isinstance(state, dict) or set(state) != {
        rng_mod.K_PYTHON,
        rng_mod.K_NUMPY,
        rng_mod.K_TORCH,
        rng_mod.K_CUDA,
    }:
        raise edited("rng", type(state).__name__, "the generator states capture() wrote")
    tc = state[rng_mod.K_TORCH]
    py_state, np_state = rng_mod.host_states(state)  # every field in range (NumPy checks no position)
    try:
        random.Random().setstate(py_state)
        np.random.RandomState().set_state(np_state)
        if not isinstance(tc, torch.Tensor) or tc.dtype != torch.uint8:
            raise TypeError("rng.torch_cpu is not a uint8 tensor")
        torch.Generator().set_state(tc)
    except ResumableDataError:
        raise
    except Exception as e:
        raise edited(
            "rng", f"malformed ({type(e).__name__}: {e})", "generator states that Python, NumPy and torch accept"
        ) from None
    cuda = state[rng_mod.K_CUDA]
    if cuda is not None:
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (
            not isinstance(cuda, list)
            or len(cuda) != n
            or not all(isinstance(s, torch.Tensor) and s.dtype == torch.uint8 for s in cuda)
        ):
            raise CheckpointError(
                describe(
                    "rng.cuda",
                    f"{len(cuda) if isinstance(cuda, list) else cuda} device states",
                    f"{n} uint8 tensors (the CUDA devices visible now)",
                    "resume on the same number of visible GPUs (CUDA_VISIBLE_DEVICES)",
                )
            )


#: The fix of a missing generator state (:func:`_check_no_rng`; the DCP layout's rank table: ``dcp_layout``).
NO_RNG_FIX = (
    "if the run was saved with rd.TrainingState(capture_rng=False), build the TrainingState with "
    "capture_rng=False to resume it (its generators are then not restored), or resume with label='warm_start'; "
    "otherwise the checkpoint was edited after it was saved: load another one"
)


def _check_no_rng(ts: Any) -> None:
    """``rng: null`` under a label that restores the generators, into a TrainingState that captures
    them (``capture_rng=True``, the default): nothing would restore the generators, and the resumed
    run would draw from the fresh process's streams under a continuation label. The metadata does
    not record ``capture_rng``, so a run saved with ``capture_rng=False`` (legitimately null) and a
    forged null read alike: both are refused, with the fix for each."""
    if ts.capture_rng:
        raise CheckpointError(
            describe(
                "rng",
                None,
                "the generator states (this TrainingState restores them: capture_rng=True; a checkpoint "
                "saved with capture_rng=True holds them)",
                NO_RNG_FIX,
            )
        )


def _check_parts(ts: Any, state: Mapping[str, Any], restores: frozenset[str], saved_meta: Any, *, dcp: bool) -> None:
    """Each part the label restores is in the state exactly when the metadata saved with it records
    the object: a state without it (``null``) restores nothing into the live object, so a part
    dropped from a checkpoint would leave the fresh object's values under a faithful label. The
    callbacks saved are the ones the metadata names; mid-window gradients (the file layout) are
    there exactly when the accumulation record says the window's gradients were saved."""
    for key, obj, section in (
        (K_MODEL, ts.model, saved_meta.model),
        (K_OPTIMIZER, ts.optimizer, saved_meta.optimizer),
        (K_SCHEDULER, ts.scheduler, saved_meta.scheduler),
        (K_SCALER, ts.scaler, saved_meta.scaler),
        (K_EMA, ts.ema, saved_meta.ema),
        (K_LOADER, ts.loader, saved_meta.data),
    ):
        if key in restores and obj is not None and (state[key] is None) != (section is None):
            held = "holds" if section is not None else "holds no"
            raise edited(
                key,
                "null" if state[key] is None else type(state[key]).__name__,
                f"{'a saved state' if section is not None else 'null'} (the checkpoint's metadata {held} {key})",
            )
    cbs = state[K_CALLBACKS]
    if K_CALLBACKS in restores and isinstance(cbs, dict) and sorted(cbs) != sorted(saved_meta.callbacks):
        raise edited(
            "callbacks", sorted(cbs), f"the states of the callbacks its metadata names ({saved_meta.callbacks})"
        )
    acc = state[K_ACCUMULATION]
    if dcp or ts.model is None or K_GRADIENTS not in restores or not isinstance(acc, Mapping):
        return
    saved_grads = acc.get("mid_window") is True and acc.get("rewound") is False and saved_meta.model is not None
    if (state[K_GRADIENTS] is not None) != saved_grads:
        raise edited(
            "gradients",
            "null" if state[K_GRADIENTS] is None else type(state[K_GRADIENTS]).__name__,
            "the window's gradients exactly when accumulation.mid_window is true and rewound false"
            if saved_grads
            else "null (the accumulation record saved no gradients)",
        )


def validate(
    ts: Any,
    state: Mapping[str, Any],
    restores: frozenset[str],
    *,
    names: Mapping[int, str],
    tree_oracles: Callable[[dict[str, Any]], dict[str, str]],
    dcp: bool,
    loader_options: Mapping[str, Any],
    saved_meta: Any = None,
) -> Facts:
    """Phase 1 (module docs): raises an rd error for anything the apply phase would refuse or trip
    on; returns what the apply phase needs. ``names``: ``id(parameter)`` -> FQN, the names the
    optimizer state is keyed by; ``tree_oracles``: the oracles of a state tree; ``loader_options``:
    the loader's ``load_state_dict`` options (``allow_unpinned``, ``on_batch_change``);
    ``saved_meta``: the state's own :class:`CheckpointMeta` (which parts the save held:
    :func:`_check_parts`)."""

    def want(key: str, obj: Any) -> bool:
        return key in restores and obj is not None and state[key] is not None

    try:
        if saved_meta is not None:
            _check_parts(ts, state, restores, saved_meta, dcp=dcp)
        _check_accumulation(state, dcp=dcp)
        if ts.model is not None:
            _check_tensors(ts, state, restores, check_model=want(K_MODEL, ts.model))
        if want(K_OPTIMIZER, ts.optimizer):
            _check_optimizer(ts, names, state[K_OPTIMIZER], dcp=dcp)
        if want(K_SCHEDULER, ts.scheduler):
            probe_scheduler(ts.scheduler, state[K_SCHEDULER])
        if want(K_SCALER, ts.scaler):
            _same_shape(state[K_SCALER], ts.scaler.state_dict(), "scaler")
            if isinstance(ts.scaler, torch.amp.GradScaler):
                _check_scaler(state[K_SCALER])
        if want(K_EMA, ts.ema):
            _same_shape(state[K_EMA], ts.ema.state_dict(), "ema")
        if K_CALLBACKS in restores and not isinstance(state[K_CALLBACKS], dict):
            raise edited("callbacks", type(state[K_CALLBACKS]).__name__, "{name: state}")
        if K_MODES in restores:
            _check_modes(state[K_MODES])
        if want(K_RNG, True):
            _check_rng(state[K_RNG])
        elif K_RNG in restores and not dcp:  # DCP: a rank without a saved entry (dcp_layout.select_rank)
            _check_no_rng(ts)
        facts = Facts(0, None)
        if want(K_LOADER, ts.loader):
            facts = _check_loader(ts.loader, state[K_LOADER], loader_options)
        if want(K_METRICS, ts.metrics):
            ts.metrics.validate_state_dict(state[K_METRICS])
        _check_oracles(state, restores, tree_oracles, dcp=dcp)
        return facts
    except ResumableDataError:
        raise
    except Exception as e:
        raise edited("state", f"malformed ({type(e).__name__}: {e})", "a state tree written by this package") from e


def _check_accumulation(state: Mapping[str, Any], *, dcp: bool) -> None:
    """The accumulation record's keys and types; its ``uncommitted`` is the loader cursor's."""
    acc = state[K_ACCUMULATION]
    keys = {"policy", "mid_window", "rewound", "microstep", "uncommitted"} | ({"gradients"} if dcp else set())
    expect_mapping(acc, "accumulation", keys, error=CheckpointError)
    expect_enum(acc["policy"], AccumulationPolicy, "accumulation.policy", error=CheckpointError)
    expect_bool(acc["mid_window"], "accumulation.mid_window", error=CheckpointError)
    expect_bool(acc["rewound"], "accumulation.rewound", error=CheckpointError)
    if acc["microstep"] is not None:
        expect_int(acc["microstep"], "accumulation.microstep", error=CheckpointError)
    expect_int(acc["uncommitted"], "accumulation.uncommitted", error=CheckpointError)
    ls = state[K_LOADER]
    if ls is not None:
        saved_uncommitted = LoaderState.from_dict(ls).uncommitted  # ResumeError on a malformed state
        if acc["uncommitted"] != saved_uncommitted:
            raise edited("accumulation.uncommitted", acc["uncommitted"], f"the loader cursor's {saved_uncommitted}")
    elif acc["uncommitted"]:
        raise edited("accumulation.uncommitted", acc["uncommitted"], "0 (no loader state)")


def _check_tensors(ts: Any, state: Mapping[str, Any], restores: frozenset[str], *, check_model: bool) -> None:
    """The model's tensors (names, shapes, dtypes) and the mid-window gradients (names, shapes)."""
    if check_model:
        _same_shape(state[K_MODEL], ts.model.state_dict(), "model")
    grads = state[K_GRADIENTS] if K_GRADIENTS in restores else None
    if grads is not None:
        params = dict(ts.model.named_parameters())
        if not isinstance(grads, dict) or not set(grads) <= set(params):
            raise edited("gradients", type(grads).__name__, "{parameter name: tensor} for parameters of the model")
        for n, g in grads.items():
            if not isinstance(g, torch.Tensor) or g.shape != params[n].shape:
                raise edited(f"gradients.{n}", value_kind(g), f"a tensor of shape {tuple(params[n].shape)}")


def _check_modes(modes: Any) -> None:
    if not isinstance(modes, dict) or not all(
        isinstance(m, dict) and all(isinstance(b, bool) for b in m.values()) for m in modes.values()
    ):
        raise edited("modes", type(modes).__name__, "{'model': {module name: bool}, ...}")


def _check_loader(loader: Any, ls: Any, loader_options: Mapping[str, Any]) -> Facts:
    """The loader's whole state; under ``label=data_change`` a stream the cursor cannot continue
    (another kind of loader) is not refused: it restarts (``Facts.fresh_data`` says why)."""
    try:
        return Facts(loader.validate_state_dict(ls, on_uncommitted="repeat", **loader_options).uncommitted, None)
    except ResumeError as e:
        if loader_options.get("label") is None:
            raise
        return Facts(0, str(e))


def _check_oracles(
    state: Mapping[str, Any],
    restores: frozenset[str],
    tree_oracles: Callable[[dict[str, Any]], dict[str, str]],
    *,
    dcp: bool,
) -> None:
    """The oracles' shape; in the file layout the saved tree must still be what its oracles
    digested (DCP: per-rank, verified after the apply)."""
    oracles = state[K_ORACLES]
    if not isinstance(oracles, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in oracles.items()):
        raise edited("oracles", type(oracles).__name__, "{name: digest}")
    if dcp:
        return
    recomputed = tree_oracles(dict(state))
    bad = [
        k
        for k, part in CHECKS.items()
        if part in restores and k != "next_batch" and k in oracles and k in recomputed and oracles[k] != recomputed[k]
    ]
    expected = set(recomputed) | ({"next_batch"} if state[K_LOADER] is not None else set())
    missing = sorted(set(oracles) ^ expected)
    if bad or missing:
        raise edited(
            "state", f"oracles {sorted(bad + missing)}", "parts whose digests equal the oracles saved with them"
        )
