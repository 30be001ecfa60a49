"""Forged unit layouts of remote shards, made internally consistent: in a schema-2 manifest with its
``derived_hash`` re-hashed, and in the layout cache a schema-1 manifest's first open fills
(``cache_dir()/layouts``, no digest at all). Spans swapped, duplicated, merged, dropped, moved by a
byte, rows moved between units: each is refused with an rd error or read exactly, by ``take`` and by a
loader reading ahead (whole shards or record batches), never as other rows. One shard of units of
unequal rows (7, 13, 20, 20, 40) per format, so that a swap of the two 20-row units keeps every
count. (A sweep of 329 forgeries per format and mode found no wrong row; this is its cross-section.)"""

from __future__ import annotations

import copy
import glob
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import resumable_data as rd
from resumable_data.sources import layout_cache
from resumable_data.sources.version import compute_derived_hash

pytest.importorskip("moto.server")
from tests.sources.conftest import s3_client, upload  # noqa: E402

SIZES = [7, 13, 20, 20, 40]
N = sum(SIZES)
FORMATS = ("arrow", "arrow_stream", "parquet")
FAST = rd.Retries(attempts=2, base_delay=0.01, max_delay=0.02)
TABLE = pa.table({"id": pa.array(np.arange(N, dtype=np.int64)),
                  "v": pa.array(np.arange(N, dtype=np.int64) * 1000003 % 999983),
                  "s": pa.array([f"r{i}" for i in range(N)])})


def _write(fmt, d):
    d.mkdir(parents=True)
    starts = np.cumsum([0] + SIZES)
    batches = [TABLE.slice(int(a), n).to_batches()[0] for a, n in zip(starts, SIZES)]
    if fmt == "parquet":
        with pq.ParquetWriter(str(d / "a.parquet"), TABLE.schema) as w:
            for b in batches:
                w.write_table(pa.Table.from_batches([b]))
        return
    opener = pa.ipc.new_file if fmt == "arrow" else pa.ipc.new_stream
    with opener(str(d / "a.arrow"), TABLE.schema) as w:
        for b in batches:
            w.write_batch(b)


def _forgeries(units):
    """(name, units) for one internally consistent forgery of each kind, around units 2 and 3."""
    def f(edit):
        u = copy.deepcopy(units)
        edit(u)
        return u

    def swap_spans(u):
        u[2][:2], u[3][:2] = units[3][:2], units[2][:2]

    def swap_units(u):
        u[2], u[3] = units[3], units[2]

    def duplicate(u):
        u[3] = [units[2][0], units[2][1], units[3][2]]

    def merge(u):
        u[2] = [units[2][0], units[2][1] + units[3][1], units[2][2] + units[3][2]]
        del u[3]

    def drop(u):
        u[2][2] += u[3][2]
        del u[3]

    def move_rows(u):
        u[1][2] += 1
        u[2][2] -= 1

    return [
        ("swap spans", f(swap_spans)),
        ("swap units", f(swap_units)),
        ("duplicate", f(duplicate)),
        ("merge", f(merge)),
        ("drop, rows kept", f(drop)),
        ("rows moved", f(move_rows)),
        ("offset +1", f(lambda u: u[2].__setitem__(0, u[2][0] + 1))),
        ("offset -1", f(lambda u: u[2].__setitem__(0, u[2][0] - 1))),
        ("length -1", f(lambda u: u[2].__setitem__(1, u[2][1] - 1))),
        ("length +1", f(lambda u: u[2].__setitem__(1, u[2][1] + 1))),
    ]


@pytest.fixture(scope="module")
def pinned(endpoint, tmp_path_factory):
    """{format: (prefix, manifest dict)}: the one-shard dataset pinned on S3 (schema 2)."""
    fs = s3_client(endpoint)
    out = {}
    for fmt in FORMATS:
        d = tmp_path_factory.mktemp("forged") / fmt
        _write(fmt, d)
        prefix = f"forged-{fmt.replace('_', '-')}/data"
        upload(fs, d, prefix)
        rd.pin(prefix, filesystem=fs)
        with fs.open_input_stream(f"{prefix}/.rd-manifest.json") as f:
            out[fmt] = (prefix, json.loads(f.read()))
    return out


def _put(fs, prefix, manifest):
    with fs.open_output_stream(f"{prefix}/.rd-manifest.json") as f:
        f.write(json.dumps(manifest).encode())


def _read(endpoint, prefix, how):
    """Every row as (ids, v), by ``take`` or by a loader reading ahead."""
    src = rd.ArrowShards(prefix, filesystem=s3_client(endpoint), retries=FAST)
    if how == "take":
        t = src.take(np.arange(N))
        return t.column("id").to_pylist(), t.column("v").to_pylist()
    unit = rd.ReadUnit.SHARD if how == "ahead, shards" else rd.ReadUnit.RECORD_BATCH
    loader = rd.DataLoader(src, batch_size=9, seed=0, num_workers=0, read_ahead=rd.ReadAhead(unit=unit))
    ids, vs = [], []
    try:
        for b in loader:
            ids += b["id"].tolist()
            vs += b["v"].tolist()
    finally:
        loader.read_ahead.close()
    return ids, vs


