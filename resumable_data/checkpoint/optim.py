"""Optimizer state keyed by parameter fully qualified names (FQNs), not by list position.

torch's ``Optimizer.state_dict()`` numbers parameters by their position in the param groups, so
a process that builds its parameters or groups in another order silently restores the wrong
moments. This module writes ``{"state": {fqn: {...}}, "param_groups": [{settings, "params":
[fqn, ...]}]}`` (the layout of ``torch.distributed.checkpoint.state_dict.get_optimizer_state_dict``)
and, on load, matches every current group to the saved group holding the same set of names,
then hands torch a state dict numbered in the *current* order.

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

__all__ = ["group_settings", "load_optimizer_state", "optimizer_state", "param_fqns"]

K_STATE = "state"
K_GROUPS = "param_groups"
K_PARAMS = "params"


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
