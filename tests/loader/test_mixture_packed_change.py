"""A declared weight change (data_change) on a packed mixture at a loader-epoch start (each source
continues from its consumed count; resumed bit-exact at random points with 2 workers; per-source
multiset checks over the documents). Inside an epoch: tests/loader/test_mixture_pack_change.py."""

from __future__ import annotations

import numpy as np
import pytest

import resumable_data as rd
from resumable_data.plan.mixture import Rebase
from tests.loader.test_mixture_resume import W2, check_source_epochs, continue_from, loader_for, resume_points, run
from tests.mixture_data import WEIGHTS, open_sources, source_of, write_sources

SPEC = rd.Packing(16)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return write_sources(tmp_path_factory.mktemp("mixpack"))


def documents(batches):
    """The delivered documents in order (a document split across sequences once)."""
    docs = np.concatenate([np.frombuffer(b["document_ids"][3], dtype=np.int64) for b in batches])
    docs = docs[docs >= 0]
    return docs[np.concatenate([[True], docs[1:] != docs[:-1]])]


def dedup(ids):
    return ids[np.concatenate([[True], ids[1:] != ids[:-1]])]


def test_a_weight_change_at_a_packed_epoch_start_continues_every_source(dirs):
    a_batches, a_states = run(loader_for(dirs, WEIGHTS, packing=SPEC), 50)
    starts = [k for k, st in enumerate(a_states) if st["epoch_base"] == [2, k]]
    assert starts, [st["epoch_base"] for st in a_states]
    k = starts[0]  # the first step of loader epoch 2
    other = loader_for(dirs, W2, packing=SPEC)
    b_batches, b_states = continue_from(other, a_states[k], 60, label="data_change")
    assert other.recovery_label is rd.RecoveryLabel.DATA_CHANGE
    mix_a = rd.Mixture(open_sources(dirs), weights=WEIGHTS, block_size=16)
    mix_b = rd.Mixture(open_sources(dirs), weights=W2, block_size=16)
    sampler_a = mix_a.sampler(11, 4, packed=True)
    n = len(sampler_a)
    before = np.concatenate([sampler_a.indices(e, np.arange(n)) for e in range(2)])
    rebase = b_states[0]["mixture"]["rebase"]
    counts = np.bincount(source_of(mix_a.take(before).column("id").to_numpy()), minlength=3).tolist()
    assert rebase == [2 * n, counts]  # the epoch's first document; each source's consumed count
    sampler_b = mix_b.sampler(11, 4, packed=True)
    sampler_b.rebase(Rebase(rebase[0], tuple(rebase[1])))
    after = np.concatenate([sampler_b.indices(e, np.arange(n)) for e in range(2, 9)])
    got = np.concatenate([documents(a_batches[:k]), documents(b_batches)])
    expected = dedup(np.concatenate([before, after]))
    assert got.tolist() == expected[:len(got)].tolist()
    assert len(documents(b_batches)) > 3 * n  # several loader epochs under the new weights
    ids_b = mix_b.take(after).column("id").to_numpy()
    assert abs((source_of(ids_b) == 2).mean() - 0.6) < 0.05
    check_source_epochs(mix_a.take(np.concatenate([before, after])).column("id").to_numpy())
    # the rebased stream resumes bit-exact anywhere (the saved rebase adopted), with 2 workers
    make = lambda: loader_for(dirs, W2, packing=SPEC, num_workers=2, persistent_workers=True)  # noqa: E731
    assert resume_points(b_states, b_batches, make, 40, np.random.default_rng(7)) == 40
    # a second change, at a later epoch start of the rebased run, chains
    later = [j for j, st in enumerate(b_states) if st["epoch_base"][1] == b_states[0]["cursor"]["committed"] + j
             and st["epoch_base"][0] > 3]
    c_batches, c_states = continue_from(loader_for(dirs, WEIGHTS, packing=SPEC), b_states[later[0]], 10,
                                        label="data_change")
    again, _ = continue_from(loader_for(dirs, WEIGHTS, packing=SPEC, num_workers=2), b_states[later[0]], 10,
                             label="data_change")
    assert again == c_batches and c_states[0]["mixture"]["rebase"][0] == b_states[later[0]]["epoch_base"][0] * n


def test_a_packed_rebase_past_its_epoch_start_is_refused(dirs):
    _, states = run(loader_for(dirs, WEIGHTS, packing=SPEC), 30)
    k = next(j for j, st in enumerate(states) if st["epoch_base"] == [1, j])
    n = states[k]["plan"]["num_records"]
    st = states[k + 1]
    forged = {**st, "mixture": {**st["mixture"], "rebase": [n + 4, [2, 1, n + 1]]}}
    with pytest.raises(rd.ResumeError, match=r"state.mixture.rebase=.*a packing-window start \(a multiple of "
                                             r"window=1024 from an epoch's first document"):
        loader_for(dirs, WEIGHTS, packing=SPEC).load_state_dict(forged)


