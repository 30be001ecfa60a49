"""Tokens consumed per source: a pure function of the consumed counts, equal to a walk over the
mixed stream's records (any order of queries, shuffled or not, across source epochs and rebases)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resumable_data.errors import ConfigError
from resumable_data.plan.mixture import MixturePlan, Rebase, WeightSchedule
from resumable_data.plan.mixture.tokens import SourceTokens

NAMES = ("web", "code", "math")
SIZES = (40, 17, 5)


def make(shuffle=True, rebase=None, weights=(0.5, 0.3, 0.2), seed=3):
    return MixturePlan(NAMES, SIZES, ["v0", "v1", "v2"], WeightSchedule.constant(dict(zip(NAMES, weights))),
                       block=16, seed=seed, version_hash="mix-tok", shuffle=shuffle, rebase=rebase)


def lengths_for(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 30, n) for n in SIZES]


def walked_tokens(plan, lengths, stop):
    """Tokens per source of the records at positions [start, stop), read one record at a time."""
    src, rec = plan.records(np.arange(0 if plan.rebase is None else plan.rebase.position, stop))
    out = np.zeros(len(SIZES), dtype=np.int64)
    np.add.at(out, src, np.array([lengths[s][r] for s, r in zip(src.tolist(), rec.tolist())], dtype=np.int64))
    return out


@settings(derandomize=True, max_examples=40, deadline=None)
@given(stops=st.lists(st.integers(0, 400), min_size=1, max_size=8), shuffle=st.booleans(), seed=st.integers(0, 2**32))
def test_tokens_before_any_position_match_a_walk_in_any_query_order(stops, shuffle, seed):
    plan = make(shuffle=shuffle, seed=seed)
    lengths = lengths_for(seed % 7)
    tokens = SourceTokens(plan, lengths)
    for stop in stops:  # forward, backward and cold queries all reuse (or drop) the memo
        assert tokens.before(plan.counts_before(stop)).tolist() == walked_tokens(plan, lengths, stop).tolist()


def test_whole_source_epochs_count_the_source_total_each_time():
    plan = make()
    lengths = lengths_for(1)
    tokens = SourceTokens(plan, lengths)
    counts = [3 * n for n in SIZES]  # three whole epochs of every source, each in its own order
    assert tokens.before(counts).tolist() == [3 * int(ln.sum()) for ln in lengths]
    assert tokens.before([3 * SIZES[0] + 1, 0, 0])[0] == 3 * int(lengths[0].sum()) + \
        int(lengths[0][plan.source_order(0, 3).forward(np.array([0]))[0]])


def test_a_rebased_plan_gives_the_same_tokens_for_the_same_counts():
    """The source streams do not depend on the weights: a data_change rebase continues them."""
    lengths = lengths_for(2)
    plan = make()
    rebased = make(weights=(0.1, 0.1, 0.8), rebase=Rebase(48, tuple(int(c) for c in plan.counts_before(48))))
    a, b = SourceTokens(plan, lengths), SourceTokens(rebased, lengths)
    here = walked_tokens(plan, lengths, 48)
    after = walked_tokens(rebased, lengths, 300)  # the records after the rebase, under the new weights
    assert b.before(rebased.counts_before(300)).tolist() == (here + after).tolist()
    assert a.before(plan.counts_before(48)).tolist() == here.tolist()


def test_bad_lengths_and_counts_are_config_errors():
    plan = make()
    with pytest.raises(ConfigError, match="lengths"):
        SourceTokens(plan, lengths_for()[:2])
    with pytest.raises(ConfigError, match=r"lengths\[1\]"):
        SourceTokens(plan, [np.ones(40), np.ones(3), np.ones(5)])
    tokens = SourceTokens(plan, lengths_for())
    with pytest.raises(ConfigError, match=r"counts\[0\]"):
        tokens.before([-1, 0, 0])


@settings(derandomize=True, max_examples=60, deadline=None)
@given(n=st.integers(1, 600), window=st.integers(1, 64), block=st.integers(0, 16), epoch=st.integers(0, 5),
       cuts=st.lists(st.integers(0, 600), min_size=2, max_size=2))
def test_a_window_sum_is_the_sum_over_the_window_order(n, window, block, epoch, cuts):
    """Whole windows by their block sums, partial ones record by record: the same as summing the
    values the order visits at offsets [a, b) (short last block, a block wider than half the
    window, ranges inside one window and across many)."""
    from resumable_data.plan.order import Order, OrderSpec, epoch_records, window_sum

    spec = OrderSpec(Order.WINDOW, window, min(block, window))
    values = np.random.default_rng(n * 7 + window).integers(0, 50, n)
    sums = np.add.reduceat(values, np.arange(0, n, spec.block))
    a, b = sorted(min(c, n) for c in cuts)
    ids = epoch_records(n, spec, np.arange(a, b), version_hash="h", seed=5, epoch=epoch)
    assert window_sum(n, spec, values, sums, a, b, version_hash="h", seed=5, epoch=epoch) == int(values[ids].sum())


def test_windowed_sources_count_tokens_as_a_walk_with_whole_windows_summed(monkeypatch):
    """SourceTokens over windowed sources (the block-sum path for spans over two windows) equals a
    walk over the mixed stream, cold and after earlier queries."""
    from resumable_data.plan.mixture import tokens as mixture_tokens

    calls = []
    original = mixture_tokens.window_sum
    monkeypatch.setattr(mixture_tokens, "window_sum", lambda *a, **k: (calls.append(a[0]), original(*a, **k))[1])
    sizes = (400, 170, 50)
    windows = (32, 8, None)
    plan = MixturePlan(NAMES, sizes, ["v0", "v1", "v2"], WeightSchedule.constant(dict(zip(NAMES, (0.5, 0.3, 0.2)))),
                       block=16, seed=3, version_hash="mix-tok", shuffle=True, windows=windows)
    rng = np.random.default_rng(1)
    lengths = [rng.integers(0, 30, n) for n in sizes]
    for stops in ([400], [1500], [10, 900, 300, 1210, 400]):
        tokens = SourceTokens(plan, lengths)
        for stop in stops:
            src, rec = plan.records(np.arange(stop))
            want = np.zeros(3, dtype=np.int64)
            np.add.at(want, src, np.array([lengths[s][r] for s, r in zip(src.tolist(), rec.tolist())]))
            assert tokens.before(plan.counts_before(stop)).tolist() == want.tolist(), stop
    assert 400 in calls and 170 in calls  # both windowed sources took the block-sum path