def _exact_or_refused(endpoint, prefix, how, reraise=False):
    try:
        ids, vs = _read(endpoint, prefix, how)
    except rd.ResumableDataError:
        if reraise:
            raise
        return "refused"
    assert ids == list(range(N)) and vs == TABLE.column("v").to_pylist(), "a forged layout delivered other rows"
    return "exact"


@pytest.mark.parametrize("how", ["take", "ahead, shards", "ahead, record batches"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_forged_manifest_layout_is_refused_or_read_exactly(endpoint, pinned, fmt, how):
    fs = s3_client(endpoint)
    prefix, manifest = pinned[fmt]
    outcomes = {}
    try:
        for name, units in _forgeries(manifest["shards"][0]["layout"]["units"]):
            m = copy.deepcopy(manifest)
            m["shards"][0]["layout"]["units"] = units
            m["derived_hash"] = compute_derived_hash(m["shards"])  # consistent: only the bytes can tell
            _put(fs, prefix, m)
            outcomes[name] = _exact_or_refused(endpoint, prefix, how)
    finally:
        _put(fs, prefix, manifest)
    # a forgery that changes which bytes a unit is is always refused (a longer span only adds bytes
    # after the message, which decoding never reads)
    assert {k for k, v in outcomes.items() if v == "exact"} <= {"length +1"}, outcomes


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_forged_layout_cache_entry_is_refused_or_read_exactly(endpoint, pinned, fmt, tmp_path, monkeypatch):
    """A schema-1 manifest (no layouts): the first open builds each layout and keeps it in
    ``cache_dir()/layouts``; a forged entry there (its check recomputed) is rd's cache problem: the
    open rebuilds the layout from the store (a Parquet footer tells at open), or the read that finds
    it wrong is refused naming the entry, which is removed, so the next open reads exactly."""
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path))
    fs = s3_client(endpoint)
    prefix, manifest = pinned[fmt]
    m1 = copy.deepcopy(manifest)
    m1["schema_version"] = 1
    del m1["derived_hash"]
    for sh in m1["shards"]:
        del sh["layout"], sh["etag"]
    pinned_layout = {k: v for k, v in manifest["shards"][0]["layout"].items() if k not in ("digests", "meta")}
    try:
        _put(fs, prefix, m1)
        assert _exact_or_refused(endpoint, prefix, "take") == "exact"  # builds and remembers the layout
        (entry,) = glob.glob(os.path.join(str(tmp_path), "layouts", "*.json"))
        good = json.load(open(entry))
        assert good["layout"] == pinned_layout
        outcomes = {}
        for name, units in _forgeries(pinned_layout["units"]):
            forged = {**good, "layout": {**pinned_layout, "units": units}}
            forged["check"] = layout_cache._check(forged)  # consistent: only the bytes can tell
            with open(entry, "w") as f:
                json.dump(forged, f)
            try:
                outcomes[name] = _exact_or_refused(endpoint, prefix, "take", reraise=True)
            except rd.DatasetIntegrityError as exc:  # names the entry, removed it: the fix is to open again
                outcomes[name] = "refused"
                assert "layout cache entry" in str(exc) and "open the dataset again" in str(exc), exc
                assert not os.path.exists(entry) or json.load(open(entry)) == good
                assert _exact_or_refused(endpoint, prefix, "take") == "exact", name
            if outcomes[name] == "refused" or fmt == "parquet":
                assert json.load(open(entry)) == good, name  # rebuilt from the store and remembered
    finally:
        _put(fs, prefix, manifest)
    # never other rows (_exact_or_refused); Parquet: every forgery is caught at open by the footer and
    # rebuilt; IPC: one that passes validation is refused at its first read like a pinned one
    assert len(outcomes) == 10, outcomes
    if fmt == "parquet":
        assert set(outcomes.values()) == {"exact"}, outcomes
    else:
        assert "refused" in outcomes.values(), outcomes


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_a_cache_entry_counting_other_rows_is_rebuilt_not_read_around(endpoint, pinned, fmt, tmp_path, monkeypatch):
    """An entry whose units add up to another row count than the manifest's is not this shard's: it is
    removed and the layout rebuilt from the store (before, the shard was opened without a layout, by
    pyarrow's reader, at every open)."""
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path))
    fs = s3_client(endpoint)
    prefix, manifest = pinned[fmt]
    m1 = copy.deepcopy(manifest)
    m1["schema_version"] = 1
    del m1["derived_hash"]
    for sh in m1["shards"]:
        del sh["layout"], sh["etag"]
    try:
        _put(fs, prefix, m1)
        assert _exact_or_refused(endpoint, prefix, "take") == "exact"
        (entry,) = glob.glob(os.path.join(str(tmp_path), "layouts", "*.json"))
        good = json.load(open(entry))
        forged = copy.deepcopy(good)
        forged["layout"]["units"][2][2] += 1
        forged["check"] = layout_cache._check(forged)
        with open(entry, "w") as f:
            json.dump(forged, f)
        src = rd.ArrowShards(prefix, filesystem=s3_client(endpoint), retries=FAST)
        assert src._shards[0].layout is not None and src._shards[0].layout.unit_rows == SIZES
        assert src.take(np.arange(N)).column("id").to_pylist() == list(range(N))
        assert json.load(open(entry)) == good
    finally:
        _put(fs, prefix, manifest)
