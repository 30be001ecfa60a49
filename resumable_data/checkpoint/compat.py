"""The compatibility contract: which differences each recovery label allows.

:func:`check_compatible` compares a checkpoint's :class:`CheckpointMeta` with the current run's,
field by field, and classifies every difference by category and label into a severity:

* ``error``: refused; loading raises :class:`CompatibilityError` before anything is restored;
* ``warning``: allowed, reported (e.g. a software patch version under ``faithful_continuation``);
* ``info``: allowed and expected under this label (e.g. new optimizer settings under
  ``optimizer_reset``).

The contract is versioned (:data:`CONTRACT_VERSION`); the table :data:`RULES` is the whole of it
and is rendered in the README, with two rules beside it: progress the loader keeps inside its
fingerprint (an ``rd.Mixture``'s rebase: where a ``data_change`` rebased the stream) is never a
difference, and a global-batch difference (``data.plan.global_batch`` / ``data.plan.schedule``)
the caller declared with ``on_batch_change="continue"`` is ``info`` (the loader then continues at
the committed sample, under its own rules, and the restore is labelled ``elastic_reshard``). Metadata of an unknown ``schema_version`` is refused. Cost: a
walk over two JSON trees (parameter names included), no tensor is read. The fixes read the metas'
typed sections (``meta.sections``: the seeding mode, a mixture's sizes, the plan's record count
and batch), validated when each meta is parsed (``saved meta`` / ``current meta`` in errors).

The seeding mode. ``data.seed_per_sample`` (the loader's ``seed_per_sample`` mode; contract
version 2) is its own category, ``sample_seeding``: another mode seeds the global generators
otherwise, so it delivers other data; it is refused under the labels that restore the loader
(``faithful_continuation``, ``elastic_reshard``, ``optimizer_reset``: as the loader's own restore
refuses it), allowed under ``warm_start`` (info; a fresh stream) and ``data_change`` (a warning; the stream
continues from its cursor under the new mode), and its fix names both modes. Its
value is validated on both sides (anything but a mode's value raises
:class:`~resumable_data.ResumeError` naming ``saved``/``current`` ``meta.data.seed_per_sample``).
Metadata written before the key (contract version 1) records no mode: nothing is reported for
it (the loader's restore still compares the mode its state records). The seeding version is
not compared: a restore continues with the saved state's.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from resumable_data._schema import coerce_enum
from resumable_data.checkpoint.errors import CompatibilityError
from resumable_data.checkpoint.meta import COMPARED, CheckpointMeta
from resumable_data.checkpoint.torch_compat import SCHEDULER_PROGRESS_KEYS
from resumable_data.labels import RecoveryLabel
from resumable_data.loader.restore import rounded_epoch_fix, tail_fix
from resumable_data.loader.seeding.sample_seeding import K_FINGERPRINT_MODE
from resumable_data.loader.state import K_LAYOUT, K_MIXTURE, K_PLAN, OnBatchChange
from resumable_data.plan.mixture.section import K_REBASE
from resumable_data.plan.steps import K_GLOBAL_BATCH, K_NUM_RECORDS, K_SCHEDULE, K_TAIL

__all__ = ["CONTRACT_VERSION", "RULES", "Category", "CompatibilityReport", "Difference", "Severity", "check_compatible"]

CONTRACT_VERSION = 2
MAX_LISTED = 60


class Severity(str, enum.Enum):
    """How a difference weighs under a recovery label: ``info`` (expected), ``warning`` (allowed,
    reported), ``error`` (refused)."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class Category(str, enum.Enum):
    """What a difference is about; each has one row in :data:`RULES`."""

    WEIGHTS = "weights"  # parameter / buffer names, shapes, dtypes
    ARCHITECTURE = "architecture"  # module tree (class names)
    MODEL_CONFIG = "model_config"
    FEATURES = "feature_schema"  # tokenizer / feature schema fingerprint
    OPTIMIZER = "optimizer"  # type, group settings, parameter partition
    SCHEDULER = "scheduler"  # class, schedule fingerprint, convention
    SCALER = "scaler"
    EMA = "ema"
    CALLBACKS = "callbacks"
    DATASET = "dataset"  # dataset version, record count
    DATA_STREAM = "data_stream"  # seed, order, batch, tail, accumulation, packing
    SAMPLE_SEEDING = "sample_seeding"  # the loader's seed_per_sample mode
    LAYOUT = "layout"  # world size, sharding policy
    SOFTWARE_PATCH = "software_patch"
    SOFTWARE = "software"  # major / minor versions
    TRANSITION = "transition_rule"  # user recovery spec


