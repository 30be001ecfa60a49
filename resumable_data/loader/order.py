"""What the loader's positions map to: the :class:`StreamOrder` protocol, and the plain plan's and a
user sampler's implementations (an ``rd.Mixture``'s is :class:`~.mixture.order.MixtureOrder`).

Algorithm. The loader, its fetcher and its restore never ask what kind of order they hold; they
call the protocol. Position ``p`` of the loader's stream maps to a record id by
:meth:`StreamOrder.records` (any positions), :meth:`StreamOrder.span_records` (the consecutive
positions ``[start, stop)``, served from a run of upcoming positions computed in one call: also
the question a reader asks to plan its reads ahead, with a step's span from
:meth:`~resumable_data.plan.Plan.step_span`) and :meth:`StreamOrder.batch_records` (one rank's
positions of a global batch); a packed stream orders each epoch's documents with
:meth:`StreamOrder.document_order`. Identity: :meth:`~StreamOrder.fingerprint` (the state's
``sampler``) and :meth:`~StreamOrder.state_section` (the state's ``mixture``). An order that can
continue from a point other than its start (a mixture's rebase) names that point
(:meth:`~StreamOrder.point`, :meth:`~StreamOrder.move_to`; the loader drops its persistent workers
and packed indexes when it moves), checks a saved state's section on a restore
(:meth:`~StreamOrder.check_restore`: the point the restore continues from), adds what it counts
to the loader's states (:meth:`~StreamOrder.snapshot`, :meth:`~StreamOrder.prepare_restore`,
:meth:`~StreamOrder.apply_restore`) and reports its progress (:meth:`~StreamOrder.progress`).

Guarantee. :class:`PlanOrder` gives the plan's records (:meth:`Plan.records`) and
:class:`SamplerOrder` ``sampler.indices(epoch, offsets)`` with ``epoch, offset = divmod(p,
epoch_len)``, element for element as the loader computed them before this protocol: both are
pure functions of the position, with no point to move, no section and no per-source progress
(asking a plain loader for it is an :class:`rd.ConfigError`).

Cost. PlanOrder: one plan call per run of :data:`~resumable_data.plan.record_runs.RUN` positions
(:class:`~resumable_data.plan.record_runs.RecordRuns`); SamplerOrder: one sampler call per epoch a
span touches. A restore costs nothing here (the first span computes a run).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from resumable_data.errors import ConfigError, describe
from resumable_data.labels import RecoveryLabel
from resumable_data.loader.state import LoaderState, OnUncommitted
from resumable_data.plan import Plan
from resumable_data.plan.mixture.section import MixtureSection
from resumable_data.plan.permutation import TABLE_MIN_INDICES
from resumable_data.plan.record_runs import RecordRuns

__all__ = ["DocumentOrder", "OrderCheck", "PlanOrder", "SamplerOrder", "StreamOrder"]


class DocumentOrder(Protocol):
    """What a packed stream orders an epoch's documents with (a sampler's three methods)."""

    def indices(self, epoch: int, offsets: np.ndarray) -> np.ndarray: ...

    def fingerprint(self) -> str: ...

    def index_key(self) -> str: ...


@dataclass(frozen=True)
class OrderCheck:
    """What :meth:`StreamOrder.check_restore` found: the differences that forbid the resume, the
    point the loader continues from, and what the check parsed and built (the saved section,
    typed, and the saved counting plan), passed on so that later steps of the same restore do not
    parse or build them again (None: nothing of the kind)."""

    diffs: list[str]
    point: Any = None
    section: Any = None
    plan: Any = None


class StreamOrder(Protocol):
    """The loader's order: what its positions map to (see the module docs)."""

    # -- identity --------------------------------------------------------------------------------
    def fingerprint(self) -> str | None:
        """The state's ``sampler`` (None: the plan's own order)."""
        ...

    def state_section(self) -> MixtureSection | None:
        """The state's ``mixture`` section (None: not a mixture)."""
        ...

    # -- positions -> records --------------------------------------------------------------------
    def records(self, positions: np.ndarray) -> np.ndarray:
        """Record ids at stream ``positions`` (any int64 positions, in any order)."""
        ...

    def span_records(self, start: int, stop: int) -> np.ndarray:
        """Record ids of the consecutive positions ``[start, stop)``, served from a run of upcoming
        positions (a new array the caller may keep)."""
        ...

    def batch_records(self, start: int, stop: int, positions: np.ndarray) -> np.ndarray:
        """Record ids of ``positions`` (increasing, inside ``[start, stop)``: one rank's share of a
        global batch)."""
        ...

    def warm_ids(self) -> np.ndarray:
        """Record ids a fetcher reads once before forking workers (compiled kernels, first gather)."""
        ...

    def document_order(self) -> DocumentOrder | None:
        """What orders a packed stream's documents (None: the plan's own order)."""
        ...

    def bind(self, stream: Any) -> None:
        """See the loader's stream once, at construction (a packed weight schedule places its
        segments at the stream's window boundaries)."""
        ...

    # -- the point it continues from, and restores -----------------------------------------------
    def point(self) -> Any:
        """Where the order continues from now (None: its start)."""
        ...

    def move_to(self, point: Any) -> None:
        """Continue from ``point`` (a restore's, an undo's, or None for a fresh start)."""
        ...

    def check_restore(
        self, saved: LoaderState, current: LoaderState, label: RecoveryLabel, choice: OnUncommitted | None, stream: Any
    ) -> OrderCheck:
        """Check ``saved``'s section against this order (``label``: the declared recovery label)."""
        ...

    def restore_stream(self, stream: Any, point: Any) -> Any:
        """``stream`` as it is ordered when continuing from ``point`` (for locating saved steps)."""
        ...

    def snapshot(self, state: LoaderState, stream: Any) -> LoaderState:
        """``state`` with what this order counts added (a mixture's tokens per source)."""
        ...

    def prepare_restore(self, saved: LoaderState, check: OrderCheck, stream: Any) -> Any:
        """What :meth:`apply_restore` will set, checked before anything changes (``rd.ResumeError``)."""
        ...

    def apply_restore(self, prepared: Any) -> None:
        """Take the counts :meth:`prepare_restore` checked (None: a fresh start)."""
        ...

    def memento(self) -> Any:
        """The counts :meth:`rewind` puts back (an undo point)."""
        ...

    def rewind(self, memento: Any) -> None: ...

    def progress(self, state: LoaderState, stream: Any, ledger: dict[int, int]) -> Any:
        """Per-source progress at ``state``'s committed cursor (``rd.ConfigError`` unless a mixture)."""
        ...


