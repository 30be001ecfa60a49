"""``rd.TrainingState`` through ``torch.distributed.checkpoint``: model with dropout, AdamW with
state, LambdaLR, GradScaler("cpu"), every global RNG, ``rd.DataLoader`` (2-microbatch accumulation,
explicit commit) and mid-window gradients, saved with ``dcp.save`` and loaded with ``dcp.load`` into
a fresh TrainingState whose process starts from other generator states; the continued run must
match an uninterrupted one bit for bit (losses of every microbatch, parameters, moments, LR, scale,
the next random draws). (a) one process, no process group; (b) 2 gloo ranks (DDP), each rank
seeded differently: each rank gets its own generators back. Also: the world-size policy for
per-rank RNG (1 -> 2 ranks), the one-process restore of a 2-rank checkpoint, the
``rd.save_checkpoint`` guard in a multi-rank job, a fresh optimizer without state."""

from __future__ import annotations

import random

import pytest
import torch

import resumable_data as rd

import _dcp_workers as D
import _workers as W

dist = pytest.importorskip("torch.distributed")
dcp = pytest.importorskip("torch.distributed.checkpoint")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return W.write_data(tmp_path_factory.mktemp("data"))[1]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("dcp_ts")


def check_resumed(r: dict) -> None:
    assert r["mid"], "the checkpoint must be taken inside an accumulation window"
    assert r["grads_equal"], "mid-window gradients not restored"
    assert r["restored_rng"] == r["saved_rng"], "this process's generators were not restored"
    assert r["optim_equal"], "optimizer moments / step counters differ after the load"
    assert r["label"] == "faithful_continuation"
    assert r["losses"] == r["ref_losses"], "the continued run's microbatch losses differ"
    for k in ("params", "optim", "lr", "scale", "draws"):
        assert r["resumed"][k] == r["ref"][k], k


def small_state(**kw):
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    return rd.TrainingState(model=net, optimizer=torch.optim.AdamW(net.parameters()), run_id="small", **kw)


@pytest.fixture(scope="module")
def small_ckpt(workdir):
    """A 1-process checkpoint of a small model + AdamW with state (no loader)."""
    ts = small_state()
    ts.model(torch.randn(4, 3)).sum().backward()
    ts.optimizer.step()
    ts.optimizer.zero_grad()
    random.seed(42)
    path = str(workdir / "small-1proc")
    dcp.save({"train": ts}, checkpoint_id=path)
    return path, D.rng_digest()


def test_one_process(data, workdir):
    r = D.task_resume(0, 1, data, str(workdir / "one"))
    check_resumed(r)
    assert r["run_id_kept"]


@pytest.fixture(scope="module")
def two_ranks(data, workdir, small_ckpt):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    return W.launch(2, [("resume", "resume", dict(train_dir=data, ckpt=str(workdir / "two"))),
                        ("guards", "guards", dict(small_ckpt=small_ckpt[0], workdir=str(workdir)))],
                    workdir, "dcp_ts", module="_dcp_workers", deterministic=True)


def test_two_ranks_each_rank_resumes_its_own_state(two_ranks):
    for r in two_ranks:
        check_resumed(r["resume"])
    a, b = (r["resume"] for r in two_ranks)
    assert a["saved_rng"] != b["saved_rng"], "the ranks were seeded differently"
    # each rank drew its own run id; the resumed ranks share the one saved (DCP keeps one copy)
    assert a["run_ids"][1] == b["run_ids"][1] in {a["run_ids"][0], b["run_ids"][0]}
    assert a["ref"]["params"] == b["ref"]["params"]  # DDP keeps replicas equal
    assert a["ref"]["draws"] != b["ref"]["draws"]


def test_save_checkpoint_refuses_a_multi_rank_job(two_ranks):
    for r in two_ranks:
        msg = r["guards"]["save_checkpoint"]
        assert "world_size=2" in msg and "torch.distributed.checkpoint" in msg and "TrainingState" in msg


