"""Prepared shards feed rd.Packing through rd.DataLoader and resume bit-exact; a SIGKILLed prepare
continues to the same version; a resume on shards of another lineage is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
import xxhash

import resumable_data as rd
from resumable_data.sources.prepare.progress import PROGRESS_NAME
from tests.loader.conftest import canon
from tests.sources.prepare.conftest import shard_bytes

ROOT = Path(__file__).resolve().parents[3]


def _loader(src, eos):
    return rd.DataLoader(src, batch_size=4, shuffle=True, seed=7,
                         packing=rd.Packing(64, "concat", window=8, eos_id=eos))


@pytest.mark.parametrize("stop", [1, 17, 40])
def test_prepared_shards_pack_and_resume_bit_exact(tmp_path, corpus, tokenizer, stop):
    res = rd.prepare(corpus, tmp_path / "tok", tokenizer=tokenizer, bytes_per_shard=60_000, num_proc=2,
                     progress=False)
    eos = tokenizer.token_to_id("[EOS]")
    src = rd.ArrowShards(tmp_path / "tok")
    assert src.version.hash == res.version.hash and src.version.lineage is not None
    reference = [canon(b) for b in _loader(src, eos)]
    assert len(reference) > stop + 10
    first = _loader(src, eos)
    got = []
    for b in first:
        got.append(canon(b))
        if len(got) == stop:
            break
    state = json.loads(json.dumps(first.state_dict()))
    resumed = _loader(rd.ArrowShards(tmp_path / "tok"), eos)
    resumed.load_state_dict(state)
    got += [canon(b) for b in resumed]
    assert len(got) == len(reference)
    for i, (a, b) in enumerate(zip(got, reference)):
        assert a == b, f"batch {i} differs after a resume at {stop}"


def test_a_state_saved_on_other_lineage_is_refused(tmp_path, corpus, tokenizer):
    a = rd.prepare(corpus, tmp_path / "a", tokenizer=tokenizer, progress=False, num_proc=1)
    # a filter that drops nothing: the same shard bytes, another lineage, another version
    b = rd.prepare(corpus, tmp_path / "b", tokenizer=tokenizer, progress=False, num_proc=1, max_tokens=10**9)
    assert shard_bytes(tmp_path / "a") == shard_bytes(tmp_path / "b")
    assert a.version.hash != b.version.hash
    assert b.version.lineage["filters"]["max_tokens"] == 10**9
    eos = tokenizer.token_to_id("[EOS]")
    first = _loader(rd.ArrowShards(tmp_path / "a"), eos)
    next(iter(first))
    state = first.state_dict()
    other = _loader(rd.ArrowShards(tmp_path / "b"), eos)
    with pytest.raises(rd.ResumeError, match=a.version.hash):
        other.load_state_dict(state)


_CHILD = """
import sys, resumable_data as rd
rd.prepare(sys.argv[1], sys.argv[2], tokenizer=sys.argv[3], keep_columns=["id"], bytes_per_shard=8_000,
           num_proc=1, progress=False)
"""


def _done_pieces(out: Path) -> int:
    try:
        return len(json.loads((out / PROGRESS_NAME).read_text())["done"])
    except (FileNotFoundError, ValueError):
        return 0


def test_sigkill_mid_prepare_then_rerun_gives_the_same_version(tmp_path, corpus, tokenizer):
    tok_path = tmp_path / "tokenizer.json"
    tokenizer.save(str(tok_path))
    clean = rd.prepare(corpus, tmp_path / "clean", tokenizer=tok_path, keep_columns=["id"], bytes_per_shard=8_000,
                       num_proc=1, progress=False)
    pieces = len(clean.version.shards)
    assert pieces >= 30
    out = tmp_path / "killed"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(corpus), str(out), str(tok_path)], env=env,
                             start_new_session=True, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while _done_pieces(out) < 3 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    os.killpg(child.pid, signal.SIGKILL)  # the driver and its pool workers
    child.wait()
    done = _done_pieces(out)
    assert 3 <= done < pieces, f"killed after {done} of {pieces} pieces: {child.stderr.read()[-2000:]!r}"
    assert not (out / rd.sources.MANIFEST_NAME).exists()
    # every file a reader could see is a whole shard, and equal to the clean run's
    visible = shard_bytes(out)
    clean_files = shard_bytes(tmp_path / "clean")
    assert visible and all(visible[n] == clean_files[n] for n in visible)
    # damage one completed shard and leave a stray temporary file: the re-run must redo / remove them
    recorded = json.loads((out / PROGRESS_NAME).read_text())["done"]
    damaged = out / recorded[0]["name"]
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    (out / f".{recorded[-1]['name']}.123.abcd.tmp").write_bytes(b"partial")
    again = rd.prepare(corpus, out, tokenizer=tok_path, keep_columns=["id"], bytes_per_shard=8_000, num_proc=2,
                       progress=False)
    assert again.version.hash == clean.version.hash
    assert again.reused_pieces == done - 1  # the damaged shard was not trusted
    assert shard_bytes(out) == clean_files
    assert sorted(p.name for p in out.iterdir()) == sorted([*clean_files, rd.sources.MANIFEST_NAME])
    # and a third call has nothing left to do
    third = rd.prepare(corpus, out, tokenizer=tok_path, keep_columns=["id"], bytes_per_shard=8_000, progress=False)
    assert third.version.hash == clean.version.hash and third.documents == clean.documents
    assert third.tokens == clean.tokens


def test_manifest_lineage_is_hashed_and_checked(tmp_path, corpus, tokenizer):
    res = rd.prepare(corpus, tmp_path / "o", tokenizer=tokenizer, progress=False, num_proc=1)
    path = tmp_path / "o" / rd.sources.MANIFEST_NAME
    d = json.loads(path.read_text())
    assert d["lineage"]["input"]["version"] == rd.ArrowShards(corpus).version.hash
    assert d["lineage"]["function"]["kind"] == "tokenizer"
    assert d["lineage"]["package_version"] == rd.__version__
    d["lineage"]["filters"]["min_tokens"] = 3  # a hand edit of the lineage
    path.write_text(json.dumps(d))
    with pytest.raises(rd.DatasetIntegrityError, match="hash"):
        rd.DatasetVersion.load(tmp_path / "o")
    # re-pinning without lineage gives another version than the prepared one
    assert rd.pin(tmp_path / "o", save=False).hash != res.version.hash


def test_a_manifest_without_lineage_keeps_its_hash(tmp_path):
    rd.write_arrow_shards(pa.table({"x": [1, 2, 3]}), tmp_path / "d")
    v = rd.pin(tmp_path / "d")
    d = json.loads((tmp_path / "d" / rd.sources.MANIFEST_NAME).read_text())
    assert "lineage" not in d and v.lineage is None
    assert rd.DatasetVersion.load(tmp_path / "d").hash == v.hash


_KILL_AT_REPLACE = """
import os, signal, sys
import resumable_data as rd
real = os.replace
def replace(src, dst, *a, **k):  # SIGKILL between the temporary file's fsync and its rename
    if os.path.basename(str(dst)) == sys.argv[4]:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    return real(src, dst, *a, **k)
