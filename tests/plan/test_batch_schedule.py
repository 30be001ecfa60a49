"""Batch schedules: step <-> position maps, against a brute-force walk; plans under a schedule,
the continuous tail and a batch origin; validation and serialization."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import resumable_data as rd
from resumable_data.plan import BatchOrigin, BatchRamp, BatchSchedule, BatchSteps, OrderSpec, Plan, Sharding


def ramp_walk(start, inc, ramp, final, steps):
    """Megatron's rule, step by step: batch = start + floor(consumed * k / ramp) * inc, capped."""
    k = (final - start) // inc
    consumed, out = 0, []
    for _ in range(steps):
        b = final if k == 0 else min(final, start + (consumed * k // ramp) * inc)
        out.append((consumed, b))
        consumed += b
    return out


def steps_walk(points, steps):
    table = dict(points)
    b, consumed, out = None, 0, []
    for s in range(steps):
        b = table.get(s, b)
        out.append((consumed, b))
        consumed += b
    return out


ramps = st.tuples(st.integers(1, 12), st.integers(1, 9), st.integers(1, 400), st.integers(0, 6)).map(
    lambda t: BatchRamp(t[0], t[1], t[2], t[0] + t[3] * t[1]))
step_lists = st.lists(st.tuples(st.integers(1, 40), st.integers(1, 20)), min_size=0, max_size=6).map(
    lambda gaps: BatchSteps(tuple([(0, 7)] + [(sum(g for g, _ in gaps[:i + 1]), b) for i, (_, b) in enumerate(gaps)])))


@settings(derandomize=True, max_examples=150, deadline=None)
@given(sched=st.one_of(ramps, step_lists))
def test_maps_are_inverse_and_match_a_brute_force_walk(sched):
    n = 160
    if isinstance(sched, BatchRamp):
        walk = ramp_walk(sched.start, sched.increment, sched.ramp_samples, sched.final, n)
    else:
        walk = steps_walk(sched.points, n)
    for s, (start, batch) in enumerate(walk):
        assert sched.step_start(s) == start
        assert sched.batch_of(s) == batch
        assert sched.step_span(s) == (start, start + batch)
        for p in (start, start + batch // 2, start + batch - 1):
            assert sched.step_of_position(p) == s
        assert sched.step_of_position(sched.step_start(s)) == s


def test_ramp_segments_golden():
    # Megatron: 3 increments over 1000 samples: thresholds 334, 667, 1000 samples
    r = BatchRamp(8, 8, 1000, 32)
    assert [(g.step, g.position, g.batch) for g in r.segments] == [(0, 0, 8), (42, 336, 16), (63, 672, 24),
                                                                    (77, 1008, 32)]
    assert r.step_start(10**6) == 1008 + (10**6 - 77) * 32
    assert r.step_of_position(r.step_start(10**6) + 31) == 10**6
    assert r.scaled(2).segments[1] == rd.plan.batch_schedule.Segment(42, 672, 32)


def test_a_ramp_that_overshoots_a_stage_skips_it():
    r = BatchRamp(10, 1, 12, 14)  # 4 increments of 3 samples each; the first step consumes 10
    assert [(g.step, g.position, g.batch) for g in r.segments] == [(0, 0, 10), (1, 10, 13), (2, 23, 14)]
    assert [b for _, b in ramp_walk(10, 1, 12, 14, 4)] == [10, 13, 14, 14]


def test_serialization_round_trips_and_is_strict():
    for s in (BatchRamp(4, 4, 100, 16), BatchSteps(((0, 8), (5, 16)))):
        assert BatchSchedule.from_dict(s.to_dict()) == s
    with pytest.raises(rd.ResumeError, match="points"):
        BatchSchedule.from_dict({"kind": "steps", "points": []})
    with pytest.raises(rd.ResumeError, match="inconsistent"):
        BatchSchedule.from_dict({"kind": "steps", "points": [[0, 8], [0, 16]]})
    with pytest.raises(rd.ResumeError, match="kind"):
        BatchSchedule.from_dict({"kind": "cosine"})
    with pytest.raises(rd.ResumeError, match="unexpected"):
        BatchSchedule.from_dict({**BatchRamp(4, 4, 100, 16).to_dict(), "warmup": 1})


@pytest.mark.parametrize("make, match", [
    (lambda: BatchSteps(((1, 8),)), r"^batch_size / rd.BatchSteps pairs=.*first pair at step 0.*prepend \(0, 8\)"),
    (lambda: BatchSteps(((0, 8), (5, 4), (5, 2))), r"strictly increasing steps"),
    (lambda: BatchSteps(((0, 0),)), r"batch schedule batch"),
    (lambda: BatchRamp(8, 3, 100, 16), r"BatchRamp.final.*start \+ a multiple of increment.*final=14"),
    (lambda: BatchRamp(8, 8, 0, 16), r"BatchRamp.ramp_samples"),
    (lambda: BatchRamp(8, 8, 100, 4), r"BatchRamp.final"),
])
def test_bad_schedules_name_parameter_value_and_fix(make, match):
    with pytest.raises(rd.ConfigError, match=match) as e:
        make()
    assert "fix:" in str(e.value)


def ramp_plan(**kw):
    args = dict(num_records=37, global_batch=32, version_hash="v", seed=3, order=OrderSpec("global"),
                tail="continuous", schedule=BatchRamp(8, 8, 200, 32))
    args.update(kw)
    return Plan(**args)


def test_a_constant_schedule_is_the_fixed_batch_plan_byte_for_byte():
    fixed = Plan(37, 8, "v", 3, OrderSpec("global"), "partial")
    scheduled = Plan(37, 8, "v", 3, OrderSpec("global"), "partial", schedule=BatchSteps(((0, 8), (10, 8))))
    assert scheduled == fixed and scheduled.to_dict() == fixed.to_dict() and scheduled.schedule is None


def test_continuous_epochs_hold_every_record_once_and_batches_straddle():
    plan = ramp_plan()
    n, total = plan.num_records, 0
    for epoch in range(6):
        first, count = plan.epoch_first_step(epoch), plan.steps_in_epoch(epoch)
        assert all(plan.epoch_of_step(s) == epoch for s in range(first, first + count))
        assert plan.step_start(first) >= epoch * n and plan.step_start(first - 1 if first else 0) < max(1, epoch * n)
        total += count
    positions = np.arange(0, plan.step_start(total))
    records = plan.records(positions)
    for epoch in range(positions.size // n):
        assert sorted(records[epoch * n:(epoch + 1) * n]) == list(range(n))
    straddling = [s for s in range(total) if plan.step_span(s)[0] // n != (plan.step_span(s)[1] - 1) // n]
    assert straddling  # 37 records, batches 8..32: some batch holds two epochs' records


def test_schedules_demand_the_continuous_tail():
    with pytest.raises(rd.ConfigError, match=r"tail.*'continuous' with a batch schedule"):
        ramp_plan(tail="partial")
    with pytest.raises(rd.ConfigError, match=r"global_batch.*largest batch 32"):
        ramp_plan(global_batch=8)
    with pytest.raises(rd.ConfigError, match=r"drop and wrap shape each epoch"):
        Plan(37, 8, "v", tail="drop", origin=BatchOrigin(3, 25, 0))


@settings(derandomize=True, max_examples=60, deadline=None)
@given(world=st.sampled_from([1, 2, 4]), policy=st.sampled_from(["contiguous", "strided"]), step=st.integers(0, 120))
def test_ranks_slice_every_step_of_a_ramp_exactly(world, policy, step):
    plan = ramp_plan(global_batch=32 * world, schedule=BatchRamp(8, 8, 200, 32).scaled(world))
    start, stop = plan.step_span(step)
    parts = [plan.local_positions(step, Sharding(world, r, policy)) for r in range(world)]
    assert all(len(p) == (stop - start) // world == plan.batch_of(step) // world for p in parts)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(start, stop))


def brute_steps(plan, first_step, steps):
    """(step, start, stop) walked one step at a time from ``first_step``'s start."""
    return [(s, *plan.step_span(s)) for s in range(first_step, first_step + steps)]


@settings(derandomize=True, max_examples=80, deadline=None)
@given(tail=st.sampled_from(["continuous", "partial", "pad"]), g_old=st.integers(1, 12), g_new=st.integers(1, 12),
       at=st.integers(0, 40), n=st.integers(5, 60))
def test_an_origin_continues_at_the_committed_sample(tail, g_old, g_new, at, n):
    pad = 2 if tail == "pad" else 1
    g_old, g_new = g_old * pad, g_new * pad
    old = Plan(n, g_old, "v", 1, OrderSpec("global"), tail, pad)
    origin = old.origin_at(at)
    new = Plan(n, g_new, "v", 1, OrderSpec("global"), tail, pad, origin=origin)
    walked = brute_steps(new, at, 3 * (n // g_new + 2))
    # contiguous, gap-free positions from the committed sample; each step's batch as declared
    assert walked[0][1] == old.step_start(at)
    for (s, a, b), (_, a2, _) in zip(walked, walked[1:]):
        assert b == a2 and 0 < b - a <= g_new
        assert new.step_of_position(a) == s == new.step_of_position(b - 1)
        assert (b - a == g_new) or b % new.epoch_len == 0  # short only at an epoch's end (grid tails)
    for s, a, _ in walked:
        e = new.epoch_of_step(s)
        assert new.epoch_first_step(e) <= s < new.epoch_first_step(e) + new.steps_in_epoch(e)
    assert new.epoch_first_step(new.epoch_of_step(at)) == old.epoch_first_step(old.epoch_of_step(at))
    if at:  # steps before the origin belong to the saved plan, not to this one
        with pytest.raises(rd.UsageError, match="batch segment"):
            new.step_span(at - 1)
        with pytest.raises(rd.UsageError, match="batch segment"):
            new.step_of_position(origin.position - 1)


def test_steps_per_epoch_refuses_a_plan_whose_epochs_differ():
    with pytest.raises(rd.UsageError, match="steps_in_epoch"):
        ramp_plan().steps_per_epoch
