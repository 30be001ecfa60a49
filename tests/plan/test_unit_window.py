"""The window shuffle over read units: a bijection per epoch, each unit inside one window,
any subset of offsets agrees with the whole epoch, golden vectors, checked inputs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import resumable_data as rd
from resumable_data.plan import Order, OrderSpec, ReadUnits, WindowBlocks, epoch_records
from resumable_data.plan.unit_window import unit_window_records, units_per_window


def _units(sizes):
    sizes = np.asarray(sizes, dtype=np.int64)
    return ReadUnits.of(np.concatenate([[0], np.cumsum(sizes)[:-1]]), int(sizes.sum()))


SIZES = st.lists(st.integers(1, 60), min_size=1, max_size=80)


def _spec(window):
    return OrderSpec(Order.WINDOW, window, blocks=WindowBlocks.READ_UNITS)


@settings(derandomize=True, max_examples=150, deadline=None)
@given(sizes=SIZES, window=st.integers(1, 400), seed=st.integers(0, 2**64 - 1), epoch=st.integers(0, 1000))
def test_every_epoch_is_a_permutation_of_the_records(sizes, window, seed, epoch):
    u = _units(sizes)
    out = epoch_records(u.n, _spec(window), np.arange(u.n), version_hash="v", seed=seed, epoch=epoch, units=u)
    assert np.array_equal(np.sort(out), np.arange(u.n))


@settings(derandomize=True, max_examples=100, deadline=None)
@given(sizes=SIZES, window=st.integers(1, 400), seed=st.integers(0, 99))
def test_the_epoch_is_a_run_of_windows_of_at_most_k_whole_units(sizes, window, seed):
    """Cut the epoch wherever every unit seen so far is complete: each piece holds at most k
    units (a window's), and together the pieces hold every unit once."""
    u = _units(sizes)
    out = unit_window_records(u, window, np.arange(u.n), version_hash="v", seed=seed, epoch=2)
    unit_of = np.searchsorted(u.starts, out, side="right") - 1
    k = units_per_window(window, u)
    left = list(sizes)
    open_units, piece = 0, set()
    pieces = []
    for unit in unit_of.tolist():
        if left[unit] == sizes[unit]:
            open_units += 1
        left[unit] -= 1
        piece.add(unit)
        if left[unit] == 0:
            open_units -= 1
            if open_units == 0:
                pieces.append(piece)
                piece = set()
    assert not piece and all(v == 0 for v in left)
    assert max(len(p) for p in pieces) <= k
    assert len(pieces) >= -(-len(sizes) // k)  # no piece spans more than one window's units


def test_any_offset_subset_agrees_with_the_full_epoch():
    u = _units([7, 13, 1, 30, 22, 5, 9, 40, 3])
    full = epoch_records(u.n, _spec(25), np.arange(u.n), version_hash="v", seed=9, epoch=2, units=u)
    picks = np.array([u.n - 1, 0, 77, 39, 40, 41, 100, 3])
    assert np.array_equal(epoch_records(u.n, _spec(25), picks, version_hash="v", seed=9, epoch=2, units=u), full[picks])


def test_epochs_seeds_and_layouts_change_the_order():
    u = _units([10] * 20)
    base = dict(version_hash="v", seed=1, epoch=0)
    a = unit_window_records(u, 50, np.arange(200), **base)
    assert not np.array_equal(a, unit_window_records(u, 50, np.arange(200), **{**base, "epoch": 1}))
    assert not np.array_equal(a, unit_window_records(u, 50, np.arange(200), **{**base, "seed": 2}))
    other = _units([10] * 19 + [5, 5])
    assert not np.array_equal(a, unit_window_records(other, 50, np.arange(200), **base))


def test_golden_vectors():
    """A change here changes the order of every run with window_blocks='read_units'."""
    u = _units([4, 1, 6, 3, 5, 4])
    out = epoch_records(23, _spec(8), np.arange(23), version_hash="golden", seed=7, epoch=1, units=u)
    assert out.tolist() == GOLDEN


# units [0, 4) [4] [5, 11) [11, 14) [14, 19) [19, 23), k = 2: windows {14..18, 19..22}, {4, 11..13},
# {0..3, 5..10}, each whole
GOLDEN = [15, 19, 21, 17, 20, 22, 16, 18, 14, 4, 13, 11, 12, 1, 5, 8, 3, 7, 6, 9, 2, 10, 0]


def test_units_per_window_rounds_to_the_average_unit():
    u = _units([100] * 10)
    assert [units_per_window(w, u) for w in (1, 49, 50, 150, 1000, 10**6)] == [1, 1, 1, 2, 10, 10000]


@pytest.mark.parametrize(
    "starts,n",
    [([], 5), ([1, 2], 5), ([0, 2, 2], 5), ([0, 3, 1], 5), ([0, 5], 5), ([0], 0)],
)
def test_bad_unit_starts_are_config_errors(starts, n):
    with pytest.raises(rd.ConfigError, match="unit starts"):
        ReadUnits.of(starts, n)


@pytest.mark.parametrize(
    "starts,n",
    [
        ([0, 2.7], 5),  # a float start was truncated to 2: another layout than the source's
        ([0.5], 5),
        (["0", "3"], 5),
        ([[0, 3]], 5),  # not a flat list of starts
        (None, 5),  # a TypeError
        ([0, 1 << 70], 5),  # an OverflowError
        ([0], 1 << 70),  # an OverflowError
        ([0], 4.0),
        ([0], True),
    ],
)
def test_unit_starts_that_are_not_integers_are_config_errors(starts, n):
    """A source's unit_starts() (rd.plan.HasReadUnits: a user's dataset may implement it) of
    another type is refused with an rd error, never truncated or passed on as a Python error."""
    with pytest.raises(rd.ConfigError, match="unit starts"):
        ReadUnits.of(starts, n)


def test_unit_starts_of_any_integer_array_type_are_accepted():
    import torch

    for starts in ([0, 3], np.array([0, 3], dtype=np.uint16), torch.tensor([0, 3]), (0, 3)):
        assert ReadUnits.of(starts, np.int64(7)) == _units([3, 4])


def test_read_units_compare_by_layout_not_identity():
    assert _units([3, 4]) == _units([3, 4]) and hash(_units([3, 4])) == hash(_units([3, 4]))
    assert _units([3, 4]) != _units([4, 3])
    assert not _units([3, 4]).starts.flags.writeable


def test_a_read_unit_order_without_units_is_a_usage_error():
    with pytest.raises(rd.UsageError, match="units"):
        epoch_records(10, _spec(4), np.arange(10), version_hash="v", seed=0, epoch=0)
    with pytest.raises(rd.UsageError, match="units"):
        epoch_records(10, _spec(4), np.arange(10), version_hash="v", seed=0, epoch=0, units=_units([4, 5]))


def test_spec_state_round_trip_and_the_default_written_by_omission():
    spec = _spec(100)
    d = spec.to_dict()
    assert d == {"kind": "window", "window": 100, "block": 0, "blocks": "read_units"}
    assert OrderSpec.from_dict(d) == spec
    assert "blocks" not in OrderSpec(Order.WINDOW, 100).to_dict()  # earlier states' bytes unchanged
    with pytest.raises(rd.ResumeError, match="blocks"):
        OrderSpec.from_dict({**OrderSpec(Order.WINDOW, 100).to_dict(), "blocks": "records"})
    with pytest.raises(rd.ResumeError):
        OrderSpec.from_dict({**d, "blocks": "pages"})


@pytest.mark.parametrize(
    "kwargs",
    [dict(kind=Order.GLOBAL), dict(kind=Order.SEQUENTIAL), dict(kind=Order.WINDOW, window=10, block=2)],
)
def test_read_units_belong_to_the_window_shuffle_alone(kwargs):
    with pytest.raises(rd.ConfigError, match="window_blocks"):
        OrderSpec(blocks=WindowBlocks.READ_UNITS, **kwargs)


def test_plan_records_use_its_units():
    u = _units([5, 9, 2, 14])
    plan = rd.Plan(30, 4, "v", seed=3, order=_spec(10), units=u)
    want = unit_window_records(u, 10, np.arange(30), version_hash="v", seed=3, epoch=0)
    assert np.array_equal(plan.records(np.arange(30)), want)
    assert np.array_equal(
        plan.records(np.arange(30, 60)), unit_window_records(u, 10, np.arange(30), version_hash="v", seed=3, epoch=1)
    )
    with pytest.raises(rd.ConfigError, match="units"):
        rd.Plan(31, 4, "v", order=_spec(10), units=u)