def test_every_state_of_a_rebased_packed_run_resumes_and_a_reused_loader_drops_its_old_indexes(dirs):
    """Each state's epoch is checked on the rebased order (the unrebased one has other epoch
    lengths); a loader whose indexes were built on the old order rebuilds them after the rebase."""
    a_batches, a_states = run(loader_for(dirs, WEIGHTS, packing=SPEC), 40)
    k = next(j for j, st in enumerate(a_states) if st["epoch_base"] == [2, j])
    b_batches, b_states = continue_from(loader_for(dirs, W2, packing=SPEC), a_states[k], 84, label="data_change")
    for j in range(len(b_batches) - 3):
        got, _ = continue_from(loader_for(dirs, W2, packing=SPEC), b_states[j], 4)
        assert got == b_batches[j:j + 4], j
    w2_batches, w2_states = run(loader_for(dirs, W2, packing=SPEC), 40)
    k2 = next(j for j, st in enumerate(w2_states) if st["epoch_base"] == [2, j])
    reused = loader_for(dirs, W2, packing=SPEC)
    assert continue_from(reused, w2_states[k2], 3)[0] == w2_batches[k2:k2 + 3]  # epoch 2 indexed, unrebased
    assert continue_from(reused, a_states[k], 8, label="data_change")[0] == b_batches[:8]


@pytest.mark.parametrize("epoch", [2**40, 2**62])
@pytest.mark.parametrize("label", [None, "data_change"])
def test_a_forged_packed_epoch_base_epoch_is_refused_naming_the_field(dirs, epoch, label):
    """A packed state's epoch_base epoch must not exceed its first step (each epoch holds a step)
    and its documents (epoch x num_records) must stay below 2**62: else a ResumeError, not an
    OverflowError or a state that counts 2**40 epochs of tokens."""
    _, states = run(loader_for(dirs, WEIGHTS, packing=SPEC), 30)
    k = next(j for j, st in enumerate(states) if st["epoch_base"] == [1, j])
    forged = {**states[k], "epoch_base": [epoch, k]}
    loader = loader_for(dirs, W2 if label else WEIGHTS, packing=SPEC)
    for call in (loader.validate_state_dict, loader.load_state_dict):
        with pytest.raises(rd.ResumeError, match=rf"state.epoch_base\[0\]={epoch}: expected a packed epoch <= its "
                                                 rf"first step {k}.*fix: pass an unmodified state"):
            call(forged, **({"label": label} if label else {}))
    assert loader.cursor.committed == 0
    loader.load_state_dict(states[k], **({"label": label} if label else {}))
    assert loader.state_dict()["epoch_base"] == [1, k] and loader.cursor.committed == k


@pytest.mark.parametrize("window", [{"web": 32, "code": 8}, {"math": 4}], ids=["web32-code8", "math4"])
def test_packing_and_a_data_change_over_windowed_sources(dirs, window):
    """Windowed sources (shuffle windows per source) under packing, with a data_change at loader
    epoch 2's start: the delivered documents are the plans' (before: the saved weights' first two
    epochs; after: the rebased plan's), and every source's records come in per-source epochs."""
    def mix(weights):
        return rd.Mixture(open_sources(dirs), weights=weights, block_size=16, shuffle_window=window)

    def make(weights):
        return rd.DataLoader(mix(weights), batch_size=4, seed=11, packing=SPEC)

    a_batches, a_states = run(make(WEIGHTS), 60)
    k = next(j for j, st in enumerate(a_states) if st["epoch_base"] == [2, j])
    b_batches, b_states = continue_from(make(W2), a_states[k], 60, label="data_change")
    sampler_a = mix(WEIGHTS).sampler(11, 4, packed=True)
    n = len(sampler_a)
    before = np.concatenate([sampler_a.indices(e, np.arange(n)) for e in range(2)])
    rebase = b_states[0]["mixture"]["rebase"]
    assert rebase[0] == 2 * n
    sampler_b = mix(W2).sampler(11, 4, packed=True)
    sampler_b.rebase(Rebase(rebase[0], tuple(rebase[1])))
    after = np.concatenate([sampler_b.indices(e, np.arange(n)) for e in range(2, 9)])
    planned = np.concatenate([before, after])
    got = np.concatenate([documents(a_batches[:k]), documents(b_batches)])
    assert len(got) > 2 * n and got.tolist() == dedup(planned)[:len(got)].tolist()
    check_source_epochs(mix(WEIGHTS).take(planned).column("id").to_numpy())
    unchanged = np.concatenate([sampler_a.indices(e, np.arange(n)) for e in range(9)])
    check_source_epochs(mix(WEIGHTS).take(unchanged).column("id").to_numpy())
    assert not np.array_equal(np.sort(sampler_a.indices(0, np.arange(n))), sampler_a.indices(0, np.arange(n)))
    # a state after the change resumes exactly with 2 workers
    make2 = lambda: rd.DataLoader(mix(W2), batch_size=4, seed=11, packing=SPEC, num_workers=2)  # noqa: E731
    assert resume_points(b_states, b_batches, make2, 4, np.random.default_rng(3)) == 4
