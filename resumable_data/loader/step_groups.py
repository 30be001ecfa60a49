"""Several steps per worker request: fewer messages and wake-ups per batch for cheap batches.

With workers, torch's ``DataLoader`` sends a worker one request per batch and gets one reply per
batch: per batch a message each way, each a write that wakes a sleeping process, plus torch's
worker-loop and iterator steps in Python. For a batch that costs about 0.1 ms to make (an
``rd.ArrowShards`` gather of 256 short token lists) that machinery costs more than the batch: on
a 2-CPU machine about 0.05 ms of the main process's CPU and 0.04 ms of a worker's per batch,
most of it the wake-ups (docs/performance.md, "Two workers on two CPUs").

Algorithm. Where batches are made by rd's own gathers and nothing else (:func:`steps_per_request`:
an ``rd.ArrowShards`` or ``rd.Mixture`` dataset, packed or not, with the default collate: no
``collate_fn``, ``arrow_collate`` or ``transform``; with workers and no ``timeout``), torch's
``DataLoader`` is given :class:`GroupedSampler` (each request is a list of up to
:data:`STEPS_PER_REQUEST` consecutive requests of the step sampler, never past the pass's end)
and :class:`GroupedFetcher` (a list of requests gives the list of the step fetcher's results, in
order). One message then carries up to four batches each way.
A step whose fetch (or packing, :class:`~.transport.WorkerCollate`) raises becomes torch's
``ExceptionWrapper`` in its place in the list, and the rest of the request is still fetched: the
main process (:class:`Ungrouped`) re-raises it when the loop reaches that step and delivers the
next step at the next ``next()``, as with one step per request.

Guarantee. The batches, their order, the cursor and the state are those of one step per
request: each step is fetched by the same fetcher from the same request, and the loop is handed
the steps one at a time; only when a step is fetched changes. ``prefetch_factor`` keeps torch's
meaning in requests: a worker holds at most ``prefetch_factor`` requests, so up to
``prefetch_factor * STEPS_PER_REQUEST`` batches, ahead (their raw columns only: with user code,
whose batches may be large, requests stay one step each). With ``timeout`` set, requests stay one
step each, so the timeout still bounds the wait for one batch.

Cost. Main process: one list per request and a ``deque`` pop per batch; a worker: one
``try`` per step. A pass's first batch waits for its request's (up to four) batches.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from torch.utils.data import Dataset

from resumable_data.loader import torch_compat
from resumable_data.loader.fetch_mode import FetchMode

__all__ = ["STEPS_PER_REQUEST", "GroupedFetcher", "GroupedSampler", "Ungrouped", "steps_per_request"]

#: Steps per worker request where batches are rd's own gathers (measured on 2 CPUs, 2 workers,
#: prefetch_factor=2, whole passes: CPU per batch in the main process and the workers 0.086 / 0.322 ms
#: at 1, 0.042 / 0.228 at 4, 0.037 / 0.308 at 8, at load 15; docs/performance.md)
STEPS_PER_REQUEST = 4


def steps_per_request(mode: FetchMode, user_code: bool, num_workers: int, timeout: float) -> int:
    """How many steps one worker request carries: :data:`STEPS_PER_REQUEST` where batches are rd's
    own gathers with the default collate (Arrow or packed fetch, ``user_code`` False: no
    ``collate_fn``, ``arrow_collate`` or ``transform``), workers run and no ``timeout`` bounds the
    wait for a batch; else 1 (torch's one request per batch)."""
    if num_workers > 0 and not timeout and mode in (FetchMode.ARROW, FetchMode.PACKED) and not user_code:
        return STEPS_PER_REQUEST
    return 1


class GroupedSampler:
    """The step sampler's requests in lists of up to ``steps`` consecutive ones (a pass's last
    list may be shorter); ``len()`` is the number of lists when no step is skipped."""

    def __init__(self, sampler: Any, steps: int) -> None:
        self.sampler = sampler
        self.steps = steps

    def __len__(self) -> int:
        return -(-len(self.sampler) // self.steps)

    def __iter__(self) -> Iterator[list[Any]]:
        group: list[Any] = []
        for request in self.sampler:
            group.append(request)
            if len(group) == self.steps:
                yield group
                group = []
        if group:
            yield group


class GroupedFetcher(Dataset):
    """``fetcher[[request, ...]]``: the step fetcher's result for each request, in order; a step
    whose fetch raises is torch's ``ExceptionWrapper`` in its place. ``dataset`` is the user's
    dataset (what ``get_worker_info().dataset`` shows)."""

    def __init__(self, fetcher: Any) -> None:
        self.fetcher = fetcher
        self.dataset = fetcher.dataset

    def __len__(self) -> int:
        return len(self.fetcher)

    def __getitem__(self, requests: list[Any]) -> list[Any]:
        fetch, out = self.fetcher.__getitem__, []
        for request in requests:
            try:
                out.append(fetch(request))
            except Exception:  # that step's error, re-raised when the loop reaches it
                out.append(torch_compat.worker_exception())
        return out


class Ungrouped:
    """``next_batch`` for a pass whose requests carry several steps: one step per call, in order,
    a step's error re-raised (torch's ``Caught ... in DataLoader worker process N``) when its
    turn comes."""

    __slots__ = ("_next", "_pending")

    def __init__(self, next_batch: Any) -> None:
        self._next = next_batch
        self._pending: deque[Any] = deque()

    def __call__(self, it: Any) -> Any:
        pending = self._pending
        if not pending:
            pending.extend(self._next(it))
        item = pending.popleft()
        if torch_compat.is_exception(item):
            item.reraise()
        return item
