"""rd.resume_or_start and rd.latest_checkpoint on folders left by killed saves and by damage (found by the
attack sweep: a re-save killed between its two renames resumed an older step, and a truncated newest
checkpoint was skipped without a word, or, when it was the only one, meant "start from step 0")."""

from __future__ import annotations

import os

import pytest
import torch

import resumable_data as rd


def _state(value: float = 0.0) -> rd.TrainingState:
    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.fill_(value)
        model.bias.fill_(value)
    return rd.TrainingState(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), run_id="r")


def _weights(state: rd.TrainingState) -> list:
    return [p.detach().clone() for p in state.model.parameters()]


def test_a_resave_killed_between_its_renames_resumes_the_complete_copy(tmp_path):
    rd.save_checkpoint(tmp_path, _state(1.0), step=1)
    rd.save_checkpoint(tmp_path, _state(3.0), step=3)
    # the re-save of step 3 renamed the old copy aside and was killed before renaming the new one in
    os.rename(tmp_path / "step-000000000003", tmp_path / ".aside-step-000000000003-abcd")
    assert rd.latest_checkpoint(tmp_path).name == ".aside-step-000000000003-abcd"
    s = _state()
    assert rd.resume_or_start(tmp_path, s) == 3  # was 1: two steps lost without a word
    assert s.model.weight[0, 0].item() == 3.0
    rd.save_checkpoint(tmp_path, s, step=4)  # the next save renames the copy back
    assert [p.name for p in rd.list_checkpoints(tmp_path)] == ["step-000000000001", "step-000000000003",
                                                                "step-000000000004"]


@pytest.mark.parametrize("damage", ["truncated", "file_missing", "marker_damaged"])
@pytest.mark.parametrize("older", [True, False], ids=["older-complete", "only-one"])
def test_a_damaged_newest_checkpoint_is_an_error_not_an_older_step_or_a_fresh_start(tmp_path, damage, older):
    if older:
        rd.save_checkpoint(tmp_path, _state(1.0), step=1)
    newest = rd.save_checkpoint(tmp_path, _state(2.0), step=2)
    if damage == "truncated":  # a copy cut short, a full disk on a non-atomic file system
        f = newest / "tensors.safetensors"
        os.truncate(f, f.stat().st_size - 10)
    elif damage == "file_missing":
        (newest / "state.json").unlink()
    else:  # the marker itself damaged (still there: a step directory without one never finished writing)
        (newest / "COMMITTED").write_bytes(b"\x00" * 40)
    before = sorted(os.listdir(tmp_path))
    s = _state(7.0)
    want = _weights(s)
    with pytest.raises(rd.CheckpointError, match=r"^directory=.*step-000000000002.*not complete.*fix: restore"):
        rd.resume_or_start(tmp_path, s)
    assert all(torch.equal(a, b) for a, b in zip(_weights(s), want, strict=True))  # nothing loaded
    assert sorted(os.listdir(tmp_path)) == before  # nothing removed


def test_only_an_interrupted_first_save_means_start(tmp_path):
    (tmp_path / ".tmp-step-000000000005-1-ab").mkdir()  # a first save killed before its marker
    (tmp_path / "step-000000000006").mkdir()  # a step directory without a marker: a write that never finished
    assert rd.latest_checkpoint(tmp_path) is None
    assert rd.resume_or_start(tmp_path, _state()) == 0
    assert rd.resume_or_start(tmp_path / "missing", _state()) == 0


@pytest.mark.parametrize("bad", [None, 3, b"ckpt", ""])
def test_a_directory_that_is_not_a_path_is_an_rd_error(bad, tmp_path, monkeypatch):
    """Attack sweep: ``Path(None)``'s TypeError escaped from save_checkpoint and load_checkpoint, and
    ``save_checkpoint("", ...)`` wrote a checkpoint among the files of the working directory."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(rd.ConfigError, match="^directory="):
        rd.save_checkpoint(bad, _state(), step=1)
    with pytest.raises(rd.ConfigError, match="^directory="):
        rd.load_checkpoint(bad, _state())
    assert not list(tmp_path.iterdir())
