"""A nanoGPT-style loop (batch fetched before the backward, LR set by hand, three mixed packed
sources, dropout) SIGKILLed at a seeded random iteration, before or inside a checkpoint save,
and resumed in a fresh process from an edited copy of the script: every trained microbatch after
the resume (its documents, its inputs, the parameters it met) and the final parameters equal an
uninterrupted run's, in order (see ``_nanogpt_loop.py``)."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import _nanogpt_loop as loop

ITERS = 14
SCRIPT = Path(loop.__file__)


def _run(script: Path, data: Path, ckpt: Path, log: Path, *extra: str) -> int:
    cmd = [sys.executable, str(script), str(data), str(ckpt), str(log), "--iters", str(ITERS), *extra]
    return subprocess.run(cmd, cwd=script.parent, timeout=600).returncode


def _records(log: Path) -> tuple[list[dict], str | None]:
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    final = [r["final"] for r in rows if "final" in r]
    return [r for r in rows if "final" not in r], final[0] if final else None


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("nanogpt")
    data = root / "data"
    loop.write_data(str(data))
    assert _run(SCRIPT, data, root / "ref-ckpt", root / "ref.jsonl") == 0
    rows, final = _records(root / "ref.jsonl")
    assert len(rows) == ITERS * loop.ACCUM and final is not None
    return data, rows, final


@pytest.mark.parametrize("in_save", [False, True], ids=["before-save", "inside-save"])
def test_prefetch_loop_resumes_bit_exact_after_a_kill(reference, tmp_path, in_save):
    data, ref_rows, ref_final = reference
    rng = random.Random(31 + in_save)
    saves = [i for i in range(loop.EVAL_INTERVAL, ITERS, loop.EVAL_INTERVAL)]
    kill_at = rng.choice(saves[1:]) if in_save else rng.randrange(loop.EVAL_INTERVAL + 1, ITERS)
    script = tmp_path / "train.py"  # the user's script, edited between the kill and the resume
    shutil.copy(SCRIPT, script)
    ckpt, log = tmp_path / "ckpt", tmp_path / "run.jsonl"
    extra = ["--kill-at", str(kill_at)] + (["--in-save"] if in_save else [])
    assert _run(script, data, ckpt, log, *extra) == -9  # SIGKILLed
    killed, _ = _records(log)
    assert killed == ref_rows[:len(killed)]  # the same run up to the kill
    assert len(killed) == kill_at * loop.ACCUM
    if in_save:  # the interrupted save left no complete checkpoint of its step
        assert [p.name for p in sorted(ckpt.glob("step-*"))][-1] != f"step-{kill_at:012d}"
    script.write_text(script.read_text() + "\n# a comment added after the crash\n")
    log.write_text("")
    assert _run(script, data, ckpt, log) == 0
    resumed, final = _records(log)
    start = resumed[0]["iter"]
    assert start == max(s for s in saves if s < kill_at or (s == kill_at and not in_save))
    assert resumed == ref_rows[start * loop.ACCUM:]  # every batch after the resume, in order
    assert final == ref_final


def test_the_batch_in_hand_is_left_out_of_a_state_until_the_model_trained_on_it(reference):
    data, _, _ = reference
    loader, model, _, state = loop.build(str(data))
    it = iter(loader)
    b0 = next(it)
    assert state.file_state_dict()["loader"]["cursor"]["committed"] == 0  # in hand, untrained
    model(b0["input_ids"], b0["labels"])  # training forward
    assert loader.snapshot().cursor.committed == 1
    b1 = next(it)  # commits b0, b1 in hand
    model.eval()
    model(b1["input_ids"], b1["labels"])  # an eval forward does not train
    model.train()
    s = loader.state_dict()
    assert (s["cursor"]["committed"], s["cursor"]["delivered"]) == (1, 1)
    assert loader.cursor.delivered == 2  # the live loader still holds b1
    fresh, _, _, _ = loop.build(str(data))
    fresh.load_state_dict(s)
    assert next(iter(fresh))["document_ids"].tolist() == b1["document_ids"].tolist()


def test_unwatched_loader_counts_the_batch_in_hand(reference):
    data, _, _ = reference
    loader, _, _, _ = loop.build(str(data))
    plain = type(loader)(loader.dataset, batch_size=loop.BATCH, seed=3,
                         packing=loader.config.packing)
    it = iter(plain)
    next(it)
    assert plain.state_dict()["cursor"]["committed"] == 1
