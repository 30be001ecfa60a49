"""One storage contract, every store: the local store (memory maps, durable atomic writes), a
``pyarrow.fs`` store over ``LocalFileSystem`` (the remote code path without a network) and over
S3 (moto). Then the features written once over the store give the same results and the same
errors on local files and on S3, and the sources layer stays below the loader and torch."""

from __future__ import annotations

import json

import ast
import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
import xxhash

import resumable_data as rd
from resumable_data import _io
from resumable_data.sources import version as version_mod
from resumable_data.sources.files import (
    MANIFEST_NAME,
    canonical_schema,
    discover_shards,
    open_shard,
    read_shard_meta,
)
from resumable_data.sources.store import LOCAL, FileSystemStore, LocalStore, ShardStore, join, store_for

STORES = ["local", "pyarrow-local", "s3"]
SOURCES = Path(rd.__file__).parent / "sources"


def new_bucket(fs: pafs.FileSystem) -> str:
    bucket = f"store-{uuid.uuid4().hex[:16]}"
    fs.create_dir(bucket)
    return bucket


@pytest.fixture(params=STORES)
def store_root(request, tmp_path) -> tuple[ShardStore, str]:
    """(store, root directory on it), empty."""
    local_root = tmp_path / "store"
    local_root.mkdir()
    if request.param == "local":
        return LOCAL, LOCAL.resolve(local_root)
    if request.param == "pyarrow-local":
        return FileSystemStore(pafs.LocalFileSystem()), local_root.as_posix()
    fs = request.getfixturevalue("s3_fs")
    return FileSystemStore(fs), f"{new_bucket(fs)}/data"


def put(store: ShardStore, root: str, rel: str, data: bytes) -> str:
    """Write ``root/rel`` through the store (local directories are created first)."""
    path = join(root, rel)
    if store.local or isinstance(store.filesystem, pafs.LocalFileSystem):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    store.write_atomic(path, data)
    return path


def upload_dir(store: ShardStore, local_dir: Path, root: str) -> None:
    for p in sorted(local_dir.rglob("*")):
        if p.is_file():
            put(store, root, p.relative_to(local_dir).as_posix(), p.read_bytes())


# -- the contract --------------------------------------------------------------------------------
def test_store_for_picks_the_store(s3_fs):
    assert store_for(None) is LOCAL and store_for(pafs.LocalFileSystem()) is LOCAL
    remote = store_for(s3_fs)
    assert isinstance(remote, FileSystemStore) and remote.filesystem is s3_fs and not remote.local
    assert LOCAL.filesystem is None and LOCAL.local
    assert isinstance(LOCAL, ShardStore) and isinstance(remote, ShardStore)
    with pytest.raises(rd.ConfigError, match=r"filesystem='object': expected a pyarrow.fs.FileSystem"):
        store_for(object())


def test_write_stat_read_roundtrip(store_root):
    store, root = store_root
    p = put(store, root, "a.bin", b"first bytes")
    st = store.stat(p)
    assert st.size == len(b"first bytes")
    assert st.mtime is None or isinstance(st.mtime, float)
    if store.local:
        assert st.mtime == pytest.approx(os.stat(p).st_mtime)
    assert store.read_small(p, 1 << 10) == b"first bytes"
    store.write_atomic(p, b"second")  # replaced whole
    assert store.read_small(p, 1 << 10) == b"second" and store.stat(p).size == 6
    assert store.list_files(root) == ["a.bin"]  # no temporary file left behind


def test_missing_files_and_directories(store_root):
    store, root = store_root
    put(store, root, "sub/x.arrow", b"x")
    assert store.stat(join(root, "nope")) is None and store.read_small(join(root, "nope"), 10) is None
    assert store.stat(join(root, "sub")) is None  # a directory is not a file
    assert store.is_dir(root) and store.is_dir(join(root, "sub"))
    assert not store.is_dir(join(root, "sub/x.arrow")) and not store.is_dir(join(root, "nope"))


def test_read_small_is_bounded(store_root):
    store, root = store_root
    p = put(store, root, "m.json", b"y" * 100)
    assert store.read_small(p, 100) == b"y" * 100
    with pytest.raises(rd.DatasetIntegrityError, match=r"path=.*m\.json.*at most 99 bytes.*fix:"):
        store.read_small(p, 99)


def test_listing_is_recursive_sorted_and_relative(store_root):
    store, root = store_root
    for rel in ["z/1.arrow", "a/b/2.parquet", "m.txt", ".hidden.arrow", "a/.x.ipc", "a/c.feather"]:
        put(store, root, rel, b"-")
    assert store.list_files(root) == sorted(
        ["z/1.arrow", "a/b/2.parquet", "m.txt", ".hidden.arrow", "a/.x.ipc", "a/c.feather"])
    assert store.list_files(store.resolve(root + "/")) == store.list_files(root)
    assert discover_shards(root, store) == ["a/b/2.parquet", "a/c.feather", "z/1.arrow"]
    with pytest.raises(rd.ConfigError, match="path="):
        discover_shards(join(root, "missing"), store)


