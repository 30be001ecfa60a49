"""rd.Mixture's integer options (epoch_len, a weight schedule's steps, block_size) are range-checked at
construction with an rd.ConfigError (issue 30, item 7); the checks live in sources/mixture.py and plan/mixture/."""

from __future__ import annotations

import pytest

import resumable_data as rd


@pytest.mark.parametrize("epoch_len", [2 ** 63, 2 ** 62 + 1, 2 ** 64, 0, -1])
def test_mixture_epoch_len_out_of_range(shards, epoch_len):
    with pytest.raises(rd.ConfigError, match=f"epoch_len={epoch_len}.*2\\*\\*62"):
        rd.Mixture({"a": shards, "b": shards}, {"a": 1, "b": 1}, epoch_len=epoch_len)


def test_mixture_epoch_len_at_the_bound_runs(shards):
    loader = rd.DataLoader(rd.Mixture({"a": shards, "b": shards}, {"a": 1, "b": 1}, epoch_len=2 ** 62),
                           batch_size=2, seed=0)
    assert len(loader) == 2 ** 61
    assert next(iter(loader))["id"].shape == (2,)


@pytest.mark.parametrize("weights,param", [
    (lambda: rd.WeightSchedule([(0, {"a": 1, "b": 1}), (2 ** 70, {"a": 1, "b": 2})]), "step"),
])
def test_mixture_schedule_values_are_range_checked(shards, weights, param):
    with pytest.raises(rd.ConfigError, match=param):
        rd.Mixture({"a": shards, "b": shards}, weights())
    with pytest.raises(rd.ConfigError, match="block_size"):
        rd.Mixture({"a": shards, "b": shards}, {"a": 1, "b": 1}, block_size=2 ** 70)


@pytest.mark.parametrize("batch_size", [3, 7])
def test_mixture_epoch_len_rounded_past_the_bound_names_epoch_len(shards, batch_size):
    with pytest.raises(rd.ConfigError, match=r"epoch_len=4611686018427387904: expected at most .*multiple of the global batch"):
        rd.DataLoader(rd.Mixture({"a": shards, "b": shards}, {"a": 1, "b": 1}, epoch_len=2 ** 62),
                      batch_size=batch_size, seed=0)
    bound = (2 ** 62) // batch_size * batch_size  # the fix the message names works
    loader = rd.DataLoader(rd.Mixture({"a": shards, "b": shards}, {"a": 1, "b": 1}, epoch_len=bound),
                           batch_size=batch_size, seed=0)
    assert len(loader) == bound // batch_size
