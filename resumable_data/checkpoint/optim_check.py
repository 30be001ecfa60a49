"""Validating a saved optimizer and LR scheduler state against the live objects, before anything is applied.

A forged checkpoint (state.json, tensors, oracles and marker all re-hashed) can hold optimizer
moments of the wrong shape, ``None`` group values, tuples of the wrong length or flipped flags
(``amsgrad``, ``capturable``): torch's ``load_state_dict`` takes them and the next ``step()``
raises (or, with broadcasting, silently updates with the wrong values). This module refuses them
with a :class:`CheckpointError` while nothing has changed yet.

Algorithm.

* Structure (:func:`same_structure`): every saved value has the live value's kind, recursively:
  mappings the same keys, lists and tuples the same length, tensors the same shape and dtype,
  ``None`` only where the live value is ``None`` (where the live value is ``None`` a saved bool
  or number is accepted: torch fills ``foreach=None`` in). Applied to each optimizer group's
  settings and to the scheduler's ``state_dict()``. Boolean group settings must equal the live
  ones (:func:`same_flags`: configuration the compatibility contract compared already).
* Optimizer probe (:func:`probe_optimizer`): for each parameter, the live optimizer's own
  ``step()`` runs on a scratch zero tensor of the parameter's shape, dtype and device, in a
  one-group scratch view of the optimizer holding the *saved* group settings, twice: once from no
  state (torch initializes the reference state), once from the saved state (cloned, after torch's
  own ``load_state_dict`` casting). The saved state must have the reference's keys and, for every
  tensor, its shape, dtype and device (a non-tensor its kind), and its step must run. The live
  optimizer's ``param_groups`` and ``state`` objects are swapped back in afterwards, its hooks are
  detached meanwhile (:func:`unobserved_step`); live parameters, gradients and state are never
  touched.
* Settings probe (:func:`probe_settings`, both layouts): each saved group's settings go through
  the optimizer class's own constructor on a one-element scratch parameter (torch's optimizers),
  so a value it refuses (a NaN or negative ``lr``, ``eps`` < 0, ``betas`` outside ``[0, 1)``) is
  refused here instead of loaded.
* Scheduler values (:func:`check_scheduler_values`, torch's own scheduler classes only; a user's
  scheduler state passes untouched): ``_step_count`` an integer >= 0, ``last_epoch`` a finite
  number >= -1, each ``base_lrs`` entry a finite number >= 0 (the optimizer's constructor bounds
  the ``initial_lr`` it comes from), in ``SequentialLR`` / ``ChainedScheduler``'s sub-schedulers
  too. NaN and infinities are refused there: no torch scheduler produces them.
  ``ReduceLROnPlateau`` (it has no ``get_lr()`` to probe): its settings through its own
  constructor (``mode``, ``threshold_mode``, ``factor``, ``min_lrs``), ``best`` not NaN,
  ``num_bad_epochs`` an integer >= 0 (:func:`_check_plateau` says what is left unchecked, and why).
* Scheduler probe: ``get_lr()`` of a shallow copy holding the saved state (the live optimizer is
  only read).

Guarantee: a saved optimizer or scheduler state accepted here loads, and the next ``step()`` runs
with state of the shapes torch itself creates. Not covered: the ``torch.distributed.checkpoint``
layout (DCP loads into pre-shaped tensors), optimizers whose ``step()`` requires a closure (LBFGS:
its state is not per parameter; the group structure checks still apply).

Not distinguishable, so not refused: a parameter without saved state while others have state
(Adam's ``step`` > 0, SGD's momentum buffers). torch's optimizers skip every parameter whose
``.grad`` is ``None`` at ``step()``, so a parameter that never had a gradient at an update (frozen,
an unused branch, an expert never routed, one used only later) has no state, legitimately, however
far the others are; mid-window gradients saved for it show it has one now, not that it had one
at an earlier update. Per-parameter step counts differ for the same reason. Such a parameter
restores with no state, as torch's own ``load_state_dict`` leaves it.

Cost: two optimizer steps per parameter on scratch tensors (the largest parameter's size and its
state, transiently), no copy of the model.
"""

from __future__ import annotations

import copy
import inspect
import math
import warnings
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import torch

from resumable_data.checkpoint.edited import edited, value_kind
from resumable_data.checkpoint.torch_compat import SCHEDULER_STEP_COUNT, unobserved_step

