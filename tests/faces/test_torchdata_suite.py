"""torchdata's own ``test/stateful_dataloader/test_state_dict.py`` against ``rd.DataLoader``
(benchmarks/torchdata_suite): the end-of-epoch and not-stateful-sampler tests pass once the two
deliberate refusals they meet (an unpinned dataset's state, a shuffle without a seed) are lifted,
and in plain ``rd`` mode they fail by exactly those refusals. The whole file is
``python benchmarks/torchdata_suite/run.py``; its table is in docs/dropin.md.

The file is third-party code and not in the repository: without it (see
benchmarks/torchdata_suite/README.md) this test is skipped, saying why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "benchmarks" / "torchdata_suite" / "run.py"
UPSTREAM = ROOT / "benchmarks" / "torchdata_suite" / "upstream" / "test_state_dict.py"
SUBSET = ["TestEndOfEpochBehavior_shard0", "TestNotStatefulSamplerSDL_shard0.test_notstatefulSDL_0"]


def _records(path: Path) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}


@pytest.mark.slow
@pytest.mark.skipif(not UPSTREAM.exists(), reason="benchmarks/torchdata_suite/upstream/test_state_dict.py is not present")
def test_torchdata_suite_subset(tmp_path):
    ks = [a for t in SUBSET for a in ("-k", t)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, str(RUNNER), "--results", str(tmp_path), "--timeout", "120",
                    "--retry-timeout", "0", *ks], cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
    raw = tmp_path / "torchdata_suite_raw"
    base, rd = _records(raw / "torchdata.jsonl"), _records(raw / "rd.jsonl")
    assert len(base) == 4 + 10 and all(r["outcome"] == "pass" for r in base.values())
    seeded = {**rd, **_records(raw / "rd-unpinned.jsonl"), **_records(raw / "rd-seeded.jsonl")}
    assert {t: r["detail"][:200] for t, r in seeded.items() if r["outcome"] != "pass"} == {}
    for t, r in rd.items():  # refused with the rd error that says why, nothing else
        assert r["outcome"] == "error", t
        assert ("dataset is not pinned" in r["detail"] and r["detail"].startswith("ResumeError: ")) or (
            "seed=None: expected an integer seed" in r["detail"] and r["detail"].startswith("ConfigError: ")), t
