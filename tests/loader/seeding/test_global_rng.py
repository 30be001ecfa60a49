"""The fast global seeding (``loader/global_rng.py``) is bit-identical to the seeding functions.

Every check compares what user code draws after the fast route with what it draws after
``random.seed`` / ``np.random.seed`` / ``torch.manual_seed`` (the reference route), over keys
drawn by Hypothesis (fixed seed) and edge keys (below 2**32, 2**64 - 1), with a cached Gaussian
left behind by earlier draws, and the guard's restore against ``getstate``/``get_state``."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from resumable_data.loader.seeding import global_rng as G


def draws() -> tuple:
    """A mix of what augmentation code draws from the three global generators."""
    return (random.random(), random.gauss(0, 1), random.getrandbits(70), random.randrange(10**9),
            np.random.rand(3).tolist(), np.random.standard_normal(), np.random.randint(0, 1000, 4).tolist(),
            np.random.normal(size=3).tolist(), torch.rand(2).tolist(), torch.randn(3).tolist(),
            torch.initial_seed())


def states() -> tuple:
    return random.getstate(), repr(np.random.get_state()), torch.get_rng_state().tolist()


def test_the_memory_layouts_are_found_here():
    lay = G._layout()
    assert lay.py is not None and lay.np is not None, "the fast route is off on this interpreter"


def test_mt_states_equal_numpy_seeding():
    keys = np.array([0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1, 0x9E3779B97F4A7C15], dtype=np.uint64)
    got = G.mt_states(keys)
    rs = np.random.RandomState()
    for k, row in zip(keys.tolist(), got):
        rs.seed(np.array([k & 0xFFFFFFFF, k >> 32], dtype=np.uint32))
        assert np.array_equal(row, rs.get_state()[1]), k


@pytest.mark.parametrize("version", [None, 2, 3], ids=["default", "v2", "v3"])
@settings(derandomize=True, max_examples=40, deadline=None)
@given(st.lists(st.integers(2**32, 2**64 - 1), min_size=1, max_size=20),
       st.sampled_from([0, 1, 3]),  # legacy normal draws before: an odd count leaves a cached Gaussian
       st.booleans())
def test_seeder_draws_equal_the_seeding_functions(version, keys, normals_before, with_small_keys):
    """``with_small_keys``: keys below 2**32 (version 2: Python's one-word route) send the whole
    batch through ``seed_each``; without them it takes ``seed_all``, every generator through
    memory. ``default``: the seeder's default version equals the reference's (3: the hashed states;
    tests/loader/test_seeding_v3.py checks those against the formula written out); ``v2``: the
    seeding functions themselves."""
    if with_small_keys:
        keys = keys + [5, 2**32 - 1]
    kw = {} if version is None else {"version": version}
    ref = []
    for k in keys:
        if version == 2:
            random.seed(k)
            np.random.seed(np.array([(k & 0xFFFFFFFF) ^ 0x7F4A7C15, (k >> 32) ^ 0x9E3779B9], dtype=np.uint32))
            torch.manual_seed(k & (2**63 - 1))
        else:
            G.seed_globals_reference(k, 3)
        ref.append(draws())
    np.random.standard_normal(normals_before)
    seeder = G.GlobalSeeder(np.array(keys, dtype=np.uint64), **kw)
    got = []
    for i in range(len(keys)):
        seeder.seed(i)
        got.append(draws())
    assert got == ref


def test_seeder_after_an_untouched_sample_keeps_the_gaussian_reset():
    keys = np.array([2**40 + 1, 2**40 + 2, 2**40 + 3], dtype=np.uint64)
    ref = []
    for k in keys.tolist():
        G.seed_globals_reference(k)
        ref.append(np.random.standard_normal(3).tolist())  # odd: leaves a cached Gaussian
    seeder = G.GlobalSeeder(keys)
    seeder.seed(0)  # nothing drawn in sample 0: the state is untouched
    got = []
    for i in range(len(keys)):
        seeder.seed(i)
        got.append(np.random.standard_normal(3).tolist())
    assert got == ref


def test_seed_globals_equals_the_reference():
    for k in (3, 2**50 + 7, 2**64 - 1):
        G.seed_globals_reference(k)
        ref = draws()
        np.random.standard_normal()
        G.seed_globals(k)
        assert draws() == ref


@pytest.mark.parametrize("cached_gaussian", [False, True])
def test_guard_restores_every_state_exactly(cached_gaussian):
    random.seed(11)
    np.random.seed(12)
    torch.manual_seed(13)
    random.gauss(0, 1)  # Python's own cached Gaussian
    if cached_gaussian:
        np.random.standard_normal()
    before = states()
    with G.GlobalRNGGuard():
        seeder = G.GlobalSeeder(np.array([2**45, 2**46], dtype=np.uint64))
        seeder.seed(0)
        draws()
        seeder.seed(1)
    assert states() == before
    expect = draws()
    random.seed(11)
    np.random.seed(12)
    torch.manual_seed(13)
    random.gauss(0, 1)
    if cached_gaussian:
        np.random.standard_normal()
    assert draws() == expect


@pytest.mark.parametrize("version", [2, 3])
def test_reference_route_when_the_probe_fails(monkeypatch, version):
    """With the layouts unknown, the seeder takes the reference route (version 2: the seeding
    functions; version 3, the default: ``random.setstate`` / ``np.random.set_state`` of the hashed
    states): same draws, and that route is the one taken."""
    lay = G._layout()
    for name in ("py", "np", "py_mv", "np_mv"):
        monkeypatch.setattr(lay, name, None)
    keys = [2**40 + 9, 77]
    ref = []
    for k in keys:
        G.seed_globals_reference(k, version)
        ref.append(draws())
    calls = []
    if version == 2:
        real_py, real_np = random.seed, np.random.seed
        monkeypatch.setattr(random, "seed", lambda *a: calls.append("py") or real_py(*a))
        monkeypatch.setattr(np.random, "seed", lambda *a: calls.append("np") or real_np(*a))
    else:
        real_py, real_np = random.setstate, np.random.set_state
        monkeypatch.setattr(random, "setstate", lambda *a: calls.append("py") or real_py(*a))
        monkeypatch.setattr(np.random, "set_state", lambda *a: calls.append("np") or real_np(*a))
    seeder = G.GlobalSeeder(np.array(keys, dtype=np.uint64), version=version)
    got = []
    for i in range(len(keys)):
        seeder.seed(i)
        got.append(draws())
    assert got == ref
    assert calls == ["py", "np"] * len(keys)  # the reference route was taken
    if version == 3:  # the default version is 3
        default = G.GlobalSeeder(np.array(keys, dtype=np.uint64))
        for i in range(len(keys)):
            default.seed(i)
            assert draws() == ref[i]
        default.release()
    before = states()
    with G.GlobalRNGGuard():
        seeder.seed(0)
        draws()
    assert states() == before


class _Keys:
    """Records what ``rd.sample_context()`` reports per sample (twice: the context is kept)."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        import resumable_data as rd

        a, b = rd.sample_context(), rd.sample_context()
        assert a is b
        return {"record": i, "position": a.position, "key": a.key, "draw": float(a.rng.random())}


def test_sample_context_is_the_same_with_or_without_global_seeding():
    """Without seeding the key is derived on demand: the context must not change."""
    import resumable_data as rd

    def contexts(**kw):
        loader = rd.DataLoader(_Keys(), batch_size=8, shuffle=True, seed=3, dataset_version="keys-v1",
                               collate_fn=lambda rows: rows, **kw)
        return [row for batch in loader for row in batch]

    seeded, unseeded = contexts(), contexts(seed_per_sample=False)
    assert [r["key"] for r in seeded] == [int(k) for k in rd.plan.sample_keys(
        rd.DataLoader(_Keys(), batch_size=8, shuffle=True, seed=3, dataset_version="keys-v1").plan.version_hash,
        3, [r["position"] for r in seeded])]
    assert seeded == unseeded


@pytest.mark.parametrize("version", [3, 2])
def test_a_swapped_numpy_bit_generator_is_seeded_too_not_the_old_one(version):
    """np.random.set_bit_generator replaces the generator the probed view points into: the next
    seeding must reach the new one (equal to the reference route), never write the old memory."""
    old = np.random.mtrand._rand._bit_generator
    G.seed_globals(12345, version)  # probes (or reuses) the layout of the current generator
    try:
        np.random.set_bit_generator(np.random.MT19937(5))
        for key in (12345, (1 << 40) + 7):
            G.seed_globals(key, version)
            fast = (np.random.random(3).tolist(), random.random())
            G.seed_globals_reference(key, version)
            assert fast == (np.random.random(3).tolist(), random.random())
        guard = G.GlobalRNGGuard()
        with guard:
            np.random.random()
        G.seed_globals(99, version)
        a = np.random.random()
        G.seed_globals_reference(99, version)
        assert a == np.random.random()
    finally:
        np.random.set_bit_generator(old)
    G.seed_globals(7, version)
    b = np.random.random()
    G.seed_globals_reference(7, version)
    assert b == np.random.random()


@pytest.mark.parametrize("version", [3, 2])
@pytest.mark.parametrize("swap", ["numpy", "torch"])
def test_a_generator_swapped_inside_a_batch_is_seeded_for_the_rest_of_it(swap, version):
    """User code that swaps a global generator between two seedings of one batch: every later
    sample of that batch sees the *new* generator seeded from its key (as the seeding functions
    do), and the old generator's memory is never written again."""
    keys = [(1 << 40) + 3 * k for k in range(6)]
    ref = []
    for k in keys:
        G.seed_globals_reference(k, version)
        ref.append(draws())
    old_np = np.random.mtrand._rand._bit_generator
    old_t = torch.random.default_generator
    seeder = G.GlobalSeeder(np.array(keys, dtype=np.uint64), version=version)
    got = []
    try:
        for i in range(len(keys)):
            if i == 2:  # what a __getitem__ might do
                if swap == "numpy":
                    np.random.set_bit_generator(np.random.MT19937(5))
                else:
                    torch.random.default_generator = torch.Generator()
                kept = (old_np.state["state"]["key"].copy(), old_t.get_state().clone())
            seeder.seed(i)
            if swap == "torch" and i >= 2:  # torch.rand & co. keep the C++ default; draw from the new object
                g = torch.random.default_generator
                got.append((random.random(), random.gauss(0, 1), random.getrandbits(70), random.randrange(10**9),
                            np.random.rand(3).tolist(), np.random.standard_normal(),
                            np.random.randint(0, 1000, 4).tolist(), np.random.normal(size=3).tolist(),
                            torch.rand(2, generator=g).tolist(), torch.randn(3, generator=g).tolist(), g.initial_seed()))
            else:
                got.append(draws())
        if swap == "numpy":
            assert np.array_equal(old_np.state["state"]["key"], kept[0]), "the old numpy generator was written"
        else:
            assert torch.equal(old_t.get_state(), kept[1]), "the old torch generator was written"
    finally:
        seeder.release()
        np.random.set_bit_generator(old_np)
        torch.random.default_generator = old_t
    assert got == ref


def test_live_seeders_never_share_a_rows_buffer_and_a_released_one_is_reused():
    """Two seeders of one size alive at once (a loader iterated inside ``__getitem__``) each keep
    their own rows; after ``release`` the next seeder of that size reuses the buffer, rewritten."""
    ka, kb, kc = ([2**40 + 100 * j + i for i in range(4)] for j in range(3))
    ref = {}
    for k in ka + kb + kc:
        G.seed_globals_reference(k)
        ref[k] = draws()
    a = G.GlobalSeeder(np.array(ka, dtype=np.uint64))
    b = G.GlobalSeeder(np.array(kb, dtype=np.uint64))
    assert a._buf is not b._buf
    for i in range(4):
        a.seed(i)
        assert draws() == ref[ka[i]]
        b.seed(i)
        assert draws() == ref[kb[i]]
    buf = a._buf
    a.release()
    c = G.GlobalSeeder(np.array(kc, dtype=np.uint64))
    assert c._buf is buf
    for i in range(4):
        c.seed(i)
        assert draws() == ref[kc[i]]
