"""Sharding (plan/sharding.py): validation, golden vectors, the round trip, and the launch environment read into a Sharding."""

import re
import importlib
import pytest
import resumable_data as rd

from resumable_data.plan import Sharding


keys_module = importlib.import_module("resumable_data.plan.sample_keys")  # the package re-exports a function of that name


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


def test_a_full_torchrun_environment_is_read():
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert Sharding.from_environment("strided", environ=env) == Sharding(4, 3, "strided")


@pytest.mark.parametrize("env, missing", [
    ({"LOCAL_RANK": "1"}, "RANK and WORLD_SIZE missing"),
    ({"LOCAL_RANK": "0"}, "RANK and WORLD_SIZE missing"),
    ({"LOCAL_WORLD_SIZE": "2"}, "RANK and WORLD_SIZE missing"),
    ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, "RANK and WORLD_SIZE missing"),
    ({"RANK": "1"}, "WORLD_SIZE missing"),
    ({"RANK": "0", "LOCAL_RANK": "0"}, "WORLD_SIZE missing"),
    ({"WORLD_SIZE": "2"}, "RANK missing"),
    ({"WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, "RANK missing"),
])
def test_a_partial_torchrun_environment_is_an_error_not_rank_0(env, missing):
    with pytest.raises(rd.ConfigError) as info:
        Sharding.from_environment(environ=env)
    msg = str(info.value)
    assert msg.startswith(f"environment={env!r}: expected RANK and WORLD_SIZE set together")  # what was seen
    assert f"partial torchrun environment: {missing}" in msg
    assert "fix: launch with torchrun" in msg and "rd.Sharding(world_size, rank)" in msg
    assert f"unset {', '.join(k for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE') if k in env)}" in msg


def test_the_torch_layer_reads_os_environ(monkeypatch):
    """Reading the environment is the torch layer's job (rd.sharding_from_environment); the
    DataLoader's default sharding reads it the same way."""
    for k in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(rd.ConfigError, match="LOCAL_RANK.*RANK and WORLD_SIZE missing"):
        rd.sharding_from_environment()
    with pytest.raises(rd.ConfigError, match="partial torchrun environment"):
        rd.DataLoader(list(range(8)), batch_size=2)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert rd.sharding_from_environment() == Sharding(2, 1)
    assert rd.sharding_from_environment("strided") == Sharding(2, 1, "strided")
    assert rd.DataLoader(list(range(8)), batch_size=2).sharding == Sharding(2, 1)


def test_from_environment_reads_nothing_itself(monkeypatch):
    """The plan-layer function is pure: os.environ is not consulted when environ= is given."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert Sharding.from_environment(environ={}) == Sharding(1, 0)
    assert Sharding.from_environment("strided", environ={}, process_group=(4, 3)) == Sharding(4, 3, "strided")
    with pytest.raises(rd.ConfigError, match="^environ='strided': expected a mapping"):
        Sharding.from_environment(environ="strided")


@pytest.mark.parametrize("group", [(0, 0), (2, 2), (2, -1), [2, 1], (2.0, 1), (True, 0), 4])
def test_a_malformed_process_group_is_refused(group):
    with pytest.raises(rd.ConfigError, match="^process_group="):
        Sharding.from_environment(environ={}, process_group=group)


@pytest.mark.parametrize("env, param, expected", [
    ({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"}, "LOCAL_RANK",
     "in [0, LOCAL_WORLD_SIZE=2)"),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "4"}, "LOCAL_WORLD_SIZE", "in [1, WORLD_SIZE=2]"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "0"}, "LOCAL_WORLD_SIZE", "in [1, WORLD_SIZE=2]"),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "2"}, "LOCAL_RANK", "in [0, WORLD_SIZE=2)"),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": ""}, "LOCAL_RANK", "a decimal integer"),
    ({"RANK": " ", "WORLD_SIZE": "2"}, "RANK", "a decimal integer"),
])
def test_inconsistent_local_values_are_refused(env, param, expected):
    with pytest.raises(rd.ConfigError, match=rf"^{param}=.*expected .*{re.escape(expected)}"):
        Sharding.from_environment(environ=env)


@pytest.mark.parametrize("env, expected", [
    ({}, Sharding(4, 2)),
    ({"LOCAL_RANK": "0"}, Sharding(4, 2)),  # the group is authoritative: no torchrun needed
    ({"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4"}, Sharding(4, 2)),
    ({"RANK": "1"}, "RANK"),
    ({"WORLD_SIZE": "2"}, "WORLD_SIZE"),
    ({"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "4"}, "LOCAL_RANK"),
])
def test_an_initialized_process_group_wins_and_the_environment_must_agree(env, expected):
    group = (4, 2)  # an initialized torch.distributed group: rank 2 of 4
    if isinstance(expected, Sharding):
        assert Sharding.from_environment(environ=env, process_group=group) == expected
    else:
        with pytest.raises(rd.ConfigError, match=rf"^{expected}="):
            Sharding.from_environment(environ=env, process_group=group)


def test_world_size_lists_are_complete_or_say_how_many_are_left_out():
    from resumable_data.plan.sharding import divisors, world_sizes_text

    assert all(divisors(n) == [d for d in range(1, n + 1) if n % d == 0] for n in range(1, 600))
    assert divisors(1 << 40)[-1] == 1 << 40 and len(divisors(1 << 40)) == 41  # no O(n) scan
    assert world_sizes_text(24) == "[1, 2, 3, 4, 6, 8, 12, 24]"
    assert world_sizes_text(720720) == ("[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 20, 21, 22, "
                                        "24, 26, 28, ... 216 more ..., 720720]")  # 240 divisors
