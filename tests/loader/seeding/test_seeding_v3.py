"""Seeding version 3 (fresh runs since 2026-12-02): SplitMix64-filled MT19937 states.

The formula is written out in plain Python integers in ``tests/loader/v3_formula.py``,
independently of the package (it does not use ``hash_state``, ``state_tensor`` or the stream
constants of ``sample_seeding``). Every route must equal it: the kernel's rows (Python's, numpy's
and torch's region), the byte copies, the reference route (no memory layout found), the torch-only
seeder, every fetch path of the loader at 0 and 2 workers; runs resume bit-exact; a fresh run's
state is schema 5 without a seeding record, and the record written out in full means the same."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import resumable_data as rd
from resumable_data.loader.seeding import global_rng as G, raw_seeding, seed_copy
from resumable_data.loader.seeding.mt19937 import seed_rows
from resumable_data.plan import sample_key
from tests.golden import seeding_v1_gen as g
from tests.loader.seeding import v3_formula as F
from tests.loader._draws import BatchDraws, Draws, batches_of, draw_collate, golden_loader

MASK63 = (1 << 63) - 1
# edge keys: tiny, 32-bit boundaries, the sign bit, the extremes, each stream constant (key ^ stream == 0)
# and its complement, the SplitMix64 gamma
EDGE_KEYS = [0, 1, 2, 5, 2**32 - 1, 2**32, 2**32 + 1, 1 << 40, 0xFFFFFFFF00000000, 2**63 - 1, 2**63, 2**63 + 1,
             2**64 - 2, 2**64 - 1, F.PY_STREAM, F.NP_STREAM, F.TORCH_STREAM, F.TORCH_STREAM ^ (2**64 - 1), F.GAMMA]


def test_the_formula_is_not_the_seeding_functions():
    """The written-out formula differs from version 2's ``random.seed`` / ``manual_seed`` (so the
    checks below could fail), and the three streams differ from one another."""
    for k in (0, 2**40 + 3, 2**64 - 1):
        py, npy, tor = (F.words(k, s) for s in (F.PY_STREAM, F.NP_STREAM, F.TORCH_STREAM))
        assert len(py) == 624 and len({tuple(py), tuple(npy), tuple(tor)}) == 3
        assert list(random.Random(k).getstate()[1][:624]) != py
        assert torch.Generator().manual_seed(k & MASK63).get_state().tolist() != F.torch_state(k).tolist()


def observed() -> tuple:
    """The three states, torch's seed and a mix of draws (cached Gaussians included)."""
    return (random.getstate(), repr(np.random.get_state()), torch.get_rng_state().tolist(), torch.initial_seed(),
            random.random(), random.gauss(0, 1), random.getrandbits(70), np.random.random_sample(3).tolist(),
            np.random.standard_normal(), np.random.randint(0, 1000, 3).tolist(), torch.rand(2).tolist(),
            torch.randn(1).tolist(), torch.randn(1, dtype=torch.float64).item())


def leave_caches() -> None:
    """Cached Gaussians left behind by earlier draws (Python's, numpy's, torch's float and double)."""
    random.gauss(0, 1)
    np.random.standard_normal()
    torch.randn(1)
    torch.randn(1, dtype=torch.float64)


def by_formula(keys: list[int]) -> list[tuple]:
    out = []
    for k in keys:
        leave_caches()
        F.seed_by_formula(k)
        out.append(observed())
    return out


def by_seeder(keys: list[int], **kw) -> list[tuple]:
    seeder = G.GlobalSeeder(np.array(keys, dtype=np.uint64), **kw)
    out = []
    for i in range(len(keys)):
        leave_caches()
        seeder.seed(i)
        out.append(observed())
    seeder.release()
    return out


def test_formula_states_are_the_documented_ones():
    """What the formula leaves, read back through the generators' own getters."""
    k = 2**63 + 12345
    F.seed_by_formula(k)
    v, st_py, gauss = random.getstate()
    assert v == 3 and gauss is None and list(st_py) == F.words(k, F.PY_STREAM) + [624]
    name, st_np, pos, has_gauss, cached = np.random.get_state()
    assert (name, pos, has_gauss, cached) == ("MT19937", 624, 0, 0.0) and st_np.tolist() == F.words(k, F.NP_STREAM)
    assert torch.initial_seed() == k & MASK63
    assert torch.get_rng_state().tolist() == F.torch_state(k).tolist()