__all__ = ["probe_optimizer", "probe_scheduler", "same_flags", "same_structure"]


def _show(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        return f"tensor {tuple(v.shape)} {v.dtype}"
    if isinstance(v, (list, tuple)):
        return f"{value_kind(v)} of {len(v)}"
    return value_kind(v)


def same_structure(saved: Any, live: Any, where: str, *, tensor_device: bool = False) -> None:
    """``saved`` has ``live``'s structure (module docs); a :class:`CheckpointError` names the first difference."""
    if isinstance(live, torch.Tensor):
        if (
            not isinstance(saved, torch.Tensor)
            or saved.shape != live.shape
            or saved.dtype != live.dtype
            or (tensor_device and saved.device != live.device)
        ):
            raise edited(
                where,
                _show(saved),
                f"a tensor of shape {tuple(live.shape)} and dtype {live.dtype}"
                + (f" on {live.device}" if tensor_device else "")
                + " (as the live object holds)",
            )
        return
    if live is None:
        if saved is not None and value_kind(saved) not in ("bool", "number"):
            raise edited(where, _show(saved), "null, a bool or a number (the live value is null)")
        return
    if value_kind(saved) != value_kind(live):
        raise edited(where, _show(saved), f"a {value_kind(live)} (as the live object holds)")
    if isinstance(live, Mapping):
        if set(saved) != set(live):
            raise edited(where, sorted(map(str, saved))[:8], f"the keys {sorted(map(str, live))[:8]}")
        for k in live:
            same_structure(saved[k], live[k], f"{where}.{k}", tensor_device=tensor_device)
    elif isinstance(live, (list, tuple)):
        if len(saved) != len(live):
            raise edited(where, _show(saved), f"{len(live)} entries (as the live object holds)")
        for i, (s, v) in enumerate(zip(saved, live)):
            same_structure(s, v, f"{where}[{i}]", tensor_device=tensor_device)


def same_flags(saved: Mapping[str, Any], live: Mapping[str, Any], where: str) -> None:
    """Boolean group settings (``amsgrad``, ``capturable``, ``maximize``, ``foreach``, ...) equal the live
    ones: they are configuration, which the compatibility contract has already found equal to the saved
    metadata whenever the optimizer is restored, so a differing value in the state is an edit."""
    for k, v in live.items():
        if k != "params" and (isinstance(v, bool) or isinstance(saved.get(k), bool)) and saved.get(k) is not v:
            raise edited(
                f"{where}.{k}",
                saved.get(k),
                f"{v!r} (the live optimizer's setting, which the checkpoint's metadata also records)",
            )


def _zero_grad(opt: torch.optim.Optimizer, p: torch.Tensor) -> torch.Tensor:
    g = torch.zeros_like(p)
    return g.to_sparse() if isinstance(opt, torch.optim.SparseAdam) else g


def _run(
    opt: torch.optim.Optimizer, group: dict[str, Any], scratch: torch.Tensor, state: dict[str, Any] | None
) -> dict[str, Any]:
    """One ``step()`` of ``opt``'s own code on a one-group, one-parameter scratch view; returns the state
    it held before the step (``state`` loaded the way ``load_state_dict`` loads it, or torch's own init)."""
    scratch.grad = _zero_grad(opt, scratch)
    opt.param_groups = [{**group, "params": [scratch]}]
    opt.state = defaultdict(dict)
    if state is not None:
        opt.load_state_dict({"state": {0: state}, "param_groups": [{**group, "params": [0]}]})
        scratch.grad = _zero_grad(opt, scratch)
        loaded = dict(opt.state[opt.param_groups[0]["params"][0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt.step()
    st = opt.state.get(opt.param_groups[0]["params"][0], {})
    return loaded if state is not None else dict(st)


def _clone(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return v.detach().clone()
    if isinstance(v, dict):
        return {k: _clone(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_clone(x) for x in v)
    return v


def _needs_closure(opt: torch.optim.Optimizer) -> bool:
    """Whether ``opt.step`` requires a closure (``LBFGS``): it cannot run on scratch tensors alone."""
    try:
        p = inspect.signature(opt.step).parameters.get("closure")
    except (TypeError, ValueError):
        return False
    return p is not None and p.default is inspect.Parameter.empty


def probe_optimizer(
    opt: torch.optim.Optimizer, ordered: list[dict[str, Any]], current: list[list[str]], state: Mapping[str, Any]
) -> None:
    """Each parameter's saved state under its saved group settings, against torch's own (module docs).
    ``ordered``: the saved group of each live group; ``current``: each live group's parameter names."""
    if _needs_closure(opt):
        return  # LBFGS-like: a step re-evaluates the loss and its state is not per parameter (module docs)
    live_groups, live_state = opt.param_groups, opt.state
    try:
        with unobserved_step(opt), torch.no_grad():
            for gi, (saved_group, live_group, names) in enumerate(zip(ordered, live_groups, current)):
                settings = {k: v for k, v in saved_group.items() if k != "params"}
                for p, name in zip(live_group["params"], names):
                    where = f"optimizer.state.{name}"
                    try:
                        reference = _run(opt, settings, torch.zeros_like(p), None)
                    except Exception as e:
                        raise edited(
                            f"optimizer.param_groups[{gi}]",
                            f"settings torch's step() refuses ({type(e).__name__}: {str(e)[:200]})",
                            "the settings the optimizer was saved with",
                        ) from None
                    if name not in state:
                        continue
                    saved = state[name]
                    if not isinstance(saved, Mapping):
                        raise edited(where, _show(saved), "{key: tensor or number}")
                    try:
                        loaded = _run(opt, settings, torch.zeros_like(p), _clone(dict(saved)))
                    except Exception as e:
                        raise edited(
                            where,
                            f"a state torch's step() refuses ({type(e).__name__}: {str(e)[:200]})",
                            "the state the optimizer's own step() creates for this parameter",
                        ) from None
                    same_structure(loaded, reference, where, tensor_device=True)
    finally:
        opt.param_groups, opt.state = live_groups, live_state


def probe_settings(opt: torch.optim.Optimizer, ordered: list[dict[str, Any]]) -> None:
    """Each saved group's settings through the optimizer class's own constructor (torch's
    optimizers only: ``lr``, ``eps``, ``betas``, ``weight_decay``... in range, a NaN learning rate
    refused), on a one-element scratch parameter of the live group's device and dtype. Settings
    the constructor does not take (``initial_lr``) are left out; a class outside ``torch.optim``
    (its constructor may need more than settings) is not probed."""
    cls = type(opt)
    if not cls.__module__.startswith("torch.optim"):
        return
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):  # pragma: no cover - torch's optimizers have signatures
        return
    takes = {
        n
        for n, q in params.items()
        if n not in ("self", "params") and q.kind in (q.POSITIONAL_OR_KEYWORD, q.KEYWORD_ONLY)
    }
    for gi, (saved_group, live_group) in enumerate(zip(ordered, opt.param_groups)):
        like = live_group["params"][0] if live_group["params"] else torch.zeros(1)
        scratch = torch.zeros(1, device=like.device, dtype=like.dtype, requires_grad=True)
        settings = {k: v for k, v in saved_group.items() if k in takes}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cls([scratch], **settings)
        except Exception as e:
            raise edited(
                f"optimizer.param_groups[{gi}]",
                f"settings {cls.__name__}() refuses ({type(e).__name__}: {str(e)[:200]})",
                "the settings the optimizer was saved with",
            ) from None


def _number(v: Any) -> float | None:
    """``v`` as a float when it is a number (a one-element tensor included), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        return float(v.detach().cpu().item())
    return None


def check_scheduler_values(scheduler: Any, saved: Mapping[str, Any], where: str = "scheduler") -> None:
    """Progress and base-LR values torch's own schedulers can never hold (module docs), in the
    sub-schedulers of ``SequentialLR`` / ``ChainedScheduler`` too; a scheduler class outside
    ``torch.optim`` (the user's own, a subclass included) is not checked."""
    if not type(scheduler).__module__.startswith("torch.optim"):
        return
    subs, saved_subs = scheduler.__dict__.get("_schedulers"), saved.get("_schedulers")
    if isinstance(subs, list) and isinstance(saved_subs, list) and len(subs) == len(saved_subs):
        for i, (sub, sub_saved) in enumerate(zip(subs, saved_subs)):
            if isinstance(sub_saved, Mapping):
                check_scheduler_values(sub, sub_saved, f"{where}._schedulers[{i}]")
    if SCHEDULER_STEP_COUNT in saved:
        v = saved[SCHEDULER_STEP_COUNT]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise edited(f"{where}.{SCHEDULER_STEP_COUNT}", v, "an integer >= 0 (the steps the scheduler counted)")
    if "last_epoch" in saved:
        v, x = saved["last_epoch"], _number(saved["last_epoch"])
        if x is None or not math.isfinite(x) or x < -1:
            raise edited(
                f"{where}.last_epoch", v, "a finite number >= -1 (torch's schedulers start at -1 and count up)"
            )
    if type(scheduler) is torch.optim.lr_scheduler.ReduceLROnPlateau:
        _check_plateau(scheduler, saved, where)
    if "base_lrs" in saved and isinstance(saved["base_lrs"], (list, tuple)):
        for i, v in enumerate(saved["base_lrs"]):
            x = _number(v)
            if x is None or not math.isfinite(x) or x < 0:
                raise edited(
                    f"{where}.base_lrs[{i}]",
                    v,
                    "a finite learning rate >= 0 (each group's initial_lr, which the optimizer's constructor bounds)",
                )


#: ReduceLROnPlateau's constructor arguments, as its ``state_dict()`` names them (``min_lr``: below).
_PLATEAU_SETTINGS = ("mode", "factor", "patience", "threshold", "threshold_mode", "cooldown", "eps")


def _check_plateau(scheduler: Any, saved: Mapping[str, Any], where: str) -> None:
    """``ReduceLROnPlateau``'s saved settings through its own constructor (``mode``,
    ``threshold_mode``, ``factor`` < 1, one ``min_lrs`` entry per group), and the progress values
    its ``step()`` can produce: ``best`` never NaN (it starts at +-inf and only takes a metric that
    compared better, which a NaN never does) and ``num_bad_epochs`` an integer >= 0 (0, counted up,
    reset to 0). Not checked: ``num_bad_epochs`` <= ``patience`` and ``cooldown_counter`` in
    ``[0, cooldown]`` (a loop may change ``patience`` or ``cooldown`` between steps, and a float or
    negative ``cooldown`` is accepted by the constructor and copied into the counter)."""
    groups = len(scheduler.optimizer.param_groups)
    scratch = torch.optim.SGD([{"params": [torch.zeros(1, requires_grad=True)]} for _ in range(groups)], lr=0.0)
    settings = {k: saved[k] for k in _PLATEAU_SETTINGS if k in saved}
    default = saved.get("default_min_lr")
    settings["min_lr"] = default if default is not None else saved.get("min_lrs", 0)
    try:
        torch.optim.lr_scheduler.ReduceLROnPlateau(scratch, **settings)
    except Exception as e:
        raise edited(
            where,
            f"settings ReduceLROnPlateau() refuses ({type(e).__name__}: {str(e)[:200]})",
            "the settings the scheduler was saved with",
        ) from None
    if "best" in saved:
        best = _number(saved["best"])
        if best is None or math.isnan(best):
            raise edited(
                f"{where}.best",
                saved["best"],
                "a number, not NaN (best starts at +-inf and only takes a metric that compared better)",
            )
    if "num_bad_epochs" in saved:
        v = saved["num_bad_epochs"]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise edited(
                f"{where}.num_bad_epochs", v, "an integer >= 0 (the epochs counted since the last improvement)"
            )


def probe_scheduler(scheduler: Any, saved: Any) -> None:
    """The saved scheduler state has the live ``state_dict()``'s structure, values torch's
    schedulers can hold (:func:`check_scheduler_values`) and ``get_lr()`` runs on it."""
    same_structure(saved, scheduler.state_dict(), "scheduler")
    check_scheduler_values(scheduler, saved)
    get_lr = getattr(type(scheduler), "get_lr", None)  # None: a scheduler of the user's own, not torch's
    if get_lr is None or get_lr is torch.optim.lr_scheduler.LRScheduler.get_lr or "_schedulers" in scheduler.__dict__:
        return  # no closed form to run (ReduceLROnPlateau), or sub-schedulers a load would change in place
    scratch = copy.copy(scheduler)
    scratch.__dict__ = dict(scheduler.__dict__)
    if isinstance(scratch.__dict__.get("lr_lambdas"), list):  # LambdaLR loads a callable object's state into it
        scratch.lr_lambdas = [copy.copy(f) for f in scratch.lr_lambdas]
    try:
        scratch.load_state_dict(_clone(dict(saved)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scratch.get_lr()
    except Exception as e:
        raise edited(
            "scheduler",
            f"a state torch's scheduler refuses ({type(e).__name__}: {str(e)[:200]})",
            "the state the scheduler saved",
        ) from None
