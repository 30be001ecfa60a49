"""Read-ahead under the window shuffle over read units (``window_blocks="read_units"``, the reason
that order exists): each unit is fetched about once an epoch with a cache of a few windows, where
record blocks spread a unit over many windows and fetch it again; the same batches as the local
files; a bit-exact resume. moto's S3 server behind ``benchmarks.s3_proxy.S3Proxy`` (GET counts)."""

from __future__ import annotations

import pytest

import resumable_data as rd

pytest.importorskip("moto.server")
from tests.sources.conftest import remote_copies, s3_client
from tests.sources.test_read_ahead import FAST, N, batches, table

UNITS = 100  # 20-row record batches in 4 shards (the data fixture)
BUDGET = rd.ReadAhead(lookahead=4, concurrency=4, cache_bytes=20_000)  # about 24 units: 4-5 windows


@pytest.fixture(scope="module")
def data(endpoint, tmp_path_factory):
    """{format: (local dir, prefix)}: 100 units of 20 rows in 4 shards, pinned on S3."""
    return remote_copies(endpoint, table(), tmp_path_factory, "ahead-units", ("arrow", "parquet"))


def _loader(src, blocks, ahead=BUDGET, workers=0):
    return rd.DataLoader(src, batch_size=32, seed=3, sharding=rd.Sharding(1, 0), shuffle=True, shuffle_window=100,
                         window_blocks=blocks, read_ahead=ahead, num_workers=workers)


def _remote(endpoint, prefix):
    return rd.ArrowShards(prefix, filesystem=s3_client(endpoint), retries=FAST)


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_each_unit_is_fetched_about_once_an_epoch(data, proxy, fmt):
    local, prefix = data[fmt]
    fetched = {}
    for blocks in ("read_units", "records"):
        loader = _loader(_remote(proxy.endpoint, prefix), blocks)
        proxy.reset()
        want = batches(_loader(rd.ArrowShards(local), blocks, ahead=None), N // 32)
        assert batches(loader, N // 32) == want
        loader.read_ahead.wait_idle(30)
        fetched[blocks] = proxy.counts["GET"]
    assert fetched["read_units"] <= UNITS * 1.25, fetched  # the last steps read the next epoch ahead too
    assert fetched["records"] >= UNITS * 1.5, fetched  # what the read-unit window saves (the test can fail)


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_is_bit_exact(data, endpoint, workers):
    local, prefix = data["parquet"]
    ref = batches(_loader(rd.ArrowShards(local), "read_units", ahead=None), 2 * N // 32)
    first = _loader(_remote(endpoint, prefix), "read_units", workers=workers)
    got = batches(first, 23)
    state = first.state_dict()
    del first
    resumed = _loader(_remote(endpoint, prefix), "read_units", workers=workers)
    resumed.load_state_dict(state)
    assert got == ref[:23]
    assert batches(resumed, 2 * N // 32 - 23) == ref[23:]  # every remaining batch, in order, into epoch 2
