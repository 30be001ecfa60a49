"""A data_change resume of a single source whose dataset changed (records appended, or removed):
the stream continues at the same step, epoch and fraction of the new version's epoch
(plan.rebase), compared batch by batch, in order, with the stream that rule predicts, on 0 and 2
workers; a second resume from the same state gives the same stream; without the label it is refused."""

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.plan import epoch_records
from tests.loader.conftest import N_RECORDS, canon

G = 8
AFTER = 30  # batches taken after the resume: past the end of the rebased epoch


def write(tmp_path_factory, n, name):
    d = tmp_path_factory.mktemp(name)
    rd.write_arrow_shards(pa.table({"id": pa.array(np.arange(n, dtype=np.int64))}), d, num_shards=2)
    rd.pin(d)
    return rd.ArrowShards(d)


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    """Version A (N_RECORDS records), B (23 records appended), C (57 records removed)."""
    return {k: write(tmp_path_factory, n, k) for k, n in (("a", N_RECORDS), ("b", N_RECORDS + 23), ("c", 100))}


def loader(source, tail, workers=0, batch=G):
    extra = dict(num_workers=workers, persistent_workers=True) if workers else {}
    return rd.DataLoader(source, batch_size=batch, shuffle=True, seed=7, tail=tail, **extra)


def take(ld, n):
    out = []
    while len(out) < n:
        before = len(out)
        for batch in ld:
            out.append(batch)
            if len(out) == n:
                break
        assert len(out) > before or not out, "an iter(loader) produced no batch"
    return out


def ids(batches):
    return [b["id"].tolist() for b in batches]


def saved_position(tail, n, step):
    """Where the saved stream (version A, no origin) stood at ``step``: (epoch, offset)."""
    if tail == "continuous":
        return divmod(step * G, n)
    per_epoch = n // G if tail == "drop" else -(-n // G)
    return step // per_epoch, (step % per_epoch) * G


