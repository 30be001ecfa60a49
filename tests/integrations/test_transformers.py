"""``ResumableTrainer`` (Hugging Face ``Trainer``) killed with SIGKILL at a random microbatch and
resumed in a fresh process with ``train(resume_from_checkpoint=True)``: every later microbatch
(record ids, inputs, the parameters it met) and the final parameters equal an uninterrupted run's,
bit for bit. The run has dropout, gradient accumulation over 2 microbatches, a short last batch
and a short last accumulation window per epoch, and crosses two epoch boundaries."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import resumable_data as rd
from resumable_data.integrations._files import LOADER_STATE_FILE
from resumable_data.integrations.transformers import ResumableTrainer
import _integ_common as C
import _integ_hf as H

TOTAL = 58  # microbatches of 30 updates: 13 updates (25 microbatches) per epoch, then 4 updates


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return C.write_data(tmp_path_factory.mktemp("hf-data") / "shards")


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("hf-reference")
    status, params = C.run_child(H.train, data=str(data), out=str(root / "out"), log=str(root / "log.jsonl"))
    assert status == "done", params
    log = C.read_log(root / "log.jsonl")
    assert len(log) == TOTAL
    return log, params


def _checkpoint_microbatch(out: Path) -> int:
    from transformers.trainer_utils import get_last_checkpoint

    last = get_last_checkpoint(str(out))
    state = json.loads((Path(last) / LOADER_STATE_FILE).read_text())
    return rd.LoaderState.from_dict(state).cursor.committed


def _kill_and_resume(tmp_path, data, reference, kill_at: int, workers: int = 0, save_steps: int = H.SAVE_STEPS):
    log_ref, params_ref = reference
    out, log_a, log_b = tmp_path / "out", tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    status, _ = C.run_child(H.train, data=str(data), out=str(out), log=str(log_a), kill_at=kill_at, workers=workers,
                            save_steps=save_steps)
    assert status == "killed"
    before = C.read_log(log_a)
    assert len(before) == kill_at
    resumed_from = _checkpoint_microbatch(out)
    status, params = C.run_child(H.train, data=str(data), out=str(out), log=str(log_b), resume=True, workers=workers)
    assert status == "done", params
    C.check_resumed(log_ref, before, C.read_log(log_b), resumed_from)
    assert params == params_ref, "final parameters differ from the uninterrupted run"
    return resumed_from


def test_trainer_resumes_by_seek_after_sigkill(tmp_path, data, reference):
    # a seeded random kill past the first checkpoint (microbatch 8 = update 4)
    kill_at = random.Random(15).randint(2 * H.SAVE_STEPS * H.ACCUMULATION + 1, TOTAL - 1)
    resumed_from = _kill_and_resume(tmp_path, data, reference, kill_at)
    assert 0 < resumed_from < kill_at


@pytest.mark.parametrize("save_steps,kill_at,expected", [(4, 27, 24), (13, 30, 25), (13, 51, 50)])
def test_trainer_resume_across_an_epoch_end(tmp_path, data, reference, save_steps, kill_at, expected):
    # save_steps=4: the checkpoint at update 12 is one microbatch before the epoch's end; save_steps=13:
    # checkpoints right after an epoch's last update (its pass not ended), resumed into the next epoch
    assert _kill_and_resume(tmp_path, data, reference, kill_at, save_steps=save_steps) == expected


@pytest.mark.slow
def test_trainer_resume_with_workers(tmp_path, data, reference):
    _kill_and_resume(tmp_path, data, reference, 41, workers=2)


def test_trainer_refuses_a_checkpoint_without_loader_state(tmp_path, data, reference):
    out = tmp_path / "out"
    status, _ = C.run_child(H.train, data=str(data), out=str(out), log=str(tmp_path / "a.jsonl"), kill_at=20)
    assert status == "killed"
    for folder in out.glob("checkpoint-*"):
        (folder / LOADER_STATE_FILE).unlink()
    status, text = C.run_child(H.train, data=str(data), out=str(out), log=str(tmp_path / "b.jsonl"), resume=True)
    assert status == "error" and "ResumeError" in text and LOADER_STATE_FILE in text, text


def test_trainer_refuses_a_resume_with_another_accumulation(tmp_path, data):
    out = tmp_path / "out"
    status, _ = C.run_child(H.train, data=str(data), out=str(out), log=str(tmp_path / "a.jsonl"), kill_at=20)
    assert status == "killed"
    status, text = C.run_child(H.train, data=str(data), out=str(out), log=str(tmp_path / "b.jsonl"), resume=True,
                               accumulation=4)
    assert status == "error" and "ResumeError" in text and "accumulation_steps: saved 2 vs current 4" in text, text
    assert not (tmp_path / "b.jsonl").exists(), "no batch may be trained before the refusal"


def test_trainer_refuses_skipping_and_samplers_of_its_own(tmp_path, data):
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), ignore_data_skip=True, report_to="none", use_cpu=True)
    with pytest.raises(rd.ConfigError, match="ignore_data_skip"):
        ResumableTrainer(model=C.TinyModel(), args=args, train_dataset=rd.ArrowShards(data))
    args = TrainingArguments(output_dir=str(tmp_path), train_sampling_strategy="group_by_length", report_to="none",
                             use_cpu=True)
    with pytest.raises(rd.ConfigError, match="train_sampling_strategy"):
        ResumableTrainer(model=C.TinyModel(), args=args, train_dataset=rd.ArrowShards(data))


def test_trainer_over_a_datasets_dataset(tmp_path):
    status, files = C.run_child(H.train_hf_dataset, out=str(tmp_path / "out"), log=str(tmp_path / "log.jsonl"))
    assert status == "done", files
    assert LOADER_STATE_FILE in files and "trainer_state.json" in files
    log = C.read_log(tmp_path / "log.jsonl")
    assert len(log) == 3 and sorted(sum((x["ids"] for x in log), [])) == sorted(set(sum((x["ids"] for x in log), [])))


@pytest.mark.slow
def test_trainer_two_processes(tmp_path, data):
    """2 ranks (gloo, forked with torchrun's variables): disjoint records per rank, a kill of every
    process at a random microbatch, a resume: each rank's batches and the parameters bit-exact."""
    ref, a, b = tmp_path / "ref", tmp_path / "a", tmp_path / "b"
    for d in (ref, a, b):
        d.mkdir()
    status, params = C.run_child(H.train_ranks, world=2, data=str(data), out=str(ref / "out"), log=str(ref / "log"))
    assert status == "done", params
    assert params[0] == params[1]
    logs = [C.read_log(ref / f"log.rank{r}") for r in range(2)]
    assert len(logs[0]) == len(logs[1]) == 56  # 13 microbatches (7 updates) per epoch on each rank
    first = [set(sum((x["ids"] for x in log[:12]), [])) for log in logs]
    assert not first[0] & first[1], "ranks must read disjoint records within an epoch"
    kill_at = random.Random("hf-2").randint(17, 55)
    status, _ = C.run_child(H.train_ranks, world=2, data=str(data), out=str(a / "out"), log=str(a / "log"),
                            kill_at=kill_at)
    assert status == "killed", _
    resumed_from = _checkpoint_microbatch(a / "out")
    status, resumed = C.run_child(H.train_ranks, world=2, data=str(data), out=str(a / "out"), log=str(b / "log"),
                                  resume=True)
    assert status == "done", resumed
    for r in range(2):
        C.check_resumed(logs[r], C.read_log(a / f"log.rank{r}"), C.read_log(b / f"log.rank{r}"), resumed_from)
    assert resumed == params


def test_trainer_refuses_an_unpinned_torch_dataset_at_construction(tmp_path):
    """Not at the first resume: a plain torch dataset needs a declared version, or the explicit
    allow_unpinned resume option."""
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    rows = [{"x": i / 10, "labels": 0.0} for i in range(10)]
    with pytest.raises(rd.ConfigError, match=r"dataset_version.*allow_unpinned"):
        ResumableTrainer(model=C.TinyModel(), args=args, train_dataset=rows)
    ResumableTrainer(model=C.TinyModel(), args=args, train_dataset=rows, rd_loader_kwargs={"dataset_version": "v1"})
    t = ResumableTrainer(model=C.TinyModel(), args=args, train_dataset=rows,
                         rd_resume_options={"allow_unpinned": True})
    assert t.rd_resume_options == {"allow_unpinned": True}
    with pytest.raises(rd.ConfigError, match="rd_resume_options"):
        ResumableTrainer(model=C.TinyModel(), args=args, train_dataset=rows, rd_resume_options={"allow": True})
