"""Undo actions: how a failed restore puts every training object back as it was.

Algorithm. An undo is a closure taken before anything changes; calling it puts one object back.

* :func:`module_undo`: a ``torch.nn.Module``'s parameters and buffers (detached copies, put back
  with ``load_state_dict(strict=True)``), each parameter's ``.grad`` (the reference) and every
  submodule's ``training`` flag.
* :func:`stateful_undo`: an object with ``state_dict()`` / ``load_state_dict()`` (scheduler,
  scaler, callback, EMA object): a deep copy of its ``state_dict()`` loaded back where its
  ``load_state_dict`` accepts it, then its attributes (a shallow copy of ``__dict__``) and their
  tensors' values (copies), so the object is exact even where its ``load_state_dict`` refuses or
  is not exact.
* :func:`snapshot`: the undos for everything :mod:`.restore`'s apply phase can change in an
  :class:`rd.TrainingState`: model and EMA (:func:`module_undo`), the optimizer (its ``state`` and
  ``param_groups`` objects and each entry's items: ``load_state_dict`` replaces them), scheduler,
  scaler and callbacks (:func:`stateful_undo`), the loader (its ``undo_point``), every global
  generator (:func:`.rng.capture`), the lineage fields, the accumulation window's start (the
  caller's undo maker) and the metric log's attributes.
* :func:`rollback`: every undo, last first; one that raises does not stop the others, and the
  failures are reported together in one :class:`CheckpointError`.

Guarantee: after :func:`rollback` the objects hold the values, gradients, modes, optimizer state
objects, generator states, loader cursor and lineage they held at :func:`snapshot`; a rollback
that cannot complete says so (an rd error naming the failures), never silently.
``rd.load_checkpoint`` uses :func:`module_undo` / :func:`stateful_undo` for an object that is not
a TrainingState. Internal: not part of the ``rd`` API.

Cost: one copy of the parameters and buffers (and of an EMA module), deep copies of the other objects'
``state_dict()``, references for the rest; no tensor is copied twice.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from resumable_data.checkpoint import rng as rng_mod
from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.errors import describe

__all__ = ["copy_module_state", "module_undo", "rollback", "snapshot", "stateful_undo"]


def copy_module_state(m: torch.nn.Module, skip: Any = ()) -> dict[str, Any]:
    """A copy of ``m.state_dict()`` but the keys in ``skip``: tensors cloned, anything else (a
    module's ``get_extra_state()``, any picklable object) deep-copied."""
    return {
        k: v.detach().clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)
        for k, v in m.state_dict().items()
        if k not in skip
    }


def module_undo(m: torch.nn.Module) -> Callable[[], None]:
    """An undo that puts back a module's parameters and buffers (copies), extra states
    (``get_extra_state()``: deep copies), gradients and modes."""
    values = copy_module_state(m)
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


def snapshot(ts: Any, keep_window: Callable[[], Callable[[], None]]) -> list[Callable[[], None]]:
    """Undo actions (run in reverse order) for everything the restore's apply phase can change in the
    training state ``ts``; ``keep_window``: an undo maker for the accumulation window's start snapshot."""
    undo: list[Callable[[], None]] = []

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
    undo.append(keep_window())
    if ts.metrics is not None:
        metrics, mattrs = ts.metrics, dict(ts.metrics.__dict__)

        def back_metrics() -> None:
            metrics.__dict__.clear()
            metrics.__dict__.update(mattrs)

        undo.append(back_metrics)
    return undo


def rollback(undo: list[Callable[[], None]]) -> None:
    """Run every undo of :func:`snapshot`, last first; all of them run even if one raises."""
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
