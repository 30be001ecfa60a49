"""A nanoGPT-style training loop over rd, written as nanoGPT's train.py is (importable, and
runnable as a script so that a kill and a resume happen in separate processes).

What it keeps of nanoGPT: the batch is fetched *ahead* (``X = get_batch()`` between the forward
and the backward), the learning rate is set by hand each iteration (warmup + cosine, written into
``param_group['lr']``), gradient accumulation is done by the loop itself (the loader's
``accumulation_steps`` stays 1, ``commit="auto"``), a checkpoint is written at the top of an
iteration (also at the iteration a resume starts from, as nanoGPT's ``always_save_checkpoint``
does), and dropout is on. The data: three pinned sources mixed by weight (``rd.Mixture``), packed
into fixed-length sequences (``rd.Packing``).

Usage: ``python _nanogpt_loop.py DATA CKPT LOG --iters N [--kill-at I [--in-save]]``. The log
gets one JSON line per trained microbatch (iteration, microstep, record ids, a digest of the
inputs, a digest of the parameters before the forward) and, at the end, the final parameters'
digest. ``--kill-at I`` SIGKILLs the process at iteration ``I`` (before its save, or with
``--in-save`` inside it: at the second file fsync of the save).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys

import numpy as np
import pyarrow as pa
import torch
import xxhash

import resumable_data as rd

VOCAB = 50
SEQ = 12
BATCH = 3
ACCUM = 2
EVAL_INTERVAL = 4
SOURCES = {"web": (60, 0.5), "code": (40, 0.3), "math": (30, 0.2)}


def write_data(root: str) -> None:
    rng = np.random.default_rng(7)
    for i, (name, (n, _)) in enumerate(SOURCES.items()):
        lengths = rng.integers(2, 9, n)
        docs = [(rng.integers(1, VOCAB, k) if i == 0 else rng.integers(1 + i, VOCAB, k)).astype(np.int64).tolist()
                for k in lengths]
        rd.write_arrow_shards(pa.table({"tokens": pa.array(docs, type=pa.list_(pa.int64()))}),
                              os.path.join(root, name), num_shards=2)
        rd.pin(os.path.join(root, name))


class TinyGPT(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = torch.nn.Embedding(VOCAB, 16)
        self.drop = torch.nn.Dropout(0.2)
        self.fc = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, VOCAB)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        h = self.drop(torch.tanh(self.fc(self.drop(self.wte(idx)))))
        logits = self.head(h)
        return torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), targets.reshape(-1), ignore_index=-100)


def get_lr(it: int, lr: float = 1e-2, warmup: int = 3, decay: int = 30, min_lr: float = 1e-3) -> float:
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    ratio = min(1.0, (it - warmup) / (decay - warmup))
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def digest(*tensors: torch.Tensor) -> str:
    h = xxhash.xxh3_64()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def build(data: str):
    torch.manual_seed(1337)
    mix = rd.Mixture({name: rd.ArrowShards(os.path.join(data, name)) for name in SOURCES},
                     weights={name: w for name, (_, w) in SOURCES.items()}, block_size=10)
    loader = rd.DataLoader(mix, batch_size=BATCH, seed=3,
                           packing=rd.Packing(SEQ, mode="concat", window=16, tokens="tokens", eos_id=0))
    model = TinyGPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    state = rd.TrainingState(model=model, optimizer=optimizer, loader=loader)
    return loader, model, optimizer, state


def _kill_inside_next_save() -> None:
    """SIGKILL this process at the second fsync of the next checkpoint save (files half written)."""
    from resumable_data.checkpoint import save

    real, calls = save._fsync_file, [0]

    def fsync_then_die(path):
        real(path)
        calls[0] += 1
        if calls[0] == 2:
            os.kill(os.getpid(), signal.SIGKILL)

    save._fsync_file = fsync_then_die


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("data")
    p.add_argument("ckpt")
    p.add_argument("log")
    p.add_argument("--iters", type=int, required=True)
    p.add_argument("--kill-at", type=int, default=None)
    p.add_argument("--in-save", action="store_true")
    a = p.parse_args(argv)
    loader, model, optimizer, state = build(a.data)
    iter_num = rd.resume_or_start(a.ckpt, state)
    it = iter(loader)

    def get_batch():
        nonlocal it
        try:
            b = next(it)
        except StopIteration:
            it = iter(loader)
            b = next(it)
        return b["input_ids"], b["labels"], b

    log = open(a.log, "a")
    X, Y, B = get_batch()  # fetch the very first batch (nanoGPT does this before its loop)
    while iter_num < a.iters:
        lr = get_lr(iter_num)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if a.kill_at is not None and iter_num == a.kill_at:
            if a.in_save:
                _kill_inside_next_save()
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        if iter_num % EVAL_INTERVAL == 0 and iter_num > 0:
            model.eval()
            with torch.no_grad():
                model(X, Y)  # an evaluation forward on the batch in hand: not training
            model.train()
            rd.save_checkpoint(a.ckpt, state, step=iter_num)
        for micro in range(ACCUM):
            params = digest(*model.parameters())
            loss = model(X, Y) / ACCUM
            log.write(json.dumps({"iter": iter_num, "micro": micro, "docs": B["document_ids"].tolist(),
                                  "inputs": digest(X, Y), "params": params}) + "\n")
            log.flush()
            X, Y, B = get_batch()  # prefetch the next batch before the backward
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        iter_num += 1
    log.write(json.dumps({"final": digest(*model.parameters())}) + "\n")
    log.close()


if __name__ == "__main__":
    main(sys.argv[1:])
