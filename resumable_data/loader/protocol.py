"""``ResumableLoader``: what the checkpoint layer and the faces need of a loader, and nothing more.

The checkpoint layer depends on this protocol, never on ``rd.DataLoader``'s private fields.
:meth:`snapshot` is side-effect free in every commit mode (``state_dict()`` alone keeps its
documented auto-commit), so building a ``TrainingState``, reading its metadata, oracles or
inventory, or inspecting a run never moves the cursor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, runtime_checkable

from resumable_data.loader.state import CounterView, Cursor, LoaderState, OnUncommitted

__all__ = ["HoldsLoader", "ResumableLoader"]


@runtime_checkable
class ResumableLoader(Protocol):
    """A loader whose state is a cursor (``rd.DataLoader`` implements it)."""

    @property
    def cursor(self) -> Cursor:
        """``committed <= delivered <= fetched``, in steps."""

    @property
    def counters(self) -> CounterView:
        """Updates, microbatches, samples, tokens and skipped steps, derived from the cursor."""

    @property
    def microstep(self) -> int:
        """Index, inside the accumulation window, of the last delivered microbatch."""

    @property
    def microstep_is_last(self) -> bool:
        """Whether the last delivered microbatch closes its accumulation window."""

    def __iter__(self) -> Iterator[Any]:
        """The rest of the current epoch, from the cursor."""

    def commit(self, applied: bool = True) -> None:
        """Commit every delivered batch (one attempted update; ``applied=False``: AMP skipped it)."""

    def step_info(self, step: int | None = None) -> Any:
        """Where ``step`` (default: the next) sits and its record ids, without fetching it."""

    def snapshot(self) -> LoaderState:
        """The typed state, changing nothing."""

    def state_dict(self) -> dict[str, Any]:
        """The JSON state (``commit='auto'``: delivered batches committed first)."""

    def validate_state_dict(
        self, state: Any, *, on_uncommitted: OnUncommitted | str | None = None, allow_unpinned: bool = False
    ) -> LoaderState:
        """Everything ``load_state_dict`` checks, changing nothing."""

    def load_state_dict(
        self, state: dict[str, Any], *, on_uncommitted: OnUncommitted | str | None = None, allow_unpinned: bool = False
    ) -> None:
        """Restore a state, all or nothing."""

    def undo_point(self) -> Callable[[], None]:
        """A function that puts the loader's progress back as it is now."""

    def reset(
        self,
        state: dict[str, Any] | None = None,
        *,
        on_uncommitted: OnUncommitted | str | None = None,
        allow_unpinned: bool = False,
    ) -> None:
        """A fresh start (``state=None``) or a restore."""


@runtime_checkable
class HoldsLoader(Protocol):
    """An object that carries one loader as its public ``loader`` attribute: ``rd.TrainingState``
    (None when it has none), the integrations' wrappers (``TitanDataLoader``) and
    ``rd.distributed.LoaderStateful``. ``rd.save_checkpoint(directory, obj)`` without ``step=``
    takes the step from that loader's delivered-step cursor when it is a :class:`ResumableLoader`."""

    loader: Any