def predicted(tail, n_a, plan_b, step, count, g=G):
    """The documented rule, written out: epoch e, offset floor(o * L_B / L_A) (a whole batch under
    drop), the rest of that epoch in batches of G (short at its end under partial), then whole
    epochs; each position's record from version B's epoch order."""
    n_b = plan_b.num_records
    len_a = (n_a // G) * G if tail == "drop" else n_a
    len_b = (n_b // g) * g if tail == "drop" else n_b
    epoch, offset = saved_position(tail, n_a, step)
    f = offset * len_b // len_a
    f -= f % g if tail == "drop" else 0
    p, out = epoch * len_b + f, []
    for _ in range(count):
        stop = p + g if tail == "continuous" else min(p + g, (p // len_b + 1) * len_b)
        pos = np.arange(p, stop)
        e, o = np.divmod(pos, len_b)
        out.append([int(epoch_records(n_b, plan_b.order, o[e == k], version_hash=plan_b.version_hash, seed=7,
                                      epoch=int(k))[j]) for k in np.unique(e) for j in range(int((e == k).sum()))])
        p = stop
    return out


def state_after(source, tail, k):
    ld = loader(source, tail)
    take(ld, k)
    return ld.state_dict()  # commit="auto": the k-th batch is committed here


@pytest.mark.parametrize("tail", ["partial", "drop", "continuous"])
@pytest.mark.parametrize("to", ["b", "c"])
@pytest.mark.parametrize("k", [25, 40])  # mid-epoch; 40: the first step of epoch 2 under partial
def test_the_stream_continues_at_the_same_epoch_and_fraction(versions, tail, to, k):
    state = state_after(versions["a"], tail, k)
    ld = loader(versions[to], tail)
    ld.load_state_dict(state, label="data_change")
    assert ld.cursor.committed == k and ld.plan.num_records == len(versions[to])
    assert ids(take(ld, AFTER)) == predicted(tail, N_RECORDS, ld.plan, k, AFTER)


@pytest.mark.parametrize("workers", [0, 2])
def test_two_resumes_and_worker_counts_give_the_same_stream(versions, workers):
    state = state_after(versions["a"], "partial", 25)
    runs = []
    for _ in range(2):
        ld = loader(versions["b"], "partial", workers)
        ld.load_state_dict(state, label="data_change")
        runs.append([canon(b) for b in take(ld, AFTER)])
    assert runs[0] == runs[1]
    expected = predicted("partial", N_RECORDS, ld.plan, 25, AFTER)
    assert [np.frombuffer(b["id"][3], dtype=np.int64).tolist() for b in runs[0]] == expected


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_written_after_the_rebase_resumes_faithfully(versions, workers):
    ld = loader(versions["b"], "partial")
    ld.load_state_dict(state_after(versions["a"], "partial", 25), label="data_change")
    head = ids(take(ld, 7))
    later = ld.state_dict()
    assert later["batch_origin"] == {"step": 25, "position": N_RECORDS + 23 + 40 * (N_RECORDS + 23) // N_RECORDS,
                                     "epoch_first_step": 20}
    tail = ids(take(ld, 20))
    again = loader(versions["b"], "partial", workers)
    again.load_state_dict(later)  # a faithful continuation of the rebased stream
    assert ids(take(again, 20)) == tail
    assert head + tail == predicted("partial", N_RECORDS, ld.plan, 25, 27)


def test_without_the_label_the_change_is_refused_and_nothing_changes(versions):
    state = state_after(versions["a"], "partial", 25)
    ld = loader(versions["b"], "partial")
    with pytest.raises(rd.ResumeError) as e:
        ld.load_state_dict(state)
    msg = str(e.value)
    assert "dataset_version: saved" in msg and "num_records: saved 157 vs current 180" in msg
    assert "label='data_change'" in msg
    assert ld.cursor.committed == 0 and ld.plan.origin is None


def test_skips_after_the_resume_step_are_refused(versions):
    ld = loader(versions["a"], "partial")
    take(ld, 25)
    ld.skip_steps(30, 32, "bad shard")
    state = ld.state_dict()
    with pytest.raises(rd.ResumeError, match=r"skipped steps \[\[30, 32\]\].*data_change rebases"):
        loader(versions["b"], "partial").load_state_dict(state, label="data_change")


def test_the_same_version_under_the_label_is_not_rebased(versions):
    state = state_after(versions["a"], "partial", 25)
    ld = loader(versions["a"], "partial")
    ld.load_state_dict(state, label="data_change")
    assert ld.plan.origin is None
    ref = loader(versions["a"], "partial")
    take(ref, 25)
    assert ids(take(ld, 10)) == ids(take(ref, 10))


@pytest.mark.parametrize("tail", ["partial", "continuous"])
def test_a_declared_batch_change_at_the_same_time_cuts_the_rebased_stream_by_the_new_batch(versions, tail):
    state = state_after(versions["a"], tail, 25)
    ld = loader(versions["b"], tail, batch=12)
    with pytest.raises(rd.ResumeError, match="global batch size: saved 8 vs current 12"):
        ld.load_state_dict(state, label="data_change")
    ld.load_state_dict(state, label="data_change", on_batch_change="continue")
    assert ld.recovery_label is rd.RecoveryLabel.DATA_CHANGE
    assert ids(take(ld, AFTER)) == predicted(tail, N_RECORDS, ld.plan, 25, AFTER, g=12)


@pytest.mark.parametrize("policy", ["contiguous", "strided"])
def test_two_ranks_under_wrap_each_continue_their_share_of_the_rebased_stream(versions, policy):
    """World size 2 (tail 'wrap', each epoch whole global batches): a rebase at a whole batch, each
    rank delivering its share of every rebased global batch."""
    def rank_loader(source, rank):
        return rd.DataLoader(source, batch_size=G // 2, shuffle=True, seed=7, sharding=rd.Sharding(2, rank, policy))

    k = 25
    for rank in (0, 1):
        first = rank_loader(versions["a"], rank)
        take(first, k)
        state = first.state_dict()
        ld = rank_loader(versions["b"], rank)
        ld.load_state_dict(state, label="data_change")
        plan, n_b = ld.plan, len(versions["b"])
        assert plan.tail is rd.Tail.WRAP and plan.global_batch == G
        steps_a, len_b = -(-N_RECORDS // G), -(-n_b // G) * G
        epoch, offset = divmod(k, steps_a)[0], (k % steps_a) * G
        f = offset * len_b // (steps_a * G)
        p = epoch * len_b + f - f % G
        want = []
        for _ in range(AFTER):
            mine = rd.Sharding(2, rank, policy).local_positions(p, p + G)
            e, o = np.divmod(mine, len_b)
            want.append([int(epoch_records(n_b, plan.order, np.array([x % n_b]), version_hash=plan.version_hash,
                                           seed=7, epoch=int(y))[0]) for x, y in zip(o, e)])
            p += G
        assert ids(take(ld, AFTER)) == want