def test_kernel_rows_hold_each_generator_state_of_the_formula():
    lay = G.layout()
    assert lay.torch is not None, "the torch memory route is off on this interpreter"
    tmpl, tseed, tstate = lay.torch.rows_spec
    keys = EDGE_KEYS + [random.Random(3).getrandbits(64) for _ in range(30)]
    rows = seed_rows(np.array(keys, dtype=np.uint64), version=3)
    trows = seed_rows(np.array(keys, dtype=np.uint64), True, lay.torch.rows_spec, 3)
    assert rows.shape == (len(keys), 1250) and trows.shape == (len(keys), 1250 + tmpl.size)
    assert np.array_equal(trows[:, :1250], rows)
    saved = torch.get_rng_state()
    try:
        for k, row, trow in zip(keys, rows, trows):
            assert row[0] == 624 and row[1:625].tolist() == F.words(k, F.PY_STREAM), hex(k)  # Python: [index, state]
            assert row[625:1249].tolist() == F.words(k, F.NP_STREAM) and row[1249] == 624, hex(k)  # numpy: [state, pos]
            t = trow[1250:]
            assert t[tstate:tstate + 624].tolist() == F.words(k, F.TORCH_STREAM), hex(k)
            assert int(t[tseed]) | int(t[tseed + 1]) << 32 == k & MASK63, hex(k)
            rest = np.ones(tmpl.size, bool)
            rest[tstate:tstate + 624] = rest[tseed:tseed + 2] = False
            assert np.array_equal(t[rest], tmpl[rest]), hex(k)  # left_ = 1, next_ = 0, no cached normals
            # written into torch's region, the row is the formula's generator
            torch.randn(1), torch.randn(1, dtype=torch.float64)  # caches engaged before
            lay.torch_mv[:] = memoryview(t.view(np.uint8))[:lay.torch.size]
            got = (torch.get_rng_state().tolist(), torch.initial_seed(), torch.rand(3).tolist(), torch.randn(3).tolist())
            F.seed_torch(k)
            assert got == (torch.get_rng_state().tolist(), torch.initial_seed(), torch.rand(3).tolist(),
                           torch.randn(3).tolist()), hex(k)
    finally:
        torch.set_rng_state(saved)


@settings(derandomize=True, max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=8))
def test_kernel_rows_equal_the_formula_on_drawn_keys(keys):
    rows = seed_rows(np.array(keys, dtype=np.uint64), version=3)
    for k, row in zip(keys, rows):
        assert row[1:625].tolist() == F.words(k, F.PY_STREAM) and row[625:1249].tolist() == F.words(k, F.NP_STREAM)


@pytest.mark.parametrize("explicit", [False, True], ids=["default", "version=3"])
def test_copy_route_equals_the_formula_on_edge_keys(explicit):
    """Every generator written through its memory (keys below 2**32 included: version 3 has no
    one-word route), caches left behind before each seeding; the default version is 3."""
    lay = G.layout()
    assert lay.py_mv is not None and lay.np_mv is not None and lay.torch_mv is not None
    assert by_seeder(EDGE_KEYS, **({"version": 3} if explicit else {})) == by_formula(EDGE_KEYS)


def test_copy_route_takes_no_seeding_function(monkeypatch):
    """Version 3 never calls ``random.seed`` / ``np.random.seed`` / ``manual_seed`` (small keys
    included), nor the setters (Python's, numpy's, torch's module functions, and rd's reference
    routes that call torch's generator methods): the copies alone."""
    want = by_formula(EDGE_KEYS)
    assert G.layout().torch is not None  # probed now (the probe itself calls the seeding functions)

    def refuse(*a, **k):
        raise AssertionError("a seeding function was called")

    for mod, name in ((random, "seed"), (random, "setstate"), (np.random, "seed"), (np.random, "set_state"),
                      (torch, "manual_seed"), (torch, "set_rng_state"), (torch.random, "manual_seed"),
                      (torch.random, "set_rng_state")):
        monkeypatch.setattr(mod, name, refuse)
    # torch.Generator's own methods cannot be patched: the functions of rd's that call them can
    for name in ("reference_torch", "reference_python", "reference_numpy", "reference_route", "seed_globals_reference"):
        monkeypatch.setattr(seed_copy, name, refuse)
    for name in ("reference_torch", "reference_python", "reference_numpy", "reference_route"):
        monkeypatch.setattr(raw_seeding, name, refuse)  # the names the copy functions (raw_seeding.py) call
    seeder = G.GlobalSeeder(np.array(EDGE_KEYS, dtype=np.uint64), version=3)
    got = []
    for i in range(len(EDGE_KEYS)):
        leave_caches()
        seeder.seed(i)
        got.append(observed())
    seeder.release()
    monkeypatch.undo()
    assert got == want


