"""Writes ``seeding_v1.json``: the version-1 per-sample seeding golden (run ONCE, on rd before
seeding version 2, commit 1bfe46b; kept to show how the file was made, never rerun).

A seeded loader over :class:`SeedingDraws` (``__getitem__`` draws from ``random``, numpy's global
generator and torch's; ``collate_fn`` draws from all three too) is run to step ``K``; its state
there and the batches it delivered at steps ``K .. K+5`` are saved. ``tests/loader/test_seeding_version.py``
restores that state (a state without a seeding record: version 1) and must get exactly those batches.

    PYTHONPATH=$PWD python -m tests.golden.seeding_v1_gen
"""

from __future__ import annotations

import json
import pathlib
import random

import numpy as np
import torch

import resumable_data as rd

K = 5
AFTER = 6
KW = dict(batch_size=4, shuffle=True, seed=2024, dataset_version="seeding-golden-v1", drop_last=False)
PATH = pathlib.Path(__file__).with_name("seeding_v1.json")


class SeedingDraws(torch.utils.data.Dataset):
    def __len__(self):
        return 61

    def __getitem__(self, i):
        return [float(i), random.random(), float(np.random.random_sample()), torch.rand(1).item(),
                random.random(), float(np.random.random_sample())]


def draw_collate(samples):
    return {"samples": samples, "collate": [random.random(), float(np.random.random_sample()), torch.rand(1).item()]}


def loader(num_workers=0):
    return rd.DataLoader(SeedingDraws(), collate_fn=draw_collate, num_workers=num_workers, **KW)


def main():
    dl = loader()
    it = iter(dl)
    for _ in range(K):
        next(it)
    state = dl.state_dict()
    batches = [next(it) for _ in range(AFTER)]
    PATH.write_text(json.dumps({"k": K, "state": state, "batches": batches}, indent=1) + "\n")


if __name__ == "__main__":
    main()
