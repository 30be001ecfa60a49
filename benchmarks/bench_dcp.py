"""DCP save and load time of the loader state beside a small model, at 1, 2 and 4 ranks.

Each rank is a spawned process in a gloo process group (CPU), as under torchrun. Every rank holds
an ``rd.DataLoader`` over the same pinned Arrow shards (global batch 12, shuffled in a window, 4
steps delivered, two skipped ranges: a non-empty variable-length part of the state) and a
replicated ``torch.nn.Linear(256, 256)`` with an SGD-momentum optimizer, and times, through
``torch.distributed.checkpoint``: the loader alone (``dcp.save({"loader": loader})``, then
``dcp.load`` into a fresh loader), the model and optimizer alone, and all three in one checkpoint.
Each operation starts after a barrier; a run's time is the slowest rank's; median (min..max) of
``--repeats`` runs after one warm-up. Every save writes a new checkpoint directory (local disk).
Run: ``python -m benchmarks.bench_dcp [--quick]`` (well under a minute either way).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from benchmarks._common import machine, summarize, write_results

WORLDS = (1, 2, 4)
G = 12  # global batch
N = 157  # records
OPS = ("save_loader", "load_loader", "save_model", "load_model", "save_all", "load_all")
LABELS = {
    "save_loader": "save the loader state ({state_bytes} B as JSON)",
    "load_loader": "load the loader state (into a fresh loader, built beforehand)",
    "save_model": "save a `Linear(256, 256)` + SGD-momentum state",
    "load_model": "load the model + optimizer state",
    "save_all": "save model + optimizer + loader in one checkpoint",
    "load_all": "load model + optimizer + loader",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _data(root: Path) -> Path:
    import numpy as np
    import pyarrow as pa

    import resumable_data as rd

    rng = np.random.default_rng(0)
    lens = rng.integers(1, 9, N)
    path = root / "data"
    rd.write_arrow_shards(pa.table({
        "id": pa.array(np.arange(N, dtype=np.int64)),
        "tokens": pa.array([rng.integers(0, 100, k).astype(np.int32).tolist() for k in lens],
                           type=pa.list_(pa.int32())),
    }), path, num_shards=3, rows_per_batch=25)
    rd.pin(path)
    return path


def _rank(rank: int, world: int, port: int, data: str, workdir: str, repeats: int) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    import resumable_data as rd
    import resumable_data.distributed  # noqa: F401  (the loader's Stateful support)

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    try:
        src = rd.ArrowShards(data)

        def loader():
            return rd.DataLoader(src, batch_size=G // world, shuffle=True, shuffle_window=32, seed=5,
                                 sharding=rd.Sharding(world, rank),
                                 arrow_collate=lambda t: t.column("id").to_numpy())

        a = loader()
        it = iter(a)
        for _ in range(4):
            next(it)
        a.skip_steps(6, 8, "bad shard 17")
        a.skip_steps(20, 21, "loss spike")
        torch.manual_seed(0)  # replicated (data-parallel) model: the same on every rank
        model = torch.nn.Linear(256, 256)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model(torch.randn(4, 256)).sum().backward()
        opt.step()
        state_bytes = len(json.dumps(a.state_dict()))
        model2 = torch.nn.Linear(256, 256)
        opt2 = torch.optim.SGD(model2.parameters(), lr=0.1, momentum=0.9)
        model2(torch.randn(4, 256)).sum().backward()
        opt2.step()  # the target needs the optimizer's state structure (momentum buffers)

        def ckpt(kind: str, k: int) -> str:
            return f"{workdir}/{kind}-{k}"

        def save(k, kind, sd):
            return lambda: dcp.save(sd, checkpoint_id=ckpt(kind, k))

        def load(k, kind, sd):
            return lambda: dcp.load(sd, checkpoint_id=ckpt(kind, k))

        # each entry builds its target first (a fresh loader is not part of the timed load)
        ops = {
            "save_loader": lambda k: save(k, "loader", {"loader": a}),
            "load_loader": lambda k: load(k, "loader", {"loader": loader()}),
            "save_model": lambda k: save(k, "model", {"model": model.state_dict(), "optim": opt.state_dict()}),
            "load_model": lambda k: load(k, "model", {"model": model2.state_dict(), "optim": opt2.state_dict()}),
            "save_all": lambda k: save(k, "all", {"model": model.state_dict(), "optim": opt.state_dict(), "loader": a}),
            "load_all": lambda k: load(k, "all", {"model": model2.state_dict(), "optim": opt2.state_dict(),
                                                  "loader": loader()}),
        }
        times: dict[str, list[float]] = {op: [] for op in OPS}
        for k in range(repeats + 1):  # k = 0: warm-up
            for op in OPS:  # a load reads the checkpoint its save wrote in the same round
                run = ops[op](k)
                dist.barrier()
                t0 = time.perf_counter()
                run()
                dt = time.perf_counter() - t0
                slowest = [None] * world
                dist.all_gather_object(slowest, dt)
                if k:
                    times[op].append(max(slowest))
        assert torch.equal(model2.weight, model.weight)
        if rank == 0:
            (Path(workdir) / "times.json").write_text(json.dumps({
                "times": times, "state_bytes": state_bytes, "model_params": sum(p.numel() for p in model.parameters())}))
    finally:
        dist.destroy_process_group()


def measure(world: int, data: Path, repeats: int) -> dict:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix=f"rd-dcp-{world}-") as workdir:
        t0 = time.perf_counter()
        mp.start_processes(_rank, args=(world, _free_port(), str(data), workdir, repeats), nprocs=world,
                           join=True, start_method="spawn")
        wall = time.perf_counter() - t0
        out = json.loads((Path(workdir) / "times.json").read_text())
    ms = {op: summarize([t * 1e3 for t in ts]) for op, ts in out["times"].items()}
    return {"ms": ms, "state_bytes": out["state_bytes"], "model_params": out["model_params"], "wall_s": wall}


def markdown(res: dict, repeats: int) -> str:
    def cell(r: dict) -> str:
        return f"{r['median']:.0f} ({r['min']:.0f}..{r['max']:.0f})"

    state_bytes = res[WORLDS[0]]["state_bytes"]
    head = (f"| DCP time, ms: median (min..max) of {repeats}, slowest rank, gloo, {machine()['cpus']} shared CPUs "
            f"| " + " | ".join(f"{w} rank{'s' if w > 1 else ''}" for w in res) + " |")
    lines = [head, "|---" * (len(res) + 1) + "|"]
    for op in OPS:
        lines.append(f"| {LABELS[op].format(state_bytes=state_bytes)} | "
                     + " | ".join(cell(r["ms"][op]) for r in res.values()) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 runs per figure instead of 5")
    parser.add_argument("--repeats", type=int, default=None, help="runs per figure (>= 3)")
    args = parser.parse_known_args(argv)[0]
    repeats = max(3, args.repeats or (3 if args.quick else 5))
    t0, load_before = time.perf_counter(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="rd-dcp-data-") as tmp:
        data = _data(Path(tmp))
        res = {w: measure(w, data, repeats) for w in WORLDS}
    md = markdown(res, repeats)
    write_results("dcp", {"global_batch": G, "records": N, "repeats": repeats, "unit": "ms",
                          "seconds": time.perf_counter() - t0,
                          "load_avg_1min": [load_before, os.getloadavg()[0]], "by_world": res}, md)
    print(md)
    return res


if __name__ == "__main__":
    main()
