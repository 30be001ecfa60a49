"""``rd.DataLoader``: a drop-in for ``torch.utils.data.DataLoader`` whose state is a cursor.

Algorithm. :func:`~resumable_data.loader.resolve.resolve_config` turns the arguments into a frozen
config (plan, sharding, order, tail, fetch mode, packing, commit mode, accumulation); torch's own
``DataLoader`` gets a step sampler and a fetching dataset (:mod:`.fetch`), so the batch of step
``s`` on rank ``r`` is a pure function of (plan, s, r). All progress lives in one torch-free
:class:`~resumable_data.loader.ledger.ProgressLedger`. A new ``iter(loader)`` continues from the
cursor to the end of that epoch, so a ``break`` loses nothing and repeats nothing.

Commit protocol. ``cursor.committed <= cursor.delivered <= cursor.fetched`` (in steps): with
``commit="auto"`` a delivered batch is committed at the next ``next()`` or ``state_dict()`` (a
watched loader's batch in hand only once the model's training forward ran on it), with
``"explicit"`` only by ``loader.commit(applied=...)``; a state with uncommitted batches loads with
``on_uncommitted="repeat"`` or ``"skip"``. :meth:`DataLoader.snapshot` never changes the loader.

End of an epoch. A state taken right after an epoch's last batch, inside the pass, records
``end_of_pass`` and resumes into an empty pass, then the next epoch (torch's StatefulDataLoader);
one taken after the loop resumes into the next epoch. :attr:`DataLoader.epoch` labels the pass.

Torch's attributes (``dataset``, ``batch_size``, ``sampler``, ``collate_fn``, ...) are present and
read-only: setting one raises ``ValueError`` (:class:`rd.ConfigError`), as torch does.

Cost of a restore. ``load_state_dict`` validates a few hundred bytes of JSON and sets a few
integers; the first batch after it costs what a fresh start's first batch costs, at any step.
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.utils.data as tud

from resumable_data._schema import check_int
from resumable_data.errors import ConfigError, ConfigTypeError, ResumeError, describe
from resumable_data.labels import RecoveryLabel
from resumable_data.loader import torch_compat
from resumable_data.loader.config import LoaderConfig
from resumable_data.loader.fetch import StepFetcher, StepSampler
from resumable_data.loader.iterator import LoaderIterator
from resumable_data.loader.ledger import CounterView, ProgressLedger
from resumable_data.loader.read_ahead import start_read_ahead
from resumable_data.loader.resolve import resolve_config
from resumable_data.loader.restore import validate_restore
from resumable_data.loader.state import CommitMode, Cursor, LoaderState, OnBatchChange, OnUncommitted
from resumable_data.loader.step_groups import GroupedFetcher, GroupedSampler, steps_per_request
from resumable_data.loader.stream import StepInfo, describe_step, make_stream
from resumable_data.loader.translate import torch_views
from resumable_data.loader.transport import WorkerCollate
from resumable_data.loader.worker_options import check_snapshot_every, check_worker_options
from resumable_data.plan import BatchSchedule, Plan, Sharding, Tail, WindowBlocks
from resumable_data.sources.read_ahead import Prefetcher, ReadAhead

__all__ = ["CounterView", "DataLoader"]


#: torch's public attributes; all are read-only after construction here.
_TORCH_ATTRIBUTES = frozenset(
    {
        "dataset",
        "batch_size",
        "sampler",
        "batch_sampler",
        "drop_last",
        "num_workers",
        "collate_fn",
        "pin_memory",
        "timeout",
        "worker_init_fn",
        "multiprocessing_context",
        "generator",
        "prefetch_factor",
        "persistent_workers",
        "pin_memory_device",
        "in_order",
        "snapshot_every_n_steps",
    }
)


class DataLoader:
    """Drop-in ``torch.utils.data.DataLoader`` with O(1) resume and a commit protocol.

    Accepts torch's arguments with their meaning (``in_order=False`` is refused: order is the
    promise); ``batch_size`` may also be a per-rank batch schedule (an :class:`rd.BatchRamp`, an
    :class:`rd.BatchSteps` or a list of ``(step, batch)`` pairs, on the ``continuous`` tail; see
    ``docs/schedules.md``). Keyword-only extras:

    * ``seed``: the stream's seed (else ``generator.initial_seed()``; shuffling without either is
      an error, since a loader without a known seed cannot resume);
    * ``shuffle_window``: shuffle inside windows of this many records (a shuffle buffer computed
      as a pure function) instead of a global shuffle; ``window_blocks``: what the window shuffle
      permutes, ``rd.WindowBlocks.RECORDS`` (default: blocks of ``shuffle_window // 16`` records)
      or ``rd.WindowBlocks.READ_UNITS`` (an ``rd.ArrowShards``' record batches / row groups: each
      unit lies in one window, so a read-ahead over an object store fetches it once an epoch);
    * ``sharding``: an :class:`rd.Sharding` (default: the process group, else torchrun's
      ``RANK``/``WORLD_SIZE``, else a single process);
    * ``elastic``: allow resuming on another world size with the same global batch (default True);
    * ``tail``: override what happens to an epoch's incomplete last global batch (``drop``/``wrap``/
      ``partial``, or ``continuous``: batches straddle epochs); by default ``drop_last=True``
      drops, else one process gets a short batch (torch's behaviour) and several ranks wrap
      (``DistributedSampler``'s);
    * ``commit``: ``"auto"`` (default) or ``"explicit"``; ``accumulation_steps``: microbatches
      per optimizer update;
    * ``dataset_version``: the pinned :class:`rd.DatasetVersion` (or its hash) of a dataset that
      is not an ``rd.ArrowShards``; without it the state is marked unpinned;
    * ``seed_per_sample``: seed the global ``random``/numpy/torch generators per sample so that
      existing transforms are deterministic: ``True`` (default; ``rd.SampleSeeding.EAGER``) seeds
      all three from the sample's key before every sample, exact for any code; ``False``
      (``OFF``) seeds nothing (torch's behaviour); ``rd.SampleSeeding.LAZY`` (or ``"lazy"``)
      seeds torch's before every sample and Python's and numpy's only once user code is seen
      drawing from them (that batch is fetched again, seeded, and the loader seeds eagerly in
      that process from then on): cheaper for datasets that never draw from them, exact only for
      a ``__getitem__`` that keeps no state between calls and does not save and restore those
      states around a draw (docs/dropin.md). Under ``LAZY``, code that reads those states
      without drawing (``random.getstate()``) sees the unseeded ones until the first draw. A
      dataset with ``__getitems__`` is fetched in one call per batch, its globals seeded from its first key
      (reproducible, but a function of the rank's batch: per-sample draws that survive a change
      of batch size or world size come from ``rd.batch_context().sample(i)``); ``arrow_collate``: a function of the batch's
      ``pyarrow.Table``; ``token_column``: the list column counted in ``counters.tokens``;
    * ``packing``: an :class:`rd.Packing`: batches become ``batch_size`` packed sequences and the
      position unit becomes the packed sequence (see :mod:`resumable_data.plan.packing`);
    * ``transform``: a function of one sample (a record's dict for ``rd.ArrowShards``), called with
      ``rd.sample_context()`` active and the globals seeded from the sample key, before
      ``collate_fn``: augmentation independent of batch size, workers and world size;
    * ``snapshot_every_n_steps``: torchdata ``StatefulDataLoader``'s argument (None or an integer >= 0; torchdata checks nothing),
      accepted so that code written for it runs unchanged; it changes nothing, since the state
      here is a cursor, exact after every batch at any worker count;
    * ``read_ahead``: an :class:`rd.ReadAhead` for an ``rd.ArrowShards`` on a remote store: the
      units the coming steps need are fetched ahead, concurrently, into a shared cache (off by
      default; ``docs/object-storage.md#reading-ahead``; with ``packing=`` too). Batches and state are
      unchanged.
    """

    __class_getitem__: classmethod[Any, ..., types.GenericAlias] = classmethod(types.GenericAlias)

    # torch's DataLoader attributes, read-only (set once in __init__; __setattr__ refuses them)
    dataset: Any
    batch_size: int | BatchSchedule | None
    sampler: Any
    batch_sampler: Any
    drop_last: bool
    num_workers: int
    collate_fn: Callable[..., Any]
    pin_memory: bool
    timeout: float
    worker_init_fn: Callable[[int], None] | None
    multiprocessing_context: Any
    generator: Any
    prefetch_factor: int | None
    persistent_workers: bool
    pin_memory_device: str
    in_order: bool
    snapshot_every_n_steps: int | None

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
        window_blocks: WindowBlocks | str = WindowBlocks.RECORDS,
        sharding: Sharding | None = None,
        elastic: bool = True,
        tail: Tail | str | None = None,
        commit: CommitMode | str = CommitMode.AUTO,
        accumulation_steps: int = 1,
        dataset_version: Any = None,
        packing: Any = None,
        seed_per_sample: Any = True,
        arrow_collate: Callable | None = None,
        token_column: str | None = None,
        transform: Callable | None = None,
        snapshot_every_n_steps: int | None = 1,
        read_ahead: ReadAhead | None = None,
    ) -> None:
        check_worker_options(num_workers, timeout, multiprocessing_context, prefetch_factor, persistent_workers)
        if worker_init_fn is not None and not callable(worker_init_fn):  # torch calls it in each worker
            raise ConfigTypeError(
                describe("worker_init_fn", worker_init_fn, "a function of the worker id, or None", "pass a callable")
            )
        snapshot_every_n_steps = check_snapshot_every(snapshot_every_n_steps)
        cfg = resolve_config(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            sampler=sampler,
            batch_sampler=batch_sampler,
            drop_last=drop_last,
            collate_fn=collate_fn,
            generator=generator,
            in_order=in_order,
            seed=seed,
            shuffle_window=shuffle_window,
            window_blocks=window_blocks,
            sharding=sharding,
            elastic=elastic,
            tail=tail,
            commit=commit,
            accumulation_steps=accumulation_steps,
            dataset_version=dataset_version,
            packing=packing,
            seed_per_sample=seed_per_sample,
            arrow_collate=arrow_collate,
            token_column=token_column,
            transform=transform,
        )
        self.config: LoaderConfig = cfg
        per_rank = None if cfg.unbatched else cfg.per_rank
        view_sampler, view_batch_sampler, view_collate = torch_views(
            dataset,
            sampler=sampler,
            batch_sampler=batch_sampler,
            shuffle=shuffle,
            batch_size=per_rank,
            drop_last=drop_last,
            generator=generator,
            collate_fn=collate_fn,
        )
        self.__dict__.update(
            dataset=dataset,
            batch_size=cfg.batch_schedule or per_rank,
            sampler=view_sampler,
            batch_sampler=view_batch_sampler,
            drop_last=drop_last,
            num_workers=num_workers,
            collate_fn=view_collate,
            pin_memory=pin_memory,
            timeout=timeout,
            worker_init_fn=worker_init_fn,
            multiprocessing_context=multiprocessing_context,
            generator=generator,
            prefetch_factor=(2 if num_workers > 0 else None) if prefetch_factor is None else prefetch_factor,
            persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device,
            in_order=in_order,
        )
        self._stream = make_stream(
            cfg.plan, cfg.packing, cfg.lengths, pinned=cfg.pinned, order=cfg.order.document_order()
        )
        cfg.order.bind(self._stream)
        self._fingerprint = cfg.fingerprint()
        self._ledger = ProgressLedger(self._stream, cfg.commit, cfg.accumulation_steps)
        steps = steps_per_request(
            cfg.mode,
            cfg.collate_fn is not None or cfg.arrow_collate is not None or cfg.transform is not None,
            num_workers,
            timeout,
        )  # with workers, a request may carry several steps (fewer messages per batch; same batches)
        collate = WorkerCollate(ahead=(prefetch_factor or 2) * steps if num_workers else 0)
        self._fetcher = StepFetcher(
            dataset, cfg, self._stream, pin_memory=pin_memory, arena=collate.arena if num_workers else None
        )
        self._read_ahead = start_read_ahead(self, read_ahead, dataset, cfg, self._ledger)
        private = torch.Generator().manual_seed(
            cfg.plan.seed
        )  # torch draws a base seed per iter(): never the global one
        sampler = StepSampler(self._ledger, self._read_ahead)
        self._torch = tud.DataLoader(
            self._fetcher if steps == 1 else GroupedFetcher(self._fetcher),
            batch_size=None,
            sampler=sampler if steps == 1 else GroupedSampler(sampler, steps),
            num_workers=num_workers,
            collate_fn=collate,
            pin_memory=pin_memory,
            timeout=timeout,
            worker_init_fn=torch_compat.WorkerInit(worker_init_fn),
            multiprocessing_context=multiprocessing_context,
            generator=private,
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device,
        )
        self.__dict__["snapshot_every_n_steps"] = snapshot_every_n_steps  # read-only; changes nothing (class docstring)
        self._active: weakref.ref[LoaderIterator] | None = None
        self._generation = 0
        self._fetcher.warm_up()  # forked workers inherit the compiled kernels and the first gather

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _TORCH_ATTRIBUTES:
            raise ConfigError(
                f"{name} attribute should not be set after DataLoader is initialized ({name}={value!r}: expected "
                f"the value given at construction); fix: build a new rd.DataLoader with {name}="
            )
        object.__setattr__(self, name, value)

    # -- iteration --------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        n = len(self.dataset)
        if n != self.config.dataset_len:
            raise ConfigError(
                describe(
                    "dataset",
                    f"len {n}",
                    f"len {self.config.dataset_len}, its length when this loader was built "
                    "(positions map to records of that dataset)",
                    "build a new rd.DataLoader (and dataset_version=) for the changed dataset",
                )
            )
        self._close_active()
        generation = self._generation
        it = LoaderIterator(
            self._torch,
            self._fetcher,
            self._ledger,
            self.config.commit,
            self.step_info,
            lambda: self._generation == generation,
        )
        self._active = weakref.ref(it)
        return it

    def _close_active(self) -> None:
        it = self._active() if self._active is not None else None
        if it is not None:
            it.close()
        self._active = None

    def __len__(self) -> int:
        """Steps in the current epoch: the same count every epoch for a fixed batch; under a batch
        schedule or ``tail="continuous"``, the steps whose first sample lies in this epoch (they
        vary by epoch and sum to the steps taken); packed epochs differ too."""
        return self._ledger.steps_in_current_epoch()

    # -- commit protocol and progress ---------------------------------------------------------------
    def commit(self, applied: bool = True) -> None:
        """Commit every delivered batch: their gradients went into an update (``applied``) or an
        update that AMP skipped (``applied=False``). Counts one attempted update."""
        self._ledger.commit(applied)

    @property
    def microstep(self) -> int:
        """Index, inside the accumulation window, of the last delivered microbatch (0-based)."""
        return self._ledger.microstep

    @property
    def microstep_is_last(self) -> bool:
        """Whether the last delivered microbatch closes its accumulation window."""
        return self._ledger.microstep_is_last

    @property
    def epoch(self) -> int:
        """The epoch of the current pass, else of the pass the next ``iter()`` starts: right after
        an epoch's last batch (inside the loop, or restored from a state taken there) the epoch
        that is ending; after the pass ended, the next one. Differs from ``step_info().epoch`` (the
        epoch of the next batch) only at the end of a pass."""
        return self._ledger.epoch

    @property
    def cursor(self) -> Cursor:
        """``committed <= delivered <= fetched``, in steps (the live ledger: a batch in hand that
        ``state_dict()`` leaves out still counts as delivered here)."""
        return self._ledger.cursor

    @property
    def counters(self) -> CounterView:
        """Attempted, applied and skipped updates, committed microbatches, samples and tokens, and
        the steps skipped on purpose (docs/how-it-works.md#counters-loadercounters)."""
        return self._ledger.counters()

    @property
    def recovery_label(self) -> RecoveryLabel:
        """How this loader's stream came to be: ``faithful_continuation`` (a fresh start or an
        exact resume), ``elastic_reshard`` (another layout or batch) or ``data_change``."""
        return self._ledger.label

    @property
    def plan(self) -> Plan:
        """The plan the cursor walks: the constructed one, at the batch origin a restore set."""
        return self._ledger.stream.plan

    @property
    def read_ahead(self) -> Prefetcher | None:
        """This rank's read-ahead fetcher (``stats``: units and bytes fetched, units evicted, failed
        fetches; ``wait_idle()``), None without ``read_ahead=``."""
        return self._read_ahead

    @property
    def sharding(self) -> Sharding:
        """This process's place in the data-parallel layout (world size, rank, policy)."""
        return self.config.sharding

    def step_info(self, step: int | None = None) -> StepInfo:
        """Where ``step`` (default: the next to deliver) sits and this rank's record ids for it,
        computed from the plan without fetching a batch."""
        step = self._ledger.delivered if step is None else check_int(step, "step", 0)
        return describe_step(self._ledger.stream, self._ledger.epoch_ledger(), self.config.sharding, step)

    def skip_steps(self, start: int, stop: int, reason: str) -> None:
        """Never deliver steps ``[start, stop)`` (a known bad data region); recorded in the state."""
        self._ledger.skip(start, stop, reason)

    # -- state ------------------------------------------------------------------------------------
    def snapshot(self) -> LoaderState:
        """The typed state, changing nothing: in ``commit="auto"`` mode it is what ``state_dict()``
        would return (delivered batches counted as committed), without committing them. The order
        adds what it counts (an ``rd.Mixture`` loader with ``token_column=``: each source's tokens)."""
        return self.config.order.snapshot(self._ledger.snapshot(self._fingerprint), self._stream)

    def state_dict(self) -> dict[str, Any]:
        """The loader's state: JSON-serializable, a few hundred bytes, whatever the dataset size.

        With ``commit="auto"`` every delivered batch is committed first, except a batch in hand
        that a watched model (:meth:`watch`) has not run a training forward on: the state leaves
        it out and a resume delivers it again."""
        if self.config.commit is CommitMode.AUTO:
            self._ledger.commit_in_hand()
        return self.snapshot().to_dict()

    def watch(self, model: torch.nn.Module) -> None:
        """Count the batch in hand as consumed only once ``model`` ran a training forward on it.

        ``commit="auto"`` commits a batch when the loop asks for the next one; a state taken in
        between holds the last delivered batch (the one in hand). Unwatched, the state counts it
        as consumed. Watched, it counts it only if ``model``'s forward ran since it was delivered
        in training mode with gradients enabled; otherwise the state leaves it out and a resume
        delivers it again. That makes both loops exact: the plain one (``for batch in loader:
        forward, backward, step, save``) and the one that fetches the next batch before the
        backward of the current one (nanoGPT's ``X = get_batch()`` between forward and
        backward) or saves before the forward. ``rd.TrainingState(model=, loader=)`` calls it.
        A forward in training mode on other data also counts (e.g. a train-mode loss on a fixed
        batch): take such a forward under ``torch.no_grad()`` or ``model.eval()``. Watching
        another model replaces the previous watch."""
        if not isinstance(model, torch.nn.Module):
            raise ConfigError(describe("model", type(model).__name__, "a torch.nn.Module", "pass the model you train"))
        old = self.__dict__.get("_watch_handle")
        if old is not None:
            old.remove()
        ref = weakref.ref(self)

        @torch.compiler.disable
        def _trained(module: torch.nn.Module, args: Any) -> None:
            loader = ref()
            if loader is not None and module.training and torch.is_grad_enabled():
                loader._ledger.mark_trained()

        self._watch_handle = model.register_forward_pre_hook(_trained)
        self._ledger.watch()

    def load_state_dict(
        self,
        state: dict[str, Any],
        *,
        on_uncommitted: OnUncommitted | str | None = None,
        allow_unpinned: bool = False,
        label: RecoveryLabel | str | None = None,
        on_batch_change: OnBatchChange | str | None = None,
    ) -> None:
        """Restore ``state``, a dict from :meth:`state_dict`, before the next batch: a seek.

        Everything is validated first and a refused state changes nothing: one
        :class:`rd.ResumeError` lists every difference (saved vs current, with the fix).
        ``on_uncommitted`` (``"repeat"``/``"skip"``) decides what happens to delivered but
        uncommitted batches (required when the state has any), ``allow_unpinned=True`` accepts a
        dataset without a pinned version, ``label="data_change"`` declares a deliberate change
        (an ``rd.Mixture``'s weights, the seeding mode, a single source's dataset version:
        rebased at the same step, epoch and fraction of the epoch), ``on_batch_change="continue"``
        another global batch. See :meth:`reset` for the details."""
        if state is None:
            raise ResumeError(describe("state", None, "a dict from state_dict()", "call reset() for a fresh start"))
        self.reset(
            state,
            on_uncommitted=on_uncommitted,
            allow_unpinned=allow_unpinned,
            label=label,
            on_batch_change=on_batch_change,
        )

    def validate_state_dict(
        self,
        state: Any,
        *,
        on_uncommitted: OnUncommitted | str | None = None,
        allow_unpinned: bool = False,
        label: RecoveryLabel | str | None = None,
        on_batch_change: OnBatchChange | str | None = None,
    ) -> LoaderState:
        """Everything ``load_state_dict`` checks, without changing anything: the parsed state, or one
        :class:`rd.ResumeError` listing every difference (saved vs current, with the fix)."""
        r = validate_restore(
            state,
            self._fingerprint,
            self._stream,
            self.config.order,
            on_uncommitted=on_uncommitted,
            allow_unpinned=allow_unpinned,
            label=label,
            on_batch_change=on_batch_change,
        )
        self.config.order.prepare_restore(r.saved, r.check, self._stream)
        return r.saved

    def mixture_progress(self) -> Any:
        """Per-source progress of an ``rd.Mixture`` loader at its committed cursor: records
        consumed per source, each source's epoch and position, the next step's per-source counts
        and, with ``token_column=``, each source's tokens consumed (an
        :class:`~resumable_data.loader.mixture.progress.MixtureProgress`). Packed, the tokens are
        those of the sequences passed before the cursor: after ``on_uncommitted="skip"`` they
        include the skipped steps' sequences, which ``counters.tokens`` (the delivered) does not.
        Another loader raises :class:`rd.ConfigError`."""
        return self.config.order.progress(
            self._ledger.snapshot(self._fingerprint), self._stream, self._ledger.epoch_ledger()
        )

    def undo_point(self) -> Callable[[], None]:
        """A function that puts the loader's progress back exactly as it is now (all-or-nothing
        restores call it when a later step fails); iterators made in between are superseded."""
        memento = self._ledger.memento()
        order = self.config.order
        point, counts, fingerprint = order.point(), order.memento(), self._fingerprint

        def undo() -> None:
            self._close_active()
            self._generation += 1
            self._move_order(point)
            self._fingerprint = fingerprint
            order.rewind(counts)
            self._ledger.rewind(memento)

        return undo

    def reset(
        self,
        state: dict[str, Any] | None = None,
        *,
        on_uncommitted: OnUncommitted | str | None = None,
        allow_unpinned: bool = False,
        label: RecoveryLabel | str | None = None,
        on_batch_change: OnBatchChange | str | None = None,
    ) -> None:
        """The one entry point for a fresh start (``state=None``) and a restore.

        A restore validates everything before any batch is produced and raises one
        :class:`rd.ResumeError` listing every difference (saved vs current, with the fix); a refused
        state changes nothing. A state with delivered but uncommitted batches needs
        ``on_uncommitted="repeat"`` (deliver them again) or ``"skip"`` (record them as skipped).
        Prefetched batches are always fetched again. ``label="data_change"`` declares a deliberate
        change an ``rd.Mixture`` resume may then accept (other weights: each source continues from
        its consumed position) or a single source's new dataset version (the stream continues at
        the same step and epoch: unpacked at the same fraction of the new version's epoch, recorded
        as the state's ``batch_origin``; packed at the same in-epoch step of the new version's
        packing, in the state's ``epoch_base``: see :mod:`resumable_data.plan.rebase`); the state
        then records that label. A restore, fresh start or
        :meth:`undo_point` rollback that changes an ``rd.Mixture``'s rebase shuts a persistent
        worker pool down (its workers hold the old stream): the next ``iter()`` starts a new one.

        A state saved with another global batch (or batch schedule) is refused unless
        ``on_batch_change="continue"``: the loader then continues at the saved committed sample
        with its own batch, as a new segment of the stream (no sample lost, none repeated),
        under the ``elastic_reshard`` label (see ``docs/schedules.md``)."""
        order = self.config.order
        if state is None:
            self._close_active()
            self._generation += 1
            self._ledger.restart()
            order.apply_restore(None)
            self._move_order(None)
            return
        r = validate_restore(
            state,
            self._fingerprint,
            self._stream,
            order,
            on_uncommitted=on_uncommitted,
            allow_unpinned=allow_unpinned,
            label=label,
            on_batch_change=on_batch_change,
        )
        prepared = order.prepare_restore(r.saved, r.check, self._stream)  # checked before anything changes
        self._close_active()
        self._generation += 1
        self._move_order(r.check.point)
        self._ledger.restore(r.saved, r.epoch_ledger, r.label, r.choice, r.plan)
        order.apply_restore(prepared)

    def _move_order(self, point: Any) -> None:
        """Continue the order from ``point`` (an ``rd.Mixture``'s rebase); persistent workers hold a
        copy of the old stream, so their pool is dropped (the next ``iter()`` starts one on the new
        order), and a packed stream's epoch indexes, built on the old order, are forgotten."""
        order = self.config.order
        if point != order.point():
            self._close_active()
            torch_compat.drop_persistent_iterator(self._torch)
            order.move_to(point)
            self._stream.forget()
            self._fingerprint = self.config.fingerprint()
