"""Forged optimizer and scheduler states: refused before anything is applied (issue 30, item 9).

Each case takes a real checkpoint of a small model (SGD with momentum, Adam, AdamW with amsgrad;
StepLR, MultiStepLR, CosineAnnealingLR, LambdaLR), changes one optimizer or scheduler value (a moment of
the wrong shape, an extra leading dimension that broadcasts, the wrong dtype, a missing or extra
state key, a ``None`` group or scheduler value, a tuple or list of the wrong length, a flipped flag,
a number turned into a string), recomputes the oracles from the forged tree and writes it with the
store's own writer (so the marker is re-hashed exactly as a save does): only the restore's
validation can refuse it. Every case must raise an ``rd.ResumableDataError`` and leave every
object's digest (model, gradients, optimizer, scheduler, generators) unchanged; a fresh
``optimizer.step()`` still runs afterwards.
"""

from __future__ import annotations

import copy
import random
import warnings

import numpy as np
import pytest
import torch
import xxhash

import resumable_data as rd
from resumable_data.checkpoint import save as save_mod
from resumable_data.checkpoint import store as store_mod
from resumable_data.checkpoint.codec import encode
from resumable_data.checkpoint.keys import K_OPTIMIZER, K_ORACLES, K_SCHEDULER
from tests.reliability._counts import count

OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
    "adamw_amsgrad": lambda ps: torch.optim.AdamW(ps, lr=0.01, amsgrad=True),
}
SCHEDULERS = {
    "step": lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5),
    "multistep": lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=[1, 3], gamma=0.5),
    "cosine": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=10),
    "lambda": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: 0.9 ** s),
}
CASES = [("sgd", "step"), ("adam", "multistep"), ("adamw_amsgrad", "cosine"), ("adam", "lambda")]


