"""Ranks of ``test_dcp_training_state.py``: ``rd.TrainingState`` (model with dropout, AdamW with
state, LambdaLR, GradScaler("cpu"), every RNG, ``rd.DataLoader`` with 2-microbatch accumulation
and explicit commit, mid-window gradients) through ``dcp.save``/``dcp.load`` into a fresh
TrainingState, vs an uninterrupted run. Runs in one process (no process group) or in ranks spawned
by ``_workers.launch`` (DDP over gloo); each rank seeds its generators differently."""

from __future__ import annotations

import random

import numpy as np

import _workers as W

K = 2        # microbatches per update
TOTAL = 12   # microbatches of the uninterrupted run (6 updates)
STOP = 7     # the interrupted run saves after 7 microbatches: mid-window (3 updates + 1 microbatch)


def build(train_dir, rank: int, world: int, **kw):
    import torch

    import resumable_data as rd

    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Sequential(torch.nn.Linear(W.FEATURES, 8, dtype=torch.float64), torch.nn.Dropout(0.25),
                                torch.nn.Linear(8, 1, dtype=torch.float64))
    random.seed(100 + rank)  # each rank's own generators (dropout masks differ between ranks)
    np.random.seed(100 + rank)
    torch.manual_seed(100 + rank)
    net = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        net = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=3)
    loader = rd.DataLoader(rd.ArrowShards(train_dir), batch_size=W.G_TRAIN // world, shuffle=True, seed=7,
                           commit="explicit", accumulation_steps=K, tail="wrap", arrow_collate=W.xy)
    state = rd.TrainingState(model=model, optimizer=opt, scheduler=sched, scaler=scaler, loader=loader, **kw)
    return net, opt, sched, scaler, loader, state


def run(objs, until: int) -> list[float]:
    """Train until ``until`` microbatches were delivered; the per-microbatch losses (dropout-dependent)."""
    import resumable_data as rd

    net, opt, sched, scaler, loader, state = objs
    losses = []
    while loader.cursor.delivered < until:
        for batch in loader:
            out = net(batch["x"]).squeeze(-1)
            loss = 0.5 * ((out - batch["y"]) ** 2).mean() / K
            scaler.scale(loss).backward()
            losses.append(float(loss))
            if loader.microstep_is_last:
                applied = rd.scaler_step(scaler, opt)
                sched.step()
                opt.zero_grad(set_to_none=True)
                state.commit(applied)
            if loader.cursor.delivered >= until:
                break
    return losses


def rng_digest() -> dict:
    from resumable_data.checkpoint import rng

    return rng.digests(rng.capture())


def opt_bytes(opt) -> bytes:
    return b"".join(v.detach().numpy().tobytes() if hasattr(v, "numpy") else repr(v).encode()
                    for g in opt.param_groups for p in g["params"] for _, v in sorted(opt.state[p].items()))


def summary(objs) -> dict:
    import torch

    net, opt, sched, scaler, loader, state = objs
    m = getattr(net, "module", net)
    return {"params": b"".join(p.detach().numpy().tobytes() for p in m.parameters()), "optim": opt_bytes(opt),
            "lr": [g["lr"] for g in opt.param_groups], "scale": scaler.get_scale(),
            "draws": (random.random(), float(np.random.rand()), float(torch.rand(1)))}


def task_resume(rank, world, train_dir, ckpt):
    """Uninterrupted run, then the same run interrupted at STOP, saved with DCP, loaded into fresh objects."""
    import torch
    import torch.distributed.checkpoint as dcp

    full = build(train_dir, rank, world)
    ref_losses = run(full, TOTAL)
    ref = summary(full)

    a = build(train_dir, rank, world)
    head = run(a, STOP)
    mid = any(p.grad is not None for p in a[0].parameters())
    saved = {"rng": rng_digest(), "optim": opt_bytes(a[1]),
             "grads": [p.grad.clone() for p in getattr(a[0], "module", a[0]).parameters()]}
    dcp.save({"train": a[5]}, checkpoint_id=ckpt)
    random.seed(999)  # the resumed process starts from other generator states
    np.random.seed(999)
    torch.manual_seed(999)
    b = build(train_dir, rank, world)
    random.seed(999)
    torch.manual_seed(999)
    dcp.load({"train": b[5]}, checkpoint_id=ckpt)
    restored = {"rng": rng_digest(), "optim": opt_bytes(b[1]),
                "grads": [None if p.grad is None else p.grad.clone() for p in getattr(b[0], "module", b[0]).parameters()]}
    tail = run(b, TOTAL)
    return {"mid": mid, "ref_losses": ref_losses, "losses": head + tail, "ref": ref, "resumed": summary(b),
            "saved_rng": saved["rng"], "restored_rng": restored["rng"],
            "optim_equal": saved["optim"] == restored["optim"] and len(saved["optim"]) > 0,
            "grads_equal": all(g is not None and torch.equal(s, g) for s, g in zip(saved["grads"], restored["grads"])),
            "run_id_kept": a[5].run_id == b[5].run_id, "run_ids": (a[5].run_id, b[5].run_id), "label": b[4].recovery_label.value}


def task_guards(rank, world, small_ckpt, workdir):
    """save_checkpoint refuses in a multi-rank job; a 1-process checkpoint on 2 ranks: refused for the
    RNG of rank 1 unless new_rank_rng='keep'."""
    import torch
    import torch.distributed.checkpoint as dcp

    import resumable_data as rd

    out = {}
    m = torch.nn.Linear(2, 2)
    try:
        rd.save_checkpoint(f"{workdir}/file-rank{rank}", rd.TrainingState(model=m), step=1)
        out["save_checkpoint"] = "no error"
    except rd.ConfigError as e:
        out["save_checkpoint"] = str(e)

    def small(**kw):
        torch.manual_seed(0)
        net = torch.nn.Linear(3, 2)
        return rd.TrainingState(model=net, optimizer=torch.optim.AdamW(net.parameters()), run_id="small", **kw)

    from torch.distributed.checkpoint.stateful import Stateful

    class Elastic(Stateful):  # dcp.load calls load_state_dict(sd): this passes a label through
        def __init__(self, ts):
            self.ts = ts

        def state_dict(self):
            return self.ts.state_dict()

        def load_state_dict(self, sd):
            self.ts.load_state_dict(sd, label="elastic_reshard")

    try:
        dcp.load({"train": Elastic(small())}, checkpoint_id=small_ckpt)
        out["refuse"] = "no error"
    except rd.CompatibilityError as e:
        out["refuse"] = str(e)
    random.seed(500 + rank)
    before = rng_digest()
    dcp.load({"train": Elastic(small(new_rank_rng="keep"))}, checkpoint_id=small_ckpt)
    out["rng_kept"] = rng_digest() == before
    out["rng_after_keep"] = rng_digest()
    return out


TASKS = {"resume": task_resume, "guards": task_guards}
