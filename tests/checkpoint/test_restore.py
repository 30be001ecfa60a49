"""All-or-nothing loads: a refused ``rd.load_checkpoint`` leaves every training object exactly as it
was and raises only ``rd.ResumableDataError`` subclasses.

A digest over every object (model parameters, buffers and gradients, optimizer state and groups,
scheduler, scaler, EMA, torch/NumPy/Python generators, the loader's state (``commit="explicit"``:
``state_dict()`` does not commit), callbacks, the metric log file, the lineage) is taken before
and after each refused load. Forged cases: every key path of a real checkpoint's ``state.json``
is mutated (wrong type, out of range, missing, extra key, huge string, deep nesting) and the
``COMMITTED`` marker re-hashed as the store does, so only the restore itself can refuse it. Honest
refusals: an unpinned loader, a changed seed / batch size, a changed model shape, and objects
whose ``load_state_dict`` raises midway (rolled back)."""

from __future__ import annotations

import copy
import json
import os
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import xxhash

sys.path.insert(0, str(Path(__file__).parent))

import _train as T  # noqa: E402

import resumable_data as rd  # noqa: E402
from tests.reliability._counts import count

STEP = "step-000000000006"
#: Paths whose mutation the restore may accept: recorded but never compared (meta.status: progress
#: shown by ``inspect``), or lineage ids that are only copied.
INERT = (("meta", "status"), ("meta", "run_id"), ("meta", "checkpoint_id"), ("meta", "parent_checkpoint_id"),
         ("meta", "recovery_label"), ("accumulation", "policy"), ("accumulation", "mid_window"),
         ("accumulation", "microstep"), ("metrics", "records"), ("metrics", "run_id"))
#: ... and paths that may be set to null: a part the checkpoint does not hold is not restored.
NULLABLE = (("metrics",),)
#: ... and paths that may be missing: metadata written before contract v2 records no seeding mode
#: (nothing to compare; the loader state's own record is still checked). Any other value is refused.
MISSABLE = (("meta", "data", "seed_per_sample"),)


class Counter:
    """A stateful callback."""

    def __init__(self):
        self.n = 0

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, s):
        self.n = int(s["n"])


def objects(data_dir, tmp: Path, name: str, log: Path | None = None, **kw):
    """The training objects of ``_train.build`` plus a callback; ``log``: the metric log to start from."""
    import shutil

    if log is not None:
        shutil.copy(log, tmp / f"metrics-{name}.jsonl")
    o = T.build(data_dir, tmp / f"metrics-{name}.jsonl", **kw)
    cb = Counter()
    o.state = rd.TrainingState(model=o.model, optimizer=o.opt, scheduler=o.sched, scaler=o.scaler, loader=o.loader,
                               ema=o.ema, metrics=o.metrics, callbacks={"counter": cb},
                               config={"hidden": kw.get("hidden", 24), "dropout": 0.3},
                               feature_schema={"vocab": [f"tok{i}" for i in range(T.VOCAB)]},
                               scheduler_convention="attempted_update", run_id=kw.get("run_id", "run-a"))
    o.cb = cb
    return o


def _h(h, x) -> None:
    if isinstance(x, torch.Tensor):
        t = x.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode() + (t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""))
    elif isinstance(x, dict):
        for k in sorted(x, key=str):
            h.update(f"K{k!r}".encode())
            _h(h, x[k])
    elif isinstance(x, (list, tuple)):
        h.update(f"L{len(x)}".encode())
        for v in x:
            _h(h, v)
    elif isinstance(x, np.ndarray):
        h.update(x.tobytes())
    else:
        h.update(repr(x).encode())