os.replace = replace
rd.prepare(sys.argv[1], sys.argv[2], tokenizer=sys.argv[3], keep_columns=["id"], bytes_per_shard=60_000,
           num_proc=1, progress=False)
"""


@pytest.mark.parametrize("target", [PROGRESS_NAME, rd.sources.MANIFEST_NAME])
def test_sigkill_while_the_first_record_or_the_manifest_is_written_then_rerun(tmp_path, corpus, tokenizer, target):
    """Killed before renaming the first progress record (the folder holds only its temporary file)
    or the manifest (beside the record and every shard): the same call continues to the same bytes
    and version, instead of refusing the folder for a temporary file rd wrote itself."""
    tok_path = tmp_path / "tokenizer.json"
    tokenizer.save(str(tok_path))
    kw = dict(tokenizer=tok_path, keep_columns=["id"], bytes_per_shard=60_000, progress=False)
    clean = rd.prepare(corpus, tmp_path / "clean", num_proc=1, **kw)
    out = tmp_path / "killed"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.run([sys.executable, "-c", _KILL_AT_REPLACE, str(corpus), str(out), str(tok_path), target],
                           env=env, start_new_session=True, capture_output=True, timeout=300)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    left = sorted(p.name for p in out.iterdir())
    assert any(n.startswith(f".{target}.") and n.endswith(".tmp") for n in left), left
    again = rd.prepare(corpus, out, num_proc=2, **kw)
    assert again.version.hash == clean.version.hash
    assert shard_bytes(out) == shard_bytes(tmp_path / "clean")
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in (tmp_path / "clean").iterdir())


@pytest.mark.parametrize("edit", ["another piece's shard", "a path outside", "all dropped"])
def test_an_edited_progress_entry_is_redone_not_trusted(tmp_path, corpus, tokenizer, monkeypatch, edit):
    """An entry naming a file other than its piece's shard (with that file's true size and hash), or
    claiming no output while its shard is there, is redone: the same bytes as an uninterrupted run."""
    import resumable_data.sources.prepare.api as api

    kw = dict(tokenizer=tokenizer, bytes_per_shard=60_000, progress=False, num_proc=1)
    clean = rd.prepare(corpus, tmp_path / "clean", **kw)
    run_jobs = api.run_jobs

    def three_then_stop(jobs, *args):
        run_jobs(jobs[:3], *args)
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "run_jobs", three_then_stop)
    out = tmp_path / "o"
    with pytest.raises(KeyboardInterrupt):
        rd.prepare(corpus, out, **kw)
    monkeypatch.undo()
    record = json.loads((out / PROGRESS_NAME).read_text())
    entry = record["done"][2]
    if edit == "another piece's shard":
        entry.update({k: record["done"][1][k] for k in ("name", "size", "content_hash")})
    elif edit == "a path outside":
        (tmp_path / "evil").write_bytes(b"x")
        entry.update(name="../evil", size=1, content_hash=xxhash.xxh3_128_hexdigest(b"x"))
    else:
        entry.update(name=None, size=0, content_hash=None)
    (out / PROGRESS_NAME).write_text(json.dumps(record))
    again = rd.prepare(corpus, out, **kw)
    assert again.reused_pieces == 2
    assert again.version.hash == clean.version.hash
    assert shard_bytes(out) == shard_bytes(tmp_path / "clean")
