"""Where the pieces of ``rd.prepare`` run: a local process pool, or Ray tasks.

Algorithm: both engines take the same picklable :class:`~.tasks.PieceJob` list and call
:func:`~.tasks.run_piece` once per job; the driver hears of each finished piece through
``on_done`` (which records it), in completion order. Completion order never reaches the output:
a piece's shard name and bytes were fixed when it was planned.

* :attr:`Engine.PROCESSES` (default): a ``ProcessPoolExecutor`` of ``num_proc`` workers (fork where
  the platform has it, else spawn); the workers add to three shared counters (records, tokens,
  input bytes) after every chunk, which the driver's progress bar polls.
* :attr:`Engine.RAY`: one Ray task (``num_cpus=1``) per piece, on the cluster ``ray.init()``
  connects to (a local one when none is running; ``ray.init(address="auto")`` or
  ``RAY_ADDRESS`` for a real cluster, see docs/prepare.md). Workers write their shards
  themselves, in parallel, to the output's store; the input and output must be reachable from
  every node (a shared file system, or an object store through ``pyarrow.fs``). Progress counts
  advance per finished piece.

Guarantee: an error in any piece stops the run (pending pieces are cancelled) and is raised in
the driver: rd errors as they are, anything else as :class:`~resumable_data.WorkerError` naming
the piece. Cost: one process start per worker (pool) or per-task scheduling (Ray).
"""

from __future__ import annotations

import enum
import multiprocessing as mp
import sys
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

from resumable_data.errors import ConfigError, ResumableDataError, WorkerError, describe
from resumable_data.sources.prepare.tasks import PieceJob, PieceResult, Report, run_piece

__all__ = ["Engine", "run_jobs"]


class Engine(str, enum.Enum):
    """How ``rd.prepare`` runs its pieces."""

    PROCESSES = "processes"
    RAY = "ray"


_COUNTERS: Any = None  # the worker's shared (records, tokens, bytes) array


def _init_worker(counters: Any) -> None:
    global _COUNTERS
    _COUNTERS = counters


def _add(records: int, tokens: int, nbytes: int) -> None:
    with _COUNTERS.get_lock():
        _COUNTERS[0] += records
        _COUNTERS[1] += tokens
        _COUNTERS[2] += nbytes


def _pool_piece(job: PieceJob) -> PieceResult:
    return run_piece(job, _add)


def _failed(job: PieceJob, exc: BaseException) -> BaseException:
    if isinstance(exc, ResumableDataError):
        return exc
    return WorkerError(
        describe(
            "piece",
            f"{job.name} (input file {job.piece.file}, range [{job.piece.start}, {job.piece.stop}))",
            "to prepare without error",
            f"see the cause below ({type(exc).__name__}: {exc})",
        )
    )


def _run_pool(jobs: list[PieceJob], num_proc: int, on_done: Callable[[PieceResult], None], report: Report) -> None:
    ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    counters = ctx.Array("q", 3)
    seen = [0, 0, 0]
    stop = threading.Event()

    def drain() -> None:  # the workers' counters since the last call, into ``report``
        with counters.get_lock():
            now = list(counters[:])
        report(now[0] - seen[0], now[1] - seen[1], now[2] - seen[2])
        seen[:] = now

    def poll() -> None:
        while not stop.wait(0.25):
            drain()

    poller = threading.Thread(target=poll, daemon=True)
    with ProcessPoolExecutor(
        max_workers=num_proc, mp_context=ctx, initializer=_init_worker, initargs=(counters,)
    ) as pool:
        futures = {pool.submit(_pool_piece, j): j for j in jobs}
        poller.start()  # after the fork: a child must not inherit the counters' lock held
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in sorted(done, key=lambda f: futures[f].piece.index):
                    exc = f.exception()
                    if exc is not None:
                        raise _failed(futures[f], exc) from exc
                    drain()
                    on_done(f.result())
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            stop.set()
            poller.join()
            drain()


def _run_ray(jobs: list[PieceJob], on_done: Callable[[PieceResult], None], report: Report) -> None:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            describe("engine", "ray", "Ray installed", "pip install 'resumable-data[ray]' (or engine='processes')")
        ) from None
    task = ray.remote(num_cpus=1)(run_piece)
    refs = {task.remote(j): j for j in jobs}
    pending = list(refs)
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for r in ready:
                try:
                    result = ray.get(r)
                except ray.exceptions.RayTaskError as exc:
                    cause = exc.cause if isinstance(exc.cause, BaseException) else exc
                    raise _failed(refs[r], cause) from exc
                report(result.records_in, result.tokens, result.bytes_in)
                on_done(result)
    except BaseException:
        for r in pending:
            ray.cancel(r)
        raise


def run_jobs(
    jobs: list[PieceJob], engine: Engine, num_proc: int, on_done: Callable[[PieceResult], None], report: Report
) -> None:
    """Run every job; ``on_done`` per finished piece, ``report(records, tokens, bytes)`` as work advances."""
    if not jobs:
        return
    if engine is Engine.RAY:
        _run_ray(jobs, on_done, report)
    else:
        _run_pool(jobs, min(num_proc, len(jobs)), on_done, report)
