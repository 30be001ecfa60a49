"""rd.testing: the harness users run on their own pipelines; it must find real divergences."""

import re

import numpy as np
import pytest
import torch

import resumable_data as rd
from resumable_data.testing import assert_resumes, batch_digests, check_resume
from tests.loader.conftest import Augmented


def make_arrow(shards, **extra):
    def make(**kw):
        world = kw["sharding"].world_size
        return rd.DataLoader(shards, batch_size=12 // world, shuffle=True, seed=3, tail="wrap", **extra, **kw)
    return make


def test_a_correct_pipeline_passes_with_workers_world_sizes_and_chains(shards):
    """The harness's default worker counts (0, 2), resharding 1 -> 2 -> 3 ranks."""
    report = assert_resumes(make_arrow(shards), steps=30, interrupts=3, num_workers=(0, 2), world_sizes=(1, 2, 3),
                            chained=2)
    assert report.ok and report.batches_compared > 30 * 3 and not report.notes
    assert any("w2" in r for r in report.runs) and any("w0" in r for r in report.runs)
    changes = [r for r in report.runs if len({part.split("]")[0].split(" x")[1] for part in r.split("[")[1:]}) > 1]
    assert changes, report.runs  # some run changed world size on resume


def test_explicit_commit_and_a_model_are_checked_too(shards):
    def make_model():
        torch.manual_seed(0)
        return torch.nn.Linear(1, 1, dtype=torch.float64)

    def train_step(model, batch):
        x = batch["id"].to(torch.float64)[:, None] / 100
        loss = ((model(x) - x) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
                p.grad = None

    report = check_resume(make_arrow(shards, commit="explicit", accumulation_steps=2), steps=24, interrupts=[5, 11],
                          num_workers=(0,), make_model=make_model, train_step=train_step)
    assert report.ok, str(report)


def linear_state(scheduler=False, accumulation="save_gradients"):
    def make_state():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(1, 4, dtype=torch.float64), torch.nn.Dropout(0.5),
                                    torch.nn.Linear(4, 1, dtype=torch.float64))
        opt = torch.optim.Adam(model.parameters(), lr=0.05)
        out = {"model": model, "optimizer": opt, "accumulation": accumulation}
        if scheduler:
            out["scheduler"] = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        return out
    return make_state


def accumulating_step(state, batch):
    """A real accumulation loop: backward every microbatch, an Adam step (and the scheduler) per window."""
    x = batch["id"].to(torch.float64)[:, None] / 100
    ((state.model(x) - x) ** 2).mean().backward()  # dropout draws from torch's global generator
    if state.loader.microstep_is_last:
        state.optimizer.step()
        state.optimizer.zero_grad(set_to_none=True)
        if state.scheduler is not None:
            state.scheduler.step()


@pytest.mark.parametrize("commit, accumulation, workers", [
    ("explicit", "save_gradients", (0, 2)),   # mid-window checkpoints keep the accumulated gradients
    ("explicit", "rewind", (0,)),             # ... or repeat the window
    ("auto", "save_gradients", (0,)),
])
def test_an_optimizer_scheduler_and_rng_are_carried_through_a_checkpoint(shards, commit, accumulation, workers):
    """Adam's moments, the scheduler and dropout's RNG travel through rd.save_checkpoint/load_checkpoint."""
    make = make_arrow(shards, commit=commit, accumulation_steps=3)
    report = check_resume(make, steps=20, interrupts=[4, 8, 13], num_workers=workers, chained=2,
                          make_state=linear_state(scheduler=True, accumulation=accumulation),
                          train_step=accumulating_step)
    assert report.ok, str(report)
    assert len(report.runs) == 3 and any(r.count("@") == 2 for r in report.runs), report.runs  # chained resumes
    if commit == "explicit" and accumulation == "rewind":  # 4, 8, 13 are mid-window: the window is delivered again
        assert report.batches_compared > 3 * 20
    else:  # the restored gradients continue the window: each run delivers each step once
        assert report.batches_compared == 3 * 20


def test_an_optimizer_the_harness_cannot_see_diverges_at_the_first_resume(shards):
    """The audit's case: Adam held outside make_model is not carried, and the report says where."""
    holder = {}

    def make_model():
        torch.manual_seed(0)
        model = torch.nn.Linear(1, 1, dtype=torch.float64)
        holder["opt"] = torch.optim.Adam(model.parameters(), lr=0.05)
        return model

    def train_step(model, batch):
        x = batch["id"].to(torch.float64)[:, None] / 100
        ((model(x) - x) ** 2).mean().backward()
        holder["opt"].step()
        holder["opt"].zero_grad(set_to_none=True)

    report = check_resume(make_arrow(shards), steps=12, interrupts=[5], num_workers=(0,), make_model=make_model,
                          train_step=train_step)
    assert not report.ok and (report.divergence.step, report.divergence.key) == (5, "state.parameters")
    def make_state():  # the fix: hand the optimizer to the harness
        return {"model": make_model(), "optimizer": holder["opt"]}

    fixed = check_resume(make_arrow(shards), steps=12, interrupts=[5], num_workers=(0,), make_state=make_state,
                         train_step=_adam_step)
    assert fixed.ok, str(fixed)


def _adam_step(state, batch):
    x = batch["id"].to(torch.float64)[:, None] / 100
    ((state.model(x) - x) ** 2).mean().backward()
    state.optimizer.step()
    state.optimizer.zero_grad(set_to_none=True)


def test_a_functional_train_step_alone_carries_its_state(shards):
    """train_step alone: state -> state over tensors, None before the first step."""
    def step(state, batch):
        state = state or {"sum": torch.zeros((), dtype=torch.int64), "seen": [0]}
        return {"sum": state["sum"] + batch["id"].sum(), "seen": [state["seen"][0] + len(batch["id"])]}

    make = make_arrow(shards, commit="explicit", accumulation_steps=2)
    for choice in ("repeat", "skip"):
        assert check_resume(make, steps=16, interrupts=[3, 6], num_workers=(0,), train_step=step,
                            on_uncommitted=choice).ok
    hidden = {"n": 0}

    def make_loader(**kw):  # a process-level counter, lost when the job restarts
        hidden["n"] = 0
        return make_arrow(shards)(**kw)

    def leaky(state, batch):  # keeps part of its state outside the returned one
        hidden["n"] += 1
        return {"n": torch.tensor(hidden["n"])}

    report = check_resume(make_loader, steps=10, interrupts=[4], num_workers=(0,), train_step=leaky)
    assert not report.ok and report.divergence.key == "state" and report.divergence.step == 4


def test_a_non_elastic_loader_is_checked_per_world_size_without_resharding(shards):
    """elastic=False forbids a world-size change: the harness skips it, says so, and checks every world size."""
    report = check_resume(make_arrow(shards, elastic=False), steps=16, interrupts=3, num_workers=(0,),
                          world_sizes=(1, 2))
    assert report.ok, str(report)
    assert any("elastic=False" in n for n in report.notes) and "elastic=False" in str(report)
    for world in (1, 2):
        assert any(f"x{world}]" in r for r in report.runs), report.runs
    for r in report.runs:
        assert len({part.split("]")[0].split(" x")[1] for part in r.split("[")[1:]}) == 1, r
    elastic = check_resume(make_arrow(shards), steps=16, interrupts=3, num_workers=(0,), world_sizes=(1, 2))
    assert elastic.ok and not elastic.notes
    assert any(len({p.split("]")[0].split(" x")[1] for p in r.split("[")[1:]}) > 1 for r in elastic.runs)


def test_a_training_state_is_checked_per_world_size(shards):
    report = check_resume(make_arrow(shards), steps=10, interrupts=[4], num_workers=(0,), world_sizes=(1, 2),
                          make_state=linear_state(), train_step=_adam_step)
    assert report.ok and any("training state" in n for n in report.notes), str(report)
    assert [r.split(" ")[0] for r in report.runs] == ["[w0", "[w0"] and {r[4:6] for r in report.runs} == {"x1", "x2"}


def test_the_sharding_policy_reaches_make_loader(shards):
    seen = []

    def make(**kw):
        seen.append(kw["sharding"].policy)
        return make_arrow(shards)(**kw)

    assert check_resume(make, steps=8, interrupts=[3], num_workers=(0,), world_sizes=(2,),
                        sharding_policy="strided").ok
    assert seen and set(seen) == {rd.ShardingPolicy.STRIDED}


class LeakyGlobalRNG(Augmented):
    """A transform that keeps hidden state across samples: it cannot resume by seeking."""

    def __init__(self):
        super().__init__()
        self.counter = 0

    def __getitem__(self, i):
        self.counter += 1
        return {"record": i, "hidden": self.counter}


def test_a_history_dependent_pipeline_is_caught_with_its_first_divergence():
    make = lambda **kw: rd.DataLoader(LeakyGlobalRNG(), batch_size=4, shuffle=True, seed=1, **kw)  # noqa: E731
    report = check_resume(make, steps=12, interrupts=[5], num_workers=(0,), allow_unpinned=True)
    assert not report.ok
    d = report.divergence
    assert (d.key, d.rank, d.step) == ("hidden", 0, 5) and d.expected != d.got
    with pytest.raises(AssertionError, match="key 'hidden'"):
        assert_resumes(make, steps=12, interrupts=[5], num_workers=(0,), allow_unpinned=True)


def test_digests_cover_dtype_shape_and_bytes():
    a = batch_digests({"x": torch.zeros(2, dtype=torch.int32)})
    assert a != batch_digests({"x": torch.zeros(2, dtype=torch.int64)})
    assert a != batch_digests({"x": torch.zeros(1, 2, dtype=torch.int32)})
    assert a != batch_digests({"x": torch.tensor([0, 1], dtype=torch.int32)})
    assert batch_digests({"x": np.arange(3)}) == batch_digests({"x": np.arange(3)})


@pytest.mark.parametrize("kwargs, param", [
    (dict(steps=1), "steps"),
    (dict(steps=10, interrupts=[10]), "interrupts"),
    (dict(steps=10, interrupts=[]), "interrupts"),
    (dict(steps=10, make_model=torch.nn.Identity), "train_step="),
    (dict(steps=10, make_state=dict), "train_step="),
    (dict(steps=10, make_model=torch.nn.Identity, make_state=dict, train_step=_adam_step), "make_model="),
    (dict(steps=10, make_state=dict, train_step=_adam_step, on_uncommitted="skip"), "on_uncommitted="),
    (dict(steps=10, train_step=_adam_step, on_uncommitted="later"), "on_uncommitted="),
    (dict(steps=10, train_step="step"), "train_step="),
    (dict(steps=10, sharding_policy="diagonal"), "sharding_policy="),
    (dict(steps=10, make_state=lambda: {"loader": None}, train_step=_adam_step), "make_state()"),
])
def test_bad_arguments(shards, kwargs, param):
    with pytest.raises(rd.ConfigError, match=re.escape(param)):
        check_resume(make_arrow(shards), num_workers=(0,), **kwargs)


@pytest.mark.parametrize("interrupts", [True, 0, "5", [3, "x"], 2.5])
def test_bad_interrupts_are_refused_before_any_batch(interrupts):
    def make_loader(**kw):
        raise AssertionError("the loader must not be built for a bad interrupts= argument")

    with pytest.raises(rd.ConfigError, match="interrupts="):
        check_resume(make_loader, steps=10, interrupts=interrupts)


@pytest.mark.parametrize("world", [1, 2])
def test_a_train_step_without_a_training_forward_passes_on_every_world_size(shards, world):
    # rank 0's loader, watched through the TrainingState's model, leaves a batch that no training
    # forward ran on uncommitted (README: the state counts the batch in hand once the model ran a
    # training forward on it), and its restore repeats it; the other simulated ranks loaded their
    # own saved states, one step ahead: the harness reported "DIVERGED ... rank 1, key 'id'" for a
    # pipeline that resumes exactly (a step that only evaluates, or a stub while writing the test)
    def eval_step(state, batch):
        with torch.no_grad():
            state.model.eval()
            state.model(batch["id"].to(torch.float64)[:, None] / 100)
            state.model.train()

    report = check_resume(make_arrow(shards), steps=12, interrupts=[2, 7], num_workers=(0,), world_sizes=(world,),
                          make_state=linear_state(), train_step=eval_step)
    assert report.ok, str(report)
    trained = check_resume(make_arrow(shards), steps=12, interrupts=[2, 7], num_workers=(0,), world_sizes=(world,),
                           make_state=linear_state(), train_step=accumulating_step)
    assert trained.ok, str(trained)
