"""Read-ahead over a remote store (sources/read_ahead, loader wiring): the same batches as without
it, at 0 and 2 workers, a bit-exact resume, a store that goes down and comes back, an object
replaced mid-run refused (never a wrong sample), and its knobs validated. moto's S3 server on
127.0.0.1, behind ``benchmarks.s3_proxy.S3Proxy`` (request counts, faults)."""

from __future__ import annotations

import logging

import os

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import resumable_data as rd

pytest.importorskip("moto.server")
from tests.sources.conftest import remote_copies, s3_client, setup_client  # noqa: E402

N = 2000
FAST = rd.Retries(attempts=3, base_delay=0.01, max_delay=0.02)
FORMATS = ("arrow", "arrow_stream", "parquet")


def table(n: int = N) -> pa.Table:
    rng = np.random.default_rng(5)
    lens = rng.integers(1, 9, n)
    off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    toks = pa.ListArray.from_arrays(pa.array(off), pa.array(rng.integers(0, 1 << 20, off[-1]).astype(np.int32)))
    return pa.table({"id": pa.array(np.arange(n, dtype=np.int64)), "tokens": toks})


@pytest.fixture(scope="module")
def data(endpoint, tmp_path_factory):
    """{format: (local dir, prefix)}: 100 units of 20 rows in 4 shards, pinned on S3."""
    return remote_copies(endpoint, table(), tmp_path_factory, "ahead", FORMATS)


def batches(loader, n, out=None):
    """The next ``n`` batches (ids and padded tokens as lists), appended to ``out``."""
    out = [] if out is None else out
    while len(out) < n:
        for b in loader:
            out.append((b["id"].tolist(), b["tokens"].tolist(), b["tokens_lengths"].tolist()))
            if len(out) == n:
                break
    return out


ORDERS = {
    "global": dict(shuffle=True),
    "window": dict(shuffle=True, shuffle_window=300),
    "window_units": dict(shuffle=True, shuffle_window=300, window_blocks="read_units"),
    "sequential": {},
}


def loader_over(src, order="window", ahead=None, workers=0, **kw):
    return rd.DataLoader(src, batch_size=32, seed=3, sharding=rd.Sharding(1, 0), num_workers=workers,
                         read_ahead=ahead, **ORDERS[order], **kw)


def remote(endpoint, prefix, retries=FAST):
    return rd.ArrowShards(prefix, filesystem=s3_client(endpoint), retries=retries)


STEPS = 2 * N // 32  # two epochs (the tail dropped)
RB = rd.ReadUnit.RECORD_BATCH
AHEAD = rd.ReadAhead(lookahead=4, concurrency=4, cache_bytes=60_000, unit=RB)  # about 70 of the 100 units
SHARDS = rd.ReadAhead(lookahead=4, concurrency=4, cache_bytes=30_000, unit=rd.ReadUnit.SHARD)  # one of the 4 shards


@pytest.fixture(scope="module")
def reference(data):
    """The batches of a loader over the local copy (same pinned version: same stream)."""
    cache = {}

    def ref(fmt, order, steps=STEPS):
        if (fmt, order, steps) not in cache:
            cache[fmt, order, steps] = batches(loader_over(rd.ArrowShards(data[fmt][0]), order), steps)
        return cache[fmt, order, steps]

    return ref


@pytest.mark.parametrize("unit", [rd.ReadUnit.RECORD_BATCH, rd.ReadUnit.SHARD])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("order", ["global", "window", "sequential"])
def test_same_batches_as_local_files(data, endpoint, reference, fmt, order, unit):
    _, prefix = data[fmt]
    steps = STEPS // 2 if order == "global" else STEPS  # a global shuffle reads most units every step
    loader = loader_over(remote(endpoint, prefix), order, AHEAD if unit is rd.ReadUnit.RECORD_BATCH else SHARDS)
    assert batches(loader, steps) == reference(fmt, order, steps)
    stats = loader.read_ahead.stats
    assert stats["units"] > 0 and stats["failed"] == 0
    if unit is rd.ReadUnit.RECORD_BATCH or order == "sequential":
        assert stats["evicted"] > 0  # the budget is smaller than the dataset: Belady evicted
    # (whole shards: every step of a window or global shuffle reads all four shards; those of steps
    # in flight are never evicted, so the cache holds all four past its budget)


