"""The two pieces handed to torch's ``DataLoader``: a step sampler and a fetching dataset.

The main process only hands out step numbers (:class:`StepSampler`); a worker turns a step into
this rank's positions, record ids, rows and a collated batch (:class:`StepFetcher`), so reads and
collation run in parallel and the main process is never the bottleneck. Workers, pinning,
timeouts and prefetch stay torch's own. Nothing here depends on the worker id or count.

Randomness. With ``seed_per_sample`` (the default) user code runs with the global ``random`` /
numpy / torch generators seeded from a key of its position: ``__getitem__`` and ``transform=``
from the sample's key (``rd.sample_context()`` active), ``__getitems__``, ``collate_fn`` and
``arrow_collate`` from the batch key ``sample_key(version, seed, first position of this rank's
batch, tag="collate")`` (``rd.batch_context()`` active; ``__getitems__`` keeps the batch's first
sample key), every route with the seeding version the request carries (the ledger's: 3 for a
fresh run, the saved one after a restore; :mod:`.sample_seeding`). In the main process
(``num_workers=0``) the global states are saved before the
batch and restored after it (:class:`GlobalRNGGuard`), so the training loop's draws never depend
on the loader. Cost: one hash per sample (served from a run of upcoming positions) and one per batch.

Lazy seeding (``seed_per_sample=rd.SampleSeeding.LAZY``, an opt-in: ``__getitem__`` datasets,
:meth:`StepFetcher._per_sample`). The three generators are left unseeded and watched
(:class:`UnseededWatch` for Python's and numpy's, ``torch_watch`` for torch's). If user code drew
from torch's alone, its state is put back, the fetcher seeds torch's before every sample from
then on in this process and the batch is fetched again (Python's and numpy's still watched); if
it drew from Python's or numpy's (or an exception was raised after a draw), the states are put
back, the fetcher seeds all three eagerly from then on in this process and the batch is fetched
again seeded: the delivered batch is the eager one, bit for bit. A dataset that never draws is
called once per sample and pays for no seeding; one that draws is called twice for at most two
batches per process. Code that reads a generator's state without drawing (``torch.initial_seed()``
included) sees the unseeded one until then, and state a ``__getitem__`` keeps between calls (a
generator made on first use, a cache of augmented records) survives the discarded pass: that is
why it is not the default.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np
from torch.utils.data import Dataset, Sampler, get_worker_info

from resumable_data.errors import UsageError, describe
from resumable_data.loader.collate import PAD_VALUE, arrow_to_numpy, gathered_to_numpy, to_torch
from resumable_data.loader.config import FetchMode, LoaderConfig
from resumable_data.loader.context import (
    BatchContext,
    GlobalRNGGuard,
    GlobalSeeder,
    SampleSlot,
    activate_batch,
    activate_sample,
    reset_batch,
    reset_sample,
    seed_globals,
)
from resumable_data.loader.ledger import ProgressLedger
from resumable_data.loader.order import PlanOrder
from resumable_data.loader.packed import pack_sequences, packed_tokens
from resumable_data.loader.sample_collate import default_collate  # torch's, faster for int and float leaves
from resumable_data.loader.seeding.global_rng import UnseededWatch, lazy_seeding_available, torch_watch, warm_seeding
from resumable_data.loader.seeding.sample_seeding import SEEDING_VERSION
from resumable_data.loader.stream import PackedStream, RecordStream
from resumable_data.loader.torch_compat import default_convert
from resumable_data.plan import sample_key, sample_keys
from resumable_data.plan.packing import PackMode, best_fit_bins
from resumable_data.plan.record_runs import RecordRuns
from resumable_data.sources import ArrowShards
from resumable_data.sources.mixture import Mixture
from resumable_data.sources.read_ahead import Prefetcher

__all__ = ["FetchMode", "NumpyBatch", "OutputArena", "Request", "StepFetcher", "StepSampler"]  # FetchMode: re-exported

#: What the sampler hands a worker: (step, epoch, the epoch's first step, the step's global positions
#: ``(start, stop)`` (None when packed), the seeding version).
Request = tuple[int, int, int, tuple[int, int] | None, int]


class OutputArena(Protocol):
    """Where a worker's default Arrow batch is gathered: ``alloc`` makes each of its arrays (in the
    shared-memory slot the main process reads it from, :meth:`.transport.WorkerCollate.arena`);
    ``release`` gives the room back when the batch was not made there (the gather raised or had
    no numpy layout)."""

    def alloc(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray: ...

    def release(self) -> None: ...


class StepFetcher(Dataset):
    """``fetcher[(step, epoch, first, span, seeding)]`` is this rank's batch of global step
    ``step`` (in epoch ``epoch``, which starts at step ``first``; ``span`` its global positions
    ``[start, stop)``, from the ledger's plan, ``None`` when packed; ``seeding`` the seeding
    version), as ``(step, batch, tokens, samples)``: tokens and samples count the whole global
    batch (all ranks), so every rank's counters agree. The span and the seeding version travel
    with the request, so workers (persistent ones too) never hold a batch origin or a version
    that a restore may change."""

    def __init__(
        self,
        dataset: Any,
        config: LoaderConfig,
        stream: RecordStream | PackedStream,
        *,
        pin_memory: bool = False,
        arena: Callable[[], OutputArena | None] | None = None,
    ) -> None:
        self.dataset = dataset
        #: in a worker, where the default Arrow batch is gathered (None: fresh arrays, packed after)
        self.arena = None if pin_memory else arena
        self.plan = config.plan
        self.sharding = config.sharding
        self.mode = config.mode
        self.collate_fn = config.collate_fn
        self.arrow_collate = config.arrow_collate
        self.transform = config.transform
        self.seed_per_sample = config.seed_per_sample
        #: the dataset draws nothing per sample (library code, no transform): nothing to seed or guard
        self.draw_free = config.draw_free
        self.token_column = config.token_column
        self.unbatched = config.unbatched
        self.order = config.order
        #: the packed stream (FetchMode.PACKED: a packing was given, so make_stream built one), else None
        self.stream = stream if isinstance(stream, PackedStream) else None
        self.pin_memory = pin_memory
        self._lengths: np.ndarray | None = None
        self._names: list[str] | None = None  # the source's column names (its schema is fixed), read once
        self._key_runs = self._new_key_runs()
        self._epoch_len = self.plan.epoch_len  # the plan is fixed: read per batch
        #: lazy seeding of Python's and numpy's generators (SampleSeeding.LAZY, see _per_sample);
        #: False in this process for good once user code was seen drawing from them
        self.lazy_globals = config.lazy_seeding
        #: torch's generator left unseeded and watched too (lazy seeding), until user code is seen drawing from it
        self.lazy_torch = config.lazy_seeding
        #: the seeding version of the request being fetched (set from each request)
        self.seeding = SEEDING_VERSION

    def warm_up(self) -> None:
        """Run the compiled kernels and the source's first gather (a user dataset: the order's and
        the sample keys' kernels, the generator-memory probe and the seeding kernel) once in this
        process, so that neither the first batch nor forked workers pay the start-up (JIT cache,
        imports, probe)."""
        if self.mode in (FetchMode.ARROW, FetchMode.PACKED):
            ids = self.order.warm_ids()
            self.dataset.take(ids)
            if isinstance(self.dataset, (ArrowShards, Mixture)):
                self.dataset.take_numpy(ids, PAD_VALUE)
        elif isinstance(self.order, PlanOrder):  # a user dataset in the plan's order, sample keys, the seeding
            first = np.zeros(1, dtype=np.int64)
            self.order.warm_ids()  # the order's kernels (a run's too)
            sample_keys(self.plan.version_hash, self.plan.seed, first)
            if self.seed_per_sample:
                warm_seeding(self.seeding)
        if self.stream is not None and self.stream.spec.mode is PackMode.BEST_FIT:
            best_fit_bins(np.array([1, 1], dtype=np.int64), self.stream.spec)

    def __getstate__(self) -> dict[str, Any]:  # workers rebuild the length index and the runs themselves
        return {**self.__dict__, "_lengths": None, "_key_runs": self._new_key_runs()}

    def _new_key_runs(self) -> RecordRuns:
        """Sample keys of runs of upcoming positions (a pure function of the position); the order
        serves record ids from runs of its own."""
        return RecordRuns(functools.partial(sample_keys, self.plan.version_hash, self.plan.seed))

    def __len__(self) -> int:
        return self.plan.steps_in_epoch(0)

    def records(self, positions: np.ndarray) -> np.ndarray:
        """Record ids at stream ``positions`` (the loader's order: :class:`~.order.StreamOrder`)."""
        return self.order.records(positions)

    def __getitem__(self, request: Request) -> tuple[int, Any, int, int]:
        step, epoch, first, span, self.seeding = request
        if self.stream is not None:  # FetchMode.PACKED
            return step, *self._packed(self.stream, epoch, step - first)
        if span is None:
            raise UsageError(
                describe("span", None, "a record step's (start, stop) positions", "pass ledger.span(step)")
            )
        start, stop = span
        positions = self.sharding.local_positions(start, stop)
        records = self.order.batch_records(start, stop, positions)
        user_code = (
            (self.mode is not FetchMode.ARROW and not self.draw_free)
            or self.collate_fn
            or self.arrow_collate
            or self.transform
        )
        guard = GlobalRNGGuard() if self.seed_per_sample and user_code and get_worker_info() is None else None
        if guard is not None:
            guard.__enter__()
        try:
            if self.mode is FetchMode.ARROW:
                return step, *self._arrow(span, positions, records), stop - start
            if self.mode is FetchMode.GETITEMS:
                samples = self._getitems(positions, records)
            else:
                samples = self._per_sample(positions, records, None, guard)
            batch = self._collate(positions, records, samples)
            if guard is not None and guard.python_numpy_clean and self.collate_fn is None:
                guard.restore_torch_only()  # no user code ran since the watch found both states untouched
                guard = None
            return step, batch, 0, stop - start
        finally:
            if guard is not None:
                guard.__exit__(None, None, None)

    def _collate(self, positions: np.ndarray, records: np.ndarray, samples: list) -> Any:
        """``collate_fn`` (default: torch's) over the samples, with the globals seeded from the batch
        key and ``rd.batch_context()`` active."""
        fn = self.collate_fn or (default_convert if self.unbatched else default_collate)
        if self.collate_fn is None:  # torch's own collation draws nothing: no seeding to pay for
            return fn(samples[0] if self.unbatched else samples)
        if self.seed_per_sample and len(positions):
            seed_globals(sample_key(self.plan.version_hash, self.plan.seed, int(positions[0]), "collate"), self.seeding)
        token = activate_batch(BatchContext(positions, records, self._keys(positions), self.plan.epoch_len))
        try:
            return fn(samples[0] if self.unbatched else samples)
        finally:
            reset_batch(token)

    def _transform(self, positions: np.ndarray, records: np.ndarray, samples: list) -> list:
        """``transform`` per sample, each with its sample context and (by default) seeded globals."""
        return self._per_sample(positions, records, samples)

    def _per_sample(
        self, positions: np.ndarray, records: np.ndarray, samples: list | None, guard: GlobalRNGGuard | None = None
    ) -> list:
        """Per sample ``i``, with its sample context active and (by default) the globals seeded
        from its key: ``samples is None``: ``dataset[record]`` (then ``transform``); else
        ``transform(samples[i])``. One seeding kernel and one context slot per batch.

        Lazy seeding (``samples is None``, ``SampleSeeding.LAZY``): Python's ``random`` and
        numpy's global generator are left unseeded and watched (:class:`UnseededWatch`), and so
        is torch's until user code is seen drawing from it (then it is seeded per sample); if
        user code drew from torch's alone, its state is put back, torch's is seeded from now on
        (in this process) and the batch goes round once more; if it drew from Python's or
        numpy's (or an exception left a draw behind), the states are put back, this fetcher seeds
        all three from now on (in this process) and the batch is fetched again, seeded: what it
        delivers is the eager batch, bit for bit, and a dataset that never draws is called once
        per sample. ``guard``: the
        main process's guard entered just before (no user code since), whose saved states the
        watch reuses."""
        pos, recs = positions.tolist(), records.tolist()
        if not self.seed_per_sample or (samples is None and self.draw_free):
            return self._samples(pos, recs, None, samples, None)
        keys, version = None, self.seeding  # computed when a seeder needs them (the slot makes its own)
        while (
            samples is None
            and self.lazy_globals
            and (guard.saved.fast if guard is not None else lazy_seeding_available())
        ):  # at most twice: torch's alone seen drawing sends the batch round once more, torch's seeded
            watch = UnseededWatch(None if guard is None else guard.saved)
            if self.lazy_torch:  # torch's watched too: nothing seeded
                tw, seeder = (guard.torch_watch() if guard is not None else torch_watch()), None
            else:
                keys = self._keys(positions) if keys is None else keys
                tw, seeder = None, GlobalSeeder(keys, torch_only=True, version=version)
            try:
                out = self._samples(pos, recs, keys, None, seeder)
            except Exception:
                drew_torch = tw is not None and tw.finish()
                drew = watch.finish()
                if not drew and not drew_torch:
                    raise
            else:
                drew_torch = tw is not None and tw.finish()
                drew = watch.finish()
                if not drew and not drew_torch:
                    if guard is not None:  # Python's and numpy's states are the saved ones again
                        guard.python_numpy_clean = True
                    return out
            if drew:
                break
            self.lazy_torch = False  # user code draws from torch's only (so far): seeded from now on, here
        else:
            keys = self._keys(positions)
            return self._samples(pos, recs, keys, samples, GlobalSeeder(keys, version=version))
        self.lazy_globals = self.lazy_torch = False  # user code draws from the globals: eager from now on, here
        keys = self._keys(positions) if keys is None else keys
        return self._samples(pos, recs, keys, samples, GlobalSeeder(keys, version=version))

    def _samples(
        self, pos: list, recs: list, keys: np.ndarray | None, samples: list | None, seeder: GlobalSeeder | None
    ) -> list:
        """The loop of :meth:`_per_sample`: ``seeder.seed(i)`` (all three generators, or torch's
        only), the slot moved to ``i``, the call; the seeder's buffer is given back after."""
        slot = SampleSlot(self._epoch_len, pos, recs, keys, self._key_of)
        token = activate_sample(slot)
        out: list = []
        append = out.append
        dataset, transform = self.dataset, self.transform
        seed = None if seeder is None else seeder.seed
        i = -1
        try:
            if transform is None:  # dataset[record] (samples are given only to transform them)
                if seed is None:
                    for i, r in enumerate(recs):
                        slot.i = i
                        append(dataset[r])
                else:
                    for i, r in enumerate(recs):
                        seed(i)
                        slot.i = i
                        append(dataset[r])
            elif samples is None:
                for i, r in enumerate(recs):
                    if seed is not None:
                        seed(i)
                    slot.i = i
                    append(transform(dataset[r]))
            else:
                for i, sample in enumerate(samples):
                    if seed is not None:
                        seed(i)
                    slot.i = i
                    append(transform(sample))
        except Exception as e:
            p = pos[i]
            _note(e, f"rd.DataLoader: while fetching position {p} (epoch {p // self.plan.epoch_len}), record {recs[i]}")
            raise
        finally:
            slot.clear()
            reset_sample(token)
            if seeder is not None:
                seeder.release()
        return out

    def _key_of(self, position: int) -> int:
        return sample_key(self.plan.version_hash, self.plan.seed, position)

    # -- the three fetch modes --------------------------------------------------------------------
    def global_tokens(self, span: tuple[int, int]) -> int:
        """Non-padding tokens of ``token_column`` in the whole global batch of positions ``span``
        (all ranks), from the offsets-only length index: rank-invariant, so every rank counts the same."""
        if self._lengths is None:
            self._lengths = self.dataset.column_lengths(self.token_column)
        ids = self.order.span_records(*span)  # from the run this batch's records came from
        return int(self._lengths[ids].sum())

    def _arrow(self, span: tuple[int, int], positions: np.ndarray, records: np.ndarray) -> tuple[Any, int]:
        tokens = 0 if self.token_column is None else self.global_tokens(span)
        if self.arrow_collate is None and self.collate_fn is None and self.transform is None:
            arrow = self.dataset if isinstance(self.dataset, (ArrowShards, Mixture)) else None
            columns = None if arrow is None else self._take_numpy(arrow, records)
            if columns is not None:  # the default collate's arrays, straight from the source's maps
                names = self._names
                if names is None:
                    names = self._names = self.dataset.schema.names
                batch = gathered_to_numpy(names, columns)
                if self.unbatched:
                    batch = {k: v[0] for k, v in batch.items()}
                return self._transport(batch), tokens
        table = self.dataset.take(records)
        if self.arrow_collate is not None:
            if self.seed_per_sample and len(positions):
                seed_globals(
                    sample_key(self.plan.version_hash, self.plan.seed, int(positions[0]), "collate"), self.seeding
                )
            token = activate_batch(BatchContext(positions, records, self._keys(positions), self.plan.epoch_len))
            try:
                return self.arrow_collate(table), tokens
            finally:
                reset_batch(token)
        if self.collate_fn is not None or self.transform is not None:
            rows = table.to_pylist()
            if self.transform is not None:
                rows = self._transform(positions, records, rows)
            return self._collate(positions, records, rows), tokens
        batch = arrow_to_numpy(table)
        if self.unbatched:
            batch = {k: v[0] for k, v in batch.items()}
        return self._transport(batch), tokens

    def _take_numpy(self, arrow: ArrowShards | Mixture, records: np.ndarray) -> list[Any] | None:
        """``arrow.take_numpy`` of ``records``; in a worker given an arena, gathered into it (its room
        given back when the gather raises or answers None)."""
        arena = None if self.arena is None or get_worker_info() is None else self.arena()
        if arena is None:
            return arrow.take_numpy(records, PAD_VALUE)
        try:
            columns = arrow.take_numpy(records, PAD_VALUE, arena.alloc)
        except BaseException:
            arena.release()
            raise
        if columns is None:
            arena.release()
        return columns

    def _transport(self, batch: dict[str, Any]) -> Any:
        """Tensors in the main process; in a worker, numpy arrays the main process wraps as
        tensors without a copy (``NumpyBatch``), unless pinned memory needs torch tensors."""
        if get_worker_info() is None or self.pin_memory:
            return to_torch(batch)
        return NumpyBatch(batch)

    def _packed(self, stream: PackedStream, epoch: int, k: int) -> tuple[Any, int, int]:
        start, stop, count = stream.epoch_positions(epoch, k)
        local = self.sharding.local_positions(start, stop) % count  # the wrap tail re-reads the epoch's first
        everything = np.arange(start, stop, dtype=np.int64) % count
        batch, real = pack_sequences(stream, self.dataset, epoch, local)
        if self.sharding.world_size > 1:  # count the whole global batch, so every rank agrees
            real = packed_tokens(stream, epoch, everything)
        return self._transport(batch), real, stop - start

    def _keys(self, positions: np.ndarray) -> np.ndarray:
        """Sample keys of one batch's ``positions`` (increasing, as ``local_positions`` gives),
        served from a run of upcoming positions."""
        if not len(positions):
            return np.empty(0, dtype=np.uint64)
        lo, hi = int(positions[0]), int(positions[-1]) + 1
        keys = self._key_runs.span(lo, hi)
        return keys if hi - lo == len(positions) else keys[positions - lo]

    def _getitems(self, positions: np.ndarray, records: np.ndarray) -> list:
        keys = self._keys(positions)
        ctx = BatchContext(positions, records, keys, self.plan.epoch_len)
        if self.seed_per_sample and not self.draw_free and len(keys):
            seed_globals(int(keys[0]), self.seeding)  # one batched call: the batch's first key seeds the globals
        token = activate_batch(ctx)
        try:
            samples = list(self.dataset.__getitems__(records.tolist()))
        except Exception as e:
            _note(
                e,
                f"rd.DataLoader: while fetching positions {positions.tolist()[:8]}... records {records.tolist()[:8]}...",
            )
            raise
        finally:
            reset_batch(token)
        return samples if self.transform is None else self._transform(positions, records, samples)


def _note(e: BaseException, text: str) -> None:
    e.add_note(text)


class NumpyBatch(dict):
    """A batch of numpy arrays sent by a worker; the loader turns it into tensors (zero-copy)."""


class StepSampler(Sampler[Request]):
    """Yields the requests (step, epoch, its first step, the step's span, the seeding version)
    from the ledger's cursor to the end of its epoch, minus skipped ranges; ``len()`` is the
    current epoch's step count.

    Runs in the main process; it reports each step it hands out to the ledger, which counts
    what was fetched (prefetch included). It holds the ledger, never the loader (no cycle: a
    dropped loader shuts its workers down at once).
    """

    def __init__(self, ledger: ProgressLedger, read_ahead: Prefetcher | None = None) -> None:
        self._ledger = ledger
        self._ahead = read_ahead  # told each step handed out (rd.ReadAhead: remote units fetched ahead)

    def __len__(self) -> int:
        return self._ledger.steps_in_current_epoch()

    def __iter__(self) -> Iterator[Request]:
        ledger = self._ledger
        epoch, first, start, stop = ledger.start_pass()
        ahead = self._ahead
        if ahead is not None:
            ahead.new_pass(stop)  # the window sized by bytes stays within this epoch (read_ahead/depth.py)
        is_skipped, on_fetch, span = ledger.is_skipped, ledger.on_fetch, ledger.span
        for step in range(start, stop):
            if is_skipped(step):
                continue
            on_fetch(step)
            if ahead is not None:
                ahead.plan(step, ledger.delivered)
            yield step, epoch, first, span(step), ledger.seeding_version
