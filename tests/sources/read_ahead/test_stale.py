"""Cache directories of processes killed without closing their fetcher: removed when the next fetcher
starts on this host; the directories of live fetchers, other hosts and other tools never are."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

from resumable_data.sources.read_ahead import stale


def _owned(parent, name, **owner):
    d = parent / f"{stale.PREFIX}{name}"
    d.mkdir()
    (d / "0.unit").write_bytes(b"x" * 100)
    if owner:
        owner.setdefault("pid_namespace", stale._pid_namespace())
        (d / stale.OWNER).write_text(json.dumps(owner))
    return d


def _dead_pid() -> int:
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(p.stdout)


def test_only_dead_owners_of_this_host_are_removed(tmp_path):
    me, host = os.getpid(), socket.gethostname()
    dead = _owned(tmp_path, "dead", host=host, pid=_dead_pid(), started=None)
    recycled = _owned(tmp_path, "recycled", host=host, pid=me, started=-1)  # this pid, another start time
    live = _owned(tmp_path, "live", host=host, pid=me, started=stale._start_time(me))
    elsewhere = _owned(tmp_path, "elsewhere", host=host + "-other", pid=_dead_pid(), started=None)
    no_owner = _owned(tmp_path, "making")  # owner not written yet, or another tool's
    container = _owned(tmp_path, "container", host=host, pid=_dead_pid(), started=None, pid_namespace="pid:[1]")
    garbled = _owned(tmp_path, "garbled")
    (garbled / stale.OWNER).write_text("{not json")
    other = tmp_path / "not-rd"
    other.mkdir()
    (other / stale.OWNER).write_text(
        json.dumps({"host": host, "pid_namespace": stale._pid_namespace(), "pid": _dead_pid(), "started": None})
    )
    assert stale.remove_stale(str(tmp_path)) == 2
    assert not dead.exists() and not recycled.exists()
    assert live.exists() and elsewhere.exists() and no_owner.exists() and garbled.exists() and other.exists()
    assert container.exists()  # another pid namespace: its pids are not ours to look up


def test_the_directory_of_a_killed_process_goes_at_the_next_start(tmp_path):
    code = (
        "import os, signal, sys\n"
        "from resumable_data.sources.read_ahead.stale import make_cache_dir\n"
        "root = make_cache_dir(sys.argv[1])\n"
        "open(os.path.join(root, '0.unit'), 'wb').write(b'x' * 1000)\n"
        "print(root, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    roots = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env)
        assert p.returncode == -signal.SIGKILL
        roots.append(p.stdout.strip())
    # the second start removed the first killed process's directory; the second's is still there
    assert not os.path.exists(roots[0]) and os.path.exists(roots[1])
    mine = stale.make_cache_dir(tmp_path)
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(mine)]
    assert json.loads(open(os.path.join(mine, stale.OWNER)).read())["pid"] == os.getpid()


def test_a_live_fetcher_of_another_process_and_a_link_are_left_alone(tmp_path):
    """Two loaders sharing one cache_dir: the second's start never removes the first's directory; a
    link named like a cache directory is never followed into what it points at."""
    code = (
        "import sys, time\n"
        "from resumable_data.sources.read_ahead.stale import make_cache_dir\n"
        "print(make_cache_dir(sys.argv[1]), flush=True)\n"
        "time.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    other = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        theirs = other.stdout.readline().strip()
        precious = tmp_path / "precious"
        precious.mkdir()
        (precious / "data.bin").write_bytes(b"keep")
        owner = {"host": socket.gethostname(), "pid_namespace": stale._pid_namespace(), "pid": _dead_pid(), "started": None}
        (precious / stale.OWNER).write_text(json.dumps(owner))
        os.symlink(precious, tmp_path / f"{stale.PREFIX}link")
        mine = stale.make_cache_dir(tmp_path)
        assert os.path.isdir(theirs) and os.path.isdir(mine) and mine != theirs
        assert (precious / "data.bin").read_bytes() == b"keep"
    finally:
        other.kill()
        other.wait()
    stale.make_cache_dir(tmp_path)  # now that it is dead, its directory goes
    assert not os.path.exists(theirs)
