"""Seeding version 2 (issue 17): numpy's global generator no longer shares Python's state.

The formulas are written out here, independently of the package: Python ``random.seed(key)``,
torch ``manual_seed(key & (2**63 - 1))``, numpy ``seed([lo ^ 0x7F4A7C15, hi ^ 0x9E3779B9])`` in
version 2 and ``seed([lo, hi])`` in version 1. Every route (the kernel's rows, the byte copies,
the seeding functions' fallback, every fetch path of the loader) must equal them; runs resume
bit-exact with the version they started with; a state's ``sample_seeding`` record is checked
all-or-nothing.

Since seeding version 3 (fresh runs, loader schema 5) a version-2 run is one restored from a state
that records it: a schema-4 state without the record (:func:`as_v2`: a fresh loader's state,
before any batch or after some, written as schema 4 without ``sample_seeding``), or one whose record
says version 2. Version 3 itself: ``test_seeding_v3.py``."""

from __future__ import annotations

import copy
import json
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import resumable_data as rd
from resumable_data.loader.seeding import global_rng as G
from resumable_data.loader.seeding.mt19937 import seed_rows
from resumable_data.plan import sample_key
from tests.golden import seeding_v1_gen as g
from tests.loader._draws import BatchDraws, Draws, batches_of, draw_collate, golden_loader

MASK63 = (1 << 63) - 1
# edge keys: below 2**32 (Python's one-word seed), hi == 0, lo == 0, the XOR constant itself
# (version 2's numpy words are then [0, 0]), its halves, the extremes
EDGE_KEYS = [0, 1, 5, 2**32 - 1, 0x7F4A7C15, 2**32, 2**32 + 1, 1 << 40, 0xFFFFFFFF00000000, 0x9E3779B900000000,
             0x9E3779B97F4A7C15, 0x9E3779B97F4A7C14, 2**63, MASK63, 2**64 - 1]


def numpy_words(key: int, version: int) -> list[int]:
    lo, hi = key & 0xFFFFFFFF, key >> 32
    return [lo ^ 0x7F4A7C15, hi ^ 0x9E3779B9] if version == 2 else [lo, hi]


def seed_by_formula(key: int, version: int) -> None:
    random.seed(key)
    np.random.seed(np.array(numpy_words(key, version), dtype=np.uint32))
    torch.manual_seed(key & MASK63)


def observed() -> tuple:
    """The three states and a mix of draws (cached Gaussians included)."""
    return (random.getstate(), repr(np.random.get_state()), torch.get_rng_state().tolist(), torch.initial_seed(),
            random.random(), random.gauss(0, 1), np.random.random_sample(3).tolist(), np.random.standard_normal(),
            np.random.randint(0, 1000, 3).tolist(), torch.rand(2).tolist(), torch.randn(1).tolist())


def by_formula(keys: list[int], version: int) -> list[tuple]:
    out = []
    for k in keys:
        seed_by_formula(k, version)
        out.append(observed())
    return out


def by_seeder(keys: list[int], version: int) -> list[tuple]:
    np.random.standard_normal()  # a cached Gaussian left behind
    seeder = G.GlobalSeeder(np.array(keys, dtype=np.uint64), version=version)
    out = []
    for i in range(len(keys)):
        seeder.seed(i)
        out.append(observed())
    seeder.release()
    return out


