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
(``get_optimizer_state_dict`` / ``set_optimizer_state_dict``: torch's FQNs, so a DDP wrapper's
``module.`` prefix is dropped) made *dense*: DCP loads into a pre-shaped target, so every parameter
presents its state tensors even before its first update. Tested: one process and DDP (gloo). Not
handled here: FSDP / DTensor parameters (the oracles hash local tensors); with FSDP2, checkpoint
``get_state_dict`` / ``set_state_dict`` beside the loader in the same DCP call (README, "FSDP2").

Placeholders. A parameter without state gets zero placeholders shaped by one ``step()`` on zero
gradients of exactly those parameters, with every group's ``lr`` set to zero (a ``None`` LR is left
``None``); its name is listed under ``"stateless"`` so the restore drops the placeholders again (a
first ``step()`` from no state is not always a step from zero state, e.g. SGD momentum with
dampening). Around that step the optimizer is left exactly as it was: the parameters' values (copied
back, for optimizers whose update ignores the LR; cost: a transient copy of those parameters), every
``.grad``, every group's keys and values, the ``_opt_called`` flag an LR scheduler sets, and the
optimizer's own step hooks (``register_step_pre_hook`` / ``register_step_post_hook`` are detached
for that call). Global hooks (``torch.optim.optimizer.register_optimizer_step_*_hook``) are not
detached and do see it. The step runs once per ``dense_optimizer_state`` call that finds parameters
without state (the save, and the target ``dcp.load`` builds); restoring and verifying never step:
torch's own ``_init_optim_state`` step is pre-empted by presenting state for every parameter.
Refused: an optimizer whose ``step()`` cannot run that way, e.g. ``LBFGS`` (it needs a closure and
keeps its state, whose length grows with the iterations, on the first parameter only): the DCP
layout cannot pre-shape it; ``rd.save_checkpoint`` (single process) stores it.

