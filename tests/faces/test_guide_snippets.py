"""The ``python`` (and ``py``) blocks of the guide pages run, copied in order, as a reader would paste them.

Each page's blocks run one after the other in one namespace (a later block uses what an earlier
one made, as on the page), in an empty folder, after a setup that makes what the page says the
reader has (``corpus/`` and ``tokenizer.json``, ``data/web``, ``src``, ``model``, ...). Every block
of docs/ is either run here or listed in ``ELSEWHERE`` / ``NOT_RUN`` with the reason; a new block
fails :func:`test_every_block_is_run_or_has_a_reason` until it is one or the other.
docs/object-storage.md and docs/performance.md are left to their owners' tests.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import resumable_data as rd

ROOT = Path(__file__).resolve().parents[2]
OWNED_ELSEWHERE = {"object-storage.md", "performance.md"}

#: (page, a line of the block) -> where it runs instead
ELSEWHERE = {
    ("how-it-works.md", "src = rd.ArrowShards(\"data/\")"): "tests/faces/test_docs.py (commit protocol, resumed)",
    ("reliability.md", "from resumable_data.testing import assert_resumes"): "tests/faces/test_readme.py",
    # a framework's model, trainer and checkpoints: the imports and names are checked there, and
    # tests/integrations/ runs each integration killed with SIGKILL and resumed
    ("integrations.md", "from resumable_data.integrations"): "tests/integrations/test_docs_snippets.py",
    ("integrations.md", "dm = ResumableDataModule(my_torch_dataset"): "tests/integrations/test_lightning.py",
}
#: (page, a line of the block) -> why it is not run
NOT_RUN = {
    ("data.md", "fs = pyarrow.fs.S3FileSystem(region=\"us-east-1\")"): "needs an S3 store (tests/sources run pin and reads on moto)",
    ("prepare.md", "ray.init(address=\"auto\")"): "needs a Ray cluster and S3 (tests/sources/prepare: engine='ray', marker ray)",
}


def blocks(page: str) -> list[str]:
    text = (ROOT / "docs" / page).read_text()
    return [textwrap.dedent(b) for b in re.findall(r"^[ \t]*```(?:python|py)\n(.*?)^[ \t]*```", text, re.S | re.M)]


def _listed(page: str, code: str, table: dict) -> bool:
    return any(p == page and line in code for p, line in table)


def _pinned(path: Path, n: int = 240, tokens: bool = False) -> rd.ArrowShards:
    cols = {"id": pa.array(range(n), pa.int64()), "x": [i / n for i in range(n)]}
    if tokens:
        cols["tokens"] = pa.array([[3 + i % 11] * (20 + i % 30) for i in range(n)], pa.list_(pa.int32()))
    rd.write_arrow_shards(pa.table(cols), path, num_shards=2)
    rd.pin(path)
    return rd.ArrowShards(path)


class _Model(torch.nn.Module):
    """Takes a batch, returns a scalar loss (the pages' ``model(x)`` / ``loss(model(batch))``)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))

    def forward(self, batch):
        key = "input_ids" if "input_ids" in batch else "x"
        return (self.w * batch[key].float().mean()) ** 2


def _setup(page: str, tmp: Path) -> dict:
    env: dict = {"rd": rd}
    if page == "prepare.md":
        from tests.sources.prepare.conftest import stdlib_texts, train_tokenizer

        texts = [t for t in stdlib_texts(10, 3000) if t]
        (tmp / "corpus").mkdir()
        (tmp / "corpus" / "a.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
        train_tokenizer(texts, vocab_size=300).save(str(tmp / "tokenizer.json"))
    elif page == "mixtures.md":
        import datasets

        _pinned(tmp / "data" / "web")
        _pinned(tmp / "data" / "code")
        env["hf_math"] = datasets.Dataset.from_dict({"id": list(range(100)), "x": [0.5] * 100})
    elif page == "schedules.md":
        env["src"] = _pinned(tmp / "data", tokens=True)
        model = _Model()
        env.update(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), loss=lambda out: out, total=3)
    elif page == "data.md":
        import datasets
        import pyarrow

        pq.write_table(pa.table({"id": list(range(50))}), tmp / "part-0.parquet")
        env.update(datasets=datasets, pyarrow=pyarrow)
    elif page == "distributed.md":
        env["loader"] = rd.DataLoader(_pinned(tmp / "data"), batch_size=8, shuffle=True, seed=0)
        env.update(app_state={"w": torch.zeros(3)}, path=str(tmp / "dcp"))
    elif page in ("checkpoints.md", "how-it-works.md"):
        model = _Model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = rd.DataLoader(_pinned(tmp / "data"), batch_size=8, shuffle=True, seed=0)
        env.update(model=model, opt=opt, loader=loader, steps=3, ckpt=str(tmp / "ckpt"))
        env["state"] = rd.TrainingState(model=model, optimizer=opt, loader=loader)
    return env


def _before(page: str, code: str, env: dict, tmp: Path) -> None:
    """What the prose before a block says the reader holds at that point."""
    if page == "schedules.md" and "load_state_dict(saved" in code:  # a state saved with batch 8
        old = rd.DataLoader(env["src"], batch_size=8, shuffle=True, seed=5)
        it = iter(old)
        for _ in range(5):
            next(it)
        env["saved"] = old.state_dict()
    if page == "schedules.md" and 'rd.load_checkpoint("ckpt"' in code:  # a checkpoint saved with batch 8
        model = _Model()
        old = rd.DataLoader(env["src"], batch_size=8, shuffle=True, seed=5)
        saved = rd.TrainingState(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), loader=old)
        for _, batch in zip(range(5), old):
            model(batch).backward()
        rd.save_checkpoint("ckpt", saved, step=5)
        model = _Model()
        env["loader"] = rd.DataLoader(env["src"], batch_size=12, shuffle=True, seed=5)
        env["state"] = rd.TrainingState(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                        loader=env["loader"])