@settings(derandomize=True, max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=10))
def test_copy_route_equals_the_formula_on_drawn_keys(keys):
    assert by_seeder(keys, version=3) == by_formula(keys)


def test_python_and_numpy_uniforms_differ():
    keys = EDGE_KEYS + [random.Random(5).getrandbits(64) for _ in range(50)]
    seeder = G.GlobalSeeder(np.array(keys, dtype=np.uint64), version=3)
    for i, k in enumerate(keys):
        seeder.seed(i)
        a = [random.random() for _ in range(4)]
        b = np.random.random_sample(4).tolist()
        c = torch.rand(4, dtype=torch.float64).tolist()
        assert a != b and a != c and b != c, hex(k)
        assert not set(a) & set(b), hex(k)
    seeder.release()


def test_reference_route_equals_the_formula(monkeypatch):
    """No memory found for any generator: every key through ``random.setstate`` /
    ``np.random.set_state`` / torch's ``set_state``, which must be called (the route is the one
    claimed)."""
    lay = G.layout()
    for name in ("py", "np", "py_mv", "np_mv", "torch", "torch_mv"):
        monkeypatch.setattr(lay, name, None)
    want = by_formula(EDGE_KEYS)
    calls = []
    real_py, real_np = random.setstate, np.random.set_state
    monkeypatch.setattr(random, "setstate", lambda s: calls.append(("py", list(s[1]))) or real_py(s))
    monkeypatch.setattr(np.random, "set_state", lambda s: calls.append(("np", s[1].tolist())) or real_np(s))
    assert by_seeder(EDGE_KEYS, version=3) == want
    assert calls == [c for k in EDGE_KEYS for c in (("py", F.words(k, F.PY_STREAM) + [624]),
                                                     ("np", F.words(k, F.NP_STREAM)))]
    monkeypatch.undo()
    for k in EDGE_KEYS:  # the reference a swapped generator falls back to, and rd.seed_globals
        leave_caches()
        G.seed_globals_reference(k, 3)
        got = observed()
        leave_caches()
        G.seed_globals_reference(k)  # the default version: 3
        default = observed()
        leave_caches()
        G.seed_globals(k)
        fast = observed()
        F.seed_by_formula(k)
        assert got == default == fast == observed(), hex(k)


@pytest.mark.parametrize("probed", [True, False], ids=["memory", "no-torch-layout"])
def test_the_torch_only_seeder_seeds_torch_alone_by_the_formula(monkeypatch, probed):
    """Lazy seeding's seeder: torch equals the formula (caches engaged before); Python's and
    numpy's states are untouched."""
    if not probed:
        lay = G.layout()
        for name in ("torch", "torch_mv"):
            monkeypatch.setattr(lay, name, None)
    random.seed(1)
    np.random.seed(2)
    py, npy = random.getstate(), repr(np.random.get_state())
    seeder = G.GlobalSeeder(np.array(EDGE_KEYS, dtype=np.uint64), torch_only=True, version=3)
    for i, k in enumerate(EDGE_KEYS):
        torch.randn(1), torch.randn(1, dtype=torch.float64)
        seeder.seed(i)
        got = (torch.get_rng_state().tolist(), torch.initial_seed(), torch.rand(2).tolist(), torch.randn(3).tolist(),
               torch.randn(1, dtype=torch.float64).item())
        F.seed_torch(k)
        assert got == (torch.get_rng_state().tolist(), torch.initial_seed(), torch.rand(2).tolist(),
                       torch.randn(3).tolist(), torch.randn(1, dtype=torch.float64).item()), hex(k)
    seeder.release()
    assert (random.getstate(), repr(np.random.get_state())) == (py, npy)


# -- the loader: every fetch route of a fresh run -------------------------------------------------
def expected(key: int) -> list:
    F.seed_by_formula(key)
    return [key, random.random(), float(np.random.random_sample()), torch.rand(1).item()]


def check_batches(dl: rd.DataLoader, batches: list, per_batch: bool = False) -> None:
    """Each sample's draws are the formula's for its key (``per_batch``: ``__getitems__``, seeded
    once from the batch's first key, then drawn sample after sample), the collate's for the batch
    key; Python's and numpy's uniforms differ."""
    assert batches
    for b in batches:
        if per_batch:
            F.seed_by_formula(b["samples"][0][0])
            assert b["samples"] == [[s[0], random.random(), float(np.random.random_sample()), torch.rand(1).item()]
                                    for s in b["samples"]]
        for s in b["samples"]:
            if not per_batch:
                assert s == expected(s[0])
            assert s[1] != s[2]
        position = b["collate"][0]
        key = sample_key(dl.plan.version_hash, dl.plan.seed, position, "collate")
        assert b["collate"][1:] == expected(key)[1:]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("dataset, seeding", [(Draws, True), (Draws, "lazy"), (BatchDraws, True)],
                         ids=["getitem", "getitem-lazy", "getitems"])
