"""``rd.TrainingState``: the whole training state as one ``Stateful`` bundle.

It holds the live objects (model, optimizer, scheduler, grad scaler, ``rd.DataLoader``, EMA,
callbacks, metric log) plus what they do not hold themselves: every global RNG, accumulated
gradients and the microstep inside an accumulation window, module train/eval modes, the run's
lineage (run id, parent checkpoint id, recovery label) and its metadata (:class:`CheckpointMeta`).

``state_dict()`` returns a nested dict of tensors and JSON values (``torch.distributed.checkpoint``
accepts it; :func:`rd.save_checkpoint` writes it as safetensors + JSON). Optimizer state is keyed
by parameter FQN. ``load_state_dict(state, label=...)`` first checks the compatibility contract
(:func:`rd.check_compatible`) and refuses, before changing anything, every difference the label
does not allow; it then restores what the label restores and verifies the restored oracles
(digests of parameters, moments, generator states, the next batch's record ids) against the
saved ones.

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
up to ``k - 1`` batches; oracles hash every restored tensor once.
"""

from __future__ import annotations

import enum
import json
import warnings
from collections.abc import Mapping
from typing import Any

import torch

from resumable_data._schema import coerce_enum, expect_header, expect_mapping
from resumable_data.checkpoint import dcp_layout
from resumable_data.checkpoint import rng as rng_mod
from resumable_data.checkpoint.compat import CompatibilityReport, check_compatible
from resumable_data.checkpoint.digest import digest_json, digest_tensors, flatten
from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.checkpoint.inventory import Inventory
from resumable_data.checkpoint.keys import (
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
    STATE_SCHEMA_VERSION,
    _KEYS,
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
from resumable_data.checkpoint.status import AccumulationStatus, CheckpointStatus
from resumable_data.checkpoint.torch_compat import scaler_device
from resumable_data.checkpoint.optim import (
    dense_optimizer_state,
    group_settings,
    load_dense_optimizer_state,
    load_optimizer_state,
    optimizer_state,
    param_fqns,
)
from resumable_data.errors import ConfigError, describe
from resumable_data.labels import RecoveryLabel
from resumable_data.loader.protocol import ResumableLoader
from resumable_data.loader.state import CommitMode, LoaderState

__all__ = ["STATE_FORMAT", "STATE_SCHEMA_VERSION", "AccumulationPolicy", "NewRankRNG", "TrainingState"]

L = RecoveryLabel
#: What each label restores (everything else keeps the fresh object's state).
RESTORES: dict[RecoveryLabel, frozenset[str]] = {
    L.FAITHFUL_CONTINUATION: frozenset({K_MODEL, K_OPTIMIZER, K_SCHEDULER, K_SCALER, K_LOADER, K_EMA, K_CALLBACKS, K_RNG,
                                        K_GRADIENTS, K_MODES, K_METRICS}),
    L.ELASTIC_RESHARD: frozenset({K_MODEL, K_OPTIMIZER, K_SCHEDULER, K_SCALER, K_LOADER, K_EMA, K_CALLBACKS, K_RNG,
                                  K_GRADIENTS, K_MODES, K_METRICS}),
    L.OPTIMIZER_RESET: frozenset({K_MODEL, K_LOADER, K_EMA, K_CALLBACKS, K_RNG, K_MODES}),
    L.WARM_START: frozenset({K_MODEL, K_EMA}),
    L.DATA_CHANGE: frozenset({K_MODEL, K_OPTIMIZER, K_SCHEDULER, K_SCALER, K_EMA, K_CALLBACKS, K_RNG, K_MODES}),
}
CONTINUES_RUN = frozenset({L.FAITHFUL_CONTINUATION, L.ELASTIC_RESHARD})


class AccumulationPolicy(str, enum.Enum):
    """How a checkpoint inside a gradient-accumulation window is made exact."""

    #: Store the accumulated gradients and continue the window after the restore.
    SAVE_GRADIENTS = "save_gradients"
    #: Store the window start's RNG and buffers; the loader repeats the window.
    REWIND = "rewind"


class NewRankRNG(str, enum.Enum):
    """What a DCP load on more ranks than saved does for the ranks without saved generators."""

    #: The load raises :class:`CompatibilityError` on every rank.
    REFUSE = "refuse"
    #: Those ranks keep the generators the process seeded itself (seed them by rank).
    KEEP = "keep"


def _has_state(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


class TrainingState:
    """Everything that shapes the next update, as one ``Stateful`` (see the module docs)."""

    def __init__(
        self,
        *,
        model: torch.nn.Module | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: Any = None,
        scaler: Any = None,
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
    ) -> None:
        if model is not None and not isinstance(model, torch.nn.Module):
            raise ConfigError(describe("model", type(model).__name__, "a torch.nn.Module", "pass the model"))
        if optimizer is not None and model is None:
            raise ConfigError(describe("model", None, "the model whose parameters the optimizer updates",
                                       "pass model= (optimizer state is keyed by parameter name)"))
        if scheduler is not None and optimizer is None:
            raise ConfigError(describe("optimizer", None, "the optimizer the scheduler drives", "pass optimizer="))
        if loader is not None and not isinstance(loader, ResumableLoader):
            raise ConfigError(describe("loader", type(loader).__name__, "an rd.DataLoader (the rd.ResumableLoader "
                                       "protocol: cursor, snapshot(), state_dict(), ...)", "pass the rd.DataLoader"))
        for name, obj in (("scheduler", scheduler), ("scaler", scaler), ("loader", loader), ("ema", ema),
                          ("metrics", metrics)):
            if obj is not None and not _has_state(obj):
                raise ConfigError(describe(name, type(obj).__name__, "an object with state_dict()/load_state_dict()",
                                           f"pass a stateful {name} or None"))
        self.new_rank_rng = coerce_enum(new_rank_rng, NewRankRNG, "new_rank_rng")
        self.callbacks = dict(callbacks or {})
        for name, cb in self.callbacks.items():
            if not isinstance(name, str) or not _has_state(cb):
                raise ConfigError(describe(f"callbacks[{name!r}]", type(cb).__name__,
                                           "a str name -> object with state_dict()/load_state_dict()",
                                           "give each callback a name and a state_dict()"))
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
        self.last_report: CompatibilityReport | None = None
        self._names = param_fqns(("", model)) if model is not None else {}
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
            buffers = {k: v.detach().clone() for k, v in self.model.state_dict().items() if k not in params}
        self._window = {"committed": self._committed(), "rng": rng_mod.capture() if self.capture_rng else None,
                        "buffers": buffers}

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
    def meta(self, *, checkpoint_id: str | None = None, loader_state: LoaderState | None = None,
             status: CheckpointStatus | None = None) -> CheckpointMeta:
        """This run's :class:`CheckpointMeta` (what a checkpoint of it would record)."""
        model = module_meta(self.model, self.config) if self.model is not None else None
        opt = None
        if self.optimizer is not None:
            opt = {"type": f"{type(self.optimizer).__module__}.{type(self.optimizer).__qualname__}",
                   "param_groups": group_settings(self.optimizer, self._names)}
        sched = scheduler_meta(self.scheduler, self.scheduler_convention) if self.scheduler is not None else None
        scaler = None
        if self.scaler is not None:
            sd = self.scaler.state_dict()
            enabled = bool(getattr(self.scaler, "is_enabled", lambda: bool(sd))())
            scaler = {"type": f"{type(self.scaler).__module__}.{type(self.scaler).__qualname__}", "enabled": enabled,
                      "device": scaler_device(self.scaler),
                      "settings": {k: sd[k] for k in ("growth_factor", "backoff_factor", "growth_interval") if k in sd}}
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
            run_id=self.run_id, checkpoint_id=checkpoint_id, parent_checkpoint_id=self.parent_checkpoint_id,
            recovery_label=self.recovery_label, model=model,
            feature_schema=None if self.feature_fingerprint is None else {"fingerprint": self.feature_fingerprint,
                                                                           "kind": self.feature_kind},
            optimizer=opt, scheduler=sched, scaler=scaler, ema=ema, callbacks=sorted(self.callbacks), data=data,
            layout={"world_size": world}, software=software_versions(),
            recovery_spec=json.loads(json.dumps(self.recovery_spec)) if self.recovery_spec is not None else None,
            status=status or CheckpointStatus(),
        )

    def check(self, saved_meta: CheckpointMeta | dict, label: RecoveryLabel | str = L.FAITHFUL_CONTINUATION
              ) -> CompatibilityReport:
        """The compatibility report of resuming ``saved_meta`` into this run under ``label``."""
        return check_compatible(saved_meta, self.meta(), label)

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
        if rewind:
            if snap.commit is not CommitMode.EXPLICIT:
                raise CheckpointError(describe("accumulation", "rewind", "a loader built with commit='explicit'",
                                               "pass commit='explicit' to rd.DataLoader, or accumulation='save_gradients'"))
            if self._window is None or self._window["committed"] != snap.cursor.committed:
                raise CheckpointError(describe("accumulation", "rewind",
                                               "a window-start snapshot for the current window",
                                               "commit with state.commit(applied) instead of loader.commit(), or call "
                                               "state.mark_window_start() before the window's first batch"))
        model_sd = None
        if self.model is not None:
            model_sd = dict(self.model.state_dict())
            if rewind:
                model_sd.update(self._window["buffers"])
        rng = None
        if self.capture_rng:
            rng = self._window["rng"] if rewind else rng_mod.capture()
        grads = None
        if mid and not rewind and self.model is not None:
            grads = {n: p.grad for n, p in self.model.named_parameters() if p.grad is not None}
        grad_names = sorted(grads or {})
        if dcp:
            if self._grad_slots():
                have = grads or {}
                grads = {n: have[n] if n in have else torch.zeros_like(p) for n, p in self.model.named_parameters()
                         if p.requires_grad or n in have}
            elif grads:  # pragma: no cover - _grad_slots() covers every configuration that can be mid-window
                raise CheckpointError("internal: mid-window gradients without DCP gradient slots")
        modes = {}
        if self.model is not None:
            modes[K_MODEL] = module_modes(self.model)
        if isinstance(self.ema, torch.nn.Module):
            modes[K_EMA] = module_modes(self.ema)
        acc = AccumulationStatus(self.accumulation.value, bool(mid), bool(rewind),
                                 int(self.loader.microstep) if self.loader is not None and mid else None,
                                 snap.uncommitted if snap is not None else 0,
                                 tuple(grad_names) if dcp else None)
        accumulation = acc.to_dict()
        state = {
            K_FORMAT: STATE_FORMAT,
            K_SCHEMA: STATE_SCHEMA_VERSION,
            K_MODEL: model_sd,
            K_OPTIMIZER: None if self.optimizer is None else (
                dense_optimizer_state(self.model, self.optimizer, placeholders=placeholders) if dcp
                else optimizer_state(self.optimizer, self._names)),
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
        state[K_META] = self.meta(checkpoint_id=checkpoint_id, loader_state=snap,
                                  status=self._status(snap, acc, next_step)).to_dict()
        return state

    def _grad_slots(self) -> bool:
        """Whether the DCP layout presents gradient slots (a mid-window checkpoint is possible)."""
        if self.model is None:
            return False
        if self.loader is None:
            return True
        return self.accumulation is AccumulationPolicy.SAVE_GRADIENTS and (self._k > 1 or self._explicit)

    def _status(self, snap: LoaderState | None, accumulation: AccumulationStatus,
                next_step: int | None) -> CheckpointStatus:
        lr = sched = scale = modes = None
        if self.optimizer is not None:
            lr = tuple(None if g.get("lr") is None else float(g["lr"]) for g in self.optimizer.param_groups)
        if self.scheduler is not None:
            sched = int(getattr(self.scheduler, "last_epoch", -1))
        if self.scaler is not None:
            scale = self.scaler.state_dict().get("scale")
        if self.model is not None:
            m = module_modes(self.model)
            modes = {"training": sum(m.values()), "modules": len(m)}
        return CheckpointStatus(
            accumulation=accumulation, cursor=snap.cursor if snap is not None else None,
            epoch_base=snap.epoch_base if snap is not None else None,
            counters=snap.counter_view().to_dict() if snap is not None else None,
            next_step=next_step, next_lr=lr, scheduler_last_epoch=sched, scale=scale, modes=modes,
        )

    # -- oracles ----------------------------------------------------------------------------------
    def _oracles(self, state: dict[str, Any], next_step: int | None) -> dict[str, str]:
        o: dict[str, str] = {}
        if state[K_MODEL] is not None:
            params = {n for n, _ in self.model.named_parameters(remove_duplicate=False)}
            o["parameters"] = digest_tensors(sorted((k, v) for k, v in state[K_MODEL].items() if k in params))
            o["buffers"] = digest_tensors(sorted((k, v) for k, v in state[K_MODEL].items() if k not in params))
        if state[K_OPTIMIZER] is not None:
            stateless = set(state[K_OPTIMIZER].get("stateless", ()))
            real = {k: v for k, v in state[K_OPTIMIZER]["state"].items() if k not in stateless}
            o["optimizer"] = digest_tensors(flatten("state", real, []))
            o["optimizer_groups"] = digest_json(flatten("groups", state[K_OPTIMIZER]["param_groups"], []))
        if state[K_SCHEDULER] is not None:
            o["scheduler"] = digest_json(flatten("s", state[K_SCHEDULER], []))
        if state[K_SCALER] is not None:
            o["scaler"] = digest_json(state[K_SCALER])
        if state[K_EMA] is not None:
            o["ema"] = digest_tensors(flatten("ema", state[K_EMA], []))
        if state[K_CALLBACKS]:
            o["callbacks"] = digest_tensors(flatten("cb", state[K_CALLBACKS], []))
        if state[K_RNG] is not None:
            for k, v in rng_mod.digests(state[K_RNG]).items():
                o[f"rng.{k}"] = v
        grads = state[K_GRADIENTS]
        if grads and "gradients" in state[K_ACCUMULATION]:  # DCP layout: slots; the saved names are listed
            grads = {n: grads[n] for n in state[K_ACCUMULATION]["gradients"]}
        o["gradients"] = digest_tensors(sorted(grads.items())) if grads else "none"
        if state[K_MODES]:
            o["modes"] = digest_json(state[K_MODES])
        if self.loader is not None and next_step is not None:
            o["next_batch"] = digest_json(self._next_records(next_step).tolist())
        return o

    def _next_records(self, step: int, limit: int | None = None):
        ids = self.loader.step_info(step).records  # records, or a packed batch's documents
        return ids if limit is None else ids[:limit]

    def oracles(self) -> dict[str, str]:
        """The oracles of the live state (what a checkpoint written now would record)."""
        return self._tree(None, dcp=False)[K_ORACLES]

    # -- restore ----------------------------------------------------------------------------------
    def load_state_dict(self, state: Mapping[str, Any], *, label: RecoveryLabel | str = L.FAITHFUL_CONTINUATION,
                        verify: bool = True) -> CompatibilityReport:
        """Restore ``state`` under ``label``; refuses (``CompatibilityError``) before any change.

        Returns the compatibility report (warnings included; they are also issued as a
        ``RuntimeWarning``). Accepts the file layout and the DCP layout (module docs). See
        :data:`RESTORES` for what each label restores; a label other than a continuation starts a
        new run id."""
        label = coerce_enum(label, RecoveryLabel, "label")
        if not isinstance(state, Mapping):
            raise CheckpointError(describe("state", type(state).__name__, "the dict state_dict() returned", "pass it"))
        if state.get(K_LAYOUT) == LAYOUT_DCP:
            return self._load_dcp(state, label, verify)
        if state.get(K_FORMAT) == STATE_FORMAT and isinstance(state.get(K_SCHEMA), int):
            expect_header(state, STATE_FORMAT, STATE_SCHEMA_VERSION, "state", error=CheckpointError)
        expect_mapping(state, "state", _KEYS, error=CheckpointError)
        expect_header(state, STATE_FORMAT, STATE_SCHEMA_VERSION, "state", error=CheckpointError)
        saved_meta = CheckpointMeta.from_dict(state[K_META])
        report = self.check(saved_meta, label)
        report.raise_if_refused()
        return self._restore(state, label, verify, saved_meta, report, dcp=None)

    def _load_dcp(self, state: Mapping[str, Any], label: RecoveryLabel, verify: bool) -> CompatibilityReport:
        """Unpack the DCP layout, apply the world-size policy, then restore like the file layout."""
        tree, entries, saved_world = dcp_layout.unpack(state)
        saved_meta = CheckpointMeta.from_dict(tree[K_META])
        report = self.check(saved_meta, label)
        report.raise_if_refused()
        tree, skip = dcp_layout.select_rank(tree, state[K_TENSORS], entries, saved_world, restores_rng=K_RNG in RESTORES[label],
                                            keep_new_rank_rng=self.new_rank_rng is NewRankRNG.KEEP)
        return self._restore(tree, label, verify, saved_meta, report, dcp={"skip": skip})

    def _restore(self, state: Mapping[str, Any], label: RecoveryLabel, verify: bool, saved_meta: CheckpointMeta,
                 report: CompatibilityReport, *, dcp: dict | None) -> CompatibilityReport:
        if report.warnings:
            warnings.warn(f"resuming with {len(report.warnings)} allowed difference(s) from the checkpoint "
                          f"(label={label.value!r}):\n  - " + "\n  - ".join(str(d) for d in report.warnings),
                          RuntimeWarning, stacklevel=4)
        restores = RESTORES[label]
        acc = state[K_ACCUMULATION]

        def want(key: str, obj: Any) -> bool:
            return key in restores and obj is not None and state[key] is not None

        # 1. weights and optimizer side
        if want(K_MODEL, self.model):
            self.model.load_state_dict(state[K_MODEL], strict=True)
        if want(K_OPTIMIZER, self.optimizer):
            if dcp is not None:
                load_dense_optimizer_state(self.model, self.optimizer, state[K_OPTIMIZER])
            else:
                load_optimizer_state(self.optimizer, self._names, state[K_OPTIMIZER])
        if want(K_SCHEDULER, self.scheduler):
            self.scheduler.load_state_dict(state[K_SCHEDULER])
        if want(K_SCALER, self.scaler):
            self.scaler.load_state_dict(state[K_SCALER])
        if want(K_EMA, self.ema):
            self.ema.load_state_dict(state[K_EMA])
        if K_CALLBACKS in restores:
            for name, cb in self.callbacks.items():
                if name in state[K_CALLBACKS]:
                    cb.load_state_dict(state[K_CALLBACKS][name])
        if K_MODES in restores:
            for key, obj in ((K_MODEL, self.model), (K_EMA, self.ema)):
                if isinstance(obj, torch.nn.Module) and key in state[K_MODES]:
                    for n, m in obj.named_modules():
                        if n in state[K_MODES][key]:
                            m.training = bool(state[K_MODES][key][n])
        # 2. gradients (only a continuation keeps an unfinished window's gradients)
        if self.model is not None:
            saved_grads = state[K_GRADIENTS] if K_GRADIENTS in restores else None
            for n, p in self.model.named_parameters():
                g = (saved_grads or {}).get(n)
                p.grad = None if g is None else g.detach().clone().to(device=p.device, dtype=p.dtype)
        # 3. data cursor (a label that drops the gradients repeats an unfinished window)
        repeated = False
        if self.loader is not None:
            if want(K_LOADER, self.loader):
                ls = state[K_LOADER]
                uncommitted = ls["cursor"]["delivered"] - ls["cursor"]["committed"]
                self.loader.load_state_dict(ls, on_uncommitted="repeat" if uncommitted else None)
                if uncommitted and not acc["rewound"] and K_GRADIENTS in restores:
                    self._advance(uncommitted)
                repeated = bool(uncommitted) and not acc["rewound"] and K_GRADIENTS not in restores
            else:
                self.loader.reset()
        # 4. randomness last (nothing above may draw from it)
        if want(K_RNG, True):
            rng_mod.restore(state[K_RNG])
        # 5. lineage and side effects
        if label in CONTINUES_RUN:
            self.run_id = saved_meta.run_id
        elif self.run_id == saved_meta.run_id:
            self.run_id = new_id()
        self.parent_checkpoint_id = saved_meta.checkpoint_id
        self.recovery_label = label
        if self.metrics is not None:
            if want(K_METRICS, self.metrics):
                self.metrics.load_state_dict(state[K_METRICS], truncate=True)
            self.metrics.set_run(self.run_id, label)
        self.mark_window_start() if not self._mid_window() else setattr(self, "_window", None)
        self.last_report = report
        if verify:
            skip = ({"next_batch"} if repeated else set()) | (dcp["skip"] if dcp is not None else set())
            self._verify(state, restores, skip=skip, dcp=dcp is not None)
        return report

    def _advance(self, n: int) -> None:
        """Deliver (and drop) the ``n`` microbatches whose gradients were restored."""
        left = n
        while left:
            got = False
            for _ in self.loader:
                got = True
                left -= 1
                if not left:
                    break
            if not got:  # pragma: no cover - the loader always has a next epoch
                raise CheckpointError("internal: the loader produced no batch while continuing the window")

    def _verify(self, state: Mapping[str, Any], restores: frozenset[str], skip: set[str], dcp: bool = False) -> None:
        saved = state[K_ORACLES]
        now = self._tree(None, dcp=dcp, placeholders=False)[K_ORACLES]  # the live objects; no optimizer step
        checks = {"parameters": K_MODEL, "buffers": K_MODEL, "optimizer": K_OPTIMIZER, "scheduler": K_SCHEDULER,
                  "scaler": K_SCALER, "ema": K_EMA, "callbacks": K_CALLBACKS, "gradients": K_GRADIENTS,
                  "modes": K_MODES, "next_batch": K_LOADER, "rng.python": K_RNG, "rng.numpy": K_RNG,
                  "rng.torch_cpu": K_RNG, "rng.cuda": K_RNG}
        bad = [f"{k}: saved {saved[k]} vs restored {now.get(k)}" for k, part in checks.items()
               if part in restores and k not in skip and k in saved and k in now and saved[k] != now[k]]
        if bad:
            raise CheckpointError("restored state does not match the checkpoint's oracles (a bug or a stateful object "
                                  "whose load_state_dict is not exact):\n  - " + "\n  - ".join(bad))

    # -- inventory --------------------------------------------------------------------------------
    def inventory(self) -> Inventory:
        """One entry per state category with owner, serialization, restore action and oracle value."""
        from resumable_data.checkpoint.census import build_inventory

        return build_inventory(self, self.file_state_dict())
