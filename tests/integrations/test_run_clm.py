"""run_clm.py's pipeline (``load_dataset`` + two ``map`` calls + ``ResumableTrainer`` with the
Trainer's default flags, ``train(resume_from_checkpoint=True)`` from the first run on) SIGKILLed
at a seeded random microbatch and, separately, inside a checkpoint save, then resumed in a fresh
process from an edited script (a comment inside the tokenize function, which changes the
``datasets`` cache fingerprint): every later microbatch and the final parameters equal an
uninterrupted run's (see ``_run_clm.py``)."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

import _run_clm as clm

SCRIPT = Path(clm.__file__)
TOTAL = clm.MAX_STEPS  # one microbatch per step


def _run(script: Path, text: Path, out: Path, log: Path, *extra: str) -> int:
    cmd = [sys.executable, str(script), str(text), str(out), str(log), *extra]
    return subprocess.run(cmd, cwd=script.parent, timeout=600).returncode


def _log(path: Path) -> tuple[list[dict], str | None]:
    rows = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    final = [r["final"] for r in rows if "final" in r]
    return [r for r in rows if "final" not in r], (final[0] if final else None)


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    path = tmp_path_factory.mktemp("clm") / "train.txt"
    rng = random.Random(5)
    path.write_text("\n".join("".join(rng.choice("abcdefgh ") for _ in range(rng.randint(5, 40)))
                              for _ in range(60)) + "\n")
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory, text):
    root = tmp_path_factory.mktemp("clm-ref")
    assert _run(SCRIPT, text, root / "out", root / "log.jsonl") == 0  # resume_from_checkpoint=True, first run
    rows, final = _log(root / "log.jsonl")
    assert len(rows) == TOTAL and final is not None
    return rows, final


@pytest.mark.parametrize("in_save", [False, True], ids=["mid-run", "inside-save"])
def test_run_clm_resumes_bit_exact_after_a_kill_and_a_script_edit(tmp_path, text, reference, in_save, caplog):
    from resumable_data.integrations.transformers import latest_complete_checkpoint

    ref_rows, ref_final = reference
    rng = random.Random(f"clm-{in_save}")
    script = tmp_path / "run_clm.py"
    shutil.copy(SCRIPT, script)
    out, log_a, log_b = tmp_path / "out", tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    if in_save:
        at = rng.choice(range(2 * clm.SAVE_STEPS, TOTAL, clm.SAVE_STEPS))
        extra = ["--kill-in-save-at", str(at)]
    else:
        at = rng.randint(clm.SAVE_STEPS + 1, TOTAL - 1)
        extra = ["--kill-at", str(at)]
    assert _run(script, text, out, log_a, *extra) == -9
    before, _ = _log(log_a)
    assert before == ref_rows[:len(before)]
    if in_save:
        broken = out / "run" / f"checkpoint-{at}"
        assert broken.is_dir() and not (broken / "trainer_state.json").exists()  # what a kill mid-save leaves
    with caplog.at_level("WARNING", logger="resumable_data.integrations.transformers"):
        newest = latest_complete_checkpoint(out / "run")
    if in_save:
        assert f"skipping {broken}" in caplog.text and newest.endswith(f"checkpoint-{at - clm.SAVE_STEPS}")
    resumed_from = int(newest.rsplit("-", 1)[1])
    caches = set((out / "hf-cache").rglob("cache-*.arrow"))
    source = script.read_text().replace(
        "    def tokenize_function(examples):\n",
        "    def tokenize_function(examples):\n        # characters are the tokens (a comment added after the crash)\n")
    assert source != script.read_text()
    script.write_text(source)
    assert _run(script, text, out, log_b) == 0
    assert set((out / "hf-cache").rglob("cache-*.arrow")) - caches, "the edit must change the map's fingerprint"
    after, final = _log(log_b)
    assert after == ref_rows[resumed_from:]  # every microbatch after the checkpoint, in order
    assert final == ref_final


def test_the_same_rows_from_two_scripts_have_one_version(tmp_path):
    import datasets

    import resumable_data as rd

    datasets.disable_progress_bars()
    raw = datasets.Dataset.from_dict({"text": ["ab", "cde", "f"] * 5})
    raw.save_to_disk(str(tmp_path / "raw"))
    raw = datasets.load_from_disk(str(tmp_path / "raw"))

    def one(b):
        return {"n": [len(t) for t in b["text"]]}

    def two(b):
        # the same function, edited
        return {"n": [len(t) for t in b["text"]]}

    a, b = raw.map(one, batched=True), raw.map(two, batched=True)
    assert a.cache_files != b.cache_files  # datasets' fingerprint follows the code
    by_files = [rd.ArrowShards.from_hf(d).version.hash for d in (a, b)]
    assert by_files[0] != by_files[1]
    by_rows = [rd.ArrowShards.from_hf(d, version_of="rows", cache_dir=None).version.hash for d in (a, b)]
    assert by_rows[0] == by_rows[1]
    c = raw.map(lambda b: {"n": [len(t) + 1 for t in b["text"]]}, batched=True)
    assert rd.ArrowShards.from_hf(c, version_of="rows").version.hash != by_rows[0]  # other rows, other version
    assert rd.ArrowShards.from_hf(a.remove_columns([])).version.hash == by_files[0]  # a no-op keeps the files' pin
