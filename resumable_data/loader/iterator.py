"""One pass of a loader: from the cursor to the end of its epoch, reporting to the ledger.

Algorithm. A pass asks torch's ``DataLoader`` (or, with no workers and no pinning, the fetcher
directly) for the steps the step sampler hands out, and tells the loader's
:class:`~resumable_data.loader.ledger.ProgressLedger` of each delivered step. A step that
``skip_steps`` covered after a worker fetched it is dropped here. In ``commit="auto"`` mode the
previous batch is committed when the next one is asked for.

A failing batch. An exception from ``__getitem__``/``collate_fn`` reaches the loop (with workers:
torch re-raises it for that batch); the pass goes on, and the next ``next()`` delivers the next
step, at any worker count, as torch does. The failed step never reached the loop, so it is not
delivered and nothing records it: a state taken before the next batch resumes by fetching it
again (a transient error may succeed); once the next batch is delivered the cursor is past it
(the derived microbatch count then includes it, like any step behind the cursor).

Transport. With workers, a batch reaches this process through :mod:`.transport` (reused
shared-memory slots, or inline bytes when small); requests and results skip the queues' feeder
threads (:mod:`.torch_compat`); where batches are rd's own gathers a request carries up to four
steps, handed to the loop one at a time (:mod:`.step_groups`). Batches are the same objects at
every worker count.

Worker faults. A worker that dies or hangs surfaces as :class:`rd.WorkerError` (torch's error as
its ``__cause__``), with the cursor counting only what reached the loop, so the state saved after
it resumes exactly; the broken pool (persistent workers too) is shut down so a fresh
``iter(loader)`` starts a new one.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

from resumable_data.errors import ConfigError, UsageError, WorkerError, describe
from resumable_data.loader import torch_compat, transport
from resumable_data.loader.collate import to_torch
from resumable_data.loader.fetch import NumpyBatch, StepFetcher
from resumable_data.loader.ledger import ProgressLedger
from resumable_data.loader.state import CommitMode
from resumable_data.loader.step_groups import GroupedSampler, Ungrouped

__all__ = ["LoaderIterator"]


class _Inline:
    """``fetcher[request]`` for each request of the step sampler, in this process.

    Not a generator: an exception from the dataset or ``collate_fn`` reaches the loop and the
    next ``next()`` fetches the next step, as torch's single-process iterator does."""

    __slots__ = ("_fetcher", "_requests")

    def __init__(self, fetcher: Any, sampler: Any) -> None:
        self._fetcher = fetcher
        self._requests = iter(sampler)

    def __iter__(self) -> _Inline:
        return self

    def __next__(self) -> Any:
        return self._fetcher[next(self._requests)]


