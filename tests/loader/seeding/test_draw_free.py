"""Library datasets that draw nothing are not seeded per sample; everything else still is."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch.utils.data import ConcatDataset, Subset, TensorDataset

import resumable_data as rd
from resumable_data.loader import fetch
from resumable_data.loader.seeding.draw_free import MAX_DEPTH, draws_nothing

N = 300


class UserList:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


class DrawingTensors(TensorDataset):
    """A subclass: its ``__getitem__`` is user code, and draws."""

    def __getitem__(self, i: int):
        return (self.tensors[0][i], torch.rand(()).item(), random.random(), float(np.random.random_sample()))


def _nested(levels: int):
    ds = TensorDataset(torch.arange(N))
    for _ in range(levels):
        ds = Subset(ds, range(N))
    return ds


@pytest.mark.parametrize(
    "dataset, expected",
    [
        (list(range(4)), True),
        ((1, 2), True),
        (range(4), True),
        (np.arange(4), True),
        (torch.arange(4), True),
        (TensorDataset(torch.arange(4), torch.zeros(4)), True),
        (TensorDataset(torch.nn.Parameter(torch.zeros(4))), False),  # a tensor subclass
        (DrawingTensors(torch.arange(4)), False),
        (Subset(TensorDataset(torch.arange(4)), [0, 2]), True),
        (Subset(UserList(4), [0, 2]), False),
        (ConcatDataset([list(range(3)), TensorDataset(torch.arange(3))]), True),
        (ConcatDataset([list(range(3)), UserList(3)]), False),
        (_nested(MAX_DEPTH), True),
        (_nested(MAX_DEPTH + 1), False),
        (UserList(4), False),
    ],
)
def test_which_datasets_draw_nothing(dataset, expected):
    assert draws_nothing(dataset) is expected


class _NoSeeding:
    def __init__(self, *a, **k):
        raise AssertionError("a draw-free dataset was seeded")


def _batches(loader, k=None):
    out = []
    for i, b in enumerate(loader):
        if k is not None and i == k:
            break
        out.append(b)
    return out


def _equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, (list, tuple)):
            for u, v in zip(x, y, strict=True):
                assert torch.equal(u, v)
        else:
            assert torch.equal(x, y)


@pytest.mark.parametrize(
    "make",
    [
        lambda: list(range(N)),
        lambda: TensorDataset(torch.arange(N), torch.arange(N).float() * 0.5),
        lambda: Subset(TensorDataset(torch.arange(N)), list(range(0, N, 2)) * 2),
    ],
    ids=["list", "tensors", "subset"],
)
def test_a_draw_free_dataset_is_neither_seeded_nor_guarded(monkeypatch, make):
    unseeded = _batches(rd.DataLoader(make(), batch_size=16, shuffle=True, seed=3, seed_per_sample=False))
    monkeypatch.setattr(fetch, "GlobalSeeder", _NoSeeding)
    monkeypatch.setattr(fetch, "seed_globals", _NoSeeding)
    monkeypatch.setattr(fetch, "GlobalRNGGuard", _NoSeeding)
    torch.manual_seed(11)
    random.seed(11)
    before = (torch.get_rng_state(), random.getstate())
    skipped = _batches(rd.DataLoader(make(), batch_size=16, shuffle=True, seed=3))
    assert torch.equal(torch.get_rng_state(), before[0]) and random.getstate() == before[1]
    _equal(skipped, unseeded)


def _expected_draws(keys):
    out = []
    for key in keys:
        rd.seed_globals(key)
        out.append((torch.rand(()).item(), random.random(), float(np.random.random_sample())))
    return out


def test_a_subclass_of_a_library_dataset_is_still_seeded_per_sample():
    keys = []

    class Recording(DrawingTensors):
        def __getitem__(self, i):
            keys.append(rd.sample_context().key)
            return super().__getitem__(i)

    batches = _batches(rd.DataLoader(Recording(torch.arange(40)), batch_size=8, shuffle=True, seed=5))
    got = [(float(t), float(p), float(n)) for b in batches for t, p, n in zip(b[1], b[2], b[3])]
    assert got == _expected_draws(keys)


def test_a_transform_over_a_draw_free_dataset_is_still_seeded():
    keys = []

    def transform(x):
        keys.append(rd.sample_context().key)
        return (x, torch.rand(()).item(), random.random(), float(np.random.random_sample()))

    batches = _batches(rd.DataLoader(list(range(40)), batch_size=8, shuffle=True, seed=5, transform=transform))
    got = [(float(t), float(p), float(n)) for b in batches for t, p, n in zip(b[1], b[2], b[3])]
    assert got == _expected_draws(keys)


def test_a_resume_over_a_draw_free_dataset_continues_exactly():
    ds = TensorDataset(torch.arange(N))
    full = _batches(rd.DataLoader(ds, batch_size=16, shuffle=True, seed=9, dataset_version="v1"))
    first = rd.DataLoader(ds, batch_size=16, shuffle=True, seed=9, dataset_version="v1")
    it = iter(first)
    for _ in range(7):
        next(it)
    state = first.state_dict()
    resumed = rd.DataLoader(ds, batch_size=16, shuffle=True, seed=9, dataset_version="v1")
    resumed.load_state_dict(state)
    _equal(_batches(resumed), full[7:])
