"""The keyed permutation: bijection, inverse, reference equality, golden vectors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import resumable_data as rd
from resumable_data.plan.permutation import MAX_DOMAIN, Permutation, forward_reference, permutation_key

SMALL_N = [0, 1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 31, 32, 64, 97, 127, 128, 1000, 1024, 4093, 4096, 65537]


@pytest.mark.parametrize("n", SMALL_N)
def test_bijection_for_small_domains(n):
    perm = Permutation.keyed(n, version_hash="v", seed=1, epoch=0)
    out = perm.forward(np.arange(n))
    assert np.array_equal(np.sort(out), np.arange(n))
    assert np.array_equal(perm.inverse(out), np.arange(n))


@settings(derandomize=True, max_examples=150, deadline=None)
@given(n=st.integers(0, 3000), seed=st.integers(0, 2**64 - 1), epoch=st.integers(0, 10**6))
def test_bijection_property(n, seed, epoch):
    perm = Permutation.keyed(n, version_hash="h", seed=seed, epoch=epoch)
    out = perm.forward(np.arange(n))
    assert np.array_equal(np.sort(out), np.arange(n))
    assert np.array_equal(perm.inverse(out), np.arange(n))


@settings(derandomize=True, max_examples=100, deadline=None)
@given(n=st.integers(2, MAX_DOMAIN), key=st.integers(0, 2**64 - 1), data=st.data())
def test_compiled_kernel_matches_numpy_reference_on_huge_domains(n, key, data):
    idx = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=20)), dtype=np.int64)
    perm = Permutation(n, key)
    out = perm.forward(idx)
    assert np.array_equal(out, forward_reference(n, key, idx))
    assert ((out >= 0) & (out < n)).all()
    assert np.array_equal(perm.inverse(out), idx)


def test_keys_separate_epochs_seeds_versions_and_tags():
    base = Permutation.keyed(1000, version_hash="v", seed=1, epoch=0).forward(np.arange(1000))
    for kwargs in [dict(version_hash="w", seed=1, epoch=0), dict(version_hash="v", seed=2, epoch=0),
                   dict(version_hash="v", seed=1, epoch=1)]:
        assert not np.array_equal(Permutation.keyed(1000, **kwargs).forward(np.arange(1000)), base)
    assert permutation_key("v", 1, 0, "a") != permutation_key("v", 1, 0, "b")


def test_golden_vectors():
    """A change here is a schema change: every saved state would resume into another order."""
    perm = Permutation.keyed(20, version_hash="golden", seed=7, epoch=1)
    assert perm.key == 13672621386247095555
    assert perm.forward(np.arange(20)).tolist() == [11, 14, 2, 7, 18, 19, 13, 17, 0, 3, 16, 5, 6, 10, 9, 15, 4, 12, 1, 8]
    big = Permutation.keyed(1 << 62, version_hash="golden", seed=7, epoch=1)
    assert big.forward(np.arange(4)).tolist() == [
        1441749865351417995, 4129686680140653781, 946289122339054130, 1333798203096504491]


def test_shapes_and_scalars():
    perm = Permutation.keyed(50, version_hash="v", seed=0, epoch=0)
    grid = np.arange(50).reshape(5, 10)
    assert perm.forward(grid).shape == (5, 10)
    assert int(perm.forward(3)) == int(perm.forward(np.arange(50))[3])


@pytest.mark.parametrize("bad", [np.array([-1]), np.array([50]), np.array([0.5])])
def test_out_of_domain_indices_are_rejected(bad):
    perm = Permutation.keyed(50, version_hash="v", seed=0, epoch=0)
    with pytest.raises(rd.ConfigError, match="idx"):
        perm.forward(bad)


@pytest.mark.parametrize("n", [-1, MAX_DOMAIN + 1, 2.0, True])
def test_bad_domain_is_rejected(n):
    with pytest.raises(rd.ConfigError, match="n="):
        Permutation(n, 0)


@pytest.mark.parametrize("n", [2, 3, 5, 600, 4097, 200_000, (1 << 24) - 1, 1 << 24, (1 << 24) + 1, 10**9])
def test_many_indices_read_round_tables_with_the_same_values(n):
    """A call of many indices (a run of records) maps them through round tables when the halves are
    small enough: the values of the reference, and of the same indices asked a few at a time."""
    perm = Permutation.keyed(n, version_hash="t", seed=5, epoch=3)
    idx = np.random.default_rng(n).integers(0, n, 3000)
    out = perm.forward(idx)
    assert np.array_equal(out, forward_reference(n, perm.key, idx))
    assert np.array_equal(out, np.concatenate([perm.forward(idx[i : i + 100]) for i in range(0, 3000, 100)]))
