"""Worker faults: a dataset that raises, a worker killed by SIGKILL and a hung worker end in an
error (within ``timeout=``) that names the position and record, leave no orphan processes, and
the job resumes exactly from the state saved after the fault."""

from __future__ import annotations

import gc
import json
import os
import re
import signal
import time
from multiprocessing import resource_tracker

import pytest
import torch

import resumable_data as rd
from tests.reliability._counts import count
from tests.reliability._harness import canon

N = 60
BAD = 37  # the record that misbehaves


class Faulty(torch.utils.data.Dataset):
    """Misbehaves at record ``BAD`` inside a worker process only (resumes use 0 workers)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def __len__(self):
        return N

    def __getitem__(self, i):
        if i == BAD and torch.utils.data.get_worker_info() is not None:
            if self.mode == "raise":
                raise ValueError(f"cannot decode record {i}")
            if self.mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.mode == "segv":  # torch's test_segfault: a crash in native code
                signal.signal(signal.SIGSEGV, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGSEGV)
            if self.mode == "hang":
                time.sleep(3600)
        ctx = rd.sample_context()
        return {"id": i, "aug": torch.rand(2, generator=ctx.torch_generator)}


def make(mode, workers, **kw):
    return rd.DataLoader(Faulty(mode), batch_size=4, shuffle=True, seed=3, num_workers=workers,
                         dataset_version="faulty-v1", **kw)


def children():
    # multiprocessing's resource tracker is one process per interpreter, started by the first
    # shared-memory batch slot and kept to the end: started here, it is in every `before` (run
    # alone, the first case would otherwise count it as an orphan worker)
    resource_tracker.ensure_running()
    try:
        import psutil

        return [p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    except ImportError:  # /proc fallback
        me, out = os.getpid(), []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    fields = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[1]) == me and fields[0] != "Z":
                    out.append(int(d))
        return out


def wait_no_children(before, limit=15.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        left = [p for p in children() if p not in before]
        if not left:
            return
        time.sleep(0.05)
    raise AssertionError(f"orphan worker processes {left}")


@pytest.mark.parametrize("mode, timeout", [("raise", 0), ("kill", 10), ("segv", 10), ("hang", 4)])
def test_worker_fault_then_exact_resume(mode, timeout):
    before = children()
    reference = [canon(b) for b in make(mode, 0)]  # in the main process nothing misbehaves
    plan = make(mode, 0).plan
    bad_step = next(s for s in range(plan.steps_per_epoch) if BAD in plan.records(plan.local_positions(s, rd.Sharding())))
    loader = make(mode, 1, timeout=timeout)
    got = []
    t0 = time.monotonic()
    it = iter(loader)  # starts the worker (rd's non-raising SIGCHLD handler stands in for torch's)
    with pytest.raises(Exception) as info:
        for batch in it:
            got.append(canon(batch))
    elapsed = time.monotonic() - t0
    if timeout:
        assert elapsed < timeout + 8, f"the fault took {elapsed:.1f} s to surface (timeout={timeout})"
    text = str(info.value) + "".join(getattr(info.value, "__notes__", []))
    if mode == "raise":
        assert "cannot decode record 37" in text
        assert f"record {BAD}" in text and "position" in text, f"the note did not survive the re-raise: {text}"
    elif mode in ("kill", "segv"):
        # however torch learns of the death (liveness check, SIGCHLD, or a ConnectionResetError /
        # EOFError while the dead process was passing a batch's tensors), the loader says it once
        assert isinstance(info.value, rd.WorkerError), repr(info.value)
        assert "worker died" in text and "fix:" in text and "cursor.committed" in text, text
        assert f"step {len(got)} " in text and "record ids [" in text, text
        # torch's own sentence (its test_segfault matches it), with the signal's name
        signame = signal.strsignal(signal.SIGKILL if mode == "kill" else signal.SIGSEGV)
        assert re.search(rf"DataLoader worker \(pid \d+\) is killed by signal: {signame}", text), text
    else:
        assert isinstance(info.value, rd.WorkerError), repr(info.value)
        assert "hung" in text and "timed out" in text, text
    # a killed worker may take the batch before the bad one with it (its tensors were still to be
    # passed from the dead process): what was delivered is a prefix, and the state says how long
    assert got == reference[:len(got)] and bad_step - (mode in ("kill", "segv")) <= len(got) <= bad_step
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["cursor"]["committed"] == len(got)
    del loader, it, batch, info  # the traceback's frames hold the iterator (and its workers)
    gc.collect()
    wait_no_children(before)
    resumed = make(mode, 0)
    resumed.load_state_dict(state)
    assert [canon(b) for b in resumed] == reference[len(got):]
    count("fault_cases")


class KillsOnce(Faulty):
    """Kills its worker the first time record ``BAD`` is read (a marker file remembers)."""

    def __init__(self, marker):
        super().__init__("none")
        self.marker = marker

    def __getitem__(self, i):
        if i == BAD and torch.utils.data.get_worker_info() is not None and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitem__(i)


def test_persistent_worker_killed_then_fresh_iter_continues(tmp_path):
    """A dead persistent worker breaks torch's pool; the next ``iter(loader)`` starts a fresh one
    and goes on from the first batch the loop did not see (same process, no checkpoint)."""
    reference = [canon(b) for b in make("none", 0)]
    before = children()
    loader = rd.DataLoader(KillsOnce(str(tmp_path / "killed")), batch_size=4, shuffle=True, seed=3, num_workers=1,
                           persistent_workers=True, dataset_version="faulty-v1", timeout=10)
    got = []
    it = iter(loader)
    with pytest.raises(rd.WorkerError):
        for batch in it:
            got.append(canon(batch))
    assert (tmp_path / "killed").exists()
    assert 0 < len(got) < len(reference)
    got += [canon(b) for b in loader]  # a fresh pool of workers
    assert got == reference
    del loader, it
    gc.collect()
    wait_no_children(before)
    count("fault_cases")


class Plain(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return {"id": i}


def test_a_worker_killed_while_the_loop_trains_surfaces_at_next_as_worker_error():
    """torch's own SIGCHLD handler raises its RuntimeError inside whatever the main process is
    doing (the training step); rd's reports the death at the next ``next(loader)`` as
    rd.WorkerError naming the step, its positions and records; the training step runs to its end,
    and the state resumes exactly."""
    reference = [canon(b) for b in rd.DataLoader(Plain(), batch_size=4, shuffle=True, seed=3,
                                                 dataset_version="plain-v1")]
    before = children()
    loader = rd.DataLoader(Plain(), batch_size=4, shuffle=True, seed=3, num_workers=2, prefetch_factor=1,
                           dataset_version="plain-v1", timeout=20)
    it = iter(loader)
    got = [canon(next(it))]
    pids = [w.pid for w in it._it._workers]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    steps_done = 0
    for _ in range(40):  # "training": a SIGCHLD arrives in here; torch's handler would raise now
        sum(range(20_000))
        time.sleep(0.01)
        steps_done += 1
    assert steps_done == 40
    with pytest.raises(rd.WorkerError) as info:
        while True:
            got.append(canon(next(it)))
    text = str(info.value)
    step = len(got)
    assert "worker died" in text and f"step {step} " in text and "record ids [" in text, text
    span = loader.step_info(step)
    assert f"positions [{span.span[0]}, {span.span[1]})" in text, text
    assert ", ".join(str(int(r)) for r in span.records[:4]) in text, text
    assert got == reference[:len(got)]
    state = json.loads(json.dumps(loader.state_dict()))
    del loader, it, info
    gc.collect()
    wait_no_children(before)
    resumed = rd.DataLoader(Plain(), batch_size=4, shuffle=True, seed=3, dataset_version="plain-v1")
    resumed.load_state_dict(state)
    assert [canon(b) for b in resumed] == reference[len(got):]
    count("fault_cases")
