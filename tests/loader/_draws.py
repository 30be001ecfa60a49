"""Datasets and a collate that report each sample's key and one draw of each global generator,
the golden loader and a reader of the next batches across epochs (the seeding tests of every
version use them)."""

from __future__ import annotations

import json
import random

import numpy as np
import torch

import resumable_data as rd
from tests.golden import seeding_v1_gen as g


class Draws(torch.utils.data.Dataset):
    """Per sample: its key and one draw of each generator."""

    def __len__(self):
        return 61

    def __getitem__(self, i):
        return [rd.sample_context().key, random.random(), float(np.random.random_sample()), torch.rand(1).item()]


class BatchDraws(Draws):
    def __getitems__(self, ids):
        return [[int(rd.batch_context().keys[0]), random.random(), float(np.random.random_sample()),
                 torch.rand(1).item()] for _ in ids]


def draw_collate(samples):
    ctx = rd.batch_context()
    return {"samples": samples, "collate": [int(ctx.positions[0]), random.random(), float(np.random.random_sample()),
                                            torch.rand(1).item()]}


def golden_loader(workers=0, **kw):
    return rd.DataLoader(g.SeedingDraws(), collate_fn=g.draw_collate, num_workers=workers, **g.KW, **kw)


def plain(batches):
    return json.loads(json.dumps(batches))


def batches_of(dl, n):
    """The next ``n`` batches, across epochs (a new ``iter()`` per epoch)."""
    out = []
    while len(out) < n:
        for b in dl:
            out.append(b)
            if len(out) == n:
                break
    return plain(out)
