"""Hostile checkpoint folders and crashes at every boundary of a save.

* Special files (FIFO, symlink to /dev/zero, directory, socket) in place of each checkpoint file
  and of ``latest`` are refused without being opened; every such load runs under a deadline so a
  regression fails instead of hanging. Oversized files are refused naming the file, its size and
  the limit. A bad ``latest`` falls back to the newest complete step.
* Steps: ``step >= 10**12`` is a ConfigError before anything is written.
* One writer: a second concurrent writer gets a CheckpointError naming the folder.
* Crashes: every syscall boundary of a save (mkdir, tensors write, each fsync, each replace,
  renames, deletes) is made to raise at its k-th call, for a new step and for a re-save of an
  existing one; afterwards every earlier checkpoint loads and equals what was saved, and the next
  save succeeds without deleting a complete copy. A few real SIGKILLs at chosen boundaries too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import torch

import resumable_data as rd
from resumable_data.checkpoint import list_checkpoints, read_checkpoint
from resumable_data.checkpoint import save as save_mod
from resumable_data.checkpoint import store as store_mod
from tests.reliability._counts import count

FILES = ["COMMITTED", "state.json", "meta.json", "inventory.json", "tensors.safetensors"]
DEADLINE = 60.0  # seconds; a FIFO opened for reading would block forever


def _state(value: float = 0.0):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(value)
    return rd.TrainingState(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), run_id="hostile")


def _value(t) -> float:
    vals = {float(p.detach().flatten()[0]) for p in t.model.parameters()}
    assert len(vals) == 1
    return vals.pop()


def within_deadline(fn, *a, **k):
    """Run ``fn`` in a daemon thread; fail (instead of hanging) if it has not returned in DEADLINE s."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn(*a, **k)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(DEADLINE)
    assert not th.is_alive(), f"{getattr(fn, '__name__', fn)} hung (a special file was opened)"
    return out


def _two(tmp_path) -> Path:
    root = tmp_path / "ckpt"
    rd.save_checkpoint(root, _state(1.0), step=1)
    rd.save_checkpoint(root, _state(2.0), step=2)
    return root


def _special(path: Path, kind: str, short: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "socket":  # AF_UNIX paths are short: bind in a short dir, then move the socket in place
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(short / "s"))
        s.close()
        os.rename(short / "s", path)


KINDS = ["fifo", "dev-zero", "directory", "socket"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", FILES)
def test_special_checkpoint_files_are_refused_unopened(tmp_path, name, kind):
    root = _two(tmp_path)
    short = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        _special(root / "step-000000000002" / name, kind, short)
    finally:
        shutil.rmtree(short, ignore_errors=True)
    out = within_deadline(rd.load_checkpoint, root / "step-000000000002", _state())
    assert isinstance(out.get("error"), rd.CheckpointError), out
    t = _state(-1.0)
    with pytest.warns(RuntimeWarning, match="not a complete checkpoint"):
        out = within_deadline(rd.load_checkpoint, root, t)  # the parent falls back to step 1
    assert "error" not in out, out
    assert out["value"].step == 1 and _value(t) == 1.0
    out = within_deadline(read_checkpoint, root, 2)
    assert isinstance(out.get("error"), rd.CheckpointError)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "non-utf8", "garbage", "missing-step", "huge"])
def test_a_bad_latest_falls_back_to_the_newest_complete_step(tmp_path, kind):
    root = _two(tmp_path)
    latest = root / "latest"
    if kind in KINDS:
        _special(latest, kind, tmp_path)
    elif kind == "non-utf8":
        latest.write_bytes(b"\xff\xfe\x00step-\x80\n")
    elif kind == "garbage":
        latest.write_text("../../etc/passwd\n")
    elif kind == "missing-step":
        latest.write_text("step-000000000077\n")
    elif kind == "huge":
        with open(latest, "wb") as f:
            f.truncate(10 << 30)  # sparse: 10 GiB that must not be read
    t = _state(-1.0)
    with pytest.warns(RuntimeWarning, match="not a complete checkpoint"):
        out = within_deadline(rd.load_checkpoint, root, t)
    assert "error" not in out, out
    assert out["value"].step == 2 and _value(t) == 2.0


