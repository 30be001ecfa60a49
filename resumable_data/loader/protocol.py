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

__all__ = ["ResumableLoader"]


@runtime_checkable
class ResumableLoader(Protocol):
    """A loader whose state is a cursor (``rd.DataLoader`` implements it)."""

    @property
    def cursor(self) -> Cursor: ...

    @property
    def counters(self) -> CounterView: ...

    @property
    def microstep(self) -> int: ...

    @property
    def microstep_is_last(self) -> bool: ...

    def __iter__(self) -> Iterator[Any]: ...

    def commit(self, applied: bool = True) -> None: ...

    def step_info(self, step: int | None = None) -> Any: ...

    def snapshot(self) -> LoaderState: ...

    def state_dict(self) -> dict[str, Any]: ...

    def validate_state_dict(self, state: Any, *, on_uncommitted: OnUncommitted | str | None = None,
                            allow_unpinned: bool = False) -> LoaderState: ...

    def load_state_dict(self, state: dict[str, Any], *, on_uncommitted: OnUncommitted | str | None = None,
                        allow_unpinned: bool = False) -> None: ...

    def undo_point(self) -> Callable[[], None]: ...

    def reset(self, state: dict[str, Any] | None = None, *, on_uncommitted: OnUncommitted | str | None = None,
              allow_unpinned: bool = False) -> None: ...
