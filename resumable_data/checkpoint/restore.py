"""The restore path of :class:`rd.TrainingState`: all or nothing.

Algorithm, in three phases:

1. **Validate** (nothing is touched). The caller has parsed the header and the metadata and run
   the compatibility contract; :func:`validate` then type-checks every part the label restores
   against the live objects: each restored part present exactly when the saved metadata records
   it (a ``null`` model, optimizer, ... restored nothing), model and EMA tensors (names, shapes,
   dtypes), mid-window gradients, the optimizer by parameter name (group partition, each parameter
   in one group once, group settings' structure, in both layouts, and in the file layout every
   state entry against the optimizer's own ``step()`` on scratch tensors: :mod:`.optim_check`),
   the scheduler (structure, torch's own classes' ``base_lrs``/``last_epoch``/``_step_count`` in
   the ranges they can hold, and ``get_lr()`` on a scratch copy), scaler keys and value kinds (a
   GradScaler's values in its constructor's ranges), module modes, the accumulation record, every
   generator state (each field in range, :func:`.rng.host_states`, then set on scratch
   generators: ``random.Random``, ``numpy.random.RandomState``, ``torch.Generator``), the loader's full state (:meth:`rd.DataLoader.validate_state_dict`, with
   ``allow_unpinned`` and ``on_batch_change``), the metric log boundary
   (:meth:`MetricLog.validate_state_dict`), and the checkpoint's own oracles recomputed from the
   saved tree (a tree edited after the save is refused here, before any object changes).
2. **Snapshot** what the restore can change: parameters and buffers (copies), gradients and
   module modes (references), optimizer state and groups (the original dict objects), scheduler,
   scaler and callback ``state_dict()`` (deep copies), every global generator, the loader's
   attributes (a shallow copy of its ``__dict__``: ``reset`` assigns, it never mutates in place)
   and the TrainingState's own lineage fields.
3. **Apply** in the order the old restore used (weights, optimizer side, gradients, loader,
   generators last), then verify the live oracles. If anything raises, every object is rolled
   back from the snapshot and the error is re-raised (a non-``rd`` exception is wrapped in
   :class:`CheckpointError`). The metric log is applied after verification: its truncation (which
   moves records past the checkpoint to ``<log>.discarded``) is the one file side effect and the
   last step, and its inputs were validated in phase 1.

Guarantee: a refused or failing load leaves model, optimizer, scheduler, scaler, EMA, callbacks,
generators (Python, NumPy, torch CPU and CUDA), loader, metric log and lineage as they were, and
raises only :class:`~resumable_data.ResumableDataError` subclasses. Not covered: an active
iterator of the loader is closed by the loader's ``reset`` (a restore is meant for fresh objects).

The contract with :class:`rd.TrainingState`: the restore reads the live objects through their
public attributes (``model``, ``optimizer``, ``loader``, ...) and everything else through one
:class:`TrainingHooks` that ``TrainingState.load_state_dict`` hands over (the parameter names
optimizer state is keyed by, the oracles of a tree and of the live objects, the accumulation
window's start snapshot); it reads no private attribute of the state. Internal: not part of the
``rd`` API.

Cost: one copy of the parameters, buffers (and EMA) for the snapshot, plus the oracle digests of
the saved tree (each tensor hashed once more).
"""

from __future__ import annotations

import copy
import math
import random
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from resumable_data._schema import expect_bool, expect_enum, expect_int, expect_mapping
from resumable_data.checkpoint import rng as rng_mod
from resumable_data.checkpoint.compat import CompatibilityReport
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
from resumable_data.checkpoint.optim import group_fqns, load_dense_optimizer_state, load_optimizer_state, match_groups
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

__all__ = ["TrainingHooks", "module_undo", "restore", "stateful_undo", "validate"]


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


FIX = "the checkpoint was edited or damaged after it was saved: load another one"
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


