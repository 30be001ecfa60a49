"""Lazy seeding of the global generators (``seed_per_sample="lazy"``, an opt-in).

A ``__getitem__`` batch is first fetched with the three left unseeded and watched; only when
user code drew from one is the batch fetched again, seeded, and the fetcher (in that process)
seeds it eagerly from then on (torch's alone seen drawing: torch's seeded, Python's and
numpy's still watched; Python's or numpy's: all three). What is delivered must be the eager batch, bit for bit, at any
worker count and after a resume; a dataset that never draws is called once per sample; one that
draws is called once more for its first drawing batch per process only."""

from __future__ import annotations

import multiprocessing as mp
import random

import numpy as np
import pytest
import torch

import resumable_data as rd
from resumable_data.loader.seeding import global_rng as G
from tests.loader.conftest import canon

N = 96
BATCH = 8
KW = dict(batch_size=BATCH, shuffle=True, seed=11, dataset_version="lazy-v1", collate_fn=list,
          seed_per_sample=rd.SampleSeeding.LAZY)
_CALLS = mp.Value("i", 0)  # shared with forked workers: every __getitem__ call of every process


class Sparse(torch.utils.data.Dataset):
    """Draws from the global generators only for record ``at`` (``what``: which draws)."""

    def __init__(self, at: int | None = 37, what: str = "all", fail_at: int | None = None, torch_draws: bool = True):
        self.at, self.what, self.fail_at, self.torch_draws = at, what, fail_at, torch_draws

    def __len__(self):
        return N

    def __getitem__(self, i):
        with _CALLS.get_lock():
            _CALLS.value += 1
        ctx = rd.sample_context()
        row = {"record": i, "position": ctx.position}
        if self.torch_draws:  # every record draws from torch's generator (and reads its seed)
            row.update(torch=torch.rand(1).item(), seed=torch.initial_seed())
        if i == self.at:
            if self.what in ("all", "python"):
                row["py"] = (random.random(), random.gauss(0, 1))
            if self.what in ("all", "numpy"):
                row["np"] = float(np.random.rand())
            if self.what in ("all", "numpy", "numpy_gauss"):
                row["np_gauss"] = float(np.random.standard_normal())
            if self.what == "python_gauss":
                row["py_gauss"] = random.gauss(0, 1)
            if self.what == "torch":
                row["t"] = (torch.randn(3).tolist(), torch.randint(0, 2**40, (1,)).item(), torch.initial_seed())
        if i == self.fail_at:
            raise ValueError(f"bad record {i}")
        return row


def _reset_calls():
    _CALLS.value = 0


def _loader(ds, eager=False, **kw):
    if eager:  # the reference: the default, all three generators seeded per sample from the start
        kw = {"seed_per_sample": True, **kw}
    return rd.DataLoader(ds, **{**KW, **kw})


def ds_plan_hash():
    return _loader(Sparse()).plan.version_hash


def _with_cached_gaussians():
    """The training loop's generators, each with a cached Gaussian (a cached-value draw must be seen)."""
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    random.gauss(0, 1)
    np.random.standard_normal()


@pytest.mark.parametrize("what", ["all", "python", "numpy", "numpy_gauss", "python_gauss"])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataset_drawing_on_one_record_gives_the_eager_batches(what, workers):
    _with_cached_gaussians()
    lazy = [canon(b) for b in _loader(Sparse(what=what), num_workers=workers)]
    _with_cached_gaussians()
    eager = [canon(b) for b in _loader(Sparse(what=what), eager=True, num_workers=workers)]
    assert lazy == eager
    rows = [r for b in lazy for r in b]
    assert sorted(r["record"] for r in rows) == list(range(N))
    # record 37's draws are the ones its sample key gives (the seeding functions themselves)
    row = next(r for r in rows if r["record"] == 37)
    key = rd.plan.sample_key(ds_plan_hash(), 11, row["position"])
    G.seed_globals_reference(key)
    ref = {"torch": torch.rand(1).item()}
    if what in ("all", "python"):
        ref["py"] = [random.random(), random.gauss(0, 1)]  # canon() makes tuples lists
    if what in ("all", "numpy"):
        ref["np"] = float(np.random.rand())
    if what in ("all", "numpy", "numpy_gauss"):
        ref["np_gauss"] = float(np.random.standard_normal())
    if what == "python_gauss":
        ref["py_gauss"] = random.gauss(0, 1)
    assert {k: row[k] for k in ref} == ref
    assert row["seed"] == key & (2**63 - 1)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_resume_after_the_drawing_batch_continues_with_the_eager_batches(workers):
    full = [canon(b) for b in _loader(Sparse(), eager=True, num_workers=workers)]
    for cut in (2, 7):  # before and after the batch holding record 37 (wherever it lands)
        first = _loader(Sparse(), num_workers=workers)
        it = iter(first)
        head = [canon(next(it)) for _ in range(cut)]
        state = first.state_dict()
        del it
        resumed = _loader(Sparse(), num_workers=workers)
        resumed.load_state_dict(state)
        assert head + [canon(b) for b in resumed] == full


