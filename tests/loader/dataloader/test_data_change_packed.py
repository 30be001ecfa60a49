"""A data_change resume of a packed single source whose dataset changed (documents appended, or
removed): the stream continues at the same step, epoch and in-epoch step of the new version's
packing, or with the next epoch when the new version's epoch is shorter (plan.rebase_packed).
Every batch after the resume is compared, in order, with an uninterrupted run over the new version
from the rebased position, on 0 and 2 workers; a state written after the rebase resumes exactly;
no warning; a packing change with it, or no label, is refused."""

import warnings

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from tests.loader.conftest import canon

SPEC = rd.Packing(16, "concat", window=20, eos_id=0)
K_MID = 30  # mid-epoch: inside epoch 1 of A and B, past the end of C's (shorter) epoch 1


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    """A (120 documents), B (A with 30 appended), C (A's first 50)."""
    rng = np.random.default_rng(3)
    lengths = np.maximum(1, rng.lognormal(2.5, 0.8, 150).astype(int))
    docs = [rng.integers(1, 5000, k).astype(np.int32).tolist() for k in lengths]
    out = {}
    for name, n in (("a", 120), ("b", 150), ("c", 50)):
        d = tmp_path_factory.mktemp(name)
        rd.write_arrow_shards(pa.table({"tokens": pa.array(docs[:n], type=pa.list_(pa.int32())), "id": np.arange(n)}),
                              d, num_shards=2, rows_per_batch=40)
        rd.pin(d)
        out[name] = rd.ArrowShards(d)
    return out


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "cache"))


def loader(source, workers=0, spec=SPEC):
    extra = dict(num_workers=workers, persistent_workers=True) if workers else {}
    return rd.DataLoader(source, batch_size=3, packing=spec, shuffle=True, seed=4, **extra)


def passes(ld, n):
    """The batches of ``n`` passes (``for batch in loader``), pass by pass."""
    return [[canon(b) for b in ld] for _ in range(n)]


@pytest.fixture(scope="module")
def reference(versions):
    """Each version's first four epochs, uninterrupted, epoch by epoch."""
    return {k: passes(loader(v), 4) for k, v in versions.items()}


def state_at(source, k):
    """The state of a run over ``source`` after epoch 0 and ``k`` batches of epoch 1."""
    ld = loader(source)
    passes(ld, 1)
    it = iter(ld)
    for _ in range(k):
        next(it)
    return ld.state_dict()  # commit="auto": the k-th batch is committed here


def expected(ref, k):
    """The rule: epoch 1 of the new version from its in-epoch step k, then epoch 2; epochs 2 and 3
    when the new version's epoch 1 has no step k."""
    return [ref[1][k:], ref[2]] if k < len(ref[1]) else [ref[2], ref[3]]


@pytest.mark.parametrize("to", ["b", "c"])
@pytest.mark.parametrize("k", [K_MID, 0])  # 0: an epoch boundary
@pytest.mark.parametrize("workers", [0, 2])
def test_the_packed_stream_continues_at_the_same_epoch_and_in_epoch_step(versions, reference, to, k, workers):
    assert k < len(reference["a"][1]) and len(reference["b"][1]) > K_MID > len(reference["c"][1])
    state = state_at(versions["a"], k)
    step = len(reference["a"][0]) + k
    assert state["epoch_base"] == [1, len(reference["a"][0])] and state["cursor"]["committed"] == step
    ld = loader(versions[to], workers)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # continued, not restarted: no warning
        ld.load_state_dict(state, label="data_change")
        assert ld.cursor.committed == step and ld.recovery_label is rd.RecoveryLabel.DATA_CHANGE
        got = passes(ld, 2)
    want = expected(reference[to], k)
    assert got == want  # every batch, in order
    if k == 0:
        assert got[0] == reference[to][1]  # an epoch boundary: the new version's epoch 1 whole


@pytest.mark.parametrize("to", ["b", "c"])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_written_after_the_rebase_resumes_exactly(versions, reference, to, workers):
    state = state_at(versions["a"], K_MID)
    ld = loader(versions[to])
    ld.load_state_dict(state, label="data_change")
    it = iter(ld)
    head = [canon(next(it)) for _ in range(2)]
    later = ld.state_dict()
    rebased_epoch = 1 if to == "b" else 2
    first = len(reference["a"][0]) if to == "b" else len(reference["a"][0]) + K_MID
    assert later["epoch_base"] == [rebased_epoch, first] and "batch_origin" not in later
    rest = [canon(b) for b in it] + [canon(b) for b in ld]  # the rest of this pass, then the next one
    again = loader(versions[to], workers)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again.load_state_dict(later)  # a faithful continuation of the rebased stream
        assert [canon(b) for b in again] + [canon(b) for b in again] == rest
    want = expected(reference[to], K_MID)
    assert head + rest == want[0] + want[1]
    # and a second data_change from there (B -> A): again at the same epoch and in-epoch step
    if to == "b":
        back = loader(versions["a"], workers)
        back.load_state_dict(later, label="data_change")
        assert passes(back, 1) == [reference["a"][1][K_MID + 2:]]


def test_a_second_resume_from_the_same_state_gives_the_same_stream(versions):
    state = state_at(versions["a"], K_MID)
    runs = []
    for workers in (0, 2, 0):
        ld = loader(versions["b"], workers)
        ld.load_state_dict(state, label="data_change")
        runs.append(passes(ld, 2))
    assert runs[0] == runs[1] == runs[2]


def test_a_packing_change_with_the_data_change_is_refused_naming_packing(versions):
    state = state_at(versions["a"], K_MID)
    for spec in (rd.Packing(32, "concat", window=20, eos_id=0), None):
        ld = loader(versions["b"], spec=spec)
        with pytest.raises(rd.ConfigError, match=r"packing=.*saved packing spec.*fix: build the loader with packing="):
            ld.load_state_dict(state, label="data_change")
        assert ld.cursor.committed == 0 and ld.recovery_label is rd.RecoveryLabel.FAITHFUL_CONTINUATION


def test_without_the_label_the_change_is_refused_naming_the_label(versions):
    state = state_at(versions["a"], K_MID)
    ld = loader(versions["b"])
    with pytest.raises(rd.ResumeError, match=r"num_records: saved 120 vs current 150.*label='data_change'"):
        ld.load_state_dict(state)
    assert ld.cursor.committed == 0


def test_skips_after_the_resume_step_are_refused(versions):
    ld = loader(versions["a"])
    it = iter(ld)
    for _ in range(5):
        next(it)
    ld.skip_steps(8, 9, "bad shard")
    state = ld.state_dict()
    with pytest.raises(rd.ResumeError, match=r"skipped steps \[\[8, 9\]\].*data_change rebases"):
        loader(versions["b"]).load_state_dict(state, label="data_change")
