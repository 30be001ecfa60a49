"""The logical stream: steps -> positions -> records, as pure functions of the plan.

Algorithm. Positions ``p = 0, 1, 2, ...`` index an infinite stream of samples;
``epoch, offset = divmod(p, epoch_len)``. Step ``s`` (a global batch of ``G`` samples) covers
``epoch = s // steps_per_epoch`` and offsets ``[k*G, (k+1)*G)`` with ``k = s % steps_per_epoch``;
batches never straddle epochs. The record at an offset is the epoch's order (:mod:`.order`) at
that offset. The epoch's tail, when ``n`` is not a multiple of ``G``, follows an explicit
:class:`Tail`: dropped, wrapped around to the epoch's first records (as torch's
``DistributedSampler`` pads), or delivered as a short last batch (torch's ``drop_last=False``).
``Tail.PAD`` is ``DistributedSampler(drop_last=False)`` under a ``drop_last=False`` loader: the
epoch is padded (wrapping to its first records) to a multiple of ``pad_to`` (the world size)
and its last global batch is short, split evenly over the ranks, so every rank delivers what
torch delivers (its ``ceil(n / world)`` samples, the last batch partial).

``Tail.CONTINUOUS``: positions are one continuous stream (``epoch_len = n``, every record once
per epoch, none dropped or repeated) and step ``s`` covers ``[start(s), start(s) + G_s)``
where the batch ``G_s`` and ``start`` come from a :class:`~.batch_schedule.BatchSchedule`
(constant ``G`` without one): a batch may straddle an epoch boundary. A step belongs to the
epoch of its first position; an epoch's steps are those whose first position lies in it, so
:meth:`Plan.steps_in_epoch` varies by epoch and sums to the steps taken. A schedule whose batch
changes requires this tail (an epoch is then not a whole number of batches).

A declared global-batch change on resume starts a new segment at a :class:`BatchOrigin`
``(step, position, first step of that epoch)``: steps from ``origin.step`` on follow this plan's
batch from ``origin.position``. Under ``continuous`` the shift is ``origin.position -
schedule_start(origin.step)``; under ``partial`` / ``pad`` (whose epoch length does not depend
on the batch) the rest of the origin's epoch is cut into batches of ``G`` from the origin (the
last one short), and later epochs follow the usual grid. ``drop`` / ``wrap`` epochs are shaped by
the batch, so they take an origin only at a whole batch of their epoch (where a ``data_change``
rebase, :mod:`.rebase`, puts it: the rest of the epoch is then whole batches). Steps before the
origin are not addressable by this plan.

Guarantee. Everything here is a function of (num_records, version hash, seed, order, G or the
schedule, tail, origin) and the step, so a loader's state is a step counter and a restore is a
seek. There is no ``set_epoch``: the epoch is derived from the position. Without a schedule and
an origin, every formula and every serialized byte is the fixed-batch plan's.

Cost. O(G) per step, independent of the step number and of ``n``; O(log segments) more for a
schedule.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from resumable_data._schema import check_int, coerce_enum, expect_mapping, field_enum, field_int, field_str
from resumable_data.errors import ConfigError, UsageError, describe
from resumable_data.plan.batch_schedule import BatchOrigin, BatchSchedule
from resumable_data.plan.order import OrderSpec, WindowBlocks, epoch_records
from resumable_data.plan.permutation import MAX_DOMAIN
from resumable_data.plan.sharding import Sharding
from resumable_data.plan.unit_window import ReadUnits

__all__ = ["Plan", "Tail"]


K_NUM_RECORDS = "num_records"
K_GLOBAL_BATCH = "global_batch"
K_VERSION = "dataset_version"
K_SEED = "seed"
K_ORDER = "order"
K_TAIL = "tail"
K_PAD_TO = "pad_to"  # only with tail "pad"
K_SCHEDULE = "batch_schedule"  # only with a schedule whose batch changes
K_ORIGIN = "origin"  # only after a declared global-batch change
K_UNIT_LAYOUT = "unit_layout"  # only with a window order over read units: the units' digest
_KEYS = frozenset({K_NUM_RECORDS, K_GLOBAL_BATCH, K_VERSION, K_SEED, K_ORDER, K_TAIL})
MAX_SEED = (1 << 64) - 1


class Tail(str, enum.Enum):
    """What happens to the last, incomplete global batch of an epoch."""

    DROP = "drop"
    WRAP = "wrap"
    PARTIAL = "partial"
    PAD = "pad"
    #: One continuous stream: batches may straddle epochs, no record dropped or repeated.
    CONTINUOUS = "continuous"


#: Tails whose epoch length does not depend on the batch: a declared batch change can continue them.
_REBASABLE = (Tail.CONTINUOUS, Tail.PARTIAL, Tail.PAD)


@dataclass(frozen=True)
class Plan:
    """The pure description of a data stream: which records every step delivers."""

    num_records: int
    global_batch: int
    version_hash: str
    seed: int = 0
    order: OrderSpec = field(default_factory=OrderSpec)
    tail: Tail = Tail.PARTIAL
    #: With ``Tail.PAD``: the epoch is padded to a multiple of this (the world size); else 1.
    pad_to: int = 1
    #: A global-batch schedule (``Tail.CONTINUOUS`` only); ``global_batch`` is then its largest
    #: batch. A constant schedule is stored as ``None`` (the fixed-batch plan, byte for byte).
    schedule: BatchSchedule | None = None
    #: The segment start of a declared global-batch change on resume (see the module docs).
    origin: BatchOrigin | None = None
    #: The source's read units, for a window order over read units (``WindowBlocks.READ_UNITS``);
    #: not part of the state: a plan parsed from a state has none, only their ``unit_layout``.
    units: ReadUnits | None = None
    #: The digest of those units (``ReadUnits.digest``), which the state records: a resume over
    #: another unit layout of the same records would continue another order (set from ``units``).
    unit_layout: str | None = None
    #: Whether steps cut packed sequences of these records (documents) rather than the records:
    #: the epoch's batches are then counted by its packing index (the loader's packed stream), so
    #: ``tail='drop'`` needs one full batch of sequences, not of documents. Not part of the plan's
    #: JSON: a state records its packing beside the plan and passes it back to :meth:`from_dict`.
    packed: bool = False
    #: Set in ``__post_init__`` (not a field): see :meth:`step_span`.
    _grid_span: ClassVar[tuple[int, int, int] | None]

    def __post_init__(self) -> None:
        n = check_int(self.num_records, "num_records", 1, MAX_DOMAIN)
        g = check_int(self.global_batch, "global batch size", 1, 1 << 40)
        check_int(self.seed, "seed", 0, MAX_SEED)
        if not isinstance(self.version_hash, str) or not self.version_hash:
            raise ConfigError(
                describe("version_hash", self.version_hash, "a non-empty string", "pass DatasetVersion.hash")
            )
        if not isinstance(self.order, OrderSpec):
            raise ConfigError(describe("order", self.order, "an OrderSpec", "build one with OrderSpec(kind, window)"))
        if self.units is not None and (not isinstance(self.units, ReadUnits) or self.units.n != n):
            raise ConfigError(
                describe(
                    "units",
                    self.units,
                    f"None or the rd.plan ReadUnits of {n} records",
                    "pass ReadUnits.of(source.unit_starts(), num_records)",
                )
            )
        if self.units is not None:
            if self.unit_layout is None:
                object.__setattr__(self, "unit_layout", self.units.digest)
            elif self.unit_layout != self.units.digest:
                raise ConfigError(
                    describe(
                        "units",
                        f"read units with digest {self.units.digest}",
                        f"the unit layout {self.unit_layout} the plan records",
                        "open the dataset whose read units the run was trained on",
                    )
                )
        over_units = self.order.blocks is WindowBlocks.READ_UNITS
        if over_units != (self.unit_layout is not None):
            raise ConfigError(
                describe(
                    "unit_layout",
                    self.unit_layout,
                    "the read units' digest exactly when the order is a window over read units",
                    "build the plan with units=ReadUnits.of(source.unit_starts(), num_records)",
                )
            )
        tail = coerce_enum(self.tail, Tail, "tail")
        object.__setattr__(self, "tail", tail)
        pad = check_int(self.pad_to, "pad_to", 1, 1 << 20)
        if pad != 1 and tail is not Tail.PAD:
            raise ConfigError(describe("pad_to", pad, "1 unless tail='pad'", "drop pad_to"))
        sched = self.schedule
        if sched is not None:
            if not isinstance(sched, BatchSchedule):
                raise ConfigError(
                    describe(
                        "schedule",
                        sched,
                        "an rd.BatchSchedule (rd.BatchRamp, rd.BatchSteps) or None",
                        "pass one, or a fixed global_batch",
                    )
                )
            if sched.max_batch != g:
                raise ConfigError(
                    describe(
                        "global_batch",
                        g,
                        f"the schedule's largest batch {sched.max_batch}",
                        "pass global_batch=schedule.max_batch",
                    )
                )
            if sched.is_constant:
                object.__setattr__(self, "schedule", None)
            elif tail is not Tail.CONTINUOUS:
                raise ConfigError(
                    describe(
                        "tail",
                        tail.value,
                        "'continuous' with a batch schedule (under a changing "
                        "batch an epoch is not a whole number of batches)",
                        "drop drop_last=/tail= (a schedule defaults to tail='continuous')",
                    )
                )
        if self.origin is not None:
            if not isinstance(self.origin, BatchOrigin):
                raise ConfigError(
                    describe("origin", self.origin, "an rd.BatchOrigin or None", "pass Plan.origin_at(step)")
                )
            if tail not in _REBASABLE and not self._aligned(self.origin.position, n, g):
                raise ConfigError(
                    describe(
                        "tail",
                        tail.value,
                        f"one of {[t.value for t in _REBASABLE]} with a batch "
                        "origin (drop and wrap shape each epoch by the batch; they take an origin only at a "
                        "multiple of the batch within its epoch: a data_change rebase)",
                        "start the run with tail='continuous' to change the global batch on resume",
                    )
                )
        if tail is Tail.DROP and n < g and not self.packed:
            raise ConfigError(
                describe(
                    "drop_last",
                    True,
                    f"at least one full global batch of {g} samples, but the dataset has {n} records",
                    "use a smaller batch_size, drop_last=False, or more data",
                )
            )
        # step_span's constants (epoch length, global batch, steps per epoch) of a grid plan
        # without an origin, computed once: not a field (equality, hash and state ignore it)
        object.__setattr__(self, "_grid_span", (self.epoch_len, g, self._grid_steps) if self.uniform else None)

    def _aligned(self, position: int, n: int, g: int) -> bool:
        """Whether ``position`` starts a whole batch of a ``drop`` / ``wrap`` epoch grid."""
        steps = n // g if self.tail is Tail.DROP else -(-n // g)
        return steps > 0 and position % (steps * g) % g == 0

    # -- shape of an epoch ------------------------------------------------------------------------
    @property
    def uniform(self) -> bool:
        """Whether every epoch has :attr:`steps_per_epoch` steps (a grid tail, no origin)."""
        return self.tail is not Tail.CONTINUOUS and self.origin is None

    @property
    def steps_per_epoch(self) -> int:
        """Steps per epoch of a grid tail (``drop``/``wrap``/``partial``/``pad``; after a batch
        origin, of the whole epochs that follow it); see :meth:`steps_in_epoch` for any epoch."""
        if self.tail is Tail.CONTINUOUS:
            raise UsageError(
                describe(
                    "steps_per_epoch",
                    "continuous tail",
                    "a plan whose epochs have one step count",
                    "use plan.steps_in_epoch(epoch): under tail='continuous' epochs differ",
                )
            )
        return self._grid_steps

    @property
    def _grid_steps(self) -> int:
        n, g = self.num_records, self.global_batch
        if self.tail is Tail.PAD:
            return -(-self.epoch_len // g)
        return n // g if self.tail is Tail.DROP else -(-n // g)

    @property
    def epoch_len(self) -> int:
        """Positions per epoch."""
        if self.tail is Tail.PAD:
            return -(-self.num_records // self.pad_to) * self.pad_to
        if self.tail is Tail.PARTIAL or self.tail is Tail.CONTINUOUS:
            return self.num_records
        return self._grid_steps * self.global_batch

    def batch_of(self, step: int) -> int:
        """The global batch declared for ``step`` (an epoch's short last batch may hold fewer)."""
        return self.global_batch if self.schedule is None else self.schedule.batch_of(step)

    def _check_step(self, step: int) -> None:
        o = self.origin
        if o is not None and step < o.step:
            raise UsageError(
                describe(
                    "step",
                    step,
                    f"a step >= {o.step}, where the batch segment of this plan starts (a declared global-batch change)",
                    "ask for a step at or after it",
                )
            )

    def _continuous_start(self, step: int) -> int:
        return step * self.global_batch if self.schedule is None else self.schedule.step_start(step)

    def _shift(self) -> int:
        o = self.origin
        return 0 if o is None else o.position - self._continuous_start(o.step)

    def _grid_base(self) -> tuple[int, int]:
        """(first whole epoch, its first step) of a grid plan: (0, 0) without an origin."""
        o = self.origin
        if o is None:
            return 0, 0
        epoch, offset = divmod(o.position, self.epoch_len)
        if offset == 0:
            return epoch, o.step
        return epoch + 1, o.step + -(-(self.epoch_len - offset) // self.global_batch)

    def step_start(self, step: int) -> int:
        """The global position of the first sample of step ``step`` (what a weight schedule
        declared in steps converts through)."""
        return self.step_span(step)[0]

    def step_span(self, step: int) -> tuple[int, int]:
        """Global positions ``[start, stop)`` of step ``step``."""
        grid = self._grid_span
        if grid is not None:  # a grid plan without an origin (every epoch alike)
            L, g, steps = grid
            epoch, k = divmod(step, steps)
            start = epoch * L + k * g
            return start, min(start + g, (epoch + 1) * L)
        if self.tail is Tail.CONTINUOUS:
            self._check_step(step)
            start = self._continuous_start(step) + self._shift()
            return start, start + self.batch_of(step)
        L, g = self.epoch_len, self.global_batch
        if self.origin is not None:
            self._check_step(step)
            first_epoch, base = self._grid_base()
            if step < base:  # the rest of the origin's epoch, from the origin
                start = self.origin.position + (step - self.origin.step) * g
                return start, min(start + g, first_epoch * L)
            epoch, k = divmod(step - base, self._grid_steps)
            epoch += first_epoch
        else:
            epoch, k = divmod(step, self._grid_steps)
        start = epoch * L + k * g
        stop = min(start + g, (epoch + 1) * L)
        return start, stop

    def step_of_position(self, position: int) -> int:
        """The step whose global batch holds ``position``."""
        o = self.origin
        if o is not None and position < o.position:
            raise UsageError(
                describe(
                    "position",
                    position,
                    f"a position >= {o.position}, where the batch segment of this plan starts",
                    "ask for a position at or after it",
                )
            )
        if self.tail is Tail.CONTINUOUS:
            p = position - self._shift()
            return p // self.global_batch if self.schedule is None else self.schedule.step_of_position(p)
        L, g = self.epoch_len, self.global_batch
        if o is None:
            epoch, offset = divmod(position, L)
            return epoch * self._grid_steps + offset // g
        first_epoch, base = self._grid_base()
        if position < first_epoch * L and base > o.step:
            return o.step + (position - o.position) // g
        epoch, offset = divmod(position, L)
        return base + (epoch - first_epoch) * self._grid_steps + offset // g

    def epoch_of_step(self, step: int) -> int:
        """The epoch of ``step``: the epoch of its first position."""
        if self.uniform:
            return step // self._grid_steps
        return self.step_span(step)[0] // self.epoch_len

    def epoch_first_step(self, epoch: int) -> int:
        """The first step of ``epoch`` (the first whose first position lies in it)."""
        if self.uniform:
            return epoch * self._grid_steps
        o = self.origin
        if o is not None:
            origin_epoch = o.position // self.epoch_len
            if epoch == origin_epoch:
                return o.epoch_first_step
            if epoch < origin_epoch:
                raise UsageError(
                    describe(
                        "epoch",
                        epoch,
                        f"an epoch >= {origin_epoch}, where the batch segment of this plan starts",
                        "ask for an epoch at or after it",
                    )
                )
        if self.tail is not Tail.CONTINUOUS:
            first_epoch, base = self._grid_base()
            return base + (epoch - first_epoch) * self._grid_steps
        at = epoch * self.epoch_len
        q = self.step_of_position(at)
        return q if self.step_span(q)[0] == at else q + 1

    def steps_in_epoch(self, epoch: int) -> int:
        """Steps of ``epoch`` (what ``len(loader)`` reports for it)."""
        if self.uniform:
            return self._grid_steps
        return self.epoch_first_step(epoch + 1) - self.epoch_first_step(epoch)

    def origin_at(self, step: int) -> BatchOrigin:
        """The :class:`BatchOrigin` of a stream that continues this plan's stream at ``step``
        with another batch: no sample before ``step_start(step)`` is delivered again, none after
        it skipped."""
        return BatchOrigin(step, self.step_start(step), self.epoch_first_step(self.epoch_of_step(step)))

    def batch_dict(self) -> dict[str, Any]:
        """The batch layout (fixed global batch or schedule): what a batch change changes."""
        return {
            K_GLOBAL_BATCH: self.global_batch,
            K_SCHEDULE: None if self.schedule is None else self.schedule.to_dict(),
        }

    def local_positions(self, step: int, sharding: Sharding) -> np.ndarray:
        """The positions of step ``step`` that rank ``sharding.rank`` delivers."""
        start, stop = self.step_span(step)
        return sharding.local_positions(start, stop)

    # -- records ----------------------------------------------------------------------------------
    def records(self, positions) -> np.ndarray:
        """Record ids at ``positions`` (any int array; may span epochs)."""
        pos = np.asarray(positions, dtype=np.int64)
        flat = pos.reshape(-1)
        L = self.epoch_len
        if flat.size:
            lo, hi = int(flat.min()), int(flat.max())
            if lo >= 0 and lo // L == hi // L:  # the common case (a run, a batch): one epoch, no division
                epoch = lo // L
                offsets = flat - epoch * L
                if self.tail is Tail.WRAP or self.tail is Tail.PAD:
                    offsets %= self.num_records
                return self.epoch_records(epoch, offsets).reshape(pos.shape)
        epochs, offsets = np.divmod(flat, L)
        if self.tail is Tail.WRAP or self.tail is Tail.PAD:
            offsets = offsets % self.num_records
        out = np.empty_like(flat)
        first = int(epochs[0]) if flat.size else 0
        if flat.size and (epochs == first).all():  # the common case: one epoch per batch
            groups = [(first, slice(None))]
        else:
            groups = [(int(e), epochs == e) for e in np.unique(epochs)]
        for epoch, sel in groups:
            out[sel] = self.epoch_records(epoch, offsets[sel])
        return out.reshape(pos.shape)

    def epoch_records(self, epoch: int, offsets: np.ndarray) -> np.ndarray:
        """Record ids at in-epoch ``offsets`` of ``epoch`` (the order, with this plan's units)."""
        return epoch_records(
            self.num_records,
            self.order,
            offsets,
            version_hash=self.version_hash,
            seed=self.seed,
            epoch=epoch,
            units=self.units,
        )

    # -- state ------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The plan as the state's JSON object; ``pad_to``, ``batch_schedule``, ``origin`` and
        ``unit_layout`` appear only when they are not the defaults (so a fixed-batch plan's bytes
        never change)."""
        d = {
            K_NUM_RECORDS: self.num_records,
            K_GLOBAL_BATCH: self.global_batch,
            K_VERSION: self.version_hash,
            K_SEED: self.seed,
            K_ORDER: self.order.to_dict(),
            K_TAIL: self.tail.value,
        }
        if self.tail is Tail.PAD:
            d[K_PAD_TO] = self.pad_to
        if self.schedule is not None:
            d[K_SCHEDULE] = self.schedule.to_dict()
        if self.origin is not None:
            d[K_ORIGIN] = self.origin.to_dict()
        if self.unit_layout is not None:
            d[K_UNIT_LAYOUT] = self.unit_layout
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "plan", *, packed: bool = False) -> Plan:
        """The plan ``d`` (from :meth:`to_dict`) describes; ``where`` names it in errors;
        ``packed``: whether its steps cut packed sequences (the state's packing is not None).

        Raises :class:`rd.ResumeError` on other keys or a field of the wrong type or range, and
        :class:`rd.ConfigError` on a combination the plan refuses (see the constructor)."""
        if type(d) is dict and d.keys() == _KEYS and d[K_TAIL] != Tail.PAD.value:  # no pad_to, schedule or origin
            padded = False
        else:
            padded = isinstance(d, dict) and d.get(K_TAIL) == Tail.PAD.value
            optional = {k for k in (K_SCHEDULE, K_ORIGIN, K_UNIT_LAYOUT) if isinstance(d, dict) and k in d}
            expect_mapping(d, where, (_KEYS | {K_PAD_TO} if padded else _KEYS) | optional)
        return cls(
            num_records=field_int(d, K_NUM_RECORDS, where, 1, MAX_DOMAIN),
            global_batch=field_int(d, K_GLOBAL_BATCH, where, 1, 1 << 40),
            version_hash=field_str(d, K_VERSION, where, max_len=256),
            seed=field_int(d, K_SEED, where, 0, MAX_SEED),
            order=OrderSpec.from_dict(d[K_ORDER], f"{where}.order"),
            tail=field_enum(d, K_TAIL, Tail, where),
            pad_to=field_int(d, K_PAD_TO, where, 1, 1 << 20) if padded else 1,
            schedule=BatchSchedule.from_dict(d[K_SCHEDULE], f"{where}.batch_schedule") if K_SCHEDULE in d else None,
            origin=BatchOrigin.from_dict(d[K_ORIGIN], f"{where}.origin") if K_ORIGIN in d else None,
            unit_layout=field_str(d, K_UNIT_LAYOUT, where, max_len=64) if K_UNIT_LAYOUT in d else None,
            packed=packed,
        )