def test_a_dataset_that_never_draws_is_called_once_per_sample_and_stays_lazy():
    _reset_calls()
    loader = _loader(Sparse(at=None, torch_draws=False))
    rows = [r for b in loader for r in b]
    assert len(rows) == N and _CALLS.value == N
    assert loader._fetcher.lazy_globals and loader._fetcher.lazy_torch


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataset_drawing_from_torch_only_is_refetched_for_its_first_batch_only(workers):
    """torch's generator drawn on every record: each process fetches its first batch twice (the
    unseeded pass, then torch's seeded), then seeds torch's only; Python's and numpy's stay lazy;
    the batches are the eager ones."""
    _reset_calls()
    loader = _loader(Sparse(at=None), num_workers=workers)
    lazy = [canon(b) for b in loader]
    assert _CALLS.value == N + BATCH * max(workers, 1)  # one first batch per process
    if workers == 0:
        assert loader._fetcher.lazy_globals and not loader._fetcher.lazy_torch
    assert lazy == [canon(b) for b in _loader(Sparse(at=None), eager=True, num_workers=workers)]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_drawing_dataset_is_fetched_again_only_for_its_first_drawing_batch(workers):
    """Record 37 and record 5 draw (one process, or two workers, may see them): every process
    that sees a draw fetches that batch twice, then seeds eagerly; no other batch is refetched."""
    class Two(Sparse):
        def __getitem__(self, i):
            row = super().__getitem__(i)
            if i == 5:
                row["py5"] = random.random()
            return row

    _reset_calls()
    loader = _loader(Two(torch_draws=False), num_workers=workers)
    order = [[r["record"] for r in b] for b in loader]
    drawing = [k for k, b in enumerate(order) if 37 in b or 5 in b]
    if workers == 0:
        first = drawing[0]
        assert _CALLS.value == N + len(order[first])
        assert not loader._fetcher.lazy_globals
    else:  # batch k is fetched by worker k % 2: each worker refetches its own first drawing batch
        firsts = {min(k for k in drawing if k % workers == w) for w in {k % workers for k in drawing}}
        assert _CALLS.value == N + sum(len(order[k]) for k in firsts)


def test_an_exception_without_a_draw_is_raised_as_before_and_the_pass_goes_on():
    _reset_calls()
    loader = _loader(Sparse(at=None, fail_at=5, torch_draws=False))
    it = iter(loader)
    seen, errors = [], 0
    while True:
        try:
            seen += [r["record"] for r in next(it)]
        except StopIteration:
            break
        except ValueError as e:
            errors += 1
            assert "bad record 5" in str(e)
            assert any("record 5" in note for note in getattr(e, "__notes__", []))
    assert errors == 1 and 5 not in seen and len(seen) == N - BATCH
    assert _CALLS.value == N - BATCH + (_index_in_its_batch(loader, 5) + 1)  # no refetch of the failing batch
    assert loader._fetcher.lazy_globals


def test_an_exception_after_a_draw_refetches_seeded_and_raises_the_eager_error():
    """Record 37 draws and record 37 raises: the unseeded pass drew, so the batch is fetched
    again seeded (the error then comes from the seeded pass) and the fetcher is eager from then on;
    the training loop's generators are untouched."""
    _with_cached_gaussians()
    expect = (random.getstate(), repr(np.random.get_state()), torch.get_rng_state().tolist())
    _reset_calls()
    loader = _loader(Sparse(at=37, fail_at=37, torch_draws=False))
    it = iter(loader)
    with pytest.raises(ValueError, match="bad record 37"):
        while True:
            next(it)
    assert (random.getstate(), repr(np.random.get_state()), torch.get_rng_state().tolist()) == expect
    assert not loader._fetcher.lazy_globals
    # the batches before it once, its samples up to record 37 twice (unseeded, then seeded)
    assert _CALLS.value == _step_of(loader, 37) * BATCH + 2 * (_index_in_its_batch(loader, 37) + 1)


def _step_of(loader, record):
    """The step of the epoch whose batch holds ``record``."""
    for step in range(loader.plan.steps_per_epoch):
        if record in loader.step_info(step).records.tolist():
            return step
    raise AssertionError(f"record {record} not in the epoch")


