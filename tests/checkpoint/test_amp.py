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


def test_scaler_step_takes_a_grad_scaler_or_none_and_refuses_anything_else():
    m = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for scaler in (None, torch.amp.GradScaler("cpu", enabled=False)):  # a plain step
        opt.zero_grad()
        m(torch.ones(1, 2)).sum().backward()
        before = m.weight.detach().clone()
        assert rd.scaler_step(scaler, opt) is True and not torch.equal(before, m.weight.detach())

    class StepsOnly:  # neither a GradScaler nor None: refused, nothing stepped
        def step(self, optimizer):
            optimizer.step()

    before = m.weight.detach().clone()
    for bad in (StepsOnly(), "cpu", True):
        try:
            rd.scaler_step(bad, opt)
        except rd.ConfigError as e:
            msg = str(e)
            assert msg.startswith(f"scaler={type(bad).__name__!r}") and "torch.amp.GradScaler" in msg, msg
            assert "fix:" in msg
        else:
            raise AssertionError(f"scaler={bad!r} was accepted")
    assert torch.equal(before, m.weight.detach())


def test_a_stateful_standing_in_for_a_scheduler_or_scaler_is_saved_as_before(tmp_path):
    """torch's LRScheduler and GradScaler are read through their API (last_epoch, is_enabled()); any
    other Stateful in their place is saved and restored, with last_epoch -1 and enabled = bool(state)."""
    from resumable_data.checkpoint import read_checkpoint

    class Wrapped:  # as accelerate's AcceleratedScheduler: wraps a scheduler, is not one
        def __init__(self, inner):
            self.inner = inner

        def state_dict(self):
            return self.inner.state_dict()

        def load_state_dict(self, sd):
            self.inner.load_state_dict(sd)

    def build(wrap):
        m = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
        for _ in range(3):
            opt.step()
            sched.step()
        if wrap:
            return rd.TrainingState(model=m, optimizer=opt, scheduler=Wrapped(sched), scaler=Wrapped(scaler)), sched
        return rd.TrainingState(model=m, optimizer=opt, scheduler=sched, scaler=scaler), sched

    for wrap, last_epoch in ((False, 3), (True, -1)):
        state, sched = build(wrap)
        path = rd.save_checkpoint(tmp_path / str(wrap), state, step=1)
        meta = read_checkpoint(path).meta
        assert meta.status.scheduler_last_epoch == last_epoch
        assert meta.scaler["enabled"] is True and meta.scaler["type"].endswith("Wrapped" if wrap else "GradScaler")
        fresh, fresh_sched = build(wrap)
        fresh_sched.last_epoch = 0
        rd.load_checkpoint(path, fresh)
        assert fresh_sched.last_epoch == 3
