"""torch's CPU generator seeded, saved and restored through its probed memory (``raw_memory``).

Every check compares the memory route with ``torch.manual_seed`` (seeding version 2) or
``set_state`` of version 3's state built independently (``tests/loader/v3_formula.py``; version 3
is the default) / ``get_state`` / ``set_state`` themselves: the whole serialized state (``get_state()`` bytes, which hold the seed, the engine and
both cached normals) and draws that take every path (``rand``, ``randn`` in float32 and float64,
whose scalar path reads and leaves the cached normal, ``randint``), over Hypothesis keys (fixed
seed) and edge keys (below 2**32, 2**63 and up), with caches engaged before the seeding."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import resumable_data as rd
from resumable_data.loader.seeding import global_rng as G, raw_memory, raw_torch as T, torch_state as TS
from tests.loader.seeding import v3_formula as F

GEN = torch.random.default_generator
EDGE = [0, 1, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**63 + 5, 2**64 - 1, 0x9E3779B97F4A7C15]
VERSIONS = [None, 2]  # None: the default (version 3)


def seed_reference(key: int, version: int | None, gen=None) -> None:
    """torch's generator as seeding ``version`` leaves it, without the package: version 2
    ``manual_seed``, version 3 (the default) ``set_state`` of the formula's state."""
    gen = GEN if gen is None else gen
    if version == 2:
        gen.manual_seed(key & (2**63 - 1))
    else:
        gen.set_state(F.torch_state(key))


def vkw(version: int | None) -> dict:
    return {} if version is None else {"version": version}


def tstate() -> bytes:
    return torch.get_rng_state().numpy().tobytes()


def tdraws() -> tuple:
    return (torch.initial_seed(), torch.rand(3).tolist(), torch.randn(1, dtype=torch.float64).item(),
            torch.randn(1).item(), torch.randn(5).tolist(), torch.randint(0, 2**62, (2,)).tolist())


def engage_caches(f: float = 0.75, d: float = -3.5) -> None:
    """Leave both cached normals engaged (valid, with these values) in the default generator."""
    GEN.set_state(TS.with_caches(tstate(), f, d))


@pytest.fixture
def fresh_layout(monkeypatch):
    """A layout probed for this test only (monkeypatched probes take effect); restored after."""
    monkeypatch.setattr(G, "_LAYOUT", None)
    yield
    monkeypatch.setattr(G, "_LAYOUT", None)


def _fast_vs_reference(keys: list[int], cached: bool, version: int | None) -> None:
    ref = []
    for k in keys:
        if cached:
            engage_caches()
        seed_reference(k, version)
        ref.append((tstate(), tdraws()))
        if cached:
            engage_caches()
        G.seed_globals_reference(k, **vkw(version))  # the package's reference route, the same
        assert (tstate(), tdraws()) == ref[-1]
    seeder = G.GlobalSeeder(np.array(keys, dtype=np.uint64), **vkw(version))
    got = []
    for i in range(len(keys)):
        if cached:
            engage_caches()
        seeder.seed(i)
        got.append((tstate(), tdraws()))
    assert got == ref


@pytest.mark.parametrize("version", VERSIONS)
@settings(derandomize=True, max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=12), st.booleans())
def test_seeding_through_memory_equals_manual_seed(version, keys, cached):
    _fast_vs_reference(keys + EDGE[:3], cached, version)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("cached", [False, True])
def test_edge_keys_and_initial_seed(cached, version):
    _fast_vs_reference(EDGE, cached, version)
    seeder = G.GlobalSeeder(np.array(EDGE, dtype=np.uint64), **vkw(version))
    for i, k in enumerate(EDGE):
        seeder.seed(i)
        assert torch.initial_seed() == k & (2**63 - 1)


def _torch_only_equals_manual_seed(keys: list[int], version: int | None) -> None:
    """The torch-only seeder (lazy seeding's), key by key, with both caches engaged before:
    torch's state and draws equal the reference's (version 2: ``manual_seed``'s)."""
    seeder = G.GlobalSeeder(np.array(keys, dtype=np.uint64), torch_only=True, **vkw(version))
    for i, k in enumerate(keys):
        engage_caches()
        seeder.seed(i)
        got = (tstate(), tdraws())
        seed_reference(k, version)
        assert got == (tstate(), tdraws())


@pytest.mark.parametrize("version", VERSIONS)
def test_the_torch_only_seeder_seeds_torch_alone(version):
    """Lazy seeding's seeder: torch equals the reference, Python's and numpy's states are untouched."""
    keys = [2**40 + 3, 7, 2**64 - 1]
    random.seed(1)
    np.random.seed(2)
    py, npy = random.getstate(), repr(np.random.get_state())
    _torch_only_equals_manual_seed(keys, version)
    assert (random.getstate(), repr(np.random.get_state())) == (py, npy)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_cached_normal_is_dropped_by_the_seeding(version):
    """The seeding disengages both cached normals (as manual_seed does): the next normal is the
    freshly seeded one."""
    key = 2**50 + 11
    engage_caches()
    seed_reference(key, version)
    want = (torch.randn(1).item(), torch.randn(1, dtype=torch.float64).item())
    for f, d in ((0.5, 0.25), (-8.0, 1e300)):
        engage_caches(f, d)
        G.seed_globals(key, **vkw(version))
        assert (torch.randn(1).item(), torch.randn(1, dtype=torch.float64).item()) == want


