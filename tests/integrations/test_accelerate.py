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