def test_resolve_is_canonical(store_root):
    store, root = store_root
    assert store.resolve(root) == root and store.resolve(root + "/") == root
    assert store.resolve(store.resolve(join(root, "a"))) == join(root, "a")


def test_hash_is_xxh3_128_of_the_bytes_whatever_the_store(store_root, tmp_path):
    store, root = store_root
    data = np.random.default_rng(3).bytes(_io.HASH_CHUNK_BYTES + 12345)  # crosses a chunk boundary
    p = put(store, root, "big.bin", data)
    seen = []
    digest = store.hash_file(p, seen.append)
    local_copy = tmp_path / "copy.bin"
    local_copy.write_bytes(data)
    assert digest == xxhash.xxh3_128_hexdigest(data) == _io.hash_file(local_copy)
    assert sum(seen) == len(data)
    assert store.hash_file(put(store, root, "empty.bin", b"")) == xxhash.xxh3_128_hexdigest(b"")


def test_random_access_sequential_and_memory_map(store_root):
    store, root = store_root
    data = bytes(range(256)) * 40
    p = put(store, root, "r.bin", data)
    with store.open_input_file(p) as f:
        assert f.size() == len(data) and f.read_at(10, 1000) == data[1000:1010]
    with store.open_input_stream(p) as f:
        assert f.read() == data
    mapped = store.memory_map(p)
    if store.local:
        assert mapped.read_buffer().to_pybytes() == data
        ident = store.identity(p, mapped)
        assert ident == store.identity(p) and ident.size == len(data) and ident.ino is not None
        mapped.close()
    else:
        assert mapped is None  # nothing is memory-mapped off this machine
        assert store.identity(p).size == len(data)


@pytest.mark.parametrize("fmt", ["arrow", "arrow_stream", "parquet"])
def test_shards_read_the_same_on_every_store(store_root, tmp_path, make_table, fmt):
    store, root = store_root
    t = make_table(300)
    rd.write_arrow_shards(t, tmp_path / "src", num_shards=2, rows_per_batch=64, format=fmt)
    upload_dir(store, tmp_path / "src", root)
    rel = discover_shards(root, store)
    assert rel == discover_shards(tmp_path / "src")
    for r in rel:
        want, got = read_shard_meta(tmp_path / "src" / r), read_shard_meta(join(root, r), store)
        assert (got.format, got.num_rows, canonical_schema(got.schema)) == (
            want.format, want.num_rows, canonical_schema(want.schema))
        shard = open_shard(join(root, r), store)
        rows = pa.Table.from_batches([shard.read_unit(k) for k, n in enumerate(shard.unit_rows) if n])
        ref = open_shard(tmp_path / "src" / r)
        assert rows.equals(pa.Table.from_batches([ref.read_unit(k) for k, n in enumerate(ref.unit_rows) if n]))
        assert (shard.whole is not None) == (store.local and fmt != "parquet")  # IPC: memory-mapped
        shard.close()


# -- features over the store: local files and S3 alike --------------------------------------------
def test_manifest_bytes_and_versions_are_the_same_on_both_stores(tmp_path, s3_fs, make_table):
    rd.write_arrow_shards(make_table(200), tmp_path / "d", num_shards=2)
    prefix = f"{new_bucket(s3_fs)}/d"
    upload_dir(store_for(s3_fs), tmp_path / "d", prefix)
    local, remote = rd.pin(tmp_path / "d"), rd.pin(prefix, filesystem=s3_fs)
    assert local.hash == remote.hash and remote.filesystem is s3_fs and local.filesystem is None
    with s3_fs.open_input_stream(f"{prefix}/{MANIFEST_NAME}") as f:
        on_s3 = json.loads(f.read())
    on_disk = json.loads((tmp_path / "d" / MANIFEST_NAME).read_bytes())
    # the same manifest but for what the store adds: each object's ETag (and the hash covering it)
    assert all(s["etag"] for s in on_s3["shards"]) and not any(s["etag"] for s in on_disk["shards"])
    for d in (on_s3, on_disk):
        d.pop("derived_hash")
        for s in d["shards"]:
            s.pop("etag")
    assert on_s3 == on_disk
    assert rd.DatasetVersion.load(prefix, filesystem=s3_fs) == rd.DatasetVersion.load(tmp_path / "d") == local