def test_more_ranks_than_saved_need_an_rng_policy(two_ranks, small_ckpt):
    for r in two_ranks:
        msg = r["guards"]["refuse"]
        assert "world_size=2" in msg and "at most the saved 1 rank" in msg and "new_rank_rng='keep'" in msg
    g0, g1 = (r["guards"] for r in two_ranks)
    assert g0["rng_after_keep"] == small_ckpt[1] and not g0["rng_kept"]  # rank 0 restores the saved rank 0
    assert g1["rng_kept"]  # rank 1 has no saved stream and keeps its own


def test_fewer_ranks_restore_rank_zero(two_ranks, data, workdir):
    """The 2-rank checkpoint in one process (elastic_reshard): rank 0's generators come back."""
    objs = D.build(data, 0, 1)

    class Elastic:
        def state_dict(self):
            return objs[5].state_dict()

        def load_state_dict(self, sd):
            objs[5].load_state_dict(sd, label="elastic_reshard")

    dcp.load({"train": Elastic()}, checkpoint_id=str(workdir / "two"))
    assert D.rng_digest() == two_ranks[0]["resume"]["saved_rng"]


def test_fresh_optimizer_without_state_round_trips(tmp_path):
    """Saved before the first step: nothing is perturbed, and the restored optimizer has no state."""
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, dampening=0.5)
    ts = rd.TrainingState(model=net, optimizer=opt)
    before = [p.detach().clone() for p in net.parameters()]
    dcp.save({"train": ts}, checkpoint_id=str(tmp_path))
    assert not opt.state and all(p.grad is None for p in net.parameters())
    assert all(torch.equal(a, p) for a, p in zip(before, net.parameters()))
    net2 = torch.nn.Linear(3, 2)
    opt2 = torch.optim.SGD(net2.parameters(), lr=0.1, momentum=0.9, dampening=0.5)
    dcp.load({"train": rd.TrainingState(model=net2, optimizer=opt2)}, checkpoint_id=str(tmp_path))
    assert not opt2.state and all(torch.equal(a, p) for a, p in zip(before, net2.parameters()))


def test_placeholder_steps_leave_hooks_flags_and_parameters_alone(tmp_path):
    """Through real ``dcp.save`` / ``dcp.load``: the optimizer's own step hooks never fire, the LR
    scheduler's ``_opt_called`` flag and every parameter are as they were; the placeholders are dropped again."""

    def make(seed):
        torch.manual_seed(seed)
        net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
        opt = torch.optim.AdamW(net.parameters(), lr=0.1, weight_decay=0.5)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
        calls = []
        opt.register_step_pre_hook(lambda o, a, k: calls.append("pre"))
        opt.register_step_post_hook(lambda o, a, k: calls.append("post"))
        return net, opt, sched, calls

    net, opt, sched, calls = make(0)
    net(torch.randn(5, 3)).sum().backward()
    for p in net[1].parameters():  # net[1] keeps no optimizer state
        p.grad = None
    opt.step()
    sched.step()
    opt.zero_grad()
    del opt._opt_called
    calls.clear()
    before = [p.detach().clone() for p in net.parameters()]
    dcp.save({"train": rd.TrainingState(model=net, optimizer=opt, scheduler=sched)}, checkpoint_id=str(tmp_path))
    assert calls == [] and "_opt_called" not in opt.__dict__
    assert all(torch.equal(a, p) for a, p in zip(before, net.parameters()))
    net2, opt2, sched2, calls2 = make(1)
    dcp.load({"train": rd.TrainingState(model=net2, optimizer=opt2, scheduler=sched2)}, checkpoint_id=str(tmp_path))
    assert calls2 == [] and "_opt_called" not in opt2.__dict__
    assert all(torch.equal(a, p) for a, p in zip(before, net2.parameters()))
    assert set(opt2.state) == set(net2[0].parameters())
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
