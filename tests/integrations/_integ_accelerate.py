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
