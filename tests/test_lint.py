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


def test_tests_and_benchmarks_have_no_dead_code_or_shadowed_names():
    """pyflakes over ``tests/`` and ``benchmarks/`` (the project config lints ``resumable_data/`` only):
    an unused import or variable, an f-string without a field, and above all a name defined twice
    (a second ``def test_x`` silently replaces the first, which then never runs) or a syntax error."""
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F,E9", "--output-format", "concise",
         "tests", "benchmarks"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_tracked_file_holds_a_merge_conflict_marker():
    """A merge resolved by hand once left ``<<<<<<< HEAD`` ... ``>>>>>>>`` in a docs page, which the
    strict site build rendered without a word: no tracked text file may hold a conflict marker line."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    found = []
    for name in filter(None, files):
        path = ROOT / name.decode()
        if not path.is_file() or path.suffix in {".png", ".arrow", ".parquet", ".feather", ".gz", ".zst"}:
            continue
        for no, line in enumerate(path.read_bytes().splitlines(), 1):
            if line.startswith((b"<<<<<<< ", b">>>>>>> ")) or line == b"=======":
                found.append(f"{name.decode()}:{no}")
    assert found == [], f"merge conflict markers left in: {found[:20]}"
