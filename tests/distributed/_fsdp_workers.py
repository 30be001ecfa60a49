"""Code that runs inside the ranks spawned by ``test_fsdp.py``: FSDP2 (``fully_shard``) on CPU with
gloo, AdamW, ``rd.DataLoader`` and ``torch.distributed.checkpoint`` (DCP).

Each rank runs a list of tasks and pickles its results to ``workdir/<tag>.rank<r>.pkl`` (the
launcher of ``_workers`` is reused); tensors come back as NumPy arrays.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

FEATURES = 4
HIDDEN = 12
N = 44  # not a multiple of G: the epoch tail wraps into the next epoch (tail="wrap")
G = 8  # global batch; per-rank batch G // world on 1, 2 and 4 ranks
STEPS = 8  # 44 records / 8 = 5.5 steps per epoch: the run crosses an epoch boundary
SAVE_AT = 4
SEED = 11
LR = 1e-2


def write_data(root: Path) -> Path:
    import resumable_data as rd

    rng = np.random.default_rng(0)
    cols = {f"x{j}": pa.array(rng.standard_normal(N).astype(np.float32)) for j in range(FEATURES)}
    cols["y"] = pa.array(rng.standard_normal(N).astype(np.float32))
    cols["id"] = pa.array(np.arange(N, dtype=np.int64))
    d = root / "train"
    rd.write_arrow_shards(pa.table(cols), d, num_shards=2)
    rd.pin(d)
    return d


def collate(table: pa.Table):
    import torch

    x = np.column_stack([table.column(f"x{j}").to_numpy() for j in range(FEATURES)]).astype(np.float32)
    return {"x": torch.from_numpy(x), "y": torch.from_numpy(table.column("y").to_numpy().astype(np.float32)),
            "id": torch.from_numpy(table.column("id").to_numpy().copy())}


def make_loader(data_dir, world: int, **kw):
    import resumable_data as rd

    return rd.DataLoader(rd.ArrowShards(data_dir), batch_size=G // world, shuffle=True, seed=SEED, tail="wrap",
                         arrow_collate=collate, **kw)


def global_stream(data_dir, steps: int) -> list[list[int]]:
    """The single-process stream at the global batch (no process group): record ids per step."""
    import resumable_data as rd

    loader = make_loader(data_dir, 1, sharding=rd.Sharding(1, 0))
    out: list[list[int]] = []
    while len(out) < steps:
        for b in loader:
            out.append(b["id"].tolist())
            if len(out) == steps:
                break
    return out


def make_fsdp(world: int):
    """A 2-layer float32 MLP, the same initial weights on every rank, each Linear and the root
    wrapped with ``fully_shard`` on a 1-D CPU mesh; AdamW over the sharded (DTensor) parameters.
    ``Linear(HIDDEN, 1)`` has a 1-row weight: its dim-0 shards are uneven (empty on some ranks)."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 1))
    mesh = init_device_mesh("cpu", (world,))
    for m in model:
        if isinstance(m, torch.nn.Linear):
            fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1)
    return model, opt


def train(model, opt, loader, stop: int) -> list[list[int]]:
    """Train until ``stop`` committed steps. Per-rank mean loss; FSDP2's reduce-scatter averages
    over the ranks, so the gradient is the global batch's mean gradient on every world size."""
    seen = []
    while loader.cursor.committed < stop:
        for batch in loader:
            out = model(batch["x"]).squeeze(-1)
            loss = ((out - batch["y"]) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            seen.append(batch["id"].tolist())
            loader.state_dict()  # commit='auto': commit now, so cursor.committed counts this step
            if loader.cursor.committed >= stop:
                break
    return seen


def full_state(model, opt) -> dict:
    """Unsharded model and optimizer state keyed by FQN (every rank takes part in the gather; with
    ``cpu_offload=True`` only rank 0 receives it, the others get empty dicts)."""
    import torch
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    msd, osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def arr(v):
        return v.detach().cpu().numpy().copy() if isinstance(v, torch.Tensor) else v

    return {
        "model": {k: arr(v) for k, v in msd.items()},
        "optim": {fqn: {k: arr(v) for k, v in st.items()} for fqn, st in osd.get("state", {}).items()},
        "groups": [{k: v for k, v in g.items()} for g in osd.get("param_groups", [])],
    }


def task_fsdp(rank, world, data_dir, stop, load=None, save=None):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.tensor import DTensor

    model, opt = make_fsdp(world)
    assert all(isinstance(p, DTensor) for p in model.parameters()), "fully_shard did not shard the parameters"
    loader = make_loader(data_dir, world)
    assert (loader.sharding.world_size, loader.sharding.rank) == (world, rank)
    out = {"world": world, "rank": rank}
    if load is not None:
        msd, osd = get_state_dict(model, opt)  # sharded templates for this world size
        sd = {"model": msd, "optim": osd, "loader": loader}
        dcp.load(sd, checkpoint_id=load)
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        out["label"] = loader.recovery_label.value
        out["start"] = loader.cursor.committed
        out["loaded"] = full_state(model, opt)
        out["local_shapes"] = {n: tuple(p.to_local().shape) for n, p in model.named_parameters()}
    out["seen"] = train(model, opt, loader, stop)
    out["final"] = full_state(model, opt)
    out["state"] = loader.state_dict()
    if save is not None:
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optim": osd, "loader": loader}, checkpoint_id=save)
    return out


TASKS = {"fsdp": task_fsdp}


def launch(world: int, tasks: list, workdir: Path, tag: str) -> list[dict]:
    """Run FSDP ``tasks`` on ``world`` spawned gloo ranks (the shared launcher of ``_workers``)."""
    from _workers import launch as launch_ranks

    return launch_ranks(world, tasks, workdir, tag, module="_fsdp_workers", deterministic=True)
