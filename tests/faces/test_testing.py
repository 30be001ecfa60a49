"""rd.testing: the harness users run on their own pipelines; it must find real divergences."""

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
    report = assert_resumes(make_arrow(shards), steps=30, interrupts=3, num_workers=(0, 1), world_sizes=(1, 2, 3),
                            chained=2)
    assert report.ok and report.batches_compared > 30 * 3
    assert any("x2" in r for r in report.runs) and any("w1" in r for r in report.runs)


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


@pytest.mark.parametrize("kwargs, param", [(dict(steps=1), "steps"), (dict(steps=10, interrupts=[10]), "interrupts"),
                                           (dict(steps=10, train_step=lambda m, b: None), "train_step")])
def test_bad_arguments(shards, kwargs, param):
    with pytest.raises(rd.ConfigError, match=param):
        check_resume(make_arrow(shards), **kwargs)