@pytest.mark.parametrize("cached", [False, True])
def test_the_guard_restores_torch_exactly(cached):
    torch.manual_seed(21)
    torch.rand(7)
    if cached:
        engage_caches(1.25, -0.0625)
    before = tstate()
    with G.GlobalRNGGuard():
        seeder = G.GlobalSeeder(np.array([2**45, 3, 2**63 + 1], dtype=np.uint64))
        for i in range(3):
            seeder.seed(i)
            tdraws()
    assert tstate() == before
    if cached:
        assert torch.randn(1, dtype=torch.float64).item() == -0.0625


def test_restore_torch_only_undoes_a_write_into_the_region():
    torch.manual_seed(4)
    engage_caches()
    before = tstate()
    lay = G._layout().torch
    guard = G.GlobalRNGGuard().__enter__()
    lay.view[0] ^= 1  # the seed's low byte: a change get_state shows
    assert tstate() != before
    guard.restore_torch_only()
    assert tstate() == before


def test_torch_own_functions_work_after_memory_writes():
    """manual_seed, set_rng_state and get_rng_state on a generator last written through memory."""
    G.seed_globals(2**33 + 1)
    torch.manual_seed(99)
    a = tdraws()
    G.seed_globals(2**34 + 1)
    torch.manual_seed(99)
    assert tdraws() == a
    G.seed_globals(2**35 + 1)
    saved = torch.get_rng_state()
    b = tdraws()
    G.seed_globals(2**36 + 1)
    torch.set_rng_state(saved)
    assert tdraws() == b


def _probe_failure(monkeypatch, how: str) -> None:
    if how == "probe":
        monkeypatch.setattr(raw_memory, "probe_torch", lambda: None)  # the name Layout calls
    elif how == "verification":
        monkeypatch.setattr(T, "_verified", lambda *a: False)
    else:  # a get_state of another size: another torch
        monkeypatch.setattr(TS, "_STATE_SIZE", TS.STATE_SIZE + 8)  # what check_state_layout knows
        monkeypatch.setattr(T, "STATE_SIZE", TS.STATE_SIZE + 8)  # what the probe knows


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("how", ["probe", "verification", "state size"])
def test_the_reference_route_when_the_probe_fails(request, monkeypatch, fresh_layout, how, version):
    _probe_failure(monkeypatch, how)
    if how == "state size" and version is None:
        # version 3 writes torch's whole serialized state: another layout is refused, not guessed
        random.seed(1)
        torch.manual_seed(2)
        np.random.seed(3)
        before = (random.getstate(), repr(np.random.get_state()), tstate())
        with pytest.raises(rd.ConfigError, match=r"torch.random.default_generator.get_state\(\)='5056 bytes': expected "
                           r"the 5064-byte layout rd knows.*fix: in rd.DataLoader pass seed_per_sample=False.*in "
                           r"rd.seed_globals pass version=2"):
            G.seed_globals(2**40 + 9)
        assert (random.getstate(), repr(np.random.get_state()), tstate()) == before  # nothing seeded
        return
    assert G._layout().torch is None
    keys = [2**40 + 9, 77, 2**64 - 1]
    for cached in (False, True):
        _fast_vs_reference(keys, cached, version)
    _torch_only_equals_manual_seed(keys, version)
    torch.manual_seed(8)
    engage_caches()
    before = tstate()
    with G.GlobalRNGGuard():
        G.seed_globals(2**41, **vkw(version))
        tdraws()
    assert tstate() == before


@pytest.mark.parametrize("version", VERSIONS)
def test_a_replaced_default_generator_is_probed_again_and_the_old_one_left_alone(monkeypatch, fresh_layout, version):
    """``torch.random.default_generator`` rebound to another CPU generator: the layout is probed
    again for it (``current()`` fails for the old one) and seeding reaches it, not the old one."""
    G.seed_globals(2**40 + 1)
    old_lay = G._layout().torch
    torch.manual_seed(31)
    real_before = GEN.get_state().numpy().tobytes()
    other = torch.Generator()
    monkeypatch.setattr(torch.random, "default_generator", other)
    assert not old_lay.current()
    for key in (2**40 + 2, 5, 2**64 - 1):
        G.seed_globals(key, **vkw(version))
        got = other.get_state().numpy().tobytes()
        ref_gen = torch.Generator()
        seed_reference(key, version, ref_gen)
        assert got == ref_gen.get_state().numpy().tobytes()
    assert G._layout().torch.owner is other
    assert GEN.get_state().numpy().tobytes() == real_before  # the real default generator: untouched


def test_only_raw_memory_touches_the_generators_memory():
    # the quarantine: ctypes, addresses and the views onto the generators live in the raw_*.py
    # modules of loader/seeding (raw_memory.py lists them); every other module of the package
    # reaches them through their functions
    import pathlib

    import resumable_data

    root = pathlib.Path(resumable_data.__file__).parent
    needles = ("ctypes", "from_address", "string_at", "py_mv", "np_mv", "torch_mv", "gauss_bytes", "gauss_words")
    # sources/watch.py takes libc's statx address through ctypes for its compiled identity loop
    # (a function pointer, no object's memory): ctypes alone is allowed there
    allowed = {"sources/watch.py: ctypes"}
    offenders = sorted(
        f"{p.relative_to(root)}: {n}"
        for p in root.rglob("*.py")
        if p.name not in ("raw_memory.py", "raw_torch.py", "raw_states.py", "raw_seeding.py")
        for n in needles
        if n in p.read_text(encoding="utf-8")
    )
    assert [o for o in offenders if o not in allowed] == []
