"""The documentation site cannot rot: it builds with ``mkdocs build --strict`` (a broken link, a
missing page or a docstring mkdocstrings cannot render fails), and its API page lists every
public name of ``resumable_data``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import resumable_data as rd

ROOT = Path(__file__).resolve().parents[2]


def test_api_page_covers_every_public_name():
    page = (ROOT / "docs" / "api.md").read_text()
    listed = set(re.findall(r"^::: resumable_data\.(\w+)$", page, re.M))
    missing = sorted(set(rd.__all__) - listed)
    assert not missing, f"docs/api.md lacks {missing}: add a '::: resumable_data.NAME' section for each"
    assert not listed - set(rd.__all__), "docs/api.md documents a name that is not in resumable_data.__all__"


def test_every_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert [p for p in pages if p not in nav] == []


def test_site_builds_strict(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    for name in ("resume_or_start", "latest_checkpoint", "TrainingState", "DataLoader"):
        assert name in api
    assert (tmp_path / "site" / "bench").is_dir(), "the benchmark plots were not added to the site"


def _commit_example() -> str:
    page = (ROOT / "docs" / "how-it-works.md").read_text()
    section = page.split("## The commit protocol", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _run_commit_example(code: str, data: Path, saved, steps: int) -> tuple[list[list[int]], dict | None]:
    """Run the commit-protocol example until the microbatch after ``steps`` optimizer steps, which
    "crashes" in the forward pass; return the ids of every microbatch seen and the saved state."""
    import torch

    seen: list[list[int]] = []
    weight = torch.zeros(1, requires_grad=True)

    class Stop(Exception):
        pass

    def model(batch):
        seen.append(batch["id"].tolist())
        if len(seen) > steps * 4:  # accumulation_steps=4 in the example
            raise Stop
        return (batch["x"].float() * weight).sum()

    env = {"rd": rd, "saved": saved, "model": model, "loss": lambda out: out, "optimizer_step": lambda: True}
    code = code.replace('rd.ArrowShards("data/")', f"rd.ArrowShards({str(data)!r})")
    assert str(data) in code, "the example no longer opens rd.ArrowShards(\"data/\")"
    try:
        exec(compile(code, "docs/how-it-works.md", "exec"), env)
    except Stop:
        pass
    return seen, env["saved"]


def test_commit_protocol_example_runs_and_resumes(tmp_path):
    import pyarrow as pa

    n = 32 * 4 * 6
    rd.write_arrow_shards(pa.table({"id": pa.array(range(n), pa.int64()), "x": pa.array(range(n), pa.int32())}),
                          tmp_path, num_shards=3)
    rd.pin(tmp_path)
    code = _commit_example()
    whole, _ = _run_commit_example(code, tmp_path, None, steps=5)
    first, saved = _run_commit_example(code, tmp_path, None, steps=2)
    assert saved is not None and saved["cursor"]["committed"] == 8
    rest, _ = _run_commit_example(code, tmp_path, saved, steps=3)
    assert len(whole) == 5 * 4 + 1 and first == whole[:9]
    # the 9th microbatch was delivered but never committed: on_uncommitted="repeat" sees it again
    assert first[:8] + rest[:12] == whole[:20]
    assert len({i for b in whole for i in b}) == 21 * 32, "the example's shuffle repeated a record"


def test_the_notebooks_extra_has_jupyterlab():
    import pytest

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(r.startswith("jupyterlab") for r in extras["notebooks"]), "`jupyter lab notebooks/` needs jupyterlab"
    assert any(r.startswith("mkdocs") for r in extras["test"]) and any(r.startswith("mkdocstrings") for r in extras["test"])


def test_how_it_works_lists_every_module_and_only_modules():
    """docs/how-it-works.md's "Every module" tables name every module of the package by its path,
    and every path they name exists (a new, moved or deleted module updates the map)."""
    page = (ROOT / "docs" / "how-it-works.md").read_text()
    section = page.split("## Every module", 1)[1]
    listed = set()
    for row in re.findall(r"^\| (`[^|]+`) \|", section, re.M):
        listed.update(re.findall(r"`([\w/]+\.py)`", row))
    package = ROOT / "resumable_data"
    modules = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    required = {m for m in modules if not m.endswith("__init__.py") or m == "__init__.py"}
    assert not required - listed, f"docs/how-it-works.md 'Every module' lacks {sorted(required - listed)}: add a row"
    assert not listed - modules, f"docs/how-it-works.md 'Every module' names modules that do not exist: {sorted(listed - modules)}"


def test_every_code_fence_stands_on_its_own_line():
    """A closing fence with text after it (```` ``` `dataset` and ...````) is no fence: the rest of
    the page rendered as code (docs/integrations.md, the Lightning section). Every fence line is
    ```` ``` ```` or ```` ```lang ````, and every page closes what it opens."""
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        fences = [ln for ln in path.read_text().splitlines() if ln.lstrip().startswith("```")]
        bad = [ln for ln in fences if not re.fullmatch(r"\s*```[\w-]*", ln)]
        assert not bad, f"{path.name}: a fence line with text after it: {bad}"
        assert len(fences) % 2 == 0, f"{path.name}: {len(fences)} fence lines, one is not closed"


def test_every_rd_name_the_pages_use_exists():
    """Each ``rd.NAME`` (and ``rd.NAME.attr``) written in README.md and docs/ resolves: the pages
    named ``rd.read_checkpoint``, which is ``resumable_data.checkpoint.read_checkpoint``."""
    import importlib

    placeholders = {"rd.X", "rd.NAME"}  # how-it-works: "rd.X loads the layer that defines X"; development.md
    missing = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for m in re.finditer(r"\brd\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)", path.read_text()):
            if m.group(0) in placeholders:
                continue
            obj, parts = rd, m.group(1).split(".")
            for i, part in enumerate(parts):
                try:
                    obj = getattr(obj, part)
                except AttributeError:
                    try:
                        obj = importlib.import_module("resumable_data." + ".".join(parts[: i + 1]))
                    except ImportError:
                        missing.setdefault(m.group(0), set()).add(path.name)
                        break
    assert not missing, f"names the pages use that resumable_data lacks: {missing}"


def test_every_page_is_listed_on_the_home_page_and_in_the_readme():
    """docs/index.md and the README's Documentation table list every guide page (Mixtures, Batch
    schedules, Preparing text, Object storage, Integrations and torch's test suite were missing)."""
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name != "index.md")
    home = (ROOT / "docs" / "index.md").read_text()
    assert [p for p in pages if f"]({p})" not in home] == []
    table = (ROOT / "README.md").read_text().split("## Documentation", 1)[1].split("\n## ", 1)[0]
    assert [p for p in pages if f"](docs/{p})" not in table and p != "development.md"] == []
