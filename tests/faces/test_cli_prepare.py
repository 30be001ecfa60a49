"""``resumable-data prepare`` and ``resumable-data inspect DIR`` on prepared shards (lineage shown)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.cli import main


@pytest.fixture
def setup(tmp_path, monkeypatch):
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "cache"))
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    texts = [f"def f{i}(x):\n    return x * {i} + {i % 7}\n" for i in range(300)]
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"], show_progress=False))
    tok.save(str(tmp_path / "tokenizer.json"))
    rd.write_arrow_shards(pa.table({"text": texts, "id": list(range(300))}), tmp_path / "corpus", num_shards=2)
    rd.pin(tmp_path / "corpus")
    return tmp_path, tok, texts


def test_prepare_then_inspect(setup, capsys):
    tmp_path, tok, texts = setup
    argv = ["prepare", str(tmp_path / "corpus"), str(tmp_path / "out"), "--tokenizer", str(tmp_path / "tokenizer.json"),
            "--keep-column", "id", "--num-proc", "2", "--bytes-per-shard", "2000", "--min-tokens", "3", "--quiet"]
    assert main(argv) == 0
    printed = capsys.readouterr().out.strip()
    version = rd.DatasetVersion.load(tmp_path / "out")
    assert printed == version.hash
    assert len(version.shards) > 2 and version.lineage["filters"]["min_tokens"] == 3
    api = rd.prepare(tmp_path / "corpus", tmp_path / "api", tokenizer=tok, keep_columns=["id"], num_proc=1,
                     bytes_per_shard=2000, min_tokens=3, progress=False)
    assert api.version.hash == version.hash  # the CLI and the API are the same function
    assert main(["inspect", str(tmp_path / "out")]) == 0
    shown = capsys.readouterr().out
    assert version.hash in shown and "prepared with" in shown and "min_tokens=3" in shown
    assert rd.ArrowShards(tmp_path / "corpus").version.hash in shown  # the input version


def test_prepare_reports_bad_input(setup, capsys):
    tmp_path, _, _ = setup
    rc = main(["prepare", str(tmp_path / "corpus"), str(tmp_path / "out"), "--tokenizer", str(tmp_path / "nope.json")])
    assert rc == 2
    assert "tokenizer" in capsys.readouterr().err


def test_prepare_bytes_per_shard_zero_is_refused_not_replaced_by_the_default(setup, capsys):
    tmp_path, _, _ = setup
    rc = main(["prepare", str(tmp_path / "corpus"), str(tmp_path / "out"), "--tokenizer", str(tmp_path / "tokenizer.json"),
               "--bytes-per-shard", "0", "--quiet"])
    assert rc == 2
    assert "bytes_per_shard=0" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
