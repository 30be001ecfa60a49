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
    p = subprocess.Popen([sys.executable, "-c", _OWNER, str(parent)], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": REPO})
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
            [os.path.basename(live), bare.name, "mine", f"{PREFIX}link", f"{PREFIX}file"])
        assert os.listdir(other) == [OWNER]
    finally:
        os.close(fd)
    assert sweep_abandoned(str(tmp_path)) == [live]  # its owner let go without removing it


def test_later_sweeps_remove_a_directory_once_its_last_holder_lets_go(tmp_path):
    """A job restarted at once finds the killed job's lock still held (its loader workers have not
    yet noticed that their parent is gone): a later sweep removes the directory once they have."""
    import time

    from resumable_data.sources.read_ahead.cache import LaterSweeps

    held, fd = make_cache_dir(str(tmp_path))  # stands for a killed job's directory its worker still holds
    sweeps = LaterSweeps(str(tmp_path), first_s=0.2, tries=3)  # sweeps at 0.2, 0.6 and 1.4 s
    try:
        time.sleep(0.4)
        assert os.path.isdir(held)  # the first sweep found the lock held and left it
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
