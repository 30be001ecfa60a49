"""The type checker over ``resumable_data/``: ``python -m mypy`` with the configuration in
pyproject.toml (``[tool.mypy]``; no module is exempt: a test refuses an ``ignore_errors``
override, see docs/development.md). Fails on the first new finding, naming file, line and error code.

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


def test_no_module_is_exempt_from_the_type_checker() -> None:
    import tomllib
    from pathlib import Path

    conf = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["tool"]["mypy"]
    exempt = [o["module"] for o in conf.get("overrides", []) if o.get("ignore_errors")]
    assert not exempt, f"modules exempt from mypy (fix their errors instead): {exempt}"
