"""A checkpoint's progress section (``meta.status``): typed, shown by ``inspect``, never compared.

What it holds: the loader's cursor, epoch base, counters and the step a resume delivers first;
the accumulation window at the save (policy, mid-window, rewound, microstep, uncommitted count);
each optimizer group's next learning rate; the scheduler's ``last_epoch``; the AMP scale; how
many modules were in training mode. Absent parts are ``None`` and are left out of the JSON, so a
run without a loader writes no cursor. ``extra`` carries the progress of objects rd does not
know (the instrument's ``k`` and ``x``).

Cost: a few dozen bytes; parsing checks every value's type and raises :class:`CheckpointError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from resumable_data._schema import MAX_INT
from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.errors import ResumeError, describe
from resumable_data.loader.state import Cursor

__all__ = ["AccumulationStatus", "CheckpointStatus"]

K_ACCUMULATION = "accumulation"
K_CURSOR = "cursor"
K_EPOCH_BASE = "epoch_base"
K_COUNTERS = "counters"
K_NEXT_STEP = "next_step"
K_NEXT_LR = "next_lr"
K_SCHEDULER_LAST_EPOCH = "scheduler_last_epoch"
K_SCALE = "scale"
K_MODES = "modes"
_KNOWN = (
    K_ACCUMULATION,
    K_CURSOR,
    K_EPOCH_BASE,
    K_COUNTERS,
    K_NEXT_STEP,
    K_NEXT_LR,
    K_SCHEDULER_LAST_EPOCH,
    K_SCALE,
    K_MODES,
)


def _bad(where: str, value: Any, expected: str) -> CheckpointError:
    return CheckpointError(describe(where, value, expected, "pass an unmodified checkpoint"))


def _int(v: Any, where: str) -> int:
    """A count, step or epoch: an integer in ``[0, 2**63 - 1]`` (the loader state's own bounds;
    ``inspect`` computes the next step's records from them)."""
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_INT:
        raise _bad(where, v, f"an integer in [0, {MAX_INT}]")
    return v


def _any_int(v: Any, where: str) -> int | None:
    """An integer that may be negative (a scheduler's ``last_epoch`` starts at -1), or null."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not -MAX_INT <= v <= MAX_INT:
        raise _bad(where, v, f"an integer in [{-MAX_INT}, {MAX_INT}] or null")
    return v


def _opt_int(v: Any, where: str) -> int | None:
    return None if v is None else _int(v, where)


def _int_map(v: Any, where: str) -> dict[str, int] | None:
    if v is None:
        return None
    if not isinstance(v, Mapping):
        raise _bad(where, v, "an object of integers")
    return {str(k): _int(x, f"{where}.{k}") for k, x in v.items()}


def _num(v: Any, where: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _bad(where, v, "a number or null")
    return v


@dataclass(frozen=True)
class AccumulationStatus:
    """The accumulation window at the save."""

    policy: str
    mid_window: bool
    rewound: bool
    microstep: int | None
    uncommitted: int
    #: DCP layout only: the names of the gradients saved (the others are zero slots).
    gradients: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "policy": self.policy,
            "mid_window": self.mid_window,
            "rewound": self.rewound,
            "microstep": self.microstep,
            "uncommitted": self.uncommitted,
        }
        if self.gradients is not None:
            d["gradients"] = list(self.gradients)
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "status.accumulation") -> AccumulationStatus:
        if not isinstance(d, Mapping):
            raise _bad(where, d, "an object")
        try:
            policy, mid, rewound = d["policy"], d["mid_window"], d["rewound"]
            micro, unc = d["microstep"], d["uncommitted"]
        except KeyError as e:
            raise _bad(where, sorted(d), f"the key {e.args[0]!r}") from None
        if not isinstance(policy, str) or not isinstance(mid, bool) or not isinstance(rewound, bool):
            raise _bad(where, d, "policy (str), mid_window and rewound (bools)")
        grads = d.get("gradients")
        if grads is not None and (not isinstance(grads, list) or not all(isinstance(g, str) for g in grads)):
            raise _bad(f"{where}.gradients", grads, "a list of parameter names")
        return cls(
            policy,
            mid,
            rewound,
            _opt_int(micro, f"{where}.microstep"),
            _int(unc, f"{where}.uncommitted"),
            None if grads is None else tuple(grads),
        )


@dataclass(frozen=True)
class CheckpointStatus:
    """The progress a checkpoint records (see the module docs)."""

    accumulation: AccumulationStatus | None = None
    cursor: Cursor | None = None
    epoch_base: tuple[int, int] | None = None
    counters: Mapping[str, int] | None = None
    next_step: int | None = None
    next_lr: tuple[float | None, ...] | None = None
    scheduler_last_epoch: int | None = None
    scale: float | None = None
    #: ``{"training": modules in training mode, "modules": all modules}``
    modes: Mapping[str, int] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = dict(self.extra)
        if self.accumulation is not None:
            d[K_ACCUMULATION] = self.accumulation.to_dict()
        if self.cursor is not None:
            d[K_CURSOR] = self.cursor.to_dict()
            d[K_EPOCH_BASE] = list(self.epoch_base) if self.epoch_base is not None else None
            d[K_COUNTERS] = dict(self.counters or {})
            d[K_NEXT_STEP] = self.next_step
        if self.next_lr is not None:
            d[K_NEXT_LR] = list(self.next_lr)
        if self.scheduler_last_epoch is not None:
            d[K_SCHEDULER_LAST_EPOCH] = self.scheduler_last_epoch
        if self.scale is not None:
            d[K_SCALE] = self.scale
        if self.modes is not None:
            d[K_MODES] = dict(self.modes)
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "status") -> CheckpointStatus:
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise _bad(where, type(d).__name__, "an object")
        cursor = None
        if d.get(K_CURSOR) is not None:
            try:
                cursor = Cursor.from_dict(d[K_CURSOR], f"{where}.cursor")
            except ResumeError as e:
                raise CheckpointError(str(e)) from None
        eb = d.get(K_EPOCH_BASE)
        if eb is not None:
            if not isinstance(eb, list) or len(eb) != 2:
                raise _bad(f"{where}.epoch_base", eb, "[epoch, first step]")
            eb = (_int(eb[0], f"{where}.epoch_base[0]"), _int(eb[1], f"{where}.epoch_base[1]"))
        counters = _int_map(d.get(K_COUNTERS), f"{where}.counters")
        lrs = d.get(K_NEXT_LR)
        if lrs is not None:
            if not isinstance(lrs, list):
                raise _bad(f"{where}.next_lr", lrs, "a list of numbers or nulls")
            lrs = tuple(_num(v, f"{where}.next_lr[{i}]") for i, v in enumerate(lrs))
        modes = _int_map(d.get(K_MODES), f"{where}.modes")
        acc = d.get(K_ACCUMULATION)
        return cls(
            accumulation=None if acc is None else AccumulationStatus.from_dict(acc, f"{where}.accumulation"),
            cursor=cursor,
            epoch_base=eb,
            counters=counters,
            next_step=_opt_int(d.get(K_NEXT_STEP), f"{where}.next_step"),
            next_lr=lrs,
            scheduler_last_epoch=_any_int(d.get(K_SCHEDULER_LAST_EPOCH), f"{where}.scheduler_last_epoch"),
            scale=_num(d.get(K_SCALE), f"{where}.scale"),
            modes=modes,
            extra={k: v for k, v in d.items() if k not in _KNOWN},
        )
