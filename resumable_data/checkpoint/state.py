"""``rd.TrainingState``: the whole training state as one ``Stateful`` bundle.

It holds the live objects (model, optimizer, scheduler, grad scaler, ``rd.DataLoader``, EMA,
callbacks, metric log) plus what they do not hold themselves: every global RNG, accumulated
gradients and the microstep inside an accumulation window, module train/eval modes, the run's
lineage (run id, parent checkpoint id, recovery label) and its metadata (:class:`CheckpointMeta`).

``state_dict()`` returns a nested dict of tensors and JSON values (``torch.distributed.checkpoint``
accepts it; :func:`rd.save_checkpoint` writes it as safetensors + JSON). Optimizer state is keyed
by parameter FQN. ``load_state_dict(state, label=...)`` is all or nothing (:mod:`.restore`): it checks the
compatibility contract (:func:`rd.check_compatible`), type-checks every part it restores against
the live objects and validates the loader's state, all before changing anything; it then snapshots
the objects, restores what the label restores, verifies the restored oracles (digests of
parameters, moments, generator states, the next batch's record ids) and rolls every object back
if any step fails.

Accumulation windows (``accumulation=``):

* ``"save_gradients"`` (default): a checkpoint inside a window stores the accumulated gradients;
  the restore puts them back, re-delivers the window's uncommitted microbatches to nobody (the
  loader fetches at most ``k - 1`` batches and drops them) so ``microstep`` and the token counter
  continue, and the next batch is the one the interrupted run would have seen. Exact.
* ``"rewind"``: no gradients are stored; the checkpoint stores the RNG states and buffers of the
  window's start (snapshotted by :meth:`TrainingState.commit`) and the loader repeats the window
  (``on_uncommitted="repeat"``). Exact, at the cost of recomputing up to ``k - 1`` microbatches.

``torch.distributed.checkpoint`` (DCP): ``state_dict()`` returns the DCP layout (one JSON string
plus tensors whose paths depend only on the configuration, per-rank generators gathered into one
table): see :mod:`resumable_data.checkpoint.dcp_layout`, which packs and unpacks it.

:func:`rd.save_checkpoint` writes the file layout (:meth:`TrainingState.file_state_dict`: the
documented safetensors + JSON format, unchanged); ``load_state_dict`` accepts both layouts.

Restore cost: one ``load_state_dict`` per object, plus (``save_gradients``, mid-window) fetching
up to ``k - 1`` batches; oracles hash every restored tensor twice (the saved tree before, the live
objects after); the rollback snapshot holds one copy of the parameters and buffers.

The restore (:mod:`.restore`) reads this object's public attributes and, for what it keeps to
itself (parameter names, oracles, the accumulation window's start snapshot), one
:class:`~resumable_data.checkpoint.restore.TrainingHooks` that ``load_state_dict`` hands over: an
internal contract, not part of the ``rd`` API.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch
from torch.optim.lr_scheduler import LRScheduler

from resumable_data._schema import coerce_enum, expect_header, expect_mapping
from resumable_data.checkpoint import dcp_layout
from resumable_data.checkpoint import restore as restore_mod
from resumable_data.checkpoint import rng as rng_mod
from resumable_data.checkpoint.census import build_inventory
from resumable_data.checkpoint.compat import CompatibilityReport, check_compatible
from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.checkpoint.inventory import Inventory
from resumable_data.checkpoint.keys import (
    _KEYS,
    K_ACCUMULATION,
    K_CALLBACKS,
    K_EMA,
    K_FORMAT,
    K_GRADIENTS,
    K_LAYOUT,
    K_LOADER,
    K_META,
    K_METRICS,
    K_MODEL,
    K_MODES,
    K_OPTIMIZER,
    K_ORACLES,
    K_RNG,
    K_SCALER,
    K_SCHEDULER,
    K_SCHEMA,
    K_TENSORS,
    LAYOUT_DCP,
    STATE_FORMAT,
    STATE_OLDER_VERSIONS,
    STATE_SCHEMA_VERSION,
)
from resumable_data.checkpoint.meta import (
    CheckpointMeta,
    SchedulerConvention,
    fingerprint,
    module_meta,
    module_modes,
    new_id,
    scheduler_meta,
    software_versions,
)
from resumable_data.checkpoint.metrics import MetricLog
from resumable_data.checkpoint.optim import (
    dense_optimizer_state,
    group_settings,
    optimizer_state,
    param_fqns,
)
from resumable_data.checkpoint.oracles import oracles_of, status_of
from resumable_data.checkpoint.policies import AccumulationPolicy, NewRankRNG
from resumable_data.checkpoint.status import AccumulationStatus, CheckpointStatus
from resumable_data.checkpoint.torch_compat import scaler_device
from resumable_data.checkpoint.undo import copy_module_state
from resumable_data.errors import ConfigError, ResumableDataError, describe
from resumable_data.labels import RecoveryLabel
from resumable_data.loader.dataloader import DataLoader
from resumable_data.loader.protocol import ResumableLoader
from resumable_data.loader.state import CommitMode, LoaderState, OnBatchChange

__all__ = ["STATE_FORMAT", "STATE_SCHEMA_VERSION", "AccumulationPolicy", "NewRankRNG", "TrainingState"]

L = RecoveryLabel
#: What each label restores (everything else keeps the fresh object's state).
_EVERYTHING = frozenset(
    {K_MODEL, K_OPTIMIZER, K_SCHEDULER, K_SCALER, K_LOADER, K_EMA, K_CALLBACKS, K_RNG, K_GRADIENTS, K_MODES, K_METRICS}
)
RESTORES: dict[RecoveryLabel, frozenset[str]] = {
    L.FAITHFUL_CONTINUATION: _EVERYTHING,
    L.ELASTIC_RESHARD: _EVERYTHING,  # the same run on another world size: every category continues
    L.OPTIMIZER_RESET: frozenset({K_MODEL, K_LOADER, K_EMA, K_CALLBACKS, K_RNG, K_MODES}),
    L.WARM_START: frozenset({K_MODEL, K_EMA}),
    L.DATA_CHANGE: _EVERYTHING - {K_GRADIENTS, K_METRICS},
}
CONTINUES_RUN = frozenset({L.FAITHFUL_CONTINUATION, L.ELASTIC_RESHARD})


def _plain_lr(lr: Any) -> Any:
    """A copy of a group's LR (a tensor LR is changed in place by some schedulers)."""
    return lr.detach().clone() if isinstance(lr, torch.Tensor) else lr