class LoaderIterator:
    """One pass from the cursor to the end of its epoch; updates the ledger as batches arrive.

    Its loader hands it what a pass uses and nothing more: torch's ``DataLoader`` and the fetcher
    it wraps, the ledger, the commit mode, ``step_info`` (to describe a worker fault) and
    ``current()``, False once a new ``iter(loader)``, ``reset()`` or restore superseded this pass."""

    def __init__(
        self,
        torch_loader: Any,
        fetcher: StepFetcher,
        ledger: ProgressLedger,
        commit: CommitMode,
        step_info: Callable[[int], Any],
        current: Callable[[], bool],
    ) -> None:
        self._torch = torch_loader
        self._ledger = ledger
        self._commit = commit
        self._step_info = step_info
        self._current = current
        if torch_loader.num_workers == 0 and not torch_loader.pin_memory:
            # No workers, no pinning: torch's single-process iterator would only call
            # fetcher[request] for each request of the sampler; doing it directly saves ~0.1 ms/batch.
            self._it = _Inline(fetcher, torch_loader.sampler)
            self._next: Any = next
        else:
            torch_compat.install_sigchld_handler()  # a death is reported at next(), never mid-step
            if torch_loader.num_workers:
                transport.prepare_main()  # workers register their batch slots with this process's tracker
                torch_loader.collate_fn.new_pool()  # slot names carry the reader's pid; mappings the pool
            self._it = _start_workers(torch_loader)
            torch_compat.widen_result_pipe(self._it)  # small batches cross the pipe in one write
            torch_compat.synchronous_index_queues(self._it)  # no feeder threads fighting for the GIL
            torch_compat.on_pool_exit(self._it, transport.forget)  # unmap/unlink the pool's slots
            grouped = isinstance(torch_loader.sampler, GroupedSampler)  # requests of several steps
            self._next = Ungrouped(torch_compat.next_batch) if grouped else torch_compat.next_batch
        self._closed = False
        self._exhausted = False  # ended by StopIteration: later next() calls raise it again

    def __iter__(self) -> LoaderIterator:
        return self

    @property
    def _workers(self) -> list:
        """This pass's worker processes (torch's iterator attribute; empty without workers)."""
        return torch_compat.worker_processes(self._it)

    def __next__(self) -> Any:
        if self._exhausted:  # the iterator protocol: an exhausted iterator stays exhausted (torch's does)
            raise StopIteration
        if self._closed or not self._current():
            raise UsageError(
                "this iterator was superseded (a new iter(loader), reset() or load_state_dict() happened); "
                "fix: iterate a fresh iter(loader)"
            )
        ledger = self._ledger
        if self._commit is CommitMode.AUTO:
            ledger.commit_delivered()
        while True:
            try:
                step, batch, tokens, samples = self._next(self._it)
            except StopIteration:
                ledger.end_pass()
                self._exhausted = True
                self.close()
                raise
            except (ConnectionError, EOFError, RuntimeError) as e:
                what = torch_compat.worker_fault(e) if torch_compat.is_multiprocess_iter(self._it) else None
                if what is None:
                    raise
                killed = torch_compat.killed_by_signal(self._it)  # before the pool is shut down
                self._abandon()
                c = ledger.cursor
                raise WorkerError(
                    f"{killed}a loader worker {what} ({type(e).__name__}: {e}) {self._in_flight(c.delivered)}; "
                    f"nothing was lost: state_dict() counts the {c.delivered} batches delivered to the loop "
                    f"(cursor.committed={c.committed}); fix: save loader.state_dict() with your "
                    "checkpoint and restart (or iterate a fresh iter(loader)); the job resumes at the "
                    "first batch it did not see"
                ) from e
            if not ledger.is_skipped(step):  # skip_steps() may cover a step a worker already fetched
                break
        ledger.deliver(step, tokens, samples)
        if isinstance(batch, NumpyBatch):
            batch = to_torch(batch)
        return batch

    def _in_flight(self, delivered: int) -> str:
        """Which step the loop was waiting for: its index, positions and this rank's records."""
        ledger, step = self._ledger, delivered
        while ledger.is_skipped(step):
            step += 1
        try:
            info = self._step_info(step)
        except Exception:  # describing must never hide the fault itself
            return f"while the loop waited for step {step}"
        recs = [] if info.records is None else [int(r) for r in info.records]
        shown = ", ".join(map(str, recs[:8])) + (f", ... ({len(recs)} in all)" if len(recs) > 8 else "")
        return (
            f"while the loop waited for step {step} (epoch {info.epoch}, {info.unit.value} positions "
            f"[{info.span[0]}, {info.span[1]}), record ids [{shown}])"
        )

    def _abandon(self) -> None:
        """Close this pass and drop its broken worker pool (persistent workers too), so the next
        ``iter(loader)`` starts a fresh one."""
        self.close()
        pids = [w.pid for w in torch_compat.worker_processes(self._it)]
        torch_compat.shutdown_workers(self._it)
        transport.forget(pids)
        torch_compat.drop_persistent_iterator(self._torch)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: torch's modules may already be gone
            pass

    def close(self) -> None:
        """Stop this pass; its worker processes (unless persistent) shut down now."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        if torch_compat is None:
            # interpreter shutdown: a generator still suspended in ``yield from loader`` (an endless
            # ``batches()`` of the loop) is closed after this module's globals were cleared; the
            # worker processes exit with the process, and there is nothing left to forget
            return
        if not self._torch.persistent_workers:
            pids = [w.pid for w in torch_compat.worker_processes(self._it)]
            torch_compat.shutdown_workers(self._it)
            transport.forget(pids)


def _start_workers(torch_loader: Any) -> Any:
    """torch's multi-process iterator; a worker that cannot start because what it must receive does
    not pickle (spawn and forkserver pickle the dataset, collate_fn, worker_init_fn...) is an
    :class:`~resumable_data.ConfigError` naming the object and the fixes, raised from torch's error."""
    try:
        return iter(torch_loader)
    except pickle.PicklingError as e:
        raise _unpicklable(torch_loader, e) from e
    except (AttributeError, TypeError) as e:  # "Can't pickle local object", "cannot pickle '_thread.lock'"
        if "pickle" not in str(e).lower():
            raise
        raise _unpicklable(torch_loader, e) from e


def _unpicklable(torch_loader: Any, e: BaseException) -> ConfigError:
    ctx = torch_loader.multiprocessing_context
    method = ctx.get_start_method() if ctx is not None else "the default start method"
    return ConfigError(
        describe(
            "multiprocessing_context",
            method,
            f"a dataset, collate_fn and worker_init_fn that pickle, as {method} workers receive them pickled "
            f"({type(e).__name__}: {str(e)[:200]})",
            "define them at module level (not a lambda or a local function) and keep open handles out of "
            "them, or pass multiprocessing_context='fork' (Linux), or num_workers=0",
        )
    )