@pytest.mark.parametrize("version", [1, 2])
def test_kernel_rows_hold_each_generator_state_of_the_formula(version):
    keys = EDGE_KEYS + [random.Random(3).getrandbits(64) for _ in range(30)]
    rows = seed_rows(np.array(keys, dtype=np.uint64), version=version)
    rs = np.random.RandomState()
    for k, row in zip(keys, rows):
        rs.seed(np.array(numpy_words(k, version), dtype=np.uint32))
        _, state, pos, _, _ = rs.get_state()
        assert np.array_equal(row[625:1249], state) and row[1249] == pos, hex(k)
        if k >> 32:  # Python's two-word rows (a key below 2**32 takes random.seed itself)
            st_py = random.Random(k).getstate()[1]
            assert row[0] == st_py[624] and row[1:625].tolist() == list(st_py[:624]), hex(k)
        if version == 2:
            assert not np.array_equal(row[625:1249], row[1:625]), hex(k)


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("small", [False, True], ids=["copies", "with-small-keys"])
def test_copy_route_equals_the_formula_on_edge_keys(version, small):
    """Without keys below 2**32 every generator is written through its memory (``seed_all``);
    with them the batch takes ``seed_each`` (Python's small keys through ``random.seed``)."""
    lay = G.layout()
    assert lay.py_mv is not None and lay.np_mv is not None and lay.torch_mv is not None
    keys = [k for k in EDGE_KEYS if small or k >> 32]
    assert by_seeder(keys, version) == by_formula(keys, version)


@settings(derandomize=True, max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=12), st.sampled_from([1, 2]))
def test_copy_route_equals_the_formula_on_drawn_keys(keys, version):
    assert by_seeder(keys, version) == by_formula(keys, version)


@pytest.mark.parametrize("version", [1, 2])
def test_seeding_function_route_equals_the_formula(monkeypatch, version):
    """No memory found for any generator: every key through ``random.seed`` / ``np.random.seed``
    / ``manual_seed``, which must be called (the route is the one claimed)."""
    lay = G.layout()
    for name in ("py", "np", "py_mv", "np_mv", "torch", "torch_mv"):
        monkeypatch.setattr(lay, name, None)
    calls = []
    real_np = np.random.seed
    monkeypatch.setattr(np.random, "seed", lambda a: calls.append(np.asarray(a).tolist()) or real_np(a))
    want = by_formula(EDGE_KEYS, version)
    calls.clear()
    assert by_seeder(EDGE_KEYS, version) == want
    assert calls == [numpy_words(k, version) for k in EDGE_KEYS]
    for k in EDGE_KEYS:  # the reference a swapped generator falls back to
        G.seed_globals_reference(k, version)
        got = observed()
        seed_by_formula(k, version)
        assert got == observed()


# -- the loader: every fetch route, fresh (version 2) and restored from a pre-version-2 state --------
def expected(draw: list, version: int) -> list:
    seed_by_formula(draw[0], version)
    return [draw[0], random.random(), float(np.random.random_sample()), torch.rand(1).item()]


MODES = {True: "eager", "lazy": "lazy", False: "off"}


def as_v2(state: dict, seeding=True) -> dict:
    """``state`` as a version-2 run's: schema 4, whose keyless record is (eager, version 2); any
    other mode (``seeding``: the loader's ``seed_per_sample``) recorded with version 2."""
    out = {**{k: v for k, v in state.items() if k != "sample_seeding"}, "schema_version": 4}
    if MODES[seeding] != "eager":
        out["sample_seeding"] = {"mode": MODES[seeding], "version": 2}
    return out


def v2_run(make, k: int = 0, seeding=True):
    """A loader of ``make()`` continuing a version-2 run from step ``k`` (its state taken from a
    fresh, version-3, loader after ``k`` batches: the batches there on depend on the version only)."""
    src = make()
    if k:
        batches_of(src, k)
    dl = make()
    dl.load_state_dict(as_v2(src.state_dict(), seeding))
    return dl


def pre_v2(state: dict) -> dict:
    """The state as rd wrote it before seeding version 2: no record, schema 3."""
    return {**{k: v for k, v in state.items() if k != "sample_seeding"}, "schema_version": 3,
            "batch_origin": state.get("batch_origin")}  # required at schema 3 (null when none)


