"""The stream: steps -> positions -> records; tails; rank slices; world-size invariance."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import resumable_data as rd
from resumable_data.plan import OrderSpec, Plan, Sharding, Tail

ORDERS = [OrderSpec(), OrderSpec("global"), OrderSpec("window", 16, 4)]


def epoch_stream(plan, epoch):
    s0 = epoch * plan.steps_per_epoch
    return [plan.records(np.arange(*plan.step_span(s))) for s in range(s0, s0 + plan.steps_per_epoch)]


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: o.kind.value)
@pytest.mark.parametrize("tail", [t for t in Tail if t is not Tail.CONTINUOUS])  # continuous: test_batch_schedule.py
def test_tails_cover_each_epoch_as_promised(order, tail):
    plan = Plan(num_records=23, global_batch=5, version_hash="v", seed=3, order=order, tail=tail)
    for epoch in range(3):
        batches = epoch_stream(plan, epoch)
        flat = np.concatenate(batches)
        if tail is Tail.DROP:
            assert [len(b) for b in batches] == [5] * 4
            assert len(np.unique(flat)) == 20  # 3 records dropped this epoch, none twice
        elif tail is Tail.WRAP:
            assert [len(b) for b in batches] == [5] * 5
            assert np.array_equal(np.sort(flat[:23]), np.arange(23))
            assert np.array_equal(flat[23:], flat[:2])  # wrapped to the epoch's first records
        else:
            assert [len(b) for b in batches] == [5, 5, 5, 5, 3]
            assert np.array_equal(np.sort(flat), np.arange(23))


@settings(derandomize=True, max_examples=80, deadline=None)
@given(n=st.integers(1, 400), per_rank=st.integers(1, 8), world=st.sampled_from([1, 2, 3, 4, 6]),
       policy=st.sampled_from(["contiguous", "strided"]), tail=st.sampled_from(["drop", "wrap"]),
       order=st.sampled_from(ORDERS), step=st.integers(0, 200))
def test_ranks_are_disjoint_and_union_is_the_global_batch(n, per_rank, world, policy, tail, order, step):
    g = per_rank * world
    if tail == "drop" and n < g:
        return
    plan = Plan(n, g, "v", 11, order, tail)
    start, stop = plan.step_span(step)
    parts = [plan.local_positions(step, Sharding(world, r, policy)) for r in range(world)]
    assert all(len(p) == per_rank for p in parts)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(start, stop))


@pytest.mark.parametrize("policy", ["contiguous", "strided"])
def test_global_stream_is_independent_of_world_size(policy):
    plan = Plan(1000, 24, "v", 5, OrderSpec("global"), "wrap")
    for step in [0, 1, 41, 42, 43, 1000]:
        reference = plan.records(np.arange(*plan.step_span(step)))
        for world in [1, 2, 3, 4, 6, 8, 12, 24]:
            got = np.empty(24, dtype=np.int64)
            for rank in range(world):
                sh = Sharding(world, rank, policy)
                pos = plan.local_positions(step, sh)
                got[pos - plan.step_span(step)[0]] = plan.records(pos)
            assert np.array_equal(got, reference)


def test_positions_map_back_to_steps_and_epochs_follow_positions():
    plan = Plan(10, 4, "v", 0, OrderSpec("global"), "partial")
    assert [plan.step_span(s) for s in range(4)] == [(0, 4), (4, 8), (8, 10), (10, 14)]
    assert [plan.step_of_position(p) for p in [0, 3, 4, 9, 10, 13, 14]] == [0, 0, 1, 2, 3, 3, 4]
    across = plan.records(np.array([8, 9, 10, 11]))  # spans epochs 0 and 1
    assert np.array_equal(across[:2], plan.records(np.array([8, 9])))
    assert np.array_equal(across[2:], plan.records(np.array([10, 11])))


def test_round_trip_and_validation():
    plan = Plan(100, 8, "abc", 2**64 - 1, OrderSpec("window", 32), "drop")
    assert Plan.from_dict(plan.to_dict()) == plan
    with pytest.raises(rd.ConfigError, match="drop_last"):
        Plan(3, 8, "v", 0, OrderSpec(), "drop")
    with pytest.raises(rd.ConfigError, match="seed"):
        Plan(3, 8, "v", -1)
    with pytest.raises(rd.ConfigError, match="tail"):
        Plan(3, 8, "v", 0, OrderSpec(), "bogus")  # "pad" is a tail now (DistributedSampler's padding)
    with pytest.raises(rd.ConfigError, match="pad_to"):
        Plan(3, 8, "v", 0, OrderSpec(), "wrap", 2)
    with pytest.raises(rd.ResumeError, match="plan.seed"):
        Plan.from_dict({**plan.to_dict(), "seed": "7"})
    with pytest.raises(rd.ResumeError, match="unexpected"):
        Plan.from_dict({**plan.to_dict(), "extra": 1})


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: o.kind.value)
@pytest.mark.parametrize("tail", list(Tail))
def test_records_and_spans_match_their_definition(order, tail):
    """``records`` of positions in one epoch (computed without a division per position) and across
    epochs, and ``step_span`` of a grid plan (from constants computed once), against the definition:
    ``epoch, offset = divmod(p, epoch_len)`` (offset modulo the records under wrap and pad), and the
    grid ``start = epoch * epoch_len + k * global_batch``."""
    pad = 4 if tail is Tail.PAD else 1
    plan = Plan(num_records=23, global_batch=4 if tail is Tail.PAD else 5, version_hash="v", seed=3, order=order,
                tail=tail, pad_to=pad)
    L = plan.epoch_len
    positions = np.arange(4 * L, dtype=np.int64)

    def expected(p):
        e, o = divmod(int(p), L)
        if tail in (Tail.WRAP, Tail.PAD):
            o %= plan.num_records
        return int(plan.epoch_records(e, np.array([o], dtype=np.int64))[0])

    want = np.array([expected(p) for p in positions])
    assert np.array_equal(plan.records(positions), want)  # across epochs
    for e in range(4):  # one epoch at a time, shuffled and 2-D
        sl = np.random.default_rng(e).permutation(positions[e * L : (e + 1) * L]).reshape(-1, 1)
        assert np.array_equal(plan.records(sl), want[sl])
    if tail is not Tail.CONTINUOUS:
        g, steps = plan.global_batch, plan.steps_per_epoch
        for s in range(4 * steps):
            e, k = divmod(s, steps)
            assert plan.step_span(s) == (e * L + k * g, min(e * L + k * g + g, (e + 1) * L))
