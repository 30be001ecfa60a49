"""``rd.DataLoader``: a drop-in for ``torch.utils.data.DataLoader`` whose state is a cursor.

Algorithm. The loader builds a :class:`~resumable_data.plan.Plan` (records, global batch, dataset
version, seed, order, tail) and hands torch's own ``DataLoader`` a step sampler and a fetching
dataset (:mod:`.fetch`): the batch of step ``s`` on rank ``r`` is a pure function of
(plan, s, r). A new ``iter(loader)`` continues from the cursor to the end of that epoch, so a
``break`` loses nothing and repeats nothing.

Commit protocol. ``cursor.committed <= cursor.delivered <= cursor.fetched`` (in steps). With
``commit="auto"`` a delivered batch is committed when the loop asks for the next one or calls
``state_dict()``; with ``commit="explicit"`` only ``loader.commit(applied=...)`` commits. A state
with uncommitted batches must be loaded with ``on_uncommitted="repeat"`` or ``"skip"``.

Cost of a restore. ``load_state_dict`` validates a few hundred bytes of JSON and sets three
integers; the first batch after it costs what a fresh start's first batch costs, at any step.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.utils.data as tud

from resumable_data._schema import check_int, coerce_enum
from resumable_data.errors import ConfigError, ResumableDataError, ResumeError, WorkerError, describe
from resumable_data.labels import RecoveryLabel
from resumable_data.loader.collate import to_torch
from resumable_data.loader.fetch import FetchMode, NumpyBatch, StepFetcher, StepSampler
from resumable_data.loader.stream import PackedStream, RecordStream, StepInfo, describe_step
from resumable_data.loader.state import (
    CommitMode,
    Counters,
    Cursor,
    Layout,
    LoaderState,
    OnUncommitted,
    SkippedRange,
    compare,
)
from resumable_data.loader.translate import translate_sampler
from resumable_data.plan import Order, OrderSpec, Plan, Sharding, Tail
from resumable_data.plan.permutation import MAX_DOMAIN as MAX_POSITION
from resumable_data.plan.packing import Overlong, Packing, PackMode

__all__ = ["CounterView", "DataLoader"]

UNPINNED = "unpinned"


@dataclass(frozen=True)
class CounterView:
    """Training progress, each counter defined (they diverge on AMP overflow and on skips).

    * ``attempted_updates``: ``commit()`` calls, i.e. optimizer steps tried;
    * ``applied_updates``: those with ``applied=True``; ``skipped_updates``: those with ``applied=False``
      (AMP found inf/nan gradients); ``attempted == applied + skipped``;
    * ``microbatches``: committed steps (batches whose gradients were used), skipped steps excluded;
    * ``samples``: global samples in those steps (all ranks, ``drop``/``wrap`` tails included);
    * ``tokens``: non-padding tokens in those steps, all ranks (of ``token_column``; 0 when unset);
    * ``skipped_steps``: steps below the committed cursor that were skipped on purpose.
    """

    attempted_updates: int
    applied_updates: int
    skipped_updates: int
    microbatches: int
    samples: int
    tokens: int
    skipped_steps: int


class _PositionalRecords:
    """Records from a user's positional sampler (picklable for worker processes)."""

    def __init__(self, sampler: Any, epoch_len: int) -> None:
        self.sampler = sampler
        self.epoch_len = epoch_len

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        epochs, offsets = np.divmod(positions, self.epoch_len)
        out = np.empty_like(positions)
        for e in np.unique(epochs):
            sel = epochs == e
            out[sel] = np.asarray(self.sampler.indices(int(e), offsets[sel]), dtype=np.int64)
        return out


def _passthrough(x: Any) -> Any:
    return x