E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO  # noqa: E741 (the three severities, one letter each)
L = RecoveryLabel
_ORDER = (L.FAITHFUL_CONTINUATION, L.ELASTIC_RESHARD, L.OPTIMIZER_RESET, L.WARM_START, L.DATA_CHANGE)

#: category -> (severity under faithful_continuation, elastic_reshard, optimizer_reset, warm_start, data_change), fix
RULES: dict[Category, tuple[tuple[Severity, ...], str]] = {
    Category.WEIGHTS: ((E, E, E, E, E), "build the model with the same parameter names, shapes and dtypes"),
    Category.ARCHITECTURE: ((E, E, E, W, E), "build the same module tree, or resume with label='warm_start'"),
    Category.MODEL_CONFIG: (
        (E, E, W, W, E),
        "pass the saved config, or resume with label='optimizer_reset'/'warm_start'",
    ),
    Category.FEATURES: ((E, E, E, E, E), "use the tokenizer / feature schema the checkpoint was trained with"),
    Category.OPTIMIZER: ((E, E, I, I, E), "build the optimizer as saved, or resume with label='optimizer_reset'"),
    Category.SCHEDULER: ((E, E, I, I, E), "build the scheduler as saved, or resume with label='optimizer_reset'"),
    Category.SCALER: ((E, E, I, I, E), "build the grad scaler as saved, or resume with label='optimizer_reset'"),
    Category.EMA: ((E, E, E, W, E), "pass (or drop) ema= as saved, or resume with label='warm_start'"),
    Category.CALLBACKS: ((E, E, E, W, E), "pass the same callbacks, or resume with label='warm_start'"),
    Category.DATASET: ((E, E, E, I, I), "open the saved dataset version, or resume with label='data_change'"),
    Category.DATA_STREAM: (
        (E, E, E, I, W),
        "build the loader as saved (seed, order, batch size, accumulation), "
        "or resume with label='data_change'/'warm_start'",
    ),
    Category.SAMPLE_SEEDING: (
        (E, E, E, I, W),
        "build the loader with the saved seed_per_sample mode, or resume with label='data_change'/'warm_start'",
    ),
    Category.LAYOUT: ((E, I, W, I, W), "resume on the saved layout, or with label='elastic_reshard'"),
    Category.SOFTWARE_PATCH: ((W, W, W, I, W), "install the saved versions to rule out numerical drift"),
    Category.SOFTWARE: (
        (E, E, W, I, W),
        "install the saved major.minor versions, or resume with label='optimizer_reset'/'warm_start'",
    ),
    Category.TRANSITION: (
        (E, E, I, I, E),
        "use the saved recovery spec (transition rules), or resume with label='optimizer_reset'",
    ),
}
assert set(RULES) == set(Category)


def severity(category: Category, label: RecoveryLabel) -> Severity:
    return RULES[category][0][_ORDER.index(label)]


@dataclass(frozen=True)
class Difference:
    """One difference between a checkpoint and the current run."""

    path: str
    saved: Any
    current: Any
    category: Category
    severity: Severity
    fix: str

    def __str__(self) -> str:
        return (
            f"[{self.severity.value}] {self.path}: saved {_short(self.saved)} vs current {_short(self.current)} "
            f"({self.category.value}); fix: {self.fix}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "saved": self.saved,
            "current": self.current,
            "category": self.category.value,
            "severity": self.severity.value,
            "fix": self.fix,
        }


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 120 else s[:117] + "..."


