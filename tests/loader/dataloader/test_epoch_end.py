"""End of an epoch: torch StatefulDataLoader's semantics (torchdata's TestEndOfEpochBehavior).

A state taken inside the loop right after an epoch's last batch resumes into an empty pass, and
the next iter() is the next epoch; a state taken after the loop resumes into the next epoch.
Every resume compares every remaining batch in order."""

import pytest
import torch

import resumable_data as rd
from resumable_data.loader.state import SCHEMA_VERSION
from tests.loader.conftest import canon

N = 23


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return torch.tensor([i, i * i])


def make(num_workers, shuffle=True, **kw):
    return rd.DataLoader(Squares(), batch_size=4, shuffle=shuffle, seed=7, num_workers=num_workers,
                         dataset_version="squares-v1", **kw)


def epochs(k, num_workers, shuffle=True):
    """The reference: ``k`` whole epochs from one uninterrupted loader."""
    dl = make(num_workers, shuffle)
    return [[canon(b) for b in dl] for _ in range(k)]


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("shuffle", [False, True])
def test_state_after_last_batch_inside_loop_resumes_into_an_empty_pass(num_workers, shuffle):
    ref = epochs(3, num_workers, shuffle)
    dl = make(num_workers, shuffle)
    seen = []
    for b in dl:
        seen.append(canon(b))
        sd_in = dl.state_dict()
    assert seen == ref[0] and sd_in["end_of_pass"] is True
    resumed = make(num_workers, shuffle)
    resumed.load_state_dict(sd_in)
    assert resumed.epoch == 0
    assert [canon(b) for b in resumed] == []  # the (empty) rest of epoch 0
    assert resumed.epoch == 1
    assert [canon(b) for b in resumed] == ref[1]
    assert [canon(b) for b in resumed] == ref[2]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_state_after_the_loop_resumes_into_the_next_epoch(num_workers):
    ref = epochs(3, num_workers)
    dl = make(num_workers)
    for _ in dl:
        sd_in = dl.state_dict()
    sd_out = dl.state_dict()
    assert sd_out["end_of_pass"] is False and sd_in != sd_out
    resumed = make(num_workers)
    resumed.load_state_dict(sd_out)
    assert resumed.epoch == 1
    assert [canon(b) for b in resumed] == ref[1]
    assert [canon(b) for b in resumed] == ref[2]


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("stop_after", [1, 3, 5])
def test_state_mid_epoch_resumes_into_the_rest_of_the_epoch(num_workers, stop_after):
    ref = epochs(2, num_workers)
    dl = make(num_workers)
    for i, _ in enumerate(dl):
        if i + 1 == stop_after:
            sd = dl.state_dict()
            break
    assert sd["end_of_pass"] is False
    resumed = make(num_workers)
    resumed.load_state_dict(sd)
    assert resumed.epoch == 0
    assert [canon(b) for b in resumed] == ref[0][stop_after:]
    assert [canon(b) for b in resumed] == ref[1]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_checkpointing_loop_trains_each_epoch_once(num_workers):
    """A loop saving {"epoch": e, "loader": state} after every batch and killed after the last batch
    of epoch 1 trains epochs 0, 1, 2, 3 once each, whichever checkpoint it resumes from."""
    ref = epochs(4, num_workers)

    def train(dl, start, ckpts):
        got = []
        for e in range(start, 4):
            for b in dl:
                got.append((e, canon(b)))
                ckpts.append({"epoch": e, "loader": dl.state_dict()})
        return got

    ckpts = []
    full = train(make(num_workers), 0, ckpts)
    assert full == [(e, b) for e in range(4) for b in ref[e]]
    per_epoch = len(ref[0])
    for cut in (per_epoch - 1, per_epoch, 2 * per_epoch - 1):  # the last batch of epochs 0 and 1, and one inside
        ck = ckpts[cut]
        dl = make(num_workers)
        dl.load_state_dict(ck["loader"])
        assert dl.epoch == ck["epoch"]
        assert train(dl, ck["epoch"], []) == full[cut + 1:]


def test_a_pass_abandoned_after_its_last_batch_then_iter_is_the_next_epoch_like_torch():
    """In process, a new iter() after a break (or a zip that stopped first) right after the last
    batch starts the next epoch, as torch's DataLoader does; only a *resumed* state taken at that
    point gives the empty rest first (the uninterrupted loop would have reached StopIteration)."""
    ref = epochs(3, 0)
    dl = make(0)
    for i, _ in enumerate(dl):
        if i + 1 == len(ref[0]):
            break
    assert dl.epoch == 0 and dl.snapshot().end_of_pass
    sd = dl.state_dict()
    assert [canon(b) for b in dl] == ref[1]
    resumed = make(0)
    resumed.load_state_dict(sd)
    assert [canon(b) for b in resumed] == []
    assert [canon(b) for b in resumed] == ref[1]


def test_zip_of_two_loaders_stays_in_step_across_epochs():
    ref, dl = make(0), make(0)
    pairs = 0
    for _ in range(3):
        for a, b in zip(ref, dl):
            assert canon(a) == canon(b)
            pairs += 1
    assert pairs == 3 * len(epochs(1, 0)[0])


def test_explicit_commit_with_a_rewound_window_is_inside_the_epoch_again():
    ref = epochs(2, 0)
    dl = make(0, commit="explicit")
    got = [canon(b) for b in dl]  # nothing committed: the state rewinds into epoch 0
    sd = dl.state_dict()
    assert got == ref[0] and sd["end_of_pass"] is False
    resumed = make(0, commit="explicit")
    resumed.load_state_dict(sd, on_uncommitted="repeat")
    assert [canon(b) for b in resumed] == ref[0]
    skipped = make(0, commit="explicit")
    skipped.load_state_dict(sd, on_uncommitted="skip")
    assert [canon(b) for b in skipped] == ref[1]


def test_schema_1_state_reads_as_not_at_the_end_of_a_pass():
    ref = epochs(2, 0)
    dl = make(0)
    for _ in dl:
        sd = dl.state_dict()
    assert sd["schema_version"] == 5 == SCHEMA_VERSION  # the seeding record (schema 4, version 3: schema 5) is in every state
    v1 = {k: v for k, v in sd.items() if k not in ("end_of_pass", "batch_origin", "sample_seeding")}
    v1["schema_version"] = 1
    resumed = make(0)
    resumed.load_state_dict(v1)
    assert resumed.epoch == 1
    assert [canon(b) for b in resumed] == ref[1]
    with pytest.raises(rd.ResumeError, match="end_of_pass"):  # a v2 state must have the key
        make(0).load_state_dict({**v1, "schema_version": 2})
    with pytest.raises(rd.ResumeError, match="unexpected|end_of_pass"):  # and a v1 state must not
        make(0).load_state_dict({**sd, "schema_version": 1})
