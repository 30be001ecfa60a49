"""rd.prepare's output is a pure function of (input, function, settings): processes and Ray agree."""

from __future__ import annotations

import pyarrow as pa
import pytest

import resumable_data as rd
from tests.sources.prepare.conftest import shard_bytes

PIECE = 40_000  # input bytes per shard: the corpus (~450 kB) becomes ~12 shards


def _prepare(corpus, out, tokenizer, **kw):
    return rd.prepare(corpus, out, tokenizer=tokenizer, keep_columns=["id"], bytes_per_shard=PIECE,
                      progress=False, **kw)


def test_one_two_and_four_processes_write_identical_shards(tmp_path, corpus, tokenizer, texts):
    results = {n: _prepare(corpus, tmp_path / f"out{n}", tokenizer, num_proc=n) for n in (1, 2, 4)}
    hashes = {n: r.version.hash for n, r in results.items()}
    assert len(set(hashes.values())) == 1, hashes
    files = {n: shard_bytes(tmp_path / f"out{n}") for n in results}
    assert len(files[1]) >= 8  # enough pieces for the pool to finish them out of order
    assert files[1] == files[2] == files[4]
    # and the content is the tokenizer's encoding of every non-empty document, in input order
    table = pa.concat_tables(pa.ipc.open_file(pa.BufferReader(b)).read_all() for b in files[1].values())
    expected = [(i, tokenizer.encode(t).ids) for i, t in enumerate(texts) if t]
    assert list(zip(table.column("id").to_pylist(), table.column("tokens").to_pylist())) == expected
    assert results[1].tokens == sum(len(e) for _, e in expected)
    assert results[1].documents == len(expected) and results[1].dropped == 1


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.mark.ray
def test_ray_engine_writes_the_same_shards_as_the_process_pool(tmp_path, corpus, tokenizer, ray_cluster):
    assert ray_cluster.is_initialized()
    local = _prepare(corpus, tmp_path / "local", tokenizer, num_proc=2)
    on_ray = _prepare(corpus, tmp_path / "ray", tokenizer, engine="ray")
    assert on_ray.version.hash == local.version.hash
    assert shard_bytes(tmp_path / "ray") == shard_bytes(tmp_path / "local")
    assert on_ray.tokens == local.tokens and on_ray.documents == local.documents
