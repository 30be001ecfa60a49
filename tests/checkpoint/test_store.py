"""Checkpoint files: layout, integrity, retention, never unpickling, and crash safety under
SIGKILL at random moments of save_checkpoint (forked writers and a spawned script)."""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import os
import pickle
import random
import signal
import subprocess
import sys
import time
import warnings
from collections import Counter, OrderedDict

import pytest
import torch

import resumable_data as rd
from resumable_data.checkpoint import cleanup_incomplete, list_checkpoints, read_checkpoint


def _state(value: float = 0.0):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(value)
    return rd.TrainingState(model=model, optimizer=opt, run_id="crash")


def _value(path) -> float:
    raw = read_checkpoint(path)
    vals = {float(t.flatten()[0]) for k, t in raw.tree["model"].items()}
    assert len(vals) == 1
    return vals.pop()


def test_layout_marker_latest_and_retention(tmp_path):
    s = _state(1.0)
    for step in (1, 2, 3, 4):
        path = rd.save_checkpoint(tmp_path, s, step=step, keep_last=2)
    assert path.name == "step-000000000004"
    assert sorted(p.name for p in list_checkpoints(tmp_path)) == ["step-000000000003", "step-000000000004"]
    assert (tmp_path / "latest").read_text().strip() == "step-000000000004"
    assert sorted(os.listdir(path)) == ["COMMITTED", "inventory.json", "meta.json", "state.json", "tensors.safetensors"]
    marker = json.loads((path / "COMMITTED").read_text())
    assert marker["format"] == "resumable_data.checkpoint" and marker["schema_version"] == 2 and marker["step"] == 4
    meta = json.loads((path / "meta.json").read_text())
    assert meta["format"] == "resumable_data.checkpoint_meta" and meta["run_id"] == "crash"
    assert rd.save_checkpoint(tmp_path, s, step=4, keep_last=None) == path  # re-saving a step replaces it


def test_loading_never_unpickles(tmp_path, monkeypatch):
    s = _state(2.0)
    rd.save_checkpoint(tmp_path, s, step=1)

    def boom(*a, **k):
        raise AssertionError("unpickling during load")

    monkeypatch.setattr(pickle, "load", boom)
    monkeypatch.setattr(pickle, "loads", boom)
    monkeypatch.setattr(torch, "load", boom)
    t = _state(0.0)
    rd.load_checkpoint(tmp_path, t)
    assert all(float(p.detach().flatten()[0]) == 2.0 for p in t.model.parameters())


def test_unserializable_state_is_refused_at_save(tmp_path):
    class Callback:
        def state_dict(self):
            return {"fn": lambda: 1}

        def load_state_dict(self, s):
            pass

    s = rd.TrainingState(model=torch.nn.Linear(2, 2), callbacks={"cb": Callback()})
    with pytest.raises(rd.CheckpointError, match=r"callbacks.cb.fn.*never pickles"):
        rd.save_checkpoint(tmp_path, s, step=1)
    assert not list_checkpoints(tmp_path)


