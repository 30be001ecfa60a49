"""``rd.ReadUnit.AUTO``'s rule (sources/read_ahead/unit_choice.py): each clause at its boundary,
and the properties every choice keeps (whole shards only when they fit half the budget, are small
enough and can all be read whole)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import resumable_data as rd
from resumable_data.sources.read_ahead.unit_choice import MAX_OBJECT_BYTES, SHARE_OF_BUDGET, choose_unit

SHARD, RECORD_BATCH = rd.ReadUnit.SHARD, rd.ReadUnit.RECORD_BATCH


def test_small_shards_within_half_the_budget_are_read_whole():
    got = choose_unit([10_000, 20_000, 20_000], 100_000)
    assert got.unit is SHARD
    assert "3 shards" in got.reason and "50,000" in got.reason


def test_half_the_budget_is_the_boundary():
    assert choose_unit([50_000], 100_000).unit is SHARD
    got = choose_unit([50_001], 100_000)
    assert got.unit is RECORD_BATCH
    assert "50,001" in got.reason and "cache_bytes" in got.reason


def test_a_shard_without_size_or_layout_means_record_batches():
    got = choose_unit([10, None, 10], 1 << 30)
    assert got.unit is RECORD_BATCH
    assert "layout" in got.reason


def test_no_shard_read_means_record_batches():
    assert choose_unit([], 1 << 30).unit is RECORD_BATCH


def test_objects_over_the_size_limit_are_read_by_range():
    budget = 1 << 40  # holds anything: only the object size decides
    assert choose_unit([MAX_OBJECT_BYTES], budget).unit is SHARD
    got = choose_unit([10, MAX_OBJECT_BYTES + 1], budget)
    assert got.unit is RECORD_BATCH
    assert f"{MAX_OBJECT_BYTES + 1:,}" in got.reason


def test_the_default_is_auto():
    assert rd.ReadAhead().unit is rd.ReadUnit.AUTO


@settings(deadline=None)  # the suite's rule: a loaded machine's pause is no failure
@given(
    st.lists(st.one_of(st.none(), st.integers(0, 2 * MAX_OBJECT_BYTES)), max_size=12),
    st.integers(1, 1 << 31),
)
def test_whole_shards_only_when_every_clause_allows(sizes, budget):
    got = choose_unit(sizes, budget)
    assert got == choose_unit(list(sizes), budget)  # pure: the same facts, the same choice
    fits = (
        bool(sizes)
        and None not in sizes
        and sum(sizes) <= int(budget * SHARE_OF_BUDGET)
        and max(sizes) <= MAX_OBJECT_BYTES
    )
    assert got.unit is (SHARD if fits else RECORD_BATCH)
    assert got.reason
