"""The stream's seed, order and tail (loader/stream_options.py): which argument wins, and every refusal
names its parameter."""

from __future__ import annotations

import pytest
import torch

from resumable_data.errors import ConfigError
from resumable_data.loader.samplers import PositionalRandomSampler
from resumable_data.loader.stream_options import order_spec, resolve_seed, resolve_tail
from resumable_data.plan import Order, OrderSpec, Tail


def test_the_seed_given_wins_then_the_samplers_then_the_generators():
    gen = torch.Generator().manual_seed(11)
    assert resolve_seed(5, 7, gen, True) == 5
    assert resolve_seed(None, 7, gen, True) == 7
    assert resolve_seed(None, None, gen, True) == 11
    assert resolve_seed(None, None, None, False) == 0  # nothing random: the seed is unused


def test_an_unknown_seed_while_shuffling_is_refused():
    with pytest.raises(ConfigError, match=r"^seed=None: expected an integer seed .*fix: pass seed=1234"):
        resolve_seed(None, None, None, True)


@pytest.mark.parametrize("seed", [-1, 1 << 64])
def test_a_seed_outside_64_bits_is_refused(seed):
    with pytest.raises(ConfigError, match=f"^seed={seed}"):
        resolve_seed(seed, None, None, True)


def test_order_spec_from_shuffle_and_window():
    assert order_spec(None, False, None, None) == OrderSpec(Order.SEQUENTIAL)
    assert order_spec(None, True, True, None) == OrderSpec(Order.GLOBAL)
    assert order_spec(64, True, None, None) == OrderSpec(Order.WINDOW, 64)
    with pytest.raises(ConfigError, match="^shuffle_window=64"):
        order_spec(64, False, False, None)
    with pytest.raises(ConfigError, match="^shuffle=True: expected unset with a positional sampler"):
        order_spec(None, True, True, PositionalRandomSampler(10, 10))


@pytest.mark.parametrize("tail, drop_last, sampler_tail, world, expected", [
    (None, False, None, 1, Tail.PARTIAL),
    (None, False, None, 2, Tail.WRAP),
    (None, True, None, 2, Tail.DROP),
    (None, False, Tail.PAD, 2, Tail.PAD),  # a DistributedSampler's own tail
    (None, True, Tail.PAD, 2, Tail.DROP),  # the loader's drop_last wins, as in torch
    ("wrap", False, None, 1, Tail.WRAP),
])
def test_the_tail_chosen(tail, drop_last, sampler_tail, world, expected):
    assert resolve_tail(tail, drop_last, None, sampler_tail, world, False) is expected


def test_a_changing_schedule_runs_on_the_continuous_tail_and_refuses_what_cannot_sit_beside_it():
    assert resolve_tail(None, False, None, None, 2, True) is Tail.CONTINUOUS
    with pytest.raises(ConfigError, match="^drop_last=True"):
        resolve_tail(None, True, None, None, 1, True)
    with pytest.raises(ConfigError, match="^packing="):
        resolve_tail(None, False, object(), None, 1, True)
    with pytest.raises(ConfigError, match="^sampler="):
        resolve_tail(None, False, None, Tail.PAD, 2, True)


def test_packing_and_the_tail():
    packing = object()  # only its presence matters here
    assert resolve_tail("pad", False, packing, None, 2, False) is Tail.WRAP  # whole global batches
    with pytest.raises(ConfigError, match="^tail='continuous'"):
        resolve_tail("continuous", False, packing, None, 1, False)


def test_a_partial_tail_on_several_ranks_is_refused():
    with pytest.raises(ConfigError, match="^tail='partial': expected drop or wrap when world_size > 1"):
        resolve_tail("partial", False, None, None, 2, False)


def test_the_partial_tail_refusal_names_fixes_that_work_when_followed():
    with pytest.raises(ConfigError, match="^tail='partial'") as e:
        resolve_tail("partial", False, None, None, 2, False)
    msg = str(e.value)
    # each fix it names, followed literally on the same two ranks
    assert "tail='wrap'" in msg and resolve_tail("wrap", False, None, None, 2, False) is Tail.WRAP
    assert "tail='drop'" in msg and resolve_tail("drop", False, None, None, 2, False) is Tail.DROP
    assert "drop tail=" in msg and resolve_tail(None, False, None, None, 2, False) is Tail.WRAP
    assert resolve_tail(None, True, None, None, 2, False) is Tail.DROP


@pytest.mark.parametrize("tail", ["partial", "wrap", "pad"])
def test_drop_last_beside_another_tail_is_refused_not_ignored(tail):
    with pytest.raises(ConfigError, match=f"^drop_last=True: expected False beside tail='{tail}'") as e:
        resolve_tail(tail, True, None, None, 1, False)
    assert "drop drop_last=True" in str(e.value) and "drop tail=" in str(e.value)
    assert resolve_tail(tail, False, None, None, 1, False) is Tail(tail)  # the first fix
    assert resolve_tail(None, True, None, None, 1, False) is Tail.DROP  # the second
    assert resolve_tail("drop", True, None, None, 1, False) is Tail.DROP  # agreeing: accepted