@dataclass(frozen=True)
class CompatibilityReport:
    """Every difference, with its severity under ``label``."""

    label: RecoveryLabel
    differences: tuple[Difference, ...]
    contract_version: int = CONTRACT_VERSION
    #: The global batch differs and the change was declared (``on_batch_change="continue"``).
    batch_changed: bool = False

    @property
    def errors(self) -> tuple[Difference, ...]:
        """The differences refused under the label."""
        return tuple(d for d in self.differences if d.severity is Severity.ERROR)

    @property
    def warnings(self) -> tuple[Difference, ...]:
        """The differences allowed under the label but worth a warning."""
        return tuple(d for d in self.differences if d.severity is Severity.WARNING)

    @property
    def ok(self) -> bool:
        """Whether nothing is refused."""
        return not self.errors

    def __str__(self) -> str:
        if not self.differences:
            return f"compatible under {self.label.value}: no differences"
        shown = [str(d) for d in self.differences[:MAX_LISTED]]
        more = len(self.differences) - len(shown)
        head = (
            f"{'refused' if self.errors else 'allowed'} under label={self.label.value!r}: "
            f"{len(self.errors)} error(s), {len(self.warnings)} warning(s), {len(self.differences)} difference(s)"
        )
        return head + "\n  - " + "\n  - ".join(shown) + (f"\n  - ... and {more} more" if more else "")

    def raise_if_refused(self) -> None:
        """Raise :class:`CompatibilityError` listing every refused difference, if any."""
        if self.errors:
            raise CompatibilityError(f"cannot resume this checkpoint: {self}", self)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON: ``label``, ``contract_version`` and every difference (path, saved,
        current, severity, fix)."""
        return {
            "label": self.label.value,
            "contract_version": self.contract_version,
            "differences": [d.to_dict() for d in self.differences],
        }


def _category(path: list[str]) -> Category:
    top = path[0]
    sub = path[1] if len(path) > 1 else ""
    if top == "model":
        return {"parameters": Category.WEIGHTS, "buffers": Category.WEIGHTS, "modules": Category.ARCHITECTURE}.get(
            sub, Category.MODEL_CONFIG
        )
    if top == "data":
        if sub == "plan" and len(path) > 2 and path[2] in ("dataset_version", "version_hash", "num_records"):
            return Category.DATASET
        if sub == "layout":
            return Category.LAYOUT
        if sub == K_FINGERPRINT_MODE:
            return Category.SAMPLE_SEEDING
        return Category.DATA_STREAM
    return {
        "feature_schema": Category.FEATURES,
        "optimizer": Category.OPTIMIZER,
        "scheduler": Category.SCHEDULER,
        "scaler": Category.SCALER,
        "ema": Category.EMA,
        "callbacks": Category.CALLBACKS,
        "layout": Category.LAYOUT,
        "software": Category.SOFTWARE,
        "recovery_spec": Category.TRANSITION,
    }[top]


def _walk(a: Any, b: Any, path: list[str], out: list[tuple[list[str], Any, Any]]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a:
                out.append((path + [k], "<absent>", b[k]))
            elif k not in b:
                out.append((path + [k], a[k], "<absent>"))
            else:
                _walk(a[k], b[k], path + [k], out)
    elif (
        isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and any(isinstance(x, (dict, list)) for x in a)
    ):
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, path + [str(i)], out)
    elif a != b or (type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float)))):
        out.append((path, a, b))


def _version_category(saved: Any, current: Any) -> Category:
    if isinstance(saved, str) and isinstance(current, str) and saved.split(".")[:2] == current.split(".")[:2]:
        return Category.SOFTWARE_PATCH
    return Category.SOFTWARE


def check_compatible(
    saved_meta: CheckpointMeta | dict,
    current_meta: CheckpointMeta | dict,
    label: RecoveryLabel | str = RecoveryLabel.FAITHFUL_CONTINUATION,
    *,
    on_batch_change: OnBatchChange | str | None = None,
) -> CompatibilityReport:
    """Every difference between ``saved_meta`` and ``current_meta`` with its severity under ``label``.

    Both metas are validated first (an unknown ``schema_version`` raises). Call
    ``report.raise_if_refused()`` to turn refused differences into one :class:`CompatibilityError`.
    ``on_batch_change="continue"`` declares a global-batch change (module docs)."""
    label = coerce_enum(label, RecoveryLabel, "label")
    declared = (
        on_batch_change is not None
        and coerce_enum(on_batch_change, OnBatchChange, "on_batch_change") is OnBatchChange.CONTINUE
    )
    saved, current = (
        CheckpointMeta.from_dict(m.to_dict() if isinstance(m, CheckpointMeta) else m, f"{side} meta")
        for m, side in ((saved_meta, "saved"), (current_meta, "current"))
    )
    sd, cd = saved.to_dict(), current.to_dict()
    modes = [None if m.sections.data is None else m.sections.data.seed_per_sample for m in (saved, current)]
    raw: list[tuple[list[str], Any, Any]] = []
    for key in COMPARED:
        _walk(sd[key], cd[key], [key], raw)
    if None in modes:  # not recorded on one side (metadata written before the key): no difference
        raw = [r for r in raw if tuple(r[0]) != _MODE]
    diffs = []
    batch_changed = False
    rounded = _rounded_mixture_epoch(saved, current, raw)
    for path, a, b in raw:
        if (
            tuple(path[:3]) in _PROGRESS
            or _sub_scheduler_progress(path)
            or _scheduler_class_progress(path, sd)
            or _scheduled_momentum(path, a, b, sd)
        ):
            continue
        cat = _version_category(a, b) if path[0] == "software" else _category(path)
        if declared and tuple(path[:3]) in _BATCH:
            batch_changed = True
            diffs.append(Difference(".".join(path), a, b, cat, Severity.INFO, _BATCH_FIX))
            continue
        fix = RULES[cat][1] + (_BATCH_HINT if tuple(path[:3]) in _BATCH and rounded is None else "")
        if rounded is not None and tuple(path) == _NUM_RECORDS:
            fix = rounded
        if tuple(path) == _MODE:
            fix = _mode_fix(*modes)
        if tuple(path) == _TAIL and isinstance(a, str):
            fix = _tail_fix(a, cd)
        diffs.append(Difference(".".join(path), a, b, cat, severity(cat, label), fix))
    order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
    diffs.sort(key=lambda d: order[d.severity])
    return CompatibilityReport(label, tuple(diffs), batch_changed=batch_changed)


_NUM_RECORDS = ("data", K_PLAN, K_NUM_RECORDS)
_TAIL = ("data", K_PLAN, K_TAIL)


def _tail_fix(saved: str, current: dict[str, Any]) -> str:
    """The fix of a tail difference (the loader's own, which knows a ``partial`` tail cannot run on
    several ranks), and the labels that restart the data stream."""
    layout = (current.get("data") or {}).get(K_LAYOUT)
    world = layout.get("world_size") if isinstance(layout, dict) else None
    fix = tail_fix(saved, world if isinstance(world, int) else 1)
    return fix + "; or resume with label='data_change'/'warm_start' (the data stream restarts at step 0)"


_MODE = ("data", K_FINGERPRINT_MODE)


def _mode_fix(saved: Any, current: Any) -> str:
    """The fix of a seeding-mode difference, naming both modes."""
    return (
        f"build the loader with seed_per_sample=rd.SampleSeeding.{saved.name} (the saved mode, "
        f"{saved.value!r}; the current run's is {current.value!r}), or resume with label='data_change' "
        f"(the data stream then continues from its cursor under {current.value!r})"
    )


def _rounded_mixture_epoch(
    saved: CheckpointMeta, current: CheckpointMeta, raw: list[tuple[list[str], Any, Any]]
) -> str | None:
    """The fix when an ``rd.Mixture``'s epoch length changed with the global batch (its epoch is
    rounded to the batch: no batch change can continue it), else None."""
    paths = {tuple(p[:3]) for p, _, _ in raw}
    if _NUM_RECORDS not in paths or not paths & _BATCH:
        return None
    s, c = saved.sections.data, current.sections.data
    if s is None or c is None or s.loader.mixture is None or c.loader.mixture is None:
        return None
    if s.loader.mixture.sizes != c.loader.mixture.sizes:
        return None
    sp, cp = s.loader.plan, c.loader.plan
    batches = (sp.num_records, sp.global_batch, cp.global_batch)
    return rounded_epoch_fix(*batches) if all(x > 0 for x in batches) else None


#: Progress inside the loader fingerprint: never a difference (a rebased mixture resumes faithfully).
_PROGRESS = frozenset({("data", K_MIXTURE, K_REBASE)})


def _sub_scheduler_progress(path: list[str]) -> bool:
    """A progress key of a sub-scheduler of ``SequentialLR`` / ``ChainedScheduler``
    (``scheduler.settings._schedulers.<i>.last_epoch`` ...): progress, as the top-level scheduler's
    progress keys are (they are not in ``settings``), not configuration. Compared, they refused the
    resume of every such scheduler that had stepped."""
    return (
        len(path) >= 5
        and tuple(path[:3]) == ("scheduler", "settings", "_schedulers")
        and (path[4] in SCHEDULER_PROGRESS_KEYS or path[4] in _ANY_CLASS_PROGRESS)
    )


#: Progress keys of torch schedulers that their ``state_dict()`` holds beside the common ones
#: (:data:`SCHEDULER_PROGRESS_KEYS`, which the metadata's ``settings`` leaves out): what their own
#: ``step()`` changes. Compared, they refused the faithful resume of every such scheduler that had
#: stepped (a plateau's best metric, a warm restart's position in its cycle).
SCHEDULER_CLASS_PROGRESS: dict[str, frozenset[str]] = {
    "torch.optim.lr_scheduler.ReduceLROnPlateau": frozenset({"best", "num_bad_epochs", "cooldown_counter"}),
    "torch.optim.lr_scheduler.CosineAnnealingWarmRestarts": frozenset({"T_cur", "T_i"}),
}
_ANY_CLASS_PROGRESS = frozenset().union(*SCHEDULER_CLASS_PROGRESS.values())


def _scheduler_class_progress(path: list[str], saved: dict[str, Any]) -> bool:
    """``scheduler.settings.<key>`` where ``key`` is a progress key of the saved scheduler's class."""
    sched = saved.get("scheduler")
    kind = sched.get("type") if isinstance(sched, dict) else None
    return (
        len(path) == 3
        and tuple(path[:2]) == ("scheduler", "settings")
        and path[2] in SCHEDULER_CLASS_PROGRESS.get(str(kind), frozenset())
    )


