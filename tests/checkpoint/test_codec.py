"""checkpoint/codec.py: a state tree to JSON plus tensors and back, never pickling."""

from __future__ import annotations

import json

import pytest
import torch

import resumable_data as rd
from resumable_data.checkpoint import codec


def test_codec_round_trip_and_refusals():
    tree = {"a": torch.arange(4), "t": (1, 2.5, float("inf")), "ints": {3: "x"}, "l": [True, None, "s"]}
    j, tensors = codec.encode(tree)
    json.dumps(j)
    back = codec.decode(json.loads(json.dumps(j)), tensors)
    assert torch.equal(back["a"], tree["a"]) and back["t"] == tree["t"] and back["ints"] == {3: "x"}
    w = torch.zeros(3)
    _, shared = codec.encode({"x": w, "y": w})
    assert shared["x"].data_ptr() != shared["y"].data_ptr()
    with pytest.raises(rd.CheckpointError, match=r"obj.*never pickles"):
        codec.encode({"obj": object()})
    with pytest.raises(rd.CheckpointError, match="tensor file"):
        codec.decode({"a": 1}, {"stray": torch.zeros(1)})
