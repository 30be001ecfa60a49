"""rd.prepare refuses bad input before any work, with rd errors naming the parameter and a fix."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

import resumable_data as rd


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
