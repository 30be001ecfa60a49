"""The pure mixture plan: block-exact proportions, counts without a walk, per-source epochs, runs."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resumable_data.errors import ConfigError
from resumable_data.plan.mixture import MixturePlan, Rebase, StepPositions, WeightSchedule, floor_sum

NAMES = ("web", "code", "math")


def make(weights, sizes=(100, 50, 7), block=64, seed=1, schedule=None, pos=None, rebase=None, shuffle=True):
    names = tuple(f"s{i}" for i in range(len(weights))) if len(weights) != 3 else NAMES
    sched = schedule or WeightSchedule.constant(dict(zip(names, weights)))
    return MixturePlan(names, sizes, [f"v{i}" for i in range(len(names))], sched, block=block, seed=seed,
                       version_hash="mix-test", position_of_step=pos, rebase=rebase, shuffle=shuffle)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(n=st.integers(0, 60), m=st.integers(1, 50), a=st.integers(-100, 100), b=st.integers(-100, 100))
def test_floor_sum_matches_the_sum(n, m, a, b):
    assert floor_sum(n, m, a, b) == sum((a * i + b) // m for i in range(n))


def _floor_sum_reference(n, m, a, b):
    """The textbook reduction, every division done each round (what floor_sum was before it
    skipped the divisions that cannot change anything)."""
    ans = 0
    while n > 0:
        q, a = divmod(a, m)
        ans += q * (n * (n - 1) // 2)
        q, b = divmod(b, m)
        ans += q * n
        y = a * n + b
        if y < m:
            break
        n, b, m, a = y // m, y % m, a, m
    return ans


@settings(derandomize=True, max_examples=300, deadline=None)
@given(n=st.integers(-3, 10**13), d=st.sampled_from([1, 5, 1 << 44, 3**40]), a=st.integers(-(2**110), 2**110),
       b=st.integers(-(2**112), 2**112))
def test_floor_sum_at_a_restore_size_matches_the_reference_reduction(n, d, a, b):
    """The sizes a restore asks for (``m = 2**64 * denom``, blocks up to 10**13): the same sums as
    the reduction that divides every round, and the golden-ratio sums of the extra-slot grid."""
    from resumable_data.plan.mixture.runs import _ALPHA, _M

    m = _M * d
    assert floor_sum(n, m, a, b) == _floor_sum_reference(n, m, a, b)
    assert floor_sum(n, m, _ALPHA * d, -b % m) == _floor_sum_reference(n, m, _ALPHA * d, -b % m)
    assert floor_sum(n, m, _ALPHA * d, 0) == floor_sum(n, _M, _ALPHA, 0)  # at b = 0 the denominator cancels


@settings(derandomize=True, max_examples=80, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 7), st.floats(0.01, 3, allow_nan=False)), min_size=1, max_size=6)
       .filter(lambda w: sum(w) > 0), st.sampled_from([1, 7, 16, 1000, 1024, 5000]),
       st.one_of(st.integers(0, 300), st.integers(0, 10**15)))
def test_extra_slots_before_a_block_are_the_floor_sums_of_every_grid_point(weights, block, j):
    """``Run.extras_before`` sums the floors once per grid point that is not a multiple of the
    denominator (the others follow from the ``g = 0`` sum): the same counts as a floor sum per
    grid point, and as the blocks' own counts added up."""
    from resumable_data.plan.mixture.runs import _ALPHA, _M, Run

    total = sum(Fraction(w) for w in weights)
    run = Run.of(0, tuple(Fraction(w) / total for w in weights), (0,) * len(weights), block)
    f = [floor_sum(j, _M * run.denom, _ALPHA * run.denom, -g * _M) for g in run.grid]
    assert run.extras_before(j).tolist() == [f[s] - f[s + 1] for s in range(len(weights))]
    if j <= 300:
        counts = sum((run.block_counts(k) for k in range(j)), np.zeros(len(weights), dtype=np.int64))
        assert counts.tolist() == (j * np.array(run.floors, dtype=np.int64) + run.extras_before(j)).tolist()


@settings(derandomize=True, max_examples=60, deadline=None)
@given(weights=st.lists(st.one_of(st.integers(0, 9), st.floats(0, 5, allow_nan=False)), min_size=1, max_size=6)
       .filter(lambda w: sum(w) > 0),
       block=st.integers(1, 97), seed=st.integers(0, 2**32))
