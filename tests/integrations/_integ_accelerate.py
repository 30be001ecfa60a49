"""The accelerate run of the integration tests: a plain loop under ``Accelerator`` (forked; with
``world=2`` it forks two ranks that join a gloo process group through torchrun's variables)."""

from __future__ import annotations

import re
from pathlib import Path

import torch

import resumable_data as rd
from _integ_common import StepLog, TinyModel, launch, params_digest

BATCH, ACCUMULATION, STEPS, EVERY = 8, 2, 30, 4


def _latest(out: Path) -> Path | None:
    found = [(int(m.group(1)), p) for p in out.glob("ckpt-*") if (m := re.fullmatch(r"ckpt-(\d+)", p.name))]
    return max(found)[1] if found else None


def _rank(data: str, out: str, log: str, kill_at: int | None, resume: bool, via: str) -> str:
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    from resumable_data.integrations.accelerate import prepare_loader

    AcceleratorState._reset_state(reset_partial_state=True)  # forked from a process that may hold one
    acc = Accelerator(cpu=True, gradient_accumulation_steps=ACCUMULATION)
    steplog = StepLog(f"{log}.rank{acc.process_index}", kill_at)
    steplog.group_kill = acc.num_processes > 1
    model = TinyModel(steplog)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    loader = rd.DataLoader(rd.ArrowShards(data), batch_size=BATCH, shuffle=True, seed=2)
    model, opt, loader = acc.prepare(model, opt, loader)
    assert isinstance(loader, rd.DataLoader), type(loader)  # prepare leaves it alone
    if via == "hooks":
        prepare_loader(acc, loader)
    else:
        acc.register_for_checkpointing(loader)
    step = 0
    last = _latest(Path(out)) if resume else None
    if last is not None:
        acc.load_state(str(last))
        step = int(last.name.split("-")[1])
    while step < STEPS:
        for batch in loader:
            with acc.accumulate(model):
                loss = model(**batch)["loss"]
                acc.backward(loss)
                opt.step()
                opt.zero_grad()
            if acc.sync_gradients:
                step += 1
                if step % EVERY == 0:
                    acc.save_state(f"{out}/ckpt-{step}")
                if step == STEPS:
                    break
    acc.wait_for_everyone()
    return params_digest(acc.unwrap_model(model))


def train(data: str, out: str, log: str, kill_at: int | None = None, resume: bool = False, world: int = 1,
          via: str = "hooks") -> str:
    if world == 1:
        return _rank(data, out, log, kill_at, resume, via)
    digests = set(launch(world, _rank, data=data, out=out, log=log, kill_at=kill_at, resume=resume, via=via))
    assert len(digests) == 1, digests  # DDP keeps the ranks' parameters equal
    return digests.pop()


# -- accelerate's examples/by_feature/checkpointing.py, as users write it ------------------------
SCRIPT_EPOCHS = 3  # 25 steps an epoch: no save (every EVERY steps) falls on an epoch's end


class PlainRows(torch.utils.data.Dataset):
    """A plain map-style torch dataset (no rd source): the same rows as the shards."""

    def __init__(self, data: str) -> None:
        t = rd.ArrowShards(data).take(list(range(len(rd.ArrowShards(data))))).to_pydict()
        self.rows = [{"id": i, "x": x, "labels": y} for i, x, y in zip(t["id"], t["x"], t["labels"])]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        return self.rows[i]


def _die_inside_the_next_save() -> None:
    """SIGKILL at accelerate's second file write of the next save_state (model written, optimizer not)."""
    import os
    import signal

    import accelerate.checkpointing as ckpt

    real, calls = ckpt.save, [0]

    def save_then_die(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)

    ckpt.save = save_then_die


def script(data: str, out: str, log: str, kill_at: int | None = None, kill_in_save_at: int | None = None,
           resume: bool = False) -> str:
    """checkpointing.py's loop: save_state every EVERY steps into ``out/step_N``; on resume, the
    newest complete folder, its epoch and in-epoch step from the folder name, and
    ``accelerator.skip_first_batches(loader, resume_step)`` left in as the example has it."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    from resumable_data.integrations.accelerate import latest_complete_state, prepare_loader

    AcceleratorState._reset_state(reset_partial_state=True)
    acc = Accelerator(cpu=True)
    model = TinyModel(StepLog(f"{log}.rank0", kill_at))
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    loader = rd.DataLoader(PlainRows(data), batch_size=BATCH, shuffle=True, seed=2, dataset_version="plain-rows-v1")
    model, opt, loader = acc.prepare(model, opt, loader)
    prepare_loader(acc, loader)
    overall_step, starting_epoch, resume_step = 0, 0, None
    path = latest_complete_state(out) if resume else None
    if path is not None:
        acc.load_state(str(path))
        overall_step = int(path.name.split("_")[1])
        starting_epoch = overall_step // len(loader)
        resume_step = overall_step - starting_epoch * len(loader)
    for epoch in range(starting_epoch, SCRIPT_EPOCHS):
        model.train()
        if resume_step is not None and epoch == starting_epoch:
            active = acc.skip_first_batches(loader, resume_step)  # left in: the loader already sought
        else:
            active = loader
        for batch in active:
            loss = model(**batch)["loss"]
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
            overall_step += 1
            if overall_step % EVERY == 0:
                if overall_step == kill_in_save_at:
                    _die_inside_the_next_save()
                acc.save_state(f"{out}/step_{overall_step}")
    return params_digest(acc.unwrap_model(model))
