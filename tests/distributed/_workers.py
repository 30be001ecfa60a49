"""Code that runs inside the ranks spawned by the distributed tests (gloo on CPU).

Each rank runs a list of tasks and pickles its results to ``workdir/<tag>.rank<r>.pkl``; the tests
assert on them in the parent process.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

FEATURES = 4
G_TRAIN = 8  # global batch of the training runs
STEPS = 10  # training steps (N_TRAIN = 40 records: 5 steps per epoch, so the run crosses epochs)
N_TRAIN = 40
N_SLICE = 157


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_data(root: Path) -> tuple[Path, Path]:
    """A slice dataset (ids, tokens) and a training dataset with dyadic features (see train)."""
    import resumable_data as rd

    rng = np.random.default_rng(0)
    sl = root / "slice"
    lens = rng.integers(1, 9, N_SLICE)
    rd.write_arrow_shards(pa.table({
        "id": pa.array(np.arange(N_SLICE, dtype=np.int64)),
        "tokens": pa.array([rng.integers(0, 100, k).astype(np.int32).tolist() for k in lens],
                           type=pa.list_(pa.int32())),
    }), sl, num_shards=3, rows_per_batch=25)
    rd.pin(sl)
    tr = root / "train"
    cols = {f"x{j}": pa.array(rng.integers(-1, 2, N_TRAIN).astype(np.int8)) for j in range(FEATURES)}
    cols["y"] = pa.array(rng.integers(-2, 3, N_TRAIN).astype(np.int8))
    cols["id"] = pa.array(np.arange(N_TRAIN, dtype=np.int64))
    rd.write_arrow_shards(pa.table(cols), tr, num_shards=2)
    rd.pin(tr)
    return sl, tr


def xy(table: pa.Table):
    import torch

    x = np.column_stack([table.column(f"x{j}").to_numpy() for j in range(FEATURES)]).astype(np.float64)
    return {"x": torch.from_numpy(x), "y": torch.from_numpy(table.column("y").to_numpy().astype(np.float64)),
            "id": torch.from_numpy(table.column("id").to_numpy().copy())}


# -- training ----------------------------------------------------------------------------------
def make_model():
    import torch

    model = torch.nn.Linear(FEATURES, 1, dtype=torch.float64)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    opt = torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.5)
    return model, opt


def train_loader(train_dir, world):
    import resumable_data as rd

    return rd.DataLoader(rd.ArrowShards(train_dir), batch_size=G_TRAIN // world, shuffle=True, seed=7,
                         arrow_collate=xy)


def train(model, opt, loader, stop: int, world: int) -> list[list[int]]:
    """Train until ``stop`` committed steps. Sum-reduced loss scaled by world/G: after DDP's
    average over ``world`` ranks the gradient is the global batch's mean gradient. Every factor is
    a power of two and the data are small integers, so with float64 every product and partial sum
    of the gradient is exact and the result does not depend on the reduction order (which differs
    between world sizes: per-rank matmuls over b = G/world rows, then gloo's allreduce)."""
    seen = []
    while loader.cursor.committed < stop:
        for batch in loader:
            out = model(batch["x"]).squeeze(-1)
            loss = 0.5 * ((out - batch["y"]) ** 2).sum() * (world / G_TRAIN)
            loss.backward()
            opt.step()
            opt.zero_grad()
            seen.append(batch["id"].tolist())
            loader.state_dict()  # commit='auto': commit now, so cursor.committed counts this step
            if loader.cursor.committed >= stop:
                break
    return seen


class App:
    """DCP Stateful for a (possibly DDP-wrapped) model and its optimizer."""

    def __init__(self, model, opt) -> None:
        self.model, self.opt = model, opt

    def state_dict(self):
        from torch.distributed.checkpoint.state_dict import get_state_dict

        m, o = get_state_dict(self.model, self.opt)
        return {"model": m, "optim": o}

    def load_state_dict(self, sd):
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(self.model, self.opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])


def params(model) -> bytes:
    m = getattr(model, "module", model)
    return b"".join(p.detach().numpy().tobytes() for p in m.parameters())


def task_ddp(rank, world, train_dir, stop, load=None, save=None):
    import torch.distributed.checkpoint as dcp
    from torch.nn.parallel import DistributedDataParallel as DDP

    model, opt = make_model()
    ddp = DDP(model)
    loader = train_loader(train_dir, world)
    out = {}
    if load is not None:
        dcp.load({"app": App(ddp, opt), "loader": loader}, checkpoint_id=load)
        out["label"] = loader.recovery_label.value
        out["start"] = loader.cursor.committed
    out["seen"] = train(ddp, opt, loader, stop, world)
    out["params"] = params(ddp)
    out["state"] = loader.state_dict()
    if save is not None:
        dcp.save({"app": App(ddp, opt), "loader": loader}, checkpoint_id=save)
    return out


