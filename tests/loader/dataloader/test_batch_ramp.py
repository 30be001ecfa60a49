"""Batch schedules through rd.DataLoader, and declared global-batch changes on resume.

Every resume test compares every later batch in order; the batch-change tests count every record
of the epoch (a multiset: none lost, none repeated)."""

from collections import Counter

import numpy as np
import pytest

import resumable_data as rd
from tests.loader.conftest import N_RECORDS, Augmented, canon


def take(loader, n):
    """``n`` batches across epochs (a new iter() per epoch). A state saved right after an epoch's
    last batch resumes into an empty pass first (torch's StatefulDataLoader semantics), so one
    empty pass is allowed, never two in a row."""
    out, empty = [], 0
    while len(out) < n:
        before = len(out)
        for batch in loader:
            out.append(canon(batch))
            if len(out) == n:
                break
        empty = empty + 1 if len(out) == before else 0
        assert empty < 2, "two passes in a row delivered nothing"
    return out

RAMP = rd.BatchRamp(start=2, increment=2, ramp_samples=120, final=10)  # per rank
TOTAL = 70  # steps: past the ramp (~35 steps) and into the fourth epoch of 157 records


def ids(batch):
    """Record ids of a canonical batch (see conftest.canon)."""
    return np.frombuffer(batch["id"][3], dtype=np.int64).tolist()


def ramp_loader(source, workers=0, **kw):
    extra = dict(num_workers=workers, persistent_workers=True) if workers else {}
    return rd.DataLoader(source, batch_size=kw.pop("batch_size", RAMP), shuffle=True, seed=7, **extra, **kw)


def resumed_at(make, k, **load):
    """Batches ``k..TOTAL`` of a loader restored from the state saved after ``k`` batches."""
    first = make()
    take(first, k)
    state = first.state_dict()
    again = make()
    again.load_state_dict(state, **load)
    return take(again, TOTAL - k)


@pytest.fixture(scope="module")
def reference(shards):
    return take(ramp_loader(shards), TOTAL)


def test_a_ramp_steps_through_the_schedule_and_counts_samples(shards, reference):
    ld = ramp_loader(shards)
    plan = ld.plan
    assert plan.tail is rd.Tail.CONTINUOUS and plan.schedule == RAMP  # world 1: global == per rank
    sizes = [len(ids(b)) for b in reference]
    assert sizes == [plan.batch_of(s) for s in range(TOTAL)]
    assert sizes[0] == 2 and sizes[-1] == 10 and sorted(set(sizes)) == [2, 4, 6, 8, 10]
    take(ld, 25)
    ld.state_dict()  # commit="auto": the 25th batch is committed here
    c = ld.counters
    assert (c.microbatches, c.samples) == (25, plan.step_start(25)) == (25, sum(sizes[:25]))