def _bad(where: str, value: Any, expected: str) -> CheckpointError:
    return CheckpointError(describe(where, value, expected, FIX))


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, torch.Tensor):
        return "tensor"
    if isinstance(v, (list, tuple)):
        return "list"
    return type(v).__name__


def _same_shape(saved: Any, current: Mapping[str, Any], where: str) -> None:
    """``saved`` has exactly ``current``'s keys, each value of the same kind (tensors: shape, dtype)."""
    if not isinstance(saved, Mapping) or set(saved) != set(current):
        got = sorted(map(str, saved))[:6] if isinstance(saved, Mapping) else type(saved).__name__
        raise _bad(where, got, f"the keys {sorted(current)[:6]}{'...' if len(current) > 6 else ''}")
    for k, cur in current.items():
        v = saved[k]
        if isinstance(cur, torch.Tensor):
            if not isinstance(v, torch.Tensor) or v.shape != cur.shape or v.dtype != cur.dtype:
                shown = f"{tuple(v.shape)} {v.dtype}" if isinstance(v, torch.Tensor) else type(v).__name__
                raise _bad(f"{where}.{k}", shown, f"a tensor of shape {tuple(cur.shape)} and dtype {cur.dtype}")
        elif _kind(v) != _kind(cur) and not (cur is None or v is None):
            raise _bad(f"{where}.{k}", _kind(v), f"a {_kind(cur)} (as the live object holds)")


