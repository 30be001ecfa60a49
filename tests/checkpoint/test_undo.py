"""Undo actions (``checkpoint/undo.py``): each puts one object back exactly, and a rollback runs every
undo even when one fails (whole-checkpoint rollbacks: test_restore.py, test_load.py)."""

from __future__ import annotations

import pytest
import torch

import resumable_data as rd
from resumable_data.checkpoint.undo import module_undo, rollback, stateful_undo


def test_module_undo_puts_back_values_gradients_and_modes():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
    m(torch.randn(4, 3)).sum().backward()
    m[1].eval()
    values = {k: v.clone() for k, v in m.state_dict().items()}
    grads = [p.grad for p in m.parameters()]
    back = module_undo(m)
    with torch.no_grad():
        for v in m.state_dict().values():
            v.add_(1)
    for p in m.parameters():
        p.grad = None
    m.train()
    back()
    assert all(torch.equal(values[k], v) for k, v in m.state_dict().items())
    assert all(p.grad is g for p, g in zip(m.parameters(), grads))  # the same gradient objects
    assert [x.training for x in m.modules()] == [True, True, False]


class Refusing:
    """A stateful object whose load_state_dict refuses everything (the undo must not rely on it)."""

    def __init__(self):
        self.n = 1
        self.t = torch.zeros(3)

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, s):
        raise RuntimeError("refused")


def test_stateful_undo_is_exact_when_load_state_dict_refuses():
    obj = Refusing()
    t = obj.t
    back = stateful_undo(obj)
    obj.n, obj.extra = 5, "new"
    t.add_(2)  # in place: the attribute is the same tensor
    back()
    assert vars(obj).keys() == {"n", "t"} and obj.n == 1
    assert obj.t is t and torch.equal(t, torch.zeros(3))


def test_rollback_runs_every_undo_last_first_and_reports_failures():
    ran = []

    def failing():
        ran.append("failing")
        raise ValueError("cannot")

    with pytest.raises(rd.CheckpointError, match=r"rollback.*ValueError: cannot"):
        rollback([lambda: ran.append("first"), failing, lambda: ran.append("last")])
    assert ran == ["last", "failing", "first"]
    ran.clear()
    rollback([lambda: ran.append("a"), lambda: ran.append("b")])
    assert ran == ["b", "a"]