# -- per-rank slices of the global stream ------------------------------------------------------------
def task_slices(rank, world, slice_dir, g=24, steps=14):
    import torch.distributed as dist

    import resumable_data as rd

    src = rd.ArrowShards(slice_dir)
    out = {}
    for policy in ("contiguous", "strided"):
        ref = rd.DataLoader(src, batch_size=g, shuffle=True, seed=3, tail="wrap", sharding=rd.Sharding(1, 0),
                            arrow_collate=lambda t: t.column("id").to_numpy())
        kw = {} if policy == "contiguous" else {"sharding": rd.sharding_from_environment("strided")}
        loader = rd.DataLoader(src, batch_size=g // world, shuffle=True, seed=3,
                               arrow_collate=lambda t: t.column("id").to_numpy(), **kw)
        assert (loader.sharding.world_size, loader.sharding.rank) == (world, rank)
        assert loader.sharding.policy.value == policy
        b = g // world
        checked = 0
        while checked < steps:  # crosses epochs (7 steps each)
            for want, got in zip(ref, loader):
                mine = want[rank * b:(rank + 1) * b] if policy == "contiguous" else want[rank::world]
                assert np.array_equal(mine, got), (policy, checked, mine, got)
                checked += 1
                if checked == steps:
                    break
        states = [None] * world
        dist.all_gather_object(states, loader.state_dict())
        assert all(s == states[0] for s in states)
        out[policy] = checked
    # per-rank throughput (batches of b samples, num_workers=0), all ranks at once
    loader = rd.DataLoader(src, batch_size=g // world, shuffle=True, seed=3, arrow_collate=lambda t: t)
    dist.barrier()
    t0 = time.perf_counter()
    n = 0
    for _b in loader:  # one epoch
        n += 1
    out["throughput_samples_per_s"] = n * (g // world) / (time.perf_counter() - t0)
    return out


# -- DCP round trips ----------------------------------------------------------------------------------
def task_dcp(rank, world, slice_dir, ckpt_dir):
    """Save/load the loader (auto and explicit commit, non-empty skipped list, uncommitted batches)
    with a small model, through DCP; timings of the loader alone and of the model alone."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.stateful import Stateful

    import resumable_data as rd
    import resumable_data.distributed  # noqa: F401  (rd.distributed)

    dist_on = torch.distributed.is_available() and torch.distributed.is_initialized()
    src = rd.ArrowShards(slice_dir)
    g = 12

    def loader(commit="auto"):
        return rd.DataLoader(src, batch_size=g // world, shuffle=True, shuffle_window=32, seed=5, commit=commit,
                             arrow_collate=lambda t: t.column("id").to_numpy())

    out = {}
    # auto commit, skipped ranges, model + optimizer beside it
    a = loader()
    assert isinstance(a, Stateful)
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
    saved = a.state_dict()
    if dist_on:
        states = [None] * world
        torch.distributed.all_gather_object(states, saved)
        assert all(s == saved for s in states), "loader states differ across ranks"
    path = f"{ckpt_dir}/auto"
    dcp.save({"model": model.state_dict(), "optim": opt.state_dict(), "loader": a}, checkpoint_id=path)
    b = loader()
    model2 = torch.nn.Linear(256, 256)
    sd = {"model": model2.state_dict(), "loader": b}
    dcp.load(sd, checkpoint_id=path)
    model2.load_state_dict(sd["model"])
    assert b.state_dict() == saved, (b.state_dict(), saved)
    assert [r[2] for r in b.state_dict()["skipped"]] == ["bad shard 17", "loss spike"]
    assert torch.equal(model2.weight, model.weight)
    nxt_a, nxt_b = next(iter(a)), next(iter(b))
    assert np.array_equal(nxt_a, nxt_b)
    out["auto"] = saved

    # explicit commit, saved with uncommitted batches
    e = loader("explicit")
    it = iter(e)
    for _ in range(3):
        next(it)
    e.commit()
    next(it)
    next(it)  # committed 3, delivered 5
    e.skip_steps(9, 10, "bad record")
    saved_e = e.state_dict()
    assert saved_e["cursor"]["committed"] == 3 and saved_e["cursor"]["delivered"] == 5
    path_e = f"{ckpt_dir}/explicit"
    dcp.save({"loader": e}, checkpoint_id=path_e)
    try:
        dcp.load({"loader": loader("explicit")}, checkpoint_id=path_e)
        raise AssertionError("DCP loaded a state with uncommitted batches without a choice")
    except rd.ResumeError as exc:
        out["explicit_refusal"] = str(exc)
    # way 1: the Stateful adapter with the choice made up front
    r = loader("explicit")
    dcp.load({"loader": rd.distributed.LoaderStateful(r, on_uncommitted="repeat")}, checkpoint_id=path_e)
    assert r.cursor.committed == r.cursor.delivered == 3
    # way 2: a plain dict, then the loader's own load_state_dict with the choice
    s = loader("explicit")
    plain = {"loader": s.state_dict()}
    dcp.load(plain, checkpoint_id=path_e)
    assert plain["loader"] == saved_e
    s.load_state_dict(plain["loader"], on_uncommitted="skip")
    assert s.cursor.committed == 5 and s.counters.skipped_steps == 2
    assert [x[:2] for x in s.state_dict()["skipped"]] == [[9, 10], [3, 5]]

    return out


def task_abort(rank, world, marker, always=False):
    """Rank 1 dies by SIGABRT (as a C++ ``std::terminate`` does): on every run when ``always``, else
    only while ``marker`` does not exist (it is created first). The launcher's retry is tested on it."""
    if rank == 1 and (always or not os.path.exists(marker)):
        Path(marker).touch()
        os.abort()
    return rank


TASKS = {"ddp": task_ddp, "slices": task_slices, "dcp": task_dcp, "abort": task_abort}


def entry(rank: int, world: int, port: int, tasks: list, workdir: str, tag: str, module: str = "_workers",
          deterministic: bool = False) -> None:
    """One spawned rank: run ``tasks`` (names in ``module``'s ``TASKS``) and pickle the results."""
    os.environ["OMP_NUM_THREADS"] = "1"
    import faulthandler
    import importlib

    faulthandler.enable(all_threads=True)  # a rank killed by a signal (SIGABRT in C++) prints its Python stacks

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if deterministic:
        torch.use_deterministic_algorithms(True)
    registry = importlib.import_module(module).TASKS
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))
    try:
        results = {}
        for key, name, kwargs in tasks:
            t0 = time.perf_counter()
            results[key] = registry[name](rank, world, **kwargs)
            results[key + ".seconds"] = time.perf_counter() - t0
            dist.barrier()
        with open(Path(workdir) / f"{tag}.rank{rank}.pkl", "wb") as f:
            pickle.dump(results, f)
    finally:
        dist.destroy_process_group()
    # Results are on disk and the group is gone: end here, before the interpreter's teardown frees
    # FSDP's cyclic garbage (modules, meshes, process groups) and runs C++ static destructors in an
    # order torch does not promise (a suspect for the SIGABRT "terminate called without an active
    # exception" a rank died of once on CI; where in its run is not known). A task that raised
    # never reaches this line.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def launch(world: int, tasks: list, workdir: Path, tag: str, *, module: str = "_workers",
           deterministic: bool = False) -> list[dict]:
    """Run ``tasks`` on ``world`` spawned gloo ranks; returns each rank's results.

    A rank that raised fails the launch at once (its traceback is the error). A rank killed by a
    signal with no Python error (torch / gloo's C++ ``std::terminate``, SIGABRT: seen once on CI,
    not reproduced in 24 loaded runs here) is named with the ranks that had finished, and the whole
    world is run once more, with a warning in the test report: the tasks are deterministic, so a
    second run that passes checks the same results, and an abort rd causes happens again."""
    import warnings

    import torch.multiprocessing as mp

    for attempt in range(2):
        for r in range(world):
            (Path(workdir) / f"{tag}.rank{r}.pkl").unlink(missing_ok=True)
        try:
            mp.start_processes(entry, args=(world, free_port(), tasks, str(workdir), tag, module, deterministic),
                               nprocs=world, join=True, start_method="spawn")
            break
        except mp.ProcessExitedException as e:  # killed by a signal: say which ranks had finished their tasks
            done = [r for r in range(world) if (Path(workdir) / f"{tag}.rank{r}.pkl").exists()]
            what = f"{e} (ranks that wrote their results: {done} of {world})"
            if attempt or not e.signal_name:  # an exit code: not the C++ abort this retries
                raise AssertionError(what + (", twice" if attempt else "")) from e
            warnings.warn(f"{tag}: {what}; running the world again", RuntimeWarning, stacklevel=2)
    out = []
    for r in range(world):
        with open(Path(workdir) / f"{tag}.rank{r}.pkl", "rb") as f:
            out.append(pickle.load(f))
    return out
