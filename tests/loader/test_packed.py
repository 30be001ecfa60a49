"""The packed loader: exactly-once tokens, bit-exact resume, sharding, rejections."""

import collections
import json
import random

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from tests.loader.conftest import canon


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(3)
    lengths = np.maximum(1, rng.lognormal(2.5, 0.8, 240).astype(int))
    docs = [rng.integers(1, 5000, k).astype(np.int32).tolist() for k in lengths]
    rd.write_arrow_shards(pa.table({"tokens": pa.array(docs, type=pa.list_(pa.int32())), "id": np.arange(240)}),
                          d, num_shards=3, rows_per_batch=50)
    rd.pin(d)
    return rd.ArrowShards(d), docs


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "cache"))


SPECS = {
    "concat": rd.Packing(16, "concat", window=20, eos_id=0),
    "best_fit": rd.Packing(16, "best_fit", window=20, eos_id=0),
}
ORDERS = {"sequential": {}, "global": dict(shuffle=True, seed=4), "window": dict(shuffle=True, seed=4, shuffle_window=64)}


def packed_loader(src, spec, order, **kw):
    return rd.DataLoader(src, batch_size=3, packing=SPECS[spec], **ORDERS[order], **kw)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("order", ORDERS)
def test_every_token_of_every_document_once_per_epoch(corpus, spec, order):
    src, docs = corpus
    loader = packed_loader(src, spec, order)
    for _ in range(2):  # two epochs, each with its own shuffle and sequence count
        seen = collections.defaultdict(list)
        for batch in loader:
            ids, doc, pos = (batch[k].numpy() for k in ("input_ids", "document_ids", "position_ids"))
            for r, c in zip(*np.nonzero(doc >= 0)):
                seen[int(doc[r, c])].append((int(pos[r, c]), int(ids[r, c])))
        assert sorted(seen) == list(range(len(docs)))
        for d, toks in seen.items():
            assert [p for p, _ in toks] == list(range(len(docs[d]) + 1))  # in document order, no repeats
            assert [t for _, t in toks] == docs[d] + [0]
    c = loader.counters
    assert c.tokens == 2 * sum(len(d) + 1 for d in docs)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("order", ["global", "window"])
@pytest.mark.parametrize("workers", [(0, 2), (2, 0)])
def test_resume_at_random_sequences_is_bit_exact(corpus, spec, order, workers):
    src, _ = corpus
    make = lambda w: packed_loader(src, spec, order, num_workers=w, **({"persistent_workers": True} if w else {}))  # noqa: E731
    reference = []
    ref_loader = make(0)
    for _ in range(3):
        reference += [canon(b) for b in ref_loader]
    rng = random.Random(len(reference))
    probe = make(0)
    first_epoch = len(probe)
    window_start = int(probe._stream.index(0).cumulative[2]) // 3  # the step holding window 2's first sequence
    points = sorted({rng.randrange(1, len(reference)), first_epoch, window_start, rng.randrange(1, len(reference))})
    got, loader, done = [], make(workers[0]), 0
    for i, point in enumerate(points + [len(reference)]):
        while done < point:
            for b in loader:
                got.append(canon(b))
                done += 1
                if done == point:
                    break
        if point == len(reference):
            break
        state = json.loads(json.dumps(loader.state_dict()))
        loader = make(workers[(i + 1) % 2])
        loader.load_state_dict(state)
    assert got == reference