def check_batches(dl: rd.DataLoader, batches: list, version: int, per_batch: bool = False) -> None:
    """Each sample's draws are the formula's for its key (``per_batch``: ``__getitems__``, seeded
    once from the batch's first key, then drawn sample after sample), the collate's for the batch key."""
    for b in batches:
        if per_batch:
            seed_by_formula(b["samples"][0][0], version)
            assert b["samples"] == [[s[0], random.random(), float(np.random.random_sample()), torch.rand(1).item()]
                                    for s in b["samples"]]
        for s in b["samples"]:
            if not per_batch:
                assert s == expected(s, version)
            assert (s[1] == s[2]) is (version == 1)  # Python's and numpy's uniforms: equal only in version 1
        position = b["collate"][0]
        key = sample_key(dl.plan.version_hash, dl.plan.seed, position, "collate")
        assert b["collate"][1:] == expected([key] + b["collate"][1:], version)[1:]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("dataset, seeding", [(Draws, True), (Draws, "lazy"), (BatchDraws, True)],
                         ids=["getitem", "getitem-lazy", "getitems"])
def test_every_fetch_route_seeds_by_the_formula_of_the_run_version(workers, dataset, seeding):
    make = lambda: rd.DataLoader(dataset(), collate_fn=draw_collate, num_workers=workers, seed_per_sample=seeding,
                                 **g.KW)
    dl = v2_run(make, seeding=seeding)
    it = iter(dl)
    v2 = [next(it) for _ in range(4)]
    check_batches(dl, v2, 2, dataset is BatchDraws)
    state = dl.state_dict()
    # schema 5 omits only its default record (eager, version 3): a version-2 run's is written
    assert state["schema_version"] == 5
    assert state["sample_seeding"] == {"mode": MODES[seeding], "version": 2}
    old = make()
    old.load_state_dict(pre_v2(state))
    check_batches(old, [b for _, b in zip(range(4), old)], 1, dataset is BatchDraws)


def test_arrow_collate_seeds_by_the_formula_of_the_run_version(shards):
    def collate(table):
        ctx = rd.batch_context()
        return {"samples": [], "collate": [int(ctx.positions[0]), random.random(), float(np.random.random_sample()),
                                           torch.rand(1).item()]}

    make = lambda: rd.DataLoader(shards, batch_size=8, shuffle=True, seed=3, arrow_collate=collate)
    dl = v2_run(make)
    it = iter(dl)
    check_batches(dl, [next(it) for _ in range(3)], 2)
    assert dl.state_dict()["sample_seeding"] == {"mode": "eager", "version": 2}
    old = make()
    old.load_state_dict(pre_v2(dl.state_dict()))
    check_batches(old, [b for _, b in zip(range(3), old)], 1)


# -- resume, bit-exact, with the version the run started with ------------------------------------------
@pytest.mark.parametrize("workers", [0, 2])
def test_a_version_2_run_resumes_bit_exact(workers):
    k, after = 4, 20  # across the epoch end (16 steps an epoch): the next pass keeps the version
    make = lambda: golden_loader(workers)
    ref = batches_of(v2_run(make), k + after)
    v3 = batches_of(make(), k + after)  # a fresh run: version 3, other draws, the same records
    assert [[s[0] for s in b["samples"]] for b in ref] == [[s[0] for s in b["samples"]] for b in v3]
    assert all(a["samples"][0][1:] != b["samples"][0][1:] for a, b in zip(ref, v3))
    dl = v2_run(make)
    assert batches_of(dl, k) == ref[:k]
    state = dl.state_dict()
    assert state["schema_version"] == 5 and state["sample_seeding"] == {"mode": "eager", "version": 2}
    resumed = make()
    resumed.load_state_dict(state)
    got = batches_of(resumed, after)
    assert len(got) == after and got == ref[k:]
    assert all(s[1] != s[2] for b in got for s in b["samples"])
    assert resumed.state_dict()["sample_seeding"] == {"mode": "eager", "version": 2}
    # a version-3 state after k batches, read as schema 4 without the record: version 2 from step k
    assert batches_of(v2_run(make, k), after) == ref[k:]


def test_a_resumed_version_1_run_keeps_version_1_in_its_states():
    golden = json.loads(g.PATH.read_text())
    dl = golden_loader()
    dl.load_state_dict(golden["state"])
    assert batches_of(dl, 2) == golden["batches"][:2]
    state = dl.state_dict()
    assert state["schema_version"] == 5 and state["sample_seeding"] == {"mode": "eager", "version": 1}
    again = golden_loader(2)
    again.load_state_dict(state)
    assert batches_of(again, g.AFTER - 2) == golden["batches"][2:]