def _scheduled_momentum(path: list[str], a: Any, b: Any, saved: dict[str, Any]) -> bool:
    """A group's momentum (``momentum``, or ``betas[0]`` for Adam's family) where ``CyclicLR`` /
    ``OneCycleLR`` cycle it: those schedulers write ``base_momentum`` and ``max_momentum`` into the
    group (compared: they are the configuration) and move the momentum between them every step, as
    they move ``lr`` (progress, which the metadata records as ``base_lr``)."""
    if len(path) != 4 or tuple(path[:2]) != ("optimizer", "param_groups") or path[3] not in ("momentum", "betas"):
        return False
    opt = saved.get("optimizer")
    groups = opt.get("param_groups") if isinstance(opt, dict) else None
    i = int(path[2]) if path[2].isdigit() else -1
    if not isinstance(groups, list) or not 0 <= i < len(groups) or not isinstance(groups[i], dict):
        return False
    if "base_momentum" not in groups[i] or "max_momentum" not in groups[i]:
        return False
    if path[3] == "betas":  # only beta1 is cycled; beta2 is configuration
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) > 0 and a[1:] == b[1:]
    return True


#: The global batch, which ``on_batch_change="continue"`` may change.
_BATCH = frozenset({("data", K_PLAN, K_GLOBAL_BATCH), ("data", K_PLAN, K_SCHEDULE)})
_BATCH_HINT = (
    "; or, to continue at the committed sample with the current batch (no sample lost or repeated), "
    "pass on_batch_change='continue' to rd.resume_or_start / rd.load_checkpoint / TrainingState.load_state_dict"
)
_BATCH_FIX = (
    "declared: on_batch_change='continue' (the loader continues at the committed sample with the current "
    "batch; labelled elastic_reshard)"
)
