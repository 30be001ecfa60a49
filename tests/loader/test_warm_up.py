"""Building a loader over a user dataset does the once-per-process start-up (issue 28).

The generator-memory probe and the order / sample-key / seeding kernels run in
``StepFetcher.warm_up`` when the loader is built, so the first batch does not pay them; the
probe leaves the training process's generators exactly as they were.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, random
import numpy as np, torch
import resumable_data as rd
from resumable_data.loader.seeding import global_rng

class DS:
    def __len__(self): return 100
    def __getitem__(self, i): return float(torch.rand(()) + np.random.rand() + random.random())

random.seed(1); np.random.seed(2); torch.manual_seed(3)
before = (random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state().tolist())
probed_before = global_rng._LAYOUT is not None
kw = json.loads(__import__("sys").argv[1])
loader = rd.DataLoader(DS(), batch_size=4, shuffle=True, seed=0, **kw)
after = (random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state().tolist())
probed_after = global_rng._LAYOUT is not None
batch = next(iter(loader))
print(json.dumps({"probed_before": probed_before, "probed_after": probed_after,
                  "states_kept": before == after, "batch": batch.tolist()}))
"""


def _run(kw: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(kw)], capture_output=True, text=True,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_building_the_loader_probes_and_keeps_the_generators():
    got = _run({})
    assert not got["probed_before"] and got["probed_after"]
    assert got["states_kept"]
    assert len(got["batch"]) == 4


def test_no_probe_without_per_sample_seeding():
    got = _run({"seed_per_sample": False})
    assert not got["probed_after"] and got["states_kept"]
