"""Global-batch schedules: how many samples each step holds when the batch changes over steps.

Algorithm. A schedule compiles to a short table of segments ``(first step, first position,
batch)``; inside segment ``i`` step ``s`` covers positions ``[p_i + (s - s_i) b_i, + b_i)`` of one
continuous stream. Two declared forms:

* :class:`BatchSteps` ``(((0, 8), (100, 16)))``: batch ``b_i`` from step ``s_i`` on (the first
  pair is at step 0); segment ``i`` starts at position ``sum_{j<i} (s_{j+1} - s_j) b_j``.
* :class:`BatchRamp` ``(start, increment, ramp_samples, final)``: Megatron's
  ``rampup_batch_size``. With ``k = (final - start) / increment`` increments, the batch of a
  step that begins after ``c`` samples is ``start + min(k, floor(c * k / ramp_samples)) *
  increment``. Every stage of the ramp is one segment (a stage the previous one overshot has no
  steps and no segment), so the table has at most ``k + 1`` rows, built once, in exact integers.

Queries (:meth:`BatchSchedule.step_start`, :meth:`~BatchSchedule.step_of_position`,
:meth:`~BatchSchedule.batch_of`) bisect the table: O(log segments), no walk over steps.

Guarantee. ``step_start`` is strictly increasing, ``step_start(step_of_position(p)) <= p <
step_start(step_of_position(p) + 1)`` and ``step_of_position(step_start(s)) == s`` for every step
and position: the steps tile the stream, no position is in two steps or in none. A schedule is a
pure value (frozen, compared by its declared parameters), serialized with :meth:`to_dict`.

:class:`BatchOrigin` is the start of the segment a declared global-batch change on resume began
(step, position, first step of that epoch): three integers recorded in the plan, so the resumed
stream stays a pure function of the plan.

Cost. Building a ramp's table: O(k); a query: O(log segments); a restore: nothing.
"""

from __future__ import annotations

import enum
import itertools
from bisect import bisect_right
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from resumable_data._schema import check_int, expect_enum, expect_int, expect_mapping
from resumable_data.errors import ConfigError, ResumeError, describe

__all__ = ["BatchOrigin", "BatchRamp", "BatchSchedule", "BatchSteps", "ScheduleKind", "Segment", "as_schedule"]

K_KIND = "kind"
K_POINTS = "points"
K_START = "start"
K_INCREMENT = "increment"
K_RAMP_SAMPLES = "ramp_samples"
K_FINAL = "final"
K_STEP = "step"
K_POSITION = "position"
K_EPOCH_FIRST = "epoch_first_step"
_STEPS_KEYS = frozenset({K_KIND, K_POINTS})
_RAMP_KEYS = frozenset({K_KIND, K_START, K_INCREMENT, K_RAMP_SAMPLES, K_FINAL})
_ORIGIN_KEYS = frozenset({K_STEP, K_POSITION, K_EPOCH_FIRST})

MAX_BATCH = 1 << 40
MAX_POINTS = 4096
MAX_INCREMENTS = 1 << 16
MAX_STEP = 1 << 62


class ScheduleKind(str, enum.Enum):
    """The declared form of a :class:`BatchSchedule`."""

    STEPS = "steps"  #: a list of (step, batch) pairs
    RAMP = "ramp"  #: Megatron-style ramp over samples


@dataclass(frozen=True)
class Segment:
    """Steps from ``step`` on hold ``batch`` samples each, the first at ``position``."""

    step: int
    position: int
    batch: int


