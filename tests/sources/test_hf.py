"""rd.ArrowShards.from_hf: a Hugging Face datasets.Dataset's own Arrow cache files, versioned by
content; refusals name their fix. Everything is built offline from local files in tmp_path."""

from __future__ import annotations

import json
import os
import pickle

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import resumable_data as rd

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
datasets = pytest.importorskip("datasets")
datasets.disable_progress_bars()

N = 120


def rows(n=N, salt=""):
    return [{"id": i, "text": f"doc {i}{salt}", "tokens": list(range(i % 7))} for i in range(n)]


def write_files(tmp_path, rs, name="data"):
    jsonl = tmp_path / f"{name}.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rs))
    table = pa.Table.from_pylist(rs)
    parquet = tmp_path / f"{name}.parquet"
    pq.write_table(table, parquet, row_group_size=50)
    arrow = tmp_path / f"{name}.arrow"
    with pa.OSFile(str(arrow), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table, max_chunksize=40)
    return {"json": jsonl, "parquet": parquet, "arrow": arrow}


def load(kind, path, cache_dir):
    return datasets.load_dataset(kind, data_files=str(path), cache_dir=str(cache_dir), split="train")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hf")
    files = write_files(tmp, rows())
    return tmp, files, {k: load(k, p, tmp / f"cache-{k}") for k, p in files.items()}


def as_rows(ds):
    return [dict(ds[i]) for i in range(len(ds))]


@pytest.mark.parametrize("kind", ["json", "parquet", "arrow"])
def test_from_hf_reads_the_cache_files_zero_copy(built, kind):
    _, _, dss = built
    ds = dss[kind]
    src = rd.ArrowShards.from_hf(ds)
    assert len(src) == len(ds) == N and src.pinned
    assert src.version.selection.value == "files"
    assert [str(src.root / s.path) for s in src.version.shards] == [f["filename"] for f in ds.cache_files]
    assert src.take(list(range(N))).to_pylist() == as_rows(ds)
    assert src[7] == ds[7]
    # zero copy: the record batches are views of the memory-mapped cache file, not copies
    assert src._table.wholes[0] is not None and src._units[0].batch is not None
    # no manifest was written into the (shared, possibly read-only) HF cache directory
    assert not (src.root / rd.sources.MANIFEST_NAME).exists()
    # pickling (DataLoader workers) carries the in-memory manifest
    again = pickle.loads(pickle.dumps(src))
    assert again.version == src.version and again[N - 1] == src[N - 1]


def test_version_follows_content_not_cache_location(built, tmp_path):
    tmp, files, dss = built
    same = rd.ArrowShards.from_hf(load("json", files["json"], tmp_path / "other-cache"))
    assert same.version.hash == rd.ArrowShards.from_hf(dss["json"]).version.hash
    changed_files = write_files(tmp_path, rows(salt="!"), name="changed")
    changed = rd.ArrowShards.from_hf(load("json", changed_files["json"], tmp_path / "c2"))
    assert changed.version.hash != same.version.hash
    cheap = rd.ArrowShards.from_hf(dss["json"], hash="size")
    assert cheap.version.hash_mode.value == "size" and cheap.version.hash != same.version.hash


def mem_dict(n=N, salt=""):
    return {"id": list(range(n)), "text": [f"doc {i}{salt}" for i in range(n)],
            "tokens": [list(range(i % 7)) for i in range(n)]}


@pytest.fixture
def rd_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "rd-cache"))
    return tmp_path / "rd-cache" / "hf-in-memory"


def test_in_memory_dataset_is_written_once_as_pinned_shards_and_loads_in_plan_order(rd_cache):
    mem = datasets.Dataset.from_dict(mem_dict())
    assert mem.cache_files == []
    src = rd.ArrowShards.from_hf(mem)
    assert src.pinned and len(src) == N
    # written to the content-addressed default cache, with a manifest from the pin machinery
    assert src.root == rd_cache / src.version.hash
    assert rd.DatasetVersion.load(src.root) == src.version
    assert sorted(p.name for p in src.root.iterdir()) == [rd.sources.MANIFEST_NAME, "shard-00000.arrow"]
    assert src.take(list(range(N))).to_pylist() == as_rows(mem)

    loader = rd.DataLoader(src, batch_size=16, shuffle=True, seed=7, sharding=rd.Sharding(1, 0),
                           arrow_collate=lambda t: t.to_pylist())
    plan = loader.plan
    got = []
    for step, batch in enumerate(loader):
        ids = plan.records(plan.local_positions(step, loader.sharding)).tolist()
        assert batch == [mem[i] for i in ids]
        got += ids
    assert sorted(got) == list(range(N)) and got != list(range(N))  # every row once, shuffled

    # the same content (built another way) re-uses the cache: same hash, same directory
    again = rd.ArrowShards.from_hf(datasets.Dataset.from_list(rows()))
    assert again.version.hash == src.version.hash and again.root == src.root
    assert [p.name for p in rd_cache.iterdir()] == [src.version.hash]  # no temporary directory left
    # changed content: another version in another directory
    changed = rd.ArrowShards.from_hf(datasets.Dataset.from_dict(mem_dict(salt="!")))
    assert changed.version.hash != src.version.hash and changed.root != src.root
    # pickling (DataLoader workers) reopens the written shards
    assert pickle.loads(pickle.dumps(src))[N - 1] == src[N - 1]


