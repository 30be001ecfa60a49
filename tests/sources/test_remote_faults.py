"""Faults of a remote store: throttling is retried (bounded, jittered backoff), a store that is down
is an ``rd.StoreUnavailableError`` (never "damaged shard"), and the loader continues exactly when
the store comes back (moto's S3 server on 127.0.0.1, behind ``benchmarks.s3_proxy.S3Proxy`` where
faults are injected)."""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.sources import retry

moto_server = pytest.importorskip("moto.server")
from tests.sources.conftest import free_port, remote_copies, s3_client  # noqa: E402

N = 2000
FAST = rd.Retries(attempts=3, base_delay=0.01, max_delay=0.02)
FORMATS = ("arrow", "arrow_stream", "parquet")




def table(n: int = N) -> pa.Table:
    rng = np.random.default_rng(3)
    return pa.table({"id": pa.array(np.arange(n, dtype=np.int64)),
                     "v": pa.array(rng.integers(0, 1 << 30, n).astype(np.int32))})


@pytest.fixture(scope="module")
def data(endpoint, tmp_path_factory):
    """{format: (local dir, prefix)}: 100 units of 20 rows in 4 shards, pinned on S3."""
    return remote_copies(endpoint, table(), tmp_path_factory, "faults", FORMATS)




# -- the retry policy ------------------------------------------------------------------------------
def test_transient_failures_are_recognised():
    assert retry.is_transient(OSError("AWS Error SLOW_DOWN during GetObject operation: Please reduce"))
    assert retry.is_transient(OSError("AWS Error UNKNOWN (HTTP status 503) during HeadObject"))
    assert retry.is_transient(OSError("AWS Error NETWORK_CONNECTION during GetObject operation: curlCode: 7"))
    assert retry.is_transient(ConnectionResetError())
    assert not retry.is_transient(FileNotFoundError("Path does not exist"))
    assert not retry.is_transient(OSError("Couldn't deserialize thrift: TProtocolException"))
    assert not retry.is_transient(ValueError("HTTP status 503"))  # only I/O errors are retried


def test_retries_are_bounded_with_jittered_backoff():
    waits, calls = [], []
    policy = rd.Retries(attempts=5, base_delay=0.5, max_delay=1.5)

    def flaky():
        calls.append(1)
        raise OSError("HTTP status 503 SlowDown")

    with pytest.raises(rd.StoreUnavailableError, match="did not answer after 5 attempt") as exc:
        retry.call(policy, "b/x.arrow", "read", flaky, sleep=waits.append)
    assert not isinstance(exc.value, rd.DatasetIntegrityError) and "b/x.arrow" in str(exc.value)
    assert len(calls) == 5 and len(waits) == 4
    assert all(0 <= w <= min(1.5, 0.5 * 2 ** k) for k, w in enumerate(waits))
    assert len(set(waits)) == 4  # jittered, not a fixed schedule
    assert policy.worst_wait() == 0.5 + 1.0 + 1.5 + 1.5

    def permanent():
        calls.append(1)
        raise FileNotFoundError("gone")

    calls.clear()
    with pytest.raises(FileNotFoundError):
        retry.call(policy, "b/x.arrow", "read", permanent, sleep=waits.append)
    assert len(calls) == 1  # not transient: raised at once

    outcomes = iter([OSError("connection reset by peer"), OSError("HTTP status 429"), 42])

    def recovers():
        o = next(outcomes)
        if isinstance(o, Exception):
            raise o
        return o

    assert retry.call(policy, "b/x.arrow", "read", recovers, sleep=lambda s: None) == 42


@pytest.mark.parametrize("bad, named", [(dict(attempts=0), "attempts"), (dict(attempts=1.5), "attempts"),
                                        (dict(base_delay=-1), "base_delay"), (dict(max_delay=float("inf")), "max_delay"),
                                        (dict(base_delay=True), "base_delay"), (dict(read_deadline=0), "read_deadline"),
                                        (dict(read_deadline=float("nan")), "read_deadline"),
                                        (dict(read_deadline="60"), "read_deadline"),
                                        (dict(min_read_rate=0), "min_read_rate"),
                                        (dict(min_read_rate=1.5), "min_read_rate"),
                                        (dict(min_read_rate=2 ** 41), "min_read_rate")])
def test_retries_validated(bad, named):
    with pytest.raises(rd.ConfigError, match=f"^{named}=.*fix: pass e.g. rd.Retries"):
        rd.Retries(**bad)
    with pytest.raises(rd.ConfigError, match="retries="):
        rd.ArrowShards("x", retries=3)


