"""The DCP layout's optimizer placeholders (``resumable_data.checkpoint.optim``): the zero-LR step
that shapes them leaves the optimizer, the parameters, the gradients, the group settings, the
scheduler's ``_opt_called`` flag and the optimizer's own step hooks as they were; restoring and
verifying run no step; an optimizer that cannot be stepped that way is refused with a fix that works.

The DCP load is emulated in one process: ``dcp.load`` asks the fresh state for its ``state_dict()``
(the target), copies the saved tensors into it in place and hands it to ``load_state_dict``."""

from __future__ import annotations

import warnings

import pytest
import torch

import resumable_data as rd
from resumable_data.checkpoint.optim import dense_optimizer_state
from resumable_data.checkpoint.state import NewRankRNG


class Drift(torch.optim.Optimizer):
    """Moves every parameter that has a gradient whatever the LR (decoupled decay, relative step
    size), keeps per-parameter state, and counts its ``step()`` calls (hooks cannot see detached calls)."""

    def __init__(self, params, lr=None):
        super().__init__(params, {"lr": lr, "decay": 0.25})
        self.calls = 0

    @torch.no_grad()
    def step(self, closure=None):
        self.calls += 1
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["n"] = torch.zeros(())
                    st["m"] = torch.zeros_like(p)
                st["n"] += 1
                st["m"].add_(p.grad)
                p.mul_(1 - g["decay"])


def two_layers(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))


def snapshot(model: torch.nn.Module) -> list[bytes]:
    return [p.detach().numpy().tobytes() for p in model.parameters()]


def partly_stepped(opt_cls=Drift, **kw):
    """A model whose first layer has optimizer state and whose second has none."""
    net = two_layers()
    opt = opt_cls(net.parameters(), **kw)
    net(torch.randn(5, 3)).sum().backward()
    for p in net[1].parameters():
        p.grad = None
    opt.step()
    opt.zero_grad()
    return net, opt


