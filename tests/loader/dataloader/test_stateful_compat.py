"""rd.DataLoader as a drop-in for torchdata's ``StatefulDataLoader``: its constructor arguments
are accepted (found by running torchdata's own test_state_dict.py against rd.DataLoader,
benchmarks/torchdata_suite). Every resume compares every remaining batch in order."""

import pytest
import torch

import resumable_data as rd
from tests.loader.conftest import canon

N = 37


class Records(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return {"id": i, "x": torch.tensor([i, i * i])}


def make(num_workers, **kw):
    return rd.DataLoader(Records(), batch_size=4, shuffle=True, seed=11, num_workers=num_workers,
                         dataset_version="records-v1", **kw)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("every", [None, 0, 1, 5])
@pytest.mark.parametrize("interrupt", [0, 3, 9])
def test_snapshot_every_n_steps_is_accepted_and_every_state_is_exact(num_workers, every, interrupt):
    ref = [canon(b) for b in make(num_workers)]
    dl = make(num_workers, snapshot_every_n_steps=every)
    assert dl.snapshot_every_n_steps == every
    it = iter(dl)
    head = [canon(next(it)) for _ in range(interrupt)]
    state = dl.state_dict()  # between snapshots of StatefulDataLoader's schedule too: exact here
    resumed = make(num_workers, snapshot_every_n_steps=every)
    resumed.load_state_dict(state)
    assert head + [canon(b) for b in resumed] == ref


@pytest.mark.parametrize("bad", [-2, 1.5, "5", True])
def test_snapshot_every_n_steps_must_be_none_or_a_non_negative_integer(bad):
    with pytest.raises(rd.ConfigError, match=r"snapshot_every_n_steps=.*expected None or an integer >= 0"):
        make(0, snapshot_every_n_steps=bad)


def test_snapshot_every_n_steps_is_read_only_like_torchs_attributes():
    dl = make(0, snapshot_every_n_steps=3)
    with pytest.raises(rd.ConfigError, match="snapshot_every_n_steps attribute should not be set"):
        dl.snapshot_every_n_steps = 7
    assert dl.snapshot_every_n_steps == 3


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("where", ["mid-epoch", "last batch", "after the loop", "fresh"])
def test_a_state_taken_right_after_a_load_is_the_loaded_state(workers, where):
    """torchdata's ``test_load_state_before_initial_state_dict``: ``state_dict()`` after
    ``load_state_dict(s)`` is ``s``, prefetch (``cursor.fetched``) included; then the run goes on
    exactly as the saved one would have."""
    src = make(workers)
    it = iter(src)
    steps = {"mid-epoch": 4, "last batch": 10, "after the loop": 10, "fresh": 0}[where]
    for _ in range(steps):
        next(it)
    if where == "after the loop":
        assert next(it, None) is None
    state = src.state_dict()
    if where == "mid-epoch" and workers:
        assert state["cursor"]["fetched"] > state["cursor"]["delivered"]  # prefetch ran ahead
    ref = stream(src, it, 15)
    dst = make(workers)
    dst.load_state_dict(state)
    assert dst.state_dict() == state
    assert stream(dst, iter(dst), 15) == ref


def stream(loader, it, n):
    """The next ``n`` batches: the rest of the pass ``it``, then new passes (an empty one included)."""
    out = [canon(b) for _, b in zip(range(n), it)]
    while len(out) < n:
        out += [canon(b) for _, b in zip(range(n - len(out)), loader)]
    return out
