"""Fixtures for the loader tests: a small pinned Arrow dataset and a map-style dataset with
augmentation that draws from every global generator and from the sample context."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
import torch

import resumable_data as rd

N_RECORDS = 157  # prime: every batch size leaves an epoch tail


def canon(batch):
    """An exact, comparable form of a batch: tensors by dtype, shape and bytes."""
    if isinstance(batch, torch.Tensor):
        return ("tensor", str(batch.dtype), tuple(batch.shape), batch.numpy().tobytes())
    if isinstance(batch, dict):
        return {k: canon(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [canon(v) for v in batch]
    return batch


def json_paths(obj, prefix=()):
    """Every path (tuple of keys and indices) into a JSON value, the root ``()`` first."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from json_paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from json_paths(v, prefix + (i,))


def take(loader, n, *, explicit=False):
    """``n`` batches from ``loader``, across epochs (a new iter() per epoch), committing like a
    training loop when ``explicit``."""
    out = []
    while len(out) < n:
        got_any = False
        for batch in loader:
            got_any = True
            out.append(canon(batch))
            if explicit and loader.microstep_is_last:
                loader.commit(applied=True)
            if len(out) == n:
                break
        assert got_any, "an iter(loader) produced no batch"
    return out


class Augmented(torch.utils.data.Dataset):
    """Every sample draws from random, numpy.random, torch and rd.sample_context()."""

    def __init__(self, n: int = N_RECORDS) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        ctx = rd.sample_context()
        return {
            "record": i,
            "ctx_record": ctx.record,
            "py": random.random(),
            "np": float(np.random.rand()),
            "torch": torch.rand(2),
            "rng": float(ctx.rng.random()),
        }


@pytest.fixture(scope="session")
def arrow_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("arrow")
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 12, N_RECORDS)
    table = pa.table({
        "id": pa.array(np.arange(N_RECORDS, dtype=np.int64)),
        "tokens": pa.array([rng.integers(1, 1000, k).astype(np.int32).tolist() for k in lengths],
                           type=pa.list_(pa.int32())),
        "text": pa.array([f"doc {i}" for i in range(N_RECORDS)]),
    })
    rd.write_arrow_shards(table, d, num_shards=3, rows_per_batch=20)
    rd.pin(d)
    return d


@pytest.fixture(scope="session")
def shards(arrow_dir):
    return rd.ArrowShards(arrow_dir)
