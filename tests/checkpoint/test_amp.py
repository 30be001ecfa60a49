"""checkpoint/amp.py: ``rd.scaler_step`` reports an AMP update skipped on inf/nan gradients."""

from __future__ import annotations

import torch

import resumable_data as rd


def test_scaler_step_reports_skipped_updates():
    m = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    loader_applied = []
    for poison in (False, True, False):
        opt.zero_grad()
        scaler.scale(m(torch.ones(1, 2)).sum()).backward()
        if poison:
            m.weight.grad[0, 0] = float("nan")
        before = m.weight.detach().clone()
        applied = rd.scaler_step(scaler, opt)
        loader_applied.append(applied)
        assert applied == (not torch.equal(before, m.weight.detach()))
    assert loader_applied == [True, False, True]
    assert rd.checkpoint.step_was_applied(8.0, 4.0) is False and rd.checkpoint.step_was_applied(8.0, 8.0) is True
    assert rd.scaler_step(None, opt) is True