def test_every_aligned_block_is_within_one_and_counts_match_a_walk(weights, block, seed):
    plan = make(weights, sizes=tuple(3 + i for i in range(len(weights))), block=block, seed=seed)
    blocks = 12
    src, q = plan.locate(np.arange(blocks * block))
    total = sum(Fraction(w) for w in weights)
    for j in range(blocks):
        c = np.bincount(src[j * block:(j + 1) * block], minlength=len(weights))
        for s, w in enumerate(weights):
            target = Fraction(w) / total * block
            assert math.floor(target) <= c[s] <= math.ceil(target), (j, s, c, target)
    for p in range(0, blocks * block + 1, max(1, block // 3)):  # aligned and unaligned prefixes
        assert plan.counts_before(p).tolist() == np.bincount(src[:p], minlength=len(weights)).tolist()
    for s in range(len(weights)):  # each source's stream positions are visited in order
        assert q[src == s].tolist() == list(range(int((src == s).sum())))


@pytest.mark.parametrize("weights,block", [((0.5, 0.3, 0.2), 64), ((0.7, 0.2, 0.1), 1000), ((1 / 3, 1 / 7, 0.4), 17)])
def test_cumulative_drift_stays_small_over_a_billion_blocks(weights, block):
    plan = make(weights, block=block)
    w = plan._runs[0].weights
    for blocks in (1, 10, 977, 10**4, 123_457, 10**6, 10**9):
        c = plan.counts_before(blocks * block)
        drift = [abs(Fraction(int(c[s])) - w[s] * blocks * block) for s in range(3)]
        assert max(drift) <= 4, (blocks, drift)
    assert sum(plan.counts_before(10**9 * block)) == 10**9 * block


def test_golden_vector():
    plan = make((0.5, 0.3, 0.2), block=10, seed=7)
    src, rec = plan.records(np.arange(20))
    assert src.tolist() == GOLDEN_SRC
    assert rec.tolist() == GOLDEN_REC


GOLDEN_SRC = [1, 1, 0, 0, 2, 0, 0, 0, 2, 1, 0, 0, 1, 0, 0, 1, 1, 0, 2, 2]
GOLDEN_REC = [20, 39, 72, 76, 6, 74, 21, 48, 2, 38, 82, 77, 41, 26, 61, 0, 16, 0, 3, 0]


def test_source_epochs_visit_every_record_once_each_in_a_new_order():
    plan = make((0.5, 0.3, 0.2), sizes=(100, 50, 7), block=32)
    src, rec = plan.records(np.arange(32 * 40))
    small = rec[src == 2]
    epochs = len(small) // 7
    assert epochs >= 30  # upsampled: far more epochs of the small source than of the large one
    orders = [tuple(small[e * 7:(e + 1) * 7]) for e in range(epochs)]
    assert all(sorted(o) == list(range(7)) for o in orders)
    assert len(set(orders)) > epochs // 2  # epochs differ in order
    big = rec[src == 0]
    assert len(big) >= 100 and sorted(big[:100]) == list(range(100))  # no repeat before its epoch ends
    assert len(set(big[:100])) == 100


def test_shuffle_false_keeps_id_order():
    plan = make((0.5, 0.5, 0), block=4, shuffle=False)
    src, rec = plan.records(np.arange(8))
    assert src.tolist() == [0, 0, 1, 1, 0, 0, 1, 1]
    assert rec.tolist() == [0, 1, 0, 1, 2, 3, 2, 3]


def test_schedule_continues_every_source_without_repeat_or_skip():
    sched = WeightSchedule([(0, dict(zip(NAMES, (0.5, 0.3, 0.2)))), (7, dict(zip(NAMES, (0.1, 0.1, 0.8)))),
                            (13, dict(zip(NAMES, (1, 0, 0))))])
    plan = make((0, 0, 0), schedule=sched, pos=StepPositions(10), block=16, sizes=(1000, 1000, 1000))
    src, q = plan.locate(np.arange(300))
    for s in range(3):
        assert q[src == s].tolist() == list(range(int((src == s).sum())))
    assert (src[130:] == 0).all()  # from step 13 (position 130) only the first source
    for j in range(3):  # the second segment's blocks are aligned to its start (position 70)
        c = np.bincount(src[70 + 16 * j:86 + 16 * j], minlength=3)
        assert c[0] in (1, 2) and c[1] in (1, 2) and c[2] in (12, 13), c
    assert plan.counts_before(300).tolist() == np.bincount(src, minlength=3).tolist()


def test_rebase_continues_from_the_given_counts():
    old = make((0.5, 0.3, 0.2), block=16)
    counts = tuple(int(x) for x in old.counts_before(100))
    new = make((0.2, 0.3, 0.5), block=16, rebase=Rebase(100, counts))
    src_old, q_old = old.locate(np.arange(100))
    src_new, q_new = new.locate(np.arange(100, 400))
    for s in range(3):
        both = np.concatenate([q_old[src_old == s], q_new[src_new == s]])
        assert both.tolist() == list(range(len(both)))
    with pytest.raises(ConfigError, match="position"):
        new.counts_before(99)


def test_state_section_round_trips():
    plan = make((0.5, 0.3, 0.2), block=16, rebase=Rebase(32, (16, 10, 6)))
    back = MixturePlan.from_dict(plan.to_dict(), seed=1, version_hash="mix-test", position_of_step=None)
    assert back.to_dict() == plan.to_dict()
    assert back.counts_before(500).tolist() == plan.counts_before(500).tolist()


@pytest.mark.parametrize("weights,match", [({"web": -1, "code": 1, "math": 1}, "finite number"),
                                           ({"web": 0, "code": 0, "math": 0}, "at least one weight"),
                                           ({"web": 1, "code": 1}, "one weight for each source"),
                                           ({"web": float("nan"), "code": 1, "math": 1}, "finite number")])
def test_bad_weights_are_refused(weights, match):
    with pytest.raises(ConfigError, match=match):
        WeightSchedule.constant(weights).resolve(NAMES)


def test_bad_schedules_are_refused():
    with pytest.raises(ConfigError, match="starting at 0"):
        WeightSchedule([(5, {"a": 1})])
    with pytest.raises(ConfigError, match="strictly increasing"):
        WeightSchedule([(0, {"a": 1}), (0, {"a": 2})])


@pytest.mark.parametrize("weights,match", [({1: 0.5, "web": 0.5}, "source name=1: expected a string"),
                                           ({"web": "1", "code": 1, "math": 1},
                                            "finite number"),
                                           ({"web": float("inf"), "code": 1, "math": 1}, "finite number"),
                                           ({"web": 2**5000, "code": 1, "math": 1},
                                            "'an integer of 5001 bits': expected a finite number >= 0 \\(an integer below")])
def test_bad_weight_inputs_are_config_errors(weights, match):
    with pytest.raises(ConfigError, match=match):
        WeightSchedule.constant(weights).resolve(NAMES)


def test_integer_weights_are_exact_at_any_size_and_round_trip():
    big = 2**53 + 1  # float(big) == 2**53: a float would lose it
    plan = make((big, 2**53, 1), block=16)
    assert plan.segments[0][1] == (Fraction(big, 2**54 + 2), Fraction(2**53, 2**54 + 2), Fraction(1, 2**54 + 2))
    assert plan.to_dict()["schedule"] == [[0, [big, 2**53, 1]]]
    back = MixturePlan.from_dict(plan.to_dict(), seed=1, version_hash="mix-test", position_of_step=None)
    assert back.segments == plan.segments
    huge = make((10**400, 1, 0), block=16)  # no OverflowError: exact rationals
    assert huge.segments[0][1][0] == Fraction(10**400, 10**400 + 1)
    assert huge.locate(np.arange(16))[0].tolist() == [0] * 16


def test_schedule_steps_past_the_position_range_are_config_errors():
    with pytest.raises(ConfigError, match="WeightSchedule\\[1\\] step"):
        WeightSchedule([(0, {"a": 1}), (10**30, {"a": 2})])
    sched = WeightSchedule([(0, dict(zip(NAMES, (1, 1, 1)))), (2**62, dict(zip(NAMES, (1, 2, 1))))])
    with pytest.raises(ConfigError, match="segments starting below position 2\\*\\*62"):
        make((1, 1, 1), schedule=sched, pos=StepPositions(4))


def test_segment_zero_never_asks_for_a_position():
    def pos(step):  # a batch segment's map, which cannot place steps before its origin
        assert step > 0, "step 0 asked"
        return step * 4
    sched = WeightSchedule([(0, dict(zip(NAMES, (1, 1, 1)))), (3, dict(zip(NAMES, (1, 2, 1))))])
    plan = make((1, 1, 1), schedule=sched, pos=pos, block=16)
    assert [r.start for r in plan._runs] == [0, 12]


def test_a_weight_schedule_is_immutable():
    given = {"web": 1, "code": 2, "math": 3}
    sched = WeightSchedule([(0, given)])
    given["web"] = 100  # the caller's dict is copied
    assert sched.maps[0]["web"] == 1
    with pytest.raises(TypeError):
        sched.maps[0]["web"] = 5
    with pytest.raises(AttributeError):
        sched.steps = (0, 1)
    import pickle
    assert repr(pickle.loads(pickle.dumps(sched))) == repr(sched) == "rd.WeightSchedule([(0, {'web': 1, 'code': 2, 'math': 3})])"


def test_the_block_cache_is_bounded_by_bytes_and_not_pickled():
    import pickle
    plan = make((0.5, 0.3, 0.2), block=1 << 18)
    positions = np.arange(0, 6 << 18, 1 << 18)
    first = plan.records(positions)
    assert len(plan._blocks) == 4  # 2**25 bytes / (4 arrays of 2**18 int64 per block)
    copy = pickle.loads(pickle.dumps(plan))
    assert len(pickle.dumps(plan)) < 1 << 16
    again = copy.records(positions)
    assert first[0].tolist() == again[0].tolist() and first[1].tolist() == again[1].tolist()
    small = make((0.5, 0.3, 0.2), block=16)
    for k in range(40):  # one block per query (a span of whole blocks is computed in one call, uncached)
        small.records(np.arange(16 * k, 16 * k + 16))
    assert len(small._blocks) == 32