class BatchSchedule:
    """The maths shared by every schedule form, over the compiled :attr:`segments`."""

    def _compile(self) -> tuple[Segment, ...]:  # pragma: no cover - each form defines it
        raise NotImplementedError

    def scaled(self, factor: int) -> BatchSchedule:  # pragma: no cover
        """The same schedule with every count (batches, samples) multiplied by ``factor``."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:  # pragma: no cover
        """The schedule as the state's JSON object (``kind`` and its parameters); each subclass defines it."""
        raise NotImplementedError

    @cached_property
    def segments(self) -> tuple[Segment, ...]:
        return self._compile()

    @cached_property
    def _steps(self) -> list[int]:
        return [s.step for s in self.segments]

    @cached_property
    def _positions(self) -> list[int]:
        return [s.position for s in self.segments]

    @property
    def is_constant(self) -> bool:
        """Whether every segment has the same batch (stored as a fixed-batch plan)."""
        return len({s.batch for s in self.segments}) == 1

    @property
    def max_batch(self) -> int:
        """The largest global batch of any segment (the plan's ``global_batch``)."""
        return max(s.batch for s in self.segments)

    @property
    def first_batch(self) -> int:
        """The batch of step 0."""
        return self.segments[0].batch

    def _segment_of_step(self, step: int) -> Segment:
        return self.segments[bisect_right(self._steps, step) - 1]

    def batch_of(self, step: int) -> int:
        """The global batch of ``step``."""
        return self._segment_of_step(step).batch

    def step_start(self, step: int) -> int:
        """The position of the first sample of ``step``."""
        seg = self._segment_of_step(step)
        return seg.position + (step - seg.step) * seg.batch

    def step_span(self, step: int) -> tuple[int, int]:
        """Positions ``[start, stop)`` of ``step``."""
        seg = self._segment_of_step(step)
        start = seg.position + (step - seg.step) * seg.batch
        return start, start + seg.batch

    def step_of_position(self, position: int) -> int:
        """The step holding ``position``."""
        seg = self.segments[bisect_right(self._positions, position) - 1]
        return seg.step + (position - seg.position) // seg.batch

    @staticmethod
    def from_dict(d: Any, where: str = "batch_schedule") -> BatchSchedule:
        """Parse either form; anything malformed raises :class:`rd.ResumeError`."""
        if not isinstance(d, dict):
            raise ResumeError(describe(where, d, "a schedule object", "pass an unmodified state"))
        kind = expect_enum(d.get(K_KIND), ScheduleKind, f"{where}.kind")
        try:
            if kind is ScheduleKind.STEPS:
                expect_mapping(d, where, _STEPS_KEYS)
                raw = d[K_POINTS]
                if not isinstance(raw, list) or not raw or len(raw) > MAX_POINTS:
                    raise ResumeError(
                        describe(
                            f"{where}.points",
                            type(raw).__name__,
                            f"a list of 1..{MAX_POINTS} [step, batch] pairs",
                            "pass an unmodified state",
                        )
                    )
                points = []
                for i, p in enumerate(raw):
                    if not isinstance(p, list) or len(p) != 2:
                        raise ResumeError(
                            describe(f"{where}.points[{i}]", p, "[step, batch]", "pass an unmodified state")
                        )
                    points.append(
                        (
                            expect_int(p[0], f"{where}.points[{i}][0]", 0, MAX_STEP),
                            expect_int(p[1], f"{where}.points[{i}][1]", 1, MAX_BATCH),
                        )
                    )
                return BatchSteps(tuple(points))
            expect_mapping(d, where, _RAMP_KEYS)
            return BatchRamp(
                *(
                    expect_int(d[k], f"{where}.{k}", 1, MAX_STEP)
                    for k in (K_START, K_INCREMENT, K_RAMP_SAMPLES, K_FINAL)
                )
            )
        except ConfigError as e:  # constructor checks on forged values
            raise ResumeError(f"{where} is inconsistent: {e}") from None


#: How the pairs' errors name them: given as ``batch_size=[(step, batch), ...]`` or to ``rd.BatchSteps``.
_POINTS_PARAM = "batch_size / rd.BatchSteps pairs"


@dataclass(frozen=True)
class BatchSteps(BatchSchedule):
    """Batch ``b`` from step ``s`` on, for each ``(s, b)`` pair; the first pair is at step 0."""

    points: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        pts = self.points
        if (
            not isinstance(pts, (list, tuple))
            or not 1 <= len(pts) <= MAX_POINTS
            or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pts)
        ):
            raise ConfigError(
                describe(_POINTS_PARAM, pts, f"1..{MAX_POINTS} (step, batch) pairs", "pass e.g. [(0, 8), (1000, 16)]")
            )
        out = tuple(
            (check_int(s, "batch schedule step", 0, MAX_STEP), check_int(b, "batch schedule batch", 1, MAX_BATCH))
            for s, b in pts
        )
        if out[0][0] != 0:
            raise ConfigError(
                describe(
                    _POINTS_PARAM,
                    list(pts),
                    "a first pair at step 0 (the batch every run starts with)",
                    f"prepend (0, {out[0][1]})",
                )
            )
        for (a, _), (b, _) in itertools.pairwise(out):
            if b <= a:
                raise ConfigError(
                    describe(
                        _POINTS_PARAM,
                        list(pts),
                        f"strictly increasing steps (step {b} follows {a})",
                        "sort the pairs by step and merge duplicates",
                    )
                )
        object.__setattr__(self, "points", out)

    def _compile(self) -> tuple[Segment, ...]:
        segs, pos = [], 0
        for i, (step, batch) in enumerate(self.points):
            if i:
                prev_step, prev_batch = self.points[i - 1]
                pos += (step - prev_step) * prev_batch
            segs.append(Segment(step, pos, batch))
        return tuple(segs)

    def scaled(self, factor: int) -> BatchSteps:
        """This schedule with every batch multiplied by ``factor`` (per rank to global: the world size)."""
        return BatchSteps(tuple((s, b * factor) for s, b in self.points))

    def to_dict(self) -> dict[str, Any]:
        """The schedule as ``{kind: "steps", points: [[step, batch], ...]}``."""
        return {K_KIND: ScheduleKind.STEPS.value, K_POINTS: [[s, b] for s, b in self.points]}


