"""``accelerate``: ``accelerator.prepare`` leaves an ``rd.DataLoader`` (and its sharding) alone;
``prepare_loader`` (JSON hooks) or ``register_for_checkpointing`` carry its state through
``save_state``/``load_state``. A plain loop (accumulation over 2 microbatches, dropout, across
epoch ends) killed with SIGKILL at a random microbatch and resumed in a fresh process: every later
microbatch and the final parameters equal an uninterrupted run's, on 1 process and on 2 (gloo)."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("accelerate")

import resumable_data as rd
import _integ_accelerate as A
import _integ_common as C
from resumable_data.integrations.accelerate import prepare_loader

TOTAL = A.STEPS * A.ACCUMULATION  # microbatches: windows run on across epoch ends (the loader is not prepared)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return C.write_data(tmp_path_factory.mktemp("acc-data") / "shards")


def _run(data, root, **kw):
    root.mkdir(exist_ok=True)
    return C.run_child(A.train, data=str(data), out=str(root / "out"), log=str(root / "log.jsonl"), **kw)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("acc-reference")
    status, params = _run(data, root)
    assert status == "done", params
    log = C.read_log(root / "log.jsonl.rank0")
    assert len(log) == TOTAL
    return log, params


def _kill_and_resume(tmp_path, data, log_ref, params_ref, kill_at, world=1, via="hooks"):
    a, b = tmp_path / "a", tmp_path / "b"
    status, text = _run(data, a, kill_at=kill_at, world=world, via=via)
    assert status in (("killed",) if world == 1 else ("killed", "error")), text
    b.mkdir()
    (b / "out").symlink_to(a / "out")
    resumed_from = int(A._latest(a / "out").name.split("-")[1]) * A.ACCUMULATION
    status, params = _run(data, b, resume=True, world=world, via=via)
    assert status == "done", params
    for r in range(world):
        C.check_resumed(log_ref[r], C.read_log(a / f"log.jsonl.rank{r}"), C.read_log(b / f"log.jsonl.rank{r}"),
                        resumed_from)
    assert params == params_ref, "final parameters differ from the uninterrupted run"
    return resumed_from


@pytest.mark.parametrize("via", ["hooks", "register_for_checkpointing"])
def test_accelerate_resume_after_sigkill(tmp_path, data, reference, via):
    kill_at = random.Random(f"acc-{via}").randint(2 * A.EVERY * A.ACCUMULATION + 1, TOTAL - 1)
    resumed_from = _kill_and_resume(tmp_path, data, [reference[0]], reference[1], kill_at, via=via)
    assert 0 < resumed_from < kill_at


def test_prepare_loader_refuses_a_loader_sharded_otherwise(data):
    from types import SimpleNamespace

    acc = SimpleNamespace(num_processes=2, process_index=1)
    with pytest.raises(rd.ConfigError, match="world_size=2"):
        prepare_loader(acc, rd.DataLoader(rd.ArrowShards(data), batch_size=8, shuffle=True, seed=2))


@pytest.mark.slow
def test_accelerate_two_processes(tmp_path, data):
    ref = tmp_path / "ref"
    status, params_ref = _run(data, ref, world=2)
    assert status == "done", params_ref
    logs = [C.read_log(ref / f"log.jsonl.rank{r}") for r in range(2)]
    assert len(logs[0]) == len(logs[1]) == TOTAL
    first = [set(sum((x["ids"] for x in log[:12]), [])) for log in logs]
    assert not first[0] & first[1], "ranks must read disjoint records within an epoch"
    _kill_and_resume(tmp_path, data, logs, params_ref, 37, world=2)


# -- checkpointing.py as users write it: a plain torch dataset, skip_first_batches left in --------
SCRIPT_TOTAL = A.SCRIPT_EPOCHS * 25


@pytest.fixture(scope="module")
def script_reference(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("acc-script-reference")
    status, params = C.run_child(A.script, data=str(data), out=str(root / "out"), log=str(root / "log.jsonl"))
    assert status == "done", params
    log = C.read_log(root / "log.jsonl.rank0")
    assert len(log) == SCRIPT_TOTAL
    return log, params


@pytest.mark.parametrize("in_save", [False, True], ids=["mid-epoch", "inside-save_state"])
def test_checkpointing_example_with_skip_first_batches_left_in(tmp_path, data, script_reference, in_save, caplog):
    log_ref, params_ref = script_reference
    rng = random.Random(f"acc-script-{in_save}")
    out, log_a, log_b = tmp_path / "out", tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    if in_save:
        kill_in_save = rng.randrange(3, SCRIPT_TOTAL // A.EVERY) * A.EVERY
        kw = {"kill_in_save_at": kill_in_save}
    else:
        kill_at = rng.randint(3 * A.EVERY + 1, SCRIPT_TOTAL - 1)
        kw = {"kill_at": kill_at}
    status, text = C.run_child(A.script, data=str(data), out=str(out), log=str(log_a), **kw)
    assert status == "killed", text
    before = C.read_log(tmp_path / "a.jsonl.rank0")
    if in_save:
        broken = out / f"step_{kill_in_save}"
        assert broken.is_dir() and not (broken / "rd_complete.json").exists()
        assert len(before) == kill_in_save
    from resumable_data.integrations.accelerate import latest_complete_state

    with caplog.at_level("WARNING", logger="resumable_data.integrations.accelerate"):
        newest = latest_complete_state(out)  # what the resumed script will pick
    if in_save:
        assert f"skipping {broken}" in caplog.text  # the interrupted folder is named
        assert newest.name == f"step_{kill_in_save - A.EVERY}"
    resumed_from = int(newest.name.split("_")[1])
    status, params = C.run_child(A.script, data=str(data), out=str(out), log=str(log_b), resume=True)
    assert status == "done", params
    C.check_resumed(log_ref, before, C.read_log(tmp_path / "b.jsonl.rank0"), resumed_from)
    assert params == params_ref  # not 10 batches short: skip_first_batches skipped nothing twice


def test_load_state_of_an_interrupted_folder_is_refused_naming_it(tmp_path, data):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    acc = Accelerator(cpu=True)
    loader = prepare_loader(acc, rd.DataLoader(rd.ArrowShards(data), batch_size=8, shuffle=True, seed=2))
    next(iter(loader))
    acc.save_state(str(tmp_path / "step_1"))
    assert (tmp_path / "step_1" / "rd_complete.json").exists()
    (tmp_path / "step_2").mkdir()  # a save killed before its end
    (tmp_path / "step_2" / "rd_loader_state.json").write_text((tmp_path / "step_1" / "rd_loader_state.json").read_text())
    with pytest.raises(rd.ResumeError, match=r"step_2.*load the newest complete one, .*step_1"):
        acc.load_state(str(tmp_path / "step_2"))
    acc.load_state(str(tmp_path / "step_1"))
    with pytest.warns(RuntimeWarning, match=r"skip_first_batches\(loader, 5\).*at batch 1"):
        assert acc.skip_first_batches(loader, 5) is loader
    assert acc.skip_first_batches(loader, 1) is loader


def test_a_plain_dataset_is_refused_at_prepare_loader_not_at_the_first_resume(data):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    acc = Accelerator(cpu=True)
    with pytest.raises(rd.ConfigError, match=r"dataset_version=.*allow_unpinned=True to prepare_loader"):
        prepare_loader(acc, rd.DataLoader(A.PlainRows(str(data)), batch_size=8, shuffle=True, seed=2))
    loader = rd.DataLoader(A.PlainRows(str(data)), batch_size=8, shuffle=True, seed=2)
    assert prepare_loader(acc, loader, allow_unpinned=True) is loader
    with pytest.raises(rd.ConfigError):
        prepare_loader(acc, loader, allow_unpinned="yes")
