"""The integration snippets of README.md and docs/integrations.md (``py`` fences: they need a
model, a framework's trainer and a checkpoint, so tests/faces/test_readme.py does not run them)
name what exists: every import line runs, and the calls' names resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("lightning")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("page", ["README.md", "docs/integrations.md"])
def test_integration_snippets_import_and_name_real_things(page):
    blocks = re.findall(r"```py\n(.*?)```", (ROOT / page).read_text(), re.S)
    assert blocks, f"{page} has no integration snippet"
    env: dict = {}
    names = set()
    for code in blocks:
        for line in code.splitlines():
            if line.startswith("from resumable_data.integrations"):
                exec(line, env)
                names |= {n.strip() for n in line.split(" import ")[1].split(",")}
        for name in names:
            assert name in env
    for called in re.findall(r"\b(ResumableTrainer|prepare_loader|ResumableDataModule)\(", "".join(blocks)):
        assert called in env, called


def test_readme_datamodule_line_builds(tmp_path):
    import pyarrow as pa

    import resumable_data as rd
    from resumable_data.integrations.lightning import ResumableDataModule

    rd.write_arrow_shards(pa.table({"x": list(range(64))}), tmp_path / "d", num_shards=1)
    src = rd.ArrowShards(tmp_path / "d")
    dm = ResumableDataModule(src, batch_size=32, shuffle=True, seed=0)
    assert [b["x"].shape[0] for b in dm.train_dataloader()] == [32, 32]
