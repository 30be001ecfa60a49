"""The README is executable and the guide pages are in sync.

Every fenced ``python`` block of README.md runs here exactly as printed, each in an empty folder
(the README says to run them in one): the quickstart (it makes and pins its own data, stops and
resumes a loader), the training loop (trained uninterrupted, and again "killed" between two
checkpoints and restarted: the restarted run must end with bit-identical parameters and optimizer
state), and "your data". The performance guide's tables are exactly the generated benchmark
summary, and the "Check your own pipeline" example of the reliability guide runs as written.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest
import torch

import resumable_data as rd

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def block(first_comment: str) -> str:
    """The README's python block that contains ``first_comment`` (exactly one does)."""
    found = [b for b in BLOCKS if first_comment in b]
    assert len(found) == 1, f"expected one README python block containing {first_comment!r}, found {len(found)}"
    return found[0]


QUICKSTART = "# 1. data:"
LOOP = "rd.resume_or_start("
YOUR_DATA = "# Parquet or Arrow IPC files"
LM_PATH = "# the LM path:"


def run(code: str) -> dict:
    env: dict = {"__name__": "__readme__"}
    exec(compile(code, "README.md", "exec"), env)
    return env


def test_every_python_block_is_tested():
    assert len(BLOCKS) == 4, "a python block was added to README.md: run it in tests/faces/test_readme.py"
    for marker in (QUICKSTART, LOOP, YOUR_DATA, LM_PATH):
        block(marker)


def test_readme_is_short_and_keeps_the_two_commands():
    assert len(README.splitlines()) <= 300
    assert "make demo" in README and "make test" in README  # CI and a hook check these strings


def test_readme_links_exist():
    for target in re.findall(r"\]\(((?:docs|notebooks|benchmarks)/[^)#]*)", README):
        assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"


def test_quickstart_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = run(block(QUICKSTART))
    assert (tmp_path / "data" / ".rd-manifest.json").is_file()
    assert env["saved"]["cursor"]["committed"] == 10


def test_training_loop_trains_saves_and_resumes_bit_exact(tmp_path, monkeypatch):
    quickstart, loop = block(QUICKSTART), block(LOOP)
    (tmp_path / "whole").mkdir()
    (tmp_path / "killed").mkdir()

    monkeypatch.chdir(tmp_path / "whole")
    run(quickstart)
    whole = run(loop)
    assert whole["step"] == 120 and rd.latest_checkpoint("checkpoints").name == "step-000000000120"

    monkeypatch.chdir(tmp_path / "killed")
    run(quickstart)
    save, calls, starts = rd.save_checkpoint, [], []

    class Killed(Exception):
        pass

    def killed_at_the_third_save(directory, state, **kw):  # steps 41..60 trained, then lost
        calls.append(kw["step"])
        if len(calls) == 3:
            raise Killed
        return save(directory, state, **kw)

    def recording(directory, state, **kw):
        starts.append(real_resume(directory, state, **kw))
        return starts[-1]

    real_resume = rd.resume_or_start
    monkeypatch.setattr(rd, "resume_or_start", recording)
    monkeypatch.setattr(rd, "save_checkpoint", killed_at_the_third_save)
    with pytest.raises(Killed):
        run(loop)
    monkeypatch.setattr(rd, "save_checkpoint", save)
    resumed = run(loop)  # the script run again, from scratch: new model, optimizer, loader
    assert calls == [20, 40, 60] and starts == [0, 40]
    assert resumed["step"] == 120
    for (name, a), (_, b) in zip(whole["model"].state_dict().items(), resumed["model"].state_dict().items()):
        assert torch.equal(a, b), f"parameter {name} differs after the resume"
    for a, b in zip(whole["optimizer"].state.values(), resumed["optimizer"].state.values()):
        for key in a:
            assert torch.equal(torch.as_tensor(a[key]), torch.as_tensor(b[key])), f"optimizer {key} differs"
    assert whole["loss"].item() == resumed["loss"].item()


def test_your_data_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "cache"))
    env = run(block(YOUR_DATA))
    assert len(env["src"]) == 100
    assert (tmp_path / "my_parquet" / ".rd-manifest.json").is_file()