def test_retries_round_trip_and_pickle(data, endpoint):
    import pickle
    _, prefix = data["arrow"]
    policy = rd.Retries(attempts=9, base_delay=0.1, max_delay=2.0, read_deadline=300.0, min_read_rate=4096)
    assert rd.Retries.from_dict(policy.to_dict()) == policy
    assert policy.read_limit(4096 * 10) == 310.0 and rd.Retries().read_limit(64 * 1024 * 256) == 60.0 + 256
    src = rd.ArrowShards(prefix, filesystem=s3_client(endpoint), retries=policy)
    assert pickle.loads(pickle.dumps(src))._store.retries == policy


# -- throttling and a store that is down, through the proxy -----------------------------------------
@pytest.mark.parametrize("fmt", ["arrow", "arrow_stream", "parquet"])
def test_throttled_requests_are_retried_and_exact(data, proxy, fmt):
    local, prefix = data[fmt]
    ref = rd.ArrowShards(local, unpinned="allow")
    fs = s3_client(proxy.endpoint)
    proxy.fail_next = 2  # the open's first requests are throttled
    src = rd.ArrowShards(prefix, filesystem=fs, retries=rd.Retries(attempts=4, base_delay=0.01))
    assert proxy.failed == 2
    ids = np.random.default_rng(0).permutation(N)[:500]
    proxy.fail_next = 3  # and the reads' (one unit read sees all three)
    assert src.take(ids).equals(ref.take(ids))
    assert proxy.failed == 5 and proxy.fail_next == 0


def test_the_manifest_read_takes_the_sources_retries(data, proxy):
    """The manifest read is retried as the source's ``retries=`` says (before: always the default 6
    attempts, so a manifest throttled 7 times in a row failed an open allowed 10)."""
    from benchmarks.s3_proxy import Answer

    local, prefix = data["arrow"]
    throttled = []

    def hook(req, ans):
        if ".rd-manifest.json" in req.path and len(throttled) < 7:
            throttled.append(req.method)
            return Answer(503, "Slow Down", [("Content-Type", "application/xml")],
                          b"<Error><Code>SlowDown</Code><Message>m</Message></Error>")
        return ans

    proxy.hook = hook
    src = rd.ArrowShards(prefix, filesystem=s3_client(proxy.endpoint),
                         retries=rd.Retries(attempts=10, base_delay=0.01, max_delay=0.02))
    assert len(throttled) == 7
    assert src.take([5, 1500]).equals(rd.ArrowShards(local, unpinned="allow").take([5, 1500]))
    throttled.clear()
    with pytest.raises(rd.StoreUnavailableError, match="after 2 attempt"):
        rd.ArrowShards(prefix, filesystem=s3_client(proxy.endpoint), retries=rd.Retries(attempts=2, base_delay=0.01))
    assert len(throttled) == 2


def test_a_store_that_is_down_is_reported_as_such_and_reads_resume(data, proxy):
    local, prefix = data["arrow"]
    ref = rd.ArrowShards(local, unpinned="allow")
    src = rd.ArrowShards(prefix, filesystem=s3_client(proxy.endpoint), retries=FAST)
    proxy.down = True
    with pytest.raises(rd.StoreUnavailableError, match="store did not answer after 3 attempt") as exc:
        src.take([5, 1500])
    assert "damaged or not a valid shard" not in str(exc.value) and "re-download" not in str(exc.value)
    assert not isinstance(exc.value, rd.DatasetIntegrityError)
    with pytest.raises(rd.StoreUnavailableError):  # opening too
        rd.ArrowShards(prefix, filesystem=s3_client(proxy.endpoint), retries=FAST)
    proxy.down = False
    assert src.take([5, 1500]).equals(ref.take([5, 1500]))


def test_throttling_past_the_retries_is_unavailable_not_damaged(data, proxy):
    _, prefix = data["parquet"]
    src = rd.ArrowShards(prefix, filesystem=s3_client(proxy.endpoint), retries=FAST)
    proxy.fail_next = 3
    with pytest.raises(rd.StoreUnavailableError, match="SERVICE_UNAVAILABLE|503|SLOW_DOWN|SlowDown"):
        src.take([0])
    assert src.take([0]).column("id").to_pylist() == [0]


