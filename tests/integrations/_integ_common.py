"""Shared pieces of the integration tests: a tiny dataset, a tiny model that logs what it trains
on, a SIGKILL at a chosen microbatch, and the kill-then-resume driver over forked children.

The model's ``forward`` appends one JSON line per microbatch (the record ids, a digest of the
inputs, and a digest of the parameters it saw) to a log file, flushed at once, so a SIGKILL loses
nothing that was trained on. Children are forked from the warmed test process (the frameworks'
imports cost seconds; a fork costs milliseconds)."""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import signal
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import torch

import resumable_data as rd

N = 196  # with batch 8: 25 batches per epoch, the last one short (4 records)


def write_data(root: Path) -> Path:
    ids = list(range(N))
    table = pa.table({"id": ids, "x": [((i * 37) % N) / N for i in ids], "labels": [((i * 53) % N) / N for i in ids]})
    rd.write_arrow_shards(table, root, num_shards=3)
    rd.pin(root)
    return root


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()[:16]


def params_digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


class StepLog:
    """Appends one line per microbatch to ``path``; SIGKILLs this process at microbatch ``kill_at``
    (counted in this process, 1-based) right after logging it, i.e. after a forward it never
    finishes training on."""

    def __init__(self, path: str | os.PathLike, kill_at: int | None = None) -> None:
        self.path, self.kill_at, self.seen = str(path), kill_at, 0
        self.group_kill = False  # SIGKILL the whole process group (a launcher and its ranks)

    def record(self, ids: torch.Tensor, x: torch.Tensor, model: torch.nn.Module) -> None:
        self.seen += 1
        line = {"ids": ids.tolist(), "x": digest(x), "params": params_digest(model)}
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")
            f.flush()
        if self.kill_at is not None and self.seen == self.kill_at:
            if self.group_kill:
                os.killpg(os.getpgid(0), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)


class TinyModel(torch.nn.Module):
    """x -> Linear(1, 8) -> ReLU -> Dropout -> Linear(8, 1), MSE against ``labels``; returns the
    ``{"loss": ...}`` dict the Hugging Face Trainer expects."""

    def __init__(self, log: StepLog | None = None, dropout: float = 0.25) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp = torch.nn.Linear(1, 8)
        self.drop = torch.nn.Dropout(dropout)
        self.out = torch.nn.Linear(8, 1)
        self.log = log

    def forward(self, x: torch.Tensor, labels: torch.Tensor, id: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        if self.log is not None and self.training:
            self.log.record(id, x, self)
        h = self.out(self.drop(torch.relu(self.inp(x.float().view(-1, 1)))))
        return {"loss": torch.nn.functional.mse_loss(h.view(-1), labels.float())}


def read_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _child(fn: Callable, kwargs: dict, conn) -> None:
    try:
        torch.set_num_threads(1)
        result = fn(**kwargs)
        conn.send(("done", result))
    except BaseException as e:  # report, never hang the parent
        import traceback

        conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    finally:
        os._exit(0)


def run_child(fn: Callable, **kwargs: Any) -> tuple[str, Any]:
    """Run ``fn(**kwargs)`` in a forked child; ("done", result), ("error", text) or ("killed", None)."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_child, args=(fn, kwargs, child))
    p.start()
    child.close()
    try:
        msg = parent.recv()
    except EOFError:
        msg = ("killed", None)
    p.join()
    if p.exitcode == -signal.SIGKILL:
        return "killed", None
    return msg


def check_resumed(reference: list[dict], before: list[dict], after: list[dict], resumed_from: int) -> None:
    """The killed run's log up to its kill and the resumed run's log match the reference, in
    order: the resumed run starts at microbatch ``resumed_from`` (its checkpoint's) and then every
    microbatch, ids, inputs and the parameters it met, equals the uninterrupted run's."""
    assert before == reference[:len(before)], "the killed run diverged before the kill"
    assert len(before) > resumed_from, (len(before), resumed_from)
    assert after == reference[resumed_from:], (
        f"resumed from microbatch {resumed_from}: first difference at "
        f"{next((i for i, (a, b) in enumerate(zip(after, reference[resumed_from:])) if a != b), min(len(after), len(reference) - resumed_from))}"
        f" (resumed log {len(after)} lines, reference tail {len(reference) - resumed_from})")


def _rank_entry(conn, fn: Callable, rank: int, world: int, port: int, kwargs: dict) -> None:
    try:
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        torch.set_num_threads(1)
        conn.send(("done", fn(**kwargs)))  # a Pipe sends synchronously (a Queue's feeder thread dies with _exit)
    except BaseException as e:
        import traceback

        conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    finally:
        os._exit(0)


def launch(world: int, fn: Callable, **kwargs: Any) -> list[Any]:
    """Run ``fn(**kwargs)`` on ``world`` forked ranks (torchrun's environment variables, a free
    port); this process becomes a process-group leader first, so a rank's group kill takes the
    launcher and every rank, never the test process. Returns each rank's result."""
    import socket

    os.setpgrp()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")
    pipes = [ctx.Pipe() for _ in range(world)]
    procs = [ctx.Process(target=_rank_entry, args=(pipes[r][1], fn, r, world, port, kwargs)) for r in range(world)]
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
    return [r for _, r in results]