@dataclass(frozen=True)
class BatchRamp(BatchSchedule):
    """Megatron's batch ramp: from ``start``, ``increment`` more per stage, stages of equal sample
    counts over the first ``ramp_samples`` samples, then ``final`` forever."""

    start: int
    increment: int
    ramp_samples: int
    final: int

    def __post_init__(self) -> None:
        start = check_int(self.start, "BatchRamp.start", 1, MAX_BATCH)
        inc = check_int(self.increment, "BatchRamp.increment", 1, MAX_BATCH)
        check_int(self.ramp_samples, "BatchRamp.ramp_samples", 1, MAX_STEP)
        final = check_int(self.final, "BatchRamp.final", start, MAX_BATCH)
        if (final - start) % inc:
            raise ConfigError(
                describe(
                    "BatchRamp.final",
                    final,
                    f"start + a multiple of increment ({start} + k * {inc})",
                    f"use final={start + (final - start) // inc * inc} or another increment",
                )
            )
        if (final - start) // inc > MAX_INCREMENTS:
            raise ConfigError(
                describe(
                    "BatchRamp.increment",
                    inc,
                    f"at most {MAX_INCREMENTS} increments from start to final",
                    "use a larger increment",
                )
            )
        for name in ("start", "increment", "ramp_samples", "final"):
            object.__setattr__(self, name, int(getattr(self, name)))

    @property
    def increments(self) -> int:
        """How many times the batch grows by ``increment`` on its way from ``start`` to ``final``."""
        return (self.final - self.start) // self.increment

    def _compile(self) -> tuple[Segment, ...]:
        k, ramp = self.increments, self.ramp_samples
        segs: list[Segment] = []
        step = pos = stage = 0
        while stage < k:
            batch = self.start + stage * self.increment
            threshold = -(-(stage + 1) * ramp // k)  # first sample count of a later stage
            n = -(-(threshold - pos) // batch)  # steps of this stage (pos < threshold here)
            segs.append(Segment(step, pos, batch))
            step += n
            pos += n * batch
            stage = min(k, pos * k // ramp)
        segs.append(Segment(step, pos, self.final))
        return tuple(segs)

    def scaled(self, factor: int) -> BatchRamp:
        """This ramp with ``start``, ``increment``, ``ramp_samples`` and ``final`` multiplied by ``factor``."""
        return BatchRamp(self.start * factor, self.increment * factor, self.ramp_samples * factor, self.final * factor)

    def to_dict(self) -> dict[str, Any]:
        """The ramp as ``{kind: "ramp", start, increment, ramp_samples, final}``."""
        return {
            K_KIND: ScheduleKind.RAMP.value,
            K_START: self.start,
            K_INCREMENT: self.increment,
            K_RAMP_SAMPLES: self.ramp_samples,
            K_FINAL: self.final,
        }


@dataclass(frozen=True)
class BatchOrigin:
    """Where a declared global-batch change started the current segment: its first ``step``, the
    ``position`` of that step's first sample, and the first step of the epoch holding it."""

    step: int
    position: int
    epoch_first_step: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "step", check_int(self.step, "origin step", 0, MAX_STEP))
        object.__setattr__(self, "position", check_int(self.position, "origin position", 0, MAX_STEP))
        object.__setattr__(
            self, "epoch_first_step", check_int(self.epoch_first_step, "origin epoch_first_step", 0, self.step)
        )

    def to_dict(self) -> dict[str, int]:
        """The origin as the state's JSON object ``{step, position, epoch_first_step}``."""
        return {K_STEP: self.step, K_POSITION: self.position, K_EPOCH_FIRST: self.epoch_first_step}

    @classmethod
    def from_dict(cls, d: Any, where: str = "origin") -> BatchOrigin:
        """The origin ``d`` (from :meth:`to_dict`) describes; ``where`` names it in errors.

        Raises :class:`rd.ResumeError` on other keys, a non-integer or out-of-range value, or
        ``epoch_first_step`` above ``step``."""
        expect_mapping(d, where, _ORIGIN_KEYS)
        step = expect_int(d[K_STEP], f"{where}.step", 0, MAX_STEP)
        return cls(
            step,
            expect_int(d[K_POSITION], f"{where}.position", 0, MAX_STEP),
            expect_int(d[K_EPOCH_FIRST], f"{where}.epoch_first_step", 0, step),
        )


def as_schedule(value: Any, param: str = "batch_size") -> BatchSchedule:
    """``value`` as a schedule: a :class:`BatchSchedule`, or a list of (step, batch) pairs."""
    if isinstance(value, BatchSchedule):
        return value
    if isinstance(value, (list, tuple)):
        return BatchSteps(tuple(tuple(p) if isinstance(p, (list, tuple)) else p for p in value))
    raise ConfigError(
        describe(
            param,
            value,
            "an int, a list of (step, batch) pairs or an rd.BatchRamp",
            "pass batch_size=8, batch_size=[(0, 8), (1000, 16)] or rd.BatchRamp(...)",
        )
    )
