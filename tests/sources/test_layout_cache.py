"""rd's layout cache (sources/layout_cache.py): typed entries loaded all or nothing; an entry that is not
rd's is removed with a warning naming it and rebuilt, never a failed open; an entry that loads but does
not describe the bytes is dropped only when it is the one that failed."""

from __future__ import annotations

import json
import logging
import os

import pytest

from resumable_data.sources import layout_cache as C
from resumable_data.sources.layout import ShardFormat, ShardLayout

KEY = "0123456789abcdef0123456789abcdef"
SIZE = 1000
LAYOUT = ShardLayout(ShardFormat.IPC_FILE, (8, 100), ((200, 50, 5), (250, 60, 7)))


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(C, "ENTRY_MAX_BYTES", 4096)  # (the "too large" case writes one byte more)


def test_an_entry_round_trips_and_is_bound_to_its_key_and_size():
    C.remember_layout(KEY, SIZE, LAYOUT)
    assert C.cached_layout(KEY, SIZE) == LAYOUT
    d = json.loads(C.entry_path(KEY).read_text())
    assert d["format"] == C.ENTRY_FORMAT and d["schema_version"] == C.ENTRY_SCHEMA_VERSION and d["key"] == KEY
    assert C.cached_layout("f" * 32, SIZE) is None  # another content: another file
    assert C.cached_layout(None, SIZE) is None


def test_a_layout_with_digests_is_never_cached():
    C.remember_layout(KEY, SIZE, ShardLayout(LAYOUT.format, LAYOUT.schema, LAYOUT.units, ("a" * 32, "b" * 32)))
    assert not C.entry_path(KEY).exists()


def _edit(edit):
    def apply(path):
        d = json.loads(path.read_text())
        edit(d)
        path.write_text(json.dumps(d))

    return apply


def _rehashed(edit):
    def apply(path):
        d = json.loads(path.read_text())
        edit(d)
        d["check"] = C._check(d)
        path.write_text(json.dumps(d))

    return apply


def _replace_dir(path):
    path.unlink()
    path.mkdir()


BAD = {
    "not JSON": lambda p: p.write_bytes(b"{\x00"),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:-5]),
    "a list": lambda p: p.write_text("[]"),
    "a digit changed (check)": _edit(lambda d: d["layout"]["units"][0].__setitem__(2, 6)),
    "another format": _rehashed(lambda d: d.__setitem__("format", "x")),
    "a later schema": _rehashed(lambda d: d.__setitem__("schema_version", 2)),
    "another key": _rehashed(lambda d: d.__setitem__("key", "f" * 32)),
    "another size": _rehashed(lambda d: d.__setitem__("size", SIZE + 1)),
    "a range past the size": _rehashed(lambda d: d["layout"]["units"][1].__setitem__(1, SIZE)),
    "digests smuggled in": _rehashed(lambda d: d["layout"].__setitem__("digests", ["a" * 32] * 2)),
    "an extra key": _rehashed(lambda d: d.__setitem__("more", 1)),
    "too large": lambda p: p.write_bytes(b" " * (C.ENTRY_MAX_BYTES + 1)),
}


@pytest.mark.parametrize("case", list(BAD))
def test_an_entry_that_is_not_rds_is_removed_with_a_warning_and_rebuilt(case, caplog):
    C.remember_layout(KEY, SIZE, LAYOUT)
    path = C.entry_path(KEY)
    BAD[case](path)
    with caplog.at_level(logging.WARNING, logger=C.__name__):
        assert C.cached_layout(KEY, SIZE) is None  # the caller builds the layout from the store
    assert not path.exists()
    assert str(path) in caplog.text and "removed" in caplog.text and "not your data" in caplog.text
    C.remember_layout(KEY, SIZE, LAYOUT)  # the rebuilt layout is remembered again
    assert C.cached_layout(KEY, SIZE) == LAYOUT


def test_a_directory_in_place_of_an_entry_is_refused_without_a_crash(caplog):
    path = C.entry_path(KEY)
    path.parent.mkdir(parents=True)
    path.mkdir()
    with caplog.at_level(logging.WARNING, logger=C.__name__):
        assert C.cached_layout(KEY, SIZE) is None
    assert str(path) in caplog.text


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_a_fifo_in_place_of_an_entry_never_blocks(caplog):
    path = C.entry_path(KEY)
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    with caplog.at_level(logging.WARNING, logger=C.__name__):
        assert C.cached_layout(KEY, SIZE) is None
    assert not path.exists()


def test_an_earlier_rds_bare_layout_is_replaced_quietly(caplog):
    path = C.entry_path(KEY)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(LAYOUT.to_dict(digests=False)))  # what rd wrote before entries had a format
    with caplog.at_level(logging.WARNING, logger=C.__name__):
        assert C.cached_layout(KEY, SIZE) is None
    assert not path.exists() and caplog.text == ""


def test_drop_layout_removes_only_the_entry_holding_the_failed_layout(caplog):
    C.remember_layout(KEY, SIZE, LAYOUT)
    other = ShardLayout(LAYOUT.format, LAYOUT.schema, ((200, 50, 5), (250, 61, 7)))
    assert C.drop_layout(KEY, SIZE, other, "a read failed") is None  # a pinned layout, not the cache's
    assert C.entry_path(KEY).exists()
    with caplog.at_level(logging.WARNING, logger=C.__name__):
        assert C.drop_layout(KEY, SIZE, LAYOUT, "a read failed") == C.entry_path(KEY)
    assert not C.entry_path(KEY).exists() and "a read failed" in caplog.text
    assert C.drop_layout(KEY, SIZE, LAYOUT, "again") is None  # gone: nothing to drop