@pytest.mark.parametrize("order", ["window", "window_units", "global"])
def test_read_ahead_over_a_record_block_window_names_window_blocks(data, endpoint, order, caplog):
    """A record-block window re-fetches units under a small cache (tests/sources/test_read_ahead_units.py
    counts it): the loader says so at INFO, naming the option, and only for that order."""
    with caplog.at_level(logging.INFO, logger="resumable_data.loader.read_ahead"):
        loader = loader_over(remote(endpoint, data["arrow"][1]), order, AHEAD)
    assert ("window_blocks=rd.WindowBlocks.READ_UNITS" in caplog.text) == (order == "window")
    loader.read_ahead.close()


# AUTO under AHEAD's budget: the 4 shards (about 22 KB each) of a window or global shuffle's first
# 4 steps take more than half of it, a sequential order's first 4 steps read one shard
AUTO_PICKS = {"global": rd.ReadUnit.RECORD_BATCH, "window": rd.ReadUnit.RECORD_BATCH, "sequential": rd.ReadUnit.SHARD}


@pytest.mark.parametrize("budget", ["small", "whole"])
@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
@pytest.mark.parametrize("order", ["global", "window", "sequential"])
def test_auto_unit_gives_the_same_batches_as_local_files(data, endpoint, reference, fmt, order, budget):
    """``rd.ReadUnit.AUTO`` (the default) resolves to whole shards or record batches by the rule
    (``unit_choice``), shows its choice, and delivers the local copy's batches either way."""
    _, prefix = data[fmt]
    cache_bytes = AHEAD.cache_bytes if budget == "small" else 1 << 20  # 1 MiB: half of it holds the dataset
    ahead = rd.ReadAhead(lookahead=4, concurrency=4, cache_bytes=cache_bytes)
    assert ahead.unit is rd.ReadUnit.AUTO
    steps = STEPS // 2 if order == "global" else STEPS
    loader = loader_over(remote(endpoint, prefix), order, ahead)
    want = AUTO_PICKS[order] if budget == "small" else rd.ReadUnit.SHARD
    fetcher = loader.read_ahead
    assert fetcher.unit is want and fetcher.choice is not None and fetcher.choice.unit is want
    assert f"unit={want.value} (auto: " in repr(fetcher)
    assert batches(loader, steps) == reference(fmt, order, steps)
    assert fetcher.stats["units"] > 0 and fetcher.stats["failed"] == 0


def test_explicit_unit_is_kept(data, endpoint):
    _, prefix = data["arrow"]
    for unit in (rd.ReadUnit.RECORD_BATCH, rd.ReadUnit.SHARD):
        fetcher = loader_over(remote(endpoint, prefix), "global", rd.ReadAhead(lookahead=4, unit=unit)).read_ahead
        assert fetcher.unit is unit and fetcher.choice is None


