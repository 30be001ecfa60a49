"""Randomness outside __getitem__: collate_fn, arrow_collate and the per-sample transform= hook
draw from globals seeded by the batch (or sample) key, with rd.batch_context() /
rd.sample_context() available; identical across worker counts, runs and resumes; the training
loop's own global generators are untouched in the main process."""

import random

import numpy as np
import pytest
import torch

import resumable_data as rd
from tests.loader.conftest import N_RECORDS, canon, take


class Plain(torch.utils.data.Dataset):
    def __len__(self):
        return N_RECORDS

    def __getitem__(self, i):
        return i


def noisy_collate(samples):
    ctx = rd.batch_context()
    return {
        "ids": torch.tensor(samples),
        "positions": torch.as_tensor(ctx.positions),
        "torch": torch.rand(3),
        "np": torch.tensor(np.random.rand(2)),
        "py": torch.tensor([random.random()]),
        "seed_ok": torch.tensor([torch.initial_seed() < 2**63]),
    }


def noisy_arrow_collate(table):
    rd.batch_context()
    return {"id": torch.tensor(table.column("id").to_numpy()), "torch": torch.rand(2),
            "np": torch.tensor(np.random.rand(1)), "py": torch.tensor([random.random()])}


def jitter(record):
    ctx = rd.sample_context()
    assert ctx.record == record["id"]
    return {"id": record["id"], "len": len(record["tokens"]), "noise": torch.rand(1).item(),
            "np": float(np.random.rand()), "own": float(ctx.rng.random())}


def run(make, epochs=2):
    dl = make()
    return [canon(b) for _ in range(epochs) for b in dl]


def resumed(make, cut, total):
    """``cut`` batches, a state, a fresh loader from it, then every remaining batch in order."""
    dl = make()
    got = take(dl, cut)
    sd = dl.state_dict()
    again = make()
    again.load_state_dict(sd)
    while len(got) < total:
        got.extend(canon(b) for b in again)
    return got


def collate_loader(num_workers):
    return lambda: rd.DataLoader(Plain(), batch_size=8, shuffle=True, seed=3, num_workers=num_workers,
                                 collate_fn=noisy_collate, dataset_version="plain-v1")


def test_collate_randomness_is_identical_across_workers_runs_and_resumes():
    ref = run(collate_loader(0))
    assert ref == run(collate_loader(0))
    assert ref == run(collate_loader(2))
    assert len({b["torch"][3] for b in ref}) == len(ref)  # every batch has its own draws
    assert all(b["seed_ok"][3] == b"\x01" for b in ref)
    per_epoch = len(ref) // 2
    for num_workers in (0, 2):
        for cut in (1, per_epoch - 1, per_epoch, per_epoch + 3):
            assert resumed(collate_loader(num_workers), cut, len(ref)) == ref


def test_arrow_collate_randomness_is_identical_across_workers_and_resumes(shards):
    def make(nw):
        return lambda: rd.DataLoader(shards, batch_size=16, shuffle=True, seed=9, num_workers=nw,
                                     arrow_collate=noisy_arrow_collate)
    ref = run(make(0))
    assert ref == run(make(2))
    for cut in (2, len(ref) // 2 + 1):
        assert resumed(make(2), cut, len(ref)) == ref


def test_transform_is_per_sample_independent_of_batch_size_and_workers(shards):
    def samples(batch_size, nw):
        dl = rd.DataLoader(shards, batch_size=batch_size, shuffle=True, seed=9, num_workers=nw, transform=jitter,
                           collate_fn=lambda rows: rows)
        return [s for b in dl for s in b]

    ref = samples(1, 0)
    assert sorted(s["id"] for s in ref) == list(range(N_RECORDS))
    assert ref == samples(7, 2)  # another batch size and worker count: the same samples, same draws


def test_transform_with_the_default_collate_on_a_map_dataset():
    def add_noise(i):
        return torch.tensor([float(i), torch.rand(1).item()])

    def make(nw):
        return lambda: rd.DataLoader(Plain(), batch_size=5, shuffle=True, seed=4, num_workers=nw, transform=add_noise,
                                     dataset_version="plain-v1")
    ref = run(make(0))
    assert ref == run(make(2))
    assert resumed(make(0), 7, len(ref)) == ref


def test_the_training_loops_generators_are_untouched_around_collate():
    def draws():
        return random.random(), float(np.random.rand()), torch.rand(1).item()

    for fn in (noisy_collate, None):
        random.seed(1), np.random.seed(1), torch.manual_seed(1)
        expected = draws()
        random.seed(1), np.random.seed(1), torch.manual_seed(1)
        for _ in rd.DataLoader(Plain(), batch_size=8, shuffle=True, seed=3, collate_fn=fn, dataset_version="plain-v1"):
            pass
        assert draws() == expected


def test_per_sample_torch_seeds_fit_a_signed_int64():
    class Seeds(Plain):
        def __getitem__(self, i):
            return torch.initial_seed()

    seeds = [int(s) for b in rd.DataLoader(Seeds(), batch_size=16, dataset_version="plain-v1") for s in b]
    assert len(seeds) == N_RECORDS and max(seeds) < 2**63 and len(set(seeds)) == N_RECORDS
    assert rd.sample_key("plain-v1", 0, 0) >= 0


def test_transform_must_be_callable_and_is_refused_with_packing():
    with pytest.raises(rd.ConfigError, match="transform"):
        rd.DataLoader(Plain(), transform=3)
