"""Run adversarial cases in a worker subprocess that may crash or hang (shared by the byte-flip and
attack sweeps): the worker reads one JSON job on stdin and writes one JSON line per case; a worker
that dies or stops answering is restarted after the case it stopped on, which is recorded as failed
("hang", or "crash:rc=N" with the worker's exit status: a SIGSEGV/SIGBUS is counted, never fatal)."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_cases(
    worker: Path,
    work: Path,
    cases: list,
    job: Callable[[Path, list], dict],
    failed: Callable[[Any, str], Any],
    *,
    case_timeout_s: float,
    startup_s: float,
    parse: Callable[[str], Any] = json.loads,
) -> list:
    """Results for ``cases``, in order: ``job(run_dir, todo)`` is the JSON job of one worker run over
    the cases still to do, ``parse`` reads one result line, ``failed(case, what)`` is the result of a
    case its worker hung or crashed on. A run may take ``startup_s`` before its first answer, then
    ``case_timeout_s`` per case."""
    results, todo = [], list(cases)
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               RD_CACHE_DIR=str(work / "cache"))
    while todo:
        run_dir = work / f"run{len(results)}"
        run_dir.mkdir(parents=True)
        proc = subprocess.Popen([sys.executable, str(worker)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env, text=True)
        proc.stdin.write(json.dumps(job(run_dir, todo)))
        proc.stdin.close()
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        done, hung = 0, False
        deadline = time.monotonic() + startup_s
        while done < len(todo):
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                hung = True
                break
            line = proc.stdout.readline()
            if not line:
                break
            results.append(parse(line))
            done += 1
            deadline = time.monotonic() + case_timeout_s
        if hung:
            proc.kill()
        rc = proc.wait()
        if done < len(todo):
            results.append(failed(todo[done], "hang" if hung else f"crash:rc={rc}"))
            done += 1
        todo = todo[done:]
    return results


def fan_out(cases: list, procs: int, run_slice: Callable[[int, list], list]) -> list:
    """``cases`` dealt round-robin to ``procs`` slices run at once (``run_slice(k, slice_k)``: one
    worker per slice, :func:`run_cases`); every case answered, slice by slice."""
    from concurrent.futures import ThreadPoolExecutor

    slices = [cases[k::procs] for k in range(procs)]
    with ThreadPoolExecutor(procs) as pool:
        got = [r for part in pool.map(lambda k: run_slice(k, slices[k]), range(procs)) for r in part]
    assert len(got) == len(cases)
    return got
