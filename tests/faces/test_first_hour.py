"""What a new user meets in the first hour: the Python version the README claims is the one the
package requires, `resumable-data --version`, every error class documented, notices through
`logging`/`warnings` (no bare prints to stderr in the library), and `make demo` installing the
package alone."""

from __future__ import annotations

import ast
import inspect
import re
import tomllib
from pathlib import Path

import resumable_data as rd
from resumable_data import errors
from resumable_data.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_the_python_the_readme_claims_is_the_one_the_package_requires():
    claim = re.search(r"Python (3\.\d+) or later", (ROOT / "README.md").read_text()).group(1)
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == f">={claim}"
    assert claim == "3.11"  # constraints.txt pins pyarrow and numpy releases that need 3.11


def test_version_flag(capsys):
    try:
        main(["--version"])
    except SystemExit as e:
        assert e.code == 0
    assert capsys.readouterr().out.strip() == f"resumable-data {rd.__version__}"


def _error_classes() -> set[str]:
    found = set()
    for path in (ROOT / "resumable_data").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
                found.add(node.name)
    return found


def test_every_error_class_is_in_the_errors_page():
    classes = _error_classes()
    assert {n for n, v in vars(errors).items() if inspect.isclass(v) and issubclass(v, Exception)} <= classes
    assert len(classes) >= 10
    page = (ROOT / "docs" / "errors.md").read_text()
    missing = sorted(c for c in classes if f"`rd.{c}`" not in page)
    assert not missing, missing
    for c in classes:
        assert issubclass(getattr(rd, c), rd.ResumableDataError), c


def test_no_bare_prints_to_stderr_in_the_library():
    faces = {"cli.py", "cli_check.py", "cli_inspect.py", "cli_pin.py", "cli_prepare.py", "cli_view.py", "demo.py", "demo_train.py", "testing.py"}
    offenders = []
    for path in (ROOT / "resumable_data").rglob("*.py"):
        if path.name in faces:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_make_demo_installs_the_package_alone():
    make = (ROOT / "Makefile").read_text()
    demo_deps = re.search(r"^demo: (.+)$", make, re.M).group(1).split()
    assert demo_deps == ["$(DEMO_STAMP)"]
    recipe = re.search(r"^\$\(DEMO_STAMP\):.*\n((?:\t.*\n)+)", make, re.M).group(1)
    assert 'install -q -c constraints.txt -e .\n' in recipe and "[test" not in recipe and "integrations" not in recipe


def test_the_package_ships_py_typed():
    assert (ROOT / "resumable_data" / "py.typed").is_file()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["resumable_data"]
