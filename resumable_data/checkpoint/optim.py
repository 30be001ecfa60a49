"""Optimizer state keyed by parameter fully qualified names (FQNs), not by list position.

torch's ``Optimizer.state_dict()`` numbers parameters by their position in the param groups, so
a process that builds its parameters or groups in another order silently restores the wrong
moments. This module writes ``{"state": {fqn: {...}}, "param_groups": [{settings, "params":
[fqn, ...]}]}`` (the layout of ``torch.distributed.checkpoint.state_dict.get_optimizer_state_dict``)
and, on load, matches every current group to the saved group holding the same set of names,
then hands torch a state dict numbered in the *current* order.

Two layouts. The checkpoint files (:func:`optimizer_state` / :func:`load_optimizer_state`) hold
only the state that exists, named by ``model.named_parameters()``. The ``torch.distributed.checkpoint``
layout (:func:`dense_optimizer_state` / :func:`load_dense_optimizer_state`) is torch's own
(``get_optimizer_state_dict`` / ``set_optimizer_state_dict``, so DDP/FSDP names and sharded
moments are handled by torch) made *dense*: DCP loads into a pre-shaped target, so every parameter
presents its state tensors even before its first update. A parameter without state gets zero
placeholders shaped by a zero-LR ``step()`` on zero gradients of exactly those parameters (the
optimizer, the parameters, their gradients and the LR are left as they were; optimizer step hooks
do see that call), and its name is listed under ``"stateless"`` so the restore drops the
placeholders again (a first ``step()`` from no state is not always a step from zero state, e.g.
SGD momentum with dampening).

Guarantee: moments, step counters and group settings land on the parameter with the same name,
whatever the construction order. Refused (``CompatibilityError``): a parameter the model does
not name, a group whose name set has no saved counterpart. Cost: one dict pass; tensors are
handed to ``Optimizer.load_state_dict`` (which copies them to the parameter's device/dtype).
"""

from __future__ import annotations

from typing import Any

import torch

from resumable_data.checkpoint.errors import CheckpointError, CompatibilityError
from resumable_data.errors import describe

__all__ = ["dense_optimizer_state", "group_settings", "load_dense_optimizer_state", "load_optimizer_state",
           "optimizer_state", "param_fqns"]

K_STATE = "state"
K_GROUPS = "param_groups"
K_PARAMS = "params"
K_STATELESS = "stateless"


def param_fqns(*modules: tuple[str, torch.nn.Module]) -> dict[int, str]:
    """``id(parameter) -> fqn`` over ``(prefix, module)`` pairs; tied parameters keep their first name."""
    out: dict[int, str] = {}
    for prefix, module in modules:
        for name, p in module.named_parameters():
            out.setdefault(id(p), prefix + name)
    return out


def _group_fqns(optimizer: torch.optim.Optimizer, names: dict[int, str]) -> list[list[str]]:
    groups = []
    for gi, g in enumerate(optimizer.param_groups):
        fq = []
        for p in g[K_PARAMS]:
            if id(p) not in names:
                raise CheckpointError(describe(f"optimizer.param_groups[{gi}]", f"a parameter of shape {tuple(p.shape)}",
                                               "only parameters of the model", "build the optimizer from model.parameters()"))
            fq.append(names[id(p)])
        groups.append(fq)
    return groups


def optimizer_state(optimizer: torch.optim.Optimizer, names: dict[int, str]) -> dict[str, Any]:
    """FQN-keyed optimizer state (tensors are the optimizer's own; encode copies them)."""
    groups = _group_fqns(optimizer, names)
    state = {}
    for g, fq in zip(optimizer.param_groups, groups):
        for p, name in zip(g[K_PARAMS], fq):
            if p in optimizer.state and optimizer.state[p]:
                state[name] = dict(optimizer.state[p])
    pgs = []
    for g, fq in zip(optimizer.param_groups, groups):
        d = {k: v for k, v in g.items() if k != K_PARAMS}
        d[K_PARAMS] = fq
        pgs.append(d)
    return {K_STATE: state, K_GROUPS: pgs}


