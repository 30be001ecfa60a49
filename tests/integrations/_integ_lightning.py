"""The Lightning run of the integration tests (a forked child; ``devices=2`` spawns two ranks)."""

from __future__ import annotations

import os
from pathlib import Path

import lightning.pytorch as pl
import torch

import resumable_data as rd
from _integ_common import StepLog, TinyModel, params_digest
from resumable_data.integrations.lightning import ResumableDataModule

BATCH, ACCUMULATION, MAX_STEPS, EVERY = 8, 2, 30, 4  # 13 optimizer steps per epoch on one process


class Module(pl.LightningModule):
    def __init__(self, log: str, kill_at: int | None, out: str, dropout: float = 0.0) -> None:
        super().__init__()
        self.net = TinyModel(dropout=dropout)  # with dropout: the data module saves the global RNG states
        self.log_path, self.kill_at, self.out = log, kill_at, out
        self.steplog: StepLog | None = None

    def on_fit_start(self) -> None:
        self.steplog = StepLog(f"{self.log_path}.rank{self.global_rank}", self.kill_at)
        if self.kill_at is not None and self.trainer.world_size > 1:
            self.steplog.group_kill = True

    def training_step(self, batch, batch_idx):
        self.steplog.record(batch["id"], batch["x"], self.net)
        return self.net(batch["x"], batch["labels"])["loss"]

    def validation_step(self, batch, batch_idx):
        loss = self.net(batch["x"], batch["labels"])["loss"]
        with open(f"{self.log_path}.val.rank{self.global_rank}", "a") as f:
            f.write(f"{self.global_step} {batch['id'].tolist()} {loss.item():.17g}\n")
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.05)

    def on_train_end(self) -> None:
        Path(f"{self.out}/params.rank{self.global_rank}").write_text(params_digest(self.net))


def _die_inside_the_save_of(step: int) -> None:
    """SIGKILL inside the checkpoint save of ``step``: its bytes made, the file not yet written."""
    import signal

    import lightning.fabric.plugins.io.torch_io as torch_io

    real = torch_io._atomic_save

    def save_then_die(checkpoint, path):
        if checkpoint.get("global_step") == step:
            import io

            torch.save(checkpoint, io.BytesIO())  # the work of a save, then the kill before the file
            os.kill(os.getpid(), signal.SIGKILL)
        return real(checkpoint, path)

    torch_io._atomic_save = save_then_die


def train(data: str, out: str, log: str, kill_at: int | None = None, resume: bool = False, devices: int = 1,
          every: int = EVERY, max_steps: int = MAX_STEPS, plain: bool = False, dropout: float = 0.0,
          kill_in_save_at: int | None = None) -> str:
    if devices > 1:
        os.setpgrp()  # a kill takes the launcher and both ranks, never the test process
    pl.seed_everything(3, verbose=False)
    if kill_in_save_at is not None:
        _die_inside_the_save_of(kill_in_save_at)
    if plain:  # a plain torch dataset, pinned by a declared version, with a validation set
        from _integ_accelerate import PlainRows

        rows = PlainRows(data)
        dm = ResumableDataModule(rows, batch_size=BATCH, shuffle=True, seed=2, dataset_version="plain-rows-v1",
                                 val_dataset=torch.utils.data.Subset(rows, range(0, 40)),
                                 val_loader_kwargs={"batch_size": 16})
    else:
        dm = ResumableDataModule(rd.ArrowShards(data), batch_size=BATCH, shuffle=True, seed=2)
    ckpt = pl.callbacks.ModelCheckpoint(dirpath=f"{out}/ckpt", every_n_train_steps=every, save_top_k=-1,
                                        save_last=True, filename="{step}")
    trainer = pl.Trainer(
        max_steps=max_steps, accumulate_grad_batches=ACCUMULATION, accelerator="cpu", devices=devices,
        strategy="ddp_fork" if devices > 1 else "auto", callbacks=[ckpt], logger=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=out, num_sanity_val_steps=0)
    trainer.fit(Module(log, kill_at, out, dropout), datamodule=dm, ckpt_path="last" if resume else None)
    return Path(f"{out}/params.rank0").read_text()
