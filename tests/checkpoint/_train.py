"""A small but complete training loop for the checkpoint tests (importable, and runnable as a
script so that a restore happens in a fresh process).

2-layer MLP over mean-pooled token embeddings, with BatchNorm (buffers) and dropout; AdamW with
two param groups; warmup-cosine LambdaLR stepped per attempted update; torch.amp.GradScaler("cpu")
with forced inf gradients on chosen updates (skipped steps); accumulation over 4 microbatches;
an EMA (AveragedModel); a MetricLog; rd.DataLoader over pinned Arrow shards (commit="explicit").
``packed=True`` feeds the same model packed sequences (rd.Packing over the same token shards:
SEQ_LEN-token sequences, documents separated by EOS, a shuffled packing window).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch
import torch.nn.functional as F
import xxhash

import resumable_data as rd

N_RECORDS = 158  # 39 full batches + a short one of 2 per epoch
VOCAB = 200
K = 4                      # accumulation steps
BATCH = 4
INF_UPDATES = {2, 5}       # attempted-update indices whose gradients are forced to inf
TOTAL = 52                 # microbatches in a full run (crosses the epoch boundary at 40)
SEQ_LEN = 16               # packed case: tokens per packed sequence (14 full steps per epoch)
PACKING = dict(mode="concat", window=20, tokens="tokens", eos_id=0)


def write_data(directory) -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 9, N_RECORDS)
    table = pa.table({
        "id": pa.array(np.arange(N_RECORDS, dtype=np.int64)),
        "tokens": pa.array([rng.integers(1, VOCAB, k).astype(np.int64).tolist() for k in lengths],
                           type=pa.list_(pa.int64())),
    })
    rd.write_arrow_shards(table, directory, num_shards=3)
    rd.pin(directory)


class Net(torch.nn.Module):
    def __init__(self, hidden: int = 24, dropout: float = 0.3) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 12)
        self.fc1 = torch.nn.Linear(12, hidden)
        self.bn = torch.nn.BatchNorm1d(hidden)
        self.drop = torch.nn.Dropout(dropout)
        self.fc2 = torch.nn.Linear(hidden, 3)

    def forward(self, batch):
        if "input_ids" in batch:  # packed sequences: pool the document tokens, skip the padding
            tok = batch["input_ids"]
            mask = (batch["document_ids"] >= 0).float()
            lens = mask.sum(1).clamp(min=1)
        else:
            tok, lens = batch["tokens"], batch["tokens_lengths"]
            mask = (torch.arange(tok.shape[1])[None, :] < lens[:, None]).float()
        e = (self.emb(tok) * mask[..., None]).sum(1) / lens[:, None].float()
        return self.fc2(self.drop(torch.relu(self.bn(self.fc1(e)))))


def target(batch) -> torch.Tensor:
    return batch["input_ids"][:, 0] % 3 if "input_ids" in batch else batch["id"] % 3


def lr_lambda(s: int) -> float:
    warm, total = 3, 14
    return min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, total) / total))


@dataclass
class Objects:
    model: Net
    opt: torch.optim.Optimizer
    sched: object
    scaler: object
    ema: object
    loader: rd.DataLoader
    metrics: rd.MetricLog
    state: rd.TrainingState


def build(data_dir, metrics_path, *, policy="save_gradients", reverse_groups=False, seed=0, run_id="run-a",
          hidden=24, vocab=None, lr=3e-3, num_workers=0, packed=False, loader_seed=7, batch=BATCH,
          accumulation=K, shuffle_window=None, seed_per_sample=True) -> Objects:
    """The training objects. ``loader_seed``/``batch``/``accumulation``/``shuffle_window``/``seed_per_sample``
    only for the compatibility tests (``train`` assumes the defaults)."""
    torch.set_num_threads(1)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    model = Net(hidden)
    decay = [p for n, p in model.named_parameters() if p.dim() > 1]
    no_decay = [p for n, p in model.named_parameters() if p.dim() <= 1]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    if reverse_groups:  # another construction order: groups and parameters inside them reversed
        groups = [{"params": list(reversed(g["params"])), "weight_decay": g["weight_decay"]} for g in reversed(groups)]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.99))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=3)
    ema = torch.optim.swa_utils.AveragedModel(model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9),
                                              use_buffers=True)
    # packed: full steps only (an epoch's last step would hold 1 sequence, too few for BatchNorm)
    stream = dict(packing=rd.Packing(SEQ_LEN, **PACKING), drop_last=True) if packed else dict(token_column="tokens")
    if shuffle_window is not None:
        stream["shuffle_window"] = shuffle_window
    loader = rd.DataLoader(rd.ArrowShards(data_dir), batch_size=batch, shuffle=True, seed=loader_seed,
                           commit="explicit", accumulation_steps=accumulation, num_workers=num_workers,
                           seed_per_sample=seed_per_sample, **stream)
    metrics = rd.MetricLog(metrics_path, run_id)
    state = rd.TrainingState(model=model, optimizer=opt, scheduler=sched, scaler=scaler, loader=loader, ema=ema,
                             metrics=metrics, config={"hidden": hidden, "dropout": 0.3},
                             feature_schema=vocab or {"vocab": [f"tok{i}" for i in range(VOCAB)]},
                             scheduler_convention="attempted_update", accumulation=policy, run_id=run_id)
    return Objects(model, opt, sched, scaler, ema, loader, metrics, state)


def batch_digest(batch) -> str:
    h = xxhash.xxh3_64()
    for k in sorted(batch):
        v = batch[k]  # packed batches also carry a plain int (max_seqlen)
        h.update(k.encode() + (v.numpy().tobytes() if isinstance(v, torch.Tensor) else repr(v).encode()))
    return h.hexdigest()


def tensor_digest(tensors) -> str:
    h = xxhash.xxh3_64()
    for name, t in tensors:
        h.update(name.encode() + t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def train(o: Objects, total: int = TOTAL, *, on_step=None) -> dict[int, str]:
    """Train until ``total`` microbatches were delivered; ``on_step(o)`` after each microbatch
    (return True to stop). Returns {delivered step: batch digest}."""
    seen: dict[int, str] = {}
    while o.loader.cursor.delivered < total:
        for batch in o.loader:
            step = o.loader.cursor.delivered - 1
            seen[step] = batch_digest(batch)
            loss = F.cross_entropy(o.model(batch), target(batch)) / K
            o.scaler.scale(loss).backward()
            if o.loader.microstep_is_last:
                if o.loader.counters.attempted_updates in INF_UPDATES:
                    o.model.fc2.weight.grad[0, 0] = float("inf")
                applied = rd.scaler_step(o.scaler, o.opt)
                o.sched.step()
                if applied:
                    o.ema.update_parameters(o.model)
                o.opt.zero_grad(set_to_none=True)
                o.state.commit(applied)
                o.metrics.log(o.loader.counters.attempted_updates, loss=float(loss.detach()), applied=applied)
            if on_step is not None and on_step(o):
                return seen
            if o.loader.cursor.delivered >= total:
                break
    return seen


def summary(o: Objects) -> dict:
    return {
        "params": tensor_digest(o.model.state_dict().items()),
        "moments": tensor_digest((f"{n}.{k}", v) for n, p in o.model.named_parameters()
                                 for k, v in sorted(o.opt.state[p].items())),
        "lrs": [g["lr"] for g in o.opt.param_groups],
        "ema": tensor_digest(o.ema.state_dict().items()),
        "scale": o.scaler.get_scale(),
        "counters": vars(o.loader.counters),
        "cursor": o.loader.cursor.__dict__ if hasattr(o.loader.cursor, "__dict__") else list(o.loader.cursor),
        "rng": tensor_digest([("t", torch.get_rng_state())]) + str(random.random()) + str(np.random.rand()),
        "run_id": o.state.run_id,
        "label": o.state.recovery_label.value,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--step", type=int, action="append", required=True, help="one restore per --step")
    ap.add_argument("--metrics", action="append", required=True, help="a metric log copy per --step")
    ap.add_argument("--out", required=True)
    ap.add_argument("--total", type=int, default=TOTAL)
    ap.add_argument("--reverse-groups", action="store_true")
    ap.add_argument("--packed", action="store_true")
    a = ap.parse_args(argv)
    results = []
    for i, (step, metrics) in enumerate(zip(a.step, a.metrics)):
        # fresh objects for every restore, built under other seeds (the checkpoint must restore them)
        o = build(a.data, metrics, reverse_groups=a.reverse_groups, run_id=f"fresh-{i}", seed=100 + i,
                  packed=a.packed)
        info = rd.load_checkpoint(a.ckpt, o.state, step=step)
        start = o.loader.cursor.delivered
        seen = train(o, a.total)
        results.append({"start": start, "batches": seen, "summary": summary(o), "step": info.step})
    with open(a.out, "w") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
