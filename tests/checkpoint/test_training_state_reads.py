"""Reading a run never moves it: TrainingState, meta(), oracles(), inventory() and inspect leave
the loader's cursor and state exactly as they were, in both commit modes."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch

import resumable_data as rd
from resumable_data import cli


def _loader(data_dir, commit):
    return rd.DataLoader(rd.ArrowShards(data_dir), batch_size=4, shuffle=True, seed=5, commit=commit,
                         accumulation_steps=2)


def _observed(loader):
    return loader.cursor, loader.counters, json.dumps(loader.snapshot().to_dict(), sort_keys=True)


@pytest.mark.parametrize("commit", ["auto", "explicit"])
def test_reading_the_training_state_never_changes_the_loader(data_dir, tmp_path, commit):
    loader = _loader(data_dir, commit)
    it = iter(loader)
    next(it)  # one batch delivered, not committed
    before = _observed(loader)
    assert before[0].delivered == 1 and before[0].committed == 0
    model = torch.nn.Linear(2, 1)
    ts = rd.TrainingState(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), loader=loader)
    assert _observed(loader) == before
    ts.meta()
    assert _observed(loader) == before
    ts.oracles()
    assert _observed(loader) == before
    ts.inventory()
    assert _observed(loader) == before
    ts.file_state_dict()
    assert _observed(loader) == before
    path = rd.save_checkpoint(tmp_path / "ck", ts, step=1)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert cli.main(["inspect", str(path)]) == 0
    assert "cursor:" in out.getvalue()
    assert _observed(loader) == before
    # only the documented auto-commit of state_dict() moves it
    loader.state_dict()
    assert loader.cursor.committed == (1 if commit == "auto" else 0)


def test_the_saved_state_in_auto_mode_is_what_state_dict_would_have_returned(data_dir):
    a, b = _loader(data_dir, "auto"), _loader(data_dir, "auto")
    next(iter(a)), next(iter(b))
    model = torch.nn.Linear(2, 1)
    saved = rd.TrainingState(model=model, loader=a).file_state_dict()["loader"]
    assert saved == b.state_dict()
    assert a.cursor.committed == 0  # saving through the snapshot committed nothing


def test_a_loader_without_the_protocol_is_refused(data_dir):
    class Half:
        def state_dict(self):
            return {}

        def load_state_dict(self, sd):
            pass

    with pytest.raises(rd.ConfigError, match="^loader=.*ResumableLoader"):
        rd.TrainingState(model=torch.nn.Linear(2, 1), loader=Half())


@pytest.mark.parametrize("commit", ["auto", "explicit"])
def test_undo_point_restores_the_loader_and_supersedes_iterators_made_since(data_dir, commit):
    loader = _loader(data_dir, commit)
    it = iter(loader)
    next(it)
    before = _observed(loader)
    undo = loader.undo_point()
    other = _loader(data_dir, commit)
    other_it = iter(other)
    for _ in range(3):
        next(other_it)
    if commit == "explicit":
        other.commit()
    loader.load_state_dict(other.state_dict(), on_uncommitted="repeat")
    later = iter(loader)
    next(later)
    assert _observed(loader) != before
    undo()
    assert _observed(loader) == before
    with pytest.raises(rd.UsageError):
        next(later)
    ref = iter(_loader(data_dir, commit))
    next(ref)
    assert torch.equal(next(iter(loader))["id"], next(ref)["id"])  # continues from where it was
