"""The house rules a linter can check: ``ruff check`` (pyflakes, pycodestyle, isort, bugbear,
pyupgrade, simplify, ruff's own; ignores justified in pyproject.toml) and ``ruff format --check``
over ``resumable_data/``. Fails on the first new finding, naming file and line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args", [["check", "--output-format", "concise"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff_is_clean(args):
    proc = subprocess.run([sys.executable, "-m", "ruff", *args, "resumable_data"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
