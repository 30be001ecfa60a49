"""Orders: every epoch of every order visits every record exactly once; golden vectors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import resumable_data as rd
from resumable_data.plan import Order, OrderSpec, epoch_records

SPECS = st.one_of(
    st.just(OrderSpec()),
    st.just(OrderSpec(Order.GLOBAL)),
    st.builds(lambda w, b: OrderSpec("window", w, min(b, w)), st.integers(1, 300), st.integers(0, 64)),
)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(n=st.integers(1, 2000), spec=SPECS, seed=st.integers(0, 2**64 - 1), epoch=st.integers(0, 1000))
def test_every_epoch_is_a_permutation_of_the_records(n, spec, seed, epoch):
    out = epoch_records(n, spec, np.arange(n), version_hash="v", seed=seed, epoch=epoch)
    assert np.array_equal(np.sort(out), np.arange(n))


@settings(derandomize=True, max_examples=60, deadline=None)
@given(n=st.integers(1, 3000), window=st.integers(1, 500), block=st.integers(1, 64), seed=st.integers(0, 99))
def test_window_touches_a_bounded_set_of_blocks(n, window, block, seed):
    spec = OrderSpec("window", window, min(block, window))
    out = epoch_records(n, spec, np.arange(n), version_hash="v", seed=seed, epoch=3)
    k = spec.blocks_per_window
    span = spec.block * k
    aligned = n % spec.block == 0  # without a short block, windows sit exactly on spans
    for start in range(0, n, span):
        touched = len(np.unique(out[start:start + span] // spec.block))
        assert touched <= (k if aligned else 2 * k)  # else a span straddles at most two windows


def test_any_offset_subset_agrees_with_the_full_epoch():
    spec = OrderSpec("window", 40, 8)
    full = epoch_records(1001, spec, np.arange(1001), version_hash="v", seed=9, epoch=2)
    picks = np.array([1000, 0, 517, 39, 40, 41, 999, 3])
    assert np.array_equal(epoch_records(1001, spec, picks, version_hash="v", seed=9, epoch=2), full[picks])


def test_epochs_differ_and_sequential_is_identity():
    a = epoch_records(500, OrderSpec("global"), np.arange(500), version_hash="v", seed=1, epoch=0)
    b = epoch_records(500, OrderSpec("global"), np.arange(500), version_hash="v", seed=1, epoch=1)
    assert not np.array_equal(a, b)
    assert np.array_equal(epoch_records(500, OrderSpec(), np.arange(500), version_hash="v", seed=1, epoch=4),
                          np.arange(500))


def test_golden_vectors():
    """A change here is a schema change."""
    kw = dict(version_hash="golden", seed=7, epoch=1)
    assert epoch_records(20, OrderSpec("global"), np.arange(20), **kw).tolist() == [
        11, 14, 2, 7, 18, 19, 13, 17, 0, 3, 16, 5, 6, 10, 9, 15, 4, 12, 1, 8]
    assert epoch_records(23, OrderSpec("window", 8, 3), np.arange(23), **kw).tolist() == [
        22, 5, 3, 21, 4, 19, 20, 11, 10, 18, 9, 14, 15, 17, 16, 13, 12, 7, 0, 2, 1, 8, 6]


def test_spec_round_trip_and_validation():
    spec = OrderSpec("window", 100)
    assert spec.block == 6 and OrderSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(rd.ConfigError, match="shuffle_window"):
        OrderSpec("global", 10)
    with pytest.raises(rd.ConfigError, match="order"):
        OrderSpec("random")
    with pytest.raises(rd.ConfigError, match="block"):
        OrderSpec("window", 10, 11)
    with pytest.raises(rd.ResumeError, match="order.kind"):
        OrderSpec.from_dict({"kind": "nope", "window": 0, "block": 0})