class _Plain(ABC):
    """What the plain orders share: no point to move, no section, nothing counted."""

    @abstractmethod
    def fingerprint(self) -> str | None: ...

    @abstractmethod
    def records(self, positions: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def span_records(self, start: int, stop: int) -> np.ndarray: ...

    def state_section(self) -> MixtureSection | None:
        return None

    def batch_records(self, start: int, stop: int, positions: np.ndarray) -> np.ndarray:
        ids = self.span_records(start, stop)
        return ids if len(positions) == stop - start else ids[positions - start]

    def warm_ids(self) -> np.ndarray:
        return self.records(np.zeros(1, dtype=np.int64))

    def bind(self, stream: Any) -> None:
        return None

    def point(self) -> Any:
        return None

    def move_to(self, point: Any) -> None:
        if point is not None:
            raise ConfigError(
                describe(
                    "point",
                    point,
                    "None (a plain order continues from its start only)",
                    "restore a state of a plain loader",
                )
            )

    def check_restore(
        self, saved: LoaderState, current: LoaderState, label: RecoveryLabel, choice: OnUncommitted | None, stream: Any
    ) -> OrderCheck:
        if saved.mixture is None:
            return OrderCheck([])
        return OrderCheck(
            [
                "mixture: the current loader is not an rd.Mixture loader; fix: resume a mixture's state "
                "into a loader over the same rd.Mixture"
            ]
        )

    def restore_stream(self, stream: Any, point: Any) -> Any:
        return stream

    def snapshot(self, state: LoaderState, stream: Any) -> LoaderState:
        return state

    def prepare_restore(self, saved: LoaderState, check: OrderCheck, stream: Any) -> Any:
        return None

    def apply_restore(self, prepared: Any) -> None:
        return None

    def memento(self) -> Any:
        return None

    def rewind(self, memento: Any) -> None:
        return None

    def progress(self, state: LoaderState, stream: Any, ledger: dict[int, int]) -> Any:
        what = (
            "a dataset ordered by the plan"
            if self.fingerprint() is None
            else f"a dataset ordered by the sampler {self.fingerprint()}"
        )
        raise ConfigError(
            describe(
                "dataset",
                what,
                "an rd.Mixture (per-source progress)",
                "build the loader over rd.Mixture({...}, weights=...)",
            )
        )


class PlanOrder(_Plain):
    """The plan's own order (sequential, global shuffle, window shuffle): :meth:`Plan.records`."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self._runs = RecordRuns(plan.records)

    def __getstate__(self) -> dict[str, Any]:  # a worker computes its own runs
        return {"plan": self.plan}

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.__init__(d["plan"])  # type: ignore[misc]

    def fingerprint(self) -> str | None:
        return None

    def records(self, positions: np.ndarray) -> np.ndarray:
        return self.plan.records(positions)

    def span_records(self, start: int, stop: int) -> np.ndarray:
        return self._runs.span(start, stop)

    def warm_ids(self) -> np.ndarray:
        # as many positions as a run's call maps through round tables, so that kernel is loaded too
        # (epoch 0's first offset: the same record as position 0, without the epoch's length, which
        # a packed plan's tail leaves to its packing index)
        return self.epoch_records(0, np.zeros(TABLE_MIN_INDICES, dtype=np.int64))[:1]

    def document_order(self) -> DocumentOrder | None:
        return None

    def epoch_records(self, epoch: int, offsets: np.ndarray) -> np.ndarray:
        return self.plan.epoch_records(epoch, offsets)  # the plan's read units too (a read-unit window)


class SamplerOrder(_Plain):
    """A user's ``rd.PositionalSampler`` (or one rd translated from torch's samplers): position
    ``p`` is ``sampler.indices(epoch, [offset])`` with ``epoch, offset = divmod(p, epoch_len)``."""

    def __init__(self, sampler: Any, epoch_len: int) -> None:
        self.sampler = sampler
        self.epoch_len = int(epoch_len)

    def fingerprint(self) -> str:
        return self.sampler.fingerprint()

    def records(self, positions: np.ndarray) -> np.ndarray:
        epochs, offsets = np.divmod(positions, self.epoch_len)
        out = np.empty_like(positions)
        for e in np.unique(epochs):
            sel = epochs == e
            out[sel] = np.asarray(self.sampler.indices(int(e), offsets[sel]), dtype=np.int64)
        return out

    def span_records(self, start: int, stop: int) -> np.ndarray:
        return self.records(np.arange(start, stop, dtype=np.int64))

    def batch_records(self, start: int, stop: int, positions: np.ndarray) -> np.ndarray:
        return self.records(positions)  # this rank's positions only: the sampler is asked for nothing else

    def document_order(self) -> DocumentOrder | None:
        return self

    # the DocumentOrder of a packed stream over a user's sampler
    def indices(self, epoch: int, offsets: np.ndarray) -> np.ndarray:
        return np.asarray(self.sampler.indices(epoch, offsets), dtype=np.int64)

    def index_key(self) -> str:
        return "{}"  # the key a user sampler's packing index always had (no section)