def dcp_round_trip(saved: rd.TrainingState, fresh: rd.TrainingState) -> None:
    """What ``dcp.save`` + ``dcp.load`` do to the two states, in one process."""
    sd = saved.state_dict()
    target = fresh.state_dict()
    assert set(target["tensors"]) == set(sd["tensors"])
    for k, t in target["tensors"].items():
        t.copy_(sd["tensors"][k])
    target["json"] = sd["json"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fresh.load_state_dict(target)


# -- 1. group settings -------------------------------------------------------------------------------
def test_a_none_lr_stays_none():
    net, opt = partly_stepped()
    assert opt.param_groups[0]["lr"] is None
    out = dense_optimizer_state(net, opt)
    assert opt.param_groups[0]["lr"] is None
    assert out["param_groups"][0]["lr"] is None
    rd.TrainingState(model=net, optimizer=opt).state_dict()  # the metadata reports a None LR too
    assert opt.param_groups[0]["lr"] is None


def test_group_keys_and_values_come_back_exactly():
    class Counting(torch.optim.SGD):
        def step(self, closure=None):
            for g in self.param_groups:
                g["seen"] = g.get("seen", 0) + 1
                g["momentum"] = 0.5
            return super().step(closure)

    net = two_layers()
    opt = Counting([{"params": net[0].parameters(), "lr": torch.tensor(0.1)},
                    {"params": net[1].parameters()}], lr=0.2, momentum=0.9)
    before = [dict(g) for g in opt.param_groups]
    dense_optimizer_state(net, opt)
    assert [dict(g) for g in opt.param_groups] == before  # "seen" removed, momentum and the tensor LR back
    assert opt.param_groups[0]["lr"] is before[0]["lr"]


# -- 2. parameters and gradients -------------------------------------------------------------------------
@pytest.mark.parametrize("fresh", [True, False], ids=["no-state", "partly-stepped"])
def test_parameters_are_bit_identical_when_the_step_ignores_the_lr(fresh):
    net, opt = (two_layers(), None) if fresh else partly_stepped(lr=0.1)
    opt = opt or Drift(net.parameters(), lr=0.1)
    before = snapshot(net)
    ts = rd.TrainingState(model=net, optimizer=opt)
    ts.state_dict()
    assert snapshot(net) == before
    assert all(p.grad is None for p in net.parameters())
    assert len(opt.state) == (0 if fresh else 2)


def test_gradients_are_the_same_objects_afterwards():
    net, opt = partly_stepped(lr=0.1)
    net(torch.randn(2, 3)).sum().backward()
    grads = [p.grad for p in net.parameters()]
    values = [g.clone() for g in grads]
    dense_optimizer_state(net, opt)
    assert all(p.grad is g for p, g in zip(net.parameters(), grads))
    assert all(torch.equal(g, v) for g, v in zip(grads, values))


def test_round_trip_of_an_lr_ignoring_optimizer_is_exact():
    """Without pre-empting torch's own ``_init_optim_state`` step, the load would move the just
    loaded parameters and the verification would refuse."""
    net, opt = partly_stepped(lr=0.1)
    fresh_net = two_layers(seed=1)
    fresh = rd.TrainingState(model=fresh_net, optimizer=Drift(fresh_net.parameters(), lr=0.1))
    dcp_round_trip(rd.TrainingState(model=net, optimizer=opt), fresh)
    assert snapshot(fresh_net) == snapshot(net)
    assert set(fresh.optimizer.state) == set(fresh_net[0].parameters())  # placeholders dropped again


# -- 3. step hooks, and how many steps run --------------------------------------------------------------
@pytest.mark.parametrize("opt_cls", ["adam", "sgd", "drift"])
def test_own_step_hooks_do_not_fire_on_save_or_load(opt_cls):
    def make(seed):
        net = two_layers(seed)
        opt = {"adam": lambda: torch.optim.Adam(net.parameters(), lr=1e-2),
               "sgd": lambda: torch.optim.SGD(net.parameters(), lr=1e-2),
               "drift": lambda: Drift(net.parameters(), lr=1e-2)}[opt_cls]()
        calls = []
        opt.register_step_pre_hook(lambda o, a, k: calls.append("pre"))
        opt.register_step_post_hook(lambda o, a, k: calls.append("post"))
        return rd.TrainingState(model=net, optimizer=opt), calls

    saved, calls = make(0)
    fresh, fresh_calls = make(1)
    dcp_round_trip(saved, fresh)
    assert calls == [] and fresh_calls == []
    # the hooks are back in place
    saved.optimizer.zero_grad()
    saved.optimizer.step()
    assert calls == ["pre", "post"]


def test_restoring_and_verifying_run_no_step():
    """One placeholder step per state_dict() that finds stateless parameters, none on load."""
    net, opt = partly_stepped(lr=0.1)
    saved = rd.TrainingState(model=net, optimizer=opt)
    fresh_net = two_layers(seed=1)
    fresh_opt = Drift(fresh_net.parameters(), lr=0.1)
    fresh = rd.TrainingState(model=fresh_net, optimizer=fresh_opt)
    calls = opt.calls
    dcp_round_trip(saved, fresh)
    assert opt.calls - calls == 1  # the save: net[1] has no state
    assert fresh_opt.calls == 1  # the load target; load_state_dict and its verification: none


def test_a_stateless_optimizer_takes_one_step_not_two():
    """Plain SGD creates no state: torch's own ``_init_optim_state`` step is pre-empted too."""
    class Counted(torch.optim.SGD):
        calls = 0

        def step(self, closure=None):
            type(self).calls += 1
            return super().step(closure)

    net = two_layers()
    opt = Counted(net.parameters(), lr=0.1)
    before = snapshot(net)
    out = rd.TrainingState(model=net, optimizer=opt).state_dict()
    assert Counted.calls == 1 and snapshot(net) == before and not opt.state
    assert '"stateless"' in out["json"]


# -- 4. the LR scheduler's _opt_called flag ---------------------------------------------------------------
@pytest.mark.parametrize("flag", ["absent", False, True])
def test_opt_called_is_left_as_it_was(flag):
    net = two_layers()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    if flag == "absent":
        opt.__dict__.pop("_opt_called", None)
    else:
        opt._opt_called = flag
    fresh_net = two_layers(seed=1)
    fresh_opt = torch.optim.SGD(fresh_net.parameters(), lr=0.1, momentum=0.9)
    fresh_sched = torch.optim.lr_scheduler.StepLR(fresh_opt, 1)
    fresh_opt.__dict__.pop("_opt_called", None)
    dcp_round_trip(rd.TrainingState(model=net, optimizer=opt, scheduler=sched),
                   rd.TrainingState(model=fresh_net, optimizer=fresh_opt, scheduler=fresh_sched))
    assert opt.__dict__.get("_opt_called", "absent") == flag
    assert "_opt_called" not in fresh_opt.__dict__


# -- 5. optimizers whose step() needs a closure ----------------------------------------------------------
def lbfgs():
    net = two_layers()
    opt = torch.optim.LBFGS(net.parameters())
    x = torch.randn(4, 3)

    def closure():
        opt.zero_grad()
        loss = net(x).pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return net, opt, closure


def test_lbfgs_is_refused_with_the_cause_and_a_fix_that_works(tmp_path):
    net, opt, _ = lbfgs()
    before = snapshot(net)
    ts = rd.TrainingState(model=net, optimizer=opt)
    with pytest.raises(rd.CheckpointError) as e:
        ts.state_dict()
    msg = str(e.value)
    assert "torch.optim.lbfgs.LBFGS" in msg and "without a closure" in msg
    assert "per-parameter state" in msg and "rd.save_checkpoint" in msg
    assert "take one real step" not in msg  # LBFGS keeps state on its first parameter only: no step helps
    assert isinstance(e.value.__cause__, TypeError)
    assert snapshot(net) == before and set(opt.state) == {next(net.parameters())}
    # the advice works: the file layout stores only the state that exists
    rd.save_checkpoint(tmp_path, ts, step=1)
    net2 = two_layers(seed=1)
    opt2 = torch.optim.LBFGS(net2.parameters())
    rd.load_checkpoint(tmp_path, rd.TrainingState(model=net2, optimizer=opt2))
    assert snapshot(net2) == before
    assert torch.equal(opt2.state[next(net2.parameters())]["d"], opt.state[next(net.parameters())]["d"])


# -- 6. new_rank_rng -------------------------------------------------------------------------------------
@pytest.mark.parametrize("value,want", [("keep", NewRankRNG.KEEP), (NewRankRNG.KEEP, NewRankRNG.KEEP),
                                        ("refuse", NewRankRNG.REFUSE), (NewRankRNG.REFUSE, NewRankRNG.REFUSE)])
def test_new_rank_rng_accepts_the_enum_and_its_value(value, want):
    assert rd.TrainingState(new_rank_rng=value).new_rank_rng is want
    assert rd.TrainingState().new_rank_rng is NewRankRNG.REFUSE


@pytest.mark.parametrize("value", ["Keep", "fail", None, 1])
def test_new_rank_rng_refuses_other_values(value):
    with pytest.raises(rd.ConfigError) as e:
        rd.TrainingState(new_rank_rng=value)
    assert "new_rank_rng" in str(e.value) and "'refuse'" in str(e.value) and "'keep'" in str(e.value)