def test_persistent_workers_take_the_version_of_each_restore():
    golden = json.loads(g.PATH.read_text())
    ref = batches_of(golden_loader(), 8)  # version 3
    ref2 = batches_of(v2_run(golden_loader), 8)
    assert ref2 != ref
    dl = golden_loader(2, persistent_workers=True)
    assert batches_of(dl, 3) == ref[:3]  # the workers start under version 3
    dl.load_state_dict(golden["state"])
    assert batches_of(dl, g.AFTER) == golden["batches"]  # the same workers, version 1 now
    v3 = golden_loader()
    batches_of(v3, 3)
    dl.load_state_dict(as_v2(v3.state_dict()))
    assert batches_of(dl, 5) == ref2[3:8]  # version 2
    dl.load_state_dict(v3.state_dict())
    assert batches_of(dl, 5) == ref[3:8]  # version 3 again


# -- the mode: a change refused unless declared, refusals change nothing ------------------------------
def test_lazy_delivers_the_eager_batches_under_version_2():
    lazy = v2_run(lambda: golden_loader(seed_per_sample="lazy"), seeding="lazy")
    eager = v2_run(golden_loader)
    got, want = batches_of(lazy, 10), batches_of(eager, 10)
    assert got == want and got != batches_of(golden_loader(), 10)
    assert lazy.state_dict()["sample_seeding"] == {"mode": "lazy", "version": 2}


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("saved_mode, current_mode", [(True, "lazy"), ("lazy", True), (False, True), (True, False)])
def test_a_mode_change_is_refused_unchanged_and_accepted_as_a_data_change(saved_mode, current_mode, version):
    make_src = lambda: golden_loader(seed_per_sample=saved_mode)
    src = v2_run(make_src, seeding=saved_mode) if version == 2 else make_src()
    batches_of(src, 3)
    state = src.state_dict()
    saved_name, current_name = (rd.SampleSeeding.EAGER if m is True else rd.SampleSeeding(m) if m else
                                rd.SampleSeeding.OFF for m in (saved_mode, current_mode))
    dl, twin = golden_loader(seed_per_sample=current_mode), golden_loader(seed_per_sample=current_mode)
    for x in (dl, twin):
        batches_of(x, 2)
    before = json.dumps(dl.snapshot().to_dict())
    with pytest.raises(rd.ResumeError, match=rf"seed_per_sample: saved '{saved_name.value}' vs current "
                       rf"'{current_name.value}'.*fix: build the loader with seed_per_sample=rd.SampleSeeding."
                       rf"{saved_name.name}, or load with label='data_change'"):
        dl.load_state_dict(state)
    assert json.dumps(dl.snapshot().to_dict()) == before
    got, want = batches_of(dl, 4), batches_of(twin, 4)
    if current_name is rd.SampleSeeding.OFF:  # unseeded draws depend on the process's history: the records only
        got, want = ([[s[0] for s in b["samples"]] for b in x] for x in (got, want))
    assert got == want
    dl.load_state_dict(state, label="data_change")
    assert dl.recovery_label is rd.RecoveryLabel.DATA_CHANGE
    # the run keeps its version under the new mode; schema 5 omits only (eager, version 3)
    assert dl.state_dict().get("sample_seeding") == (None if current_name is rd.SampleSeeding.EAGER and version == 3
                                                     else {"mode": current_name.value, "version": version})


def test_a_state_without_a_record_continues_under_the_loaders_mode():
    golden = json.loads(g.PATH.read_text())
    for mode in ("lazy", True):  # version 1, whatever the mode: lazy delivers the eager batches
        dl = golden_loader(seed_per_sample=mode)
        dl.load_state_dict(golden["state"])
        assert batches_of(dl, g.AFTER) == golden["batches"]