def _plain(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return v.item() if v.numel() == 1 else v.tolist()
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return repr(v)


def group_settings(optimizer: torch.optim.Optimizer, names: dict[int, str]) -> list[dict[str, Any]]:
    """Per-group settings for metadata, order-free: groups sorted by their first name, names sorted.

    ``lr`` is the group's base LR (``initial_lr`` when a scheduler set one): the current LR is
    progress, not configuration."""
    out = []
    for g, fq in zip(optimizer.param_groups, _group_fqns(optimizer, names)):
        d = {k: _plain(v) for k, v in g.items() if k not in (K_PARAMS, "lr", "initial_lr")}
        d["base_lr"] = _plain(g.get("initial_lr", g.get("lr")))
        d[K_PARAMS] = sorted(fq)
        out.append(d)
    return sorted(out, key=lambda d: d[K_PARAMS][0] if d[K_PARAMS] else "")


def load_optimizer_state(optimizer: torch.optim.Optimizer, names: dict[int, str], saved: Any) -> None:
    """Restore :func:`optimizer_state`'s output into ``optimizer`` by name; validates first."""
    if not isinstance(saved, dict) or set(saved) != {K_STATE, K_GROUPS}:
        raise CheckpointError(describe("optimizer", type(saved).__name__, "{'state': ..., 'param_groups': ...}",
                                       "pass an unmodified checkpoint"))
    current = _group_fqns(optimizer, names)
    ordered = _match_groups(current, saved)
    torch_groups, torch_state, index = [], {}, 0
    for g, fq in zip(ordered, current):
        d = {k: v for k, v in g.items() if k != K_PARAMS}
        ids = []
        for name in fq:
            if name in saved[K_STATE]:
                torch_state[index] = saved[K_STATE][name]
            ids.append(index)
            index += 1
        d[K_PARAMS] = ids
        torch_groups.append(d)
    optimizer.load_state_dict({K_STATE: torch_state, K_GROUPS: torch_groups})


def _match_groups(current: list[list[str]], saved: dict[str, Any]) -> list[dict[str, Any]]:
    """The saved group holding exactly each current group's names; refuses any mismatch."""
    by_set: dict[frozenset[str], dict[str, Any]] = {}
    for g in saved[K_GROUPS]:
        by_set[frozenset(g[K_PARAMS])] = g
    problems = []
    ordered = []
    for gi, fq in enumerate(current):
        g = by_set.get(frozenset(fq))
        if g is None:
            problems.append(f"optimizer.param_groups[{gi}] holds {sorted(fq)[:6]}{'...' if len(fq) > 6 else ''}, "
                            "which no saved group holds exactly")
        ordered.append(g)
    known = set().union(*current) if current else set()
    extra = sorted(set(saved[K_STATE]) - known)
    if extra:
        problems.append(f"saved optimizer state for parameters this optimizer does not hold: {extra[:6]}")
    if problems:
        raise CompatibilityError(
            "cannot restore the optimizer by parameter name:\n  - " + "\n  - ".join(problems)
            + "\nfix: build the optimizer with the same partition of parameters into groups (the order does not matter), "
            "or resume with label='optimizer_reset'"
        )
    return ordered


def _placeholders(optimizer: torch.optim.Optimizer, missing: list[torch.Tensor]) -> dict[torch.Tensor, dict[str, Any]]:
    """Zero tensors shaped like the state ``step()`` creates for ``missing``; the optimizer is left as it was."""
    params = [p for g in optimizer.param_groups for p in g[K_PARAMS]]
    want = {id(p) for p in missing}
    grads = [p.grad for p in params]
    lrs = [g.get("lr") for g in optimizer.param_groups]
    flags = {k: optimizer.__dict__[k] for k in ("_opt_called",) if k in optimizer.__dict__}
    out: dict[torch.Tensor, dict[str, Any]] = {}
    try:
        for p in params:
            p.grad = torch.zeros_like(p) if id(p) in want else None
        for g in optimizer.param_groups:
            if "lr" in g:
                g["lr"] = torch.zeros_like(g["lr"]) if isinstance(g["lr"], torch.Tensor) else 0.0
        optimizer.step()
        for p in missing:
            st = optimizer.state.get(p)
            if st:
                out[p] = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else v for k, v in st.items()}
    except Exception as e:  # noqa: BLE001 - an optimizer whose step() needs a closure, for instance
        raise CheckpointError(describe("optimizer", type(optimizer).__name__,
                                       "an optimizer whose step() runs without a closure (its state is shaped by one "
                                       "zero-LR step for torch.distributed.checkpoint)",
                                       f"take one real step before saving, or save with rd.save_checkpoint ({e})")) from None
    finally:
        for p in missing:
            optimizer.state.pop(p, None)
        for p, g in zip(params, grads):
            p.grad = g
        for g, lr in zip(optimizer.param_groups, lrs):
            if lr is not None:
                g["lr"] = lr
        optimizer.__dict__.update(flags)
    return out