# the literal placeholders a reader fills in, and what they fill in here
FILL = {
    ("data.md", "data_files=..."): 'data_files="part-0.parquet"',
}

#: page -> a check of what its blocks made
CHECKS = {
    "prepare.md": lambda env, tmp: len(env["src"]) > 0 and rd.DatasetVersion.load(tmp / "tokens").lineage is not None,
    "mixtures.md": lambda env, tmp: list(env["weights"].steps) == [0, 10_000] and len(env["mix"]) > 0,
    "schedules.md": lambda env, tmp: env["step"] == 3 and next(iter(env["loader"]))["id"].shape[0] == 12,
    "data.md": lambda env, tmp: len(env["src"]) == 50,
    "distributed.md": lambda env, tmp: (tmp / "dcp").is_dir(),
    "checkpoints.md": lambda env, tmp: (tmp / "current.json").is_file() and (tmp / "loader_state.json").is_file(),
    "how-it-works.md": lambda env, tmp: rd.latest_checkpoint(tmp / "ckpt") is not None,
}


def _pages() -> list[str]:
    return sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name not in OWNED_ELSEWHERE and blocks(p.name))


def test_every_block_is_run_or_has_a_reason():
    for page in _pages():
        assert page in CHECKS or all(_listed(page, b, ELSEWHERE | NOT_RUN) for b in blocks(page)), (
            f"docs/{page} has python blocks: run them in {__name__} (a setup and a check) or list why not"
        )
    for (page, line) in ELSEWHERE | NOT_RUN:
        assert any(line in b for b in blocks(page)), f"docs/{page} no longer has the block with {line!r}"


@pytest.mark.parametrize("page", sorted(CHECKS))
def test_page_blocks_run_in_order(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "cache"))
    env = _setup(page, tmp_path)
    ran = 0
    for code in blocks(page):
        if _listed(page, code, ELSEWHERE | NOT_RUN):
            continue
        for (p, placeholder), value in FILL.items():
            if p == page:
                code = code.replace(placeholder, value)
        assert "..." not in re.sub(r"#.*", "", code), f"docs/{page}: a placeholder left unfilled in\n{code}"
        _before(page, code, env, tmp_path)
        exec(compile(code, f"docs/{page}", "exec"), env)
        ran += 1
    assert ran > 0
    assert CHECKS[page](env, tmp_path), f"docs/{page}: its blocks ran but did not make what the page says"
