"""The mixture's compiled, cached block path equals the per-position definition.

The reference below evaluates the documented definition one position at a time with the plain
numpy Feistel (``forward_reference``): block ``j`` of a run, slot ``perm_j(i)``, its source by the
slots laid out source by source, the position's rank among that source's positions of the block
in position order, the source position ``before + rank`` (``before`` from the closed-form counts
at the block start) and the record ``perm_{s,e}(q mod n)``. The golden digests were computed by
the implementation before the compiled block path (argsort layout, one ``Permutation.forward``
per source epoch), so the delivered stream is unchanged.
"""

from __future__ import annotations

import pickle
from bisect import bisect_right

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from resumable_data.errors import ConfigError
from resumable_data.plan.mixture import MixturePlan, Rebase, StepPositions, WeightSchedule
from resumable_data.plan.permutation import forward_reference, permutation_key

N3 = ("web", "code", "math")


def make(names, sizes, weights, block, seed, *, shuffle=True, schedule=None, pos=None, rebase=None, version="mix-fast"):
    sched = schedule or WeightSchedule.constant(dict(zip(names, weights)))
    return MixturePlan(names, sizes, [f"v-{n}" for n in names], sched, block=block, seed=seed, version_hash=version,
                       shuffle=shuffle, position_of_step=pos, rebase=rebase)


def reference(plan: MixturePlan, p: int) -> tuple[int, int, int, int]:
    """(source, source position, record in the source, concatenated id) at position ``p``, by the definition."""
    starts = [r.start for r in plan._runs]
    run = plan._runs[bisect_right(starts, p) - 1]
    b = plan.block
    j, i = divmod(p - run.start, b)
    counts = [int(c) for c in run.block_counts(j)]
    before = [int(c) for c in plan.counts_before(run.start + j * b)]  # aligned: floor sums only
    cum = np.cumsum([0] + counts).tolist()
    if plan.shuffle and b > 1:
        key = permutation_key(plan.version_hash, plan.seed, j, f"mixture.block@{run.start}")
        slots = forward_reference(b, key, np.arange(i + 1)).tolist()
    else:
        slots = list(range(i + 1))
    owners = [bisect_right(cum, k) - 1 for k in slots]
    s = owners[i]
    q = before[s] + owners[:i].count(s)
    n = plan.sizes[s]
    e, o = divmod(q, n)
    if plan.shuffle and n > 1:
        key = permutation_key(plan.versions[s], plan.seed, e, f"mixture.source.{plan.names[s]}")
        rec = int(forward_reference(n, key, np.array([o]))[0])
    else:
        rec = o
    return s, q, rec, sum(plan.sizes[:s]) + rec


def check(plan: MixturePlan, positions) -> None:
    positions = np.asarray(positions, dtype=np.int64)
    want = np.array([reference(plan, int(p)) for p in positions], dtype=np.int64).reshape(-1, 4)
    src, q = plan.locate(positions)
    src2, rec = plan.records(positions)
    ids = plan.concatenated_ids(positions)
    assert src.tolist() == want[:, 0].tolist() == src2.tolist()
    assert q.tolist() == want[:, 1].tolist()
    assert rec.tolist() == want[:, 2].tolist()
    assert ids.tolist() == want[:, 3].tolist()
    if len(positions) and (np.diff(positions) == 1).all():  # a span: the loader's runs ask for it by its bounds
        lo, hi = int(positions[0]), int(positions[-1]) + 1
        assert plan.span_ids(lo, hi).tolist() == want[:, 3].tolist()


weights_st = st.lists(st.one_of(st.integers(0, 7), st.floats(0.01, 3, allow_nan=False)), min_size=1, max_size=5) \
    .filter(lambda w: sum(w) > 0)


@settings(derandomize=True, max_examples=40, deadline=None)
@given(weights=weights_st, data=st.data(), block=st.integers(1, 90), seed=st.integers(0, 2**32), shuffle=st.booleans(),
       batch=st.integers(1, 70))
