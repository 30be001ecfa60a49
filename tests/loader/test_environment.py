"""The torch layer's launch-environment reader: os.environ and the torch.distributed group."""

import pytest
import torch.distributed as dist

import resumable_data as rd
from resumable_data.loader import environment


def _fake_group(monkeypatch, world=4, rank=2):
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: world)
    monkeypatch.setattr(dist, "get_rank", lambda *a, **k: rank)


def test_no_process_group_in_a_plain_process():
    assert environment.process_group() is None


@pytest.mark.parametrize("env, expected", [
    ({}, rd.Sharding(4, 2)),
    ({"LOCAL_RANK": "0"}, rd.Sharding(4, 2)),  # the group is authoritative: no torchrun needed
    ({"RANK": "2", "WORLD_SIZE": "4"}, rd.Sharding(4, 2)),
    ({"RANK": "1"}, "RANK"),
    ({"WORLD_SIZE": "2"}, "WORLD_SIZE"),
])
def test_an_initialized_process_group_is_read_and_wins(monkeypatch, env, expected):
    _fake_group(monkeypatch)
    assert environment.process_group() == (4, 2)
    if isinstance(expected, rd.Sharding):
        assert rd.sharding_from_environment(environ=env) == expected
    else:
        with pytest.raises(rd.ConfigError, match=rf"^{expected}="):
            rd.sharding_from_environment(environ=env)


def test_the_process_group_also_feeds_the_loader_default(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    _fake_group(monkeypatch, world=2, rank=1)
    assert rd.sharding_from_environment("strided") == rd.Sharding(2, 1, "strided")
    assert rd.DataLoader(list(range(8)), batch_size=2, drop_last=True).sharding == rd.Sharding(2, 1)
