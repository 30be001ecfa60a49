"""``gather_rows``: column plans moved between spans. A view's plan (its sources' plans
concatenated) equals planning the concatenated units; one decoded unit's rows of absolute
addresses rebuild its own plan (dictionaries by their key), and a span off 64 bytes is refused."""

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.sources.gather import plan_column
from resumable_data.sources.gather_decoded import Dictionaries, unit_rows
from resumable_data.sources.gather_rows import flatten_plan, rebuild_plan
from tests.sources.typed_columns import FAST_KINDS, types_table


def _bases(node):
    """Every per-unit base array of a plan's node tree, in a fixed walk order (None: no bitmap)."""
    out = [getattr(node, "base", None), None if node.valid is None else node.valid.base]
    for child in [getattr(node, "child", None), getattr(node, "indices", None), *getattr(node, "children", [])]:
        if child is not None:
            out += _bases(child)
    return out


def test_concatenated_plan_equals_planning_the_concatenation(typed_sources):
    # rd.Mixture's view rebases its sources' plans (gather.concat_columns): the same nodes and
    # bases as planning the concatenated units directly, and the same records as Table.take
    from resumable_data.sources.arrow_shards import ArrowShards
    from resumable_data.sources.gather import plan_column

    table, srcs = typed_sources
    members = [rd.ArrowShards(srcs[k]._root, unpinned="allow") for k in (2, 0, 1)]
    view = ArrowShards.concatenated(members)
    assert view._shards[0] is members[0]._shards[0]  # the sources' open shards: nothing opened twice
    got = view._gathering.plan()
    direct = [plan_column(i, f.type, view._units, view._table.wholes, view._num_records) for i, f in enumerate(view.schema)]
    for name, g, d in zip(view.schema.names, got, direct):
        assert (g.kind if g is not None else None) == (d.kind if d is not None else None) == FAST_KINDS[name], name
        for a, b in zip(_bases(g.root), _bases(d.root), strict=True):
            assert (a is None and b is None) or np.array_equal(a, b), name
    whole = pa.concat_tables([table] * 3)
    ids = [0, 7499, 2500, 2499, 5000, 1234, 1234, 6000]
    assert view.take(ids).equals(whole.take(pa.array(ids)))
    # the view's units and arrays (shifted from its sources', no Python step per unit) equal those
    # of the same shards opened as one source
    opened = ArrowShards.__new__(ArrowShards)
    opened._init(view._root.as_posix(), view._rel, None, view._store)
    fields = ("shard", "start", "rows", "row_group")
    assert [[getattr(u, f) for f in fields] for u in view._units] == \
        [[getattr(u, f) for f in fields] for u in opened._units]
    assert all(u.batch is m.batch for u, m in zip(view._units, [u for s in members for u in s._units], strict=True))
    assert [u.start for u in view._units[-3:]] == [u.start for u in opened._units[-3:]]
    for name in ("starts", "unit_shard", "mapped", "mapped_bool"):
        assert np.array_equal(getattr(view._table, name), getattr(opened._table, name)), name
    assert view._unit_index == opened._unit_index and view._num_records == opened._num_records
    assert [e[1:] if e else e for e in view._watch.entries] == [e[1:] if e else e for e in opened._watch.entries]


def test_one_units_rows_rebuild_its_own_plan(tmp_path):
    table = types_table(300, seed=4)
    batch = table.to_batches()[0]
    rows = unit_rows(batch)
    ids = np.arange(batch.num_rows - 1, -1, -3, dtype=np.int64)
    zeros = np.zeros(len(ids), dtype=np.int64)
    for i, f in enumerate(batch.schema):
        row = rows.rows[i]
        if f.name in ("label", "opt_label"):
            assert row is None, f.name  # dictionaries have no row
            continue
        assert row is not None, f.name
        lo = rows.lo // 64 * 64
        span = pa.foreign_buffer(lo, rows.hi - lo, base=batch)
        plan = rebuild_plan(rows.templates[i], row[:, None], span)
        assert plan.gather(ids, zeros, ids).equals(batch.column(i).take(pa.array(ids))), f.name
        again = flatten_plan(plan)
        assert again is not None and np.array_equal(again, row), f.name


def test_one_units_dictionary_rows_carry_the_key_of_their_dictionary():
    table = types_table(300, seed=4)
    batch = table.to_batches()[0]
    dictionaries = Dictionaries()
    rows = unit_rows(batch, dictionaries)
    again = unit_rows(pa.record_batch(batch.to_pydict(), schema=batch.schema).cast(batch.schema), dictionaries)
    ids = np.arange(batch.num_rows - 1, -1, -3, dtype=np.int64)
    zeros = np.zeros(len(ids), dtype=np.int64)
    for name in ("label", "opt_label"):
        i = batch.schema.get_field_index(name)
        row, other = rows.rows[i], again.rows[i]
        assert row is not None and other is not None, name
        assert row[0] == other[0] >= 0, name  # equal dictionaries (other objects): the same key
        own, kept = batch.column(i).dictionary, dictionaries[int(row[0])]
        assert kept.equals(own), name
        # a copy, never a view of the unit's buffers (which may be a shard's memory map)
        assert not {b.address for b in own.buffers() if b} & {b.address for b in kept.buffers() if b}, name
        lo = rows.lo // 64 * 64
        span = pa.foreign_buffer(lo, rows.hi - lo, base=batch)
        plan = rebuild_plan(rows.templates[i], row[:, None], span, dictionaries.__getitem__)
        assert plan is not None and plan.kind == "dictionary"
        assert plan.gather(ids, zeros, ids).equals(batch.column(i).take(pa.array(ids))), name
        assert np.array_equal(flatten_plan(plan, dictionaries.key), row), name
        assert rebuild_plan(rows.templates[i], row[:, None], span) is None  # no dictionaries: no plan


def test_a_span_off_64_bytes_is_refused():
    batch = pa.record_batch({"x": pa.array(np.arange(10, dtype=np.int64))})
    plan = plan_column(0, pa.int64(), [], [], 10)  # no units: no plan
    assert plan is None
    rows = unit_rows(batch)
    span = pa.foreign_buffer(rows.lo // 64 * 64 + 8, 64, base=batch)
    with pytest.raises(ValueError, match="multiple of 64"):
        rebuild_plan(rows.templates[0], rows.rows[0][:, None], span)
