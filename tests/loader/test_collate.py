"""The default Arrow batch (loader/collate.py): every column type becomes what the docstring says,
tensors are writable (torch warns on, and cannot safely use, read-only numpy memory), and the
values equal Arrow's."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import torch

import resumable_data as rd
from resumable_data.loader.collate import LENGTHS_SUFFIX, arrow_to_tensors


def _table() -> pa.Table:
    return pa.table({
        "x": pa.array(range(8), type=pa.int64()),
        "f": pa.array([i / 2 for i in range(8)], type=pa.float32()),
        "fixed": pa.array([[i, i + 1, i + 2] for i in range(8)], type=pa.list_(pa.float32(), 3)),
        "var": pa.array([[i] * (i % 3) for i in range(8)], type=pa.list_(pa.int32())),
        "text": [f"t{i}" for i in range(8)],
    })


def test_every_column_type_and_no_read_only_tensor():
    table = _table()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "The given NumPy array is not writable" would fail here
        batch = arrow_to_tensors(table)
    assert batch["x"].tolist() == list(range(8))
    assert batch["f"].dtype == torch.float32 and batch["f"].tolist() == [i / 2 for i in range(8)]
    assert batch["fixed"].shape == (8, 3) and batch["fixed"].tolist() == [[i, i + 1, i + 2] for i in range(8)]
    assert batch["var"].shape == (8, 2)
    assert batch["var" + LENGTHS_SUFFIX].tolist() == [i % 3 for i in range(8)]
    assert batch["var"].tolist() == [[i] * (i % 3) + [0] * (2 - i % 3) for i in range(8)]
    assert batch["text"] == [f"t{i}" for i in range(8)]
    for name in ("x", "f", "fixed", "var"):
        batch[name].add_(1)  # writable, and writing does not touch the Arrow buffers
    assert table.column("fixed").to_pylist()[0] == [0, 1, 2]
    assert table.column("x").to_pylist()[:2] == [0, 1]


def test_fixed_size_list_through_the_loader_warns_nothing(tmp_path):
    rd.write_arrow_shards(_table(), tmp_path / "d", rows_per_batch=3)
    src = rd.ArrowShards(tmp_path / "d", unpinned="allow")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batches = list(rd.DataLoader(src, batch_size=4, shuffle=False, seed=0))
    assert torch.cat([b["fixed"] for b in batches]).tolist() == [[i, i + 1, i + 2] for i in range(8)]
    assert np.all([b["fixed"].numpy().flags.writeable for b in batches])
