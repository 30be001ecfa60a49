"""The training job that ``make demo`` runs, kills and resumes (in a subprocess of its own).

A tiny causal language model (a 2-layer, d=64 pre-LN transformer over byte tokens) trained on
packed sequences from an ``rd.DataLoader`` with 2 workers, a window shuffle, gradient
accumulation, AdamW with a warmup-cosine ``LambdaLR``, a ``GradScaler`` whose found-inf check
skips one deliberately poisoned update (``rd.scaler_step`` -> ``commit(applied=False)``),
dropout (so the RNG state matters), an ``rd.MetricLog`` and a checkpoint every few microbatches
through ``rd.save_checkpoint`` (policy ``save_gradients``: a checkpoint may fall inside an
accumulation window). CPU, float32, ``torch.use_deterministic_algorithms(True)``, one intra-op
thread: two runs of the same job are bit-identical, which is what the demo checks.

Run as ``python -m resumable_data.demo_train --config CONFIG.json --run DIR [--resume]``. It
prints one JSON object per line on stdout (events ``start``, ``resumed``, ``step``, ``update``,
``checkpoint``, ``done``); the parent (:mod:`resumable_data.demo`) reads them. With
``--resume`` it restores ``DIR/checkpoints`` (its ``latest``) before training on.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import xxhash

import resumable_data as rd
from resumable_data.errors import UsageError, describe
from resumable_data.plan.packing import IGNORE_INDEX
from resumable_data.testing import batch_digests

__all__ = ["DemoConfig", "TinyLM", "build", "main", "tensor_digest", "train"]

SABOTAGES = ("seed", "rng")


@dataclass(frozen=True)
class DemoConfig:
    """Everything that defines the training run (both runs of the demo use the same one)."""

    data: str
    tokens: str = "tokens"
    vocab: int = 257
    eos_id: int | None = 0
    steps: int = 400  # microbatches (loader steps) in the whole run
    seq_len: int = 128
    batch_size: int = 8  # packed sequences per microbatch
    accumulation: int = 4  # microbatches per optimizer update
    pack_window: int = 64  # documents packed together
    shuffle_window: int = 128  # records shuffled together (a shuffle buffer as a pure function)
    num_workers: int = 2
    checkpoint_every: int = 30  # microbatches (not a multiple of accumulation: some land mid-window)
    inf_update: int = 3  # this attempted update gets inf gradients: the scaler skips it
    data_seed: int = 2024
    model_seed: int = 0
    d_model: int = 64
    layers: int = 2
    heads: int = 4
    dropout: float = 0.1
    lr: float = 3e-3
    warmup: int = 10  # updates

    @property
    def updates(self) -> int:
        return self.steps // self.accumulation

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DemoConfig:
        return cls(**json.loads(text))


# -- the model ------------------------------------------------------------------------------------
class Block(torch.nn.Module):
    def __init__(self, d: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))
        self.drop = torch.nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        att = self.drop(att.masked_fill(~mask, float("-inf")).softmax(-1))
        x = x + self.drop(self.proj((att @ v).transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.mlp(self.ln2(x)))


class TinyLM(torch.nn.Module):
    """A causal transformer over packed sequences: attention stays inside each document
    (``document_ids``) and positions restart at each document (``position_ids``)."""

    def __init__(
        self, vocab: int, seq_len: int, d: int = 64, layers: int = 2, heads: int = 4, dropout: float = 0.1
    ) -> None:
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(seq_len, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads, dropout) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids, pos, doc = batch["input_ids"], batch["position_ids"], batch["document_ids"]
        t = ids.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        same_doc = doc[:, :, None] == doc[:, None, :]
        mask = (causal[None] & same_doc)[:, None]  # [B, 1, T, T]
        x = self.tok(ids) + self.pos(pos.clamp(max=self.pos.num_embeddings - 1))
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln(x))


class WindowLoss:
    """The running loss of the current accumulation window: training-loop state that a checkpoint
    inside a window must carry (a ``TrainingState`` callback)."""

    def __init__(self) -> None:
        self.total = torch.zeros((), dtype=torch.float64)

    def add(self, loss: torch.Tensor) -> None:
        self.total = self.total + loss.detach().to(torch.float64)

    def pop(self) -> float:
        value, self.total = float(self.total), torch.zeros((), dtype=torch.float64)
        return value

    def state_dict(self) -> dict[str, Any]:
        return {"total": self.total.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total = state["total"].clone().to(torch.float64)


# -- building and training ------------------------------------------------------------------------
@dataclass
class Job:
    cfg: DemoConfig
    model: TinyLM
    opt: torch.optim.Optimizer
    sched: Any
    scaler: Any
    loader: rd.DataLoader
    metrics: rd.MetricLog
    window: WindowLoss
    state: rd.TrainingState
    out: Any = field(default=None)


def lr_factor(cfg: DemoConfig):
    def f(update: int) -> float:
        warm = min(1.0, (update + 1) / cfg.warmup)
        return warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(update, cfg.updates) / max(1, cfg.updates))))

    return f


def deterministic() -> None:
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


def build(cfg: DemoConfig, run_dir: Path, *, data_seed: int | None = None) -> Job:
    deterministic()
    random.seed(cfg.model_seed)  # every global generator starts from the config
    np.random.seed(cfg.model_seed)
    torch.manual_seed(cfg.model_seed)
    model = TinyLM(cfg.vocab, cfg.seq_len, cfg.d_model, cfg.layers, cfg.heads, cfg.dropout)
    decay = [p for p in model.parameters() if p.dim() > 1]
    no_decay = [p for p in model.parameters() if p.dim() <= 1]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(cfg))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=20)
    src = rd.ArrowShards(cfg.data)
    loader = rd.DataLoader(
        src,
        batch_size=cfg.batch_size,
        shuffle=True,
        seed=cfg.data_seed if data_seed is None else data_seed,
        shuffle_window=cfg.shuffle_window,
        num_workers=cfg.num_workers,
        persistent_workers=cfg.num_workers > 0,
        commit="explicit",
        accumulation_steps=cfg.accumulation,
        packing=rd.Packing(cfg.seq_len, "concat", window=cfg.pack_window, tokens=cfg.tokens, eos_id=cfg.eos_id),
    )
    metrics = rd.MetricLog(run_dir / "metrics.jsonl", "demo-run")
    window = WindowLoss()
    state = rd.TrainingState(
        model=model,
        optimizer=opt,
        scheduler=sched,
        scaler=scaler,
        loader=loader,
        metrics=metrics,
        callbacks={"window_loss": window},
        run_id="demo-run",
        config={k: v for k, v in asdict(cfg).items() if k not in ("data", "steps", "checkpoint_every")},
        feature_schema={"tokenizer": "bytes+1, 0 = EOS" if cfg.eos_id == 0 else "user", "vocab": cfg.vocab},
        scheduler_convention="attempted_update",
        accumulation="save_gradients",
    )
    return Job(cfg, model, opt, sched, scaler, loader, metrics, window, state)


def tensor_digest(named: Any) -> str:
    """xxh3-64 over names, dtypes, shapes and raw bytes."""
    h = xxhash.xxh3_64()
    for name, t in named:
        t = t.detach().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def batch_digest(batch: dict) -> str:
    return xxhash.xxh3_64_hexdigest(json.dumps(batch_digests(batch), sort_keys=True).encode())


def emit(out: Any, event: str, **fields: Any) -> None:
    out.write(json.dumps({"event": event, **fields}) + "\n")
    out.flush()


def train(job: Job, ckpt_dir: Path) -> None:
    """Train until ``cfg.steps`` microbatches were delivered; checkpoint every ``checkpoint_every``."""
    cfg, loader, out = job.cfg, job.loader, job.out
    while loader.cursor.delivered < cfg.steps:
        for batch in loader:
            step = loader.cursor.delivered - 1
            logits = job.model(batch)
            loss = (
                F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1), ignore_index=IGNORE_INDEX
                )
                / cfg.accumulation
            )
            job.scaler.scale(loss).backward()
            job.window.add(loss)
            docs = batch["document_ids"].reshape(-1)
            docs = docs[docs >= 0].unique_consecutive().tolist()
            emit(
                out,
                "step",
                step=step,
                digest=batch_digest(batch),
                loss=float(loss.detach()) * cfg.accumulation,
                documents=docs,
            )
            if loader.microstep_is_last:
                attempted = loader.counters.attempted_updates
                if attempted == cfg.inf_update:  # a scaler-style overflow: the found-inf check skips it
                    grad = job.model.head.weight.grad
                    if grad is None:  # backward() ran on this microbatch: the head has a gradient
                        raise UsageError(
                            describe("head.weight.grad", None, "a gradient after backward()", "run backward() first")
                        )
                    grad[0, 0] = float("inf")
                lr = job.opt.param_groups[0]["lr"]
                applied = rd.scaler_step(job.scaler, job.opt)
                job.sched.step()
                job.opt.zero_grad(set_to_none=True)
                job.state.commit(applied)  # loader.commit(applied=...) + window bookkeeping
                window_loss = job.window.pop()
                job.metrics.log(attempted, loss=window_loss, lr=lr, applied=applied)
                emit(out, "update", update=attempted, applied=applied, loss=window_loss, lr=lr)
            if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps:
                path = rd.save_checkpoint(ckpt_dir, job.state, step=step + 1, keep_last=3)
                emit(out, "checkpoint", step=step + 1, path=str(path))
            if loader.cursor.delivered >= cfg.steps:
                break


def summary(job: Job) -> dict[str, Any]:
    c = job.loader.counters
    return {
        "parameters": tensor_digest(job.model.state_dict().items()),
        "optimizer": tensor_digest(
            (f"{n}.{k}", v) for n, p in job.model.named_parameters() for k, v in sorted(job.opt.state[p].items())
        ),
        "lr": job.opt.param_groups[0]["lr"],
        "scale": job.scaler.get_scale(),
        "counters": dataclasses.asdict(c),
        "label": job.state.recovery_label.value,
        "metrics": [{"step": r["step"], "metrics": r["metrics"]} for r in job.metrics.records()],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m resumable_data.demo_train")
    ap.add_argument("--config", required=True, type=Path)
    ap.add_argument("--run", required=True, type=Path, help="run directory (checkpoints, metric log)")
    ap.add_argument("--resume", action="store_true", help="restore RUN/checkpoints (latest) first")
    ap.add_argument("--sabotage", choices=SABOTAGES, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    cfg = DemoConfig.from_json(a.config.read_text())
    a.run.mkdir(parents=True, exist_ok=True)
    ckpt_dir = a.run / "checkpoints"
    sabotage_seed = a.resume and a.sabotage == "seed"
    job = build(cfg, a.run, data_seed=cfg.data_seed + 1 if sabotage_seed else None)
    job.out = sys.stdout
    emit(job.out, "start", parameters=sum(p.numel() for p in job.model.parameters()), steps=cfg.steps)
    if a.resume:
        # a broken resume for the demo's self-test: another data seed, forced through as a data change
        label = rd.RecoveryLabel.DATA_CHANGE if sabotage_seed else rd.RecoveryLabel.FAITHFUL_CONTINUATION
        info = rd.load_checkpoint(ckpt_dir, job.state, label=label)
        if a.sabotage == "rng":  # a broken resume: the generators are not restored
            torch.manual_seed(12345)
        emit(
            job.out,
            "resumed",
            path=str(info.path),
            step=info.step,
            label=info.label.value,
            report=str(info.report) if info.report is not None else "",
            delivered=job.loader.cursor.delivered,
            microstep=job.loader.microstep,
        )
    train(job, ckpt_dir)
    emit(job.out, "done", **summary(job))
    return 0


if __name__ == "__main__":
    sys.exit(main())
