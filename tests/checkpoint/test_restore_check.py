"""The restore's validation phase (``checkpoint/restore_check.py``) on its own: an honest state passes
and reports what the apply phase needs, a malformed or edited one is refused with an rd error, and
validating changes no object (the all-or-nothing loads of whole checkpoints: test_restore.py)."""

from __future__ import annotations

import copy

import pytest
import torch

import resumable_data as rd
from resumable_data.checkpoint.keys import K_GRADIENTS, K_MODEL
from resumable_data.checkpoint.meta import CheckpointMeta
from resumable_data.checkpoint.restore_check import Facts, validate
from resumable_data.checkpoint.state import RESTORES
from resumable_data.labels import RecoveryLabel


def _trained():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ts = rd.TrainingState(model=model, optimizer=opt)
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
    return ts


def _validate(ts, state):
    hooks = ts._restore_hooks()
    return validate(
        ts,
        state,
        RESTORES[RecoveryLabel.FAITHFUL_CONTINUATION],
        names=hooks.names,
        tree_oracles=hooks.tree_oracles,
        dcp=False,
        loader_options={},
        saved_meta=CheckpointMeta.from_dict(state["meta"], "saved meta"),
    )


def _fingerprint(ts) -> list:
    return [copy.deepcopy(ts.model.state_dict()), copy.deepcopy(ts.optimizer.state_dict())]


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_an_honest_state_passes_and_nothing_changes():
    ts = _trained()
    state = ts.file_state_dict()
    before = _fingerprint(ts)
    assert _validate(ts, state) == Facts(uncommitted=0, fresh_data=None)
    assert _same(before, _fingerprint(ts))


def test_a_malformed_tree_is_an_rd_error_naming_it():
    ts = _trained()
    state = dict(ts.file_state_dict())
    del state[K_GRADIENTS]  # a KeyError inside: wrapped, not leaked
    before = _fingerprint(ts)
    with pytest.raises(rd.CheckpointError, match=r"state.*malformed \(KeyError"):
        _validate(ts, state)
    assert _same(before, _fingerprint(ts))


def test_a_tree_edited_after_the_save_is_refused_by_its_oracles():
    ts = _trained()
    state = dict(ts.file_state_dict())
    model = {k: v.clone() for k, v in state[K_MODEL].items()}
    next(iter(model.values()))[0] += 1.0  # same shapes: only the oracle can tell
    state[K_MODEL] = model
    before = _fingerprint(ts)
    with pytest.raises(rd.CheckpointError, match=r"oracles \['parameters'\]"):
        _validate(ts, state)
    assert _same(before, _fingerprint(ts))