def build(opt_kind: str, sched_kind: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    head, tail = list(model[0].parameters()), list(model[1].parameters())
    opt = OPTIMIZERS[opt_kind]([{"params": head}, {"params": tail, "weight_decay": 0.01}])
    return rd.TrainingState(model=model, optimizer=opt, scheduler=SCHEDULERS[sched_kind](opt), run_id="forge")


def train(ts, steps: int = 3) -> None:
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
    for _ in range(steps):
        ts.model(x).pow(2).mean().backward()
        ts.optimizer.step()
        ts.optimizer.zero_grad(set_to_none=True)
        ts.scheduler.step()


def digest(ts) -> str:
    h = xxhash.xxh3_64()

    def walk(x):
        if isinstance(x, torch.Tensor):
            t = x.detach().contiguous()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode() + t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(x, dict):
            for k in sorted(x, key=str):
                h.update(f"K{k!r}".encode())
                walk(x[k])
        elif isinstance(x, (list, tuple)):
            h.update(f"L{len(x)}".encode())
            for v in x:
                walk(v)
        else:
            h.update(repr(x).encode())

    walk([ts.model.state_dict(), {n: p.grad for n, p in ts.model.named_parameters()}, ts.optimizer.state_dict(),
          ts.scheduler.state_dict(), torch.get_rng_state(), list(np.random.get_state()), random.getstate()])
    return h.hexdigest()


def _wrong_shape(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1)[:-1].clone() if t.numel() > 1 else torch.cat([t.reshape(-1), t.reshape(-1)])


def forgeries(tree):
    """(description, forged tree) for every optimizer and scheduler value (module docs)."""
    opt, sched = tree[K_OPTIMIZER], tree[K_SCHEDULER]
    for name, st in opt["state"].items():
        for key, v in st.items():
            if not isinstance(v, torch.Tensor):
                continue
            muts = {"wrong shape": _wrong_shape(v), "extra leading dim": v.unsqueeze(0).clone(), "None": None,
                    "wrong dtype": v.to(torch.float64) if v.dtype != torch.float64 else v.to(torch.float32)}
            if v.dim() == 0:  # a step count: a vector of steps; the extra dim is the same idea
                muts["extra leading dim"] = v.reshape(1).repeat(2)
            for how, new in muts.items():
                t = copy.deepcopy(tree)
                t[K_OPTIMIZER]["state"][name][key] = new
                yield f"optimizer.state.{name}.{key}: {how}", t
        t = copy.deepcopy(tree)
        del t[K_OPTIMIZER]["state"][name][next(iter(st))]
        yield f"optimizer.state.{name}: a key missing", t
        t = copy.deepcopy(tree)
        t[K_OPTIMIZER]["state"][name]["zz_extra"] = torch.zeros(3)
        yield f"optimizer.state.{name}: an extra key", t
    for gi, g in enumerate(opt["param_groups"]):
        for key, v in g.items():
            if key == "params":
                continue
            muts = {}
            if v is not None:
                muts["None"] = None
            if isinstance(v, bool):
                muts["flipped"] = not v
            elif isinstance(v, (int, float)):
                muts["a string"] = "0.1"
            if isinstance(v, (tuple, list)):
                muts["one more"] = type(v)([*v, v[-1]])
                muts["one fewer"] = type(v)(v[:-1])
            for how, new in muts.items():
                t = copy.deepcopy(tree)
                t[K_OPTIMIZER]["param_groups"][gi][key] = new
                yield f"optimizer.param_groups[{gi}].{key}: {how}", t
    for key, v in sched.items():
        muts = {}
        if v is not None:
            muts["None"] = None
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            muts["a string"] = "3"
        if isinstance(v, (list, tuple)) and v:
            muts["one more"] = type(v)([*v, v[-1]])
            muts["one fewer"] = type(v)(v[:-1])
        for how, new in muts.items():
            t = copy.deepcopy(tree)
            t[K_SCHEDULER][key] = new
            yield f"scheduler.{key}: {how}", t


def write_forged(saved_ts, raw, tree, dest) -> None:
    """``tree`` written by the store's own writer, its oracles recomputed: only validation can refuse it."""
    try:
        tree[K_ORACLES] = saved_ts._oracles(tree, None)
    except Exception:  # noqa: BLE001 - a value the digests cannot walk: keep the saved oracles
        pass
    json_tree, tensors = encode(tree)
    meta = json_tree.get("meta")
    dest.mkdir(parents=True)
    save_mod._write(dest, raw.step, raw.checkpoint_id, json_tree, tensors, meta, raw.inventory, None)


@pytest.mark.parametrize("opt_kind,sched_kind", CASES)
def test_forged_optimizer_and_scheduler_values_are_refused_touching_nothing(tmp_path, opt_kind, sched_kind):
    saved = build(opt_kind, sched_kind)
    train(saved)
    rd.save_checkpoint(tmp_path / "real", saved, step=3)
    raw = store_mod.read_checkpoint(tmp_path / "real")
    fresh = build(opt_kind, sched_kind)
    before = digest(fresh)
    problems, n = [], 0
    for i, (what, tree) in enumerate(forgeries(raw.tree)):
        n += 1
        d = tmp_path / f"f{i}"
        write_forged(saved, raw, tree, d)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rd.load_checkpoint(d, fresh)
        except rd.ResumableDataError:
            if digest(fresh) != before:
                problems.append(f"{what}: refused but changed an object")
        except Exception as e:  # noqa: BLE001
            problems.append(f"{what}: {type(e).__name__}: {e}"[:200])
        else:
            problems.append(f"{what}: accepted")
            fresh = build(opt_kind, sched_kind)
    assert n > 20
    assert not problems, f"{len(problems)} of {n}:\n" + "\n".join(problems[:60])
    train(fresh, 1)  # the untouched objects still train
    rd.load_checkpoint(tmp_path / "real", build(opt_kind, sched_kind))  # the honest checkpoint still loads
    count("forged_optimizer_cases", n)
    count("forged_optimizer_refused", n)


@pytest.mark.parametrize("opt_kind,sched_kind", CASES)
def test_an_honest_checkpoint_loads_and_continues_bit_exactly(tmp_path, opt_kind, sched_kind):
    """The probe changes nothing it validates: a resumed run equals the uninterrupted one."""
    a = build(opt_kind, sched_kind)
    train(a, 3)
    rd.save_checkpoint(tmp_path / "c", a, step=3)
    train(a, 2)
    b = build(opt_kind, sched_kind)
    rd.load_checkpoint(tmp_path / "c", b)
    train(b, 2)
    assert digest(a) == digest(b)


# -- ReduceLROnPlateau: no get_lr() to probe; its settings and progress values -----------------------
def _plateau(**kw):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    opt = torch.optim.Adam([{"params": model[0].parameters()}, {"params": model[1].parameters()}], lr=0.01)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1, cooldown=1, factor=0.5, **kw)
    return rd.TrainingState(model=model, optimizer=opt, scheduler=sched, run_id="plateau")


