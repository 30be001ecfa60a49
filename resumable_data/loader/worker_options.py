"""The worker arguments (``num_workers``, ``timeout``, ``multiprocessing_context``, ``prefetch_factor``,
``persistent_workers``) and torchdata's ``snapshot_every_n_steps``, checked before anything is built.

Algorithm. torch's own rules on these arguments, in torch's order and with its texts
(:func:`~.torch_rules.torch_rule`), plus the bounds torch does not check and then fails on far from
the call: at most :data:`MAX_NUM_WORKERS` workers (torch forks them in a loop at each ``iter()``), a
``timeout`` a queue accepts (NaN and past ``threading.TIMEOUT_MAX`` refused), a ``prefetch_factor`` in
``[1, MAX_PREFETCH_FACTOR]`` (torch accepts 0 and asserts later; a huge depth fills the queue for
ever).

Guarantee. None of these arguments changes what a position maps to: they are checked, never part of
the config or the state, so a loader resumes under other worker settings. A refused value raises a
:class:`rd.ConfigError` (or :class:`rd.ConfigTypeError`) before any worker exists.

Cost. O(1); torch is imported only when a ``multiprocessing_context`` is given.
"""

from __future__ import annotations

import numbers
import operator
import threading
from typing import Any

import numpy as np

from resumable_data.errors import ConfigError, ConfigTypeError, describe
from resumable_data.loader.torch_rules import torch_rule

__all__ = ["MAX_NUM_WORKERS", "MAX_PREFETCH_FACTOR", "check_snapshot_every", "check_worker_options"]

#: The deepest per-worker prefetch accepted (torch fills prefetch_factor * num_workers slots in a loop at each iter()).
MAX_PREFETCH_FACTOR = 1 << 16
#: The most worker processes one loader starts (torch forks num_workers processes in a loop at each iter(): 2**63
#: forks until the machine gives out, never reaching a batch).
MAX_NUM_WORKERS = 1 << 10


def check_snapshot_every(value: Any) -> int | None:
    """torchdata's ``snapshot_every_n_steps``: None or an integer >= 0 (it changes nothing here:
    the state is exact after every batch); torchdata checks nothing, rd refuses other values."""
    if isinstance(value, np.integer):
        value = int(value)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ConfigError(
            describe(
                "snapshot_every_n_steps",
                value,
                "None or an integer >= 0",
                "snapshot_every_n_steps=1 (or leave it out: it changes nothing here)",
            )
        )
    return value


def check_worker_options(
    num_workers: Any, timeout: Any, multiprocessing_context: Any, prefetch_factor: Any, persistent_workers: Any
) -> None:
    """torch's rules on the worker arguments, with its texts, checked before anything is built
    (torch's start method names: ``torch.multiprocessing.get_all_start_methods()``)."""
    if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 0:
        raise torch_rule(
            "num_workers option should be non-negative",
            "num_workers",
            num_workers,
            "an integer >= 0",
            "pass an int, e.g. num_workers=2 (worker processes), or num_workers=0 to load in the main process",
        )
    if num_workers > MAX_NUM_WORKERS:
        raise ConfigError(
            describe(
                "num_workers",
                num_workers,
                f"an integer in [0, {MAX_NUM_WORKERS}] (worker processes this loader starts)",
                "pass num_workers=min(os.cpu_count(), 8)",
            )
        )
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or timeout != timeout:  # NaN too
        raise ConfigError(
            describe(
                "timeout",
                timeout,
                "a number of seconds >= 0 (0: wait forever)",
                "pass timeout=0 or a positive number of seconds",
            )
        )
    if timeout < 0:
        raise torch_rule(
            "timeout option should be non-negative",
            "timeout",
            timeout,
            "seconds >= 0 (0: wait forever)",
            "pass timeout=0 or a positive number of seconds",
        )
    if not timeout <= threading.TIMEOUT_MAX:  # the worker queue's get() raises OverflowError past it (NaN: refused)
        raise ConfigError(
            describe(
                "timeout",
                timeout,
                f"seconds in [0, {threading.TIMEOUT_MAX:.0f}] (0: wait forever)",
                "pass timeout=0 to wait forever",
            )
        )
    if num_workers == 0 and prefetch_factor is not None:
        raise torch_rule(
            "prefetch_factor option could only be specified in multiprocessing",
            "prefetch_factor",
            prefetch_factor,
            "None with num_workers=0",
            "drop prefetch_factor= or pass num_workers > 0",
        )
    if prefetch_factor is not None and (
        isinstance(prefetch_factor, bool) or not isinstance(prefetch_factor, numbers.Integral)
    ):
        raise ConfigTypeError(
            describe(
                "prefetch_factor",
                prefetch_factor,
                "an integer >= 0 (batches loaded in advance per worker) or None",
                "pass prefetch_factor=2",
            )
        )
    factor = None if prefetch_factor is None else operator.index(prefetch_factor)  # an Integral: exact
    if factor is not None and factor < 0:
        raise torch_rule(
            "prefetch_factor option should be non-negative",
            "prefetch_factor",
            prefetch_factor,
            "an integer >= 0 (batches loaded in advance per worker)",
            "pass prefetch_factor=2",
        )
    if factor is not None and not 1 <= factor <= MAX_PREFETCH_FACTOR:
        # torch accepts 0 and then asserts in its worker iterator; a huge depth loops for ever filling the queue
        raise ConfigError(
            describe(
                "prefetch_factor",
                prefetch_factor,
                f"an integer in [1, {MAX_PREFETCH_FACTOR}] (batches loaded in advance per worker) or None",
                "pass prefetch_factor=2",
            )
        )
    if persistent_workers and num_workers == 0:
        raise torch_rule(
            "persistent_workers option needs num_workers > 0",
            "persistent_workers",
            persistent_workers,
            "False with num_workers=0",
            "drop persistent_workers= or pass num_workers > 0",
        )
    if multiprocessing_context is None:
        return
    if num_workers == 0:
        raise torch_rule(
            "multiprocessing_context can only be used with multi-process loading (num_workers > 0), but "
            "got num_workers=0",
            "multiprocessing_context",
            multiprocessing_context,
            "None with num_workers=0",
            "drop multiprocessing_context= or pass num_workers > 0",
        )
    import multiprocessing.context

    import torch.multiprocessing

    valid = torch.multiprocessing.get_all_start_methods()
    if isinstance(multiprocessing_context, str):
        if multiprocessing_context not in valid:
            raise torch_rule(
                f"multiprocessing_context option should specify a valid start method in {valid!r}, but got "
                f"multiprocessing_context={multiprocessing_context!r}",
                "multiprocessing_context",
                multiprocessing_context,
                f"one of {valid}",
                f"pass multiprocessing_context={valid[0]!r}",
            )
    elif not isinstance(multiprocessing_context, multiprocessing.context.BaseContext):
        raise torch_rule(
            "multiprocessing_context option should be a valid context object or a string specifying the start method",
            "multiprocessing_context",
            type(multiprocessing_context).__name__,
            f"a start method's name (one of {valid}) or a multiprocessing context",
            "pass multiprocessing_context='spawn' or multiprocessing.get_context('spawn')",
            ConfigTypeError,
        )
