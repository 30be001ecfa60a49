"""The unit cache's directories (sources/read_ahead/cache.py): a directory whose owner was killed
(SIGKILL skips every cleanup) is removed by the next loader's sweep; a live owner's directory, one
without an ``.owner`` lock, a symlink and anything not named ``rd-read-ahead-*`` are left alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

import resumable_data
from resumable_data.sources.read_ahead.cache import OWNER, PREFIX, make_cache_dir, sweep_abandoned

pytest.importorskip("fcntl")
REPO = os.path.dirname(os.path.dirname(resumable_data.__file__))

_OWNER = (
    "import sys, time\n"
    "from resumable_data.sources.read_ahead.cache import make_cache_dir\n"
    "root, fd = make_cache_dir(sys.argv[1])\n"
    "open(root + '/0.unit', 'wb').write(b'x' * 1000)\n"
    "print(root, flush=True)\n"
    "time.sleep(120)\n"
)


def _killed_owner(parent) -> str:
    """The cache directory of a process killed with SIGKILL while it held it."""
    p = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(parent)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    root = p.stdout.readline().strip()
    p.send_signal(signal.SIGKILL)
    p.wait()
    p.stdout.close()
    assert os.path.isdir(root) and os.path.exists(os.path.join(root, "0.unit"))  # SIGKILL left it
    return root


def test_a_killed_owners_directory_is_swept_by_the_next_one(tmp_path):
    dead = _killed_owner(tmp_path)
    root, fd = make_cache_dir(str(tmp_path))
    try:
        assert not os.path.exists(dead)
        assert os.listdir(tmp_path) == [os.path.basename(root)] and os.listdir(root) == [OWNER]
    finally:
        os.close(fd)


def test_a_live_owner_and_what_is_not_a_cache_directory_are_left_alone(tmp_path):
    live, fd = make_cache_dir(str(tmp_path))
    bare = tmp_path / f"{PREFIX}bare"  # no .owner: being made, or an earlier version's
    bare.mkdir()
    other = tmp_path / "mine"
    other.mkdir()
    (other / OWNER).write_text("")
    (tmp_path / f"{PREFIX}link").symlink_to(other)  # a symlink to an unlocked .owner
    (tmp_path / f"{PREFIX}file").write_text("")
    try:
        assert sweep_abandoned(str(tmp_path)) == []
        assert sorted(os.listdir(tmp_path)) == sorted(
            [os.path.basename(live), bare.name, "mine", f"{PREFIX}link", f"{PREFIX}file"]
        )
        assert os.listdir(other) == [OWNER]
    finally:
        os.close(fd)
    assert sweep_abandoned(str(tmp_path)) == [live]  # its owner let go without removing it


@pytest.mark.parametrize(
    "first_s, held_s",
    [(0.2, 0.4), (0.05, 0.8)],  # 0.2, 0.6, 1.4 s, then every 0.8 s / 0.05, 0.15, 0.35 s, then every 0.2 s
    ids=["after the first sweep", "past the doubling sweeps"],
)
def test_later_sweeps_remove_a_directory_once_its_last_holder_lets_go(tmp_path, first_s, held_s):
    """A job restarted at once finds the killed job's lock still held (its loader workers have not
    yet noticed that their parent is gone): a later sweep removes the directory once they have, also
    when they let go after the doubling sweeps (a loaded machine, steps still pending): the sweeps go
    on at the longest delay."""
    import time

    from resumable_data.sources.read_ahead.cache import LaterSweeps

    held, fd = make_cache_dir(str(tmp_path))  # stands for a killed job's directory its worker still holds
    sweeps = LaterSweeps(str(tmp_path), first_s=first_s)
    try:
        time.sleep(held_s)
        assert os.path.isdir(held)  # the sweeps so far found the lock held and left it
        os.close(fd)  # the last holder is gone
        fd = None
        deadline = time.monotonic() + 5
        while os.path.exists(held) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(held)
    finally:
        sweeps.cancel()
        if fd is not None:
            os.close(fd)


def test_cancelled_later_sweeps_remove_nothing(tmp_path):
    import time

    from resumable_data.sources.read_ahead.cache import LaterSweeps

    held, fd = make_cache_dir(str(tmp_path))
    os.close(fd)  # abandoned: a sweep would remove it
    LaterSweeps(str(tmp_path), first_s=0.2).cancel()
    time.sleep(0.5)
    assert os.path.isdir(held)


# -- a hostile parent: rd deletes only what it made, and never hangs ------------------------------
def _hostile_dir(parent, name, owner_kind):
    """A user's folder named like a cache directory, with ``.owner`` of ``owner_kind`` and a file
    of the user's beside it."""
    d = parent / f"{PREFIX}{name}"
    d.mkdir(mode=0o700)
    os.chmod(d, 0o700)  # what mkdtemp makes: only the other checks may protect it
    owner = d / OWNER
    if owner_kind == "fifo":
        os.mkfifo(owner)
    elif owner_kind == "dir":
        owner.mkdir()
    elif owner_kind == "text":
        owner.write_text("my notes")
    elif owner_kind == "link":
        (parent / "target").write_text("")
        owner.symlink_to(parent / "target")
    else:  # "empty": exactly rd's lock file
        owner.write_text("")
    (d / "precious.txt").write_text("the user's")
    (d / "0.unit").write_bytes(b"x")  # a name rd writes: rd's to remove
    return d