@pytest.mark.parametrize("name", ["COMMITTED", "state.json"])
def test_oversized_files_are_refused_naming_size_and_limit(tmp_path, name):
    from resumable_data.checkpoint.files import LIMITS, read_regular

    root = _two(tmp_path)
    p = root / "step-000000000002" / name
    with open(p, "r+b") as f:
        f.truncate(LIMITS[name] + 1)  # sparse
    with pytest.raises(rd.CheckpointError, match=rf"{name} \({LIMITS[name] + 1} bytes\).*at most {LIMITS[name]} bytes"):
        read_regular(p)
    out = within_deadline(rd.load_checkpoint, root / "step-000000000002", _state())
    assert isinstance(out.get("error"), rd.CheckpointError)


def test_inspect_refuses_a_fifo_marker_without_hanging(tmp_path):
    root = _two(tmp_path)
    _special(root / "step-000000000002" / "COMMITTED", "fifo", tmp_path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(rd.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "resumable_data.cli", "inspect", str(root / "step-000000000002")],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode != 0 and "FIFO" in (r.stdout + r.stderr)
    r = subprocess.run([sys.executable, "-m", "resumable_data.cli", "inspect", str(root)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and "step 1" in r.stdout


def test_steps_of_10_12_or_more_are_refused_before_writing(tmp_path):
    root = tmp_path / "ckpt"
    with pytest.raises(rd.ConfigError, match=r"step=1000000000000: expected an integer in \[0, 999999999999\]"):
        rd.save_checkpoint(root, _state(), step=10**12)
    assert not root.exists()
    path = rd.save_checkpoint(root, _state(3.0), step=10**12 - 1)
    assert path.name == "step-999999999999"
    assert rd.load_checkpoint(root, _state()).step == 10**12 - 1
    with pytest.raises(rd.ConfigError, match="below 10\\*\\*12"):
        rd.load_checkpoint(root, _state(), step=10**12)


def test_a_second_concurrent_writer_is_refused_with_the_folder_and_a_fix(tmp_path):
    from resumable_data.checkpoint.files import writer_lock

    root = tmp_path / "ckpt"
    rd.save_checkpoint(root, _state(1.0), step=1)
    script = ("import sys, time; from pathlib import Path; from resumable_data.checkpoint.files import writer_lock\n"
              "with writer_lock(Path(sys.argv[1])):\n    print('locked', flush=True); time.sleep(60)\n")
    env = dict(os.environ, PYTHONPATH=str(Path(rd.__file__).parents[1]))
    p = subprocess.Popen([sys.executable, "-c", script, str(root)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout.readline().strip() == "locked"
        with pytest.raises(rd.CheckpointError, match=rf"directory='{root}'.*one writer at a time.*fix: give each job"):
            rd.save_checkpoint(root, _state(2.0), step=2, keep_last=1)
        with pytest.raises(rd.CheckpointError, match="one writer at a time"):
            rd.checkpoint.cleanup_incomplete(root)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert [c.name for c in list_checkpoints(root)] == ["step-000000000001"]  # nothing deleted
    rd.save_checkpoint(root, _state(2.0), step=2)  # the holder died: the kernel released the lock
    with writer_lock(root):
        pass


# -- crashes at every boundary ----------------------------------------------------------------------
class Crash(BaseException):
    """A simulated power cut (not an Exception: nothing may swallow it)."""


OPS = [("os", "mkdir"), ("os", "rename"), ("os", "replace"), ("os", "fsync"), ("os", "unlink"), ("os", "rmdir"),
       ("shutil", "rmtree"), ("save", "_write_tensors")]


def _patch(monkeypatch, crash_at: int | None, log: list):
    import shutil as shutil_mod

    mods = {"os": os, "shutil": shutil_mod, "store": store_mod, "save": save_mod}
    for mod, name in OPS:
        real = getattr(mods[mod], name)

        def wrapper(*a, _real=real, _name=f"{mod}.{name}", **k):
            log.append(_name)
            if crash_at is not None and len(log) - 1 == crash_at:
                raise Crash(_name)
            return _real(*a, **k)

        monkeypatch.setattr(mods[mod], name, wrapper)


def _boundaries(tmp_path, monkeypatch, resave: bool) -> list[str]:
    root = tmp_path / "probe"
    rd.save_checkpoint(root, _state(1.0), step=1, keep_last=None)
    rd.save_checkpoint(root, _state(2.0), step=2, keep_last=None)
    log: list = []
    with monkeypatch.context() as m:
        _patch(m, None, log)
        rd.save_checkpoint(root, _state(5.0), step=2 if resave else 3, keep_last=2)
    return log


@pytest.mark.parametrize("resave", [False, True], ids=["new-step", "re-save"])
def test_a_crash_at_every_boundary_loses_no_checkpoint(tmp_path, monkeypatch, resave):
    ops = _boundaries(tmp_path, monkeypatch, resave)
    assert len(ops) >= 15, ops
    target = 2 if resave else 3
    latest_at = max(i for i, o in enumerate(ops) if o == "os.replace")  # the replace of `latest`
    for k, op in enumerate(ops):
        root = tmp_path / f"k{k}"
        rd.save_checkpoint(root, _state(1.0), step=1, keep_last=None)
        rd.save_checkpoint(root, _state(2.0), step=2, keep_last=None)
        with monkeypatch.context() as m:
            _patch(m, k, [])
            try:
                rd.save_checkpoint(root, _state(5.0), step=target, keep_last=2)
                crashed = False
            except Crash:
                crashed = True
        assert crashed, f"boundary {k} ({op}) was not reached"
        # every earlier checkpoint (and the new one, if it got through) loads and equals what was saved
        expect = {1: {1.0}, 2: {2.0, 5.0} if resave else {2.0}, 3: {5.0}}
        t = _state(-1.0)
        with _quiet():
            info = rd.load_checkpoint(root, t)
        assert _value(t) in expect[info.step], (k, op, info.step, _value(t))
        assert info.step in (2, 3), (k, op, info.step)
        for step in (1, 2):
            if step == 1 and k > latest_at and not resave:
                continue  # retention (keep_last=2) may have removed step 1 once step 3 was confirmed
            t = _state(-1.0)
            with _quiet():
                rd.load_checkpoint(root, t, step=step)
            assert _value(t) in expect[step], (k, op, step)
        # the next save succeeds and keeps every complete copy
        before = {p.name for p in list_checkpoints(root)}
        rd.save_checkpoint(root, _state(9.0), step=4, keep_last=None)
        after = {p.name for p in list_checkpoints(root)}
        assert before <= after and "step-000000000004" in after, (k, op, before, after)
        if resave:
            assert "step-000000000002" in after, (k, op)
        assert not [n for n in os.listdir(root) if n.startswith((".tmp-", ".aside-", ".trash-"))], (k, op)
    if os.environ.get("RD_AON_STATS"):
        Path(os.environ["RD_AON_STATS"], f"boundaries-{'re-save' if resave else 'new-step'}.json").write_text(
            json.dumps({"boundaries": len(ops), "ops": ops}))


class _quiet:
    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        self._w.__exit__(*exc)


KILL_SCRIPT = """
import os, signal, sys, torch
import resumable_data as rd
from resumable_data.checkpoint import store
root, target, at = sys.argv[1], int(sys.argv[2]), sys.argv[3]
m = torch.nn.Linear(8, 2)
with torch.no_grad():
    for p in m.parameters():
        p.fill_(5.0)
s = rd.TrainingState(model=m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1), run_id="hostile")
real = os.rename
n = {"k": 0}
def rename(a, b):
    n["k"] += 1
    if at == "between-renames" and n["k"] == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    real(a, b)
    if at == "after-final-rename" and os.path.basename(str(b)).startswith("step-"):
        os.kill(os.getpid(), signal.SIGKILL)
os.rename = rename
real_replace = os.replace
def replace(a, b):
    if at == "before-latest" and os.path.basename(str(b)) == "latest":
        os.kill(os.getpid(), signal.SIGKILL)
    real_replace(a, b)
os.replace = replace
real_fsync = os.fsync
def fsync(fd):
    if at == "first-fsync":
        os.kill(os.getpid(), signal.SIGKILL)
    real_fsync(fd)
os.fsync = fsync
rd.save_checkpoint(root, s, step=target, keep_last=2)
"""


@pytest.mark.parametrize("at", ["first-fsync", "between-renames", "after-final-rename", "before-latest"])
def test_a_real_sigkill_during_a_re_save(tmp_path, at):
    root = tmp_path / "ckpt"
    rd.save_checkpoint(root, _state(1.0), step=1, keep_last=None)
    rd.save_checkpoint(root, _state(2.0), step=2, keep_last=None)
    env = dict(os.environ, PYTHONPATH=str(Path(rd.__file__).parents[1]))
    r = subprocess.run([sys.executable, "-c", KILL_SCRIPT, str(root), "2", at], env=env, timeout=120)
    assert r.returncode == -signal.SIGKILL
    with _quiet():
        t = _state(-1.0)
        info = rd.load_checkpoint(root, t)
    assert info.step == 2 and _value(t) in {2.0, 5.0}
    with _quiet():
        t = _state(-1.0)
        rd.load_checkpoint(root, t, step=1)
    assert _value(t) == 1.0
    rd.save_checkpoint(root, _state(9.0), step=3, keep_last=None)
    assert {p.name for p in list_checkpoints(root)} >= {"step-000000000001", "step-000000000002", "step-000000000003"}
    t = _state(-1.0)
    rd.load_checkpoint(root, t, step=2)
    assert _value(t) in {2.0, 5.0}


def test_marker_json_of_a_forged_step_is_refused(tmp_path):
    """A marker whose step disagrees with its directory name (a renamed checkpoint) is not loaded."""
    root = _two(tmp_path)
    shutil.copytree(root / "step-000000000001", root / "step-000000000005")
    with _quiet():
        info = rd.load_checkpoint(root, _state())
    assert info.step == 2
    with pytest.raises(rd.CheckpointError, match="the step its directory names"):
        rd.load_checkpoint(root / "step-000000000005", _state())
    mk = json.loads((root / "step-000000000002" / "COMMITTED").read_text())
    assert mk["step"] == 2


# -- a full disk at every write of a save ----------------------------------------------------------
ENOSPC_OPS = [("os", "mkdir"), ("os", "rename"), ("os", "replace"), ("os", "fsync"), ("os", "unlink"),
              ("io", "open"), ("save", "_write_tensors")]


def _patch_enospc(monkeypatch, fail_at: int | None, log: list):
    """The ``fail_at``-th write-side call of a save fails as a full disk does: OSError(ENOSPC), or
    safetensors' own SafetensorError for the tensor file (what its Rust writer raises)."""
    import errno

    from safetensors import SafetensorError

    from resumable_data import _io as io_mod

    mods = {"os": os, "io": io_mod, "store": store_mod, "save": save_mod}
    for mod, name in ENOSPC_OPS:
        real = getattr(mods[mod], name) if name != "open" else open

        def wrapper(*a, _real=real, _name=f"{mod}.{name}", **k):
            if _name == "io.open" and "w" not in (a[1] if len(a) > 1 else k.get("mode", "r")):
                return _real(*a, **k)
            log.append(_name)
            if fail_at is not None and len(log) - 1 == fail_at:
                if _name == "save._write_tensors":
                    raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, "
                                          "message: \"No space left on device\" })")
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return _real(*a, **k)

        monkeypatch.setattr(mods[mod], name, wrapper, raising=name != "open")


@pytest.mark.parametrize("resave", [False, True], ids=["new-step", "re-save"])
def test_a_full_disk_at_every_write_is_an_rd_error_and_keeps_the_previous_checkpoints(tmp_path, monkeypatch, resave):
    """Issue 30 item 7: ENOSPC during save_checkpoint was SafetensorError / OSError. Each write-side
    call of a save fails in turn: the save raises rd.CheckpointError naming the folder and the cause
    (or, where the failing call is a best-effort one, succeeds), and every checkpoint saved before
    loads with its values, nothing of the failed save is left behind, and the next save succeeds."""
    root = tmp_path / "probe"
    rd.save_checkpoint(root, _state(1.0), step=1, keep_last=None)
    rd.save_checkpoint(root, _state(2.0), step=2, keep_last=None)
    ops: list = []
    with monkeypatch.context() as m:
        _patch_enospc(m, None, ops)
        rd.save_checkpoint(root, _state(5.0), step=2 if resave else 3, keep_last=2)
    assert len(ops) >= 12 and "save._write_tensors" in ops and "io.open" in ops, ops
    target = 2 if resave else 3
    refused, passed = 0, []
    for k, op in enumerate(ops):
        root = tmp_path / f"k{k}"
        rd.save_checkpoint(root, _state(1.0), step=1, keep_last=None)
        rd.save_checkpoint(root, _state(2.0), step=2, keep_last=None)
        with monkeypatch.context() as m:
            _patch_enospc(m, k, [])
            try:
                rd.save_checkpoint(root, _state(5.0), step=target, keep_last=2)
                error = None
                passed.append((k, op))
            except rd.CheckpointError as e:
                error = str(e)
                refused += 1
        published = error is None or "was not updated" in error
        if error is not None:
            assert f"directory='{root}'" in error and "No space left on device" in error, (k, op, error)
            assert "fix: free space" in error, (k, op, error)
        t = _state(-1.0)
        with _quiet():
            info = rd.load_checkpoint(root, t)
        if error is None:
            assert (info.step, _value(t)) == (target, 5.0), (k, op)
        else:  # published: the new step, as resume_or_start loads it (`latest` not updated); else step 2 as it was
            assert (info.step, _value(t)) == ((target, 5.0) if published else (2, 2.0)), (k, op, error)
            t = _state(-1.0)
            with _quiet():
                assert rd.resume_or_start(root, t) == info.step and _value(t) == (5.0 if published else 2.0)
        if not (published and not resave):  # else retention (keep_last=2) may have removed step 1
            t = _state(-1.0)
            rd.load_checkpoint(root, t, step=1)
            assert _value(t) == 1.0, (k, op)
        if not published:
            assert not [n for n in os.listdir(root) if n.startswith((".tmp-", ".aside-"))], (k, op)
            assert {p.name for p in list_checkpoints(root)} == {"step-000000000001", "step-000000000002"}, (k, op)
        rd.save_checkpoint(root, _state(9.0), step=4, keep_last=None)  # space is back: the next save works
        t = _state(-1.0)
        rd.load_checkpoint(root, t)
        assert _value(t) == 9.0
    latest_at = max(i for i, o in enumerate(ops) if o == "os.replace")  # the replace of `latest`
    # only best-effort calls may fail without an error: the existing root's mkdir, a directory's
    # fsync (skipped where unsupported), and the retention pass after `latest` names the new step
    assert all(k == 0 or op == "os.fsync" or k > latest_at for k, op in passed), (passed, ops)
    assert refused >= len(ops) // 2, (refused, passed, ops)  # only best-effort calls (retention, an fsync of a dir) pass
    count("enospc_save_cases", len(ops))
    count("enospc_save_refused", refused)
