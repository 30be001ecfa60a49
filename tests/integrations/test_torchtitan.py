"""``TitanDataLoader``: torchtitan's data-loader interface over a packed ``rd.DataLoader``, tested
without torchtitan (it does not install beside this project's pinned ``datasets``; see
``examples/torchtitan/README.md``). Batches are ``(input_dict, labels)`` with the tokens under
``input_dict["input"]``; a state taken at a random step and loaded into a fresh loader in a fresh
(forked) process continues with the same batches, in order, and the state survives a
``torch.distributed.checkpoint`` round trip."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pyarrow as pa
import pytest
import torch

import resumable_data as rd
import _integ_common as C
from resumable_data.integrations.torchtitan import TitanDataLoader


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(0)
    docs = [rng.integers(1, 500, size=int(rng.integers(3, 40))).tolist() for _ in range(300)]
    root = tmp_path_factory.mktemp("titan") / "shards"
    rd.write_arrow_shards(pa.table({"tokens": docs}), root, num_shards=2)
    rd.pin(root)
    return root


def _loader(data):
    return TitanDataLoader(
        rd.DataLoader(
            rd.ArrowShards(data),
            batch_size=4,
            shuffle=True,
            seed=5,
            drop_last=True,
            packing=rd.Packing(32, "concat", window=20, eos_id=0),
        )
    )


def _digests(loader, n):
    out = []
    for inputs, labels in itertools.islice(loader, n):  # pulls exactly n batches
        assert inputs["input"].shape == labels.shape == (4, 32)
        out.append([C.digest(inputs["input"]), C.digest(labels), C.digest(inputs["position_ids"])])
    return out


def _resume(data, state, n):
    fresh = _loader(data)
    fresh.load_state_dict(state)
    return _digests(fresh, n)


def test_titan_loader_resumes_in_a_fresh_process(data):
    full = _digests(_loader(data), 60)
    k = random.Random(15).randint(5, 50)
    head = _loader(data)
    assert _digests(head, k) == full[:k]
    state = head.state_dict()
    status, tail = C.run_child(_resume, data=data, state=state, n=60 - k)
    assert status == "done", tail
    assert tail == full[k:]


def test_titan_state_through_dcp(tmp_path, data):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.stateful import Stateful

    head = _loader(data)
    assert isinstance(head, Stateful)
    _digests(head, 7)
    dcp.save({"dataloader": head}, checkpoint_id=str(tmp_path / "ckpt"))
    fresh = _loader(data)
    dcp.load({"dataloader": fresh}, checkpoint_id=str(tmp_path / "ckpt"))
    assert fresh.loader.cursor == head.loader.cursor
    assert _digests(fresh, 5) == _digests(head, 5)


def test_titan_loader_refusals(data):
    with pytest.raises(rd.ConfigError, match="rd.DataLoader"):
        TitanDataLoader(torch.utils.data.DataLoader(list(range(4))))
    plain = TitanDataLoader(rd.DataLoader(rd.ArrowShards(data), batch_size=2))
    with pytest.raises(rd.ConfigError, match="input_ids"):
        next(iter(plain))
    with pytest.raises(rd.ResumeError, match="rd_loader"):
        _loader(data).load_state_dict({"dp_rank_0": b"x"})
    _loader(data).load_state_dict({})  # torchtitan's empty state: a fresh start


def test_save_checkpoint_takes_the_titan_loaders_step_and_resumes(tmp_path, data):
    """``rd.save_checkpoint(dir, titan_loader)`` without ``step=``: the wrapped loader's delivered
    steps (``TitanDataLoader`` holds it as ``.loader``); the restore continues with every batch."""
    full = _digests(_loader(data), 40)
    head = _loader(data)
    assert _digests(head, 9) == full[:9]
    path = rd.save_checkpoint(tmp_path, head)
    assert path.name == "step-000000000009"
    fresh = _loader(data)
    rd.load_checkpoint(tmp_path, fresh)
    assert _digests(fresh, 31) == full[9:]
