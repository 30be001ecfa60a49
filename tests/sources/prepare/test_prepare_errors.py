"""rd.prepare refuses bad input before any work, with rd errors naming the parameter and a fix."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

import resumable_data as rd
from tests.sources.prepare.conftest import shard_bytes


def _ok(record):
    return record


@pytest.mark.parametrize("kwargs,param", [
    (dict(text_column="body"), "text_column"),  # a missing column
    (dict(text_column="id"), "text_column"),  # not a text column
    (dict(keep_columns=["nope"]), "keep_columns"),
    (dict(num_proc=0), "num_proc"),
    (dict(bytes_per_shard=0), "bytes_per_shard"),
    (dict(min_tokens=5, max_tokens=2), "min_tokens"),
    (dict(engine="spark"), "engine"),
    (dict(version="v1"), "version"),
])
def test_bad_settings(tmp_path, corpus, tokenizer, kwargs, param):
    with pytest.raises(rd.ConfigError, match=param):
        rd.prepare(corpus, tmp_path / "o", tokenizer=tokenizer, progress=False, **kwargs)
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_bad_functions(tmp_path, corpus, tokenizer):
    with pytest.raises(rd.ConfigError, match="tokenizer"):
        rd.prepare(corpus, tmp_path / "o", tokenizer=tmp_path / "missing.json", progress=False)
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(rd.ConfigError, match="tokenizer.json"):
        rd.prepare(corpus, tmp_path / "o", tokenizer=tmp_path / "empty_dir", progress=False)
    with pytest.raises(rd.ConfigError, match="version"):
        rd.prepare(corpus, tmp_path / "o", map_fn=_ok, progress=False)
    with pytest.raises(rd.ConfigError, match="exactly one"):
        rd.prepare(corpus, tmp_path / "o", map_fn=_ok, tokenizer=tokenizer, version="v", progress=False)
    with pytest.raises(rd.ConfigError, match="picklable"):
        rd.prepare(corpus, tmp_path / "o", map_fn=lambda r: r, version="v", progress=False)
    with pytest.raises(rd.ConfigTypeError, match="tokenizer"):
        rd.prepare(corpus, tmp_path / "o", tokenizer=42, progress=False)
    assert not (tmp_path / "o").exists()


def test_output_folder_holding_other_data_is_refused(tmp_path, corpus, tokenizer):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "notes.txt").write_text("mine")
    with pytest.raises(rd.ConfigError, match="another out folder"):
        rd.prepare(corpus, tmp_path / "o", tokenizer=tokenizer, progress=False)
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["notes.txt"]


def test_output_of_another_lineage_is_refused(tmp_path, corpus, tokenizer):
    rd.prepare(corpus, tmp_path / "o", tokenizer=tokenizer, progress=False, num_proc=1, min_tokens=5)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "o").iterdir())
    with pytest.raises(rd.ConfigError, match="filters"):
        rd.prepare(corpus, tmp_path / "o", tokenizer=tokenizer, progress=False, num_proc=1, min_tokens=6)
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "o").iterdir()) == before


def test_jsonl_without_the_text_field(tmp_path, tokenizer):
    (tmp_path / "a.jsonl").write_text(json.dumps({"body": "x"}) + "\n")
    with pytest.raises(rd.ConfigError, match="text_column"):
        rd.prepare(tmp_path / "a.jsonl", tmp_path / "o", tokenizer=tokenizer, progress=False)


def test_filters_that_drop_everything(tmp_path, corpus, tokenizer):
    with pytest.raises(rd.ConfigError, match="filters that keep"):
        rd.prepare(corpus, tmp_path / "o", tokenizer=tokenizer, progress=False, num_proc=1, min_tokens=10**9)


def test_a_worker_error_names_its_piece(tmp_path, tokenizer):
    rd.write_arrow_shards(pa.table({"text": ["a b", "c"]}), tmp_path / "in")
    rd.pin(tmp_path / "in")
    with pytest.raises(rd.WorkerError, match="shard-00000.arrow"):
        rd.prepare(tmp_path / "in", tmp_path / "o", map_fn=_boom, version="v", progress=False, num_proc=1)


def _boom(record):
    raise RuntimeError("bad record")


def test_out_that_is_a_file(tmp_path, corpus, tokenizer):
    (tmp_path / "o").write_text("x")
    with pytest.raises(rd.ConfigError, match="out"):
        rd.prepare(corpus, tmp_path / "o", tokenizer=tokenizer, progress=False)


@pytest.mark.parametrize("text", ["{not json", json.dumps({"format": "other"}), json.dumps([1, 2])])
def test_a_damaged_progress_record_is_refused(tmp_path, corpus, tokenizer, text):
    from resumable_data.sources.prepare.progress import PROGRESS_NAME

    (tmp_path / "o").mkdir()
    (tmp_path / "o" / PROGRESS_NAME).write_text(text)
    with pytest.raises(rd.DatasetIntegrityError, match="progress"):
        rd.prepare(corpus, tmp_path / "o", tokenizer=tokenizer, progress=False)


def test_out_inside_the_input_folder_is_refused(tmp_path, corpus, tokenizer):
    with pytest.raises(rd.ConfigError, match="outside the input"):
        rd.prepare(corpus, corpus / "tokens", tokenizer=tokenizer, progress=False)
    assert not (corpus / "tokens").exists()


def test_a_named_jsonl_file_may_write_beside_itself(tmp_path, texts, tokenizer, monkeypatch):
    """``rd.prepare("corpus.jsonl", "tokens/")`` in the working directory: the out folder lies in the
    input file's folder, but a file named by itself cannot grow, so it is not refused (a folder
    given as the input still is, above)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:8]))
    res = rd.prepare("corpus.jsonl", "tokens", tokenizer=tokenizer, progress=False)
    assert res.records_read == 8 and len(rd.ArrowShards("tokens")) == res.documents > 0
    assert res.version.hash == rd.DatasetVersion.load("tokens").hash


