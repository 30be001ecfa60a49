import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import resumable_data as rd


def _fallback_take(src, ids):
    unit, local = src._locate(np.asarray(ids, dtype=np.int64))
    cols = src._fallback(unit, local, list(range(len(src.schema))))
    return pa.Table.from_arrays(cols, schema=src.schema)


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


def test_fast_path_is_used(sources):
    _, srcs = sources
    plan = srcs[1]._plan()
    names = srcs[1].schema.names
    kinds = {n: (g.kind if g is not None else None) for n, g in zip(names, plan)}
    assert kinds == {"tok32": "list", "tok16": "list", "f64": "fixed", "u8": "fixed",
                     "ts": "fixed", "maybe": None, "flag": None}


@settings(derandomize=True, max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(0, 2999), max_size=300), which=st.integers(0, 2))
def test_fast_equals_fallback_equals_table_take(sources, ids, which):
    table, srcs = sources
    src = srcs[which]
    expected = table.take(pa.array(ids, type=pa.int64()))
    got = src.take(ids)
    assert got.equals(expected)
    if ids:
        assert _fallback_take(src, ids).equals(expected)
        assert all(c.num_chunks == 1 for c in got.columns)


def test_sliced_batches_handled(tmp_path):
    # batches that are slices of larger arrays (non-zero offsets) written into IPC keep working
    t = pa.table({"x": pa.array(np.arange(100, dtype=np.int32)),
                  "l": pa.array([[i] * (i % 4) for i in range(100)], type=pa.list_(pa.int64()))})
    rd.write_arrow_shards(t.slice(10, 80), tmp_path, num_shards=2, rows_per_batch=7)
    s = rd.ArrowShards(tmp_path)
    ids = [0, 79, 40, 40, 7]
    assert s.take(ids).equals(t.slice(10, 80).take(ids))


def test_damaged_offsets_are_refused_not_read(tmp_path):
    t = pa.table({"l": pa.array([[1, 2, 3]] * 10, type=pa.list_(pa.int32()))})
    rd.write_arrow_shards(t, tmp_path)
    p = tmp_path / "shard-00000.arrow"
    data = bytearray(p.read_bytes())
    # the offsets buffer holds 0,3,6,...,30 as int32: make the last offset huge
    needle = np.arange(0, 33, 3, dtype=np.int32).tobytes()
    at = bytes(data).find(needle)
    assert at > 0
    data[at + 40:at + 44] = np.int32(10**8).tobytes()
    p.write_bytes(bytes(data))
    s = rd.ArrowShards(tmp_path, unpinned="allow")
    # refused by the structural validation of the record batch (sources/validate.py), which runs
    # before the gather plan's own bounds check ("outside its data buffer") is reached
    with pytest.raises(rd.DatasetIntegrityError, match=r"shard-00000\.arrow.*record batch 0.*damaged"):
        s.take([0])
