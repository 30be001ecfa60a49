"""``gather_plan``: how the plan's nodes read. A ``string`` batch past 32-bit offsets leaves its
node to the fallback; a unit whose buffer is empty (Arrow's static address, outside every map)
keeps the plan."""

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd


def test_a_string_batch_past_32_bit_offsets_takes_the_fallback(sources, tmp_path, monkeypatch):
    """A ``string`` batch whose characters exceed what 32-bit offsets hold is left to the
    fallback (whose concatenation raises pyarrow's own error there): with the limit lowered, the
    fast path gives up and the result is still ``Table.take``'s."""
    from resumable_data.sources import gather_plan

    table = pa.table({"s": pa.array(["abc", "", "de", "fghij"] * 50), "l": pa.array([[1, 2]] * 200)})
    rd.write_arrow_shards(table, tmp_path, num_shards=2, rows_per_batch=30)
    src = rd.ArrowShards(tmp_path, unpinned="allow")
    ids = np.arange(199, -1, -3)
    unit, local = src._locate(ids)
    plan = src._gathering.plan()
    assert plan[0].gather(ids, unit, local) is not None
    monkeypatch.setattr(gather_plan, "_INT32_MAX", 10)
    assert plan[0].gather(ids, unit, local) is None and plan[1].gather(ids, unit, local) is None
    assert src.take(ids).equals(table.take(pa.array(ids)))


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_a_unit_of_only_empty_or_null_strings_and_lists_keeps_the_plan(tmp_path, fmt):
    """Arrow gives an empty buffer (a unit whose strings or lists are all empty, or all null) a
    static address outside every map and decoded batch: planned where it is (outside), the column
    took the per-unit fallback for every batch of the source (mapped) or touching the unit
    (decoded). Nothing is ever read from it, so it keeps the plan; values equal ``Table.take``."""
    n = 120
    empty = lambda i: i < 40  # the first of three 40-row units
    table = pa.table({
        "text": pa.array(["" if empty(i) else f"t{i}" for i in range(n)]),
        "opt": pa.array([None if empty(i) else "x" * (i % 5) for i in range(n)], type=pa.large_string()),
        "tokens": pa.array([[] if empty(i) else list(range(i % 4)) for i in range(n)], type=pa.list_(pa.int32())),
        "nested": pa.array([[] if empty(i) else [[i], []] for i in range(n)], type=pa.list_(pa.list_(pa.int64()))),
        "recs": pa.array([[] if empty(i) else [{"a": "q" * (i % 3)}] for i in range(n)],
                         type=pa.list_(pa.struct([("a", pa.string())]))),
    })
    rd.write_arrow_shards(table, tmp_path, num_shards=1, rows_per_batch=40, format=fmt)
    src = rd.ArrowShards(tmp_path, unpinned="allow")
    ids = np.random.default_rng(3).integers(0, n, 200)
    unit, _ = src._locate(ids)
    plans = src._reads.touched(unit)[0] if src._reads.loaded else src._gathering.plan()
    assert [g.kind if g is not None else None for g in plans] == ["bytes", "bytes", "list", "list", "list"]
    got = src.take(ids)
    for name in table.column_names:
        assert got.column(name).equals(table.column(name).take(pa.array(ids))), name
