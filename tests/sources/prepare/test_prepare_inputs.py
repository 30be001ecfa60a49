"""rd.prepare's inputs (Arrow folder, JSONL, Hugging Face dataset), functions (tokenizer object, path,
transformers fast tokenizer, map_fn) and filters."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.sources.prepare.inputs import open_input
from resumable_data.sources.prepare.tasks import ROWS_PER_BATCH, TOKENS_PER_BATCH, batch_bounds
from tests.sources.prepare.conftest import shard_bytes


def _rows(directory, *columns):
    src = rd.ArrowShards(directory)
    t = src.take(np.arange(len(src)))
    return list(zip(*(t.column(c).to_pylist() for c in columns)))


def _write_jsonl(path, texts):
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")
            if i % 7 == 3:
                f.write("\n")  # blank lines are skipped


def test_jsonl_pieces_cover_every_line_once_in_order(tmp_path, texts):
    path = tmp_path / "a.jsonl"
    texts = [t[:150] for t in texts[:25]]
    _write_jsonl(path, texts)
    inp = open_input(path)
    size = path.stat().st_size
    rng = random.Random(0)
    for per in sorted({1, 2, 50, size // 3, size // 2, size - 1, size, size + 1} | {rng.randrange(1, size) for _ in range(8)}):
        ids = []
        for piece in inp.pieces(per):
            for chunk, _ in inp.read(piece, ("id",)):
                ids += chunk.column("id").to_pylist()
        assert ids == list(range(len(texts))), per


def test_jsonl_source_gives_the_same_tokens_as_the_arrow_source(tmp_path, corpus, texts, tokenizer):
    _write_jsonl(tmp_path / "a.jsonl", texts[:20])
    _write_jsonl(tmp_path / "b.jsonl", texts[20:])
    (tmp_path / "j").mkdir()
    for n in ("a.jsonl", "b.jsonl"):
        (tmp_path / n).rename(tmp_path / "j" / n)
    res = rd.prepare(tmp_path / "j", tmp_path / "out", tokenizer=tokenizer, bytes_per_shard=30_000, progress=False,
                     num_proc=2)
    assert res.version.lineage["input"]["kind"] == "jsonl"
    assert len(res.version.shards) > 4
    toks = [t for (t,) in _rows(tmp_path / "out", "tokens")]
    assert toks == [tokenizer.encode(t).ids for t in texts if t]
    # the same call again: nothing to do, same version; an edited input is another lineage
    again = rd.prepare(tmp_path / "j", tmp_path / "out", tokenizer=tokenizer, bytes_per_shard=30_000, progress=False)
    assert again.version.hash == res.version.hash and again.tokens == res.tokens
    assert again.records_read is None and again.already_prepared and not res.already_prepared
    assert "already prepared, nothing done" in again.summary() and "not counted for JSONL input" in again.summary()
    assert "tokens/s" not in again.summary() and "tokens/s" in res.summary()  # no rate for work not done
    with open(tmp_path / "j" / "b.jsonl", "a") as f:
        f.write(json.dumps({"text": "x = 1"}) + "\n")
    with pytest.raises(rd.ConfigError, match="another out folder"):
        rd.prepare(tmp_path / "j", tmp_path / "out", tokenizer=tokenizer, bytes_per_shard=30_000, progress=False)


def test_hf_dataset_and_tokenizer_path_and_transformers_tokenizer(tmp_path, texts, tokenizer):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": texts})
    by_obj = rd.prepare(ds, tmp_path / "obj", tokenizer=tokenizer, progress=False, num_proc=1)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    by_path = rd.prepare(ds, tmp_path / "path", tokenizer=tmp_path, progress=False, num_proc=1)  # folder
    assert by_path.version.hash == by_obj.version.hash
    assert shard_bytes(tmp_path / "path") == shard_bytes(tmp_path / "obj")
    transformers = pytest.importorskip("transformers")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer)
    by_tf = rd.prepare(ds, tmp_path / "tf", tokenizer=fast, progress=False, num_proc=1)
    assert _rows(tmp_path / "tf", "tokens") == _rows(tmp_path / "obj", "tokens")
    assert by_tf.version.lineage["function"]["kind"] == "tokenizer"


def test_a_save_to_disk_folder_is_read_as_shards_not_its_json_files(tmp_path, texts, tokenizer):
    """A ``Dataset.save_to_disk`` folder holds ``state.json`` and ``dataset_info.json`` beside its
    ``.arrow`` shards: they were read as the JSONL corpus (a "one JSON object per line" error).
    The folder prepares as the dataset, the same tokens as the ``Dataset`` itself."""
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": texts})
    ds.save_to_disk(str(tmp_path / "saved"))
    by_folder = rd.prepare(tmp_path / "saved", tmp_path / "f", tokenizer=tokenizer, progress=False, num_proc=1)
    rd.prepare(ds, tmp_path / "d", tokenizer=tokenizer, progress=False, num_proc=1)
    assert by_folder.version.lineage["input"]["kind"] == "arrow"
    assert _rows(tmp_path / "f", "tokens") == _rows(tmp_path / "d", "tokens")


def words(record):
    """A map_fn: word lengths of the text, or drop the record when it has fewer than 50 words."""
    w = record["text"].split()
    return {"tokens": [len(x) for x in w], "id": record["id"]} if len(w) >= 50 else None


def test_map_fn_with_a_declared_version(tmp_path, corpus, texts):
    res = rd.prepare(corpus, tmp_path / "v1", map_fn=words, version="v1", progress=False, num_proc=2,
                     bytes_per_shard=50_000)
    fn = res.version.lineage["function"]
    assert fn == {"kind": "function", "name": f"{__name__}.words", "version": "v1", "schema": None}
    want = [(i, [len(x) for x in t.split()]) for i, t in enumerate(texts) if len(t.split()) >= 50]
    assert _rows(tmp_path / "v1", "id", "tokens") == want
    v2 = rd.prepare(corpus, tmp_path / "v2", map_fn=words, version="v2", progress=False, num_proc=1,
                    bytes_per_shard=50_000)
    assert shard_bytes(tmp_path / "v1") == shard_bytes(tmp_path / "v2")
    assert v2.version.hash != res.version.hash  # the declared version is part of the lineage


@pytest.mark.parametrize("lo,hi", [(None, 2000), (1000, None), (500, 3000)])
def test_length_filters(tmp_path, corpus, texts, tokenizer, lo, hi):
    res = rd.prepare(corpus, tmp_path / "f", tokenizer=tokenizer, keep_columns=["id"], min_tokens=lo, max_tokens=hi,
                     progress=False, num_proc=2, bytes_per_shard=60_000)
    enc = [(i, tokenizer.encode(t).ids) for i, t in enumerate(texts)]
    want = [(i, e) for i, e in enc if e and (lo is None or len(e) >= lo) and (hi is None or len(e) <= hi)]
    assert 0 < len(want) < len(texts) - 1
    assert _rows(tmp_path / "f", "id", "tokens") == want
    assert res.version.lineage["filters"] == {"drop_empty": True, "min_tokens": lo, "max_tokens": hi}


def test_keep_empty_documents(tmp_path, corpus, tokenizer, texts):
    res = rd.prepare(corpus, tmp_path / "e", tokenizer=tokenizer, drop_empty=False, progress=False, num_proc=1)
    assert res.documents == len(texts) and res.dropped == 0


def test_record_batches_are_capped_by_rows_and_tokens():
    assert batch_bounds(None, 40_000) == [(0, ROWS_PER_BATCH), (ROWS_PER_BATCH, 2 * ROWS_PER_BATCH),
                                          (2 * ROWS_PER_BATCH, 40_000)]
    lengths = np.array([TOKENS_PER_BATCH // 2] * 3 + [TOKENS_PER_BATCH * 3] + [1] * 5)
    assert batch_bounds(lengths, len(lengths)) == [(0, 2), (2, 3), (3, 4), (4, 9)]
    assert batch_bounds(np.ones(20_000, dtype=np.int64), 20_000) == [(0, ROWS_PER_BATCH), (ROWS_PER_BATCH, 20_000)]
    assert batch_bounds(np.zeros(0, dtype=np.int64), 0) == []


def test_written_shards_are_ipc_files_in_capped_record_batches(tmp_path, corpus, tokenizer):
    rd.prepare(corpus, tmp_path / "o", tokenizer=tokenizer, progress=False, num_proc=1)
    for p in sorted((tmp_path / "o").glob("*.arrow")):
        reader = pa.ipc.open_file(p)  # IPC *file* format: memory-mapped, zero-copy reads
        assert reader.schema.field("tokens").type == pa.list_(pa.int32())
        assert all(reader.get_batch(i).num_rows <= ROWS_PER_BATCH for i in range(reader.num_record_batches))


_GOOD = b'{"text": "def f(): pass", "id": 1}\n'


@pytest.mark.parametrize("bad", [
    b'{"text": 5, "id": 2}\n',  # the text field a number after string records
    b'{"text": ["a", "b"], "id": 2}\n',  # ... a list
    b'{"text": "x", "id": 123456789012345678901234567890}\n',  # an integer Arrow cannot hold
    b'{"text": "a\\ud800b", "id": 2}\n',  # a lone surrogate: JSON, but not Unicode
    b'{"text": "x", "id": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",  # nesting too deep for json
    b'{"text": "x", "id": "two"}\n',  # a kept field of another type than the records before
])
def test_a_jsonl_value_arrow_cannot_hold_names_its_line(tmp_path, tokenizer, bad):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(_GOOD * 3 + bad + _GOOD)
    with pytest.raises(rd.DatasetIntegrityError, match=rf"a\.jsonl \(byte {3 * len(_GOOD)}\)'"):
        rd.prepare(tmp_path / "in", tmp_path / "o", tokenizer=tokenizer, keep_columns=["id"], progress=False,
                   num_proc=1)


def test_a_chunk_of_null_texts_is_empty_documents(tmp_path, tokenizer):
    """A null text is an empty document, also when a whole chunk of 1,024 records has only nulls
    (Arrow types that column null)."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(b'{"text": null}\n' * 1100 + b'{"text": "def f(): pass"}\n')
    res = rd.prepare(tmp_path / "in", tmp_path / "o", tokenizer=tokenizer, progress=False, num_proc=1)
    assert (res.records_read, res.documents) == (1101, 1)
    assert _rows(tmp_path / "o", "tokens") == [(tokenizer.encode("def f(): pass").ids,)]