Guarantee: moments, step counters and group settings land on the parameter with the same name,
whatever the construction order. Refused (``CompatibilityError``): a parameter the model does
not name, a group whose name set has no saved counterpart. Cost: one dict pass; tensors are
handed to ``Optimizer.load_state_dict`` (which copies them to the parameter's device/dtype).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from resumable_data.checkpoint.errors import CheckpointError, CompatibilityError
from resumable_data.checkpoint.torch_compat import unobserved_step
from resumable_data.errors import describe

__all__ = [
    "dense_optimizer_state",
    "group_fqns",
    "group_settings",
    "load_dense_optimizer_state",
    "load_optimizer_state",
    "match_groups",
    "optimizer_state",
    "param_fqns",
]

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


def group_fqns(optimizer: torch.optim.Optimizer, names: dict[int, str]) -> list[list[str]]:
    groups = []
    for gi, g in enumerate(optimizer.param_groups):
        fq = []
        for p in g[K_PARAMS]:
            if id(p) not in names:
                raise CheckpointError(
                    describe(
                        f"optimizer.param_groups[{gi}]",
                        f"a parameter of shape {tuple(p.shape)}",
                        "only parameters of the model",
                        "build the optimizer from model.parameters()",
                    )
                )
            fq.append(names[id(p)])
        groups.append(fq)
    return groups


def optimizer_state(optimizer: torch.optim.Optimizer, names: dict[int, str]) -> dict[str, Any]:
    """FQN-keyed optimizer state (tensors are the optimizer's own; encode copies them)."""
    groups = group_fqns(optimizer, names)
    state = {}
    for g, fq in zip(optimizer.param_groups, groups):
        for p, name in zip(g[K_PARAMS], fq):
            if optimizer.state.get(p):
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


def group_settings(
    optimizer: torch.optim.Optimizer, names: dict[int, str], built_lrs: list[Any] | None = None
) -> list[dict[str, Any]]:
    """Per-group settings for metadata, order-free: groups sorted by their first name, names sorted.

    ``lr`` is the group's base LR: ``initial_lr`` when a scheduler set one, else the group's LR
    when the training state was built (``built_lrs``, by group index), else its current LR. The
    current LR is progress, not configuration: a loop that sets it by hand every iteration
    (nanoGPT's ``param_group['lr'] = get_lr(it)``) resumes with the LR it was built with."""
    out = []
    for i, (g, fq) in enumerate(zip(optimizer.param_groups, group_fqns(optimizer, names))):
        d = {k: _plain(v) for k, v in g.items() if k not in (K_PARAMS, "lr", "initial_lr")}
        built = built_lrs[i] if built_lrs is not None and i < len(built_lrs) else g.get("lr")
        d["base_lr"] = _plain(g.get("initial_lr", built))
        d[K_PARAMS] = sorted(fq)
        out.append(d)
    return sorted(out, key=lambda d: d[K_PARAMS][0] if d[K_PARAMS] else "")


def load_optimizer_state(optimizer: torch.optim.Optimizer, names: dict[int, str], saved: Any) -> None:
    """Restore :func:`optimizer_state`'s output into ``optimizer`` by name; validates first."""
    if not isinstance(saved, dict) or set(saved) != {K_STATE, K_GROUPS}:
        raise CheckpointError(
            describe(
                "optimizer",
                type(saved).__name__,
                "{'state': ..., 'param_groups': ...}",
                "pass an unmodified checkpoint",
            )
        )
    current = group_fqns(optimizer, names)
    ordered = match_groups(current, saved)
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


def match_groups(current: list[list[str]], saved: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The saved group holding exactly each current group's names; refuses any mismatch."""
    by_set: dict[frozenset[str], dict[str, Any]] = {}
    for g in saved[K_GROUPS]:
        by_set[frozenset(g[K_PARAMS])] = g
    problems = []
    ordered: list[dict[str, Any]] = []
    for gi, fq in enumerate(current):
        g = by_set.get(frozenset(fq))
        if g is None:
            problems.append(
                f"optimizer.param_groups[{gi}] holds {sorted(fq)[:6]}{'...' if len(fq) > 6 else ''}, "
                "which no saved group holds exactly"
            )
        else:
            ordered.append(g)
    known = set().union(*current) if current else set()
    extra = sorted(set(saved[K_STATE]) - known)
    if extra:
        problems.append(f"saved optimizer state for parameters this optimizer does not hold: {extra[:6]}")
    if problems:
        raise CompatibilityError(
            "cannot restore the optimizer by parameter name:\n  - "
            + "\n  - ".join(problems)
            + "\nfix: build the optimizer with the same partition of parameters into groups (the order does not matter), "
            "or resume with label='optimizer_reset'"
        )
    return ordered


def _placeholders(optimizer: torch.optim.Optimizer, missing: list[torch.Tensor]) -> dict[torch.Tensor, dict[str, Any]]:
    """Zero tensors shaped like the state ``step()`` creates for ``missing``; the optimizer, the
    parameters and their gradients are left exactly as they were (module docs)."""
    params = [p for g in optimizer.param_groups for p in g[K_PARAMS]]
    want = {id(p) for p in missing}
    grads = [p.grad for p in params]
    values = [p.data.clone() for p in missing]
    groups = [dict(g) for g in optimizer.param_groups]
    out: dict[torch.Tensor, dict[str, Any]] = {}
    with unobserved_step(optimizer):  # no hooks, no scheduler flag
        try:
            _step_on_zero_grads(optimizer, params, want, missing, out)
        finally:
            for p in missing:
                optimizer.state.pop(p, None)
            with torch.no_grad():
                for p, v in zip(missing, values):
                    p.data.copy_(v)
            for p, g in zip(params, grads):
                p.grad = g
            for g, before in zip(optimizer.param_groups, groups):
                for k in [k for k in g if k not in before]:
                    del g[k]
                g.update(before)
    return out


def _step_on_zero_grads(
    optimizer: torch.optim.Optimizer,
    params: list[torch.Tensor],
    want: set[int],
    missing: list[torch.Tensor],
    out: dict[torch.Tensor, dict[str, Any]],
) -> None:
    """One ``step()`` at LR 0 on zero gradients of ``missing`` only; zero copies of the state it
    creates go to ``out`` (the caller restores everything else)."""
    for p in params:
        p.grad = torch.zeros_like(p) if id(p) in want else None
    for g in optimizer.param_groups:
        if g.get("lr") is not None:
            g["lr"] = torch.zeros_like(g["lr"]) if isinstance(g["lr"], torch.Tensor) else 0.0
    try:
        optimizer.step()
    except Exception as e:  # an optimizer whose step() needs a closure, for instance
        name = f"{type(optimizer).__module__}.{type(optimizer).__qualname__}"
        raise CheckpointError(
            describe(
                "optimizer",
                name,
                "an optimizer whose per-parameter state can be initialized by step() without a closure "
                f"(the torch.distributed.checkpoint layout pre-shapes every parameter's state; {name}.step() "
                f"raised {type(e).__name__}: {e})",
                "in a single process, save with rd.save_checkpoint / rd.load_checkpoint (stores only the state "
                "that exists); with several ranks, use an optimizer whose step() runs without a closure",
            )
        ) from e
    for p in missing:
        st = optimizer.state.get(p)
        if st:
            out[p] = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else v for k, v in st.items()}


def _torch_layout(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, fill: dict[torch.Tensor, dict[str, Any]]
) -> dict[str, Any]:
    """``get_optimizer_state_dict`` with ``fill`` installed for the parameters lacking state. Every
    parameter then presents state, so torch's ``_init_optim_state`` never steps; ``{}`` entries only
    name the parameter and are dropped from the result."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    added = []
    for p, st in fill.items():
        if not optimizer.state.get(p):
            optimizer.state[p] = st
            added.append(p)
    try:
        osd = get_optimizer_state_dict(model, optimizer)
    finally:
        for p in added:
            optimizer.state.pop(p, None)
    state: Any = osd[K_STATE]  # torch types the whole dict loosely: per-parameter dicts here
    groups: Any = osd[K_GROUPS]
    return {K_STATE: {k: dict(v) for k, v in state.items() if v}, K_GROUPS: [dict(g) for g in groups]}


def dense_optimizer_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, placeholders: bool = True
) -> dict[str, Any]:
    """torch's FQN layout (``get_optimizer_state_dict``) with every parameter's state present (see the
    module docs): ``{"state", "param_groups", "stateless": [fqn, ...]}``. Tensors are the optimizer's own
    (DCP saves them, and loads into them in place); placeholders are new zero tensors.

    ``placeholders=False``: the same names and groups without stepping; ``state`` holds only the state
    that exists (what the oracles digest: verification, group names)."""
    params = [p for g in optimizer.param_groups for p in g[K_PARAMS]]
    missing = [p for p in params if not optimizer.state.get(p)]
    ph = _placeholders(optimizer, missing) if missing and placeholders else {}
    osd = _torch_layout(model, optimizer, {p: ph.get(p, {}) for p in missing})
    names = [n for g in osd[K_GROUPS] for n in g[K_PARAMS]]
    if len(names) != len(params):  # pragma: no cover - torch names every parameter of every group
        raise CheckpointError(
            describe(
                "optimizer",
                f"{len(params)} parameters",
                "one torch FQN per parameter",
                "build the optimizer from model.parameters()",
            )
        )
    missing_ids = {id(p) for p in missing}
    stateless = sorted(n for n, p in zip(names, params) if id(p) in missing_ids)
    return {K_STATE: osd[K_STATE], K_GROUPS: osd[K_GROUPS], K_STATELESS: stateless}


def load_dense_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, saved: Any) -> None:
    """Restore :func:`dense_optimizer_state`'s output by name (``set_optimizer_state_dict``), then drop
    the placeholders of parameters that had no state; validates the group partition first."""
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    if not isinstance(saved, dict) or set(saved) != {K_STATE, K_GROUPS, K_STATELESS}:
        raise CheckpointError(
            describe(
                "optimizer",
                type(saved).__name__,
                "{'state': ..., 'param_groups': ..., 'stateless': [...]}",
                "pass an unmodified checkpoint",
            )
        )
    params = [p for g in optimizer.param_groups for p in g[K_PARAMS]]
    current = dense_optimizer_state(model, optimizer, placeholders=False)[K_GROUPS]
    names = [n for g in current for n in g[K_PARAMS]]
    groups = [list(g[K_PARAMS]) for g in current]
    ordered = match_groups(groups, saved)
    missing_state = sorted(set(names) - set(saved[K_STATE]) - set(saved[K_STATELESS]))
    if missing_state:
        raise CheckpointError(
            describe(
                "optimizer.state",
                f"no entry for {missing_state[:6]}",
                "an entry for every parameter (the DCP layout is dense)",
                "pass an unmodified checkpoint",
            )
        )
    if saved[K_STATE]:
        # every parameter presents state (a no-op entry where it has none), so torch's _init_optim_state
        # does not step; load_state_dict replaces the whole state
        probes: dict[torch.Tensor, dict[str, Any]] = {p: {} for p in params if not optimizer.state.get(p)}
        optimizer.state.update(probes)
        try:
            set_optimizer_state_dict(
                model, optimizer, optim_state_dict={K_STATE: saved[K_STATE], K_GROUPS: saved[K_GROUPS]}
            )
        finally:
            for p, probe in probes.items():
                if optimizer.state.get(p) is probe:
                    optimizer.state.pop(p, None)
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
