"""The one module that touches torch's private DataLoader internals.

torch's ``DataLoader`` gives no public way to tell a multi-process pass from a single-process
one, to shut a broken worker pool down, to make a persistent-workers loader start a fresh pool,
or to recognise "a worker died" among the errors a pass raises. The loader needs all four to
turn a dead worker into :class:`rd.WorkerError` without losing its cursor. Every private name
it relies on is used here and nowhere else, and ``tests/loader/test_torch_compat.py`` asserts
that each exists in the installed torch with the expected shape, so an upgrade that moves one
fails loudly and names it.

Private names used: ``torch.utils.data.dataloader._MultiProcessingDataLoaderIter`` and its
``_shutdown_workers()`` and ``_workers`` (the worker processes); ``DataLoader._iterator`` (the pass a persistent-workers loader reuses);
torch's message texts for dead and hung workers ("exited unexpectedly", "killed by signal",
"DataLoader timed out after") and for a dataset error re-raised from a worker ("Caught ...").
``torch.utils.data._utils.worker.WorkerInfo`` (made read-only by its ``__setattr__``): in a
worker, :class:`WorkerInit` points ``get_worker_info().dataset`` at the user's dataset instead of
rd's fetcher, as torch's DataLoader would. ``default_collate`` / ``default_convert`` are re-exported from their public ``torch.utils.data``
names. Cost: an ``isinstance`` and a few string tests, only on the error path.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader, default_collate, default_convert, get_worker_info
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

__all__ = [
    "WorkerInit",
    "default_collate",
    "default_convert",
    "drop_persistent_iterator",
    "is_multiprocess_iter",
    "shutdown_workers",
    "worker_fault",
]


class WorkerInit:
    """The ``worker_init_fn`` rd gives torch: makes ``get_worker_info().dataset`` the user's dataset
    (the worker's copy; torch's would be rd's fetcher), then calls the user's ``worker_init_fn``.
    Picklable for spawn when the user's function is."""

    def __init__(self, user_fn: Any) -> None:
        self.user_fn = user_fn

    def __call__(self, worker_id: int) -> None:
        info = get_worker_info()
        fetcher = info.dataset
        object.__setattr__(info, "dataset", getattr(fetcher, "dataset", fetcher))
        if self.user_fn is not None:
            self.user_fn(worker_id)


def worker_processes(it: Any) -> list:
    """The worker processes (``multiprocessing.Process``) of a pass of torch's ``DataLoader``;
    empty for a single-process pass."""
    return list(it._workers) if is_multiprocess_iter(it) else []


def is_multiprocess_iter(it: Any) -> bool:
    """Whether ``it`` is a pass of torch's ``DataLoader`` run by worker processes."""
    return isinstance(it, _MultiProcessingDataLoaderIter)


def shutdown_workers(it: Any) -> None:
    """Stop the worker processes of a multi-process pass now (persistent ones too); a no-op for
    any other iterator. Idempotent: torch's shutdown ignores a pool already shut down."""
    if is_multiprocess_iter(it):
        it._shutdown_workers()


def drop_persistent_iterator(torch_loader: DataLoader) -> None:
    """Forget the pass a ``persistent_workers=True`` loader keeps, so the next ``iter()`` starts a
    fresh worker pool (after the old one broke). Harmless for a loader without one."""
    torch_loader._iterator = None


def worker_fault(error: BaseException) -> str | None:
    """What happened to a worker process, if ``error`` is torch reporting a dead or hung one.

    A killed worker reaches the main process in one of three ways: torch's liveness check
    ("exited unexpectedly"), its SIGCHLD handler ("killed by signal"), or, when the dead worker
    was still passing a batch's tensors by file descriptor, a ConnectionError/EOFError from
    unpickling them. An exception raised by the dataset inside a worker is re-raised by torch as
    ``Caught ... in DataLoader worker process``: that is the user's error and is not translated
    (None), nor is anything else.
    """
    text = str(error)
    if text.startswith("Caught "):
        return None
    if isinstance(error, (ConnectionError, EOFError)):
        return "died while passing a batch to the main process"
    if text.startswith("DataLoader worker") and ("exited unexpectedly" in text or "killed by signal" in text):
        return "died"
    if text.startswith("DataLoader timed out after"):
        return "hung (no batch within timeout=)"
    return None
