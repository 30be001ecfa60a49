"""Helpers for ``torch.distributed``: the loader inside ``torch.distributed.checkpoint`` (DCP).

:class:`rd.DataLoader <resumable_data.DataLoader>` already satisfies DCP's ``Stateful`` protocol
(``state_dict()`` / ``load_state_dict(sd)``) and its state is rank-invariant (the cursor and the
token counts are global; the layout records the world size and policy, never the rank), so DCP's
de-duplication of equal keys across ranks keeps one copy and every rank loads the same state, on
any world size that divides the global batch.

DCP calls ``load_state_dict(sd)`` without options. A ``commit="explicit"`` loader saved with
delivered but uncommitted batches refuses such a state (:class:`~resumable_data.ResumeError`: the
choice between repeating and skipping them must be explicit). Put :class:`LoaderStateful` in the
DCP state dict instead of the loader to make that choice once, up front::

    state = {"app": app_state, "loader": rd.distributed.LoaderStateful(loader, on_uncommitted="repeat")}
    dcp.load(state, checkpoint_id=path)

Trust: DCP unpickles its ``.metadata`` file and every non-tensor value, so a DCP directory is
trusted input. For a checkpoint from an untrusted source use the package's own pickle-free format
(``rd.save_checkpoint``); the loader state itself is plain JSON and is validated field by field.
"""

from __future__ import annotations

from typing import Any

from resumable_data.errors import ConfigError, describe
from resumable_data.loader.protocol import ResumableLoader

__all__ = ["LoaderStateful"]


class LoaderStateful:
    """DCP ``Stateful`` view of a loader whose ``load_state_dict`` gets fixed options.

    ``on_uncommitted``: ``"repeat"`` or ``"skip"`` for a state with uncommitted batches (None:
    refuse such a state, as the loader does); ``allow_unpinned``: passed through.
    """

    def __init__(self, loader: Any, *, on_uncommitted: str | None = None, allow_unpinned: bool = False) -> None:
        if not isinstance(loader, ResumableLoader):  # load_state_dict takes on_uncommitted= and allow_unpinned=
            raise ConfigError(describe("loader", type(loader).__name__, "an rd.DataLoader", "wrap the loader itself"))
        self.loader = loader
        self.on_uncommitted = on_uncommitted
        self.allow_unpinned = allow_unpinned

    def state_dict(self) -> dict[str, Any]:
        """The wrapped loader's ``state_dict()`` (what ``dcp.save`` writes)."""
        return self.loader.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the wrapped loader from ``state_dict`` with the options given at construction.

        Raises :class:`rd.ResumeError` (nothing changed) when the loader refuses the state, e.g. one with
        uncommitted batches and ``on_uncommitted=None``."""
        self.loader.load_state_dict(state_dict, on_uncommitted=self.on_uncommitted, allow_unpinned=self.allow_unpinned)
