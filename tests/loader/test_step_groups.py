"""Requests of several steps (loader/step_groups.py): which loaders use them, and that the batches,
their order, a failing step and the resumed stream are those of one step per request at every
worker count."""

from __future__ import annotations

import gc
import os
import pickle
import types

import numpy as np
import pytest

import resumable_data as rd
from resumable_data.loader import step_groups, torch_compat, transport
from resumable_data.loader.fetch_mode import FetchMode
from resumable_data.loader.step_groups import STEPS_PER_REQUEST, GroupedSampler, Ungrouped, steps_per_request
from tests.loader.conftest import canon


def test_the_rule_groups_only_rd_gathers_with_workers_and_no_timeout():
    assert STEPS_PER_REQUEST > 1
    assert steps_per_request(FetchMode.ARROW, False, 2, 0) == STEPS_PER_REQUEST
    assert steps_per_request(FetchMode.PACKED, False, 1, 0) == STEPS_PER_REQUEST
    assert steps_per_request(FetchMode.ARROW, False, 0, 0) == 1  # no workers: no requests at all
    assert steps_per_request(FetchMode.ARROW, False, 2, 5.0) == 1  # a timeout bounds the wait for one batch
    assert steps_per_request(FetchMode.ARROW, True, 2, 0) == 1  # collate_fn, arrow_collate or transform
    assert steps_per_request(FetchMode.GETITEM, False, 2, 0) == 1
    assert steps_per_request(FetchMode.GETITEMS, False, 2, 0) == 1


def test_the_loader_gives_torch_grouped_requests_where_the_rule_says(shards):
    assert isinstance(rd.DataLoader(shards, batch_size=8, num_workers=2)._torch.sampler, GroupedSampler)
    assert not isinstance(rd.DataLoader(shards, batch_size=8, num_workers=2, timeout=30)._torch.sampler, GroupedSampler)
    assert not isinstance(rd.DataLoader(shards, batch_size=8)._torch.sampler, GroupedSampler)


def test_groups_are_consecutive_and_never_cross_the_end():
    groups = list(GroupedSampler(range(10), 4))
    assert groups == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert len(GroupedSampler(range(10), 4)) == 3


def _stream(loader, epochs=2):
    """Every batch of ``epochs`` passes, canonical."""
    return [[canon(b) for b in loader] for _ in range(epochs)]


@pytest.mark.parametrize(
    ("save_workers", "load_workers", "at"), [(2, 0, 5), (0, 2, 6), (2, 1, 1), (1, 2, 9), (2, 2, 3)]
)
def test_resume_at_any_step_under_any_worker_count_is_exact(shards, save_workers, load_workers, at):
    def make(w):
        return rd.DataLoader(shards, batch_size=8, shuffle=True, seed=3, num_workers=w, persistent_workers=w > 0)

    ref = _stream(make(0))
    assert _stream(make(2)) == ref and len(ref[0]) > 2 * STEPS_PER_REQUEST
    loader = make(save_workers)
    it = iter(loader)
    head = [canon(next(it)) for _ in range(at)]  # mid-request: the rest of the request is dropped
    state = loader.state_dict()
    del it, loader
    resumed = make(load_workers)
    resumed.load_state_dict(state)
    assert [head + [canon(b) for b in resumed], [canon(b) for b in resumed]] == ref


_BAD = [-1]  # the first record id of the batch whose gather fails (set before the workers fork)


def _failing_take_numpy(real):
    def take_numpy(self, record_ids, pad_value=0, alloc=None):
        if int(np.asarray(record_ids)[0]) == _BAD[0]:
            raise ValueError(f"bad batch starting at id {_BAD[0]}")
        return real(self, record_ids, pad_value, alloc)

    return take_numpy


def _outcomes(loader):
    """Each ``next()`` until the pass ends: a batch, or the type of the error it raised."""
    it, out = iter(loader), []
    while True:
        try:
            out.append(canon(next(it)))
        except StopIteration:
            return out, loader.state_dict()["cursor"]
        except ValueError as e:
            out.append(("error", type(e).__name__))