def test_lm_path_runs_as_written(tmp_path, monkeypatch):
    """The five LM lines, on ``corpus/{web,code}/*.jsonl`` and a BPE ``tokenizer.json`` made here."""
    import json
    import os

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "cache"))
    stdlib = sorted(Path(os.__file__).parent.glob("*.py"))[:30]
    texts = [f.read_text(encoding="utf-8", errors="replace")[:4000] for f in stdlib]
    for name, part in (("web", texts[:15]), ("code", texts[15:])):
        (tmp_path / "corpus" / name).mkdir(parents=True)
        (tmp_path / "corpus" / name / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in part))
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"], show_progress=False))
    tok.save("tokenizer.json")
    env = run("import resumable_data as rd\n" + block(LM_PATH))
    loader, resumed = env["loader"], env["resumed"]
    got, want = next(iter(resumed)), next(iter(loader))  # the second batch, from the resumed loader and the first
    assert got.keys() == want.keys()
    for k in want:
        same = torch.equal(got[k], want[k]) if isinstance(want[k], torch.Tensor) else got[k] == want[k]
        assert same, f"{k} differs after the resume"
    assert isinstance(want["input_ids"], torch.Tensor) and want["input_ids"].shape == (8, 256)
    assert rd.DatasetVersion.load("tokens/web").lineage["function"]["kind"] == "tokenizer"


def test_performance_page_is_the_generated_summary():
    """Nothing in docs/performance.md's generated sections is typed by hand: they are exactly what
    ``python -m benchmarks.readme`` pastes from ``benchmarks/results/summary.md`` (the quiet run)
    and ``benchmarks/results/loaded/summary.md`` (``make bench-loaded``)."""
    from benchmarks.readme import TARGET, render

    page = TARGET.read_text()
    summary = (ROOT / "benchmarks" / "results" / "summary.md").read_text()
    loaded = (ROOT / "benchmarks" / "results" / "loaded" / "summary.md").read_text()
    assert "busy-loop processes loaded the machine" in loaded and "nothing was added" in summary
    for text in (summary, loaded):
        rows = [ln for ln in text.splitlines() if ln.startswith("|") and not ln.startswith("|---")]
        assert len(rows) > 30, "a generated summary lost its tables"
        for row in rows:
            assert row in page
    assert render(page, summary, loaded) == page, "docs/performance.md is out of date: run `python -m benchmarks.readme`"


def test_check_your_own_pipeline_example_runs(tmp_path):
    """The "Check your own pipeline" example of docs/reliability.md, as written, over a small
    pinned dataset."""
    section = (ROOT / "docs" / "reliability.md").read_text().split("## Check your own pipeline", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    n = 24 * 16
    rd.write_arrow_shards(pa.table({"id": pa.array(range(n), pa.int64()), "x": pa.array(range(n), pa.int32())}),
                          tmp_path, num_shards=2)
    rd.pin(tmp_path)
    code = code.replace('rd.ArrowShards("data/")', f"rd.ArrowShards({str(tmp_path)!r})")
    assert str(tmp_path) in code
    env: dict = {}
    exec(compile(code, "docs/reliability.md", "exec"), env)
    tests = [k for k in env if k.startswith("test_")]
    assert tests == ["test_my_pipeline_resumes", "test_my_training_resumes"]
    for name in tests:
        env[name]()  # assert_resumes raises on any divergence


def test_the_loader_picture_is_kept():
    page = (ROOT / "docs" / "how-it-works.md").read_text()
    assert "Inside the loader, one concept per module" in page
    assert "rd.ResumableLoader protocol (loader/protocol.py)" in page


def test_command_line_examples_run(tmp_path, monkeypatch, capsys):
    """The README's command-line block, line by line, over the quickstart's data and the training
    loop's checkpoints (the demo line is left to tests/faces/test_demo.py)."""
    import shlex

    from resumable_data.cli import main

    monkeypatch.chdir(tmp_path)
    run(block(QUICKSTART))
    run(block(LOOP))
    section = README.split("### The command line", 1)[1]
    lines = re.search(r"```bash\n(.*?)```", section, re.S).group(1).splitlines()
    commands = [shlex.split(ln.split("  #")[0]) for ln in lines if ln.strip()]
    assert [c[1] for c in commands] == ["pin", "inspect", "check-resume", "demo"]
    for argv in commands[:-1]:
        assert argv[0] == "resumable-data"
        assert main(argv[1:]) == 0, argv
        out = capsys.readouterr().out
        assert max(map(len, out.splitlines())) <= 100, argv


def test_every_python_block_runs_twice_in_a_row_in_one_empty_folder(tmp_path, monkeypatch, capsys):
    """A new user runs the README top to bottom, then runs it all again in the same folder (the
    files of the first run are there): every block must work both times, and the loop's second
    run resumes at its last checkpoint instead of training again."""
    monkeypatch.chdir(tmp_path)
    for attempt in range(2):
        for marker in (QUICKSTART, LOOP, YOUR_DATA):
            env = run(block(marker))
            if marker == LOOP:
                assert env["step"] == 120
        out = capsys.readouterr().out
        assert "step 120, newest checkpoint step-000000000120" in out, (attempt, out)
        assert "100 records, version" in out