def test_the_block_path_equals_the_per_position_definition(weights, data, block, seed, shuffle, batch):
    sizes = tuple(data.draw(st.lists(st.integers(1, 60), min_size=len(weights), max_size=len(weights)), label="sizes"))
    names = tuple(f"s{i}" for i in range(len(weights)))
    plan = make(names, sizes, weights, block, seed, shuffle=shuffle)
    blocks = 20
    edges = sorted({x for j in range(1, blocks) for x in (j * block - 1, j * block, j * block + 1)})
    check(plan, edges)  # one call across many blocks (the general path), block boundaries
    rand = data.draw(st.lists(st.integers(0, blocks * block), min_size=1, max_size=40), label="positions")
    check(make(names, sizes, weights, block, seed, shuffle=shuffle), rand)  # random order, a fresh cache
    for k in range(0, 3 * block, batch):  # consecutive batches, straddling blocks or inside one
        check(plan, np.arange(k, k + batch))


def test_many_epochs_of_a_small_source_inside_one_block():
    plan = make(N3, (5, 3, 1), (2, 3, 5), 200, 9)  # the 3-record source runs ~20 epochs per block
    check(plan, np.arange(0, 700))
    src, rec = plan.records(np.arange(200))
    mine = rec[src == 1]
    assert len(mine) == 60 and all(sorted(mine[e:e + 3]) == [0, 1, 2] for e in range(0, 60, 3))


def test_runs_of_a_schedule_and_a_rebase_equal_the_definition():
    sched = WeightSchedule([(0, dict(zip(N3, (0.5, 0.3, 0.2)))), (3, dict(zip(N3, (1, 1, 6)))),
                            (7, dict(zip(N3, (0, 1, 0))))])
    plan = make(N3, (40, 13, 4), (0, 0, 0), 24, 2, schedule=sched, pos=StepPositions(10))  # runs start mid-block
    check(plan, np.arange(0, 120))
    check(plan, [95, 3, 69, 30, 70, 29, 31, 71, 119, 0])
    counts = tuple(int(c) for c in plan.counts_before(53))
    rebased = plan.with_rebase(Rebase(53, counts))
    shared = {id(b) for b in rebased._blocks.values()} & {id(b) for b in plan._blocks.values()}
    assert plan._blocks and not shared  # a rebase is a new plan: nothing cached from the old one
    check(rebased, np.arange(53, 160))
    check(rebased, [159, 53, 70, 54, 100])


def test_the_cache_serves_seeks_and_is_not_pickled():
    plan = make(N3, (400, 200, 20), (0.5, 0.3, 0.2), 64, 4)
    fresh = make(N3, (400, 200, 20), (0.5, 0.3, 0.2), 64, 4)
    far = np.arange(10**9, 10**9 + 50)
    for positions in (np.arange(0, 50), far, np.arange(30, 80), far, np.arange(0, 50)):  # seek away and back
        assert plan.concatenated_ids(positions).tolist() == make(N3, (400, 200, 20), (0.5, 0.3, 0.2), 64, 4) \
            .concatenated_ids(positions).tolist()
    assert plan.records(far)[1].tolist() == fresh.records(far)[1].tolist()
    check(plan, far[:5])
    copy = pickle.loads(pickle.dumps(plan))
    assert len(copy._blocks) == 0 and len(plan._blocks) > 0
    assert copy.concatenated_ids(far).tolist() == plan.concatenated_ids(far).tolist()


def test_an_empty_query_and_a_position_before_a_rebase():
    plan = make(N3, (40, 13, 4), (0.5, 0.3, 0.2), 16, 1, rebase=Rebase(32, (16, 10, 6)))
    assert plan.records([])[0].tolist() == [] and plan.concatenated_ids([]).tolist() == []
    with pytest.raises(ConfigError, match="at least 32"):
        plan.records([40, 31])


def _digest(a: np.ndarray) -> str:
    return xxhash.xxh3_64_hexdigest(a.astype("<i8").tobytes())