@pytest.mark.parametrize("failing_step", [0, 1, 3, 9])
def test_a_failing_step_is_raised_at_its_turn_and_the_pass_goes_on(shards, failing_step, monkeypatch):
    make = lambda w: rd.DataLoader(shards, batch_size=8, shuffle=True, seed=4, num_workers=w)
    bad = int([b["id"][0] for b in make(0)][failing_step])
    loaders = {w: make(w) for w in (0, 2)}  # built (and warmed up) before the gather is made to fail
    assert isinstance(loaders[2]._torch.sampler, GroupedSampler)
    monkeypatch.setattr(rd.ArrowShards, "take_numpy", _failing_take_numpy(rd.ArrowShards.take_numpy))
    _BAD[0] = bad
    try:
        ref = _outcomes(loaders[0])
        assert ref[0][failing_step] == ("error", "ValueError") and len(ref[0]) > 2 * STEPS_PER_REQUEST
        assert _outcomes(loaders[2]) == ref
    finally:
        _BAD[0] = -1


def test_a_step_that_does_not_pack_is_that_steps_error(monkeypatch):
    worker = types.SimpleNamespace(id=1)
    monkeypatch.setattr(transport, "get_worker_info", lambda: worker)
    monkeypatch.setattr(torch_compat, "get_worker_info", lambda: worker)
    good = (0, {"a": np.arange(3)}, 0, 1)
    unpicklable = (1, {"f": lambda: 0}, 0, 1)  # a lambda does not pickle
    sent = pickle.loads(pickle.dumps(transport.WorkerCollate()([good, unpicklable, (2, {"a": np.arange(2)}, 0, 1)])))
    ungrouped = Ungrouped(lambda it: sent)
    step, batch, _, _ = ungrouped(None)
    assert step == 0 and batch["a"].tolist() == [0, 1, 2]
    with pytest.raises(Exception, match="in DataLoader worker process 1"):
        ungrouped(None)
    assert ungrouped(None)[0] == 2


def test_a_fetch_error_is_kept_in_its_place():
    class Fetcher:
        dataset = "user's"

        def __len__(self):
            return 3

        def __getitem__(self, r):
            if r == 1:
                raise KeyError(r)
            return (r, None, 0, 1)

    got = step_groups.GroupedFetcher(Fetcher())[[0, 1, 2]]
    assert got[0] == (0, None, 0, 1) and got[2] == (2, None, 0, 1)
    assert torch_compat.is_exception(got[1]) and got[1].exc_type is KeyError


def test_a_worker_gets_slots_for_every_batch_it_holds_ahead(shards, monkeypatch):
    assert rd.DataLoader(shards, batch_size=8, num_workers=2)._torch.collate_fn.ahead == 2 * STEPS_PER_REQUEST
    assert (
        rd.DataLoader(shards, batch_size=8, num_workers=2, prefetch_factor=3)._torch.collate_fn.ahead
        == 3 * STEPS_PER_REQUEST
    )
    assert rd.DataLoader(shards, batch_size=8, num_workers=2, timeout=30)._torch.collate_fn.ahead == 2
    monkeypatch.setattr(transport, "MAX_SLOTS", 2)
    monkeypatch.setattr(transport, "_ring", None)
    big = {"x": np.zeros(20_000, dtype=np.int64)}  # over SLOT_MIN_BYTES: a slot when one is free
    kept = [pickle.loads(pickle.dumps(transport.pack(big, os.getpid(), max_slots=3))) for _ in range(3)]
    assert transport.pack(big, os.getpid(), max_slots=3).rebuild is transport._from_inline  # 3 busy
    assert transport.pack(big, os.getpid(), max_slots=4).rebuild is transport._from_slot
    del kept
    gc.collect()
    transport.forget([os.getpid()])  # the last slot was never mapped here: its name is unlinked now
