"""Sharding validation and golden vectors; sample keys and their generators."""

import numpy as np
import pytest

import resumable_data as rd
from resumable_data.plan import Sharding, numpy_generator, python_random, sample_key, sample_keys


def test_sharding_golden_vectors():
    assert Sharding(4, 1).local_positions(8, 16).tolist() == [10, 11]
    assert Sharding(4, 1, "strided").local_positions(8, 16).tolist() == [9, 13]


@pytest.mark.parametrize("kwargs, param", [
    (dict(world_size=0), "world_size"), (dict(world_size=2, rank=2), "rank"), (dict(rank=-1), "rank"),
    (dict(policy="diagonal"), "policy"), (dict(world_size="2"), "world_size"),
])
def test_bad_sharding_is_rejected(kwargs, param):
    with pytest.raises(rd.ConfigError, match=param):
        Sharding(**kwargs)


def test_indivisible_global_batch_names_the_valid_world_sizes():
    with pytest.raises(rd.ConfigError, match=r"one of \[1, 2, 3, 6\]"):
        Sharding(4, 0).check_global_batch(6)


def test_round_trip():
    sh = Sharding(8, 3, "strided")
    assert Sharding.from_dict(sh.to_dict()) == sh
    with pytest.raises(rd.ResumeError, match="rank"):
        Sharding.from_dict({"world_size": 2, "rank": 5, "policy": "strided"})


def test_sample_key_golden_vectors():
    """A change here is a schema change: augmentation after resume would differ."""
    assert sample_key("golden", 7, 123) == 11276040018884567365
    assert sample_keys("golden", 7, [0, 1, 2], tag="aug").tolist() == [
        4500244767350191561, 5668450775983389508, 11706497501334918673]
    assert numpy_generator(sample_key("golden", 7, 123)).integers(0, 1000, 3).tolist() == [738, 65, 434]


def test_keys_depend_on_every_input():
    base = sample_key("v", 1, 10)
    assert len({base, sample_key("w", 1, 10), sample_key("v", 2, 10), sample_key("v", 1, 11),
                sample_key("v", 1, 10, "other")}) == 5
    assert sample_keys("v", 1, np.arange(5)).tolist() == [sample_key("v", 1, p) for p in range(5)]
    assert python_random(base).random() == python_random(base).random()


@pytest.mark.parametrize("env, expected", [
    ({}, Sharding(1, 0)),
    ({"RANK": "2", "WORLD_SIZE": "4"}, Sharding(4, 2)),
    ({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}, Sharding(1, 0)),
])
def test_from_environment(env, expected):
    assert Sharding.from_environment(environ=env) == expected


@pytest.mark.parametrize("env, param", [
    ({"RANK": "1"}, "WORLD_SIZE"), ({"WORLD_SIZE": "2"}, "RANK"), ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK"), ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "-1"}, "LOCAL_RANK"),
])
def test_from_environment_refuses_malformed_values(env, param):
    with pytest.raises(rd.ConfigError, match=param):
        Sharding.from_environment(environ=env)
