"""Mixture weights as a function of the step: :class:`WeightSchedule` and its step -> position map.

Algorithm. A schedule is a strictly increasing list of steps from 0, each with a mapping source
name -> weight; :meth:`WeightSchedule.resolve` turns each entry into exact normalised rationals
(:class:`fractions.Fraction`: an integer weight exactly at any size, a float exactly when finite)
in the mixture's source order, plus the numbers as given (integers stay integers in the state).
:class:`StepPositions` is the fixed-batch map ``step -> step * global_batch``.

Guarantee. A schedule is immutable after construction (its mappings are read-only copies), so the
plan built from it is a pure function of it; bad input (non-string names, weights that are not
finite numbers >= 0, steps outside ``[0, 2**62]``) is a ``ConfigError`` at construction.

Cost. O(segments x sources) exact-rational arithmetic, once per plan; nothing on a restore.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Any

import numpy as np

from resumable_data._schema import check_int
from resumable_data.errors import ConfigError, describe
from resumable_data.plan.permutation import MAX_DOMAIN as MAX_POSITION

__all__ = ["StepPositions", "WeightSchedule"]

MAX_INT_WEIGHT = 1 << 4096  # integer weights below it (Python's int <-> str limit is 4300 digits)


def is_weight(v: Any) -> bool:
    """Whether ``v`` is a weight: an integer (not a bool) in ``[0, 2**4096)`` or a finite float >= 0."""
    if isinstance(v, (int, np.integer)):
        return not isinstance(v, bool) and bool(0 <= v < MAX_INT_WEIGHT)
    return isinstance(v, (float, np.floating)) and math.isfinite(v) and bool(v >= 0)


#: What a weight must be (the text of every refusal of one).
WEIGHT_TEXT = "a finite number >= 0 (an integer below 2**4096)"


def _weight(v: Any, where: str) -> Fraction:
    """A weight as an exact rational: an integer exactly (below 2**4096, so the state's JSON can
    hold it), a float exactly when finite."""
    if is_weight(v):
        return Fraction(int(v)) if isinstance(v, (int, np.integer)) else Fraction(float(v))
    shown = v if not isinstance(v, int) or v.bit_length() <= 64 else f"an integer of {v.bit_length()} bits"
    raise ConfigError(describe(where, shown, WEIGHT_TEXT, "pass weights such as {'web': 0.7, 'code': 0.3}"))


def _given(v: Any) -> int | float:
    """The number as given, for the state (an integer stays exact)."""
    return int(v) if isinstance(v, (int, np.integer)) else float(v)


class WeightSchedule:
    """Weights as a piecewise-constant function of the step: ``[(0, {...}), (10_000, {...})]``.

    Each entry's weights hold from its step until the next entry's; the first entry must be at
    step 0. Weights are normalised per entry; a weight of 0 leaves a source out of that segment.
    Steps become positions through the loader (``step * global batch`` today), so a schedule is
    part of the plan and the stream stays a pure function of the position.
    """

    def __init__(self, segments: Sequence[tuple[int, Mapping[str, float]]]) -> None:
        if not isinstance(segments, (list, tuple)) or not segments:
            raise ConfigError(
                describe(
                    "WeightSchedule",
                    segments,
                    "a non-empty list of (step, {source: weight})",
                    "pass [(0, {'web': 0.7, 'code': 0.3}), (10_000, {...})]",
                )
            )
        steps, maps = [], []
        for i, seg in enumerate(segments):
            if not isinstance(seg, (list, tuple)) or len(seg) != 2 or not isinstance(seg[1], Mapping):
                raise ConfigError(
                    describe(
                        f"WeightSchedule[{i}]", seg, "a pair (step, {source: weight})", "pass (step, mapping) pairs"
                    )
                )
            steps.append(check_int(seg[0], f"WeightSchedule[{i}] step", 0, MAX_POSITION))
            bad = [k for k in seg[1] if not isinstance(k, str)]
            if bad:
                raise ConfigError(
                    describe(
                        f"WeightSchedule[{i}] source name",
                        bad[0],
                        "a string (a source's name)",
                        "key the weights by the Mixture's source names",
                    )
                )
            maps.append(MappingProxyType(dict(seg[1])))
        if steps[0] != 0 or any(b <= a for a, b in itertools.pairwise(steps)):
            raise ConfigError(
                describe(
                    "WeightSchedule steps",
                    steps,
                    "strictly increasing steps starting at 0",
                    "start the schedule at step 0 and sort it",
                )
            )
        self._steps = tuple(steps)
        self._maps = tuple(maps)

    @property
    def steps(self) -> tuple[int, ...]:
        """The first step of each segment: strictly increasing, starting at 0."""
        return self._steps

    @property
    def maps(self) -> tuple[Mapping[str, float], ...]:
        """Each segment's weights as given (read-only: a schedule is part of the plan)."""
        return self._maps

    @classmethod
    def constant(cls, weights: Mapping[str, float]) -> WeightSchedule:
        """A schedule of one segment: ``weights`` (source name -> weight) from step 0 on.

        Raises :class:`rd.ConfigError` as the constructor does (a non-string name, a bad weight)."""
        return cls([(0, weights)])

    def resolve(self, names: Sequence[str]) -> tuple[tuple[int, tuple[Fraction, ...], tuple[float, ...]], ...]:
        """Per segment: (step, normalised exact weights in ``names`` order, the given numbers)."""
        out = []
        for step, m in zip(self.steps, self.maps):
            if set(m) != set(names):
                raise ConfigError(
                    describe(
                        "weights",
                        sorted(m),
                        f"one weight for each source {sorted(names)}",
                        "name every source of the Mixture once (0 leaves one out)",
                    )
                )
            raw = tuple(m[k] for k in names)
            ws = [_weight(v, f"weights[{k!r}]") for k, v in zip(names, raw)]
            total = sum(ws)
            if total == 0:
                raise ConfigError(
                    describe("weights", m, "at least one weight > 0", "give some source a positive weight")
                )
            out.append((step, tuple(w / total for w in ws), tuple(_given(v) for v in raw)))
        return tuple(out)

    def __reduce__(self) -> tuple:
        return WeightSchedule, ([(step, dict(m)) for step, m in zip(self.steps, self.maps)],)

    def __repr__(self) -> str:
        return f"rd.WeightSchedule({[(step, dict(m)) for step, m in zip(self.steps, self.maps)]!r})"


@dataclass(frozen=True)
class StepPositions:
    """Step -> first position of that step, for a fixed global batch (``step * global_batch``);
    a batch schedule supplies another such callable."""

    global_batch: int

    def __call__(self, step: int) -> int:
        return step * self.global_batch
