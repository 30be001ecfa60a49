"""Seeding, saving and restoring the global generators cheaply, bit-identically.

What users get. Seeding the globals from a 64-bit ``key`` means exactly what
:func:`~.seed_copy.seed_globals_reference` gives for the run's seeding version
(:mod:`.sample_seeding`): version 3, ``random.setstate`` / ``np.random.set_state`` / torch's
``set_state`` of each generator's SplitMix64 state words; versions 1-2, ``random.seed(key)``,
``np.random.seed`` of the version's two words and ``torch.manual_seed(key & (2**63 - 1))``. Every
draw afterwards is the same number, and ``random.getstate()``, ``np.random.get_state()``,
``torch.get_rng_state()`` and ``torch.initial_seed()`` are the same too.

Algorithm. Seeding is a pure function of the key, so one compiled kernel (``mt19937.py``)
computes, for every key of a batch at once (one call per batch), the bytes each generator holds
after seeding: the MT19937 states of Python's ``RandomObject`` and of numpy's ``mt19937_state``,
and torch's ``CPUGeneratorImpl`` region (seed, engine, disengaged cached normals).
:class:`GlobalSeeder` then has them *copied* into the generators by
:func:`.raw_seeding.seed_function` (one slice assignment per generator, Python's ``gauss_next``
reset, numpy's cached Gaussian cleared only when set). :class:`GlobalRNGGuard` saves the three
states (and the caches) and writes them back (:class:`.raw_states.PyNpStates`,
:func:`.raw_states.save_torch`). This module holds the policy (which route, the pooled buffers,
the probed layout cached per process); every read and write of the generators' memory is in
the ``raw_*`` modules (:mod:`.raw_memory` lists them).

Lazy seeding. :class:`UnseededWatch` leaves Python's and numpy's generators unseeded while user
code runs and tells afterwards whether anything drew from them (:class:`.raw_states.UnseededStates`:
both states saved, both cached Gaussians cleared, the whole states and caches compared
afterwards, states and caches put back either way), and :func:`torch_watch` does the same for
torch's (:class:`.raw_states.TorchWatch`: its whole region compared). The fetcher (``fetch.py``)
uses them to fetch a batch unseeded first and to fetch it again seeded when a draw is seen (once
per process for torch's, once for Python's and numpy's); once torch's was seen drawing it is
seeded per sample (``GlobalSeeder(keys, torch_only=True)``) while the other two are still watched.

Safety. The memory layouts are probed once per process (:class:`.raw_memory.Layout`, whose
docstring says what is checked) and re-probed at the next batch when a global generator was
swapped (a swap inside a batch sends the rest of that batch through the seeding functions); a
generator whose probe fails takes the slow, always-correct route (the version's seeding
functions or public setters, ``getstate``/``get_state`` and their setters), identical in
results, and seeding is eager. ``tests/loader/seeding/test_global_rng.py`` and
``test_raw_memory.py`` check the routes against each other. A restore costs one copy per
generator.

Cost (batch 16, the development machine; micro-benchmarks of the parts, not the end-to-end
figure): the version-3 kernel 2.2 us a batch (``time.perf_counter`` medians, 2026-12-02; version
2's was 19-21 us the same morning). Earlier figures (2 CPUs shared with other jobs, CPU time by
``time.process_time``, medians of 7 interleaved rounds): the kernel 24 us a batch under version 1 (Python's and numpy's one shared ``init_by_array``, 1,247 lockstep
steps, ~11 us, torch's 623 ~14 us, about half of it the stores into the rows), the 16 seedings
10.5 us (0.66 us a sample for all three generators, where ``manual_seed`` alone is 1.46 us), the
guard 2.8 us a batch; before this rewrite 39 us + 16 x 4 us + 10 us. Version 2's separate numpy
state (twice the lanes, twice the stores) costs the kernel about 10 us more a batch of 16
(``time.perf_counter`` medians, docs/dropin.md). The end-to-end figure is the "per-sample seeding costs" line
of ``benchmarks/bench_dropin.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from resumable_data.errors import ConfigError, describe
from resumable_data.loader.seeding.mt19937 import PYNP_WORDS, fill_rows, mt_states, seed_rows
from resumable_data.loader.seeding.raw_memory import Layout
from resumable_data.loader.seeding.raw_seeding import seed_function
from resumable_data.loader.seeding.raw_states import PyNpStates, TorchWatch, UnseededStates, restore_torch, save_torch
from resumable_data.loader.seeding.sample_seeding import HASHED_VERSIONS, READABLE_SEEDING_VERSIONS, SEEDING_VERSION
from resumable_data.loader.seeding.seed_copy import RowBuffer, seed_globals_reference

__all__ = [
    "GlobalRNGGuard",
    "GlobalSeeder",
    "UnseededWatch",
    "layout",
    "lazy_seeding_available",
    "mt_states",
    "seed_globals",
    "seed_globals_reference",
    "torch_watch",
    "warm_seeding",
]


_LAYOUT: Layout | None = None


def _layout() -> Layout:
    global _LAYOUT
    if _LAYOUT is None or not _LAYOUT.current():  # probed once, again after a generator was swapped
        _LAYOUT = Layout()
    return _LAYOUT


#: The probed layout of the global generators (probed again after one was swapped).
layout = _layout


def warm_seeding(version: int) -> None:
    """Probe the generators' memory (once per process) and load seeding ``version``'s compiled
    kernel, computing one key's rows and writing nothing: what the first seeded batch would
    otherwise pay (``fetch.py`` calls it when a loader is built)."""
    lay = _layout()
    seed_rows(np.zeros(1, dtype=np.uint64), True, None if lay.torch is None else lay.torch.rows_spec, version)


def seed_globals(key: int, version: int = SEEDING_VERSION) -> None:
    """Seed Python's ``random``, ``numpy.random`` and torch's CPU generator from ``key`` exactly as
    ``rd.DataLoader`` does before a sample (``rd.sample_context().key``) under seeding ``version``
    (:mod:`.sample_seeding`; the default is a fresh run's, ``rd inspect`` shows a checkpoint's):
    to reproduce one sample's augmentation outside the loader.

    Raises :class:`~resumable_data.ConfigError` for a key outside ``[0, 2**64)`` or an unknown version."""
    if type(key) is bool or not isinstance(key, (int, np.integer)) or not 0 <= int(key) < 1 << 64:
        raise ConfigError(
            describe("key", key, "an integer in [0, 2**64)", "pass a sample's key (rd.sample_context().key)")
        )
    if type(version) is not int or version not in READABLE_SEEDING_VERSIONS:
        raise ConfigError(
            describe(
                "version",
                version,
                f"one of {list(READABLE_SEEDING_VERSIONS)}",
                "pass the run's seeding version (rd inspect shows it), or leave the default",
            )
        )
    seeder = GlobalSeeder(np.array([int(key)], dtype=np.uint64), version=version)
    seeder.seed(0)
    seeder.release()


_POOL_MAX = 4  # buffers kept per size (more are live only while seeders nest or run in threads)


class GlobalSeeder:
    """Seeds the globals for each key of a batch: ``GlobalSeeder(keys).seed(i)`` for the i-th.

    One kernel call computes every key's bytes (``mt19937.fill_rows``) into a pooled
    :class:`~.seed_copy.RowBuffer`; ``seed(i)`` copies them into the generators
    (:func:`~.raw_seeding.seed_function`). ``torch_only``: torch's generator only (lazy seeding
    leaves the other two unseeded); ``version``: the seeding version (:mod:`.sample_seeding`).
    :meth:`release` gives the buffer back once no more ``seed`` calls follow (optional: an
    unreleased buffer is simply freed)."""

    __slots__ = ("_buf", "_lay", "_pool", "seed")
    _buf: RowBuffer | None
    _pool: list[RowBuffer] | None
    #: ``seed(i)``: seeds the generators from the i-th key
    seed: Callable[[int], None]

    def __init__(self, keys: np.ndarray, torch_only: bool = False, version: int = SEEDING_VERSION) -> None:
        if type(keys) is not np.ndarray or keys.dtype != np.uint64 or keys.ndim != 1:
            keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
        lay = self._lay = _layout()  # the views point into the probed generators, which it keeps alive
        n = keys.shape[0]
        rows = lay.rows
        if (
            rows is not None
            and n
            and version in HASHED_VERSIONS  # the usual case, in fewer steps
            and lay.py is not None
            and lay.np is not None
            and lay.torch is not None
        ):
            spec, width, tbytes, pools = rows
            pool = self._pool = pools.get(n)
            if pool is None:
                pool = self._pool = pools[n] = lay.pool.setdefault((n, width), [])
            buf = self._buf = pool.pop() if pool else RowBuffer(n, width, tbytes)
            fill_rows(keys, buf.rows, not torch_only, spec, version)
            fn = buf.fns.get((torch_only, version))
            buf.keys = keys
            self.seed = fn if fn is not None else seed_function(lay, buf, keys, torch_only, 0, version)
            return
        tlay = lay.torch
        pynp = not torch_only and (lay.py is not None or lay.np is not None)
        small = 0
        self._buf = self._pool = None
        if n and (pynp or tlay is not None):
            width = PYNP_WORDS + (0 if tlay is None else tlay.template.size)
            self._pool = pool = lay.pool.setdefault((n, width), [])
            buf = self._buf = pool.pop() if pool else RowBuffer(n, width, 0 if tlay is None else tlay.size)
            small = fill_rows(keys, buf.rows, pynp, None if tlay is None else tlay.rows_spec, version)
        self.seed = seed_function(lay, self._buf, keys, torch_only, small, version)

    def release(self) -> None:
        """Give the rows buffer back to the pool: ``seed`` must not be called afterwards."""
        buf, self._buf = self._buf, None
        pool = self._pool  # set with the buffer
        if buf is not None and pool is not None and len(pool) < _POOL_MAX:
            pool.append(buf)


class GlobalRNGGuard:
    """Saves the global generator states on enter and restores them on exit (exactly): Python's
    and numpy's as :class:`~.raw_states.PyNpStates`, torch's as the bytes of its region
    (:func:`~.raw_states.save_torch`), written back (unconditionally: cheaper than a comparison),
    or through ``get_state``/``set_state``."""

    __slots__ = ("_torch", "python_numpy_clean", "saved")

    def __enter__(self) -> GlobalRNGGuard:
        #: Python's and numpy's saved states (an :class:`UnseededWatch` started before any other
        #: code ran may reuse them)
        self.saved = PyNpStates()
        self.saved.save(_layout())
        self._torch = save_torch(self.saved.layout)
        #: set by a caller that knows Python's and numpy's states are the saved ones (a finished
        #: watch found them untouched and no user code ran since): see :meth:`restore_torch_only`
        self.python_numpy_clean = False
        return self

    def __exit__(self, *exc) -> None:
        self.saved.restore()
        self.restore_torch_only()

    def restore_torch_only(self) -> None:
        """Exit when Python's and numpy's states are known to be the saved ones: torch's only."""
        restore_torch(self.saved.layout, self._torch)

    def torch_watch(self) -> TorchWatch:
        """A watch of torch's generator starting from the state saved on enter (no code run since)."""
        return TorchWatch(self.saved.layout, self._torch)


def torch_watch() -> TorchWatch:
    """A watch of torch's default generator from its current state (lazy seeding in a worker)."""
    return TorchWatch(_layout())


def lazy_seeding_available() -> bool:
    """Whether :class:`UnseededWatch` can watch both generators here (their memory was found)."""
    return _layout().fast


class UnseededWatch(UnseededStates):
    """:class:`~.raw_states.UnseededStates` of the current layout: Python's and numpy's generators
    left unseeded and watched while user code runs (``saved``: states a :class:`GlobalRNGGuard`
    saved just before, nothing run since). Needs :func:`lazy_seeding_available`."""

    __slots__ = ()

    def __init__(self, saved: PyNpStates | None = None) -> None:
        super().__init__(_layout() if saved is None else saved.layout, saved)
