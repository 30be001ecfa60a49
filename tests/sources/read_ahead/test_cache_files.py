"""The read-ahead cache directory changed by something other than the fetcher: every unit file that is
not the fetcher's (flipped, truncated, emptied, another unit's, a link, a FIFO, a directory, no
permission) is refused, logged and removed, and the unit is read from the store: never a wrong value,
never a hang (a FIFO's open would block a plain reader forever)."""

from __future__ import annotations

import logging
import os
import shutil
import threading

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.sources.read_ahead.cache import DIGEST_BYTES, UnitCache, seal
from resumable_data.sources.unit_digests import unit_digest


def _write(cache: UnitCache, k: int, data: bytes) -> None:
    with open(cache.unit_path(k), "wb") as f:  # what the fetcher writes (Prefetcher._write)
        f.write(data)
        f.write(seal(k, data))


def _flip(p):
    b = bytearray(open(p, "rb").read())
    b[3] ^= 1
    open(p, "wb").write(b)


def _other(p):
    shutil.copyfile(p.replace("7.unit", "8.unit"), p)


def _link(p):
    os.unlink(p)
    os.symlink(p.replace("7.unit", "8.unit"), p)


def _fifo(p):
    os.unlink(p)
    os.mkfifo(p)


def _dir(p):
    os.unlink(p)
    os.mkdir(p)


def _dangling(p):
    os.unlink(p)
    os.symlink("/nonexistent/rd-unit", p)


TAMPER = {
    "byte flipped": _flip,
    "truncated": lambda p: open(p, "r+b").truncate(os.path.getsize(p) - 1),
    "shorter than its check": lambda p: open(p, "r+b").truncate(DIGEST_BYTES - 1),
    "emptied": lambda p: open(p, "wb").close(),
    "another unit's file": _other,
    "a link to another unit": _link,
    "a FIFO": _fifo,
    "a directory": _dir,
    "a dangling link": _dangling,
}


def test_the_fetchers_file_is_read_back(tmp_path):
    cache = UnitCache(str(tmp_path))
    data = bytes(range(256)) * 3
    _write(cache, 7, data)
    got = cache.get(7)
    assert isinstance(got, pa.Buffer) and got.to_pybytes() == data
    assert cache.get(9) is None  # never written, never promised


@pytest.mark.parametrize("case", list(TAMPER))
def test_a_changed_unit_file_is_refused_logged_and_removed(tmp_path, caplog, case):
    cache = UnitCache(str(tmp_path))
    _write(cache, 7, b"unit seven bytes" * 10)
    _write(cache, 8, b"unit eight bytes" * 10)  # the same size: a swap keeps the length
    TAMPER[case](cache.unit_path(7))
    got: list = []
    t = threading.Thread(target=lambda: got.append(cache.get(7)), daemon=True)
    with caplog.at_level(logging.WARNING, logger="resumable_data.sources.read_ahead.cache"):
        t.start()
        t.join(10)
    assert not t.is_alive(), "get() hung on a changed cache file"
    assert got == [None]  # the caller reads the unit from the store
    assert any("read-ahead cache file" in r.getMessage() and "7.unit" in r.getMessage() for r in caplog.records)
    if case != "a directory":
        assert not os.path.lexists(cache.unit_path(7))  # removed: the next get is a plain miss
    assert cache.get(8).to_pybytes() == b"unit eight bytes" * 10  # its neighbour is untouched


def test_a_resealed_file_of_other_bytes_is_refused_where_the_unit_has_a_digest(tmp_path, caplog):
    """The seal is no secret: other bytes written with their own seal pass it. A unit with a pinned
    digest (.unit_digests) is checked against that too: refused, logged, removed; the caller reads it
    from the store."""
    cache = UnitCache(str(tmp_path))
    data, other = b"unit seven bytes" * 10, b"unit 7 is forged" * 10
    _write(cache, 7, other)  # a forger who recomputes the seal
    assert cache.get(7).to_pybytes() == other  # the seal alone cannot tell
    with caplog.at_level(logging.WARNING, logger="resumable_data.sources.read_ahead.cache"):
        assert cache.get(7, unit_digest(data)) is None
    assert "pinned unit digest" in caplog.text and not os.path.exists(cache.unit_path(7))
    _write(cache, 7, data)
    assert cache.get(7, unit_digest(data)).to_pybytes() == data  # the pinned bytes pass


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files without permission")
def test_a_file_without_permission_is_refused(tmp_path):
    cache = UnitCache(str(tmp_path))
    _write(cache, 7, b"x" * 100)
    os.chmod(cache.unit_path(7), 0)
    assert cache.get(7) is None


def test_one_warning_per_cache_directory(tmp_path, caplog):
    """A directory every file of which is unreadable (chmod 000, a cleaner) warns once, not per unit."""
    cache = UnitCache(str(tmp_path))
    for k in range(5):
        _write(cache, k, b"bytes of a unit" * 4)
        _flip(cache.unit_path(k))
    with caplog.at_level(logging.DEBUG, logger="resumable_data.sources.read_ahead.cache"):
        assert [cache.get(k) for k in range(5)] == [None] * 5
    levels = [r.levelno for r in caplog.records if "read-ahead cache file" in r.getMessage()]
    assert levels == [logging.WARNING] + [logging.DEBUG] * 4


# -- end to end: a loader whose cache files are flipped mid-run delivers the pinned batches --------
pytest.importorskip("moto.server")
from tests.sources.conftest import s3_client, upload  # noqa: E402


def test_flipped_cache_files_mid_run_never_reach_a_batch(endpoint, tmp_path):
    n = 1000
    table = pa.table({"id": pa.array(np.arange(n, dtype=np.int64)),
                      "v": pa.array(np.random.default_rng(1).integers(0, 1 << 40, n))})
    local = tmp_path / "local"
    rd.write_arrow_shards(table, local, num_shards=2, rows_per_batch=20)
    fs = s3_client(endpoint)
    upload(fs, local, "cache-flips/data")
    rd.pin("cache-flips/data", filesystem=fs)
    kw = dict(batch_size=32, seed=3, num_workers=0)

    def rows(batch):
        return batch["id"].tolist(), batch["v"].tolist()

    ref = [rows(b) for b in rd.DataLoader(rd.ArrowShards(local, unpinned="allow"), **kw)]
    (tmp_path / "ahead").mkdir()
    ahead = rd.ReadAhead(cache_dir=tmp_path / "ahead", unit=rd.ReadUnit.RECORD_BATCH)
    loader = rd.DataLoader(rd.ArrowShards("cache-flips/data", filesystem=fs), read_ahead=ahead, **kw)
    it = iter(loader)
    got = [rows(next(it)) for _ in range(3)]
    assert loader.read_ahead.wait_idle(30)
    root = loader.read_ahead.cache.root
    flipped = 0
    for k in range(8, 30):  # units of steps 5.. (20-row units, 32-row steps), fetched by now
        p = os.path.join(root, f"{k}.unit")
        if os.path.exists(p):
            b = bytearray(open(p, "rb").read())
            b[-DIGEST_BYTES - 9] ^= 1  # a value byte of the unit's last column: structurally valid
            open(p, "wb").write(b)
            flipped += 1
    assert flipped >= 10
    got += [rows(b) for b in it]
    assert got == ref
