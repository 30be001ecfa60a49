"""checkpoint/optim.py: FQN-keyed optimizer state, restored by parameter name whatever the
construction order (the AMP helper, codec, metric log, inventory and CLI tests that shared this
file, once ``test_units.py``, are in test_amp, test_codec, test_metrics, test_inventory and
test_cli_inspect_checkpoint)."""

from __future__ import annotations

import pytest
import torch

import resumable_data as rd
from resumable_data.checkpoint import codec
from resumable_data.checkpoint.optim import load_optimizer_state, optimizer_state, param_fqns


class Two(torch.nn.Module):
    def __init__(self, order="ab"):
        super().__init__()
        for name in order:  # registration order differs between processes
            setattr(self, name, torch.nn.Linear(3, 3))


def _adam(model, reverse=False):
    groups = [{"params": list(model.a.parameters()), "lr": 0.1}, {"params": list(model.b.parameters()), "lr": 0.2}]
    if reverse:
        groups = [{"params": list(reversed(g["params"])), "lr": g["lr"]} for g in reversed(groups)]
    return torch.optim.Adam(groups)


def test_optimizer_state_is_restored_by_name_whatever_the_construction_order():
    torch.manual_seed(0)
    m = Two("ab")
    opt = _adam(m)
    for _ in range(3):
        (m.a(torch.ones(1, 3)).sum() * 2 + m.b(torch.ones(1, 3)).sum()).backward()
        opt.step()
    saved = codec.decode(*codec.encode(optimizer_state(opt, param_fqns(("", m)))))
    m2 = Two("ba")
    m2.load_state_dict(m.state_dict())
    opt2 = _adam(m2, reverse=True)
    load_optimizer_state(opt2, param_fqns(("", m2)), saved)
    for name, p in m.named_parameters():
        q = dict(m2.named_parameters())[name]
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(opt.state[p][k], opt2.state[q][k]), (name, k)
    assert {g["lr"] for g in opt2.param_groups if any(p is m2.a.weight for p in g["params"])} == {0.1}
    # a different partition into groups is refused with the fix
    opt3 = torch.optim.Adam(m2.parameters())
    with pytest.raises(rd.CompatibilityError, match="same partition of parameters"):
        load_optimizer_state(opt3, param_fqns(("", m2)), saved)
