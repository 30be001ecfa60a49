"""``OpenShard``: reads through a shard's one reader from several threads at once (a user taking
from one source in threads, a loader's threads), and a forked child's fresh locks.

Before the shard's lock, two threads reading row groups of one Parquet file through its one
``ParquetFile`` crashed the interpreter (SIGSEGV, a failed mutex assertion), hung, or raised a
false "damaged shard" error (``ReadRangeCache did not find matching cache entry``); so the reads
run in a subprocess, whose death is the failure."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resumable_data.sources.files import open_shard

ROOT = Path(__file__).resolve().parents[2]

_THREADS = textwrap.dedent(
    """
    import sys, threading
    import numpy as np
    from resumable_data.sources.files import open_shard

    shard = open_shard(sys.argv[1])
    errors, done = [], []

    def work(seed):
        r = np.random.default_rng(seed)
        try:
            for _ in range(1500):
                k = int(r.integers(0, 40))
                got = shard.read_unit(k).column(1).to_pylist()
                assert got == list(range(k * 100, k * 100 + 100)), k
        except BaseException as exc:
            errors.append(repr(exc)[:200])
        done.append(seed)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    print(len(done), errors)
    """
)


def test_threads_reading_row_groups_of_one_parquet_shard_at_once(tmp_path):
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"s": [f"row {i}" for i in range(4000)], "x": list(range(4000))}), path,
                   row_group_size=100)
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    out = subprocess.run([sys.executable, "-c", _THREADS, str(path)], capture_output=True, text=True, env=env,
                         timeout=90)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])  # -11: SIGSEGV, -6: abort
    assert out.stdout.split()[0] == "4" and out.stdout.strip().endswith("[]"), out.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="no fork")
def test_a_forked_child_reads_though_a_parent_thread_held_the_lock(tmp_path):
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"x": list(range(100))}), path, row_group_size=10)
    shard = open_shard(path)
    held, release = threading.Event(), threading.Event()

    def hold():
        with shard._lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(10)
    try:
        pid = os.fork()
        if pid == 0:  # the child: the parent's holder thread does not exist here
            signal.alarm(10)  # a lock still held: killed, never a hung test
            ok = False
            try:
                ok = shard.read_unit(3).column(0).to_pylist() == list(range(30, 40))
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
        t.join()
    assert os.waitstatus_to_exitcode(status) == 0
