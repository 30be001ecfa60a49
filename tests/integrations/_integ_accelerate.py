"""The accelerate run of the integration tests: a plain loop under ``Accelerator`` (forked; with
``world=2`` it forks two ranks that join a gloo process group through accelerate's environment)."""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import socket
from pathlib import Path

import torch

import resumable_data as rd
from _integ_common import StepLog, TinyModel, params_digest

BATCH, ACCUMULATION, STEPS, EVERY = 8, 2, 30, 4


def _latest(out: Path) -> Path | None:
    found = [(int(m.group(1)), p) for p in out.glob("ckpt-*") if (m := re.fullmatch(r"ckpt-(\d+)", p.name))]
    return max(found)[1] if found else None


def _rank(data: str, out: str, log: str, kill_at: int | None, resume: bool, world: int, rank: int,
          port: int, via: str) -> str:
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    from resumable_data.integrations.accelerate import prepare_loader

    if world > 1:
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    AcceleratorState._reset_state(reset_partial_state=True)  # forked from a process that may hold one
    acc = Accelerator(cpu=True, gradient_accumulation_steps=ACCUMULATION)
    steplog = StepLog(f"{log}.rank{acc.process_index}", kill_at)
    steplog.group_kill = world > 1
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_entry(conn, *args) -> None:
    try:
        torch.set_num_threads(1)
        conn.send(("done", _rank(*args)))  # a Pipe sends synchronously (a Queue's feeder thread dies with _exit)
    except BaseException as e:
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        os._exit(0)


def train(data: str, out: str, log: str, kill_at: int | None = None, resume: bool = False, world: int = 1,
          via: str = "hooks") -> str:
    if world == 1:
        return _rank(data, out, log, kill_at, resume, 1, 0, 0, via)
    os.setpgrp()  # a kill takes this launcher and both ranks, never the test process
    ctx, port = mp.get_context("fork"), _free_port()
    pipes = [ctx.Pipe() for _ in range(world)]
    procs = [ctx.Process(target=_rank_entry, args=(pipes[r][1], data, out, log, kill_at, resume, world, r, port, via))
             for r in range(world)]
    for p in procs:
        p.start()
    results = []
    for parent, _ in pipes:
        if not parent.poll(240):
            raise TimeoutError("a rank did not answer within 240 s")
        results.append(parent.recv())
    for p in procs:
        p.join()
    errors = [r for s, r in results if s != "done"]
    assert not errors, errors
    digests = {r for _, r in results}
    assert len(digests) == 1, digests  # DDP keeps the ranks' parameters equal
    return digests.pop()