class Stateful(Protocol):
    """torch's ``torch.distributed.checkpoint.stateful.Stateful``, restated for annotations (the
    same structure, so the two are interchangeable to a type checker): importing torch's costs
    about half a second, so :func:`is_stateful` imports it on first use."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


def is_stateful(obj: Any) -> bool:
    """Whether ``obj`` meets torch's ``Stateful`` protocol (``state_dict()`` and
    ``load_state_dict(sd)``; imported here, on first use: ``torch.distributed.checkpoint`` costs
    about half a second to import)."""
    from torch.distributed.checkpoint.stateful import Stateful as TorchStateful

    return isinstance(obj, TorchStateful)


class TrainingState:
    """Everything that shapes the next update, as one ``Stateful`` (see the module docs).

    ``model``, ``optimizer``, ``scheduler``, ``scaler``, ``loader``, ``ema``, ``callbacks`` and
    ``metrics`` are the live objects, saved and restored by reference. ``config`` and
    ``feature_schema`` are fingerprinted into the metadata (a different one is refused on a
    faithful resume); ``recovery_spec`` records the transition rules; ``scheduler_convention``
    says what one scheduler step counts. ``accumulation`` (:class:`AccumulationPolicy`) makes a
    checkpoint inside an accumulation window exact. ``capture_rng=False`` leaves the global
    generators out (such a checkpoint restores into a TrainingState built with ``capture_rng=False``,
    or under ``label='warm_start'``: one that captures them refuses a checkpoint without them);
    ``new_rank_rng`` (:class:`NewRankRNG`) decides what a DCP load on more ranks
    does. ``watch_model=True`` (default) calls ``loader.watch(model)``: with ``commit="auto"`` the
    batch in hand counts as consumed only once the model's training forward ran on it, so a loop
    that fetches the next batch before the backward (or saves before the forward) resumes
    exactly; pass ``False`` to count every delivered batch.

    After a restore, ``run_id``, ``parent_checkpoint_id`` and ``recovery_label`` record the lineage
    and ``last_report`` holds the :class:`~resumable_data.CompatibilityReport` that
    :meth:`load_state_dict` returned (None before any restore; a refused restore leaves all four as
    they were). ``rd.load_checkpoint`` also returns the report; after
    ``torch.distributed.checkpoint.load``, which drops ``load_state_dict``'s return value,
    ``last_report`` is where to read it.
    """

    def __init__(
        self,
        *,
        model: torch.nn.Module | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: LRScheduler | Stateful | None = None,
        scaler: torch.amp.GradScaler | Stateful | None = None,
        loader: Any = None,
        ema: Any = None,
        callbacks: Mapping[str, Any] | None = None,
        metrics: MetricLog | None = None,
        config: Any = None,
        feature_schema: Any = None,
        recovery_spec: Mapping[str, Any] | None = None,
        scheduler_convention: SchedulerConvention | str = SchedulerConvention.ATTEMPTED_UPDATE,
        accumulation: AccumulationPolicy | str = AccumulationPolicy.SAVE_GRADIENTS,
        run_id: str | None = None,
        capture_rng: bool = True,
        new_rank_rng: NewRankRNG | str = NewRankRNG.REFUSE,
        watch_model: bool = True,
    ) -> None:
        if model is not None and not isinstance(model, torch.nn.Module):
            raise ConfigError(describe("model", type(model).__name__, "a torch.nn.Module", "pass the model"))
        if optimizer is not None and model is None:
            raise ConfigError(
                describe(
                    "model",
                    None,
                    "the model whose parameters the optimizer updates",
                    "pass model= (optimizer state is keyed by parameter name)",
                )
            )
        if scheduler is not None and optimizer is None:
            raise ConfigError(describe("optimizer", None, "the optimizer the scheduler drives", "pass optimizer="))
        if loader is not None and not isinstance(loader, ResumableLoader):
            raise ConfigError(
                describe(
                    "loader",
                    type(loader).__name__,
                    "an rd.DataLoader (the rd.ResumableLoader protocol: cursor, snapshot(), state_dict(), ...)",
                    "pass the rd.DataLoader",
                )
            )
        for name, obj in (
            ("scheduler", scheduler),
            ("scaler", scaler),
            ("loader", loader),
            ("ema", ema),
            ("metrics", metrics),
        ):
            if obj is not None and not is_stateful(obj):
                raise ConfigError(
                    describe(
                        name,
                        type(obj).__name__,
                        "an object with state_dict()/load_state_dict()",
                        f"pass a stateful {name} or None",
                    )
                )
        self.new_rank_rng = coerce_enum(new_rank_rng, NewRankRNG, "new_rank_rng")
        self.callbacks = dict(callbacks or {})
        for name, cb in self.callbacks.items():
            if not isinstance(name, str) or not is_stateful(cb):
                raise ConfigError(
                    describe(
                        f"callbacks[{name!r}]",
                        type(cb).__name__,
                        "a str name -> object with state_dict()/load_state_dict()",
                        "give each callback a name and a state_dict()",
                    )
                )
        self.model, self.optimizer, self.scheduler, self.scaler = model, optimizer, scheduler, scaler
        self.loader, self.ema, self.metrics = loader, ema, metrics
        self.config = config
        self.feature_fingerprint = None if feature_schema is None else fingerprint(feature_schema)
        self.feature_kind = None if feature_schema is None else type(feature_schema).__name__
        self.recovery_spec = dict(recovery_spec) if recovery_spec is not None else None
        self.scheduler_convention = coerce_enum(scheduler_convention, SchedulerConvention, "scheduler_convention")
        self.accumulation = coerce_enum(accumulation, AccumulationPolicy, "accumulation")
        self.capture_rng = bool(capture_rng)
        self.run_id = run_id or new_id()
        self.parent_checkpoint_id: str | None = None
        self.recovery_label = RecoveryLabel.FAITHFUL_CONTINUATION
        #: the report of the last successful :meth:`load_state_dict` (None before any restore)
        self.last_report: CompatibilityReport | None = None
        self._names = param_fqns(("", model)) if model is not None else {}
        # each group's LR as built: a loop may set the LR by hand every iteration (progress, not config)
        self._built_lrs = [_plain_lr(g.get("lr")) for g in optimizer.param_groups] if optimizer is not None else None
        if not isinstance(watch_model, bool):
            raise ConfigError(
                describe("watch_model", watch_model, "True or False", "pass watch_model=True (the default) or False")
            )
        if watch_model and model is not None and isinstance(loader, DataLoader):
            loader.watch(model)  # the batch in hand counts once the model's training forward ran on it
        snap = loader.snapshot() if loader is not None else None  # changes nothing, in any commit mode
        self._k = snap.accumulation_steps if snap is not None else 1
        self._explicit = snap is not None and snap.commit is CommitMode.EXPLICIT
        self._window: dict[str, Any] | None = None
        if loader is None or not self._mid_window():
            self.mark_window_start()

    # -- training-loop hooks ----------------------------------------------------------------------
    def commit(self, applied: bool = True) -> None:
        """``loader.commit(applied)`` and mark the start of the next accumulation window."""
        if self.loader is None:
            raise ConfigError(describe("loader", None, "an rd.DataLoader", "pass loader= to TrainingState"))
        self.loader.commit(applied=applied)
        self.mark_window_start()

    def mark_window_start(self) -> None:
        """Snapshot RNG states and buffers at an accumulation window's start (used by ``rewind``).
        :meth:`commit` calls it; call it yourself before the first batch if randomness was drawn since
        this object was built."""
        buffers = {}
        if self.model is not None:
            params = {n for n, _ in self.model.named_parameters(remove_duplicate=False)}
            buffers = copy_module_state(self.model, skip=params)  # buffers and extra states
        self._window = {
            "committed": self._committed(),
            "rng": rng_mod.capture() if self.capture_rng else None,
            "buffers": buffers,
        }

    def _committed(self) -> int | None:
        return None if self.loader is None else int(self.loader.cursor.committed)

    def _mid_window(self) -> bool:
        """Inside an accumulation window: delivered microbatches whose update has not happened."""
        if self.loader is None:
            return any(p.grad is not None for p in self.model.parameters()) if self.model is not None else False
        c = self.loader.cursor
        if self._explicit:
            return c.delivered > c.committed
        return c.delivered > 0 and (int(self.loader.microstep) + 1) % self._k != 0

    # -- metadata ---------------------------------------------------------------------------------
    def meta(
        self,
        *,
        checkpoint_id: str | None = None,
        loader_state: LoaderState | None = None,
        status: CheckpointStatus | None = None,
    ) -> CheckpointMeta:
        """This run's :class:`CheckpointMeta` (what a checkpoint of it would record)."""
        model = module_meta(self.model, self.config) if self.model is not None else None
        opt = None
        if self.optimizer is not None:
            opt = {
                "type": f"{type(self.optimizer).__module__}.{type(self.optimizer).__qualname__}",
                "param_groups": group_settings(self.optimizer, self._names, self._built_lrs),
            }
        sched = scheduler_meta(self.scheduler, self.scheduler_convention) if self.scheduler is not None else None
        scaler = None
        if self.scaler is not None:
            sd = self.scaler.state_dict()
            # another Stateful standing in for a GradScaler: enabled when it has state
            enabled = self.scaler.is_enabled() if isinstance(self.scaler, torch.amp.GradScaler) else bool(sd)
            scaler = {
                "type": f"{type(self.scaler).__module__}.{type(self.scaler).__qualname__}",
                "enabled": enabled,
                "device": scaler_device(self.scaler),
                "settings": {k: sd[k] for k in ("growth_factor", "backoff_factor", "growth_interval") if k in sd},
            }
        ema = None
        if self.ema is not None:
            ema = {"type": f"{type(self.ema).__module__}.{type(self.ema).__qualname__}"}
            if isinstance(self.ema, torch.nn.Module):
                m = module_meta(self.ema)
                ema.update(parameters=m["parameters"], buffers=m["buffers"])
        data = None
        world = 1
        if self.loader is not None:
            snap = loader_state if loader_state is not None else self.loader.snapshot()
            data = snap.fingerprint_dict()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            world = torch.distributed.get_world_size()
        return CheckpointMeta(
            run_id=self.run_id,
            checkpoint_id=checkpoint_id,
            parent_checkpoint_id=self.parent_checkpoint_id,
            recovery_label=self.recovery_label,
            model=model,
            feature_schema=None
            if self.feature_fingerprint is None
            else {"fingerprint": self.feature_fingerprint, "kind": self.feature_kind},
            optimizer=opt,
            scheduler=sched,
            scaler=scaler,
            ema=ema,
            callbacks=sorted(self.callbacks),
            data=data,
            layout={"world_size": world},
            software=software_versions(),
            recovery_spec=json.loads(json.dumps(self.recovery_spec)) if self.recovery_spec is not None else None,
            status=status or CheckpointStatus(),
        )

    def check(
        self,
        saved_meta: CheckpointMeta | dict,
        label: RecoveryLabel | str = L.FAITHFUL_CONTINUATION,
        *,
        on_batch_change: OnBatchChange | str | None = None,
    ) -> CompatibilityReport:
        """The compatibility report of resuming ``saved_meta`` into this run under ``label`` (and
        the loader's declared ``on_batch_change``)."""
        return check_compatible(saved_meta, self.meta(), label, on_batch_change=on_batch_change)

    # -- Stateful ---------------------------------------------------------------------------------
    def state_dict(self, *, checkpoint_id: str | None = None) -> dict[str, Any]:
        """The ``torch.distributed.checkpoint`` layout (module docs): ``dcp.save({"train": state}, ...)``.

        A collective when torch.distributed is initialized with more than one rank (the per-rank
        generator states are gathered): call it on every rank."""
        return dcp_layout.pack(self._tree(checkpoint_id, dcp=True), self.model)

    def file_state_dict(self, *, checkpoint_id: str | None = None) -> dict[str, Any]:
        """The file layout :func:`rd.save_checkpoint` writes: nested tensors + JSON values, only the
        state that exists (tensors are live references; the writer copies them). Local to this process."""
        return self._tree(checkpoint_id, dcp=False)

    def _tree(self, checkpoint_id: str | None, *, dcp: bool, placeholders: bool = True) -> dict[str, Any]:
        """The state tree; ``placeholders=False`` (verification) names stateless optimizer parameters
        without the placeholder step (the oracles do not digest placeholders)."""
        snap = self.loader.snapshot() if self.loader is not None else None
        mid = self._mid_window()
        rewind = mid and self.accumulation is AccumulationPolicy.REWIND and snap is not None
        window = self._window or {}  # read only when rewinding, where it is checked first
        if rewind and snap is not None:
            if snap.commit is not CommitMode.EXPLICIT:
                raise CheckpointError(
                    describe(
                        "accumulation",
                        "rewind",
                        "a loader built with commit='explicit'",
                        "pass commit='explicit' to rd.DataLoader, or accumulation='save_gradients'",
                    )
                )
            if self._window is None or window["committed"] != snap.cursor.committed:
                raise CheckpointError(
                    describe(
                        "accumulation",
                        "rewind",
                        "a window-start snapshot for the current window",
                        "commit with state.commit(applied) instead of loader.commit(), or call "
                        "state.mark_window_start() before the window's first batch",
                    )
                )
        model_sd = None
        if self.model is not None:
            model_sd = dict(self.model.state_dict())
            if rewind:
                model_sd.update(window["buffers"])
        rng = None
        if self.capture_rng:
            rng = window["rng"] if rewind else rng_mod.capture()
        grads = None
        if mid and not rewind and self.model is not None:
            grads = {n: p.grad for n, p in self.model.named_parameters() if p.grad is not None}
            sparse = [n for n, g in grads.items() if g.layout != torch.strided]
            if sparse:  # nn.Embedding(sparse=True): the tensor file holds dense tensors only
                raise CheckpointError(
                    describe(
                        f"gradients.{sparse[0]}",
                        f"a {grads[sparse[0]].layout} gradient inside an accumulation window",
                        "dense gradients (the checkpoint stores a window's accumulated gradients)",
                        "checkpoint at a window boundary (after optimizer.zero_grad(set_to_none=True)), or use "
                        "accumulation='rewind' with commit='explicit' (the window is repeated, no gradient is stored)",
                    )
                )
        grad_names = sorted(grads or {})
        if dcp:
            if self._grad_slots() and self.model is not None:  # slots only with a model
                have = grads or {}
                grads = {
                    n: have[n] if n in have else torch.zeros_like(p)
                    for n, p in self.model.named_parameters()
                    if p.requires_grad or n in have
                }
            elif grads:  # pragma: no cover - _grad_slots() covers every configuration that can be mid-window
                raise CheckpointError("internal: mid-window gradients without DCP gradient slots")
        modes = {}
        if self.model is not None:
            modes[K_MODEL] = module_modes(self.model)
        if isinstance(self.ema, torch.nn.Module):
            modes[K_EMA] = module_modes(self.ema)
        acc = AccumulationStatus(
            self.accumulation.value,
            bool(mid),
            bool(rewind),
            int(self.loader.microstep) if self.loader is not None and mid else None,
            snap.uncommitted if snap is not None else 0,
            tuple(grad_names) if dcp else None,
        )
        accumulation = acc.to_dict()
        state = {
            K_FORMAT: STATE_FORMAT,
            K_SCHEMA: STATE_SCHEMA_VERSION,
            K_MODEL: model_sd,
            K_OPTIMIZER: None
            if self.optimizer is None or self.model is None  # an optimizer comes with its model (checked)
            else (
                dense_optimizer_state(self.model, self.optimizer, placeholders=placeholders)
                if dcp
                else optimizer_state(self.optimizer, self._names)
            ),
            K_SCHEDULER: self.scheduler.state_dict() if self.scheduler is not None else None,
            K_SCALER: self.scaler.state_dict() if self.scaler is not None else None,
            K_LOADER: snap.to_dict() if snap is not None else None,
            K_EMA: self.ema.state_dict() if self.ema is not None else None,
            K_CALLBACKS: {k: cb.state_dict() for k, cb in self.callbacks.items()},
            K_RNG: rng,
            K_GRADIENTS: grads,
            K_MODES: modes,
            K_ACCUMULATION: accumulation,
            K_METRICS: self.metrics.state_dict() if self.metrics is not None else None,
        }
        next_step = snap.next_step(rewound=rewind) if snap is not None else None
        state[K_ORACLES] = self._oracles(state, next_step)
        state[K_META] = self.meta(
            checkpoint_id=checkpoint_id, loader_state=snap, status=self._status(snap, acc, next_step)
        ).to_dict()
        return state

    def _grad_slots(self) -> bool:
        """Whether the DCP layout presents gradient slots (a mid-window checkpoint is possible)."""
        if self.model is None:
            return False
        if self.loader is None:
            return True
        return self.accumulation is AccumulationPolicy.SAVE_GRADIENTS and (self._k > 1 or self._explicit)

    def _status(
        self, snap: LoaderState | None, accumulation: AccumulationStatus, next_step: int | None
    ) -> CheckpointStatus:
        return status_of(self, snap, accumulation, next_step)

    # -- oracles ----------------------------------------------------------------------------------
    def _oracles(self, state: dict[str, Any], next_step: int | None) -> dict[str, str]:
        return oracles_of(self, state, next_step)

    def oracles(self) -> dict[str, str]:
        """The oracles of the live state (what a checkpoint written now would record)."""
        return self._tree(None, dcp=False)[K_ORACLES]

    # -- restore ----------------------------------------------------------------------------------
    def load_state_dict(
        self,
        state: Mapping[str, Any],
        *,
        label: RecoveryLabel | str = L.FAITHFUL_CONTINUATION,
        verify: bool = True,
        allow_unpinned: bool = False,
        on_batch_change: OnBatchChange | str | None = None,
    ) -> CompatibilityReport:
        """Restore ``state`` under ``label``, all or nothing (:mod:`~resumable_data.checkpoint.restore`).

        Everything is parsed, type-checked and compared (the compatibility contract, every restored
        part against the live objects, the loader's full state) before any object changes; an error
        at any point (only :class:`~resumable_data.ResumableDataError` subclasses) leaves every
        object as it was. ``allow_unpinned=True`` lets the loader resume over a dataset without a
        pinned version and ``on_batch_change="continue"`` another global batch (both passed to
        ``loader.load_state_dict``; a batch change relabels the restore ``elastic_reshard``).

        Returns the compatibility report (warnings included; they are also issued as a
        ``RuntimeWarning``). Accepts the file layout and the DCP layout (module docs). See
        :data:`RESTORES` for what each label restores; a label other than a continuation starts a
        new run id."""
        label = coerce_enum(label, RecoveryLabel, "label")
        change = None if on_batch_change is None else coerce_enum(on_batch_change, OnBatchChange, "on_batch_change")
        if not isinstance(allow_unpinned, bool):
            raise ConfigError(
                describe(
                    "allow_unpinned",
                    allow_unpinned,
                    "True or False",
                    "pass allow_unpinned=True to resume over an unpinned dataset",
                )
            )
        if not isinstance(state, Mapping):
            raise CheckpointError(describe("state", type(state).__name__, "the dict state_dict() returned", "pass it"))
        tree: Mapping[str, Any]
        try:
            if state.get(K_LAYOUT) == LAYOUT_DCP:
                tree, entries, saved_world = dcp_layout.unpack(state)
                saved_meta = CheckpointMeta.from_dict(tree[K_META], "saved meta")
                report = self.check(saved_meta, label, on_batch_change=change)
                report.raise_if_refused()
                tree, skip = dcp_layout.select_rank(
                    tree,
                    state[K_TENSORS],
                    entries,
                    saved_world,
                    restores_rng=K_RNG in RESTORES[label],
                    keep_new_rank_rng=self.new_rank_rng is NewRankRNG.KEEP,
                    captures_rng=self.capture_rng,
                )
                dcp: dict | None = {"skip": skip}
            else:
                if state.get(K_FORMAT) == STATE_FORMAT and isinstance(state.get(K_SCHEMA), int):
                    expect_header(
                        state,
                        STATE_FORMAT,
                        STATE_SCHEMA_VERSION,
                        "state",
                        error=CheckpointError,
                        also=STATE_OLDER_VERSIONS,
                    )
                expect_mapping(state, "state", _KEYS, error=CheckpointError)
                expect_header(
                    state, STATE_FORMAT, STATE_SCHEMA_VERSION, "state", error=CheckpointError, also=STATE_OLDER_VERSIONS
                )
                tree, dcp = state, None
                saved_meta = CheckpointMeta.from_dict(state[K_META], "saved meta")
                report = self.check(saved_meta, label, on_batch_change=change)
                report.raise_if_refused()
        except ResumableDataError:
            raise
        except Exception as e:
            raise CheckpointError(
                describe(
                    "state",
                    f"malformed ({type(e).__name__}: {e})",
                    "a state written by this package",
                    "load another checkpoint",
                )
            ) from e
        if report.batch_changed and label is L.FAITHFUL_CONTINUATION:
            label = L.ELASTIC_RESHARD  # a new grouping of the same stream, as the loader labels it
        options = {
            "allow_unpinned": allow_unpinned,
            **({} if change is None else {"on_batch_change": change}),
            **({"label": L.DATA_CHANGE} if label is L.DATA_CHANGE else {}),
        }
        return restore_mod.restore(
            self,
            self._restore_hooks(),
            tree,
            label,
            verify,
            saved_meta,
            report,
            restores=RESTORES[label],
            continues=label in CONTINUES_RUN,
            dcp=dcp,
            loader_options=options,
        )

    def _restore_hooks(self) -> restore_mod.TrainingHooks:
        """The internal contract the restore reads this state through (:class:`restore.TrainingHooks`)."""

        def keep_window() -> Callable[[], None]:
            window = self._window

            def back() -> None:
                self._window = window

            return back

        def window_restored() -> None:
            if self._mid_window():
                self._window = None  # the window started before the restore: its start was not seen here
            else:
                self.mark_window_start()

        return restore_mod.TrainingHooks(
            names=self._names,
            tree_oracles=lambda tree: self._oracles(tree, None),
            live_oracles=lambda dcp: self._tree(None, dcp=dcp, placeholders=False)[K_ORACLES],
            keep_window=keep_window,
            window_restored=window_restored,
        )

    # -- inventory --------------------------------------------------------------------------------
    def inventory(self) -> Inventory:
        """One entry per state category with owner, serialization, restore action and oracle value."""
        return build_inventory(self, self.file_state_dict())
