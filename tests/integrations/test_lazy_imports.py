"""The integrations are optional: importing ``resumable_data`` (its loader, its checkpoints) or the
``resumable_data.integrations`` package loads no framework; each framework is imported by its
own submodule only."""

from __future__ import annotations

import subprocess
import sys

FRAMEWORKS = ("transformers", "accelerate", "lightning", "pytorch_lightning", "torchtitan")


def _loaded(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {FRAMEWORKS!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_core_and_the_package_load_no_framework():
    assert _loaded("import resumable_data as rd, resumable_data.integrations\nrd.DataLoader, rd.TrainingState") == []


def test_torchtitan_module_needs_no_torchtitan():
    assert _loaded("import resumable_data.integrations.torchtitan") == []
