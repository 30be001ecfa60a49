"""The README is executable and in sync: its opening example runs as written (over a small pinned
corpus, with a toy model standing in for the user's) and resumes exactly, and every table row of
the generated benchmark summary appears in its performance section unedited."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import torch

import resumable_data as rd

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def opening_example() -> str:
    return re.search(r"```python\n(.*?)```", README, re.S).group(1)


def run_example(code: str, data: Path, saved, steps: int) -> tuple[list[list[int]], dict | None]:
    """Run the README's example until the microbatch after ``steps`` optimizer steps, which
    "crashes" in the forward pass; return the ids of every microbatch seen and the saved state."""
    seen: list[list[int]] = []
    weight = torch.zeros(1, requires_grad=True)

    class Stop(Exception):
        pass

    def model(batch):
        seen.append(batch["id"].tolist())
        if len(seen) > steps * 4:  # accumulation_steps=4 in the example
            raise Stop
        return (batch["x"].float() * weight).sum()

    env = {"saved": saved, "model": model, "loss": lambda out: out, "optimizer_step": lambda: True}
    code = code.replace('rd.ArrowShards("data/")', f"rd.ArrowShards({str(data)!r})")
    assert str(data) in code, "the README example no longer opens rd.ArrowShards(\"data/\")"
    try:
        exec(compile(code, "README.md", "exec"), env)
    except Stop:
        pass
    return seen, env["saved"]


def test_opening_example_runs_and_resumes(tmp_path):
    n = 32 * 4 * 6
    rd.write_arrow_shards(pa.table({"id": pa.array(range(n), pa.int64()), "x": pa.array(range(n), pa.int32())}),
                          tmp_path, num_shards=3)
    rd.pin(tmp_path)
    code = opening_example()
    whole, _ = run_example(code, tmp_path, None, steps=5)
    first, saved = run_example(code, tmp_path, None, steps=2)
    assert saved is not None and saved["cursor"]["committed"] == 8
    rest, _ = run_example(code, tmp_path, saved, steps=3)
    assert len(whole) == 5 * 4 + 1 and first == whole[:9]
    # the 9th microbatch was delivered but never committed: on_uncommitted="repeat" sees it again
    assert first[:8] + rest[:12] == whole[:20]
    assert len({i for b in whole for i in b}) == 21 * 32, "the example's shuffle repeated a record"


def test_performance_section_is_the_generated_summary():
    """Nothing in the README's performance section is typed by hand: it is exactly what
    ``python -m benchmarks.readme`` pastes from ``benchmarks/results/summary.md``."""
    from benchmarks.readme import render

    summary = (ROOT / "benchmarks" / "results" / "summary.md").read_text()
    rows = [ln for ln in summary.splitlines() if ln.startswith("|") and not ln.startswith("|---")]
    assert len(rows) > 30, "the generated summary lost its tables"
    assert render(README, summary) == README, "README.md is out of date: run `python -m benchmarks.readme`"


def test_check_your_own_pipeline_example_runs(tmp_path):
    """The "Check your own pipeline" example, as written, over a small pinned dataset."""
    section = README.split("### Check your own pipeline", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    n = 24 * 16
    rd.write_arrow_shards(pa.table({"id": pa.array(range(n), pa.int64()), "x": pa.array(range(n), pa.int32())}),
                          tmp_path, num_shards=2)
    rd.pin(tmp_path)
    code = code.replace('rd.ArrowShards("data/")', f"rd.ArrowShards({str(tmp_path)!r})")
    assert str(tmp_path) in code
    env: dict = {}
    exec(compile(code, "README.md", "exec"), env)
    tests = [k for k in env if k.startswith("test_")]
    assert tests == ["test_my_pipeline_resumes", "test_my_training_resumes"]
    for name in tests:
        env[name]()  # assert_resumes raises on any divergence
