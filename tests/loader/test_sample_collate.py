"""rd's default collation (resumable_data/loader/sample_collate.py) is torch's ``default_collate``:
the same tensors for every batch, the same errors, and it is what the loader uses by default."""

from __future__ import annotations

import enum
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch.utils.data import default_collate as torch_collate

import resumable_data as rd
from resumable_data.loader import sample_collate
from resumable_data.loader.sample_collate import default_collate


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 7


def same(a, b) -> None:
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and a.is_contiguous() == b.is_contiguous()
        assert a.untyped_storage().nbytes() == b.untyped_storage().nbytes()
        if a.dtype.is_floating_point:  # bit for bit: NaN payloads and -0.0 too
            assert a.view(torch.int64 if a.dtype == torch.float64 else torch.int32).tolist() == \
                b.view(torch.int64 if b.dtype == torch.float64 else torch.int32).tolist()
        else:
            assert torch.equal(a, b)
        assert a.untyped_storage().resizable() == b.untyped_storage().resizable(), "a storage of its own, as torch's"
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    else:
        assert a == b


BATCHES = {
    "ints": list(range(1000, 1016)),
    "negative and extreme ints": [0, -1, 2**63 - 1, -2**63, 5],
    "floats": [0.5, -0.0, math.inf, -math.inf, 1e-310, 3.0],
    "one int": [42],
    "bools": [True, False, True],
    "ints then a bool": [1, True, 3],
    "a bool then ints": [True, 2, 3],
    "ints then a float": [1, 2.5, 3],
    "floats then an int": [1.5, 2, 3.5],
    "int enum": [Level.LOW, Level.HIGH],
    "ints then an int enum": [3, Level.HIGH],
    "numpy ints": [np.int64(3), np.int64(4)],
    "ints then a numpy int": [3, np.int32(4)],
    "tuples of tensor and label": [(torch.tensor([i, i]), i) for i in range(5)],
    "dicts with floats and ints": [{"x": float(i), "y": i, "s": str(i)} for i in range(4)],
    "nested lists": [[i, i + 1] for i in range(3)],
    "strings": ["a", "b"],
}


@pytest.mark.parametrize("name", list(BATCHES))
def test_every_batch_is_torchs_tensor(name):
    same(default_collate(BATCHES[name]), torch_collate(BATCHES[name]))


def test_nan_payloads_are_kept():
    nan = float("nan")
    odd = np.frombuffer(np.array([0x7FF8000000000123], dtype=np.uint64).tobytes(), dtype=np.float64)[0].item()
    batch = [nan, odd, 1.0]
    same(default_collate(batch), torch_collate(batch))


@pytest.mark.parametrize("batch", [[2**63, 1], [1, -2**63 - 1], [1, 2**100]])
def test_ints_outside_int64_raise_torchs_error(batch):
    with pytest.raises(Exception) as want:
        torch_collate(batch)
    with pytest.raises(type(want.value)) as got:
        default_collate(batch)
    assert str(got.value) == str(want.value)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False), st.booleans()), min_size=1,
                max_size=20))
def test_drawn_batches_are_torchs(batch):
    try:
        want = torch_collate(batch)
    except Exception as e:  # a mixed batch torch cannot build: the same error
        with pytest.raises(type(e)):
            default_collate(batch)
        return
    same(default_collate(batch), want)


def test_the_fast_route_is_the_one_taken_for_plain_ints_and_floats(monkeypatch):
    called = []
    monkeypatch.setattr(sample_collate, "collate_int_fn", lambda b, **k: called.append("int") or torch.tensor(b))
    monkeypatch.setattr(sample_collate, "collate_float_fn",
                        lambda b, **k: called.append("float") or torch.tensor(b, dtype=torch.float64))
    default_collate([1, 2, 3])
    default_collate([1.0, 2.0])
    assert called == []  # the buffers, not torch.tensor
    default_collate([True, False])
    default_collate([1.0, 2])
    assert called == ["int", "float"]


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_collates_labels_as_torch_does(workers):
    data = [(torch.full((2,), float(i)), i, i / 7) for i in range(20)]
    got = list(rd.DataLoader(data, batch_size=6, num_workers=workers))
    want = list(torch.utils.data.DataLoader(data, batch_size=6, num_workers=workers))
    assert len(got) == len(want) == 4
    for a, b in zip(got, want):
        same(list(a), list(b))
    assert rd.DataLoader(data, batch_size=6).collate_fn is torch_collate  # torch's attribute, as torch shows it


def test_a_map_extended_or_changed_by_the_user_is_followed(monkeypatch):
    """torch's docs extend ``default_collate`` by editing ``default_collate_fn_map`` in place: rd's
    default follows it, after its first use too, and keeps a user's own int entry."""
    from torch.utils.data._utils.collate import default_collate_fn_map

    class Pt:
        def __init__(self, x):
            self.x = x

    default_collate([1, 2])  # the map was seen once already
    monkeypatch.setitem(default_collate_fn_map, Pt, lambda b, *, collate_fn_map=None: torch.tensor([p.x for p in b]))
    same(default_collate([Pt(1), Pt(2)]), torch_collate([Pt(1), Pt(2)]))
    monkeypatch.setitem(default_collate_fn_map, int, lambda b, *, collate_fn_map=None: torch.tensor(b, dtype=torch.int32))
    assert default_collate([1, 2]).dtype == torch.int32 == torch_collate([1, 2]).dtype
    ds = [Pt(i) for i in range(8)]
    same(list(rd.DataLoader(ds, batch_size=4)), list(torch.utils.data.DataLoader(ds, batch_size=4)))
    monkeypatch.undo()
    assert default_collate([1, 2]).dtype == torch.int64
    with pytest.raises(TypeError):  # the user's type is gone again, as from torch's
        default_collate([Pt(1), Pt(2)])
