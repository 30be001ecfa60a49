"""``ResumableDataModule`` (Lightning): ``Trainer.fit`` killed with SIGKILL at a random batch and
resumed in a fresh process with ``fit(..., ckpt_path="last")``: every later batch (record ids,
inputs, the parameters it met) and the final parameters equal an uninterrupted run's, bit for
bit (the model has no dropout: Lightning's checkpoints hold no global RNG state). Accumulation
over 2 batches, a short last batch, mid-epoch and epoch-end checkpoints; 1 process and 2
(``ddp_fork`` on gloo, the loader sharding itself; ``ddp_spawn`` passes the same test but costs
about 3 minutes here, each spawned rank importing torch and Lightning again)."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("lightning")

import torch

import resumable_data as rd
import _integ_common as C
import _integ_lightning as LT
from resumable_data.integrations.lightning import ResumableDataModule

TOTAL = 58  # batches of 30 optimizer steps at accumulation 2: 25 batches (13 steps) per epoch, then 4 steps


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return C.write_data(tmp_path_factory.mktemp("pl-data") / "shards")


def _run(data, root, devices=1, **kw):
    root.mkdir(exist_ok=True)
    return C.run_child(LT.train, data=str(data), out=str(root / "out"), log=str(root / "log.jsonl"),
                       devices=devices, **kw)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("pl-reference")
    status, params = _run(data, root)
    assert status == "done", params
    return C.read_log(root / "log.jsonl.rank0"), params


def _ckpt_batches(root, rank=0) -> int:
    """Batches this rank trained on before the last checkpoint (from Lightning's own record)."""
    ckpt = torch.load(root / "out" / "ckpt" / "last.ckpt", weights_only=False)
    return rd.LoaderState.from_dict(ckpt["ResumableDataModule"]["rd_loader"]).cursor.committed


def _kill_and_resume(tmp_path, data, reference, kill_at, every=LT.EVERY, **kw):
    log_ref, params_ref = reference
    a, b = tmp_path / "a", tmp_path / "b"
    b.mkdir()
    status, text = _run(data, a, kill_at=kill_at, every=every, **kw)
    assert status == "killed", text
    before = C.read_log(a / "log.jsonl.rank0")
    resumed_from = _ckpt_batches(a)
    (b / "out").symlink_to(a / "out")
    status, params = _run(data, b, resume=True, every=every, **kw)
    assert status == "done", params
    C.check_resumed(log_ref, before, C.read_log(b / "log.jsonl.rank0"), resumed_from)
    assert params == params_ref, "final parameters differ from the uninterrupted run"
    return resumed_from


def test_lightning_resumes_mid_epoch_after_sigkill(tmp_path, data, reference):
    assert len(reference[0]) == TOTAL
    kill_at = random.Random(15).randint(2 * LT.EVERY * LT.ACCUMULATION + 1, TOTAL - 1)
    resumed_from = _kill_and_resume(tmp_path, data, reference, kill_at)
    assert 0 < resumed_from < kill_at


@pytest.mark.parametrize("every,kill_at,expected", [(13, 30, 25), (4, 27, 24)])
def test_lightning_resume_at_an_epoch_end(tmp_path, data, reference, every, kill_at, expected):
    # every=13: the checkpoint is the epoch's last optimizer step (its pass ended): Lightning does not
    # restore loader states there, the data module's state does
    assert _kill_and_resume(tmp_path, data, reference, kill_at, every=every) == expected


def test_datamodule_refuses_limit_train_batches(tmp_path, data):
    import lightning.pytorch as pl

    dm = ResumableDataModule(rd.ArrowShards(data), batch_size=8, shuffle=True, seed=2)
    trainer = pl.Trainer(max_steps=2, limit_train_batches=0.5, accelerator="cpu", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, default_root_dir=str(tmp_path))
    with pytest.raises(rd.ConfigError, match="limit_train_batches"):
        trainer.fit(LT.Module(str(tmp_path / "log"), None, str(tmp_path)), datamodule=dm)


@pytest.mark.slow
def test_lightning_two_processes_ddp(tmp_path, data):
    ref, a, b = tmp_path / "ref", tmp_path / "a", tmp_path / "b"
    status, params_ref = _run(data, ref, devices=2, max_steps=16)
    assert status == "done", params_ref
    logs = [C.read_log(ref / f"log.jsonl.rank{r}") for r in range(2)]
    assert len(logs[0]) == len(logs[1]) == 30  # 13 batches (7 steps) per epoch on each rank
    assert not set(sum((x["ids"] for x in logs[0]), [])[:96]) & set(sum((x["ids"] for x in logs[1]), [])[:96]), \
        "ranks must read disjoint records within an epoch"
    status, _ = _run(data, a, devices=2, max_steps=16, kill_at=19)
    assert status in ("killed", "error"), _
    b.mkdir()
    (b / "out").symlink_to(a / "out")
    resumed_from = _ckpt_batches(a)
    status, params = _run(data, b, devices=2, max_steps=16, resume=True)
    assert status == "done", params
    for r in range(2):
        C.check_resumed(logs[r], C.read_log(a / f"log.jsonl.rank{r}"), C.read_log(b / f"log.jsonl.rank{r}"),
                        resumed_from)
    assert params == params_ref


def test_state_refused_while_lightning_holds_prefetched_batches(data):
    """A state taken while Lightning's fetcher buffers a pulled batch would count it as trained:
    refused (Lightning 2.6 never prefetches from a sized loader; this guards other versions)."""
    from types import SimpleNamespace

    from resumable_data.integrations.lightning import LightningLoader

    dm = ResumableDataModule(rd.ArrowShards(data), batch_size=8, shuffle=True, seed=2)
    wrapped = LightningLoader(rd.DataLoader(rd.ArrowShards(data), batch_size=8, shuffle=True, seed=2), dm)
    fetcher = SimpleNamespace(batches=[])
    dm.trainer = SimpleNamespace(fit_loop=SimpleNamespace(_data_fetcher=fetcher), current_epoch=0)
    it = iter(wrapped)
    next(it)
    assert wrapped.state_dict() == wrapped.loader.state_dict()
    fetcher.batches.append(next(it))
    with pytest.raises(rd.ResumeError, match="prefetch buffer"):
        wrapped.state_dict()


@pytest.fixture(scope="module")
def plain_reference(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("pl-plain-reference")
    status, params = _run(data, root, plain=True, dropout=0.25)
    assert status == "done", params
    log = C.read_log(root / "log.jsonl.rank0")
    assert len(log) == TOTAL
    return log, params, (root / "log.jsonl.val.rank0").read_text().splitlines()


def test_lightning_with_dropout_a_plain_dataset_and_validation_resumes_bit_exact(tmp_path, data, plain_reference):
    """Dropout masks continue (the data module saves the global RNG states as plain lists, and
    Lightning loads them with weights_only=True), a plain torch dataset is pinned by its declared
    version, and validation passes each start at their first batch."""
    log_ref, params_ref, val_ref = plain_reference
    kill_at = random.Random(16).randint(2 * LT.EVERY * LT.ACCUMULATION + 1, TOTAL - 1)
    resumed_from = _kill_and_resume(tmp_path, data, (log_ref, params_ref), kill_at, plain=True, dropout=0.25)
    assert 0 < resumed_from < kill_at
    assert len(val_ref) == 2 * 3  # two epoch ends, 40 records in batches of 16
    val = (tmp_path / "a" / "log.jsonl.val.rank0").read_text().splitlines()
    val += (tmp_path / "b" / "log.jsonl.val.rank0").read_text().splitlines() if \
        (tmp_path / "b" / "log.jsonl.val.rank0").exists() else []
    assert sorted(set(val)) == sorted(val_ref)  # each validation pass as the uninterrupted run's
    ckpt = torch.load(tmp_path / "a" / "out" / "ckpt" / "last.ckpt", weights_only=True)  # plain types only
    assert set(ckpt["ResumableDataModule"]) == {"rd_loader", "rd_rng"}


def test_lightning_killed_inside_a_checkpoint_save_resumes_from_the_one_before(tmp_path, data, plain_reference):
    log_ref, params_ref, _ = plain_reference
    step = random.Random(17).choice(range(2 * LT.EVERY, 13, LT.EVERY))  # inside the first epoch (13 steps)
    a, b = tmp_path / "a", tmp_path / "b"
    b.mkdir()
    status, text = _run(data, a, plain=True, dropout=0.25, kill_in_save_at=step)
    assert status == "killed", text
    before = C.read_log(a / "log.jsonl.rank0")
    assert len(before) == step * LT.ACCUMULATION
    assert not (a / "out" / "ckpt" / f"step={step}.ckpt").exists()
    (b / "out").symlink_to(a / "out")
    resumed_from = _ckpt_batches(a)
    assert resumed_from == (step - LT.EVERY) * LT.ACCUMULATION
    status, params = _run(data, b, resume=True, plain=True, dropout=0.25)
    assert status == "done", params
    C.check_resumed(log_ref, before, C.read_log(b / "log.jsonl.rank0"), resumed_from)
    assert params == params_ref


def test_a_plain_dataset_is_refused_at_construction_not_at_the_first_resume(data):
    from _integ_accelerate import PlainRows

    with pytest.raises(rd.ConfigError, match=r"dataset_version=.*allow_unpinned=True to ResumableDataModule"):
        ResumableDataModule(PlainRows(str(data)), batch_size=8, shuffle=True, seed=2)
    dm = ResumableDataModule(PlainRows(str(data)), batch_size=8, shuffle=True, seed=2, allow_unpinned=True)
    assert dm._resume_options["allow_unpinned"] is True
    with pytest.raises(rd.ConfigError, match="on_uncommitted"):
        ResumableDataModule(rd.ArrowShards(data), batch_size=8, shuffle=True, seed=2, on_uncommitted="maybe")
