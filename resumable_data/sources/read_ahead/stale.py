"""Cache directories left by processes that ended without closing their fetcher (``kill -9``, a
preempted node's OOM killer, a crash): found and removed when the next fetcher starts.

Algorithm: :func:`make_cache_dir` makes the fetcher's directory (``rd-read-ahead-*`` under
``cache_dir`` or the system's temporary directory) and writes in it an ``owner`` file (temporary
name, then renamed): this host's name, its pid namespace (Linux: ``/proc/self/ns/pid``), the
process id and that process's start time (Linux: ``/proc/<pid>/stat``, so a recycled pid is not
taken for the owner). Before that, it removes every
sibling ``rd-read-ahead-*`` directory whose ``owner`` names this host and a process that is no
longer running (its pid gone, or now another process's start time). A directory without a
readable ``owner`` (being made right now, or made by another tool or an older rd) and one owned on
another host (a cache_dir shared over the network) or from another pid namespace (containers that
share a host name, ``--network host``, and a cache volume: their pids mean nothing here) are left
alone.

Why: a fetcher removes its directory when its loader goes away (:meth:`~.fetcher.Prefetcher.close`),
but a killed process runs no cleanup, and the directory holds up to ``cache_bytes`` (2 GiB by
default). Jobs that are preempted and restarted, what rd is for, would leave one such directory per
kill.

Guarantee: only directories named ``rd-read-ahead-*`` that carry an ``owner`` file of this host's
dead process are removed; the directory of a live fetcher, in this process or another, never is.

Cost: one listing of the parent directory and one small read per ``rd-read-ahead-*`` directory,
once per fetcher start.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path

__all__ = ["OWNER", "PREFIX", "make_cache_dir", "remove_stale"]

_log = logging.getLogger(__name__)

#: The name prefix of every fetcher's cache directory.
PREFIX = "rd-read-ahead-"
#: The file naming the process that owns a cache directory.
OWNER = "owner"


def _start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot, Linux), None where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:  # the command name (field 2) may hold spaces and parentheses: fields after the last ')'
        return int(stat[stat.rindex(")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


def _pid_namespace() -> str | None:
    """This process's pid namespace (Linux), None where unknown."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _running(pid: int, started: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: running
        pass
    return started is None or _start_time(pid) in (None, started)


def remove_stale(parent: str) -> int:
    """Remove the ``rd-read-ahead-*`` directories under ``parent`` owned by a process of this host that
    is no longer running (module docstring); how many were removed."""
    host, namespace, removed = socket.gethostname(), _pid_namespace(), 0
    try:
        names = [n for n in os.listdir(parent) if n.startswith(PREFIX)]
    except OSError:
        return 0
    for name in names:
        path = os.path.join(parent, name)
        if os.path.islink(path):
            continue  # never followed: what a link points at is not ours
        try:
            owner = json.loads(Path(path, OWNER).read_text())
            pid, started, owner_host = int(owner["pid"]), owner["started"], str(owner["host"])
            started = None if started is None else int(started)
            owner_namespace = owner.get("pid_namespace")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue  # not ours to judge
        if owner_host != host or owner_namespace != namespace or _running(pid, started):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
    if removed:
        _log.info(
            "resumable_data: removed %d read-ahead cache director%s under %s left by processes that ended "
            "without closing them",
            removed,
            "y" if removed == 1 else "ies",
            parent,
        )
    return removed


def make_cache_dir(cache_dir: str | os.PathLike | None) -> str:
    """A fresh ``rd-read-ahead-*`` directory under ``cache_dir`` (None: the system's temporary
    directory) with its ``owner`` file, after removing the stale ones beside it."""
    parent = os.fspath(cache_dir) if cache_dir is not None else tempfile.gettempdir()
    remove_stale(parent)
    root = tempfile.mkdtemp(prefix=PREFIX, dir=parent)
    pid = os.getpid()
    tmp = os.path.join(root, f".{OWNER}.tmp")
    with open(tmp, "w") as f:
        json.dump(
            {"host": socket.gethostname(), "pid_namespace": _pid_namespace(), "pid": pid, "started": _start_time(pid)},
            f,
        )
    os.replace(tmp, os.path.join(root, OWNER))
    return root