def test_plain_text_files_are_refused_with_the_jsonl_they_need(tmp_path, texts, tokenizer, monkeypatch):
    """A folder of .txt files is neither shards nor JSONL: the error says so and its fix, run as
    printed, makes a JSONL file that prepares."""
    import re

    monkeypatch.chdir(tmp_path)
    (tmp_path / "txt").mkdir()
    for i, t in enumerate(texts[:5]):
        (tmp_path / "txt" / f"{i}.txt").write_text(t)
    with pytest.raises(rd.ConfigError, match=r"\.jsonl files.*'0\.txt'") as e:
        rd.prepare("txt", "tokens", tokenizer=tokenizer, progress=False)
    assert not (tmp_path / "tokens").exists()
    fix = re.search(r"for text files: (.*); then prepare 'corpus\.jsonl'", str(e.value)).group(1)
    exec(fix, {})
    rd.prepare("corpus.jsonl", "tokens", tokenizer=tokenizer, progress=False)
    assert len(rd.ArrowShards("tokens")) > 0
    with pytest.raises(rd.ConfigError, match=r"it is a '\.txt' file"):
        rd.prepare("txt/0.txt", "tokens2", tokenizer=tokenizer, progress=False)


def test_a_hub_name_as_tokenizer_says_how_to_load_it(tmp_path, corpus, monkeypatch):
    """``tokenizer="gpt2"`` is not a file here: the fix names the transformers call that gets it."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(rd.ConfigError, match=r"AutoTokenizer\.from_pretrained\('gpt2'\)"):
        rd.prepare(corpus, tmp_path / "o", tokenizer="gpt2", progress=False)
    with pytest.raises(rd.ConfigError) as e:
        rd.prepare(corpus, tmp_path / "o", tokenizer="missing/tokenizer.json", progress=False)
    assert "AutoTokenizer" not in str(e.value)  # a path that is missing is not a hub name


def _jsonl_ids(path, ids):
    path.write_text("".join(json.dumps({"text": "def f(): pass", "id": i}) + "\n" for i in ids))


@pytest.mark.parametrize("second", [[None], ["a"], [2.5]])
def test_a_kept_field_typed_otherwise_in_another_file_is_refused_with_a_fix_that_works(tmp_path, tokenizer, second):
    """Types are inferred per piece: a kept field that is null in a whole file (or a string, or a
    float) gives that shard another schema. Refused before pinning, naming keep_columns; its fix
    (leave the field out) works."""
    (tmp_path / "in").mkdir()
    _jsonl_ids(tmp_path / "in" / "a.jsonl", [1])
    _jsonl_ids(tmp_path / "in" / "b.jsonl", second)
    with pytest.raises(rd.ConfigError, match=r"keep_columns=\['id'\].*shard-00000.arrow and shard-00001.arrow.*"
                       r"leave the field out of keep_columns"):
        rd.prepare(tmp_path / "in", tmp_path / "o", tokenizer=tokenizer, keep_columns=["id"], progress=False,
                   num_proc=1)
    assert not (tmp_path / "o" / rd.sources.MANIFEST_NAME).exists()
    res = rd.prepare(tmp_path / "in", tmp_path / "o2", tokenizer=tokenizer, progress=False, num_proc=1)
    assert res.documents == 2


def test_a_kept_field_typed_otherwise_in_a_later_chunk_is_refused_naming_keep_columns(tmp_path, tokenizer):
    (tmp_path / "in").mkdir()
    _jsonl_ids(tmp_path / "in" / "a.jsonl", [None] * 1100 + [3])
    with pytest.raises(rd.ConfigError, match=r"keep_columns=\['id'\].*leave the field out of keep_columns"):
        rd.prepare(tmp_path / "in", tmp_path / "o", tokenizer=tokenizer, keep_columns=["id"], progress=False,
                   num_proc=1)


def test_out_and_keep_columns_of_the_wrong_type(tmp_path, corpus, tokenizer):
    with pytest.raises(rd.ConfigTypeError, match="out"):
        rd.prepare(corpus, None, tokenizer=tokenizer, progress=False)
    with pytest.raises(rd.ConfigTypeError, match="keep_columns"):
        rd.prepare(corpus, tmp_path / "o", tokenizer=tokenizer, keep_columns=None, progress=False)


def test_out_below_a_file_is_a_config_error(tmp_path, corpus, tokenizer):
    (tmp_path / "f").write_text("x")
    with pytest.raises(rd.ConfigError, match=r"out='.*f/o'.*a folder rd.prepare can write to \(NotADirectoryError"):
        rd.prepare(corpus, tmp_path / "f" / "o", tokenizer=tokenizer, progress=False)


@pytest.mark.parametrize("fail_on", ["record", "shard"])
def test_a_full_disk_is_a_config_error_and_the_same_call_then_continues(tmp_path, corpus, tokenizer, monkeypatch,
                                                                        fail_on):
    """ENOSPC while writing the progress record (driver) or a shard (a forked worker): an rd error
    naming out, not an OSError or a WorkerError; once there is space, the same call finishes with the
    bytes of an uninterrupted run."""
    import errno

    from resumable_data._io import atomic_write
    from resumable_data.sources.store import LocalStore

    clean = rd.prepare(corpus, tmp_path / "clean", tokenizer=tokenizer, bytes_per_shard=60_000, progress=False,
                       num_proc=1)

    def full(self, path, data):
        if str(path).endswith(".rd-prepare.json" if fail_on == "record" else "shard-00001.arrow"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        atomic_write(path, data, durable=True)

    monkeypatch.setattr(LocalStore, "write_atomic", full)
    with pytest.raises(rd.ConfigError, match=r"out=.*a folder rd.prepare can write to \(OSError: No space left"):
        rd.prepare(corpus, tmp_path / "o", tokenizer=tokenizer, bytes_per_shard=60_000, progress=False, num_proc=1)
    monkeypatch.undo()
    res = rd.prepare(corpus, tmp_path / "o", tokenizer=tokenizer, bytes_per_shard=60_000, progress=False, num_proc=1)
    assert res.version.hash == clean.version.hash
    assert shard_bytes(tmp_path / "o") == shard_bytes(tmp_path / "clean")