def _index_in_its_batch(loader, record):
    """Where ``record`` sits in its batch (how many samples are fetched before it, in that batch)."""
    return loader.step_info(_step_of(loader, record)).records.tolist().index(record)


def test_lazy_seeding_is_on_here_and_numpys_cached_gaussian_was_found():
    assert G.lazy_seeding_available()
    assert G._layout().gauss is not None


@pytest.mark.parametrize("at", [None, 37])
def test_the_training_loops_generators_are_exactly_as_before_around_lazy_batches(at):
    """With the default collate, a batch that drew nothing writes back torch's state only: every
    state and cached Gaussian of the loop's three generators must still be what it was."""
    _with_cached_gaussians()
    expect = (random.getstate(), repr(np.random.get_state()), torch.get_rng_state().tolist())
    loader = rd.DataLoader(Sparse(at=at), batch_size=BATCH, shuffle=True, seed=11, dataset_version="lazy-v1",
                           seed_per_sample="lazy")
    for _ in loader:
        assert (random.getstate(), repr(np.random.get_state()), torch.get_rng_state().tolist()) == expect
    assert loader._fetcher.lazy_globals is (at is None)


class Memo(torch.utils.data.Dataset):
    """Keeps state between calls: each record's augmentation is drawn from numpy's global
    generator the first time the record is asked for, then served from a cache (a pattern the
    lazy mode cannot make exact when its first draw is discarded, which is why eager seeding is
    the default)."""

    def __init__(self):
        self.cache = {}

    def __len__(self):
        return N

    def __getitem__(self, i):
        with _CALLS.get_lock():
            _CALLS.value += 1
        if i not in self.cache:
            self.cache[i] = float(np.random.rand())
        return {"record": i, "aug": self.cache[i]}


def test_the_default_seeds_eagerly_so_a_stateful_dataset_is_exact_and_called_once():
    """By default (and with True or "eager") every generator is seeded before every sample: a
    dataset that caches what it drew gives the same batches at 0 and 2 workers, equal to the
    seeding functions' own values, and is called exactly once per sample (no re-fetch)."""
    kw = {k: v for k, v in KW.items() if k != "seed_per_sample"}
    runs = []
    for spec, workers in (({}, 0), ({}, 2), ({"seed_per_sample": True}, 2), ({"seed_per_sample": "eager"}, 0)):
        _reset_calls()
        loader = rd.DataLoader(Memo(), num_workers=workers, **kw, **spec)
        assert not loader._fetcher.lazy_globals
        runs.append([canon(b) for b in loader])
        assert _CALLS.value == N
    assert runs[0] == runs[1] == runs[2] == runs[3]
    loader = rd.DataLoader(Memo(), **kw)
    plan = loader.plan
    first = next(iter(loader))[0]
    G.seed_globals_reference(rd.plan.sample_key(plan.version_hash, plan.seed, 0))
    assert first["aug"] == float(np.random.rand())


def test_seed_per_sample_takes_the_enum_its_values_and_bools_only():
    kw = {k: v for k, v in KW.items() if k != "seed_per_sample"}
    assert rd.DataLoader(Sparse(), seed_per_sample=False, **kw)._fetcher.seed_per_sample is False
    assert rd.DataLoader(Sparse(), seed_per_sample="off", **kw)._fetcher.seed_per_sample is False
    assert rd.DataLoader(Sparse(), seed_per_sample="lazy", **kw)._fetcher.lazy_globals is True
    with pytest.raises(rd.ConfigError, match="seed_per_sample"):
        rd.DataLoader(Sparse(), seed_per_sample="sometimes", **kw)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_torch_draw_on_one_record_gives_the_eager_batches_and_one_refetch(workers):
    """Only record 37 draws (from torch's generator): its batch is fetched unseeded, then again
    with torch's seeded (Python's and numpy's still watched), and equals the eager batch; every
    other batch is fetched once, nothing seeded."""
    _reset_calls()
    loader = _loader(Sparse(what="torch", torch_draws=False), num_workers=workers)
    lazy = [canon(b) for b in loader]
    assert _CALLS.value == N + BATCH  # record 37's batch twice
    assert lazy == [canon(b) for b in _loader(Sparse(what="torch", torch_draws=False), eager=True, num_workers=workers)]
    row = next(r for b in lazy for r in b if r["record"] == 37)
    key = rd.plan.sample_key(ds_plan_hash(), 11, row["position"])
    G.seed_globals_reference(key)
    assert row["t"] == [torch.randn(3).tolist(), torch.randint(0, 2**40, (1,)).item(), key & (2**63 - 1)]
    if workers == 0:
        assert loader._fetcher.lazy_globals and not loader._fetcher.lazy_torch