BAD_RECORDS = [
    ({"mode": "eager", "version": 99}, r"sample_seeding.version=99: expected one of \[1, 2, 3\]"),
    ({"mode": "eager", "version": 4}, r"sample_seeding.version=4: expected one of \[1, 2, 3\]"),
    ({"mode": "eager", "version": 0}, r"sample_seeding.version=0"),
    ({"mode": "eager", "version": "2"}, r"sample_seeding.version='2': expected an integer"),
    ({"mode": "eager", "version": True}, r"sample_seeding.version=True"),
    ({"mode": "eager", "version": 2.0}, r"sample_seeding.version=2.0"),
    ({"mode": "x", "version": 2}, r"sample_seeding.mode='x': expected one of \['eager', 'lazy', 'off'\]"),
    ({"mode": 1, "version": 2}, r"sample_seeding.mode=1"),
    ({"mode": None, "version": 2}, r"sample_seeding.mode=None"),
    ({"mode": "eager"}, r"sample_seeding.*missing \['version'\]"),
    ({"mode": "eager", "version": 2, "seed": 1}, r"sample_seeding.*unexpected \['seed'\]"),
    (["eager", 2], r"sample_seeding.*a JSON object"),
    ("eager", r"sample_seeding.*a JSON object"),
]


@pytest.mark.parametrize("record, match", BAD_RECORDS, ids=[repr(r) for r, _ in BAD_RECORDS])
def test_bad_seeding_records_are_refused_and_change_nothing(record, match):
    src = golden_loader()
    batches_of(src, 5)
    state = src.state_dict()
    dl, twin = golden_loader(), golden_loader()
    for x in (dl, twin):
        batches_of(x, 2)
    before = json.dumps(dl.snapshot().to_dict())
    bad = copy.deepcopy(state)
    bad["sample_seeding"] = record
    with pytest.raises(rd.ResumeError, match=match):
        dl.load_state_dict(bad)
    assert json.dumps(dl.snapshot().to_dict()) == before
    assert batches_of(dl, 3) == batches_of(twin, 3)


def test_the_record_and_the_schema_go_together():
    src = v2_run(lambda: golden_loader(seed_per_sample="lazy"), seeding="lazy")
    batches_of(src, 2)
    state = src.state_dict()
    assert state["schema_version"] == 5 and state["sample_seeding"] == {"mode": "lazy", "version": 2}
    with pytest.raises(rd.ResumeError, match=r"unexpected \['sample_seeding'\]"):  # schema 3 has none
        golden_loader(seed_per_sample="lazy").load_state_dict({**state, "schema_version": 3, "batch_origin": None})
    v2_ref = batches_of(v2_run(golden_loader), 5)
    v3_ref = batches_of(golden_loader(), 5)
    assert v2_ref[2:] != v3_ref[2:]
    # schema 4 without the record means (eager, version 2): a lazy loader refuses it as a mode change
    default = {**{k: v for k, v in state.items() if k != "sample_seeding"}, "schema_version": 4}
    with pytest.raises(rd.ResumeError, match=r"seed_per_sample: saved 'eager' vs current 'lazy'"):
        golden_loader(seed_per_sample="lazy").load_state_dict(default)
    eager = golden_loader()
    eager.load_state_dict(default)  # and an eager loader continues it under version 2
    assert eager.state_dict()["sample_seeding"] == {"mode": "eager", "version": 2}
    assert batches_of(eager, 3) == v2_ref[2:]
    # schema 4's keyless record written out in full is the same state (written at schema 5 with its record)
    full = golden_loader()
    full.load_state_dict({**default, "sample_seeding": {"mode": "eager", "version": 2}})
    assert full.state_dict() == eager_state_at(2)
    assert batches_of(full, 3) == v2_ref[2:]
    # schema 5 without the record means (eager, version 3): the same state continues under version 3
    v3 = golden_loader()
    v3.load_state_dict({**default, "schema_version": 5})
    assert "sample_seeding" not in v3.state_dict()
    assert batches_of(v3, 3) == v3_ref[2:]


def eager_state_at(k: int) -> dict:
    """The state of an eager version-2 run after ``k`` batches."""
    dl = v2_run(golden_loader)
    batches_of(dl, k)
    return dl.state_dict()
