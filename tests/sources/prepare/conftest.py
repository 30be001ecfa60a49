"""Shared data for the rd.prepare tests: text of the standard library's own sources (read from this
interpreter's stdlib folder) and a small byte-level BPE tokenizer trained on it in the test."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

import resumable_data as rd

STDLIB = Path(os.__file__).parent


def stdlib_texts(n: int = 40, max_chars: int = 12_000) -> list[str]:
    files = sorted(STDLIB.glob("*.py"))[:n]
    texts = [f.read_text(encoding="utf-8", errors="replace")[:max_chars] for f in files]
    return texts[:5] + [""] + texts[5:]  # one empty document (dropped by default)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="session")
def texts() -> list[str]:
    return stdlib_texts()


def train_tokenizer(texts: list[str], vocab_size: int = 400):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["[UNK]", "[EOS]"],
                                                       show_progress=False))
    return tok


@pytest.fixture(scope="session")
def tokenizer(texts):
    return train_tokenizer(texts)


@pytest.fixture
def corpus(tmp_path, texts) -> Path:
    """The texts as a pinned folder of 2 Arrow shards (``text``, ``id``)."""
    d = tmp_path / "corpus"
    rd.write_arrow_shards(pa.table({"text": texts, "id": list(range(len(texts)))}), d, num_shards=2)
    rd.pin(d)
    return d


def shard_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(Path(directory).glob("*.arrow"))}