@pytest.mark.parametrize("owner_kind", ["fifo", "dir", "text", "link", "empty"])
def test_a_users_folder_named_like_a_cache_directory_loses_nothing_and_never_hangs(tmp_path, owner_kind):
    """A FIFO as ``.owner`` hung every new loader's sweep (open() blocked for a writer, forever);
    a directory or a non-empty file as ``.owner`` had the whole folder removed (rmtree)."""
    import threading

    d = _hostile_dir(tmp_path, owner_kind, owner_kind)
    got: list = []
    th = threading.Thread(target=lambda: got.append(sweep_abandoned(str(tmp_path))), daemon=True)
    th.start()
    th.join(10)
    assert not th.is_alive(), "the sweep hangs on the folder's .owner"
    assert got == [[]]
    assert (d / "precious.txt").read_text() == "the user's"
    root, fd = make_cache_dir(str(tmp_path))  # the next loader starts, sweeping first
    os.close(fd)
    assert (d / "precious.txt").read_text() == "the user's"


def test_a_folder_readable_by_others_is_not_a_cache_directory(tmp_path):
    d = _hostile_dir(tmp_path, "shared", "empty")
    os.chmod(d, 0o755)  # mkdtemp never makes this: a user's folder
    assert sweep_abandoned(str(tmp_path)) == []
    assert sorted(os.listdir(d)) == sorted([OWNER, "precious.txt", "0.unit"])


def test_an_abandoned_directory_keeps_what_rd_did_not_write(tmp_path):
    """An abandoned cache directory where someone put a file of their own: rd's files go, the
    other file and so the directory stay."""
    root, fd = make_cache_dir(str(tmp_path))
    for name in ("0.unit", "1.want", "2.err", ".3.140000.tmp"):
        open(os.path.join(root, name), "wb").close()
    os.mkdir(os.path.join(root, "4.unit"))  # rd's name, not rd's kind of file
    open(os.path.join(root, "notes.txt"), "w").close()
    os.close(fd)
    assert sweep_abandoned(str(tmp_path)) == []
    assert sorted(os.listdir(root)) == ["4.unit", "notes.txt"]
    assert sweep_abandoned(str(tmp_path)) == []  # no .owner left: never considered again


def test_an_unusable_cache_dir_is_an_rd_error_naming_it(tmp_path, monkeypatch):
    import tempfile

    import resumable_data as rd

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path))

    monkeypatch.setattr(tempfile, "mkdtemp", refuse)  # a parent this process cannot write (root may)
    with pytest.raises(rd.ConfigError, match=r"cache_dir.*Permission denied.*writable directory"):
        make_cache_dir(str(tmp_path))


