"""The type checker over ``resumable_data/``: ``python -m mypy`` with the configuration in
pyproject.toml (``[tool.mypy]``; the modules not yet checked are listed there, issue 29, and in
docs/development.md). Fails on the first new finding, naming file, line and error code.

mypy comes with the ``test`` extra (pinned in constraints.txt). ``RD_MYPY=/path/to/python`` runs
the mypy of another interpreter (one with mypy installed) against this environment's packages."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_is_clean():
    checker = os.environ.get("RD_MYPY") or sys.executable
    # a declared test dependency: missing is a failure, not a skip (a skipped checker checks nothing)
    assert checker != sys.executable or importlib.util.find_spec("mypy") is not None, (
        "mypy is not installed: pip install -c constraints.txt -e '.[test]' (or set RD_MYPY)")
    proc = subprocess.run([checker, "-m", "mypy", "--python-executable", sys.executable], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
