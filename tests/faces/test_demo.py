"""`make demo` / `resumable-data demo`: a real SIGKILL of a training subprocess, a resume from its
latest checkpoint, and a bit-identity verdict that must also catch a broken resume."""

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data import cli
from resumable_data.demo import RunLog, compare, main

FAST = ["--steps", "16", "--checkpoint-every", "5", "--kill-at", "12", "--quiet"]


def test_demo_on_a_users_pinned_data_resumes_bit_identically_through_the_cli(tmp_path, capsys):
    rng = np.random.default_rng(0)
    docs = [rng.integers(1, 60, int(n)).tolist() for n in rng.integers(20, 400, 60)]
    data = tmp_path / "mine"
    rd.write_arrow_shards(pa.table({"ids": pa.array(docs, type=pa.list_(pa.int32()))}), data, num_shards=2)
    rd.pin(data)
    code = cli.main(["demo", "--data", str(data), "--tokens", "ids", "--workdir", str(tmp_path / "w"), *FAST])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "60 documents (column 'ids')" in out and "vocabulary 60" in out
    assert "after it reported microbatch 12" in out
    # the latest checkpoint (10) lies inside an accumulation window (4): its gradients come back
    assert ("resumed   from step-000000000010 in a fresh process at microbatch 10 (inside an accumulation window, "
            "2 of 4 microbatches done") in out
    assert "recovery label:        faithful_continuation" in out and "dataset:               matches" in out
    assert "RNG: torch CPU" in out and "accumulated gradients + microstep" in out   # the inventory
    assert "16 of 16 microbatches identical" in out and "identical" in out.split("final parameters")[1].splitlines()[0]
    assert "trained twice      microbatches 10..12" in out
    assert "skipped_updates=1" in out and "0 duplicated by the replay" in out
    assert "RESULT    BIT-IDENTICAL" in out


def test_a_broken_resume_is_reported_as_diverged_with_a_nonzero_exit(tmp_path, capsys):
    # the resumed process uses another data seed, forced through as a data change (the default
    # stdlib corpus; the contract would refuse it as a continuation)
    code = main(["--workdir", str(tmp_path), "--steps", "12", "--checkpoint-every", "5", "--kill-at", "7", "--quiet",
                 "--sabotage", "seed"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "the standard library's .py files as bytes" in out
    assert "recovery label data_change" in out
    assert "DIVERGED at microbatch" in out and "RESULT    DIVERGED" in out


def _log(digests, params="p", moments="m", counters=None, metrics=None, resumed=None):
    log = RunLog(digests=dict(digests))
    log.done = {"parameters": params, "optimizer": moments, "counters": counters or {"applied_updates": 3},
                "metrics": metrics if metrics is not None else [{"step": 0, "metrics": {"loss": 1.0}}]}
    log.resumed = resumed
    return log


def test_compare_finds_the_first_divergent_batch_and_divergent_parameters():
    ref = _log({s: f"d{s}" for s in range(10)})
    before = _log({s: f"d{s}" for s in range(7)})
    after = _log({s: f"d{s}" for s in range(5, 10)}, resumed={"delivered": 5})
    v = compare(ref, before, after, 10)
    assert v.ok and v.first_divergence is None
    assert any("5..6" in text and "2 of 2 identical" in text for _, text in v.lines)

    bad_batch = _log({**{s: f"d{s}" for s in range(5, 10)}, 8: "x"}, resumed={"delivered": 5})
    v = compare(ref, before, bad_batch, 10)
    assert not v.ok and v.first_divergence == 8

    # identical batches, other parameters (e.g. dropout masks drawn from an unrestored generator)
    v = compare(ref, before, _log({s: f"d{s}" for s in range(5, 10)}, params="q", resumed={"delivered": 5}), 10)
    assert not v.ok and v.first_divergence is None
    assert any(name == "final parameters" and "DIVERGED" in text for name, text in v.lines)

    # a replayed step logged twice, or a missing step, is a failure too
    dup = [{"step": 0, "metrics": {"loss": 1.0}}, {"step": 0, "metrics": {"loss": 1.0}}]
    assert not compare(ref, before, _log({s: f"d{s}" for s in range(5, 10)}, metrics=dup,
                                         resumed={"delivered": 5}), 10).ok
    assert not compare(ref, before, _log({s: f"d{s}" for s in range(5, 9)}, resumed={"delivered": 5}), 10).ok


def test_bad_arguments_are_refused_with_a_message(tmp_path, capsys):
    data = tmp_path / "d"
    rd.write_arrow_shards(pa.table({"ids": pa.array([[1, 2, 3]] * 4, type=pa.list_(pa.int32()))}), data)
    rd.pin(data)
    assert cli.main(["demo", "--data", str(data), "--tokens", "nope", "--workdir", str(tmp_path / "w")]) == 2
    assert "no column 'nope'" in capsys.readouterr().err
    assert main(["--workdir", str(tmp_path / "w"), "--steps", "3"]) == 2
    assert "--steps" in capsys.readouterr().err


@pytest.mark.slow
def test_make_demo_default_run_is_bit_identical(tmp_path):
    """The full `make demo` (400 microbatches, a random kill step) as a user runs it."""
    proc = subprocess.run([sys.executable, "-m", "resumable_data.demo", "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "400 of 400 microbatches identical" in proc.stdout and "RESULT    BIT-IDENTICAL" in proc.stdout


@pytest.mark.parametrize("argv, message", [
    (["--checkpoint-every", "0"], "--checkpoint-every=0: expected an integer >= 1; fix: e.g. --checkpoint-every 30"),
    (["--kill-at", "-1"], "--kill-at=-1: expected a microbatch in [30, 398] (microbatches count from 0: after "
                          "the first checkpoint, written once microbatch 29 is done, as step 30, and before the last); fix: e.g. --kill-at 214, or leave it out"),
    (["--kill-at", "999999"], "--kill-at=999999: expected a microbatch in [30, 398] (microbatches count from 0: after "
                              "the first checkpoint, written once microbatch 29 is done, as step 30, and before the last); fix: e.g. --kill-at 214, or leave it out"),
    (["--tokens", "id"], "--tokens='id': expected a list<int> token column (it is int64); "
                         "fix: pass --tokens NAME of its list<int> token column"),
])
def test_demo_refuses_options_it_cannot_run_before_any_work(tmp_path, capsys, argv, message):
    """A kill before the first checkpoint or past the end, no checkpoints, or a token column that is
    not a list: exit 2 with one line, before training (not a failed run, a silent clamp or a traceback)."""
    data = tmp_path / "data"
    rd.write_arrow_shards(pa.table({"id": pa.array(range(40), pa.int64()),
                                    "tokens": pa.array([[1, 2, 3]] * 40, pa.list_(pa.int32()))}), data)
    rd.pin(data)
    rc = cli.main(["demo", "--quiet", "--data", str(data), "--workdir", str(tmp_path / "work"), *argv])
    out, err = capsys.readouterr()
    assert (rc, out, err) == (2, "", f"resumable-data demo: {message}\n")
