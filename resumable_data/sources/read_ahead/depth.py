"""How far ahead the fetcher plans: ``lookahead`` steps (default 64), or, with ``lookahead=None``, as far as the bytes allow.

Algorithm (:func:`window_steps`, pure). With ``rd.ReadAhead(lookahead=N)`` the fetcher plans steps
``[lo, handed + N)`` (``lo``: the oldest step not yet delivered; ``handed``: the newest step handed
to a worker), as it always did. With ``lookahead=None`` the window is sized by bytes:

1. it always holds steps ``[lo, handed + BASE_STEPS)`` (64 steps: the floor; like an explicit
   ``lookahead``, it runs into the next epoch at an epoch's end, so a loader that goes on to the
   next epoch finds its first steps' units there);
2. past the floor it takes one more step at a time while the *fetch units* (record batches or
   whole shards, :class:`~.config.ReadUnit`) read by the steps planned, each counted once at its
   size, resident or not, take at most ``SHARE_OF_BUDGET`` (half) of ``cache_bytes``;
3. and it never goes past the end of the current epoch (the deeper read-ahead stays in the epoch
   the loader is iterating: a run that stops at the epoch's end reads no more of the next epoch
   than with ``lookahead=64``), nor past ``handed + MAX_STEPS``.

Why bytes. A step-count window reads as many objects ahead as ``lookahead`` steps happen to
span: with whole shards of 8,192 rows and batches of 256, 64 steps are about 2.5 objects, so at
most two or three GETs are in flight whatever ``concurrency`` allows, and a sequential pass waits
on them (``docs/object-storage.md#against-litdata-and-mosaicml-streaming``). Sized by bytes, the
window holds as many objects as half the budget does, and ``concurrency`` of them are read at once.

Interplay. The window only makes next uses known further ahead; what is fetched and evicted is still
decided by the fetcher's Belady rule (:mod:`.fetcher`): a resident unit is evicted only for a unit
needed sooner, so a deeper window never evicts a unit needed sooner to fetch one needed later; it
stops (the fetcher waits) where everything resident is needed sooner. Bytes read ahead beyond the
floor are at most half the budget and all belong to the current epoch, where the loader reads them
before the epoch ends (unless it stops early). A global shuffle reads nearly every fetch unit at
every step: its floor's units already take the dataset, so below a budget of twice the dataset the
window is the floor (nothing changes), and above it every unit is read once anyway.

Guarantee: the window changes which requests are made and when, never a batch or the loader's
state (a unit is the same checked bytes from the cache or the step's own read).

Measured (``docs/object-storage.md#read-ahead-depth``): on the benchmarks' store (moto behind a
Python proxy, limited in aggregate bandwidth) the deeper window requests every object of the epoch
at once, they share the bandwidth and the one needed next lands among the last (0.35-0.5 s
instead of 0.15-0.25 s), so it gained nothing there; it is for stores whose bandwidth grows with
the requests in flight (S3 serves each connection at a bounded rate). Hence not the default.

Cost: per re-plan (every ``BASE_STEPS // 4`` steps), the window's steps'
fetch units (each step computed once per pass) and one pass over them: ``O(window * units per
step)``; the window is at most ``MAX_STEPS`` steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["BASE_STEPS", "MAX_STEPS", "SHARE_OF_BUDGET", "window_steps"]

#: The floor of the window sized by bytes, in steps ahead of the newest step handed out (and the
#: steps ``ReadUnit.AUTO`` looks at, the re-plan interval's and the joined requests' base).
BASE_STEPS = 64
#: The window's fetch units take at most this share of ``cache_bytes`` (past the floor); the other
#: half holds units already used that a later step reads again.
SHARE_OF_BUDGET = 0.5
#: The deepest window, in steps ahead of the newest step handed out (a guard on planning cost for
#: small records: 1,024 steps of 256 records are a few ms of planning per re-plan).
MAX_STEPS = 1024


def window_steps(steps: Iterable[Iterable[int]], sizes: Sequence[int | None], floor: int, most: int, limit: int) -> int:
    """How many of ``steps`` (the fetch units of steps ``lo, lo + 1, ...``; read lazily) to plan:
    the first ``floor`` always, then each next one while, with it, the distinct fetch units of the
    planned steps take at most ``limit`` bytes (``sizes[u]``; None, a unit not read ahead, counts
    0), up to ``most`` steps in all (``most < floor`` counts as ``floor``)."""
    seen: set[int] = set()
    used = 0
    n = 0
    for units in steps:
        if n >= max(floor, most):
            break
        grown = used
        new: set[int] = set()
        for u in units:
            u = int(u)
            if u not in seen and u not in new:
                new.add(u)
                grown += sizes[u] or 0
        if n >= floor and grown > limit:
            break
        seen.update(new)
        used = grown
        n += 1
    return n
