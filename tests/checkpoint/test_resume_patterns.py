"""Checkpoint-level behaviour that real training scripts rely on: ``label="data_change"`` through
``rd.resume_or_start`` continues an ``rd.Mixture`` per source (as the loader's own restore does),
a changed single source continues at the same epoch and fraction of the new version (a packed
one at the same epoch and in-epoch step of the new version's packing; with a packing change too it
is refused), and a learning rate set by hand every
iteration (nanoGPT) is progress, not configuration."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import resumable_data as rd
from resumable_data.plan import epoch_records
from tests.mixture_data import WEIGHTS, open_sources, write_sources

W2 = {"web": 0.2, "code": 0.2, "math": 0.6}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return write_sources(tmp_path_factory.mktemp("clientmix"))


def _state(loader, lr=0.1):
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    return rd.TrainingState(model=model, optimizer=opt, loader=loader, watch_model=False), opt


def _mix_loader(dirs, weights):
    return rd.DataLoader(rd.Mixture(open_sources(dirs), weights=weights, block_size=16), batch_size=4, seed=11)


def _ids(loader, n, key="id"):
    out, it = [], iter(loader)
    for _ in range(n):
        out.append(next(it)[key].tolist())
    return out


def test_data_change_through_resume_or_start_continues_each_source(dirs, tmp_path):
    loader = _mix_loader(dirs, WEIGHTS)
    state, _ = _state(loader)
    _ids(loader, 7)
    rd.save_checkpoint(tmp_path, state, step=7)
    saved = loader.state_dict()
    # the loader-level data_change: the reference for what the checkpoint level must deliver
    ref = _mix_loader(dirs, W2)
    ref.load_state_dict(saved, label="data_change")
    want = _ids(ref, 6)
    resumed = _mix_loader(dirs, W2)
    state2, _ = _state(resumed)
    with pytest.warns(RuntimeWarning, match="data_change"):
        assert rd.resume_or_start(tmp_path, state2, label="data_change") == 7
    assert resumed.cursor.committed == 7 and resumed.recovery_label is rd.RecoveryLabel.DATA_CHANGE
    assert _ids(resumed, 6) == want  # every batch, in order: not the stream's start
    assert want != _ids(_mix_loader(dirs, W2), 6)


def _versions(tmp_path, sizes=(("a", 40), ("b", 44))):
    import pyarrow as pa

    for name, n in sizes:
        rd.write_arrow_shards(pa.table({"id": list(range(n)), "tokens": [[i + 1] * (1 + i % 5) for i in range(n)]}),
                              tmp_path / name, num_shards=1)
        rd.pin(tmp_path / name)


def test_data_change_over_a_changed_single_source_continues_at_the_same_epoch_and_fraction(tmp_path):
    _versions(tmp_path)
    loader = rd.DataLoader(rd.ArrowShards(tmp_path / "a"), batch_size=4, shuffle=True, seed=0)
    state, _ = _state(loader)
    _ids(loader, 3)
    rd.save_checkpoint(tmp_path / "ck", state, step=3)
    for attempt in range(2):  # a second resume from the same checkpoint gives the same stream
        other = rd.DataLoader(rd.ArrowShards(tmp_path / "b"), batch_size=4, shuffle=True, seed=0)
        state2, _ = _state(other)
        if attempt == 0:
            with pytest.raises(rd.CompatibilityError, match="label='data_change'"):
                rd.resume_or_start(tmp_path / "ck", state2)  # a faithful resume refuses the other dataset
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # continued, not restarted
            assert rd.resume_or_start(tmp_path / "ck", state2, label="data_change") == 3
        assert other.cursor.committed == 3 and other.recovery_label is rd.RecoveryLabel.DATA_CHANGE
        # step 3 of 10 per epoch: epoch 0, offset 12 of 40 -> offset floor(12 * 44 / 40) = 13 of the new epoch
        plan = other.plan
        want = epoch_records(44, plan.order, np.arange(13, 44), version_hash=plan.version_hash, seed=0, epoch=0)
        got = _ids(other, 8)  # the rest of epoch 0 (31 records: 7 batches of 4 and one of 3)
        assert got == [want[i:i + 4].tolist() for i in range(0, 31, 4)]
        assert [len(b) for b in got] == [4] * 7 + [3]


def _packed_run(tmp_path, name, **kw):
    pack = dict(batch_size=2, seed=0, packing=rd.Packing(8, tokens="tokens", eos_id=0), drop_last=True)
    return rd.DataLoader(rd.ArrowShards(tmp_path / name), **{**pack, **kw})


def _passes(loader, n):
    return [[b["input_ids"].tolist() for b in loader] for _ in range(n)]


@pytest.mark.parametrize("k", [3, 0])  # mid-epoch, and the epoch boundary (after epoch 0's pass)
def test_data_change_of_a_packed_single_source_continues_the_stream(tmp_path, k):
    _versions(tmp_path)
    loader = _packed_run(tmp_path, "a")
    state, _ = _state(loader)
    for _ in loader:  # epoch 0
        pass
    _ids(loader, k, "input_ids")
    rd.save_checkpoint(tmp_path / "ck", state, step=7)
    saved = loader.state_dict()
    first = saved["epoch_base"][1]
    ref = _passes(_packed_run(tmp_path, "b"), 3)  # the new version, uninterrupted, epoch by epoch
    # the loader-level data_change: the reference the checkpoint level must deliver
    own = _packed_run(tmp_path, "b")
    own.load_state_dict(saved, label="data_change")
    want = _passes(own, 2)
    assert want == [ref[1][k:], ref[2]]  # epoch 1 of the new version from its in-epoch step k, then epoch 2
    for workers in (0, 2):
        other = _packed_run(tmp_path, "b", num_workers=workers)
        state2, _ = _state(other)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # continued, not restarted: no warning at all
            assert rd.resume_or_start(tmp_path / "ck", state2, label="data_change") == 7
        assert other.cursor.committed == first + k and other.recovery_label is rd.RecoveryLabel.DATA_CHANGE
        it = iter(other)
        head = [next(it)["input_ids"].tolist() for _ in range(2)]
        rd.save_checkpoint(tmp_path / f"ck2_{workers}", state2, step=9)
        # a second resume, from a checkpoint written after the rebase: faithful and exact
        again = _packed_run(tmp_path, "b", num_workers=workers)
        state3, _ = _state(again)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert rd.resume_or_start(tmp_path / f"ck2_{workers}", state3) == 9
        assert head + sum(_passes(again, 2), []) == want[0] + want[1]


def test_data_change_with_a_packing_change_is_refused_naming_packing(tmp_path):
    _versions(tmp_path)
    loader = _packed_run(tmp_path, "a")
    state, _ = _state(loader)
    _ids(loader, 3, "input_ids")
    rd.save_checkpoint(tmp_path / "ck", state, step=3)
    other = _packed_run(tmp_path, "b", packing=rd.Packing(16, tokens="tokens", eos_id=0))
    state2, _ = _state(other)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused, never a silent (or warned) restart
        with pytest.raises(rd.ConfigError, match=r"packing=.*fix: build the loader with packing=rd.Packing"):
            rd.resume_or_start(tmp_path / "ck", state2, label="data_change")
    assert other.cursor.committed == 0


def test_a_learning_rate_set_by_hand_each_iteration_resumes(tmp_path):
    loader = rd.DataLoader(list(range(40)), batch_size=4, dataset_version="v1")
    state, opt = _state(loader, lr=0.5)
    for it, _ in zip(range(5), loader):
        for g in opt.param_groups:
            g["lr"] = 0.5 / (it + 1)  # nanoGPT's get_lr(iter_num) written into the groups
    rd.save_checkpoint(tmp_path, state, step=5)
    assert state.meta().optimizer["param_groups"][0]["base_lr"] == 0.5  # the LR the optimizer was built with
    fresh, fresh_opt = _state(rd.DataLoader(list(range(40)), batch_size=4, dataset_version="v1"), lr=0.5)
    assert rd.resume_or_start(tmp_path, fresh) == 5
    assert fresh_opt.param_groups[0]["lr"] == pytest.approx(0.5 / 5)  # the saved current LR is restored
    other, _ = _state(rd.DataLoader(list(range(40)), batch_size=4, dataset_version="v1"), lr=0.3)
    with pytest.raises(rd.CompatibilityError, match="base_lr"):
        rd.resume_or_start(tmp_path, other)  # a different configured LR is still refused


def test_packing_with_a_batch_ramp_is_refused_naming_the_reason_and_the_alternative(dirs):
    src = open_sources(dirs)["web"]
    with pytest.raises(rd.ConfigError, match=r"packing=.*packing index.*ramp the number of packed microbatches"):
        rd.DataLoader(src, batch_size=rd.BatchRamp(start=2, increment=2, ramp_samples=20, final=6), seed=0,
                      packing=rd.Packing(16, tokens="tokens", eos_id=0))


def _ramped_run(dirs, ckpt, updates, stop_at=None):
    """docs/schedules.md's alternative: a fixed packed batch, more microbatches per update as
    training goes; returns the documents of every trained microbatch per update."""
    loader = rd.DataLoader(open_sources(dirs)["code"], batch_size=2, seed=0,
                           packing=rd.Packing(16, tokens="tokens", eos_id=0, window=8))
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    state = rd.TrainingState(model=model, optimizer=opt, loader=loader)
    step = rd.resume_or_start(ckpt, state)
    seen, it = {}, iter(loader)
    while step < updates:
        for _ in range(1 + step // 3):
            try:
                b = next(it)
            except StopIteration:
                it = iter(loader)
                b = next(it)
            model(b["input_ids"].float()).sum().backward()
            seen.setdefault(step, []).append(b["document_ids"].tolist())
        opt.step()
        opt.zero_grad()
        step += 1
        if step % 2 == 0:
            rd.save_checkpoint(ckpt, state, step=step)
        if step == stop_at:
            break
    return seen, [p.detach().clone() for p in model.parameters()]


def test_a_ramp_of_packed_microbatches_per_update_resumes_exactly(dirs, tmp_path):
    ref, ref_params = _ramped_run(dirs, tmp_path / "ref", 9)
    first, _ = _ramped_run(dirs, tmp_path / "run", 9, stop_at=5)  # "killed" after update 5 (last save: 4)
    resumed, params = _ramped_run(dirs, tmp_path / "run", 9)
    assert min(resumed) == 4 and {**first, **resumed} == ref  # every microbatch of every update, in order
    assert all(torch.equal(a, b) for a, b in zip(params, ref_params))