def test_every_fetch_route_seeds_by_the_formula(workers, dataset, seeding):
    dl = rd.DataLoader(dataset(), collate_fn=draw_collate, num_workers=workers, seed_per_sample=seeding, **g.KW)
    it = iter(dl)
    check_batches(dl, [next(it) for _ in range(4)], dataset is BatchDraws)
    state = dl.state_dict()
    assert state["schema_version"] == 5
    # schema 5 omits the default record (eager, version 3) and writes any other
    assert state.get("sample_seeding") == (None if seeding is True else {"mode": "lazy", "version": 3})


@pytest.mark.parametrize("workers", [0, 2])
def test_arrow_collate_seeds_by_the_formula(shards, workers):
    def collate(table):
        ctx = rd.batch_context()
        return {"samples": [], "collate": [int(ctx.positions[0]), random.random(), float(np.random.random_sample()),
                                           torch.rand(1).item()]}

    dl = rd.DataLoader(shards, batch_size=8, shuffle=True, seed=3, arrow_collate=collate, num_workers=workers)
    it = iter(dl)
    check_batches(dl, [next(it) for _ in range(3)])


# -- resume, bit-exact ------------------------------------------------------------------------------
def test_the_golden_loader_draws_by_the_formula():
    """The resume checks below compare version-3 batches: sample 0 of the first batch is the
    formula's (so a resume under another version could not pass)."""
    dl = golden_loader()
    b = batches_of(dl, 1)[0]
    key = sample_key(dl.plan.version_hash, dl.plan.seed, 0)
    rec = int(b["samples"][0][0])
    F.seed_by_formula(key)
    assert b["samples"][0] == [float(rec), random.random(), float(np.random.random_sample()), torch.rand(1).item(),
                               random.random(), float(np.random.random_sample())]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_version_3_run_resumes_bit_exact(workers):
    k, after = 4, 20  # across the epoch end (16 steps an epoch): the next pass keeps the version
    ref = batches_of(golden_loader(workers), k + after)
    dl = golden_loader(workers)
    assert batches_of(dl, k) == ref[:k]
    state = dl.state_dict()
    assert state["schema_version"] == 5 and "sample_seeding" not in state  # the default record: omitted
    resumed = golden_loader(workers)
    resumed.load_state_dict(state)
    got = batches_of(resumed, after)
    assert len(got) == after and got == ref[k:]
    assert all(s[1] != s[2] for b in got for s in b["samples"])
    assert resumed.state_dict()["schema_version"] == 5 and "sample_seeding" not in resumed.state_dict()


@pytest.mark.parametrize("workers", [0, 2])
def test_a_lazy_version_3_run_resumes_bit_exact_and_records_its_mode(workers):
    k, after = 5, 18
    ref = batches_of(golden_loader(workers), k + after)  # lazy delivers the eager batches
    dl = golden_loader(workers, seed_per_sample="lazy")
    assert batches_of(dl, k) == ref[:k]
    state = dl.state_dict()
    assert state["schema_version"] == 5 and state["sample_seeding"] == {"mode": "lazy", "version": 3}
    resumed = golden_loader(workers, seed_per_sample="lazy")
    resumed.load_state_dict(state)
    assert batches_of(resumed, after) == ref[k:]
    assert resumed.state_dict()["sample_seeding"] == {"mode": "lazy", "version": 3}


def test_the_default_record_written_out_loads_the_same():
    src = golden_loader()
    batches_of(src, 3)
    state = src.state_dict()
    assert state["schema_version"] == 5 and "sample_seeding" not in state
    want = batches_of(golden_loader(), 9)[3:]
    full = golden_loader()
    full.load_state_dict({**copy.deepcopy(state), "sample_seeding": {"mode": "eager", "version": 3}})
    assert "sample_seeding" not in full.state_dict() and full.state_dict() == state
    assert batches_of(full, 6) == want
    keyless = golden_loader()
    keyless.load_state_dict(state)
    assert batches_of(keyless, 6) == want
    # schema 5 without the record means eager: a lazy loader refuses it as a mode change
    with pytest.raises(rd.ResumeError, match=r"seed_per_sample: saved 'eager' vs current 'lazy'"):
        golden_loader(seed_per_sample="lazy").load_state_dict(state)
