"""One fetcher per rank: reads the units the coming steps need, in the order they will be used.

Algorithm. The loader's main process tells the :class:`Prefetcher` each step it hands to a worker
(:meth:`Prefetcher.plan`, with the oldest step not yet delivered). It computes, with
:class:`resumable_data.plan.reads.ReadSchedule`, the units of steps ``[delivered, handed +
lookahead)`` from their record ids (``records_of(step)``, the loader's pure order; each step's
units computed once per pass; with ``lookahead=None`` the window is sized by bytes
instead: at least 64 steps, further within the epoch while its units take at most half of
``cache_bytes``, :mod:`.depth`), promises the units of the steps already handed out (a ``want`` file:
:mod:`.cache`) and wakes its scheduler thread, which walks the units still needed (from the oldest undelivered step) and
keeps at most ``concurrency`` ranged reads in flight, the unit needed soonest first (a thread
pool; each read is
:meth:`ReadAheadSource.fetch_unit`: one GET of the unit's span whose bytes must hash to the unit's
pinned digest where the version has one (``rd.pin``'s default ``hash="content"``:
:mod:`..unit_digests`), else a HEAD whose size and ETag must match the pinned identity, then the GET). Each unit is written to the cache directory (temporary name,
then rename) and its promise dropped.

Fetch units (:class:`~.config.ReadUnit`). ``RECORD_BATCH``: one fetch per unit (an IPC record
batch, a Parquet row group). ``SHARD``: one fetch per shard object, the whole object in one
request, every unit of it written to the cache from those bytes (for small objects, where a
request costs more than the bytes a step does not need). Both are planned by the same
:mod:`resumable_data.plan.reads` over *fetch units*: a fetch unit's first record id is its
first unit's (for ``SHARD`` the shard's first record id), so a step's fetch units are
``step_units(records, fetch_starts)``; the cache, the promises, Belady's rule and the checks
below work on fetch units (a shard is promised, evicted and counted whole, at its object size).
``AUTO`` is resolved to one of the two at construction, by :func:`.unit_choice.choose_unit` from
the object sizes of the shards that steps ``[0, lookahead)`` read and ``cache_bytes``; the
result is :attr:`Prefetcher.unit` (with :attr:`Prefetcher.choice`, the reason) and stays for
the loader's life.

Joined requests (``RECORD_BATCH``). When the scheduler starts the read of unit ``u`` (next needed
by step ``s``), it joins to the same request the units on either side of ``u`` while each is: of
the same shard, with a span that starts where its neighbour's ends (no byte in between), still to
fetch and next needed by step ``s + max(1, lookahead // 4)`` at the latest, within the budget
without evicting (or needed by a step in flight), and the request stays within
:data:`MAX_REQUEST_BYTES`. One checked read (:meth:`ReadAheadSource.fetch_run`: one GET of the joined
span, each unit checked against its digest; without digests a HEAD first) then writes each unit's own bytes, so the cache, promises and Belady's
rule see the same units as before; only the count of requests falls (a sequential or window order
reads runs of neighbouring record batches). ``concurrency`` bounds requests in flight.

Eviction (Belady). The cache holds at most ``cache_bytes`` (fetches in flight count): before
fetching a unit that does not fit, the resident unit whose next use is furthest (none in the
window counts as infinitely far) is evicted, unless it is needed sooner than the unit to fetch,
in which case fetching waits for the loader to move on. A unit needed by a step already handed to
a worker (in flight) is never evicted, and is fetched even past the budget (the budget is then
exceeded by at most the units of the steps in flight).

Progress. The first step of each pass (a fresh loader, a resume, a new epoch) waits for its
units from the store; a tqdm bar over their bytes appears on stderr if that takes more than two
seconds (:mod:`.progress`; never where stderr is not a terminal).

Content check. Where the version pins each shard's content hash (``hash="content"``, the default),
a whole object read ahead (``SHARD``) is one GET through the handle opened with the shard, no HEAD,
and must hash (xxh3-128) to it before any of its units is written (pinned by size or ETag: a HEAD
whose size and ETag must be those recorded at open, then the GET), and a unit read by range (``RECORD_BATCH``) must hash to its pinned unit digest
(:mod:`..unit_digests`; checked by the source's read, again when a step takes it from the cache): an
object replaced after the open, even between a HEAD and its GET, and a store answering with other
bytes never reach a batch. Without digests (pinned with ``hash="size"`` or ``"etag"``, or before
manifest schema 3) units read by range are checked against the ETag by a HEAD, then decoded and
validated.

Faults. A fetch that fails (a store still down after its retries, an object that changed) writes
``k.err`` and drops the promise; the worker that needs unit ``k`` reads it itself and raises the
error with its step (:mod:`.cache`). The unit is fetched again when the next step is planned.

Guarantee: nothing here decides what a step delivers: a unit is the same bytes whether it came
from the cache or from the worker's own read (both checked against the pinned identity, then
decoded and validated before use), so batches and the loader's state (its cursor) are those of a
loader without read-ahead, at any worker count, before and after a resume (the planner starts at
the resumed step).

Cost: per handed-out step, ``records_of`` of one new step and one schedule over the window
(``O(lookahead * batch)``); per read (a unit or a run of neighbouring units) one request (the GET)
with unit digests, two (HEAD, GET) without; per shard read whole one (the GET) with its content
hash pinned, two (HEAD, GET) without; memory: the window's record ids.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, runtime_checkable

import numpy as np

from resumable_data.plan.reads import ReadSchedule, step_units
from resumable_data.sources.read_ahead.cache import LaterSweeps, UnitCache, make_cache_dir, seal
from resumable_data.sources.read_ahead.config import ReadAhead, ReadUnit
from resumable_data.sources.read_ahead.depth import MAX_STEPS, window_steps
from resumable_data.sources.read_ahead.depth import SHARE_OF_BUDGET as DEPTH_SHARE
from resumable_data.sources.read_ahead.progress import FirstUnits
from resumable_data.sources.read_ahead.unit_choice import UnitChoice, choose_unit

__all__ = ["MAX_REQUEST_BYTES", "Prefetcher", "ReadAheadSource"]

_log = logging.getLogger(__name__)

#: The most bytes one request joining neighbouring record batches reads (16 MiB: object stores
#: serve ranged GETs of 8-16 MB at full speed; a guard, not a measured optimum).
MAX_REQUEST_BYTES = 16 << 20


#: Seconds after a fetcher starts when it sweeps abandoned cache directories again, and again at twice
#: and four times that, then every four times that (torch's workers check for a dead parent every
#: 5 s; see :mod:`.cache`).
SWEEP_AGAIN_S = 20.0


@runtime_checkable
class ReadAheadSource(Protocol):
    """What a source offers read-ahead (``rd.ArrowShards`` over a remote store)."""

    def unit_starts(self) -> np.ndarray: ...

    def unit_spans(self) -> list[tuple[int, int] | None]: ...

    def fetch_unit(self, k: int) -> bytes: ...

    def unit_shards(self) -> np.ndarray: ...

    def shard_size(self, j: int) -> int | None: ...

    def fetch_shard(self, j: int, digest: str | None = None) -> bytes: ...

    def fetch_run(self, first: int, last: int) -> bytes: ...

    def attach_read_ahead(self, cache: UnitCache | None) -> None: ...


class Prefetcher:
    """The rank's fetcher (module docstring); :meth:`close` stops it and removes its directory."""

    def __init__(
        self,
        source: ReadAheadSource,
        config: ReadAhead,
        records_of: Callable[[int], np.ndarray],
        digests: Sequence[str | None] | None = None,
    ) -> None:
        self.config = config
        #: per shard, the pinned xxh3-128 of its object's bytes (None: not pinned by content): a whole
        #: shard read ahead (``SHARD``) must hash to it before any unit of it is written
        self._digests = list(digests) if digests is not None else None
        self._source = source
        self._records_of = records_of
        starts, self._spans = source.unit_starts(), source.unit_spans()
        shard = source.unit_shards()
        self._unit_shard: list[int] = shard.tolist()
        by_shard = np.flatnonzero(np.r_[True, shard[1:] != shard[:-1]]) if len(shard) else np.zeros(0, np.int64)
        shard_ids = [int(shard[f]) for f in by_shard.tolist()]
        ends = np.append(by_shard, len(starts)).tolist()
        whole: list[int | None] = [  # per shard: its object size, None where it cannot be read whole
            None
            if any(self._spans[k] is None for k in range(ends[g], ends[g + 1]))
            else source.shard_size(shard_ids[g])
            for g in range(len(shard_ids))
        ]
        #: how :class:`~.config.ReadUnit` ``AUTO`` was resolved (None: the unit was given)
        self.choice: UnitChoice | None = None
        if config.unit is ReadUnit.AUTO:
            window: set[int] = set()  # the shards the first `lookahead` steps read
            for s in range(config.steps):
                window.update(step_units(records_of(s), starts[by_shard]).tolist())
            self.choice = choose_unit([whole[g] for g in sorted(window)], config.cache_bytes)
            _log.debug("resumable_data: read-ahead reads by %s (auto: %s)", self.choice.unit.value, self.choice.reason)
        #: the fetch unit in use: ``config.unit``, or what ``AUTO`` resolved to
        self.unit = config.unit if self.choice is None else self.choice.unit
        if self.unit is ReadUnit.SHARD:
            first = by_shard
            self._shard: list[int] | None = shard_ids
        else:
            first = np.arange(len(starts), dtype=np.int64)
            self._shard = None
        bounds = np.append(first, len(starts)).tolist()
        #: fetch unit g: the units ``members[g]``, from record id ``starts[g]`` on
        self._members = [list(range(bounds[g], bounds[g + 1])) for g in range(len(first))]
        self._starts = starts[first]
        self._sizes: list[int | None] = list(whole) if self._shard is not None else []
        for members in self._members if self._shard is None else []:
            span = self._spans[members[0]]
            self._sizes.append(None if span is None else span[1])  # None: not read by range, the step reads it
        parent = None if config.cache_dir is None else str(config.cache_dir)
        root, self._owner_fd = make_cache_dir(parent)
        self.cache = UnitCache(root)
        # again later: a job restarted right after a kill starts while the killed process's loader
        # workers (which hold its lock) are still noticing that their parent is gone
        self._sweep_again = LaterSweeps(parent, SWEEP_AGAIN_S)
        self._units: dict[int, np.ndarray] = {}  # step -> its units (plan/reads.step_units)
        self._epoch_end: int | None = None  # the step after the current pass's epoch (None: unknown)
        self._cond = threading.Condition()
        self._schedule: ReadSchedule | None = None
        self._handed = -1  # newest step handed out
        self._delivered = 0  # steps before it reached the loop
        self._stalled = False  # the budget stopped the fetcher: wake it when the loop moves on
        self._replan_at = 0
        self._resident: dict[int, int] = {}  # unit -> bytes
        self._inflight: set[int] = set()
        self._busy = 0  # requests in flight (a request may read several neighbouring units)
        self._promised: set[int] = set()
        self._failed: set[int] = set()
        self._used = 0
        self._closed = False
        self._release_on_exit = False  # close() ran in the scheduler thread: the loop releases
        self._progress: FirstUnits | None = None  # the bar of a pass's first step (.progress)
        #: counters: fetch units and bytes fetched, the requests that read them, units evicted,
        #: fetch units whose read failed and the most bytes the cache held (fetches in flight included)
        #: and the most steps a window reached past the newest step handed out
        self.stats = {
            "units": 0,
            "bytes": 0,
            "requests": 0,
            "evicted": 0,
            "failed": 0,
            "peak_bytes": 0,
            "window_steps": 0,
        }
        self._pool = ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix="rd-read-ahead")
        self._thread = threading.Thread(target=self._run, name="rd-read-ahead", daemon=True)
        self._thread.start()
        source.attach_read_ahead(self.cache)

    def __repr__(self) -> str:
        how = "" if self.choice is None else f" (auto: {self.choice.reason})"
        c = self.config
        return (
            f"Prefetcher(unit={self.unit.value}{how}, lookahead={c.lookahead}, concurrency={c.concurrency}, "
            f"cache_bytes={c.cache_bytes}, stats={self.stats})"
        )

    # -- the loader's side (main thread) -------------------------------------------------------------
    def new_pass(self, epoch_end: int | None = None) -> None:
        """A new pass (a resume, another plan), of an epoch ending before step ``epoch_end`` (None:
        unknown, then the window is the 64-step floor): each step's units are computed again."""
        self._units.clear()
        self._epoch_end = epoch_end
        with self._cond:
            self._schedule = None

    def plan(self, step: int, delivered: int) -> None:
        """Step ``step`` is handed to a worker; steps before ``delivered`` reached the loop. The
        window (:meth:`_window_stop`) is planned again every ``lookahead // 4`` steps (16 with
        ``lookahead=None``; the units of each handed-out step are promised at once)."""
        lo = min(delivered, step)
        sched = self._schedule
        replan = sched is None or step >= self._replan_at or lo < sched.first or step not in self._units
        if sched is None or replan:
            for s in [s for s in self._units if s < lo]:
                del self._units[s]
            units = [self._step_units(s) for s in range(lo, self._window_stop(lo, step))]
            sched = ReadSchedule(lo, tuple(units))
            self.stats["window_steps"] = max(self.stats["window_steps"], sched.stop - step)
            self._replan_at = step + max(1, self.config.steps // 4)
        wake = replan
        with self._cond:
            if self._progress is not None and delivered > self._progress.step:
                self._progress.close()  # the loop has that step: nothing left to show
                self._progress = None
            if sched is not None and self._schedule is None:  # a pass's first step: a bar if it waits long
                waiting = {
                    u: size
                    for u in self._units[step].tolist()
                    if (size := self._sizes[u]) is not None and u not in self._resident
                }
                if waiting:
                    if self._progress is not None:
                        self._progress.close()
                    self._progress = FirstUnits(step, waiting)
            for u in self._units[step].tolist():  # in flight: promised before a worker asks for it
                if self._sizes[u] is None or u in self._resident or u in self._promised:
                    continue
                self._promised.add(u)
                self._failed.discard(u)  # a promised unit is fetched (again)
                for k in self._members[u]:
                    _touch(self.cache.want_path(k))
                wake = True
            self._schedule, self._handed = sched, step
            moved, self._delivered = delivered > self._delivered, delivered
            wake = wake or (self._stalled and moved)
            if replan:
                self._failed.clear()  # failed units are tried again
            if wake and any(
                u not in self._resident and u not in self._inflight and self._sizes[u] is not None
                for u in sched.order.tolist()
            ):
                self._cond.notify_all()  # something to fetch (a wake-up costs the loop the GIL)

    def _step_units(self, s: int) -> np.ndarray:
        """The fetch units step ``s`` reads, in order of first need (computed once per pass)."""
        u = self._units.get(s)
        if u is None:
            u = self._units[s] = step_units(self._records_of(s), self._starts)
        return u

    def _window_stop(self, lo: int, step: int) -> int:
        """The step after the window planned from ``lo`` when step ``step`` is handed out: ``step +
        lookahead``, or, with ``lookahead=None``, sized by bytes (:func:`.depth.window_steps`: at
        least 64 steps ahead; further within the epoch while the window's units take at most half of
        ``cache_bytes``)."""
        floor = step + self.config.steps
        end = self._epoch_end
        if self.config.lookahead is not None or end is None or end <= floor:
            return floor
        most = min(end, step + MAX_STEPS)
        limit = int(self.config.cache_bytes * DEPTH_SHARE)
        steps = (self._step_units(s) for s in range(lo, most))
        return lo + window_steps(steps, self._sizes, floor - lo, most - lo, limit)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no fetch is in flight (at most ``timeout`` seconds); whether it is idle."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._inflight or self._closed, timeout)

    def close(self) -> None:
        """Stop fetching and remove the cache directory (processes that mapped units keep them; a read
        still in flight removes what it wrote when it ends)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            if self._progress is not None:
                self._progress.close()
                self._progress = None
            self._cond.notify_all()
        if threading.current_thread() is self._thread:
            # a finalizer the garbage collector ran in the scheduler thread, possibly inside the pool's
            # ``submit`` (which holds the pool's locks: shutting it down here would deadlock); the
            # loop ends at its next check and releases the pool and the cache from there
            self._release_on_exit = True
            return
        self._release()

    def _release(self) -> None:
        self._source.attach_read_ahead(None)
        self._sweep_again.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)  # a read in its retries ends on its own
        shutil.rmtree(self.cache.root, ignore_errors=True)
        if self._owner_fd is not None:  # after the removal: a sweep never sees it unlocked
            os.close(self._owner_fd)
            self._owner_fd = None

    # -- the scheduler thread ------------------------------------------------------------------------
    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                self._schedule_fetches()
                self._cond.wait()
        if self._release_on_exit:
            self._release()

    def _schedule_fetches(self) -> None:
        """Under the lock: start fetches in order of first use while the budget (Belady) allows."""
        sched = self._schedule
        if sched is None:
            return
        at, budget = max(sched.first, self._delivered), self.config.cache_bytes
        protected = sched.units_between(at, self._handed + 1)
        self._stalled = False
        todo = []  # (next use, unit): the units still to fetch that a step from `at` on reads
        for u in sched.order.tolist():
            if self._sizes[u] is None or u in self._resident or u in self._inflight or u in self._failed:
                continue
            when = sched.next_use(u, at)
            if when is not None:  # else read only by steps the loop already has
                todo.append((when, u))
        todo.sort()  # soonest first: the units of steps in flight lead
        pending = {u: when for when, u in todo}  # unit -> next use: what a request may join
        taken: set[int] = set()
        for when, u in todo:
            if u in taken:
                continue  # read with a neighbour
            if self._busy >= self.config.concurrency:
                return
            size = self._sizes[u] or 0
            while self._used + size > budget:
                victim = self._victim(sched, at, protected)
                if victim is None:
                    break
                v_when = sched.next_use(victim, at)
                if v_when is not None and v_when <= when:
                    break  # everything resident is needed sooner than u
                self._evict(victim)
            if self._used + size > budget and u not in protected:
                self._stalled = True
                return  # wait for the loader to move on
            self._used += size
            run = [u] if self._shard is not None else self._join_neighbours(u, when, pending, taken, protected)
            self.stats["peak_bytes"] = max(self.stats["peak_bytes"], self._used)
            self._inflight.update(run)
            taken.update(run)
            self._busy += 1
            self._pool.submit(self._fetch, run)

    def _join_neighbours(
        self, u: int, when: int, pending: dict[int, int], taken: set[int], protected: set[int]
    ) -> list[int]:
        """Under the lock, ``u``'s bytes counted: ``u`` with the neighbouring units read by the same
        request (the module docstring's rule), their bytes counted too; in file order."""
        run, total = [u], self._sizes[u] or 0
        horizon = when + max(1, self.config.steps // 4)
        for direction in (1, -1):
            k = u
            while True:
                n = k + direction
                lo, hi = (k, n) if direction == 1 else (n, k)
                size = self._sizes[n] if 0 <= n < len(self._sizes) else None
                if (
                    size is None
                    or n in taken
                    or pending.get(n, horizon + 1) > horizon
                    or self._unit_shard[lo] != self._unit_shard[hi]
                    or _end(self._spans[lo]) != _start(self._spans[hi])
                    or total + size > MAX_REQUEST_BYTES
                    or (self._used + size > self.config.cache_bytes and n not in protected)
                ):
                    break
                self._used += size
                total += size
                run.append(n)
                k = n
        return sorted(run)

    def _victim(self, sched: ReadSchedule, at: int, protected: set[int]) -> int | None:
        """The resident unit, not needed by a step in flight, whose next use is furthest."""
        best, best_when = None, -1
        for v in self._resident:
            if v in protected:
                continue
            w = sched.next_use(v, at)
            w = 1 << 62 if w is None else w
            if w > best_when:
                best, best_when = v, w
        return best

    def _evict(self, v: int) -> None:
        self._used -= self._resident.pop(v)
        self.stats["evicted"] += 1
        for k in self._members[v]:
            _unlink(self.cache.unit_path(k))

    def _fetch(self, run: list[int]) -> None:
        """In a pool thread: read fetch units ``run`` (one, or neighbouring units of one shard) by one
        request, write their units to the cache, drop their promises."""
        ok = False
        ks = [k for u in run for k in self._members[u]]
        try:
            if self._shard is not None:
                j = self._shard[run[0]]
                # with the pinned content hash: one GET, no HEAD, the bytes refused unless they hash to it
                # (an object replaced after the open, a store answering with other bytes): nothing is
                # written, and the step's own ranged read checks the object again
                data, base = self._source.fetch_shard(j, self._digests[j] if self._digests is not None else None), 0
            elif len(ks) == 1:
                data, base = self._source.fetch_unit(ks[0]), _start(self._spans[ks[0]])
            else:
                data, base = self._source.fetch_run(ks[0], ks[-1]), _start(self._spans[ks[0]])
            view = memoryview(data)
            for k in ks:
                offset, length = self._spans[k]  # type: ignore[misc]  # None was excluded at init
                self._write(k, view[offset - base : offset - base + length])
            ok = True
        except Exception as exc:  # the worker that needs a unit reads it itself and raises the error there
            _log.debug("resumable_data: read-ahead of units %s failed (%s); the step that needs one reads it", run, exc)
            for k in ks:
                _touch(self.cache.err_path(k))
        with self._cond:
            self._busy -= 1
            self.stats["requests"] += 1
            for u in run:
                self._inflight.discard(u)
                size = self._sizes[u] or 0
                if ok:
                    if self._progress is not None:
                        self._progress.landed(u)
                    self._resident[u] = size
                    self.stats["units"] += 1
                    self.stats["bytes"] += size
                else:
                    self._used -= size
                    self._failed.add(u)
                    self.stats["failed"] += 1
                self._promised.discard(u)
            for k in ks:
                if ok:
                    _unlink(self.cache.err_path(k))
                _unlink(self.cache.want_path(k))
            if self._closed:
                # closed while this read ran: its files may have landed after (or during) close()'s
                # removal of the directory; the last read to end removes what is left
                shutil.rmtree(self.cache.root, ignore_errors=True)
            self._cond.notify_all()

    def _write(self, k: int, data: bytes | memoryview) -> None:
        """Unit ``k``'s bytes and their check (:func:`.cache.seal`) into the cache: a temporary name,
        then renamed (readers see all or none)."""
        tmp = os.path.join(self.cache.root, f".{k}.{threading.get_ident()}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.write(seal(k, data))
        os.replace(tmp, self.cache.unit_path(k))


def _start(span: tuple[int, int] | None) -> int:
    return -1 if span is None else span[0]


def _end(span: tuple[int, int] | None) -> int:
    return -2 if span is None else span[0] + span[1]


def _touch(path: str) -> None:
    try:
        with open(path, "wb"):
            pass
    except OSError:
        pass


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