def dense_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """torch's FQN layout (``get_optimizer_state_dict``) with every parameter's state present (see the
    module docs): ``{"state", "param_groups", "stateless": [fqn, ...]}``. Tensors are the optimizer's own
    (DCP saves them, and loads into them in place); placeholders are new zero tensors."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    params = [p for g in optimizer.param_groups for p in g[K_PARAMS]]
    missing = [p for p in params if not optimizer.state.get(p)]
    ph = _placeholders(optimizer, missing) if missing else {}
    for p, st in ph.items():
        optimizer.state[p] = st
    try:
        osd = get_optimizer_state_dict(model, optimizer)
    finally:
        for p in ph:
            optimizer.state.pop(p, None)
    names = [n for g in osd[K_GROUPS] for n in g[K_PARAMS]]
    if len(names) != len(params):  # pragma: no cover - torch names every parameter of every group
        raise CheckpointError(describe("optimizer", f"{len(params)} parameters", "one torch FQN per parameter",
                                       "build the optimizer from model.parameters()"))
    missing_ids = {id(p) for p in missing}
    stateless = sorted(n for n, p in zip(names, params) if id(p) in missing_ids)
    return {K_STATE: {k: dict(v) for k, v in osd[K_STATE].items()},
            K_GROUPS: [dict(g) for g in osd[K_GROUPS]], K_STATELESS: stateless}


def load_dense_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, saved: Any) -> None:
    """Restore :func:`dense_optimizer_state`'s output by name (``set_optimizer_state_dict``), then drop
    the placeholders of parameters that had no state; validates the group partition first."""
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    if not isinstance(saved, dict) or set(saved) != {K_STATE, K_GROUPS, K_STATELESS}:
        raise CheckpointError(describe("optimizer", type(saved).__name__,
                                       "{'state': ..., 'param_groups': ..., 'stateless': [...]}",
                                       "pass an unmodified checkpoint"))
    params = [p for g in optimizer.param_groups for p in g[K_PARAMS]]
    current = dense_optimizer_state(model, optimizer)[K_GROUPS]
    names = [n for g in current for n in g[K_PARAMS]]
    groups = [list(g[K_PARAMS]) for g in current]
    ordered = _match_groups(groups, saved)
    missing_state = sorted(set(names) - set(saved[K_STATE]) - set(saved[K_STATELESS]))
    if missing_state:
        raise CheckpointError(describe("optimizer.state", f"no entry for {missing_state[:6]}",
                                       "an entry for every parameter (the DCP layout is dense)",
                                       "pass an unmodified checkpoint"))
    if saved[K_STATE]:
        set_optimizer_state_dict(model, optimizer,
                                 optim_state_dict={K_STATE: saved[K_STATE], K_GROUPS: saved[K_GROUPS]})
    else:  # a stateless optimizer (plain SGD): group settings only, matched by name
        torch_groups, index = [], 0
        for g, fq in zip(ordered, groups):
            d = {k: v for k, v in g.items() if k != K_PARAMS}
            d[K_PARAMS] = list(range(index, index + len(fq)))
            index += len(fq)
            torch_groups.append(d)
        optimizer.load_state_dict({K_STATE: {}, K_GROUPS: torch_groups})
    by_name = dict(zip(names, params))
    for n in saved[K_STATELESS]:
        if n in by_name:
            optimizer.state.pop(by_name[n], None)