def test_oversized_manifest_is_refused_on_both_stores(tmp_path, s3_fs, make_table, monkeypatch):
    rd.write_arrow_shards(make_table(50), tmp_path / "d", num_shards=1)
    prefix = f"{new_bucket(s3_fs)}/d"
    upload_dir(store_for(s3_fs), tmp_path / "d", prefix)
    rd.pin(tmp_path / "d")
    rd.pin(prefix, filesystem=s3_fs)
    monkeypatch.setattr(version_mod, "MANIFEST_MAX_BYTES", 64)
    for directory, fs in [(tmp_path / "d", None), (prefix, s3_fs)]:
        with pytest.raises(rd.DatasetIntegrityError, match=r"rd-manifest\.json.*at most 64 bytes"):
            rd.DatasetVersion.load(directory, filesystem=fs)


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_schema_mismatch_error_is_identical_on_both_stores(tmp_path, s3_fs, make_table, fmt):
    t = make_table(100)
    other = t.drop_columns(["score"])
    rd.write_arrow_shards(t, tmp_path / "mixed" / "x", num_shards=1, format=fmt)
    rd.write_arrow_shards(other, tmp_path / "mixed" / "y", num_shards=1, format=fmt)
    prefix = f"{new_bucket(s3_fs)}/mixed"
    upload_dir(store_for(s3_fs), tmp_path / "mixed", prefix)
    where = [(tmp_path / "mixed", None), (prefix, s3_fs)]
    for act in (lambda p, fs: rd.pin(p, filesystem=fs),
                lambda p, fs: rd.ArrowShards(p, filesystem=fs, unpinned="allow")):
        messages = []
        for path, fs in where:
            with pytest.raises(rd.ConfigError) as exc:
                act(path, fs)
            messages.append(str(exc.value))
        local, remote = messages
        assert local == remote
        ext = "parquet" if fmt == "parquet" else "arrow"
        assert local.startswith(f"shard='y/shard-00000.{ext}': expected the schema of the first shard "
                                f"'x/shard-00000.{ext}'")
        first, second = (canonical_schema(read_shard_meta(p).schema)
                         for p in sorted((tmp_path / "mixed").rglob(f"*.{ext}")))
        assert f"({first!r})" in local and local.endswith(f"it has {second!r}")
        assert "fix: rewrite" in local


# Version hashes computed before the storage layer was unified (pyarrow 26, pinned in
# constraints.txt): the digest is xxh3-128 of the bytes, whatever reads them. A pyarrow upgrade
# that changes the IPC writer's bytes would change these (the hashes of the files, not the code).
GOLDEN = {
    "arrow": ("9e4e02cb5d00aa875552a01231fb0a57", "64a2f5529e1557b3835197126785688d",
              ["4eec41b0f12eaf2bd3bd18cf2b3ddecf", "bfcd35ee87108ab55f03dba40f0cf2f1",
               "85e0a916489441c8e912e4c59eee141c"]),
    "arrow_stream": ("4a9a28b4cce2291b6e09c2f36f5942fa", "7dbf7847f3da58b0baba670c3429f01f",
                     ["5d02e53d7997eac2b1221ad3844adbe6", "a9416b56854771eadba7e6d0acdc0a75",
                      "584fe1033ef2e892f647c59f222e1e29"]),
}


@pytest.mark.parametrize("fmt", sorted(GOLDEN))
def test_golden_version_hashes_on_both_stores(tmp_path, s3_fs, make_table, fmt):
    if pa.__version__.split(".")[0] != "26":
        pytest.skip("golden bytes were written by pyarrow 26")
    content, size, shard_hashes = GOLDEN[fmt]
    d = tmp_path / fmt
    rd.write_arrow_shards(make_table(1000, strings=True), d, num_shards=3, rows_per_batch=100, format=fmt)
    prefix = f"{new_bucket(s3_fs)}/{fmt.replace('_', '-')}"
    upload_dir(store_for(s3_fs), d, prefix)
    for path, fs in [(d, None), (prefix, s3_fs)]:
        v = rd.pin(path, filesystem=fs)
        assert v.hash == content and [s.content_hash for s in v.shards] == shard_hashes
        assert rd.pin(path, filesystem=fs, hash="size", save=False).hash == size


# -- layering: sources never import the loader, the checkpoint layer or torch ------------------------
def test_sources_import_no_loader_checkpoint_or_torch():
    banned = ("resumable_data.loader", "resumable_data.checkpoint", "torch")
    found = []
    for path in sorted(SOURCES.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # function bodies too
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.level == 0 else []
            else:
                continue
            found += [f"{path.name}:{node.lineno} {n}" for n in names
                      if any(n == b or n.startswith(b + ".") for b in banned)]
    assert found == []


def test_importing_the_sources_loads_no_loader_or_torch():
    """Import the sources (hf included) without the package's ``__init__`` (which gathers every
    layer for ``import resumable_data``) and check what came with them."""
    code = f"""
import sys, types
pkg = types.ModuleType("resumable_data")
pkg.__path__ = [{str(SOURCES.parent)!r}]
sys.modules["resumable_data"] = pkg
import resumable_data.sources, resumable_data.sources.hf
bad = sorted(m for m in sys.modules if m == "torch" or m.startswith(("torch.", "resumable_data.loader",
                                                                      "resumable_data.checkpoint")))
print(bad)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_cache_dir_is_shared_below_both_layers(monkeypatch, tmp_path):
    from resumable_data._cache import cache_dir
    from resumable_data.loader.stream import cache_dir as loader_cache_dir
    from resumable_data.sources import hf

    assert loader_cache_dir is cache_dir
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c" and hf.default_cache_root() == tmp_path / "c" / "hf-in-memory"
    monkeypatch.delenv("RD_CACHE_DIR")
    assert cache_dir() == Path.home() / ".cache" / "resumable_data"
    assert isinstance(LocalStore(), ShardStore)