def _golden_plans() -> dict[str, tuple[MixturePlan, int]]:
    def plan(sizes, w, block, seed, **kw):
        sched = kw.pop("sched", None) or WeightSchedule.constant(dict(zip(N3, w)))
        return MixturePlan(N3, sizes, [f"v-{n}" for n in N3], sched, block=block, seed=seed, version_hash="mix-golden", **kw)

    sched = WeightSchedule([(0, dict(zip(N3, (0.5, 0.3, 0.2)))), (9, dict(zip(N3, (1, 1, 6))))])
    base = plan((1000, 300, 17), (0.5, 0.3, 0.2), 100, 5)
    counts = tuple(int(x) for x in base.counts_before(777))
    return {
        "bench": (plan((400000, 200000, 20000), (0.5, 0.3, 0.2), 1024, 0), 0),
        "tiny": (plan((5, 3, 1), (0.5, 0.3, 0.2), 64, 3), 0),
        "noshuffle": (plan((50, 30, 7), (2, 1, 1), 10, 1, shuffle=False), 0),
        "schedule": (plan((1000, 300, 17), (0, 0, 0), 100, 5, sched=sched, position_of_step=StepPositions(48)), 0),
        "rebase": (plan((1000, 300, 17), (0.1, 0.6, 0.3), 100, 5, rebase=Rebase(777, counts)), 777),
    }