def test_every_epoch_holds_each_record_once_and_len_counts_its_steps(shards, reference):
    stream = np.concatenate([ids(b) for b in reference])
    for epoch in range(len(stream) // N_RECORDS):
        assert sorted(stream[epoch * N_RECORDS:(epoch + 1) * N_RECORDS].tolist()) == list(range(N_RECORDS))
    ld = ramp_loader(shards)
    lens, delivered = [], []
    for _ in range(3):
        lens.append(len(ld))
        delivered.append(sum(1 for _ in ld))
    assert lens == delivered and sum(lens) == ld.cursor.delivered
    assert lens == [ld.plan.steps_in_epoch(e) for e in range(3)] and len(set(lens)) > 1


@pytest.mark.parametrize("workers, points", [(0, list(range(0, TOTAL, 3)) + [TOTAL - 1]), (2, [0, 17, 36, 41, 66])])
def test_a_ramp_resumes_bit_exact(shards, reference, workers, points):
    for k in points:
        assert resumed_at(lambda: ramp_loader(shards, workers), k) == reference[k:], f"resume at step {k}"


def test_a_steps_list_resumes_bit_exact_with_per_sample_randomness():
    make = lambda: rd.DataLoader(Augmented(), batch_size=[(0, 3), (10, 7), (25, 5)], seed=2, shuffle=True)
    ref = take(make(), TOTAL)
    assert [b["record"][2][0] for b in ref[8:12]] == [3, 3, 7, 7]
    for k in (0, 9, 10, 11, 24, 25, 50):
        assert resumed_at(make, k, allow_unpinned=True) == ref[k:]


def test_two_ranks_slice_each_step_of_a_ramp_exactly(shards):
    single = take(ramp_loader(shards, batch_size=RAMP.scaled(2)), 40)
    ranks = [ramp_loader(shards, sharding=rd.Sharding(2, r)) for r in range(2)]
    assert ranks[0].plan == ranks[1].plan and ranks[0].plan.schedule == RAMP.scaled(2)
    per_rank = [take(ld, 40) for ld in ranks]
    for step, (a, b, whole) in enumerate(zip(*per_rank, single)):
        ids_a, ids_b = ids(a), ids(b)
        assert len(ids_a) == len(ids_b) == RAMP.batch_of(step)
        pos = [ld.plan.local_positions(step, ld.sharding) for ld in ranks]
        assert np.array_equal(np.concatenate(pos), np.arange(*ranks[0].plan.step_span(step)))  # disjoint, exact
        assert ids_a + ids_b == ids(whole)  # contiguous: rank 0 then rank 1, the global batch


def test_schedule_arguments_are_validated(shards):
    with pytest.raises(rd.ConfigError, match=r"drop_last.*batch schedule.*continuous"):
        rd.DataLoader(shards, batch_size=RAMP, drop_last=True)
    with pytest.raises(rd.ConfigError, match=r"tail.*'continuous' with a batch schedule"):
        rd.DataLoader(shards, batch_size=RAMP, tail="wrap", sharding=rd.Sharding(2, 0))
    with pytest.raises(rd.ConfigError, match=r"first pair at step 0"):
        rd.DataLoader(shards, batch_size=[(5, 8)])
    with pytest.raises(rd.ConfigError, match=r"batch_size.*an int, a list of \(step, batch\) pairs"):
        rd.DataLoader(shards, batch_size={0: 8})
    fixed = rd.DataLoader(shards, batch_size=[(0, 8)])  # a constant schedule is the fixed batch
    assert fixed.plan == rd.DataLoader(shards, batch_size=8).plan


# -- declared global-batch changes on resume ---------------------------------------------------------


def epoch_ids(loader):
    """Record ids of the rest of the loader's current pass, in order."""
    return [i for b in loader for i in b["id"].tolist()]


@pytest.mark.parametrize("tail", ["partial", "continuous"])
def test_chained_batch_changes_lose_and_repeat_no_record(shards, tail):
    make = lambda g: rd.DataLoader(shards, batch_size=g, shuffle=True, seed=5, tail=tail)
    a = make(8)
    seen = [i for b in take(a, 5) for i in ids(b)]
    state = a.state_dict()
    b = make(12)
    with pytest.raises(rd.ResumeError, match=r"global batch size: saved 8 vs current 12.*on_batch_change='continue'"):
        b.load_state_dict(state)
    b.load_state_dict(state, on_batch_change="continue")
    assert b.recovery_label is rd.RecoveryLabel.ELASTIC_RESHARD
    got = take(b, 4)
    assert [len(ids(x)) for x in got] == [12] * 4
    seen += [i for x in got for i in ids(x)]
    state = b.state_dict()
    assert state["schema_version"] == 5 and state["batch_origin"] == {"step": 5, "position": 40, "epoch_first_step": 0}
    c = make(5)
    c.load_state_dict(state, on_batch_change="continue")
    assert c.snapshot().plan.origin.to_dict() == {"step": 9, "position": 88, "epoch_first_step": 0}
    seen += epoch_ids(c)[:N_RECORDS - len(seen)]  # continuous: the last batch may reach into epoch 1
    assert Counter(seen) == Counter(range(N_RECORDS))
    assert seen[:40] == [i for x in take(make(8), 5) for i in ids(x)]


def test_a_state_after_a_batch_change_resumes_bit_exact(shards):
    make = lambda g: rd.DataLoader(shards, batch_size=g, shuffle=True, seed=5)
    a = make(8)
    take(a, 7)
    b = make(6)
    b.load_state_dict(a.state_dict(), on_batch_change="continue")
    take(b, 3)
    state = b.state_dict()
    ref = take(b, 40)  # across epoch ends: the rest of epoch 0 in batches of 6, then whole epochs
    for k in (0, 1, 15, 22, 39):
        c = make(6)
        c.load_state_dict(state)  # same batch as saved: no declaration, the origin is kept
        take(c, k)
        d = make(6)
        d.load_state_dict(c.state_dict())
        assert take(d, 40 - k) == ref[k:]
    assert len(make(6)) == -(-N_RECORDS // 6)  # a fresh loader's epoch; the resumed one differs:
    c = make(6)
    c.load_state_dict(state)
    assert len(c) == 7 + -(-(N_RECORDS - 56) // 6)  # 7 steps of 8, then the rest in sixes


def test_a_ramp_continues_after_a_change_to_a_fixed_batch(shards, reference):
    a = ramp_loader(shards)
    head = take(a, 30)
    b = ramp_loader(shards, batch_size=16, tail="continuous")
    b.load_state_dict(a.state_dict(), on_batch_change="continue")
    tail = take(b, 20)
    got = [i for x in head + tail for i in ids(x)]
    expected = [i for x in reference for i in ids(x)]
    assert got == expected[:len(got)]  # one continuous stream: the same records in the same order


@pytest.mark.parametrize("tail, extra", [("drop", {}), ("wrap", {"sharding": rd.Sharding(1, 0)})])
def test_a_batch_change_under_drop_or_wrap_is_refused(shards, tail, extra):
    a = rd.DataLoader(shards, batch_size=8, tail=tail, **extra)
    take(a, 3)
    with pytest.raises(rd.ResumeError, match=rf"tail='{tail}', whose epochs are shaped by the batch.*fix:"):
        rd.DataLoader(shards, batch_size=4, tail=tail, **extra).load_state_dict(a.state_dict(), on_batch_change="continue")


def test_a_refused_resume_changes_nothing(shards):
    a = rd.DataLoader(shards, batch_size=8, shuffle=True, seed=5)
    take(a, 4)
    saved = a.state_dict()
    b = rd.DataLoader(shards, batch_size=4, shuffle=True, seed=5)
    take(b, 6)
    before = b.snapshot()
    with pytest.raises(rd.ResumeError, match=r"saved 8 vs current 4"):
        b.load_state_dict(saved)
    with pytest.raises(rd.ConfigError, match=r"on_batch_change"):
        b.load_state_dict(saved, on_batch_change="sometimes")
    bad = {**saved, "skipped": [[10, 12, "bad region"]]}
    with pytest.raises(rd.ResumeError, match=r"skipped steps \[\[10, 12\]\] lie after the resume step 4"):
        b.load_state_dict(bad, on_batch_change="continue")
    assert b.snapshot() == before
    ref = rd.DataLoader(shards, batch_size=4, shuffle=True, seed=5)
    take(ref, 6)
    assert take(b, 30) == take(ref, 30)


def test_forged_batch_origins_are_refused(shards):
    a = rd.DataLoader(shards, batch_size=8, tail="continuous")
    take(a, 3)
    b = rd.DataLoader(shards, batch_size=6, tail="continuous")
    b.load_state_dict(a.state_dict(), on_batch_change="continue")
    take(b, 2)
    state = b.state_dict()
    for origin, match in (({"step": 9, "position": 24, "epoch_first_step": 0}, r"batch_origin.*cursor.committed=5"),
                          ({"step": 3, "position": 24}, r"batch_origin.*missing"),
                          ({"step": 3, "position": 24, "epoch_first_step": 4}, r"epoch_first_step")):
        with pytest.raises(rd.ResumeError, match=match):
            rd.DataLoader(shards, batch_size=6, tail="continuous").load_state_dict({**state, "batch_origin": origin})
    v2 = {k: v for k, v in state.items() if k not in ("batch_origin", "sample_seeding")}
    with pytest.raises(rd.ResumeError, match=r"schema_version|batch_origin"):
        rd.DataLoader(shards, batch_size=6, tail="continuous").load_state_dict({**v2, "schema_version": 2})


def test_the_continuous_tail_is_refused_when_packing(shards):
    with pytest.raises(rd.ConfigError, match=r"tail='continuous': expected drop, wrap or partial when packing"):
        rd.DataLoader(shards, batch_size=2, tail="continuous", packing=rd.Packing(seq_len=16, tokens="tokens"))


def test_persistent_workers_follow_a_batch_origin_set_after_they_started(shards):
    a = rd.DataLoader(shards, batch_size=8, shuffle=True, seed=5)
    take(a, 6)
    state = a.state_dict()
    reference = rd.DataLoader(shards, batch_size=6, shuffle=True, seed=5)
    reference.load_state_dict(state, on_batch_change="continue")
    expected = take(reference, 30)
    flat = [i for x in expected for i in ids(x)]  # the saved stream from its 49th sample on, across epoch 0 -> 1
    assert flat == a.plan.records(np.arange(48, 48 + len(flat))).tolist() and len(flat) > N_RECORDS - 48
    pooled = rd.DataLoader(shards, batch_size=6, shuffle=True, seed=5, num_workers=2, persistent_workers=True)
    take(pooled, 3)  # the workers exist and hold the fetcher before the origin is set
    pooled.load_state_dict(state, on_batch_change="continue")
    assert take(pooled, 30) == expected