def digest(o) -> dict[str, str]:
    """One digest per training object (module docs)."""
    parts = {
        "model": o.model.state_dict(),
        "grads": {n: p.grad for n, p in o.model.named_parameters()},
        "modes": {n: m.training for n, m in o.model.named_modules()},
        "optimizer": o.opt.state_dict(),
        "scheduler": o.sched.state_dict(),
        "scaler": o.scaler.state_dict(),
        "ema": o.ema.state_dict(),
        "rng.torch": torch.get_rng_state(),
        "rng.numpy": list(np.random.get_state()),
        "rng.python": random.getstate(),
        "loader": o.loader.state_dict(),  # commit="explicit": no side effect
        "loader.cursor": [o.loader.cursor.committed, o.loader.cursor.delivered, o.loader.cursor.fetched],
        "callbacks": o.cb.state_dict(),
        "metrics": [o.metrics.path.read_bytes(), o.metrics.run_id],
        "lineage": [o.state.run_id, o.state.parent_checkpoint_id, o.state.recovery_label.value],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # pragma: no cover - CPU CI
        parts["rng.cuda"] = torch.cuda.get_rng_state_all()
    out = {}
    for k, v in parts.items():
        h = xxhash.xxh3_64()
        _h(h, v)
        out[k] = h.hexdigest()
    return out


@pytest.fixture(scope="module")
def saved(data_dir, tmp_path_factory):
    """A mid-window checkpoint (6 microbatches delivered, 4 committed: gradients, uncommitted batches)."""
    tmp = tmp_path_factory.mktemp("aon")
    o = objects(data_dir, tmp, "saved")
    T.train(o, total=6)
    o.cb.n = 17
    rd.save_checkpoint(tmp / "ckpt", o.state, keep_last=None)
    assert (tmp / "ckpt" / STEP).is_dir()
    return tmp / "ckpt"


def forge_state(ckpt: Path, dest: Path, tree) -> Path:
    """A copy of ``ckpt`` whose state.json is ``tree``, whose meta.json is its copy of ``tree["meta"]`` (the
    store refuses a meta.json that differs from the state's) and whose marker is re-hashed as the store does."""
    import shutil

    shutil.copytree(ckpt, dest)
    step = dest / STEP
    files = {"state.json": tree}
    if isinstance(tree, dict):
        meta = tree.get("meta")
        is_meta = isinstance(meta, dict) and meta.get("format") == "resumable_data.checkpoint_meta"
        files["meta.json"] = meta if is_meta else None
    mk = json.loads((step / "COMMITTED").read_text())
    for name, obj in files.items():
        text = json.dumps(obj, sort_keys=True, indent=1) + "\n"
        data = text.replace(json.dumps(DEEP), "[" * 100_000 + "]" * 100_000).encode()
        (step / name).write_bytes(data)
        mk["files"][name] = {"size": len(data), "xxh3_128": xxhash.xxh3_128_hexdigest(data)}
    (step / "COMMITTED").write_bytes((json.dumps(mk, sort_keys=True, indent=1) + "\n").encode())
    return dest


def paths(obj, prefix=()):
    """Every key path into a JSON value (long scalar lists: first, second and last element only)."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(obj, list):
        idx = range(len(obj))
        if len(obj) > 8 and not any(isinstance(v, (dict, list)) for v in obj):
            idx = [0, 1, len(obj) - 1]
        for i in idx:
            yield from paths(obj[i], prefix + (i,))


DEEP = "<10**5 nested arrays>"  # forge_state writes it as [[[...]]] (json.dumps cannot nest that deep)


def deep():
    return DEEP


def wrong_type(v):
    if isinstance(v, bool):
        return "true"
    if isinstance(v, (int, float)):
        return "7"
    if isinstance(v, str):
        return 12345
    if v is None:
        return {"a": 1}
    if isinstance(v, list):
        return "a list"
    return [1, 2]


def out_of_range(v):
    if isinstance(v, bool):
        return 2
    if isinstance(v, int):
        return -1 if v >= 0 else 10**30
    if isinstance(v, float):
        return float("nan") if v == v else 1e308
    if isinstance(v, str):
        return "\x00" + v[::-1] + "\uffff"
    if isinstance(v, list):
        return v + v[:1] if v else [None]
    return None


MUTATIONS = ["wrong_type", "out_of_range", "missing", "extra_key", "huge_string", "nested_deep"]


def mutate(tree, path, how):
    """A mutated deep copy, or None where ``how`` does not apply to ``path``."""
    if not path and how in ("missing", "out_of_range"):
        return None
    t = copy.deepcopy(tree)
    parent = t
    for k in path[:-1]:
        parent = parent[k]
    node = parent[path[-1]] if path else t
    if how == "extra_key":
        if not isinstance(node, dict):
            return None
        node["zz_extra"] = 1
        return t
    if how == "missing":
        del parent[path[-1]]
        return t
    new = {"wrong_type": wrong_type, "out_of_range": out_of_range,
           "huge_string": lambda v: "x" * (1 << 20), "nested_deep": lambda v: deep()}[how](node)
    if not path:
        return new
    parent[path[-1]] = new
    return t


def inert(path, bad) -> bool:
    if tuple(path) in NULLABLE:
        node = bad
        for k in path:
            node = node.get(k) if isinstance(node, dict) else None
        return node is None
    return any(tuple(path[:len(p)]) == p for p in INERT)


@pytest.mark.parametrize("how", MUTATIONS)
def test_every_forged_state_json_is_refused_without_touching_anything(saved, data_dir, tmp_path, how):
    tree = json.loads((saved / STEP / "state.json").read_text())
    o = objects(data_dir, tmp_path, "fresh", saved.parent / "metrics-saved.jsonl", seed=100, run_id="fresh")
    before = digest(o)
    stats = {"cases": 0, "refused": 0, "accepted_inert": 0, "touched": 0, "non_rd": 0}
    problems = []
    for i, path in enumerate(paths(tree)):
        bad = mutate(tree, path, how)
        if bad is None or bad == tree:
            continue
        stats["cases"] += 1
        d = forge_state(saved, tmp_path / f"c{i}", bad)
        try:
            rd.load_checkpoint(d, o.state)
        except rd.ResumableDataError:
            stats["refused"] += 1
            after = digest(o)
            if after != before:
                stats["touched"] += 1
                problems.append(f"{path}: refused but changed {[k for k in before if before[k] != after[k]]}")
        except Exception as e:  # noqa: BLE001
            stats["non_rd"] += 1
            problems.append(f"{path}: raised {type(e).__name__}: {e}"[:300])
        else:
            if not inert(path, bad) and not (how == "missing" and tuple(path) in MISSABLE):
                problems.append(f"{path}: accepted")
            stats["accepted_inert"] += 1
            o = objects(data_dir, tmp_path, f"fresh{i}", saved.parent / "metrics-saved.jsonl", seed=100, run_id="fresh")  # accepted: start fresh again
            before = digest(o)
        import shutil

        shutil.rmtree(d)
    if os.environ.get("RD_AON_STATS"):  # the figures of the report: RD_AON_STATS=<dir>
        Path(os.environ["RD_AON_STATS"], f"{how}.json").write_text(json.dumps(stats))
    assert not problems, "\n".join(problems[:40])
    assert stats["cases"] > 20 and stats["touched"] == 0 and stats["non_rd"] == 0
    for k in ("cases", "refused", "accepted_inert"):
        count(f"forged_checkpoint_{k}", stats[k])


def _refused(o, ckpt, **kw):
    before = digest(o)
    with pytest.raises(rd.ResumableDataError) as e:
        rd.load_checkpoint(ckpt, o.state, **kw)
    after = digest(o)
    assert after == before, [k for k in before if before[k] != after[k]]
    return e.value


@pytest.mark.parametrize("change,error,match", [
    ({"loader_seed": 8}, rd.CompatibilityError, "seed"),
    ({"batch": 2}, rd.CompatibilityError, "batch"),
    ({"accumulation": 2}, rd.CompatibilityError, "accumulation_steps"),
    ({"hidden": 16}, rd.CompatibilityError, "shape"),
])
def test_honest_refusals_touch_nothing(saved, data_dir, tmp_path, change, error, match):
    o = objects(data_dir, tmp_path, "fresh", saved.parent / "metrics-saved.jsonl", seed=100, run_id="fresh", **change)
    err = _refused(o, saved)
    assert isinstance(err, error) and match in str(err)


def _small(data, run_id="small", value=None):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    if value is not None:
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(value)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    opt.zero_grad()
    loader = rd.DataLoader(data, batch_size=4, shuffle=True, seed=3)
    # the tests iterate without a forward: every delivered batch counts (no watched batch in hand)
    return rd.TrainingState(model=model, optimizer=opt, loader=loader, run_id=run_id, watch_model=False)


def _small_digest(s):
    h = xxhash.xxh3_64()
    _h(h, [s.model.state_dict(), s.optimizer.state_dict(), torch.get_rng_state(), s.loader.cursor.delivered,
           s.loader.cursor.committed, s.run_id])
    return h.hexdigest()


def test_an_unpinned_loader_is_refused_before_anything_and_allow_unpinned_is_the_fix(tmp_path):
    data = [{"x": float(i)} for i in range(40)]
    s = _small(data, value=2.0)
    for _ in zip(range(3), s.loader):
        pass
    rd.save_checkpoint(tmp_path, s, step=3)
    fresh = _small(data, value=0.0)
    before = _small_digest(fresh)
    with pytest.raises(rd.ResumeError, match="allow_unpinned=True"):
        rd.load_checkpoint(tmp_path, fresh)
    assert _small_digest(fresh) == before  # the model and optimizer were not restored first
    with pytest.raises(rd.ResumeError, match="allow_unpinned=True"):
        fresh.load_state_dict(rd.checkpoint.read_checkpoint(tmp_path).tree)
    assert _small_digest(fresh) == before
    rd.load_checkpoint(tmp_path, fresh, allow_unpinned=True)  # the fix the message names works
    assert fresh.loader.cursor.delivered == 3
    assert all(float(p.detach().flatten()[0]) != 0.0 for p in fresh.model.parameters())
    fresh2 = _small(data)
    fresh2.load_state_dict(rd.checkpoint.read_checkpoint(tmp_path).tree, allow_unpinned=True)
    assert fresh2.loader.cursor.delivered == 3


def test_check_resume_passes_allow_unpinned_to_load_checkpoint():
    data = [{"x": float(i)} for i in range(64)]

    def make_loader(**kw):
        return rd.DataLoader(data, batch_size=4, shuffle=True, seed=1, **kw)

    def make_state():
        torch.manual_seed(0)
        model = torch.nn.Linear(1, 1)
        return {"model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.01)}

    def train_step(state, batch):
        loss = state.model(batch["x"].float()[:, None]).pow(2).mean()
        loss.backward()
        state.optimizer.step()
        state.optimizer.zero_grad(set_to_none=True)

    report = rd.testing.check_resume(make_loader, steps=8, interrupts=[3], num_workers=(0,), make_state=make_state,
                                     train_step=train_step, allow_unpinned=True)
    assert report.ok, report


class Exploding(Counter):
    def load_state_dict(self, s):
        raise RuntimeError("callback refuses")


def test_an_object_failing_midway_is_rolled_back(saved, data_dir, tmp_path):
    """The callback raises after model, optimizer, scheduler, scaler and EMA were loaded."""
    o = objects(data_dir, tmp_path, "fresh", saved.parent / "metrics-saved.jsonl", seed=100, run_id="fresh")
    o.state.callbacks["counter"] = bad = Exploding()
    o.cb = bad
    err = _refused(o, saved)
    assert isinstance(err, rd.CheckpointError) and "callback refuses" in str(err) and "rolled back" in str(err)


def test_an_optimizer_failing_midway_is_rolled_back(saved, data_dir, tmp_path, monkeypatch):
    o = objects(data_dir, tmp_path, "fresh", saved.parent / "metrics-saved.jsonl", seed=100, run_id="fresh")

    def boom(*a, **k):
        raise ValueError("optimizer refuses")

    monkeypatch.setattr(o.opt, "load_state_dict", boom)
    err = _refused(o, saved)
    assert isinstance(err, rd.CheckpointError) and "optimizer refuses" in str(err)


def test_a_failing_verification_is_rolled_back(saved, data_dir, tmp_path, monkeypatch):
    """A stateful object whose load_state_dict is not exact: the oracles catch it after applying."""
    o = objects(data_dir, tmp_path, "fresh", saved.parent / "metrics-saved.jsonl", seed=100, run_id="fresh")
    real = o.scaler.load_state_dict
    monkeypatch.setattr(o.scaler, "load_state_dict", lambda s: real({**s, "scale": s["scale"] * 2}))
    window = o.state._window  # the window-start snapshot, replaced after the apply phase (TrainingHooks)
    err = _refused(o, saved)
    assert isinstance(err, rd.CheckpointError) and "oracles" in str(err)
    assert o.state._window is window, "the window-start snapshot is rolled back too"


@pytest.mark.parametrize("module", ["restore", "restore_check", "undo"])
def test_the_restore_reads_no_private_attribute_of_the_training_state(module):
    """The restore path (restore.py, its validation restore_check.py and its undos undo.py) reads the
    TrainingState through its public attributes and the TrainingHooks it is handed: no ``ts._x``, no
    ``getattr``/``setattr`` by name."""
    import ast
    import importlib

    mod = importlib.import_module(f"resumable_data.checkpoint.{module}")
    tree = ast.parse(Path(mod.__file__).read_text())
    private = [
        (n.lineno, n.attr)
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "ts"
        and n.attr.startswith("_")
    ]
    by_name = [
        (n.lineno, n.func.id)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "setattr")
        and n.args and isinstance(n.args[0], ast.Name) and n.args[0].id == "ts"
    ]
    uses_ts = any(isinstance(n, ast.Name) and n.id == "ts" for n in ast.walk(tree))
    assert uses_ts, f"{module}.py no longer reads a TrainingState named ts: this test checks nothing there"
    assert not private and not by_name, f"{module}.py reads TrainingState internals: {private + by_name}"


def test_the_unmodified_checkpoint_loads(saved, data_dir, tmp_path):
    o = objects(data_dir, tmp_path, "fresh", saved.parent / "metrics-saved.jsonl", seed=100, run_id="fresh")
    info = rd.load_checkpoint(saved, o.state)
    assert info.step == 6 and o.loader.cursor.delivered == 6 and o.cb.n == 17
