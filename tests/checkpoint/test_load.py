"""rd.load_checkpoint across a declared global-batch change (on_batch_change="continue"): refused
by default naming the choice, all or nothing, labelled elastic_reshard, and the stream continues at
the committed sample (every later batch as a loader-level continue gives, no sample lost or
repeated); a rebased rd.Mixture's checkpoint resumes faithfully (the rebase is progress)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

import resumable_data as rd
from tests.loader.conftest import canon

N = 60


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("bchg") / "data"
    rd.write_arrow_shards(pa.table({"id": pa.array(np.arange(N), pa.int64())}), d, num_shards=2)
    rd.pin(d)
    return str(d)


def make(data, batch, value=0.0, tail="continuous"):
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(value)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = rd.DataLoader(rd.ArrowShards(data), batch_size=batch, shuffle=True, seed=4, tail=tail)
    return rd.TrainingState(model=model, optimizer=opt, loader=loader)


def train(state, steps):
    ids = []
    for _, batch in zip(range(steps), state.loader):
        loss = state.model(batch["id"].float()[:, None]).mean()
        loss.backward()
        state.optimizer.step()
        state.optimizer.zero_grad()
        state.loader.commit()
        ids.append(batch["id"].numpy().copy())
    return ids


def digest(state):
    return [p.detach().clone() for p in state.model.parameters()], state.loader.cursor, \
        state.loader.state_dict()


def test_a_declared_batch_change_continues_at_the_committed_sample(data, tmp_path):
    saved = make(data, 4, value=1.0)
    first = train(saved, 7)
    rd.save_checkpoint(tmp_path / "ck", saved)
    loader_state = saved.loader.state_dict()
    reference = rd.DataLoader(rd.ArrowShards(data), batch_size=6, shuffle=True, seed=4, tail="continuous")
    reference.load_state_dict(loader_state, on_batch_change="continue")
    expected = [canon(b) for _, b in zip(range(12), reference)]

    fresh = make(data, 6)
    before = digest(fresh)
    with pytest.raises(rd.CompatibilityError, match=r"data.plan.global_batch: saved 4 vs current 6.*"
                                                    r"on_batch_change='continue'"):
        rd.load_checkpoint(tmp_path / "ck", fresh)
    after = digest(fresh)
    assert all(torch.equal(a, b) for a, b in zip(before[0], after[0])) and before[1:] == after[1:]
    got = rd.load_checkpoint(tmp_path / "ck", fresh, on_batch_change="continue")
    assert got.label is rd.RecoveryLabel.ELASTIC_RESHARD and fresh.recovery_label is rd.RecoveryLabel.ELASTIC_RESHARD
    assert fresh.loader.recovery_label is rd.RecoveryLabel.ELASTIC_RESHARD
    assert [d.severity.value for d in got.report.differences] == ["info"] and got.report.batch_changed
    assert all(torch.equal(a, b) for a, b in zip(fresh.model.parameters(), saved.model.parameters()))
    batches = [canon(b) for _, b in zip(range(12), fresh.loader)]
    assert batches == expected  # every later batch, in order
    ids = np.concatenate(first + [np.frombuffer(b["id"][3], dtype=np.int64) for b in batches])
    assert ids[:N].tolist() != list(range(N)) and sorted(ids[:N].tolist()) == list(range(N))  # epoch 0: each once
    assert len(set(ids[N:].tolist())) == len(ids[N:])  # epoch 1 so far: no repeat


def test_a_declared_batch_change_the_loader_refuses_changes_nothing(data, tmp_path):
    saved = make(data, 4, value=1.0, tail="drop")
    train(saved, 5)
    rd.save_checkpoint(tmp_path / "ck", saved)
    fresh = make(data, 6, tail="drop")
    before = digest(fresh)
    with pytest.raises(rd.ResumeError, match="tail='drop'.*fix: resume with the saved batch"):
        rd.load_checkpoint(tmp_path / "ck", fresh, on_batch_change="continue")
    after = digest(fresh)
    assert all(torch.equal(a, b) for a, b in zip(before[0], after[0])) and before[1:] == after[1:]
    with pytest.raises(rd.ConfigError, match="on_batch_change"):
        rd.load_checkpoint(tmp_path / "ck", {"not": "a training state"}, on_batch_change="continue")
    with pytest.raises(rd.ConfigError, match="on_batch_change"):
        rd.load_checkpoint(tmp_path / "ck", fresh, on_batch_change="sometimes")


def test_a_rebased_mixture_checkpoint_resumes_faithfully(tmp_path):
    from tests.loader.mixture.test_mixture_resume import W2, loader_for, run
    from tests.mixture_data import WEIGHTS, write_sources

    dirs = write_sources(tmp_path)
    _, states = run(loader_for(dirs, WEIGHTS), 5)
    loader = loader_for(dirs, W2)
    loader.load_state_dict(states[5], label="data_change")
    model = torch.nn.Linear(1, 1)
    state = rd.TrainingState(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), loader=loader)
    rd.save_checkpoint(tmp_path / "ck", state)
    reference = loader_for(dirs, W2)
    reference.load_state_dict(loader.state_dict())
    want = run(reference, 6)[0]
    fresh_model = torch.nn.Linear(1, 1)
    fresh = rd.TrainingState(model=fresh_model, optimizer=torch.optim.SGD(fresh_model.parameters(), lr=0.1),
                             loader=loader_for(dirs, W2))
    assert rd.load_checkpoint(tmp_path / "ck", fresh).label is rd.RecoveryLabel.FAITHFUL_CONTINUATION
    assert fresh.loader.state_dict()["mixture"]["rebase"] == loader.state_dict()["mixture"]["rebase"] is not None
    assert run(fresh.loader, 6)[0] == want


def test_a_mixture_epoch_rounded_to_the_batch_names_the_epoch_len_fix(tmp_path):
    """An rd.Mixture without epoch_len= rounds its epoch to the global batch (4: 192, 5: 195), so no
    batch change continues it: both refusals name the fix that works (an explicit epoch_len= that
    is a multiple of both batches), not on_batch_change='continue'; and that fix does continue."""
    from tests.loader.mixture.test_mixture_resume import ids_of
    from tests.mixture_data import WEIGHTS, open_sources, write_sources

    dirs = write_sources(tmp_path)

    def training_state(batch, value=0.0, **mix):
        loader = rd.DataLoader(rd.Mixture(open_sources(dirs), weights=WEIGHTS, block_size=16, **mix), batch_size=batch,
                               seed=11)
        model = torch.nn.Linear(1, 1)
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(value)
        return rd.TrainingState(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), loader=loader)

    saved = training_state(4, 1.0)
    first = train(saved, 7)
    rd.save_checkpoint(tmp_path / "ck", saved)
    fix = (r"the rd.Mixture rounds its epoch to the global batch \(4 vs 5\).*on_batch_change='continue' cannot continue it: "
           r"resume with the saved batch; .*rd.Mixture\(..., epoch_len=L\).*a multiple of 20, e.g. 200\)")
    for options in ({}, {"on_batch_change": "continue"}):
        loader = training_state(5).loader
        with pytest.raises(rd.ResumeError, match=r"mixture epoch length: saved 192 vs current 195 records an epoch; "
                                                 r"fix: " + fix) as err:
            loader.load_state_dict(saved.loader.state_dict(), **options)
        assert "load with on_batch_change='continue'" not in str(err.value) and "open the same dataset" not in str(err.value)
        assert loader.cursor.committed == 0
        fresh = training_state(5)
        with pytest.raises(rd.CompatibilityError, match=r"data.plan.num_records: saved 192 vs current 195 \(dataset\); "
                                                        r"fix: " + fix) as err:
            rd.load_checkpoint(tmp_path / "ck", fresh, **options)
        assert "pass on_batch_change='continue'" not in str(err.value) and fresh.loader.cursor.committed == 0
    # the named fix: epoch_len=200 from the start, then the batch change continues at sample 28
    saved = training_state(4, 1.0, epoch_len=200)
    first = train(saved, 7)
    rd.save_checkpoint(tmp_path / "ck200", saved)
    fresh = training_state(5, epoch_len=200)
    assert rd.load_checkpoint(tmp_path / "ck200", fresh, on_batch_change="continue").label is \
        rd.RecoveryLabel.ELASTIC_RESHARD
    later = [canon(b) for _, b in zip(range(12), fresh.loader)]
    one = rd.DataLoader(rd.Mixture(open_sources(dirs), weights=WEIGHTS, block_size=16, epoch_len=200), batch_size=1,
                        seed=11)
    stream = ids_of([canon(b) for _, b in zip(range(28 + 60), one)])
    assert np.concatenate(first).tolist() + ids_of(later).tolist() == stream.tolist()  # every sample, in order


def test_the_batch_change_fix_names_resume_or_start_and_it_works_there(data, tmp_path):
    """The refusal's fix names rd.resume_or_start (the call the README's loop makes), and passing
    on_batch_change='continue' to it resumes at the saved step."""
    saved = make(data, 4)
    train(saved, 5)
    rd.save_checkpoint(tmp_path / "ck", saved, step=5)
    with pytest.raises(rd.CompatibilityError, match=r"on_batch_change='continue' to rd\.resume_or_start"):
        rd.resume_or_start(tmp_path / "ck", make(data, 6))
    assert rd.resume_or_start(tmp_path / "ck", make(data, 6), on_batch_change="continue") == 5


def test_a_missing_directory_names_the_fresh_start_fix_and_it_works(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    state = rd.TrainingState(model=torch.nn.Linear(1, 1))
    with pytest.raises(rd.CheckpointError, match=r"nothing is at .*ckpts.*rd\.resume_or_start\(directory, state\)"):
        rd.load_checkpoint("ckpts", state)
    assert rd.resume_or_start("ckpts", state) == 0  # the fix, as named


@pytest.mark.parametrize("kind, words", [("file", "a file is at"), ("fifo", "a FIFO is at"),
                                         ("dangling", "a link to nothing loadable is at")])
def test_something_other_than_a_directory_is_named_for_what_it_is(tmp_path, kind, words):
    """A file, a FIFO or a dangling link given as the checkpoint directory was reported as 'nothing is at'."""
    import os

    p = tmp_path / "ckpts"
    if kind == "file":
        p.write_bytes(b"x")
    elif kind == "fifo":
        os.mkfifo(p)
    else:
        os.symlink(tmp_path / "gone", p)
    with pytest.raises(rd.CheckpointError, match=words):
        rd.load_checkpoint(p, rd.TrainingState(model=torch.nn.Linear(1, 1)))


def test_last_report_is_the_report_of_the_last_restore_also_through_dcp(data, tmp_path):
    """``TrainingState.last_report``: None before any restore, the report ``load_state_dict``
    returned after one (the only way to read it after ``dcp.load``, which drops the return value),
    and left as it was by a refused restore."""
    import torch.distributed.checkpoint as dcp

    saved = make(data, 4, value=1.0)
    train(saved, 5)
    rd.save_checkpoint(tmp_path / "ck", saved)
    dcp.save({"train": saved}, checkpoint_id=str(tmp_path / "dcp"))
    rest = train(saved, 10**6)

    fresh = make(data, 4)
    assert fresh.last_report is None
    loaded = rd.load_checkpoint(tmp_path / "ck", fresh)
    assert isinstance(fresh.last_report, rd.CompatibilityReport) and fresh.last_report is loaded.report
    assert fresh.last_report.label is rd.RecoveryLabel.FAITHFUL_CONTINUATION

    six = make(data, 6)
    train(six, 2)
    rd.save_checkpoint(tmp_path / "ck6", six)
    other = make(data, 6)
    before = rd.load_checkpoint(tmp_path / "ck6", other).report
    with pytest.raises(rd.ResumableDataError, match="on_batch_change"):
        rd.load_checkpoint(tmp_path / "ck", other)  # another global batch, undeclared: refused
    assert other.last_report is before

    via_dcp = make(data, 4)
    dcp.load({"train": via_dcp}, checkpoint_id=str(tmp_path / "dcp"))
    assert isinstance(via_dcp.last_report, rd.CompatibilityReport)
    assert via_dcp.last_report.label is rd.RecoveryLabel.FAITHFUL_CONTINUATION
    assert [a.tolist() for a in train(via_dcp, 10**6)] == [a.tolist() for a in rest]