def test_a_cache_dir_without_flock_is_an_rd_error_and_leaves_nothing(tmp_path, monkeypatch):
    """Some NFS mounts refuse flock (ENOLCK): a raw OSError escaped, from the loader's constructor."""
    import errno

    import resumable_data as rd
    from resumable_data.sources.read_ahead import cache

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(cache.fcntl, "flock", no_locks)
    with pytest.raises(rd.ConfigError, match=r"cache_dir.*flock.*No locks available.*writable directory"):
        make_cache_dir(str(tmp_path))
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's directory takes root")
def test_another_users_abandoned_directory_is_left_alone(tmp_path):
    root, fd = make_cache_dir(str(tmp_path))
    open(os.path.join(root, "0.unit"), "wb").close()
    os.close(fd)  # abandoned, but not this user's: another user's sweep removes it
    for path in (root, os.path.join(root, OWNER), os.path.join(root, "0.unit")):
        os.chown(path, 54321, 54321)
    assert sweep_abandoned(str(tmp_path)) == []
    assert sorted(os.listdir(root)) == [OWNER, "0.unit"]


def _ended_child(reap: bool) -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    if reap:
        os.waitpid(pid, 0)
    else:  # a zombie: ended, not yet reaped (kill(pid, 0) still succeeds on it)
        import time

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if b") Z" in f.read():
                    break
            time.sleep(0.01)
    return pid


def test_process_gone_tells_ended_processes_from_live_ones():
    import subprocess
    import sys

    from resumable_data.sources.read_ahead.cache import process_gone

    assert not process_gone(os.getpid()) and not process_gone(os.getppid())
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not process_gone(live.pid)
    finally:
        live.kill()
        live.wait()
    assert process_gone(live.pid)  # reaped
    zombie = _ended_child(reap=False)
    try:
        assert process_gone(zombie)
    finally:
        os.waitpid(zombie, 0)


@pytest.mark.parametrize("reap", [True, False], ids=["reaped", "zombie"])
def test_a_promise_whose_fetcher_is_gone_is_not_waited_for(tmp_path, monkeypatch, reap):
    """A loader worker whose main process was killed (SIGKILL: preemption) waited ``WAIT_S`` (120 s)
    for every unit the dead fetcher had promised, holding the killed job's cache lock all along: the
    restarted job's sweeps could not remove its directory. The wait now ends once the owner is gone;
    with a live owner it still waits for the promise."""
    import threading
    import time

    from resumable_data.sources.read_ahead import cache as cache_mod
    from resumable_data.sources.read_ahead.cache import UnitCache

    dead = _ended_child(reap)
    try:
        cache = UnitCache(str(tmp_path), owner=dead)
        open(cache.want_path(3), "wb").close()  # promised by the fetcher that died
        got: list = []
        t = threading.Thread(target=lambda: got.append(cache.get(3)), daemon=True)
        start = time.monotonic()
        t.start()
        t.join(10)
        assert not t.is_alive(), "get() waited for a dead fetcher's promise"
        assert got == [None] and time.monotonic() - start < 5  # the caller reads the unit itself

        monkeypatch.setattr(cache_mod, "WAIT_S", 0.6)
        alive = UnitCache(str(tmp_path))  # this process: the owner lives, the promise is waited for
        start = time.monotonic()
        assert alive.get(3) is None
        assert time.monotonic() - start >= 0.6
    finally:
        if not reap:
            os.waitpid(dead, 0)


def test_a_unit_cache_pickles_with_its_owner(tmp_path):
    import pickle

    from resumable_data.sources.read_ahead.cache import UnitCache

    cache = pickle.loads(pickle.dumps(UnitCache(str(tmp_path), owner=12345)))
    assert (cache.root, cache.owner) == (str(tmp_path), 12345)
    assert UnitCache(str(tmp_path)).owner == os.getpid()
