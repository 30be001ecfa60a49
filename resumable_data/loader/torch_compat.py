"""The one place that touches torch's private ``DataLoader`` internals.

rd builds on torch's ``DataLoader`` (never a fork of it), but three things need its internals:
telling a multi-process iterator apart, shutting its workers down at once when a pass is closed
or a worker died, and dropping a persistent pool that a dead worker broke. Recognising a dead or
hung worker means matching the texts torch raises. Everything of that kind lives here, and
``tests/loader/test_torch_compat.py`` fails loudly, naming the attribute, on a torch whose
internals moved.
"""

from __future__ import annotations

from typing import Any

import torch.utils.data as tud
from torch.utils.data._utils.collate import default_collate, default_convert

__all__ = [
    "default_collate",
    "default_convert",
    "drop_persistent_iterator",
    "is_multiprocess_iter",
    "shutdown_workers",
    "worker_fault",
]

#: torch's multi-process iterator class (private).
MULTIPROCESS_ITER = tud.dataloader._MultiProcessingDataLoaderIter


def is_multiprocess_iter(it: Any) -> bool:
    """Whether ``it`` is torch's multi-process ``DataLoader`` iterator."""
    return isinstance(it, MULTIPROCESS_ITER)


def shutdown_workers(it: Any) -> None:
    """Shut the worker processes of a multi-process iterator down now (no-op for anything else)."""
    if is_multiprocess_iter(it):
        it._shutdown_workers()


def drop_persistent_iterator(torch_loader: tud.DataLoader) -> None:
    """Forget a persistent pass, so the next ``iter()`` starts a fresh worker pool."""
    torch_loader._iterator = None


def worker_fault(error: BaseException) -> str | None:
    """What happened to a worker process, if ``error`` is torch reporting a dead or hung one.

    A killed worker reaches the main process in one of three ways: torch's liveness check
    ("exited unexpectedly"), its SIGCHLD handler ("killed by signal"), or, when the dead worker
    was still passing a batch's tensors by file descriptor, a ConnectionError/EOFError from
    unpickling them. An exception raised by the dataset inside a worker is re-raised by torch as
    ``Caught ... in DataLoader worker process``: that is the user's error and is not translated.
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