def test_sequential_reads_every_unit_once_per_epoch(data, endpoint, proxy, reference):
    _, prefix = data["arrow"]
    src = remote(proxy.endpoint, prefix)
    loader = loader_over(src, "sequential", rd.ReadAhead(lookahead=8, concurrency=8, cache_bytes=1 << 20, unit=RB))
    proxy.reset()
    assert batches(loader, N // 32) == reference("arrow", "sequential", N // 32)
    units = N // 20
    loader.read_ahead.wait_idle(30)
    stats = loader.read_ahead.stats
    assert stats["units"] <= units  # each unit fetched at most once
    assert proxy.counts["GET"] == stats["requests"]  # no unit also read by the loop itself
    # neighbouring record batches needed within lookahead // 4 steps share one ranged GET
    assert stats["requests"] * 2 <= stats["units"]


def test_a_joined_request_reads_the_neighbours_bytes(data, endpoint):
    _, prefix = data["parquet"]
    src = remote(endpoint, prefix)
    assert src.fetch_run(3, 6) == b"".join(src.fetch_unit(k) for k in range(3, 7))
    assert src.fetch_run(4, 4) == src.fetch_unit(4)
    for first, last in [(24, 25), (6, 3), (-1, 2)]:  # 25 units per shard: 24 and 25 lie in two shards
        with pytest.raises(rd.ConfigError, match="first, last"):
            src.fetch_run(first, last)


@pytest.mark.parametrize("order", ["window", "global"])
def test_every_unit_the_loop_reads_was_read_ahead(data, proxy, reference, order):
    """Under a budget smaller than the dataset, no step reads a unit itself (each GET is the
    fetcher's): the units of steps in flight are fetched first, whatever else waits."""
    _, prefix = data["arrow"]
    loader = loader_over(remote(proxy.endpoint, prefix), order, rd.ReadAhead(lookahead=16, cache_bytes=10_000, unit=RB))
    proxy.reset()
    steps = N // 32
    assert batches(loader, steps) == reference("arrow", order, STEPS)[:steps]
    loader.read_ahead.wait_idle(30)
    assert proxy.counts["GET"] == loader.read_ahead.stats["requests"]
    assert loader.read_ahead.stats["evicted"] > 0


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(("fmt", "ahead"), [("arrow", AHEAD), ("parquet", AHEAD), ("arrow", SHARDS)],
                         ids=["arrow-record_batch", "parquet-record_batch", "arrow-shard"])
def test_resume_is_bit_exact(data, endpoint, reference, workers, fmt, ahead):
    _, prefix = data[fmt]
    ref = reference(fmt, "window")
    first = loader_over(remote(endpoint, prefix), "window", ahead, workers)
    got = batches(first, 37)
    state = first.state_dict()
    del first
    resumed = loader_over(remote(endpoint, prefix), "window", ahead, workers)
    resumed.load_state_dict(state)
    rest = batches(resumed, STEPS - 37)
    assert got == ref[:37]
    assert rest == ref[37:]  # every remaining batch, in order


@pytest.mark.parametrize("workers", [0, 2])
def test_store_down_then_back_continues_exactly(data, proxy, reference, workers):
    _, prefix = data["arrow"]
    ref = reference("arrow", "window")
    loader = loader_over(remote(proxy.endpoint, prefix), "window", AHEAD, workers)
    got = batches(loader, 20)
    proxy.down = True
    with pytest.raises(rd.StoreUnavailableError):
        batches(loader, STEPS, got)  # units already read ahead may still deliver a few batches
    state = loader.state_dict()
    assert state["cursor"]["delivered"] == len(got) < STEPS
    proxy.down = False
    batches(loader, STEPS, got)  # a new iter(loader) continues from the cursor
    assert got == ref
    fresh = loader_over(remote(proxy.endpoint, prefix), "window", AHEAD, workers)
    fresh.load_state_dict(state)
    k = state["cursor"]["delivered"]
    assert batches(fresh, STEPS - k) == ref[k:]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(
    ("fmt", "ahead"),
    [
        ("parquet", rd.ReadAhead(lookahead=2, concurrency=2, cache_bytes=4_000, unit=RB)),
        ("arrow", rd.ReadAhead(lookahead=2, concurrency=1, cache_bytes=1, unit=rd.ReadUnit.SHARD)),
    ],
    ids=["record_batch", "shard"],
)
def test_object_replaced_mid_run_is_refused(data, endpoint, reference, workers, fmt, ahead):
    local, prefix = data[fmt]
    fs = setup_client(endpoint)  # the set-up's copies and the tampering: patient (the loader's client is not)
    bucket = f"replaced-{fmt}-{workers}"
    fs.create_dir(bucket)
    for p in sorted(local.iterdir()):
        if not p.name.startswith("."):
            pafs.copy_files(f"{prefix}/{p.name}", f"{bucket}/data/{p.name}", source_filesystem=fs, destination_filesystem=fs)
    rd.pin(f"{bucket}/data", filesystem=fs)
    ref = reference(fmt, "sequential")
    loader = loader_over(remote(endpoint, f"{bucket}/data"), "sequential", ahead, workers)
    got = batches(loader, 3)
    shards = sorted(p.name for p in local.iterdir() if p.suffix == f".{fmt}")
    victim = f"{bucket}/data/{shards[-1]}"  # the last shard: not yet read ahead
    with fs.open_input_stream(victim) as f:
        raw = bytearray(f.read())
    raw[len(raw) // 2] ^= 0xFF  # same size, other bytes: another ETag
    with fs.open_output_stream(victim) as f:
        f.write(bytes(raw))
    with pytest.raises(rd.DatasetIntegrityError, match="changed after this source opened it"):
        batches(loader, STEPS, got)
    assert len(got) > 3 and got == ref[: len(got)]  # every batch delivered is right; none from the new bytes


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_whole_shard_prefetch_reads_each_object_once_per_sequential_epoch(data, proxy, reference, fmt):
    local, prefix = data[fmt]
    loader = loader_over(remote(proxy.endpoint, prefix), "sequential",
                         rd.ReadAhead(lookahead=8, concurrency=4, cache_bytes=1 << 20, unit=rd.ReadUnit.SHARD))
    proxy.reset()
    steps = N // 32
    assert batches(loader, steps) == reference(fmt, "sequential", STEPS)[:steps]
    loader.read_ahead.wait_idle(30)
    shards = len([p for p in local.iterdir() if p.suffix in (".arrow", ".parquet")])
    assert shards == 4
    # the next epoch's first steps are read ahead too (their shard again): at most one extra
    assert shards <= loader.read_ahead.stats["units"] <= shards + 1
    assert proxy.counts["GET"] == loader.read_ahead.stats["units"] == loader.read_ahead.stats["requests"]
    size = sum(p.stat().st_size for p in local.iterdir() if p.suffix in (".arrow", ".parquet"))
    assert size <= proxy.bytes_out <= size + max(p.stat().st_size for p in local.iterdir())


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("unit", [rd.ReadUnit.RECORD_BATCH, rd.ReadUnit.SHARD])
def test_the_window_sized_by_bytes_changes_requests_not_batches(data, proxy, workers, unit):
    """``lookahead=None`` (read_ahead/depth.py) plans past 64 steps within the epoch:
    the same batches as the local copy across an epoch's end, a resume at step 100 equal to the
    uninterrupted run, and with a budget holding the dataset each object (or unit) read once over
    an epoch and the floor of the next (resident already: nothing of the next epoch read again)."""
    local, prefix = data["arrow"]
    steps = N // 8  # 250 steps an epoch: the window reaches past the 64-step floor

    def over(src, ahead=rd.ReadAhead(lookahead=None, cache_bytes=1 << 20, unit=unit)):
        return rd.DataLoader(src, batch_size=8, seed=3, sharding=rd.Sharding(1, 0), num_workers=workers,
                             read_ahead=ahead)

    ref = batches(over(rd.ArrowShards(local), None), steps + 40)
    loader = over(remote(proxy.endpoint, prefix))
    proxy.reset()
    assert batches(loader, steps) == ref[:steps]
    loader.read_ahead.wait_idle(30)
    stats = loader.read_ahead.stats
    assert stats["window_steps"] > 100  # deeper than the floor of 64
    expected = 4 if unit is rd.ReadUnit.SHARD else N // 20
    assert stats["units"] == expected and stats["evicted"] == 0  # each once, none of the next epoch again
    assert proxy.counts["GET"] == stats["requests"]
    assert batches(loader, 40) == ref[steps:]  # the next epoch
    first = over(remote(proxy.endpoint, prefix))
    head = batches(first, 100)
    state = first.state_dict()
    del first
    resumed = over(remote(proxy.endpoint, prefix))
    resumed.load_state_dict(state)
    assert head == ref[:100]
    assert batches(resumed, steps - 100 + 40) == ref[100:]  # every remaining batch, in order


PACKING = rd.Packing(16, "best_fit", window=40, eos_id=0)
PACKED_KEYS = ("input_ids", "labels", "position_ids", "document_ids", "cu_seqlens")


def packed_batches(loader, n, out=None):
    """The next ``n`` packed batches (every tensor as a list), appended to ``out``."""
    out = [] if out is None else out
    while len(out) < n:
        for b in loader:
            out.append(tuple(b[k].tolist() for k in PACKED_KEYS))
            if len(out) == n:
                break
    return out


@pytest.fixture(scope="module")
def packed_reference(data):
    return packed_batches(loader_over(rd.ArrowShards(data["arrow"][0]), "window", packing=PACKING), 40)


@pytest.mark.parametrize("unit", list(rd.ReadUnit))
@pytest.mark.parametrize("workers", [0, 2])
def test_packed_steps_are_read_ahead_and_resume_bit_exact(data, proxy, packed_reference, unit, workers):
    """With packing=, the units of future steps come from the packer's step -> documents mapping:
    the same batches as the local copy, every GET the fetcher's, and a resume at step 17 equal to
    the uninterrupted run batch for batch."""
    _, prefix = data["arrow"]
    ahead = rd.ReadAhead(lookahead=4, concurrency=4, cache_bytes=60_000, unit=unit)
    loader = loader_over(remote(proxy.endpoint, prefix), "window", ahead, workers, packing=PACKING)
    proxy.reset()
    got = packed_batches(loader, 17)
    loader.read_ahead.wait_idle(30)
    assert loader.read_ahead.stats["units"] > 0
    assert proxy.counts["GET"] == loader.read_ahead.stats["requests"]  # no step read a unit itself
    state = loader.state_dict()
    del loader
    resumed = loader_over(remote(proxy.endpoint, prefix), "window", ahead, workers, packing=PACKING)
    resumed.load_state_dict(state)
    rest = packed_batches(resumed, 40 - 17)
    assert got == packed_reference[:17]
    assert rest == packed_reference[17:]  # every remaining batch, in order


def test_read_unit_must_be_the_enum():
    with pytest.raises(rd.ConfigError, match="unit"):
        rd.ReadAhead(unit="shard")


@pytest.mark.parametrize("bad", [dict(lookahead=0), dict(concurrency=0), dict(cache_bytes=0),
                                 dict(lookahead=1.5), dict(cache_dir="/nonexistent/dir"), dict(concurrency=True)])
def test_knobs_are_validated(bad):
    with pytest.raises(rd.ConfigError, match=next(iter(bad))):
        rd.ReadAhead(**bad)


def test_read_ahead_needs_remote_shards(data, endpoint):
    local, prefix = data["arrow"]
    with pytest.raises(rd.ConfigError, match="read_ahead="):
        loader_over(rd.ArrowShards(local), ahead=rd.ReadAhead())
    with pytest.raises(rd.ConfigError, match="an rd.ReadAhead"):
        loader_over(remote(endpoint, prefix), ahead=dict(lookahead=4))


def test_cache_directory_is_fresh_and_removed(data, endpoint, tmp_path):
    _, prefix = data["arrow"]
    loader = loader_over(remote(endpoint, prefix), "sequential", rd.ReadAhead(cache_dir=tmp_path))
    root = loader.read_ahead.cache.root
    assert os.path.dirname(root) == str(tmp_path)
    batches(loader, 5)
    assert any(n.endswith(".unit") for n in os.listdir(root))
    del loader
    import gc
    import time
    gc.collect()
    deadline = time.monotonic() + 60  # reads still in flight at close end on their own, then remove it
    while os.path.exists(root) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(root)


_KILLED = (
    "import sys, time, pyarrow.fs as pafs, resumable_data as rd\n"
    "endpoint, prefix, parent = sys.argv[1:]\n"
    "fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme='http', access_key='testing',\n"
    "                       secret_key='testing', region='us-east-1')\n"
    "loader = rd.DataLoader(rd.ArrowShards(prefix, filesystem=fs), batch_size=32, seed=3, num_workers=1,\n"
    "                       read_ahead=rd.ReadAhead(cache_dir=parent))\n"
    "it = iter(loader); next(it); next(it)\n"
    "print(loader.read_ahead.cache.root, flush=True)\n"
    "time.sleep(120)\n"
)


def test_a_killed_jobs_cache_directory_is_removed_by_the_next_loader(data, endpoint, tmp_path, monkeypatch):
    """SIGKILL (preemption, the OOM killer) skips close(): the directory it left, units and all, is
    removed by the resumed job's loader, at its start or, while the killed job's worker still holds
    the lock, by a later sweep (SWEEP_AGAIN_S, 2x and 4x that, then every 4x that); the live loader's own
    directory is kept. The killed job's worker was waiting for units its dead fetcher had promised: it
    gives them up within OWNER_CHECK_S (it waited WAIT_S, 120 s, a unit: CI ran past the sweeps)."""
    import signal
    import subprocess
    import sys
    import time

    from resumable_data.sources.read_ahead import fetcher

    monkeypatch.setattr(fetcher, "SWEEP_AGAIN_S", 4.0)  # sweeps at 4, 12, 28 s, then every 16 s: torch checks every 5 s
    _, prefix = data["arrow"]
    repo = os.path.dirname(os.path.dirname(rd.__file__))
    p = subprocess.Popen([sys.executable, "-c", _KILLED, endpoint, prefix, str(tmp_path)], stdout=subprocess.PIPE,
                         text=True, env={**os.environ, "PYTHONPATH": repo})
    dead = p.stdout.readline().strip()
    assert any(n.endswith(".unit") for n in os.listdir(dead))
    p.send_signal(signal.SIGKILL)
    p.wait()
    p.stdout.close()
    live = loader_over(remote(endpoint, prefix), "sequential", rd.ReadAhead(cache_dir=tmp_path))
    # sweeps at 4, 12, 28, 44, 60, 76, 92 s: 60 s left the killed job's worker 44 s to let go (the sweep
    # at 60 s raced the deadline); 100 s leaves it 92 s. Still short of the bugs: sweeps that stop
    # after the third never remove it, and a worker waiting WAIT_S (120 s) a promised unit lets go
    # after the last sweep before 100 s
    deadline = time.monotonic() + 100
    while os.path.exists(dead) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not os.path.exists(dead)
    assert os.listdir(tmp_path) == [os.path.basename(live.read_ahead.cache.root)]


def test_a_loader_collected_while_the_decoded_map_is_locked_never_deadlocks(data, endpoint, reference):
    """A loader with read-ahead, rebuilt each epoch, is collected by the cycle collector, which can
    run inside any allocation, also one a thread makes while it holds the decoded-unit map's lock
    (``touched`` looks up and publishes plan rows under it). Its finalizer closes the fetcher, which
    detaches the cache from the source: that took the map's lock again and hung the process. The
    detach now queues its drop for the map's next call; the batches after it are the reference's."""
    import gc
    import threading

    from resumable_data.sources.decoded_units import process_units

    src = remote(endpoint, data["parquet"][1])
    loader = loader_over(src, "global", AHEAD)
    first = batches(loader, 3)
    loader._cycle = loader  # left to the cycle collector, as a loader in a reference cycle is
    units, done = process_units(), threading.Event()

    def collect_under_the_lock():
        with units.lock:
            gc.collect()  # the loader's finalizer runs here, with the lock held
        done.set()

    gc.disable()  # nothing collects the loader before the thread holds the lock
    try:
        del loader
        th = threading.Thread(target=collect_under_the_lock, daemon=True)
        th.start()
        assert done.wait(30), "the loader's finalizer took the decoded-unit map's lock under a holder of it"
    finally:
        gc.enable()
    assert src._reads.ahead is None  # detached: the source reads the store itself
    assert units.get(("any key",)) is None  # the map's next call: the detached source's units go
    assert not [k for k in units._map if k[0] == src._reads._owner]
    again = loader_over(src, "global")
    assert batches(again, 6) == reference("parquet", "global", 6)
    assert first == reference("parquet", "global", 3)


def test_a_pickled_source_carries_its_read_ahead_cache_and_the_fetchers_process(data, endpoint):
    """What a spawned worker unpickles: the cache's directory and the process whose fetcher fills it
    (the worker stops waiting for promised units once that process is gone)."""
    import pickle

    src = remote(endpoint, data["arrow"][1])
    loader = loader_over(src, "sequential", AHEAD)
    batches(loader, 2)
    copy = pickle.loads(pickle.dumps(src))
    assert (copy._reads.ahead.root, copy._reads.ahead.owner) == (loader.read_ahead.cache.root, os.getpid())
