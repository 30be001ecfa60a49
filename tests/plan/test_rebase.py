"""plan.rebase: a data_change moves a single source's cursor onto a new dataset version at the same
step, epoch and fraction of the epoch (floor; a whole batch under drop / wrap); packed, at the same
step, epoch and in-epoch step (the next epoch when the new version's epoch is shorter)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import resumable_data as rd
from resumable_data.plan import BatchOrigin, OrderSpec, Plan
from resumable_data.plan.rebase import rebase_origin

TAILS = ["partial", "drop", "wrap", "continuous", "pad"]


def plan(n, g, tail, version="a", origin=None):
    pad = 2 if tail == "pad" else 1
    return Plan(n, g * pad, version, 3, OrderSpec("global"), tail, pad, origin=origin)


@settings(derandomize=True, max_examples=150, deadline=None)
@given(tail=st.sampled_from(TAILS), g=st.integers(1, 9), n_a=st.integers(9, 80), n_b=st.integers(9, 80),
       step=st.integers(0, 60))
def test_same_step_epoch_and_fraction(tail, g, n_a, n_b, step):
    saved, current = plan(n_a, g, tail), plan(n_b, g, tail, "b")
    o = rebase_origin(saved, step, current)
    epoch, offset = divmod(saved.step_start(step), saved.epoch_len)
    f = offset * current.epoch_len // saved.epoch_len
    if tail in ("drop", "wrap"):
        f -= f % current.global_batch
    assert (o.step, o.position, o.epoch_first_step) == (step, epoch * current.epoch_len + f,
                                                       saved.epoch_first_step(epoch))
    rebased = Plan(n_b, current.global_batch, "b", 3, OrderSpec("global"), tail, current.pad_to, origin=o)
    assert rebased.step_start(step) == o.position and rebased.epoch_of_step(step) == epoch
    # the rest of epoch e, then whole epochs: contiguous positions, batches never cut but at an epoch's end
    s, p = step, o.position
    for _ in range(2 * (n_b // current.global_batch + 2)):
        a, b = rebased.step_span(s)
        assert a == p and 0 < b - a <= current.global_batch
        if tail in ("drop", "wrap"):
            assert b - a == current.global_batch
        p, s = b, s + 1


@pytest.mark.parametrize("tail", TAILS)
def test_an_epoch_boundary_starts_the_new_epoch_at_its_first_record(tail):
    saved, current = plan(40, 4, tail), plan(57, 4, tail, "b")
    first = saved.epoch_first_step(3)
    o = rebase_origin(saved, first, current)
    assert o.position == 3 * current.epoch_len and o.epoch_first_step == first


def test_same_size_keeps_the_position_and_a_rebased_plan_rebases_again():
    saved, current = plan(40, 4, "partial"), plan(40, 4, "partial", "b")
    assert rebase_origin(saved, 13, current).position == saved.step_start(13)
    once = plan(57, 4, "partial", "b", origin=rebase_origin(saved, 13, current))
    twice = rebase_origin(once, 17, plan(30, 4, "partial", "c"))
    epoch, offset = divmod(once.step_start(17), 57)
    assert twice.position == epoch * 30 + offset * 30 // 57 and twice.epoch_first_step == once.epoch_first_step(epoch)
    with pytest.raises(rd.UsageError, match="step"):
        rebase_origin(once, 12, current)  # before the saved origin


def test_drop_and_wrap_take_an_origin_only_at_a_whole_batch():
    assert Plan(37, 8, "v", tail="drop", origin=BatchOrigin(3, 40, 0)).step_span(3) == (40, 48)
    with pytest.raises(rd.ConfigError, match=r"drop and wrap shape each epoch"):
        Plan(37, 8, "v", tail="wrap", origin=BatchOrigin(3, 25, 0))


def test_a_rebase_past_the_position_limit_is_refused():
    saved, current = plan(2, 1, "partial"), plan(1 << 61, 1, "partial", "b")
    with pytest.raises(rd.ResumeError, match=r"state.cursor.*2\*\*62"):
        rebase_origin(saved, 10, current)


# -- packed: the epoch base (rebase_packed) -----------------------------------------------------------
from resumable_data.plan.rebase import rebase_packed  # noqa: E402


@settings(derandomize=True, max_examples=150, deadline=None)
@given(epoch=st.integers(0, 5), first=st.integers(0, 40), k=st.integers(0, 30), steps=st.integers(1, 30))
def test_packed_keeps_the_epoch_and_in_epoch_step_else_starts_the_next_epoch(epoch, first, k, steps):
    first = max(first, epoch) if epoch else 0
    step = first + k
    got = rebase_packed((epoch, first), step, steps, 100)
    assert got == ((epoch, first) if k < steps else (epoch + 1, step))


def test_packed_at_an_epoch_boundary_starts_the_same_epoch_of_the_new_version():
    assert rebase_packed((3, 17), 17, 1, 10) == (3, 17)
    assert rebase_packed((0, 0), 0, 5, 10) == (0, 0)


def test_packed_refuses_a_step_before_the_epoch_and_an_epoch_past_the_limit():
    with pytest.raises(rd.UsageError, match="step=4"):
        rebase_packed((1, 5), 4, 3, 10)
    with pytest.raises(rd.UsageError, match="steps"):
        rebase_packed((1, 5), 6, 0, 10)
    with pytest.raises(rd.ResumeError, match=r"state.epoch_base.*2\*\*62"):
        rebase_packed((1 << 40, 1 << 40), 1 << 40, 2, 1 << 30)