def _check_scaler(saved: Mapping[str, Any]) -> None:
    """A GradScaler's values in the ranges its constructor allows (``load_state_dict`` checks none: a
    scale of 0 or NaN skips every step, a fractional ``growth_interval`` fails at ``update()``)."""

    def num(key: str, ok: Callable[[float], bool], expected: str) -> None:
        v = saved[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not ok(v):
            raise _bad(f"scaler.{key}", v, expected)

    def count(key: str, lo: int) -> None:
        v = saved[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise _bad(f"scaler.{key}", v, f"an integer >= {lo}")

    for key, check in (
        ("scale", lambda: num("scale", lambda v: v > 0, "a finite number > 0")),
        ("growth_factor", lambda: num("growth_factor", lambda v: v > 1, "a finite number > 1")),
        ("backoff_factor", lambda: num("backoff_factor", lambda v: 0 < v < 1, "a number in (0, 1)")),
        ("growth_interval", lambda: count("growth_interval", 1)),
        ("_growth_tracker", lambda: count("_growth_tracker", 0)),
    ):
        if key in saved:
            check()


def _check_optimizer(ts: Any, hooks: TrainingHooks, saved: Any, *, dcp: bool = False) -> None:
    """The saved optimizer against the live one: its groups (partition by name, each setting's
    structure and flags) and, in the file layout, every state entry (:func:`probe_optimizer`). The
    DCP layout's state tensors were loaded in place by DCP (verified by the oracles after the
    apply); its groups travel in the JSON and are checked here as the file layout's are."""
    opt = ts.optimizer
    keys = {"state", "param_groups"} | ({"stateless"} if dcp else set())
    if not isinstance(saved, Mapping) or set(saved) != keys:
        raise _bad("optimizer", type(saved).__name__, f"{{{', '.join(repr(k) for k in sorted(keys))}}}")
    groups, state = saved["param_groups"], saved["state"]
    if not isinstance(groups, list) or not all(
        isinstance(g, dict) and isinstance(g.get("params"), list) and all(isinstance(n, str) for n in g["params"])
        for g in groups
    ):
        raise _bad("optimizer.param_groups", type(groups).__name__, "a list of groups, each with 'params': [name, ...]")
    if not isinstance(state, dict) or not all(isinstance(v, dict) for v in state.values()):
        raise _bad("optimizer.state", type(state).__name__, "{parameter name: {key: tensor or number}}")
    if dcp and (not isinstance(saved["stateless"], list) or not all(isinstance(n, str) for n in saved["stateless"])):
        raise _bad("optimizer.stateless", type(saved["stateless"]).__name__, "a list of parameter names")
    listed = [n for g in groups for n in g["params"]]
    if len(listed) != len(set(listed)):  # a group matched by set: a repeated one would win with its settings
        twice = sorted({n for n in listed if listed.count(n) > 1})
        raise _bad(
            "optimizer.param_groups", f"parameters listed twice: {twice[:6]}", "each parameter in one group, once"
        )
    current = group_fqns(opt, hooks.names)
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
        raise _bad("rng", type(state).__name__, "the generator states capture() wrote")
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
        raise _bad(
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
            raise _bad(
                key,
                "null" if state[key] is None else type(state[key]).__name__,
                f"{'a saved state' if section is not None else 'null'} (the checkpoint's metadata {held} {key})",
            )
    cbs = state[K_CALLBACKS]
    if K_CALLBACKS in restores and isinstance(cbs, dict) and sorted(cbs) != sorted(saved_meta.callbacks):
        raise _bad("callbacks", sorted(cbs), f"the states of the callbacks its metadata names ({saved_meta.callbacks})")
    acc = state[K_ACCUMULATION]
    if dcp or ts.model is None or K_GRADIENTS not in restores or not isinstance(acc, Mapping):
        return
    saved_grads = acc.get("mid_window") is True and acc.get("rewound") is False and saved_meta.model is not None
    if (state[K_GRADIENTS] is not None) != saved_grads:
        raise _bad(
            "gradients",
            "null" if state[K_GRADIENTS] is None else type(state[K_GRADIENTS]).__name__,
            "the window's gradients exactly when accumulation.mid_window is true and rewound false"
            if saved_grads
            else "null (the accumulation record saved no gradients)",
        )


def validate(
    ts: Any,
    hooks: TrainingHooks,
    state: Mapping[str, Any],
    restores: frozenset[str],
    *,
    dcp: bool,
    loader_options: Mapping[str, Any],
    saved_meta: Any = None,
) -> dict[str, Any]:
    """Phase 1 (module docs): raises an rd error for anything the apply phase would refuse or trip
    on; returns what the apply phase needs (``uncommitted``). ``loader_options``: the loader's
    ``load_state_dict`` options (``allow_unpinned``, ``on_batch_change``); ``saved_meta``: the
    state's own :class:`CheckpointMeta` (which parts the save held: :func:`_check_parts`)."""
    try:
        if saved_meta is not None:
            _check_parts(ts, state, restores, saved_meta, dcp=dcp)
        return _validate(ts, hooks, state, restores, dcp=dcp, loader_options=loader_options)
    except ResumableDataError:
        raise
    except Exception as e:
        raise _bad("state", f"malformed ({type(e).__name__}: {e})", "a state tree written by this package") from e


def _validate(
    ts: Any,
    hooks: TrainingHooks,
    state: Mapping[str, Any],
    restores: frozenset[str],
    *,
    dcp: bool,
    loader_options: Mapping[str, Any],
) -> dict[str, Any]:
    def want(key: str, obj: Any) -> bool:
        return key in restores and obj is not None and state[key] is not None

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
            raise _bad("accumulation.uncommitted", acc["uncommitted"], f"the loader cursor's {saved_uncommitted}")
    elif acc["uncommitted"]:
        raise _bad("accumulation.uncommitted", acc["uncommitted"], "0 (no loader state)")
    if ts.model is not None:
        if want(K_MODEL, ts.model):
            _same_shape(state[K_MODEL], ts.model.state_dict(), "model")
        grads = state[K_GRADIENTS] if K_GRADIENTS in restores else None
        if grads is not None:
            params = dict(ts.model.named_parameters())
            if not isinstance(grads, dict) or not set(grads) <= set(params):
                raise _bad("gradients", type(grads).__name__, "{parameter name: tensor} for parameters of the model")
            for n, g in grads.items():
                if not isinstance(g, torch.Tensor) or g.shape != params[n].shape:
                    raise _bad(f"gradients.{n}", _kind(g), f"a tensor of shape {tuple(params[n].shape)}")
    if want(K_OPTIMIZER, ts.optimizer):
        _check_optimizer(ts, hooks, state[K_OPTIMIZER], dcp=dcp)
    if want(K_SCHEDULER, ts.scheduler):
        probe_scheduler(ts.scheduler, state[K_SCHEDULER])
    if want(K_SCALER, ts.scaler):
        _same_shape(state[K_SCALER], ts.scaler.state_dict(), "scaler")
        if isinstance(ts.scaler, torch.amp.GradScaler):
            _check_scaler(state[K_SCALER])
    if want(K_EMA, ts.ema):
        _same_shape(state[K_EMA], ts.ema.state_dict(), "ema")
    if K_CALLBACKS in restores and not isinstance(state[K_CALLBACKS], dict):
        raise _bad("callbacks", type(state[K_CALLBACKS]).__name__, "{name: state}")
    if K_MODES in restores:
        modes = state[K_MODES]
        if not isinstance(modes, dict) or not all(
            isinstance(m, dict) and all(isinstance(b, bool) for b in m.values()) for m in modes.values()
        ):
            raise _bad("modes", type(modes).__name__, "{'model': {module name: bool}, ...}")
    if want(K_RNG, True):
        _check_rng(state[K_RNG])
    uncommitted = 0
    fresh_data = None
    if want(K_LOADER, ts.loader):
        ls = state[K_LOADER]
        try:
            uncommitted = ts.loader.validate_state_dict(ls, on_uncommitted="repeat", **loader_options).uncommitted
        except ResumeError as e:
            if loader_options.get("label") is None:
                raise
            fresh_data = str(e)  # data_change: a stream the cursor cannot continue (another kind of loader) restarts
    if want(K_METRICS, ts.metrics):
        ts.metrics.validate_state_dict(state[K_METRICS])
    oracles = state[K_ORACLES]
    if not isinstance(oracles, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in oracles.items()):
        raise _bad("oracles", type(oracles).__name__, "{name: digest}")
    if not dcp:  # the saved tree must still be what its oracles digested (DCP: per-rank, verified after)
        acc_ok = isinstance(state[K_ACCUMULATION], dict)
        tree_oracles = hooks.tree_oracles(dict(state)) if acc_ok else {}
        bad = [
            k
            for k, part in CHECKS.items()
            if part in restores
            and k != "next_batch"
            and k in oracles
            and k in tree_oracles
            and oracles[k] != tree_oracles[k]
        ]
        expected = set(tree_oracles) | ({"next_batch"} if state[K_LOADER] is not None else set())
        missing = sorted(set(oracles) ^ expected)
        if bad or missing:
            raise _bad(
                "state", f"oracles {sorted(bad + missing)}", "parts whose digests equal the oracles saved with them"
            )
    return {"uncommitted": uncommitted, "fresh_data": fresh_data}


# -- snapshot / rollback --------------------------------------------------------------------------
def module_undo(m: torch.nn.Module) -> Callable[[], None]:
    """An undo that puts back a module's parameters and buffers (copies), gradients and modes."""
    values = {k: v.detach().clone() for k, v in m.state_dict().items()}
    grads = [(p, p.grad) for p in m.parameters()]
    modes = [(x, x.training) for x in m.modules()]

    def back() -> None:
        with torch.no_grad():
            m.load_state_dict(values, strict=True)
        for p, g in grads:
            p.grad = g
        for x, t in modes:
            x.training = t

    return back


def stateful_undo(obj: Any) -> Callable[[], None]:
    """An undo for a stateful object: ``load_state_dict`` of a deep copy of its ``state_dict()``
    where that works, then its attributes and their tensors' values (exact even for an object
    whose ``load_state_dict`` refuses or is not exact)."""
    sd = copy.deepcopy(obj.state_dict())
    try:
        attrs: dict[str, Any] | None = dict(vars(obj))
    except TypeError:  # no __dict__ (slots or a builtin): load_state_dict alone
        attrs = None
    values = {k: v.detach().clone() for k, v in (attrs or {}).items() if isinstance(v, torch.Tensor)}

    def back() -> None:
        try:
            obj.load_state_dict(sd)
        except Exception:
            pass
        if attrs is not None:
            vars(obj).clear()
            vars(obj).update(attrs)
            with torch.no_grad():
                for k, v in values.items():
                    attrs[k].copy_(v)

    return back


def _snapshot(ts: Any, hooks: TrainingHooks) -> list:
    """Undo actions (run in reverse order) for everything the apply phase can change."""
    undo: list = []

    def module(m: torch.nn.Module) -> None:
        undo.append(module_undo(m))

    def stateful(obj: Any) -> None:
        undo.append(stateful_undo(obj))

    if ts.model is not None:
        module(ts.model)
    if isinstance(ts.ema, torch.nn.Module):
        module(ts.ema)
    elif ts.ema is not None:
        stateful(ts.ema)
    if ts.optimizer is not None:
        opt = ts.optimizer
        st, inner = opt.state, {p: (s, dict(s)) for p, s in opt.state.items()}
        groups, ginner = opt.param_groups, [(g, dict(g)) for g in opt.param_groups]

        def back_opt() -> None:
            st.clear()
            for p, (s, items) in inner.items():
                s.clear()
                s.update(items)
                st[p] = s
            for g, items in ginner:
                g.clear()
                g.update(items)
            opt.state, opt.param_groups = st, groups

        undo.append(back_opt)
    for obj in (ts.scheduler, ts.scaler, *ts.callbacks.values()):
        if obj is not None:
            stateful(obj)
    if ts.loader is not None:
        undo.append(ts.loader.undo_point())
    rng = rng_mod.capture()
    undo.append(lambda: rng_mod.restore(rng))
    lineage = (ts.run_id, ts.parent_checkpoint_id, ts.recovery_label, ts.last_report)

    def put_back() -> None:
        ts.run_id, ts.parent_checkpoint_id, ts.recovery_label, ts.last_report = lineage

    undo.append(put_back)
    undo.append(hooks.keep_window())
    if ts.metrics is not None:
        mattrs = dict(ts.metrics.__dict__)
        undo.append(lambda: (ts.metrics.__dict__.clear(), ts.metrics.__dict__.update(mattrs)))
    return undo


def _rollback(undo: list) -> None:
    failed = []
    for back in reversed(undo):
        try:
            back()
        except Exception as e:
            failed.append(f"{type(e).__name__}: {e}")
    if failed:  # pragma: no cover - every undo above only assigns or copies
        raise CheckpointError(
            describe(
                "rollback",
                failed[:3],
                "every object restored to its state before the load",
                "rebuild the training objects before retrying (some could not be rolled back)",
            )
        )


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
        ts, hooks, state, restores, dcp=dcp is not None, loader_options=loader_options, saved_meta=saved_meta
    )
    if report.warnings:
        warnings.warn(
            f"resuming with {len(report.warnings)} allowed difference(s) from the checkpoint "
            f"(label={label.value!r}):\n  - " + "\n  - ".join(str(d) for d in report.warnings),
            RuntimeWarning,
            stacklevel=5,
        )
    undo = _snapshot(ts, hooks)
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
            uncommitted=facts["uncommitted"],
            loader_options=loader_options,
            fresh_data=facts["fresh_data"],
        )
    except BaseException as e:
        _rollback(undo)
        if isinstance(e, ResumableDataError) or not isinstance(e, Exception):
            raise
        raise CheckpointError(
            describe(
                "checkpoint",
                f"restore failed ({type(e).__name__}: {e})",
                "a state every object accepts (nothing was changed: all objects rolled back)",
                FIX,
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
