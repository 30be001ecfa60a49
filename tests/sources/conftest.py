"""Shared test data for the sources layer (built in tmp_path; no downloads)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest


def make_table(n: int, seed: int = 0, *, strings: bool = False) -> pa.Table:
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 20, n)
    off = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lens, out=off[1:])
    cols = {
        "tokens": pa.ListArray.from_arrays(pa.array(off), pa.array(rng.integers(0, 1000, off[-1]).astype(np.int32))),
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "score": pa.array(rng.random(n).astype(np.float32)),
    }
    if strings:
        cols["text"] = pa.array([f"row-{i}" if i % 7 else None for i in range(n)])
    return pa.table(cols)


@pytest.fixture
def table() -> pa.Table:
    return make_table(1000, strings=True)


@pytest.fixture(name="make_table")
def make_table_fixture():
    return make_table
