"""benchmarks/suite_runner.py, the machinery behind benchmarks/torch_suite and
benchmarks/torchdata_suite, on a tiny synthetic suite written here: outcomes per mode, a hang
killed and continued in a fresh process, a crash recorded, a retry under the longer limit, the
rebinding reaching the tests, a derived mode rerunning only what the baseline passes and the mode
it derives from fails, failures grouped by cause, and a file with another SHA-256 refused."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

UPSTREAM = '''
import os, time, unittest

class Loader:
    name = "base"

class TestSynthetic(unittest.TestCase):
    def test_pass(self):
        self.assertEqual(1, 1)

    def test_uses_loader(self):
        self.assertEqual(Loader.name, "base")

    def test_refused(self):
        if Loader.name != "base":
            raise ValueError("refused: the documented difference")

    def test_lenient_only(self):
        if Loader.name == "rebound":
            raise ValueError("strict refusal")

    def test_skip(self):
        self.skipTest("not here")

    def test_hang(self):
        time.sleep(4 if os.environ.get("SYNTH_SLOW_OK") else 600)

    def test_crash(self):
        if Loader.name != "base":
            os._exit(9)
'''

RUNNER = '''
import os, sys
from pathlib import Path
sys.path.insert(0, {bench!r})
import suite_runner

HERE = Path(__file__).resolve().parent

def patch(module, mode):
    if mode != "base":
        module.Loader = type("Loader", (), {{"name": "rebound" if mode == "rebound" else "lenient"}})

SUITE = suite_runner.Suite(
    name="synth", script=Path(__file__).resolve(), upstream=HERE / "upstream" / "synth_tests.py",
    module="synth_tests", sha256={sha!r}, commit="0" * 40, repo="nobody/synth", title="synthetic",
    mode_env="SYNTH_MODE", modes=("base", "rebound", "lenient"), patch=patch,
    causes=[("the documented refusal", True, r"refused: the documented"), ("timeout", False, r"\\nTimeout"),
            ("process crashed", False, r"\\nCrash")],
    derived={{"lenient": "rebound"}}, loader_attr="Loader", readme="README")

if os.environ.get("SYNTH_MODE"):
    suite_runner.install(SUITE)

if __name__ == "__main__":
    suite_runner.main(SUITE)
'''


def _write(tmp_path: Path, text: str = UPSTREAM) -> Path:
    (tmp_path / "upstream").mkdir(exist_ok=True)
    up = tmp_path / "upstream" / "synth_tests.py"
    up.write_text(textwrap.dedent(text))
    sha = hashlib.sha256(textwrap.dedent(UPSTREAM).encode()).hexdigest()
    script = tmp_path / "run.py"
    script.write_text(RUNNER.format(bench=str(ROOT / "benchmarks"), sha=sha))
    return script


def _run(script: Path, tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), "--results", str(tmp_path / "results"), *args],
                          capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})


def test_outcomes_causes_timeouts_crashes_and_a_derived_mode(tmp_path):
    script = _write(tmp_path)
    (tmp_path / "results").mkdir()
    done = _run(script, tmp_path, "--timeout", "2", "--retry-timeout", "0")
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "results" / "synth.json").read_text())
    res = summary["results"]
    name = "TestSynthetic."
    assert {t.removeprefix(name): r["outcome"] for t, r in res["base"].items()} == {
        "test_pass": "pass", "test_uses_loader": "pass", "test_refused": "pass", "test_lenient_only": "pass",
        "test_skip": "skip", "test_hang": "timeout", "test_crash": "pass"}
    assert {t.removeprefix(name): r["outcome"] for t, r in res["rebound"].items()} == {
        "test_pass": "pass", "test_uses_loader": "fail", "test_refused": "error", "test_lenient_only": "error",
        "test_skip": "skip", "test_hang": "timeout", "test_crash": "crash"}
    # the derived mode reran only what base passes and rebound fails; the rest kept rebound's records
    lenient = {t.removeprefix(name): r["outcome"] for t, r in res["lenient"].items()}
    assert lenient["test_lenient_only"] == "pass" and lenient["test_hang"] == "timeout"
    assert lenient["test_crash"] == "crash" and lenient["test_uses_loader"] == "fail"
    ran = [json.loads(x)["id"] for x in (tmp_path / "results" / "synth_raw" / "lenient.jsonl").read_text().splitlines()]
    assert sorted(t.removeprefix(name) for t in ran) == ["test_crash", "test_lenient_only", "test_refused",
                                                         "test_uses_loader"]
    groups = {g["cause"]: (g["deliberate"], sorted(t.removeprefix(name) for t in g["tests"]))
              for g in summary["modes"]["rebound"]["groups"]}
    assert groups["the documented refusal"] == (True, ["test_refused"])
    assert groups["process crashed"] == (False, ["test_crash"])
    assert groups["ValueError: strict refusal"] == (False, ["test_lenient_only"])  # no cause matched: the first line
    assert summary["modes"]["rebound"]["pass_of_base_passing"] == 1
    assert summary["modes"]["rebound"]["base_passing"] == 5 and summary["modes"]["rebound"]["deliberate"] == 1
    table = (tmp_path / "results" / "synth.md").read_text()
    assert "| rebound | 7 | 1 | 3 | 1 | 2 |" in table
    assert "**lenient**: 2 of the 5 tests that pass with base pass (40.0%); 1 fail by a deliberate difference" in table


def test_a_timeout_runs_once_more_under_the_longer_limit(tmp_path):
    script = _write(tmp_path)
    done = _run(script, tmp_path, "--modes", "base", "--timeout", "1", "--retry-timeout", "30", "-k", "test_hang",
                "-k", "test_pass", env={"SYNTH_SLOW_OK": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    recs = [json.loads(x) for x in (tmp_path / "results" / "synth_raw" / "base.jsonl").read_text().splitlines()]
    assert [(r["id"], r["outcome"]) for r in recs] == [("TestSynthetic.test_hang", "timeout"),
                                                       ("TestSynthetic.test_pass", "pass")]
    retry = [json.loads(x) for x in (tmp_path / "results" / "synth_raw" / "base.retry.jsonl").read_text().splitlines()]
    assert [(r["id"], r["outcome"]) for r in retry] == [("TestSynthetic.test_hang", "pass")]
    assert not (tmp_path / "results" / "synth.md").exists()  # a -k subset writes no results


def test_another_file_is_refused(tmp_path):
    script = _write(tmp_path, UPSTREAM + "\n# changed\n")
    done = _run(script, tmp_path, "--modes", "base")
    assert done.returncode == 1 and "SHA-256 differs" in done.stderr