# -- the server killed and restarted mid-epoch -----------------------------------------------------
def batches(loader, n, out=None):
    """The next ``n`` batches, appended to ``out`` (so those delivered before an error are kept)."""
    out = [] if out is None else out
    while len(out) < n:
        for b in loader:
            out.append((b["id"].tolist(), b["v"].tolist()))
            if len(out) == n:
                break
    return out


@pytest.fixture
def killable(data):
    """A second moto server (same process, so the same in-memory buckets) that can be stopped and
    started again on the same port."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    state = {"server": moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)}
    state["server"].start()

    def stop():
        state["server"].stop()

    def start():
        state["server"] = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        state["server"].start()

    yield f"127.0.0.1:{port}", stop, start
    state["server"].stop()


# a windowed shuffle (reads stay local: few requests, a fast test) over two epochs; the store goes
# away mid-epoch, when most units are still to be read (100 units, a 32-unit cache)
KW = dict(batch_size=16, shuffle_window=200, seed=11, sharding=rd.Sharding(1, 0), num_workers=0)
STEPS = 2 * N // 16


def test_server_restarted_within_the_retries_is_invisible(data, killable):
    endpoint, stop, start = killable
    _, prefix = data["arrow"]
    ref = batches(rd.DataLoader(rd.ArrowShards(prefix, filesystem=s3_client(endpoint)), **KW), STEPS)
    # full jitter: 12 attempts waited 0 to 4.7 s in all (2.35 s on average), and fell short of a
    # restart 1.5 s after the stop once in 40 runs, 2 s after it once in 5 (a loaded machine starts the
    # server late); 40 attempts wait 9.35 s on average (0 to 18.7 s), and under 5 s less than once in a million runs
    loader = rd.DataLoader(rd.ArrowShards(prefix, filesystem=s3_client(endpoint),
                                          retries=rd.Retries(attempts=40, base_delay=0.1, max_delay=0.5)), **KW)
    got = batches(loader, 40)
    stop()
    restart = threading.Timer(1.0, start)
    restart.start()
    t0 = time.monotonic()
    got += batches(loader, STEPS - 40)  # blocks in the retries until the server is back
    restart.join()
    assert time.monotonic() - t0 >= 0.5  # the reads really waited for the restart
    assert got == ref


@pytest.mark.parametrize("num_workers", [0, 2])
def test_server_down_past_the_retries_then_back_resumes_exactly(data, killable, num_workers):
    endpoint, stop, start = killable
    _, prefix = data["arrow_stream"]  # what datasets.save_to_disk writes
    kw = {**KW, "num_workers": num_workers}
    ref = batches(rd.DataLoader(rd.ArrowShards(prefix, filesystem=s3_client(endpoint)), **KW), STEPS)
    loader = rd.DataLoader(rd.ArrowShards(prefix, filesystem=s3_client(endpoint), retries=FAST), **kw)
    got = batches(loader, 40)
    stop()
    with pytest.raises(rd.StoreUnavailableError):
        batches(loader, STEPS, got)  # cached units may still deliver a few batches
    state = loader.state_dict()
    assert state["cursor"]["delivered"] == len(got) < STEPS
    start()
    batches(loader, STEPS, got)  # a new iter(loader) continues from the cursor
    assert got == ref
    # and a fresh process resuming from the state saved while the store was down agrees
    fresh = rd.DataLoader(rd.ArrowShards(prefix, filesystem=s3_client(endpoint)), **kw)
    fresh.load_state_dict(state)
    assert batches(fresh, STEPS - len(ref[:state["cursor"]["delivered"]])) == ref[state["cursor"]["delivered"]:]


@pytest.mark.parametrize("deadline", [1e10, 1e308, 10**400])
def test_a_read_deadline_past_what_a_thread_join_takes_is_refused_at_construction(deadline):
    # attack43: accepted, then every remote read raised OverflowError (thread join past TIMEOUT_MAX; int + float)
    with pytest.raises(rd.ConfigError, match=r"^read_deadline=.*expected a number of seconds in \(0, 1e\+09\]"):
        rd.Retries(read_deadline=deadline)


def test_the_longest_read_limit_is_one_a_thread_join_accepts():
    from resumable_data.sources.exact_reads import within_deadline

    slow = rd.Retries(read_deadline=10**9, min_read_rate=1)  # 1 byte a second: a 10 GB read's limit is 10**10 s
    assert slow.read_limit(10**10) == threading.TIMEOUT_MAX
    assert within_deadline(10**10, lambda: 7, slow) == 7  # was OverflowError: timestamp out of range