@pytest.mark.parametrize("change", ["append", "rewrite", "remove"])
def test_a_jsonl_file_changed_while_preparing_is_refused(tmp_path, tokenizer, monkeypatch, change):
    """The lineage names the bytes hashed when the run started: a piece reading other bytes (the
    file grew, was rewritten in place or removed) is refused, never written under that version."""
    import resumable_data.sources.prepare.api as api

    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "a.jsonl"
    path.write_bytes(_GOOD * 40)
    run_jobs = api.run_jobs

    def changed_then_run(*args, **kwargs):
        if change == "append":
            with open(path, "ab") as f:
                f.write(_GOOD)
        elif change == "rewrite":  # the same size, other bytes
            path.write_bytes(_GOOD.replace(b"pass", b"None") * 40)
        else:
            path.unlink()
        return run_jobs(*args, **kwargs)

    monkeypatch.setattr(api, "run_jobs", changed_then_run)
    with pytest.raises(rd.DatasetIntegrityError, match="as it was hashed when this run started"):
        rd.prepare(tmp_path / "in", tmp_path / "o", tokenizer=tokenizer, progress=False, num_proc=1)
    assert not (tmp_path / "o" / rd.sources.MANIFEST_NAME).exists()


@pytest.mark.parametrize("kind", ["dangling symlink", "fifo"])
def test_a_jsonl_entry_that_is_not_a_regular_file_is_refused_not_skipped(tmp_path, tokenizer, kind):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(_GOOD)
    odd = tmp_path / "in" / "b.jsonl"
    if kind == "fifo":
        os.mkfifo(odd)
    else:
        odd.symlink_to(tmp_path / "gone.jsonl")
    with pytest.raises(rd.ConfigError, match=r"b\.jsonl'.*a regular \.jsonl file"):
        rd.prepare(tmp_path / "in", tmp_path / "o", tokenizer=tokenizer, progress=False, num_proc=1)


def later_not_a_dict(record):
    return "oops" if record["id"] == 3 else {"tokens": [1, 2]}


def later_other_keys(record):
    return {"tokens": [1], "extra": 1} if record["id"] == 3 else {"tokens": [1, 2]}


@pytest.mark.parametrize("fn,err", [(later_not_a_dict, rd.ConfigTypeError), (later_other_keys, rd.ConfigError)])
def test_map_fn_output_is_checked_on_every_record(tmp_path, fn, err):
    """Arrow builds the first dict's columns and makes anything else null: a later non-dict or a
    dict with other keys would lose data without a word."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("".join(json.dumps({"text": "x", "id": i}) + "\n" for i in range(6)))
    with pytest.raises(err, match="map_fn"):
        rd.prepare(tmp_path / "in", tmp_path / "o", map_fn=fn, version="v1", progress=False, num_proc=1)