def test_in_memory_views_are_written_with_their_rows(rd_cache):
    mem = datasets.Dataset.from_dict(mem_dict())
    for view in (mem.shuffle(seed=3), mem.select([5, 1, 2]), mem.filter(lambda r: r["id"] % 2 == 0),
                 mem.rename_column("id", "idx"), mem.select([])):
        src = rd.ArrowShards.from_hf(view)
        assert len(src) == len(view)
        assert src.take(list(range(len(view)))).to_pylist() == as_rows(view)


def test_explicit_cache_dir_is_reused_when_identical_and_refused_when_not(tmp_path):
    from resumable_data.sources.hf import hf_shards

    mem = datasets.Dataset.from_dict(mem_dict())
    d = tmp_path / "mine"
    root, rel, version = hf_shards(mem, cache_dir=d)
    assert root == d and rel == ["shard-00000.arrow"] and (d / rd.sources.MANIFEST_NAME).is_file()
    assert rd.ArrowShards(d).version.hash == version.hash == rd.pin(d, save=False).hash
    mtime = (d / rel[0]).stat().st_mtime_ns
    assert hf_shards(datasets.Dataset.from_list(rows()), cache_dir=d)[2].hash == version.hash
    assert (d / rel[0]).stat().st_mtime_ns == mtime  # re-used, not rewritten
    with pytest.raises(rd.ConfigError, match=r"cache_dir=.*holds version .*fix: pass another cache_dir"):
        hf_shards(datasets.Dataset.from_dict(mem_dict(salt="!")), cache_dir=d)
    assert rd.ArrowShards(d).version.hash == version.hash  # untouched
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("not ours")
    with pytest.raises(rd.ConfigError, match=r"cache_dir=.*other files.*fix: pass a new directory"):
        hf_shards(mem, cache_dir=other)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert hf_shards(mem, cache_dir=empty)[2].hash == version.hash
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "mine", "other"]  # no temporaries left


def test_in_memory_refusals_name_the_fix(rd_cache, tmp_path):
    mem = datasets.Dataset.from_dict(mem_dict(10))
    with pytest.raises(rd.ConfigError, match=r"hash='size'.*'content' for an in-memory dataset.*fix: drop hash="):
        rd.ArrowShards.from_hf(mem, hash="size")
    # the documented alternative (files of its own, zero copy from then on) still works
    mem.save_to_disk(str(tmp_path / "saved"))
    disk = datasets.load_from_disk(str(tmp_path / "saved"))
    assert rd.ArrowShards.from_hf(disk).take(list(range(10))).to_pylist() == as_rows(mem)


def test_indices_mapping_and_in_memory_edits_are_refused_with_the_fix(built):
    _, _, dss = built
    ds = dss["json"]
    for view in (ds.shuffle(seed=3), ds.select([5, 1, 2]), ds.filter(lambda r: r["id"] % 2 == 0)):
        with pytest.raises(rd.ConfigError, match=r"indices mapping.*flatten_indices\(\)"):
            rd.ArrowShards.from_hf(view)
    for edited in (ds.rename_column("id", "idx"), ds.select(range(10)), ds.remove_columns(["text"])):
        with pytest.raises(rd.ConfigError, match=r"exactly its cache files' rows.*flatten_indices\(\)"):
            rd.ArrowShards.from_hf(edited)
    shuffled = ds.shuffle(seed=3)
    flat = shuffled.flatten_indices()
    src = rd.ArrowShards.from_hf(flat)
    assert src.take(list(range(N))).to_pylist() == as_rows(shuffled)


def _double_id(sample):
    return {**sample, "id": sample["id"] * 2}


def test_a_format_or_transform_is_refused_not_dropped_and_the_fix_works(built, rd_cache):
    """rd reads Arrow rows: a with_format / with_transform would silently not apply; refuse it,
    and the fix the message names (with_format(None) + the loader's transform=) gives the rows
    the transform meant."""
    _, _, dss = built
    ds = dss["json"]
    cases = [
        (ds.with_format("torch"), r"formatted as 'torch'.*with_format\(None\)"),
        (ds.with_format("numpy"), r"formatted as 'numpy'.*with_format\(None\)"),
        (ds.with_transform(_double_id), r"with a transform.*with_format\(None\).*transform=fn"),
        (ds.with_format(columns=["id"]), r"restricted to columns \['id'\].*with_format\(None\)"),
    ]
    for view, pattern in cases:
        with pytest.raises(rd.ConfigError, match=pattern):
            rd.ArrowShards.from_hf(view)
    src = rd.ArrowShards.from_hf(ds.with_transform(_double_id).with_format(None))
    loader = rd.DataLoader(src, batch_size=4, shuffle=False, seed=0, transform=_double_id, collate_fn=list)
    ids = [r["id"] for batch in loader for r in batch]
    assert ids == [2 * i for i in range(N)]