def test_corruption_and_incomplete_directories(tmp_path):
    s = _state(3.0)
    good = rd.save_checkpoint(tmp_path, s, step=1)
    bad = rd.save_checkpoint(tmp_path, s, step=2)
    data = bytearray((bad / "tensors.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (bad / "tensors.safetensors").write_bytes(bytes(data))
    with pytest.raises(rd.CheckpointError, match="content hash differs"):
        rd.load_checkpoint(tmp_path, _state())
    import shutil

    shutil.rmtree(bad)
    # an interrupted save: a temp dir and a step dir without marker are ignored, then cleaned up
    (tmp_path / ".tmp-step-000000000009-1-ab").mkdir()
    (tmp_path / "step-000000000009").mkdir()
    (tmp_path / "latest").write_text("step-000000000009\n")
    with pytest.warns(RuntimeWarning, match="not a complete checkpoint"):
        info = rd.load_checkpoint(tmp_path, _state())
    assert info.path == good
    removed = {p.name for p in cleanup_incomplete(tmp_path)}
    assert removed == {".tmp-step-000000000009-1-ab", "step-000000000009"}
    with pytest.raises(rd.CheckpointError, match="a complete checkpoint"):
        rd.load_checkpoint(tmp_path / "step-000000000003", _state())


def _writer(directory: str, ready) -> None:  # runs in a forked child
    s = _state(0.0)
    # a restarted run saves later steps than the checkpoints it finds (a lower step is refused)
    step = max(int(p.name.split("-")[1]) for p in list_checkpoints(directory)) + int(time.time() * 1000) % 1000
    ready.send(True)
    while True:
        step += 1
        with torch.no_grad():
            for p in s.model.parameters():
                p.fill_(float(step))
        rd.save_checkpoint(directory, s, step=step, keep_last=2)


def test_sigkill_during_save_never_breaks_latest(tmp_path):
    ctx = mp.get_context("fork")
    rd.save_checkpoint(tmp_path, _state(0.0), step=0)
    rng = random.Random(1234)
    interrupted = 0
    for _ in range(20):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_writer, args=(str(tmp_path), child))
        p.start()
        assert parent.recv()
        time.sleep(rng.uniform(0.0, 0.04))
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        assert p.exitcode == -signal.SIGKILL
        interrupted += any(q.name.startswith((".tmp-", ".trash-", ".latest.tmp")) for q in tmp_path.iterdir())
        latest = (tmp_path / "latest").read_text().strip()
        t = _state(-1.0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            info = rd.load_checkpoint(tmp_path, t)
        # latest is always complete; a save killed after its files were complete (before its rename or
        # `latest`) is a newer step, loaded without a warning: what resume_or_start loads (attack43)
        assert not caught
        assert info.path.name == latest or info.step > int(latest.split("-")[1])
        assert rd.resume_or_start(tmp_path, _state(-1.0)) == info.step
        assert {float(x.detach().flatten()[0]) for x in t.model.parameters()} == {
            float(info.step) if info.step else 0.0
        }
    assert list_checkpoints(tmp_path)
    assert interrupted >= 3, "the kills should land inside save_checkpoint"


WRITER_SCRIPT = """
import sys, torch, resumable_data as rd
m = torch.nn.Linear(256, 256); s = rd.TrainingState(model=m, optimizer=torch.optim.Adam(m.parameters()))
print("ready", flush=True)
step = 0
while True:
    step += 1
    with torch.no_grad():
        m.weight.fill_(step)
    rd.save_checkpoint(sys.argv[1], s, step=step, keep_last=3)
"""


def test_sigkill_of_a_spawned_writer_process(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", WRITER_SCRIPT, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        # the kill came a fixed 0.3 s after "ready": a loaded machine may not have finished the first save
        # by then (0.1 s at 2x load here), and there was no checkpoint to read. Wait for the first one,
        # then kill 0.3 s into the saves that follow, as before
        deadline = time.monotonic() + 120
        while not (tmp_path / "latest").exists():
            assert p.poll() is None, "the writer ended before its first checkpoint"
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.005)
        time.sleep(0.3)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    latest = (tmp_path / "latest").read_text().strip()
    raw = read_checkpoint(tmp_path)  # a save killed after its files were complete: that newer step
    assert raw.path.name == latest or raw.step > int(latest.split("-")[1])
    assert float(raw.tree["model"]["weight"][0, 0]) == raw.step


def test_a_patch_version_difference_warns_at_load():
    s = _state(1.0)
    tree = s.file_state_dict()
    ver = tree["meta"]["software"]["torch"].split("+")[0].split(".")
    tree["meta"]["software"]["torch"] = f"{ver[0]}.{ver[1]}.{int(ver[2]) + 1}"
    with pytest.warns(RuntimeWarning, match=r"software\.torch"):
        report = _state(0.0).load_state_dict(tree)
    assert [d.path for d in report.warnings] == ["software.torch"]


def test_save_checkpoint_state_dict_is_the_file_layout(tmp_path):
    s = _state(1.0)
    rd.save_checkpoint(tmp_path, s, step=1)
    raw = read_checkpoint(tmp_path)
    assert "layout" not in raw.tree and set(raw.tree["optimizer"]) == {"state", "param_groups"}
    assert s.state_dict()["layout"] == "dcp"


def _batches(loader, n):
    return [b["tokens"].tolist() if isinstance(b, dict) else b.tolist() for b in itertools.islice(loader, n)]


def test_the_default_step_is_the_held_loaders_delivered_cursor(tmp_path, data_dir):
    """``step`` defaults to ``state.loader``'s delivered steps for every object that holds an rd
    loader (rd.TrainingState, rd.distributed.LoaderStateful, a user's own Stateful with a
    ``loader``); the saved loader resumes with every remaining batch, in order."""

    def make():
        return rd.DataLoader(rd.ArrowShards(data_dir), batch_size=4, shuffle=True, seed=3)

    class AppState:  # a user's own Stateful holding the loader
        def __init__(self, loader):
            self.loader = loader

        def state_dict(self):
            return {"loader": self.loader.state_dict()}

        def load_state_dict(self, sd):
            self.loader.load_state_dict(sd["loader"])

    full = _batches(make(), 10**6)
    for i, wrap in enumerate(
        (
            lambda lo: rd.TrainingState(loader=lo),
            lambda lo: rd.distributed.LoaderStateful(lo),
            AppState,
        )
    ):
        loader = make()
        k = 3 + 2 * i
        assert _batches(loader, k) == full[:k]
        path = rd.save_checkpoint(tmp_path / str(i), wrap(loader))
        assert path.name == f"step-{k:012d}"
        fresh = make()
        rd.load_checkpoint(tmp_path / str(i), wrap(fresh))
        assert _batches(fresh, 10**6) == full[k:]


def test_no_default_step_without_an_rd_loader_and_a_state_dict_is_required(tmp_path):
    class Holder:
        def __init__(self, loader):
            self.loader = loader

        def state_dict(self):
            return {}

        def load_state_dict(self, sd):
            pass

    for state in (
        rd.TrainingState(model=torch.nn.Linear(2, 2)),
        Holder(None),
        Holder([1, 2]),
        Holder(torch.nn.Linear(2, 2)),
    ):
        with pytest.raises(rd.ConfigError) as e:
            rd.save_checkpoint(tmp_path, state)
        msg = str(e.value)
        assert msg.startswith("step=None") and "state.loader" in msg and type(state).__name__ in msg, msg
        assert "fix: pass step=" in msg
        assert rd.save_checkpoint(tmp_path, state, step=7).name == "step-000000000007"  # the fix works

    for state in ({"x": 1}, None, 3):
        with pytest.raises(rd.ConfigError) as e:
            rd.save_checkpoint(tmp_path / "other", state, step=1)
        msg = str(e.value)
        assert msg.startswith(f"state={type(state).__name__!r}") and "state_dict()" in msg and "fix:" in msg, msg
    assert not list_checkpoints(tmp_path / "other")

    class SaveOnly:  # state_dict() alone is enough to save (rd.testing saves a functional step's tree so)
        def state_dict(self):
            return {"x": torch.ones(2), "n": 1}

    path = rd.save_checkpoint(tmp_path / "other", SaveOnly(), step=1)
    assert read_checkpoint(path).tree["n"] == 1


def test_a_save_interrupted_by_anything_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    """Not only a full disk: an interrupt (Ctrl-C) or a writer's own bug while the tensors are written
    left the private temporary directory behind until the next save. Any exception removes it."""
    from resumable_data.checkpoint import save

    root = tmp_path / "ckpt"
    model = torch.nn.Linear(2, 2)
    rd.save_checkpoint(root, rd.TrainingState(model=model), step=1)
    before = sorted(p.name for p in root.iterdir())

    def interrupted(path, tensors):
        path.write_bytes(b"half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(save, "_write_tensors", interrupted)
    with pytest.raises(KeyboardInterrupt):
        rd.save_checkpoint(root, rd.TrainingState(model=model), step=2)
    assert sorted(p.name for p in root.iterdir()) == before


class _Holder:
    """A callback whose state is whatever it was given (restored by assignment, as loops do)."""

    def __init__(self, s):
        self.s = s

    def state_dict(self):
        return self.s

    def load_state_dict(self, sd):
        self.s = sd


def test_callback_state_with_numpy_values_and_ordered_dicts_resumes_exactly(tmp_path):
    import numpy as np

    s = {
        "best": np.float32(0.1),
        "step": np.int64(7),
        "hist": np.arange(3.0),
        "order": {"b": 1, "a": 2},
        "by_id": {10: "x", 2: "y"},
    }
    rd.save_checkpoint(tmp_path, rd.TrainingState(model=torch.nn.Linear(2, 2), callbacks={"cb": _Holder(s)}), step=1)
    ts = rd.TrainingState(model=torch.nn.Linear(2, 2), callbacks={"cb": _Holder({})})
    rd.load_checkpoint(tmp_path, ts)  # was refused: the callbacks oracle saw np.float32 saved and a float loaded
    got = ts.callbacks["cb"].s
    assert type(got["best"]) is np.float32 and got["best"].tobytes() == s["best"].tobytes()
    assert type(got["step"]) is np.int64 and int(got["step"]) == 7
    assert type(got["hist"]) is np.ndarray and got["hist"].tobytes() == s["hist"].tobytes()
    assert list(got) == list(s) and list(got["order"]) == ["b", "a"] and list(got["by_id"]) == [10, 2]


class _Counted(torch.nn.Module):
    """A module with ``get_extra_state`` / ``set_extra_state`` (non-tensor state in its state_dict)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.calls = 0

    def get_extra_state(self):
        return {"calls": self.calls, "shape": (2, 2)}

    def set_extra_state(self, s):
        self.calls = s["calls"]


def test_a_model_with_extra_state_saves_and_resumes(tmp_path):
    m = _Counted()
    m.calls = 5
    opt = torch.optim.Adam(m.parameters())
    rd.save_checkpoint(tmp_path, rd.TrainingState(model=m, optimizer=opt), step=1)  # was an AttributeError
    fresh = _Counted()
    rd.load_checkpoint(tmp_path, rd.TrainingState(model=fresh, optimizer=torch.optim.Adam(fresh.parameters())))
    assert fresh.calls == 5
    assert torch.equal(fresh.lin.weight, m.lin.weight)


def test_fused_adam_on_channels_last_parameters_resumes_bit_exactly(tmp_path):
    def build():
        torch.manual_seed(0)
        m = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)
        return m, torch.optim.Adam(m.parameters(), lr=1e-2, fused=True)

    def step(m, opt, i):
        x = torch.randn(2, 3, 5, 5, generator=torch.Generator().manual_seed(i)).to(memory_format=torch.channels_last)
        opt.zero_grad()
        (m(x) ** 2).mean().backward()
        opt.step()

    ref, ref_opt = build()
    for i in range(4):
        step(ref, ref_opt, i)
    m, opt = build()
    for i in range(2):
        step(m, opt, i)
    opt.zero_grad()
    rd.save_checkpoint(tmp_path, rd.TrainingState(model=m, optimizer=opt), step=2)
    m2, opt2 = build()
    rd.load_checkpoint(tmp_path, rd.TrainingState(model=m2, optimizer=opt2))
    assert opt2.state[m2.weight]["exp_avg"].stride() == m2.weight.stride()  # was contiguous: fused Adam mixed elements
    for i in range(2, 4):
        step(m2, opt2, i)
    assert _bits(m2.weight) == _bits(ref.weight) and _bits(m2.bias) == _bits(ref.bias)


def _bits(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8).tolist()


def test_sparse_gradients_inside_a_window_are_refused_before_anything_is_written(tmp_path):
    m = torch.nn.Embedding(4, 2, sparse=True)
    m(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(rd.CheckpointError, match=r"gradients.weight=.*sparse.*zero_grad\(set_to_none=True\)"):
        rd.save_checkpoint(tmp_path / "c", rd.TrainingState(model=m), step=1)  # was a RuntimeError from the oracles
    assert not (tmp_path / "c").exists()


def test_a_checkpoint_of_schema_version_1_still_loads(tmp_path, monkeypatch):
    """Schema version 2 added the codec's NumPy values, memory-ordered tensors and unsorted keys; a
    checkpoint an earlier rd wrote (version 1 marker and tensor tag) loads exactly as before, and a
    version this rd does not know is refused by its version."""
    from resumable_data.checkpoint import save, store

    model = torch.nn.Linear(3, 2)
    monkeypatch.setattr(save, "CHECKPOINT_SCHEMA_VERSION", 1)
    monkeypatch.setattr(save, "TENSORS_METADATA", {"format": store.CHECKPOINT_FORMAT, "schema_version": "1"})
    path = rd.save_checkpoint(tmp_path / "v1", rd.TrainingState(model=model), step=3)
    monkeypatch.undo()
    assert json.loads((path / "COMMITTED").read_text())["schema_version"] == 1
    fresh = torch.nn.Linear(3, 2)
    rd.load_checkpoint(path, rd.TrainingState(model=fresh))
    assert torch.equal(fresh.weight, model.weight) and torch.equal(fresh.bias, model.bias)

    marker = json.loads((path / "COMMITTED").read_text())
    marker["schema_version"] = 3
    (path / "COMMITTED").write_text(json.dumps(marker))
    with pytest.raises(rd.CheckpointError, match=r"schema_version.*3.*resumable_data version that wrote it"):
        rd.load_checkpoint(path, rd.TrainingState(model=torch.nn.Linear(3, 2)))


class _ShapeSGD(torch.optim.SGD):
    """SGD whose per-parameter state also holds the parameter's shape (a torch.Size) and a tuple."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = super().step(closure)
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    s = self.state[p]
                    s["shape"] = p.shape
                    s["seen"] = (s.get("seen", (0,))[0] + 1,)
        return loss


def _kept_state():
    return {
        "size": torch.Size([2, 3]),
        "od": OrderedDict([("b", 1), ("a", torch.ones(2))]),
        "counts": Counter({"x": 2}),
        "w": torch.nn.Parameter(torch.ones(3)),
        "frozen": torch.nn.Parameter(torch.zeros(2), requires_grad=False),
        "pair": (1, [2, (3,)]),
        "blob": b"\x00\x01",
        "z": 1 + 2j,
        "big": -(2**100),
        "floats": [float("nan"), float("-inf"), -0.0],
        "nested": [{"inner": OrderedDict(k=torch.Size([1]), by_id=OrderedDict([(10, "x"), (2, "y")]))}],
    }


def _run(extra_steps=0):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = _ShapeSGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[2, 2, 4], gamma=0.5)
    for i in range(2 + extra_steps):
        opt.zero_grad()
        model(torch.full((1, 3), float(i))).sum().backward()
        opt.step()
        sched.step()
    return model, opt, sched


def test_callback_optimizer_and_scheduler_state_of_every_kept_type_resumes_as_saved(tmp_path):
    """Before: the callback's torch.Size came back a tuple, its OrderedDicts and Counter dicts, its
    Parameters plain tensors (the learnable one no longer got gradients: restored by assignment,
    training silently stopped updating it); the optimizer's per-parameter torch.Size a tuple; and
    MultiStepLR's milestones (a Counter) a dict, so scheduler.step(epoch) raised AttributeError
    ('dict' object has no attribute 'elements') after the resume. bytes and complex were refused."""
    from tests.checkpoint.test_codec import _same

    model, opt, sched = _run()
    s = _kept_state()
    state = rd.TrainingState(model=model, optimizer=opt, scheduler=sched, callbacks={"cb": _Holder(s)})
    rd.save_checkpoint(tmp_path, state, step=2)
    model2, opt2, sched2 = _run()
    with torch.no_grad():
        for p in model2.parameters():
            p.zero_()
    ts = rd.TrainingState(model=model2, optimizer=opt2, scheduler=sched2, callbacks={"cb": _Holder({})})
    rd.load_checkpoint(tmp_path, ts)
    got = ts.callbacks["cb"].s
    _same(s, got)
    assert type(got["od"]) is OrderedDict and type(got["nested"][0]["inner"]["k"]) is torch.Size
    (got["w"] * 3).sum().backward()
    assert got["w"].grad is not None and got["w"].grad.tolist() == [3.0, 3.0, 3.0]
    for p, q in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p, q)
        assert type(opt2.state[q]["shape"]) is torch.Size and opt2.state[q]["shape"] == q.shape
        assert type(opt2.state[q]["seen"]) is tuple and opt2.state[q]["seen"] == (2,)
    assert type(sched2.milestones) is Counter and sched2.milestones == sched.milestones
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # step(epoch) is deprecated, and MultiStepLR's closed form needs the Counter
        sched.step(4)
        sched2.step(4)
    assert [g["lr"] for g in opt2.param_groups] == [g["lr"] for g in opt.param_groups] == [0.1 * 0.5**3]


def _folder(root) -> dict[str, str]:
    """Every file, folder and link under ``root`` with its content's digest."""
    import hashlib

    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = "link:" + os.readlink(p)
            elif os.path.isdir(p):
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


@pytest.mark.parametrize(
    "name", ["namedtuple", "defaultdict", "set", "str subclass", "dict subclass", "str Enum keys",
             "int past 640 digits", "int past 4300 digits"]
)
def test_a_refused_save_leaves_the_checkpoint_folder_byte_for_byte_unchanged(tmp_path, name):
    """A value the checkpoint would give back changed is refused before anything is written: the
    folder (a re-save of its step, a new step) and a folder never saved into stay as they were.
    An int past Python's 4300-digit limit was a ValueError from the oracles' repr."""
    from tests.checkpoint.test_codec import REFUSED

    value = 10**5000 if name == "int past 4300 digits" else REFUSED[name][0]
    root = tmp_path / "ckpt"

    def state(x):
        return rd.TrainingState(model=torch.nn.Linear(2, 2), callbacks={"cb": _Holder({"x": x})})

    rd.save_checkpoint(root, state(1), step=1)
    before = _folder(root)
    assert len(before) >= 7  # latest, .lock, the step folder and its 5 files
    for where, step in ((root, 1), (root, 2), (tmp_path / "never", 1)):
        with pytest.raises(rd.CheckpointError, match=r"callbacks\.cb\.x.*fix: "):
            rd.save_checkpoint(where, state(value), step=step)
    assert _folder(root) == before
    assert not (tmp_path / "never").exists()


def test_a_save_below_the_newest_step_is_refused_and_the_rollback_fix_works(tmp_path):
    """Saving step 2 after step 3 made step 2 `latest` (what rd.load_checkpoint read) while
    rd.resume_or_start resumed step 3, the abandoned branch; retention by step would then delete the
    new saves first. The save is refused, the folder unchanged; removing the later step (the fix)
    makes every reader agree on the new save."""
    import shutil

    rd.save_checkpoint(tmp_path, _state(3.0), step=3)
    rd.save_checkpoint(tmp_path, _state(3.5), step=3)  # a re-save of the newest step is fine
    before = _folder(tmp_path)
    with pytest.raises(rd.CheckpointError, match=r"^step=2: expected at least 3, the newest checkpoint's step") as e:
        rd.save_checkpoint(tmp_path, _state(2.0), step=2)
    assert "remove the later ones the run abandoned first (step-000000000003: e.g. shutil.rmtree" in str(e.value)
    assert _folder(tmp_path) == before
    shutil.rmtree(tmp_path / "step-000000000003")  # the fix, followed
    rd.save_checkpoint(tmp_path, _state(2.0), step=2)
    loaded, resumed = _state(), _state()
    assert rd.load_checkpoint(tmp_path, loaded).step == 2 == rd.resume_or_start(tmp_path, resumed)
    assert all(float(p.flatten()[0]) == 2.0 for t in (loaded, resumed) for p in t.model.parameters())


def test_a_save_killed_before_its_rename_loads_by_load_checkpoint_as_by_resume_or_start(tmp_path):
    # attack43: latest named step 10, the killed save's complete copy of step 12 was what
    # resume_or_start resumed (and the next save kept, refusing step 11), load_checkpoint loaded 10
    rd.save_checkpoint(tmp_path, _state(10.0), step=10)
    other = rd.save_checkpoint(tmp_path / "x", _state(12.0), step=12)
    os.rename(other, tmp_path / ".tmp-step-000000000012-4242-0a0b0c0d")  # complete, never renamed
    t, u = _state(-1.0), _state(-1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as resume_or_start: an ordinary crash's leftover, no warning
        info = rd.load_checkpoint(tmp_path, t)
    value = {float(x.detach().flatten()[0]) for x in t.model.parameters()}
    assert (info.step, value) == (rd.resume_or_start(tmp_path, u), {float(x.detach().flatten()[0]) for x in u.model.parameters()})
    assert (info.step, value) == (12, {12.0})


def test_a_step_directory_loaded_with_another_step_is_refused(tmp_path):
    # attack43: rd.load_checkpoint(dir/step-1, state, step=5) loaded step 1 unsaid
    rd.save_checkpoint(tmp_path, _state(1.0), step=1)
    rd.save_checkpoint(tmp_path, _state(5.0), step=5)
    with pytest.raises(rd.CheckpointError, match=r"^step=5: expected None or the step of the checkpoint directory"):
        rd.load_checkpoint(tmp_path / "step-000000000001", _state(-1.0), step=5)
    t = _state(-1.0)
    assert rd.load_checkpoint(tmp_path, t, step=5).step == 5  # the fix, followed
    assert rd.load_checkpoint(tmp_path / "step-000000000001", _state(-1.0), step=1).step == 1


def test_a_save_never_deletes_a_damaged_newer_checkpoint(tmp_path):
    # attack43: with step-10 once complete and now damaged (what resume_or_start refuses: "restore it
    # from a copy"), a save at step 6 was accepted and its cleanup deleted step-10
    rd.save_checkpoint(tmp_path, _state(5.0), step=5)
    rd.save_checkpoint(tmp_path, _state(10.0), step=10)
    with open(tmp_path / "step-000000000010" / "state.json", "a") as f:
        f.write(" ")
    before = sorted(os.listdir(tmp_path / "step-000000000010"))
    for step in (6, 10, 11):
        with pytest.raises(rd.CheckpointError, match=r"expected no damaged checkpoint newer than the complete ones"):
            rd.save_checkpoint(tmp_path, _state(6.0), step=step)
    assert sorted(os.listdir(tmp_path / "step-000000000010")) == before
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "latest", "step-000000000005", "step-000000000010"]
    os.rename(tmp_path / "step-000000000010", tmp_path.parent / "moved-step-10")  # the fix, followed
    assert rd.save_checkpoint(tmp_path, _state(6.0), step=6).name == "step-000000000006"