# digests of (sources, records) at 20480 positions from each start, by the implementation before
# the compiled block path
GOLDEN = {
    "bench": ("cc184e4ad20d224f", "27a5dcab36cdefcf"),
    "tiny": ("1ed0c78190bd6548", "1069d4f1c4f065ff"),
    "noshuffle": ("aa3a8f1e7a3498d7", "dedbed4b91967e62"),
    "schedule": ("32d497e15d8808ea", "e45fffa3ffcf6578"),
    "rebase": ("3e4b3fccf37e0794", "633f55a354f30643"),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_streams_are_unchanged(name):
    plan, start = _golden_plans()[name]
    src, rec = plan.records(np.arange(start, start + 20480))
    assert (_digest(src), _digest(rec)) == GOLDEN[name]
    batched = np.concatenate([plan.records(np.arange(p, p + 256))[1] for p in range(start, start + 20480, 256)])
    assert _digest(batched) == GOLDEN[name][1]  # the same by batches (the per-block cache) as in one call
    check(plan, [start, start + 1023, start + 1024, start + 20479])


@pytest.mark.parametrize("n", [2, 3, 257, 4097, 400_000, (1 << 40) + 1])
def test_forward_by_chunked_passes_equals_the_reference(n):
    """``Permutation.forward`` (and the block kernel) walk cycles by passes per chunk of 256:
    over several chunks, in any order and with repeats, it is the plain numpy definition."""
    from resumable_data.plan.permutation import Permutation

    idx = np.random.default_rng(n % 1000).integers(0, n, 1500)
    idx[:10] = n - 1
    key = permutation_key("v", 3, 1, "chunks")
    assert Permutation(n, key).forward(idx).tolist() == forward_reference(n, key, idx).tolist()


@pytest.mark.parametrize("n", [2, 3, 257, 4097, 400_000, 1 << 24, (1 << 24) + 1])
def test_forward_by_round_tables_equals_the_reference(n):
    """The block kernel's Feistel passes read the round functions from tables (halves of at most
    ``TABLE_MAX_HALF`` bits): the same values as the mixing itself and the plain numpy definition."""
    from resumable_data.plan.permutation import ROUNDS, TABLE_MAX_HALF, Permutation, forward_into, forward_table_into, \
        round_table_into

    p = Permutation(n, permutation_key("v", 5, 2, "tables"))
    idx = np.random.default_rng(n % 997).integers(0, n, 1500)
    idx[:10] = n - 1
    want = forward_reference(n, p.key, idx)
    mixed = np.empty_like(idx)
    forward_into(idx, mixed, np.uint64(n), p.half, p.round_keys)
    assert mixed.tolist() == want.tolist()
    if int(p.half) <= TABLE_MAX_HALF:
        table = np.empty(ROUNDS << int(p.half), dtype=np.uint64)
        round_table_into(p.round_keys, p.half, table)
        got = np.empty_like(idx)
        forward_table_into(idx, got, np.uint64(n), p.half, table)
        assert got.tolist() == want.tolist()
        compact = np.empty(ROUNDS << int(p.half), dtype=np.uint16)  # the block kernel's tables: 16-bit entries
        round_table_into(p.round_keys, p.half, compact)
        assert compact.tolist() == table.tolist()
        forward_table_into(idx, got, np.uint64(n), p.half, compact)
        assert got.tolist() == want.tolist()
    else:
        assert n > 1 << 24  # the largest domain a table serves is 2**24


def test_a_source_too_large_for_round_tables_uses_the_round_keys():
    """A source of 2**25 records (13-bit halves: no table) beside small ones, by the definition."""
    plan = make(N3, (1 << 25, 300, 17), (0.5, 0.3, 0.2), 64, 7)
    check(plan, np.arange(0, 200))
    check(plan, [10**6, 10**6 + 63, 10**6 + 64, 3])
    assert plan.concatenated_ids(np.arange(0, 4096)).tolist() == \
        np.concatenate([make(N3, (1 << 25, 300, 17), (0.5, 0.3, 0.2), 64, 7).concatenated_ids(np.arange(k, k + 64))
                        for k in range(0, 4096, 64)]).tolist()


@settings(derandomize=True, max_examples=40, deadline=None)
@given(block=st.sampled_from([1, 7, 64, 1024, 5000]), seed=st.integers(0, 2**32), shuffle=st.booleans(),
       spans=st.lists(st.tuples(st.integers(0, 40_000), st.integers(0, 9000)), min_size=1, max_size=6))
def test_span_ids_equal_concatenated_ids_across_runs_and_epochs(block, seed, shuffle, spans):
    """``span_ids(lo, hi)`` (ids only, the blocks in one call) is ``concatenated_ids`` of the same
    positions: spans shorter than a block, unaligned, across a schedule's run boundaries, through
    many epochs of a small source, in any order (a seek), on one plan and on a fresh one."""
    sched = WeightSchedule([(0, dict(zip(N3, (0.5, 0.3, 0.2)))), (30, dict(zip(N3, (1, 1, 6))))])
    plan = make(N3, (40_000, 1_300, 17), (0, 0, 0), block, seed, shuffle=shuffle, schedule=sched,
                pos=StepPositions(512))  # the second run starts at position 15,360
    for lo, size in spans:
        want = make(N3, (40_000, 1_300, 17), (0, 0, 0), block, seed, shuffle=shuffle, schedule=sched,
                    pos=StepPositions(512)).concatenated_ids(np.arange(lo, lo + size))
        assert plan.span_ids(lo, lo + size).tolist() == want.tolist()


def test_span_ids_of_windowed_sources_and_after_a_rebase():
    def windowed():
        return MixturePlan(N3, (4000, 300, 17), ["a", "b", "c"], WeightSchedule.constant(dict(zip(N3, (5, 3, 2)))),
                           block=256, seed=2, version_hash="w", windows=(64, None, 8))

    for lo, hi in ((1000, 1600), (0, 5000), (4093, 4099)):  # through the full arrays the window shuffle needs
        by_block = np.concatenate([windowed().concatenated_ids(np.arange(p, min(p + 256, hi)))
                                   for p in range(lo, hi, 256)])  # one block at a time, fresh plans
        assert windowed().span_ids(lo, hi).tolist() == by_block.tolist()
    plan = make(N3, (40, 13, 4), (0.5, 0.3, 0.2), 16, 1, rebase=Rebase(32, (16, 10, 6)))
    check(plan, np.arange(32, 32 + 300))
    with pytest.raises(ConfigError, match="at least 32"):
        plan.span_ids(31, 100)