def _plateau_train(ts, steps: int = 5) -> None:
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
    for i in range(steps):
        loss = ts.model(x).pow(2).mean()
        loss.backward()
        ts.optimizer.step()
        ts.optimizer.zero_grad(set_to_none=True)
        ts.scheduler.step(1.0 + (i % 2))  # a metric that stops improving: counts bad epochs, reduces, cools down


PLATEAU_FORGED = {
    "mode": ("mid", r"ReduceLROnPlateau\(\) refuses"),
    "threshold_mode": ("both", r"ReduceLROnPlateau\(\) refuses"),
    "factor": (1.5, r"ReduceLROnPlateau\(\) refuses"),
    "best": (float("nan"), "scheduler.best"),
    "num_bad_epochs": (-1, "scheduler.num_bad_epochs"),
}


@pytest.mark.parametrize("key", sorted(PLATEAU_FORGED) + ["num_bad_epochs_float"])
def test_forged_reduce_lr_on_plateau_values_are_refused_touching_nothing(tmp_path, key):
    saved = _plateau()
    _plateau_train(saved)
    rd.save_checkpoint(tmp_path / "real", saved, step=5)
    raw = store_mod.read_checkpoint(tmp_path / "real")
    value, match = PLATEAU_FORGED.get(key, (1.5, "scheduler.num_bad_epochs"))
    tree = copy.deepcopy(raw.tree)
    tree[K_SCHEDULER][key.replace("_float", "")] = value
    write_forged(saved, raw, tree, tmp_path / "forged")
    fresh = _plateau()
    before = digest(fresh)
    with pytest.raises(rd.CheckpointError, match=match):
        rd.load_checkpoint(tmp_path / "forged", fresh)
    assert digest(fresh) == before


@pytest.mark.parametrize(
    "config,progress",
    [
        ({}, {"best": float("-inf")}),  # a metric of -inf compared better in mode 'min'
        ({}, {"num_bad_epochs": 7}),  # above patience: the loop lowered patience since the last step
        ({"cooldown": -2}, {"cooldown_counter": -2}),  # a negative cooldown: the constructor takes it
        ({"cooldown": 1.5}, {"cooldown_counter": 0.5}),  # a float cooldown, counted down
    ],
    ids=["best_minus_inf", "bad_epochs_above_patience", "negative_cooldown", "float_cooldown"],
)
def test_legitimate_reduce_lr_on_plateau_values_load(tmp_path, config, progress):
    """Values a loop can reach with torch's own ReduceLROnPlateau are not refused."""
    saved = _plateau()
    _plateau_train(saved)
    for k, v in {**config, **progress}.items():
        setattr(saved.scheduler, k, v)
    rd.save_checkpoint(tmp_path / "c", saved, step=5)
    fresh = _plateau()
    for k, v in config.items():
        setattr(fresh.scheduler, k, v)
    rd.load_checkpoint(tmp_path / "c", fresh)
    assert all(getattr(fresh.scheduler, k) == v for k, v in {**config, **progress}.items())


def test_reduce_lr_on_plateau_resumes_bit_exactly(tmp_path):
    a = _plateau()
    _plateau_train(a, 5)
    assert a.scheduler.num_bad_epochs or a.scheduler.cooldown_counter or a.optimizer.param_groups[0]["lr"] < 0.01
    rd.save_checkpoint(tmp_path / "c", a, step=5)
    _plateau_train(a, 3)
    b = _plateau()
    rd.load_checkpoint(tmp_path / "c", b)
    _plateau_train(b, 3)
    assert digest(a) == digest(b)
