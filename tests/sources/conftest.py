"""Shared test data for the sources layer (built in tmp_path; no downloads), and a local
S3-compatible endpoint (moto's server mode on a free port) for the remote-store tests."""

from __future__ import annotations

import logging
import socket

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import resumable_data as rd
from tests.sources.typed_columns import types_table


def make_table(n: int, seed: int = 0, *, strings: bool = False) -> pa.Table:
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 20, n)
    off = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lens, out=off[1:])
    cols = {
        "tokens": pa.ListArray.from_arrays(pa.array(off), pa.array(rng.integers(0, 1000, off[-1]).astype(np.int32))),
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "score": pa.array(rng.random(n).astype(np.float32)),
    }
    if strings:
        cols["text"] = pa.array([f"row-{i}" if i % 7 else None for i in range(n)])
    return pa.table(cols)


@pytest.fixture
def table() -> pa.Table:
    return make_table(1000, strings=True)


@pytest.fixture(name="make_table")
def make_table_fixture():
    return make_table


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def endpoint():
    """``host:port`` of a moto S3 server for this test module (skipped without moto)."""
    moto_server = pytest.importorskip("moto.server")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3_fs(endpoint) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", access_key="testing",
                             secret_key="testing", region="us-east-1", allow_bucket_creation=True)


def s3_client(endpoint: str) -> pafs.S3FileSystem:
    """An S3 client of ``endpoint`` whose own retries are off (rd's retries are the ones under test),
    with short timeouts so a store that went away fails fast."""
    return pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", access_key="testing",
                             secret_key="testing", region="us-east-1", allow_bucket_creation=True,
                             retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1),
                             connect_timeout=1, request_timeout=5)


def setup_client(endpoint: str) -> pafs.S3FileSystem:
    """An S3 client for a test's own set-up (copying objects, tampering with one): retried and
    patient, so a loaded machine slows the set-up down instead of failing it (``s3_client`` is the
    impatient one the code under test gets)."""
    return pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", access_key="testing",
                             secret_key="testing", region="us-east-1", allow_bucket_creation=True,
                             retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=5),
                             connect_timeout=10, request_timeout=120)


def upload(fs: pafs.FileSystem, local_dir, prefix: str) -> None:
    """Copy the regular files of ``local_dir`` to ``prefix`` (``bucket/path``), creating the bucket."""
    fs.create_dir(prefix.split("/")[0])
    for p in sorted(local_dir.iterdir()):
        if p.is_file():
            with fs.open_output_stream(f"{prefix}/{p.name}") as out:
                out.write(p.read_bytes())


def remote_copies(endpoint: str, table: pa.Table, tmp_path_factory, name: str, formats) -> dict:
    """{format: (local dir, prefix)}: ``table`` written as 4 shards of 20-row units per format,
    uploaded under ``<name>-<format>/data`` and pinned there."""
    fs = s3_client(endpoint)
    out = {}
    for fmt in formats:
        d = tmp_path_factory.mktemp(fmt)
        rd.write_arrow_shards(table, d, num_shards=4, rows_per_batch=20, format=fmt)
        prefix = f"{name}-{fmt.replace('_', '-')}/data"
        upload(fs, d, prefix)
        rd.pin(prefix, filesystem=fs)
        out[fmt] = (d, prefix)
    return out


@pytest.fixture
def proxy(endpoint):
    """A latency / fault proxy (benchmarks/s3_proxy.py) in front of this module's moto server."""
    from benchmarks.s3_proxy import S3Proxy

    p = S3Proxy(endpoint)
    yield p
    p.close()


# -- sources the gather tests share (test_gather.py, test_gather_plan.py, test_gather_rows.py) --------
@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    rng = np.random.default_rng(7)
    n = 3000
    lens = rng.integers(0, 30, n)
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    vals = rng.integers(-50, 50, off[-1])
    table = pa.table({
        "tok32": pa.ListArray.from_arrays(pa.array(off.astype(np.int32)), pa.array(vals.astype(np.int32))),
        "tok16": pa.LargeListArray.from_arrays(pa.array(off), pa.array(vals.astype(np.int16))),
        "f64": pa.array(rng.random(n)),
        "u8": pa.array(rng.integers(0, 255, n).astype(np.uint8)),
        "ts": pa.array(rng.integers(0, 10**9, n), type=pa.timestamp("ms")),
        "maybe": pa.array([None if i % 5 == 0 else i for i in range(n)], type=pa.int64()),
        "flag": pa.array(rng.random(n) < 0.5),
    })
    out = {}
    for k, (shards, batch) in enumerate([(1, None), (5, 97), (3, 1000)]):
        d = tmp_path_factory.mktemp(f"g{k}")
        rd.write_arrow_shards(table, d, num_shards=shards, rows_per_batch=batch)
        out[k] = rd.ArrowShards(d)
    return table, out


@pytest.fixture(scope="module")
def typed_sources(tmp_path_factory):
    table = types_table(2500)
    out = {}
    for k, (shards, batch) in enumerate([(1, None), (4, 1000), (3, 61)]):
        d = tmp_path_factory.mktemp(f"t{k}")
        rd.write_arrow_shards(table, d, num_shards=shards, rows_per_batch=batch)
        out[k] = rd.ArrowShards(d, unpinned="allow")
    return table, out