def test_non_datasets_inputs_are_refused(built):
    _, files, dss = built
    dd = datasets.DatasetDict({"train": dss["json"]})
    with pytest.raises(rd.ConfigError, match="pick a split"):
        rd.ArrowShards.from_hf(dd)
    with pytest.raises(rd.ConfigError, match="datasets.Dataset"):
        rd.ArrowShards.from_hf([1, 2, 3])
    stream = datasets.load_dataset("json", data_files=str(files["json"]), split="train", streaming=True)
    with pytest.raises(rd.ConfigError, match="map-style"):
        rd.ArrowShards.from_hf(stream)


def test_multi_file_dataset_keeps_file_order(tmp_path):
    parts = []
    for k in range(3):
        t = pa.Table.from_pylist(rows(30, salt=f"-{k}"))
        p = tmp_path / f"part-{k}.parquet"
        pq.write_table(t, p)
        parts.append(str(p))
    ds = datasets.load_dataset("parquet", data_files=parts, cache_dir=str(tmp_path / "c"), split="train")
    src = rd.ArrowShards.from_hf(ds)
    assert len(src) == 90
    assert src.take(list(range(90))).to_pylist() == as_rows(ds)


def test_resume_through_the_loader_is_bit_exact(built):
    _, _, dss = built
    src = rd.ArrowShards.from_hf(dss["parquet"])

    def batches(loader, n):
        out = []
        while len(out) < n:
            for b in loader:
                out.append({k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in b.items()})
                if len(out) == n:
                    break
        return out

    kw = dict(batch_size=16, shuffle=True, seed=11, sharding=rd.Sharding(1, 0))
    ref = batches(rd.DataLoader(src, **kw), 12)
    first = rd.DataLoader(src, **kw)
    head = batches(first, 5)
    state = json.loads(json.dumps(first.state_dict()))
    resumed = rd.DataLoader(rd.ArrowShards.from_hf(dss["parquet"]), **kw)
    resumed.load_state_dict(state)
    assert head + batches(resumed, 7) == ref
    assert state["plan"]["dataset_version"] == src.version.hash


def test_from_hf_takes_cache_dir(tmp_path):
    mem = datasets.Dataset.from_dict(mem_dict())
    src = rd.ArrowShards.from_hf(mem, cache_dir=tmp_path / "mine")
    assert src.root == tmp_path / "mine" and src.take(list(range(len(mem)))).to_pylist() == as_rows(mem)
    with pytest.raises(rd.ConfigError, match=r"cache_dir=.*holds version"):
        rd.ArrowShards.from_hf(datasets.Dataset.from_dict(mem_dict(salt="!")), cache_dir=tmp_path / "mine")


def test_in_memory_cache_directory_follows_the_umask(tmp_path):
    import os

    old = os.umask(0o022)
    try:
        src = rd.ArrowShards.from_hf(datasets.Dataset.from_dict(mem_dict()), cache_dir=tmp_path / "shared")
    finally:
        os.umask(old)
    assert (src.root.stat().st_mode & 0o777) == 0o755  # readable by other users of a shared cache


def test_a_cached_in_memory_dataset_is_not_written_again(rd_cache, monkeypatch):
    from resumable_data.sources import hf

    mem = datasets.Dataset.from_dict(mem_dict())
    first = rd.ArrowShards.from_hf(mem)
    predicted = hf._predicted_version(mem.with_format("arrow")[0:mem.num_rows])
    assert predicted.hash == first.version.hash  # the hashing sink sees the bytes pin() hashed

    def no_write(*a, **k):
        raise AssertionError("the cache already holds this version: nothing should be written")

    monkeypatch.setattr(hf, "_write_shards", no_write)
    again = rd.ArrowShards.from_hf(datasets.Dataset.from_list(rows()))
    assert again.root == first.root and again.version.hash == first.version.hash
    with pytest.raises(AssertionError, match="nothing should be written"):  # another version is written
        rd.ArrowShards.from_hf(datasets.Dataset.from_dict(mem_dict(salt="?")))


def _from_hf_in_child(barrier, out, i):
    barrier.wait()  # every process writes at the same moment
    src = rd.ArrowShards.from_hf(datasets.Dataset.from_dict(mem_dict()))
    out.put((i, str(src.root), src.version.hash, src.take(list(range(N))).to_pylist() == rows()))


@pytest.mark.parametrize("round_", range(3))  # a race shows up rarely: three fresh tries
def test_concurrent_ranks_write_one_cache(rd_cache, round_):
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_from_hf_in_child, args=(barrier, out, i)) for i in range(4)]
    for p in procs:
        p.start()
    got = sorted(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert len({(root, h) for _, root, h, _ in got}) == 1 and all(ok for *_, ok in got)
    assert [p.name for p in rd_cache.iterdir()] == [got[0][2]]  # one directory, no temporaries left