class DataLoader:
    """Drop-in ``torch.utils.data.DataLoader`` with O(1) resume and a commit protocol.

    Accepts torch's arguments with their meaning (``in_order=False`` is refused: order is the
    promise). Keyword-only extras:

    * ``seed``: the stream's seed (else ``generator.initial_seed()``; shuffling without either is
      an error, since a loader without a known seed cannot resume);
    * ``shuffle_window``: shuffle inside windows of this many records (a shuffle buffer computed
      as a pure function) instead of a global shuffle;
    * ``sharding``: an :class:`rd.Sharding` (default: ``rd.Sharding.from_environment()``: the
      process group, else torchrun's ``RANK``/``WORLD_SIZE``, else a single process);
    * ``elastic``: allow resuming on another world size with the same global batch (default True);
    * ``tail``: override what happens to an epoch's incomplete last global batch (``drop``/``wrap``/
      ``partial``); by default ``drop_last=True`` drops, else one process gets a short batch
      (torch's behaviour) and several ranks wrap (``DistributedSampler``'s);
    * ``commit``: ``"auto"`` (default) or ``"explicit"``; ``accumulation_steps``: microbatches
      per optimizer update;
    * ``dataset_version``: the pinned :class:`rd.DatasetVersion` (or its hash) of a dataset that
      is not an ``rd.ArrowShards``; without it the state is marked unpinned;
    * ``seed_per_sample``: seed the global ``random``/numpy/torch generators per sample (default
      True) so existing transforms are deterministic; a dataset with ``__getitems__`` is fetched
      in one call per batch, so its globals are seeded once per batch from the batch's first key
      (reproducible, but a function of the rank's batch: per-sample draws that survive a change
      of batch size or world size come from ``rd.batch_context().sample(i)``); ``arrow_collate``: a function of the batch's
      ``pyarrow.Table``; ``token_column``: the list column counted in ``counters.tokens``;
    * ``packing``: an :class:`rd.Packing`: batches become ``batch_size`` packed sequences and the
      position unit becomes the packed sequence (see :mod:`resumable_data.plan.packing`).
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        seed: int | None = None,
        shuffle_window: int | None = None,
        sharding: Sharding | None = None,
        elastic: bool = True,
        tail: Tail | str | None = None,
        commit: CommitMode | str = CommitMode.AUTO,
        accumulation_steps: int = 1,
        dataset_version: Any = None,
        packing: Any = None,
        seed_per_sample: bool = True,
        arrow_collate: Callable | None = None,
        token_column: str | None = None,
    ) -> None:
        if not in_order:
            raise ConfigError(describe("in_order", in_order, "True", "drop in_order=False: a resumable stream is delivered in order"))
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise ConfigError(
                describe("dataset", type(dataset).__name__, "a map-style dataset (__len__ and __getitem__)",
                         "wrap an iterable dataset in a map-style one or write Arrow shards and use rd.ArrowShards")
            )
        n = len(dataset)
        if n < 1:
            raise ConfigError(describe("dataset", f"len {n}", "at least one record", "pass a non-empty dataset"))
        tr = translate_sampler(sampler, batch_sampler, n)
        if batch_sampler is not None:
            if batch_size not in (1, None) or shuffle or drop_last or sampler is not None:
                raise ConfigError(
                    describe("batch_sampler", type(batch_sampler).__name__, "no batch_size, shuffle, sampler or drop_last beside it",
                             "pass batch_sampler alone (torch's rule)")
                )
            batch_size = tr.batch_size
        if tr.shuffle is not None and shuffle:
            raise ConfigError(describe("shuffle", shuffle, "unset when a sampler is given", "drop shuffle= (torch's rule)"))
        do_shuffle = bool(shuffle) if tr.shuffle is None else tr.shuffle
        if sharding is not None and tr.sharding is not None:
            raise ConfigError(describe("sharding", sharding, "unset when a DistributedSampler is given", "pass one of the two"))
        self._sharding = sharding or tr.sharding or Sharding.from_environment()
        if not isinstance(self._sharding, Sharding):
            raise ConfigError(describe("sharding", sharding, "an rd.Sharding", "pass rd.Sharding(world_size, rank)"))
        self._unbatched = batch_size is None
        per_rank = 1 if self._unbatched else check_int(batch_size, "batch_size", 1, 1 << 30)
        if self._unbatched and drop_last:
            raise ConfigError(describe("drop_last", drop_last, "False with batch_size=None", "drop drop_last (torch's rule)"))
        world = self._sharding.world_size

        # seed
        if seed is None and tr.seed is not None:
            seed = tr.seed
        if seed is None and generator is not None:
            seed = int(generator.initial_seed())
        if seed is None and (do_shuffle or shuffle_window):
            raise ConfigError(
                describe("seed", None, "an integer seed when shuffling (or generator= with a known seed)",
                         "pass seed=1234: a loader whose seed is unknown cannot resume")
            )
        seed = check_int(0 if seed is None else seed, "seed", 0, (1 << 64) - 1)

        # order
        if shuffle_window is not None:
            if not do_shuffle and shuffle is not None:
                raise ConfigError(describe("shuffle_window", shuffle_window, "shuffle=True or unset", "drop shuffle=False"))
            order = OrderSpec(Order.WINDOW, shuffle_window)
        else:
            order = OrderSpec(Order.GLOBAL if do_shuffle else Order.SEQUENTIAL)
        if tr.positional is not None and (do_shuffle or shuffle_window):
            raise ConfigError(describe("shuffle", True, "unset with a positional sampler (it orders the records)", "drop shuffle"))

        # tail
        if tail is None:
            tail = tr.tail or (Tail.DROP if drop_last else (Tail.PARTIAL if world == 1 else Tail.WRAP))
        tail = coerce_enum(tail, Tail, "tail")
        if tail is Tail.PARTIAL and world > 1:
            raise ConfigError(
                describe("tail", "partial", "drop or wrap when world_size > 1 (a short batch would leave ranks idle)",
                         "pass drop_last=True or tail='wrap'")
            )

        # dataset version and fetch mode
        from resumable_data.sources import ArrowShards  # lazy: sources import pyarrow only

        version_hash, pinned = self._version(dataset, dataset_version, ArrowShards)
        if packing is not None:
            mode = FetchMode.PACKED
            lengths = self._check_packing(packing, dataset, ArrowShards, collate_fn, arrow_collate, token_column,
                                          tr.positional)
            token_column = None
        elif isinstance(dataset, ArrowShards):
            mode = FetchMode.ARROW
        elif arrow_collate is not None:
            raise ConfigError(describe("arrow_collate", arrow_collate, "an rd.ArrowShards dataset", "use collate_fn instead"))
        elif hasattr(dataset, "__getitems__"):
            mode = FetchMode.GETITEMS
        else:
            mode = FetchMode.GETITEM

        epoch_records = len(tr.positional) if tr.positional is not None else n
        self._plan = Plan(epoch_records, per_rank * world, version_hash, seed, order, tail)
        self._sharding.check_global_batch(self._plan.global_batch)
        self._positional = tr.positional
        self._packing: Packing | None = packing
        if packing is not None:
            self._stream: RecordStream | PackedStream = PackedStream(self._plan, packing, lengths, pinned=pinned)
        else:
            self._stream = RecordStream(self._plan)
        records_fn = _PositionalRecords(tr.positional, self._plan.epoch_len) if tr.positional is not None else None
        self._elastic = bool(elastic)
        self._commit_mode = coerce_enum(commit, CommitMode, "commit")
        self._k = check_int(accumulation_steps, "accumulation_steps", 1, 1 << 20)
        self._pinned = pinned
        if token_column is not None and mode is not FetchMode.ARROW:
            raise ConfigError(describe("token_column", token_column, "an rd.ArrowShards dataset", "drop token_column"))
        if token_column is not None and token_column not in dataset.schema.names:
            raise ConfigError(describe("token_column", token_column, f"one of the columns {dataset.schema.names}", "name a list column"))

        self.dataset = dataset
        self.batch_size = None if self._unbatched else per_rank
        self.num_workers = num_workers
        self.drop_last = drop_last
        self._fetcher = StepFetcher(
            dataset, self._plan, self._sharding, mode=mode, collate_fn=collate_fn, arrow_collate=arrow_collate,
            seed_per_sample=bool(seed_per_sample), token_column=token_column, unbatched=self._unbatched,
            records_fn=records_fn, stream=self._stream if packing is not None else None, pin_memory=pin_memory,
        )
        private = torch.Generator().manual_seed(seed)  # torch draws a base seed per iter(): never from the global one
        self._torch = tud.DataLoader(
            self._fetcher, batch_size=None, sampler=StepSampler(self), num_workers=num_workers,
            collate_fn=_passthrough, pin_memory=pin_memory, timeout=timeout, worker_init_fn=worker_init_fn,
            multiprocessing_context=multiprocessing_context, generator=private, prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers, pin_memory_device=pin_memory_device,
        )
        self._active: weakref.ref[_Iterator] | None = None
        self._generation = 0
        self.reset()
        self._warm_up(mode)

    def _warm_up(self, mode: FetchMode) -> None:
        """Run the compiled kernels and the source's first gather once in this process, so that
        forked workers inherit them instead of each paying the start-up (JIT cache, imports)."""
        records = self._plan.records(np.zeros(1, dtype=np.int64))
        if mode in (FetchMode.ARROW, FetchMode.PACKED):
            self.dataset.take(records)
        if self._packing is not None and self._packing.mode is PackMode.BEST_FIT:
            from resumable_data.plan.packing import best_fit_bins

            best_fit_bins(np.array([1, 1], dtype=np.int64), self._packing)

    # -- construction helpers ---------------------------------------------------------------------
    @staticmethod
    def _version(dataset: Any, dataset_version: Any, arrow_type: type) -> tuple[str, bool]:
        given = getattr(dataset_version, "hash", dataset_version)
        if given is not None and (not isinstance(given, str) or not given):
            raise ConfigError(describe("dataset_version", dataset_version, "an rd.DatasetVersion or its hash string", "pass rd.pin(path)"))
        if isinstance(dataset, arrow_type):
            own = dataset.version.hash if dataset.pinned else None
            if given is not None and own is not None and given != own:
                raise ConfigError(
                    describe("dataset_version", given, f"the source's own pinned version {own}", "drop dataset_version= or open the pinned data")
                )
            given = given or own
        return (given, True) if given else (UNPINNED, False)

    @staticmethod
    def _check_packing(packing: Any, dataset: Any, arrow_type: type, collate_fn: Any, arrow_collate: Any,
                       token_column: Any, positional: Any) -> np.ndarray:
        """Validate a packing spec against the source before any batch; returns the token lengths."""
        import pyarrow as pa

        if not isinstance(packing, Packing):
            raise ConfigError(describe("packing", packing, "an rd.Packing", "pass rd.Packing(seq_len=...)"))
        if not isinstance(dataset, arrow_type):
            raise ConfigError(describe("dataset", type(dataset).__name__, "an rd.ArrowShards when packing",
                                       "write the documents as Arrow shards and open them with rd.ArrowShards"))
        for name, value in (("collate_fn", collate_fn), ("arrow_collate", arrow_collate), ("sampler", positional)):
            if value is not None:
                raise ConfigError(describe(name, value, "None when packing (the packer builds the batch)", f"drop {name}="))
        if token_column not in (None, packing.tokens):
            raise ConfigError(describe("token_column", token_column, f"None or {packing.tokens!r} when packing", "drop it"))
        names = dataset.schema.names
        if packing.tokens not in names:
            raise ConfigError(describe("Packing.tokens", packing.tokens, f"one of the columns {names}", "name the token column"))
        t = dataset.schema.field(packing.tokens).type
        if not ((pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_integer(t.value_type)):
            raise ConfigError(describe("Packing.tokens", packing.tokens, f"a list<integer> column (it is {t})",
                                       "tokenize into a list of integer ids"))
        lengths = dataset.column_lengths(packing.tokens)
        empty = np.flatnonzero(lengths == 0)
        if empty.size:
            raise ConfigError(describe("documents", f"{empty.size} empty, first record ids {empty[:5].tolist()}",
                                       "documents with at least one token", "filter empty documents out before pinning"))
        if packing.mode is PackMode.BEST_FIT and packing.overlong is Overlong.ERROR:
            long = np.flatnonzero(packing.doc_lengths(lengths) > packing.seq_len)
            if long.size:
                raise ConfigError(describe("overlong", "error", f"no document longer than seq_len={packing.seq_len} "
                                           f"({long.size} are, first record ids {long[:5].tolist()})",
                                           "use overlong='split', a larger seq_len, or filter them"))
        return lengths

    # -- cursor bookkeeping (called by the sampler and the iterator) --------------------------------
    def _epoch_window(self) -> tuple[int, int, int, int]:
        """(epoch, its first step, first step to fetch, end of the epoch) for a new pass."""
        start = self._delivered
        while self._is_skipped(start):
            start = self._skip_end(start)
        epoch, first = self._stream.locate(start, self._ledger)
        self._fetched = start
        return epoch, first, start, first + self._stream.steps_in_epoch(epoch)

    def _is_skipped(self, step: int) -> bool:
        return any(r.start <= step < r.stop for r in self._skipped)

    def _skip_end(self, step: int) -> int:
        return max(r.stop for r in self._skipped if r.start <= step < r.stop)

    def _on_fetch(self, step: int) -> None:
        self._fetched = step + 1

    def _on_deliver(self, step: int, tokens: int, samples: int) -> None:
        if step < self._delivered:
            raise ResumableDataError(
                f"step={step}: expected a step after the last delivered one ({self._delivered - 1}); this is an "
                "internal ordering error; fix: report it with the loader's state_dict(), and resume from that state")
        self._delivered = step + 1
        self._pending_tokens += tokens
        self._pending_samples += samples
        self._pending_mb += 1

    def _commit_delivered(self) -> None:
        self._committed = self._delivered
        self._tokens += self._pending_tokens
        self._samples += self._pending_samples
        self._pending_tokens = self._pending_samples = self._pending_mb = 0

    # -- iteration --------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        self._close_active()
        it = _Iterator(self)
        self._active = weakref.ref(it)
        return it

    def _close_active(self) -> None:
        it = self._active() if self._active is not None else None
        if it is not None:
            it.close()
        self._active = None

    # -- commit protocol --------------------------------------------------------------------------
    def commit(self, applied: bool = True) -> None:
        """Commit every delivered batch: their gradients went into an update (``applied``) or an
        update that AMP skipped (``applied=False``). Counts one attempted update."""
        if not isinstance(applied, bool):
            raise ConfigError(describe("applied", applied, "True or False", "pass whether the optimizer step was applied"))
        if self._delivered == self._committed:
            raise ResumableDataError(
                f"commit(): cursor.delivered={self._delivered} == cursor.committed: expected at least one batch "
                "delivered since the last commit; fix: call commit() once per optimizer step, after its batches"
            )
        self._commit_delivered()
        self._attempted += 1
        if applied:
            self._applied += 1
        else:
            self._skipped_updates += 1

    @property
    def microstep(self) -> int:
        """Index, inside the accumulation window, of the last delivered microbatch (0-based)."""
        if self._commit_mode is CommitMode.EXPLICIT:
            return (self._pending_mb - 1) % self._k
        return (self._microbatches_before(self._delivered) - 1) % self._k

    @property
    def microstep_is_last(self) -> bool:
        """Whether the last delivered microbatch closes its accumulation window."""
        if self._commit_mode is CommitMode.EXPLICIT:
            return self._pending_mb >= self._k
        mb = self._microbatches_before(self._delivered)
        return mb > 0 and mb % self._k == 0

    @property
    def cursor(self) -> Cursor:
        return Cursor(self._committed, self._delivered, max(self._fetched, self._delivered))

    def __len__(self) -> int:
        """Steps in the current epoch (every epoch has the same count unless packing)."""
        return self._stream.steps_in_epoch(self._stream.locate(self._delivered, self._ledger)[0])

    def _skipped_before(self, step: int) -> int:
        return sum(max(0, min(r.stop, step) - r.start) for r in self._skipped)

    def _microbatches_before(self, step: int) -> int:
        return step - self._skipped_before(step)

    @property
    def counters(self) -> CounterView:
        c = self._committed
        return CounterView(
            attempted_updates=self._attempted,
            applied_updates=self._applied,
            skipped_updates=self._skipped_updates,
            microbatches=self._microbatches_before(c),
            samples=self._samples,
            tokens=self._tokens,
            skipped_steps=self._skipped_before(c),
        )

    def step_info(self, step: int | None = None) -> StepInfo:
        """Where ``step`` (default: the next to deliver) sits and this rank's record ids for it,
        computed from the plan without fetching a batch."""
        step = self._delivered if step is None else check_int(step, "step", 0)
        return describe_step(self._stream, self._ledger, self._sharding, step)

    @property
    def recovery_label(self) -> RecoveryLabel:
        return self._label

    @property
    def plan(self) -> Plan:
        return self._plan

    @property
    def sharding(self) -> Sharding:
        return self._sharding

    def skip_steps(self, start: int, stop: int, reason: str) -> None:
        """Never deliver steps ``[start, stop)`` (a known bad data region); recorded in the state."""
        start = check_int(start, "start", 0)
        stop = check_int(stop, "stop", start + 1)
        if start < self._delivered:
            raise ConfigError(
                describe("start", start, f"a future step (>= cursor.delivered={self._delivered})",
                         "skip only steps not yet delivered; use load_state_dict(on_uncommitted='skip') for delivered ones")
            )
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigError(describe("reason", reason, "a non-empty explanation", "say why the steps are skipped"))
        self._skipped.append(SkippedRange(start, stop, reason))

    # -- state ------------------------------------------------------------------------------------
    def _state(self) -> LoaderState:
        return LoaderState(
            plan=self._plan, layout=Layout(self._sharding.world_size, self._sharding.policy), elastic=self._elastic, commit=self._commit_mode,
            accumulation_steps=self._k, packing=None if self._packing is None else self._packing.to_dict(),
            pinned=self._pinned, epoch_base=self._stream.locate(self._committed, self._ledger),
            sampler=self._positional.fingerprint() if self._positional is not None else None,
            cursor=self.cursor,
            counters=Counters(self._attempted, self._applied, self._skipped_updates, self._samples, self._tokens),
            skipped=tuple(self._skipped), recovery_label=self._label,
        )

    def state_dict(self) -> dict[str, Any]:
        """The loader's state: JSON-serializable, a few hundred bytes, whatever the dataset size.

        With ``commit="auto"`` every delivered batch is committed first."""
        if self._commit_mode is CommitMode.AUTO:
            self._commit_delivered()
        return self._state().to_dict()

    def load_state_dict(
        self, state: dict[str, Any], *, on_uncommitted: OnUncommitted | str | None = None, allow_unpinned: bool = False
    ) -> None:
        """Restore ``state`` (see :meth:`reset`)."""
        if state is None:
            raise ResumeError(describe("state", None, "a dict from state_dict()", "call reset() for a fresh start"))
        self.reset(state, on_uncommitted=on_uncommitted, allow_unpinned=allow_unpinned)

    def validate_state_dict(
        self, state: Any, *, on_uncommitted: OnUncommitted | str | None = None, allow_unpinned: bool = False
    ) -> LoaderState:
        """Check ``state`` exactly as :meth:`reset` would, without changing anything; returns it parsed.

        Raises the same :class:`rd.ResumeError` (or ``ConfigError`` for a bad ``on_uncommitted``)
        :meth:`reset` raises: malformed or forged state, positions beyond 2**62, every difference from
        this loader (plan, batch, accumulation, packing, sampler, pinning unless ``allow_unpinned``,
        layout), uncommitted batches without ``on_uncommitted``, an ``epoch_base`` the stream does
        not hold. No field is assigned, no iterator closed: a caller can validate every object of a
        training state before restoring any of them."""
        if state is None:
            raise ResumeError(describe("state", None, "a dict from state_dict()", "call reset() for a fresh start"))
        try:
            json.dumps(state)
        except (TypeError, ValueError, RecursionError) as e:
            raise ResumeError(describe("state", type(state).__name__, f"a JSON-serializable dict ({e})", "pass state_dict()'s output")) from None
        saved = LoaderState.from_dict(state)
        last = max([saved.cursor.fetched, saved.epoch_base[1]] + [r.stop for r in saved.skipped])
        if (last + 1) * saved.plan.global_batch > MAX_POSITION:
            raise ResumeError(describe("state.cursor", saved.cursor.to_dict(),
                                       f"steps whose positions (step x global batch {saved.plan.global_batch}) stay "
                                       "below 2**62", "pass an unmodified state"))
        diffs, _ = compare(saved, self._state(), allow_unpinned=allow_unpinned)
        choice = None
        if on_uncommitted is not None:
            choice = coerce_enum(on_uncommitted, OnUncommitted, "on_uncommitted")
        c = saved.cursor
        if c.delivered > c.committed and choice is None:
            diffs.append(
                f"uncommitted batches: steps [{c.committed}, {c.delivered}) were delivered but never committed; "
                "fix: pass on_uncommitted='repeat' (deliver them again) or on_uncommitted='skip' (treat them as consumed "
                "and record the skipped range)"
            )
        if not diffs:
            self._check_epoch_base(saved)
        if diffs:
            raise ResumeError("cannot resume this loader from the given state:\n  - " + "\n  - ".join(diffs))
        return saved

    def reset(
        self, state: dict[str, Any] | None = None, *, on_uncommitted: OnUncommitted | str | None = None,
        allow_unpinned: bool = False,
    ) -> None:
        """The one entry point for a fresh start (``state=None``) and a restore.

        A restore validates everything before any batch is produced and raises one
        :class:`rd.ResumeError` listing every difference (saved vs current, with the fix). A state
        with delivered but uncommitted batches needs ``on_uncommitted="repeat"`` (deliver them again)
        or ``"skip"`` (record them as skipped). Prefetched batches are always fetched again."""
        if state is None:
            self._close_active()
            self._generation += 1
            self._committed = self._delivered = self._fetched = 0
            self._attempted = self._applied = self._skipped_updates = self._tokens = self._samples = 0
            self._pending_tokens = self._pending_samples = self._pending_mb = 0
            self._ledger = {0: 0}
            self._skipped: list[SkippedRange] = []
            self._label = RecoveryLabel.FAITHFUL_CONTINUATION
            return
        saved = self.validate_state_dict(state, on_uncommitted=on_uncommitted, allow_unpinned=allow_unpinned)
        # validated: derive what validate_state_dict computed (cheap, pure), then assign
        choice = None if on_uncommitted is None else coerce_enum(on_uncommitted, OnUncommitted, "on_uncommitted")
        ledger = self._check_epoch_base(saved)
        label = (RecoveryLabel.ELASTIC_RESHARD if saved.layout != Layout(self._sharding.world_size, self._sharding.policy)
                 else RecoveryLabel.FAITHFUL_CONTINUATION)
        self._close_active()
        self._generation += 1
        c = saved.cursor
        skipped = list(saved.skipped)
        committed = c.committed
        if c.delivered > c.committed and choice is OnUncommitted.SKIP:
            skipped.append(SkippedRange(c.committed, c.delivered, "uncommitted at resume (on_uncommitted='skip')"))
            committed = c.delivered
        self._committed = self._delivered = self._fetched = committed
        k = saved.counters
        self._attempted, self._applied, self._skipped_updates, self._samples, self._tokens = (
            k.attempted_updates, k.applied_updates, k.skipped_updates, k.samples, k.tokens)
        self._pending_tokens = self._pending_samples = self._pending_mb = 0
        self._ledger = ledger
        self._skipped = skipped
        self._label = label


    def _check_epoch_base(self, saved: LoaderState) -> dict[int, int]:
        """The epoch ledger implied by the saved ``epoch_base``, checked against the stream."""
        epoch, first = saved.epoch_base
        committed = saved.cursor.committed
        if isinstance(self._stream, RecordStream):
            ok = (epoch, first) == self._stream.locate(committed, {0: 0})
        else:
            ok = first <= committed < first + self._stream.steps_in_epoch(epoch) and (epoch > 0 or first == 0)
        if not ok:
            raise ResumeError(describe("state.epoch_base", [epoch, first],
                                       f"the epoch and first step that hold cursor.committed={committed}",
                                       "pass an unmodified state"))
        return {0: 0, epoch: first}


def _worker_fault(error: BaseException) -> str | None:
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


class _Iterator:
    """One pass from the cursor to the end of its epoch; updates the cursor as batches arrive."""

    def __init__(self, loader: DataLoader) -> None:
        self._loader = loader
        self._generation = loader._generation
        torch_loader = loader._torch
        if torch_loader.num_workers == 0 and not torch_loader.pin_memory:
            # No workers, no pinning: torch's single-process iterator would only call
            # fetcher[request] for each request of the sampler; doing it directly saves ~0.1 ms/batch.
            fetcher = loader._fetcher
            self._it = (fetcher[request] for request in torch_loader.sampler)
        else:
            self._it = iter(torch_loader)
        self._closed = False

    def __iter__(self) -> _Iterator:
        return self

    def __next__(self) -> Any:
        loader = self._loader
        if self._closed or self._generation != loader._generation:
            raise ResumableDataError(
                "this iterator was superseded (a new iter(loader), reset() or load_state_dict() happened); "
                "fix: iterate a fresh iter(loader)"
            )
        if loader._commit_mode is CommitMode.AUTO:
            loader._commit_delivered()
        while True:
            try:
                step, batch, tokens, samples = next(self._it)
            except StopIteration:
                self.close()
                raise
            except (ConnectionError, EOFError, RuntimeError) as e:
                what = _worker_fault(e) if isinstance(self._it, tud.dataloader._MultiProcessingDataLoaderIter) else None
                if what is None:
                    raise
                self.close()
                self._it._shutdown_workers()  # persistent workers too: the pool is broken,
                loader._torch._iterator = None  # so the next iter(loader) starts a fresh one
                raise WorkerError(
                    f"a loader worker {what} ({type(e).__name__}: {e}); nothing was lost: "
                    f"state_dict() counts the {loader._delivered} batches delivered to the loop "
                    f"(cursor.committed={loader._committed}); fix: save loader.state_dict() with your "
                    "checkpoint and restart (or iterate a fresh iter(loader)); the job resumes at the "
                    "first batch it did not see"
                ) from e
            if not loader._is_skipped(step):  # skip_steps() may cover a step a worker already fetched
                break
        loader._on_deliver(step, tokens, samples)
        if isinstance(batch, NumpyBatch):
            batch = to_torch(batch)
        return batch

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
        it = self._it
        if isinstance(it, tud.dataloader._MultiProcessingDataLoaderIter) and not self._loader._torch.persistent_workers:
            it._shutdown_workers()
