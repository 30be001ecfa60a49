"""Fixtures and accounting for the reliability suite.

* ``corpus_dir`` / ``corpus``: a small pinned Arrow dataset (97 records, a prime: every global
  batch leaves an epoch tail) with an ``id`` column and a ``tokens`` list column (1-12 tokens).
* :func:`count`: tests report how many interrupt points, SIGKILLs, fuzz cases and fault cases
  they checked; at the end of the session every pytest process (xdist workers included) adds its
  counts to ``tests/reliability/.last_run.json`` (keyed by the run's id, under a file lock), so
  the file holds the whole run's totals once the last worker ends. ``-rA`` also shows each
  test's own printed count.
* ``RD_RELIABILITY_SCALE`` (default 10) multiplies the size of the ``slow`` (long) variants, which
  ``make test`` runs and ``make test-quick`` leaves out.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd

HERE = Path(__file__).parent
N_RECORDS = 97
from tests.reliability._counts import _COUNTS, SCALE, count  # noqa: E402,F401  (one module object)


def write_corpus(directory: Path, n: int = N_RECORDS, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 13, n)
    table = pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "tokens": pa.array([rng.integers(1, 1000, k).astype(np.int32).tolist() for k in lengths],
                           type=pa.list_(pa.int32())),
    })
    rd.write_arrow_shards(table, directory, num_shards=3, rows_per_batch=16)
    rd.pin(directory)
    return directory


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("reliability-corpus"))


@pytest.fixture(scope="session")
def corpus(corpus_dir):
    return rd.ArrowShards(corpus_dir)


@pytest.fixture(scope="session")
def token_lengths(corpus):
    return corpus.column_lengths("tokens").astype(np.int64)


def pytest_sessionfinish(session, exitstatus):
    if not _COUNTS:
        return
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    path, lock = HERE / ".last_run.json", HERE / ".last_run.lock"
    with open(lock, "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        try:
            data = json.loads(path.read_text())
            if data.get("run") != run:
                raise ValueError
        except (OSError, ValueError):
            data = {"run": run, "counts": {}, "workers": []}
        for k, v in _COUNTS.items():
            data["counts"][k] = data["counts"].get(k, 0) + v
        data["workers"].append(worker)
        data["scale"] = SCALE
        data["markexpr"] = session.config.getoption("markexpr", "")
        data["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)


def pytest_terminal_summary(terminalreporter):
    if _COUNTS:  # a run without xdist: print the totals too
        terminalreporter.write_line("reliability: " + ", ".join(f"{k}={v}" for k, v in sorted(_COUNTS.items())))