@pytest.mark.parametrize("workers", [0, 2])
def test_drop_last_counts_packed_sequences_not_documents(tmp_path, workers):
    """Fewer documents than the batch, many sequences: drop_last=True packs them (it was refused
    with 'the dataset has 2 records'); the epoch's short last batch is dropped; resume is exact."""
    docs = [list(range(1, 1001)), list(range(5, 300))]
    rd.write_arrow_shards(pa.table({"tokens": pa.array(docs, type=pa.list_(pa.int32()))}), tmp_path, num_shards=1)
    rd.pin(tmp_path)
    src = rd.ArrowShards(tmp_path)

    def make(w=0):
        return rd.DataLoader(src, batch_size=4, drop_last=True, shuffle=True, seed=3, num_workers=w,
                             packing=rd.Packing(64, "concat", eos_id=0))

    loader = make()
    sequences = loader._stream.index(0).num_sequences
    assert sequences == -(-(1000 + 1 + 295 + 1) // 64) and len(loader) == sequences // 4 == 5
    reference = [canon(b) for _ in range(2) for b in loader]
    assert len(reference) == 10
    for cut in (1, 5, 7):
        first = make()
        got = []
        while len(got) < cut:
            for b in first:
                got.append(canon(b))
                if len(got) == cut:
                    break
        state = json.loads(json.dumps(first.state_dict()))
        assert state["plan"]["num_records"] == 2 and state["plan"]["tail"] == "drop"
        resumed = make(workers)
        resumed.load_state_dict(state)
        rest = [canon(b) for _ in range(2) for b in resumed]
        assert got + rest[: len(reference) - cut] == reference, cut


def test_drop_last_with_too_few_packed_sequences_is_refused(tmp_path):
    rd.write_arrow_shards(pa.table({"tokens": pa.array([[1, 2, 3]] * 5, type=pa.list_(pa.int32()))}), tmp_path,
                          num_shards=1)
    loader = rd.DataLoader(rd.ArrowShards(tmp_path, unpinned="allow"), batch_size=4, drop_last=True,
                           packing=rd.Packing(64, "concat", eos_id=0))  # 5 documents: one sequence of 20 tokens
    with pytest.raises(rd.ConfigError, match="batch_size=4: expected at most the 1 packed sequences of epoch 0"):
        next(iter(loader))


def test_ranks_split_the_global_packed_batch(corpus):
    src, _ = corpus
    whole = [canon(b) for b in rd.DataLoader(src, batch_size=4, packing=SPECS["concat"], shuffle=True, seed=1, tail="wrap")]
    ranks = [rd.DataLoader(src, batch_size=2, packing=SPECS["concat"], shuffle=True, seed=1,
                           sharding=rd.Sharding(2, r), tail="wrap") for r in range(2)]
    for step, (a, b) in enumerate(zip(*ranks)):
        for key in ("input_ids", "labels", "document_ids"):
            merged = np.concatenate([np.frombuffer(a_[3], dtype=np.int64) for a_ in (canon(a)[key], canon(b)[key])])
            assert merged.tolist() == np.frombuffer(whole[step][key][3], dtype=np.int64).tolist()


def test_a_changed_packing_spec_is_refused(corpus):
    src, _ = corpus
    state = packed_loader(src, "concat", "global").state_dict()
    other = rd.DataLoader(src, batch_size=3, packing=rd.Packing(32, "concat", window=20, eos_id=0), shuffle=True, seed=4)
    with pytest.raises(rd.ResumeError, match="packing: saved .*'seq_len': 16.* vs current .*'seq_len': 32"):
        other.load_state_dict(state)


def test_forged_epoch_base_is_refused(corpus):
    src, _ = corpus
    loader = packed_loader(src, "best_fit", "global")
    for _ in loader:
        pass
    state = loader.state_dict()
    state["epoch_base"] = [0, 0]  # the cursor sits in epoch 1
    with pytest.raises(rd.ResumeError, match="epoch_base"):
        packed_loader(src, "best_fit", "global").load_state_dict(state)


def write(tmp_path, column):
    rd.write_arrow_shards(pa.table({"tokens": column}), tmp_path, num_shards=1)
    return rd.ArrowShards(tmp_path, unpinned="allow")


@pytest.mark.parametrize("column, spec, expected", [
    (pa.array([[1, 2], [], [3]], type=pa.list_(pa.int64())), rd.Packing(4), "empty"),
    (pa.array([[1, 2, 3, 4, 5], [1]], type=pa.list_(pa.int64())), rd.Packing(4, "best_fit", overlong="error"), "overlong"),
    (pa.array([[1.5], [2.0]], type=pa.list_(pa.float32())), rd.Packing(4), "list<integer>"),
    (pa.array([[1], [2]], type=pa.list_(pa.int64())), rd.Packing(4, tokens="input_ids"), "Packing.tokens"),
    (pa.array(["a", "b"]), rd.Packing(4), "list<integer>"),
])
def test_bad_packing_input_is_refused_at_construction(tmp_path, column, spec, expected):
    with pytest.raises(rd.ConfigError, match=expected):
        rd.DataLoader(write(tmp_path, column), batch_size=1, packing=spec)


def test_packing_needs_an_arrow_source():
    with pytest.raises(rd.ConfigError, match="ArrowShards"):
        rd.DataLoader([[1, 2]], batch_size=1, packing=rd.Packing(4))


def _digest(loader, batches: int) -> str:
    import xxhash

    h = xxhash.xxh3_64()
    for i, batch in enumerate(loader):
        if i == batches:
            break
        for k in ("input_ids", "labels", "position_ids", "document_ids", "loss_mask"):
            t = batch[k]
            h.update(k.encode() + str(t.dtype).encode() + str(tuple(t.shape)).encode() + t.numpy().tobytes())
    return h.hexdigest()


# A change here is a schema change: packed sequences at the same logical position would differ, so a
# state saved before the change would resume onto other data. Update only with a schema_version bump.
# (The corpus's version hash, which seeds the shuffle, is a hash of the shard bytes pyarrow writes:
# pinned through constraints.txt.)
GOLDEN_PACKED = {
    ("concat", "global"): "ab0922024a1a1eaf",
    ("concat", "window"): "83d848d424a894dd",
    ("best_fit", "global"): "8f759159aa979d23",
    ("best_fit", "window"): "1b0a8a1de80f65ea",
}


@pytest.mark.parametrize("spec, order", list(GOLDEN_PACKED))
def test_packed_batches_golden_vectors(corpus, spec, order):
    """The first 8 packed batches (ids, labels, positions, documents, masks) of a shuffled loader,
    pinned by digest: how windows map to documents and sequences map to steps cannot drift."""
    src, _ = corpus
    assert _digest(packed_loader(src, spec, order), 8) == GOLDEN_PACKED[(spec, order)]


def test_a_fifo_in_the_packing_cache_is_replaced_not_opened(corpus, tmp_path):
    """Issue 30 item 5: a FIFO where the packing index cache file goes never blocks the loader:
    it is not opened, the index is rebuilt and written over it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    src, _ = corpus
    first = [canon(b) for b in packed_loader(src, "concat", "global")]
    files = list((tmp_path / "cache" / "packing").glob("*.npy"))
    assert files
    for f in files:
        f.unlink()
        os.mkfifo(f)
    code = ("import sys, resumable_data as rd\n"
            "from tests.loader.test_packed import packed_loader\n"
            "from tests.loader.conftest import canon\n"
            "src = rd.ArrowShards(sys.argv[1])\n"
            "print(len([canon(b) for b in packed_loader(src, 'concat', 'global')]))")
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-c", code, str(src.root)], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(root)))
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout.strip()) == len(first)
    assert all(f.is_file() for f in files)  # the FIFOs were replaced by the rebuilt index
