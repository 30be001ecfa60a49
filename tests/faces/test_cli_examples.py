"""Every example line of every ``resumable-data COMMAND --help`` runs as printed and exits 0.

A newcomer copies an example from ``--help`` into a folder holding what it names (``data/``, a
``checkpoints/`` folder with a step 40, ``loader_state.json``, ``current.json``, a JSONL
``corpus/``, ``data.jsonl``, ``tokenizer.json``, ``tok/``, ``mypkg/clean.py``) and runs it: each
example runs here in its own fresh copy of such a folder, as its own command. Left out: ``demo``
(tests/faces/test_demo.py runs it) and ``--engine ray`` (needs a cluster; tests/sources/prepare
has the ``ray`` marker). ``prepare data.jsonl tokens/`` was refused (out inside the input's folder)
and ``--map mypkg.clean:record`` could not import ``mypkg`` from the console script before this
test. ``python -m resumable_data`` is the same command line.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

import resumable_data as rd
from resumable_data.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]
SKIPPED = {"demo"}  # run by tests/faces/test_demo.py


def _examples() -> list[tuple[str, str]]:
    out = []
    for name, cmd in COMMANDS.items():
        for line in cmd.example.splitlines()[1:]:
            text = line.split("  #")[0].strip()
            if text and name not in SKIPPED and "--engine ray" not in text:
                out.append((name, text))
    return out


EXAMPLES = _examples()
# the window examples of check-resume take 5-10 s each here: the long variants
PARAMS = [pytest.param(name, line, id=line, marks=[pytest.mark.slow] if "--window" in line else [])
          for name, line in EXAMPLES]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """What the examples name, made the way the README and the docs make it."""
    from tests.sources.prepare.conftest import stdlib_texts, train_tokenizer

    base = tmp_path_factory.mktemp("cli-examples")
    # documents long enough that 60 packed steps of 8 x 2048 tokens stay in one epoch (check-resume
    # adds every epoch boundary as an interrupt point: tiny documents made it 59 runs and 2 minutes)
    n = 96
    lengths = [10_000 + 100 * (i % 9) for i in range(n)]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    tokens = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.arange(offsets[-1], dtype=np.int32) % 997 + 3))
    rd.write_arrow_shards(pa.table({"id": pa.array(range(n), pa.int64()), "x": [i / n for i in range(n)],
                                    "tokens": tokens, "input_ids": tokens}), base / "data", num_shards=2)
    rd.pin(base / "data")
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = rd.DataLoader(rd.ArrowShards(base / "data"), batch_size=8, shuffle=True, seed=0)
    state = rd.TrainingState(model=model, optimizer=optimizer, loader=loader)
    step = 0
    while step < 60:
        for batch in loader:
            model(batch["x"].float().view(-1, 1)).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step % 20 == 0:
                rd.save_checkpoint(base / "checkpoints", state, step=step)
            if step == 60:
                break
    (base / "loader_state.json").write_text(json.dumps(loader.state_dict()))
    (base / "current.json").write_text(json.dumps(state.meta().to_dict()))
    texts = [t for t in stdlib_texts(12, 3000) if t]
    (base / "corpus").mkdir()
    (base / "corpus" / "a.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    shutil.copy(base / "corpus" / "a.jsonl", base / "data.jsonl")
    tok = train_tokenizer(texts, vocab_size=300)
    for path in ("tokenizer.json", "tok.json", "tok/tokenizer.json"):
        (base / path).parent.mkdir(exist_ok=True)
        tok.save(str(base / path))
    (base / "mypkg").mkdir()
    (base / "mypkg" / "__init__.py").write_text("")
    (base / "mypkg" / "clean.py").write_text(
        "def record(r):\n    t = r['text'].strip()\n    return {'text': t, 'chars': len(t)} if t else None\n")
    (base / "my_pinned_dir").symlink_to(base / "data")
    return base


def test_every_command_has_examples_that_this_test_runs():
    names = {name for name, _ in EXAMPLES}
    assert names == set(COMMANDS) - SKIPPED, names
    assert len(EXAMPLES) >= 15, EXAMPLES


@pytest.mark.parametrize("name,line", PARAMS)
def test_help_example_runs(folder, tmp_path, monkeypatch, capsys, name, line):
    work = tmp_path / "work"
    shutil.copytree(folder, work, symlinks=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(work))])  # as the console script
    argv = shlex.split(line)
    assert argv[0] == "resumable-data"
    if argv[1] == "inspect" and argv[2] == "tokens/":  # prepare's last example reads what the first wrote
        assert main(["prepare", "corpus/", "tokens/", "--tokenizer", "tokenizer.json", "--quiet"]) == 0
    rc = main(argv[1:])
    captured = capsys.readouterr()
    assert rc == 0, f"{line!r} exited {rc}:\n{captured.out}\n{captured.err}"


def test_python_dash_m_is_the_same_command_line():
    proc = subprocess.run([sys.executable, "-m", "resumable_data", "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: resumable-data") and "resumable-data pin data/" in proc.stdout
