"""Resume-or-start: the two lines every training script needs, on top of the checkpoint store.

:func:`latest_checkpoint` returns the newest *complete* step directory of a checkpoint root (one
whose ``COMMITTED`` marker and file sizes check out, as listed by
:func:`~resumable_data.checkpoint.store.list_checkpoints`), or ``None`` when there is none yet.
:func:`resume_or_start` loads that checkpoint into a state when there is one and returns the step
it was saved at, or returns 0 and changes nothing when the directory holds no complete checkpoint
(a missing directory included), so one loop serves the first start and every restart::

    start = rd.resume_or_start("ckpt", state)        # 0 on the first run
    for step, batch in enumerate(loader, start=start): ...

Guarantee: the same as :func:`~resumable_data.checkpoint.load.load_checkpoint` (the
compatibility contract is checked before anything is restored; a damaged checkpoint raises
:class:`~resumable_data.checkpoint.errors.CheckpointError`, it is never silently skipped: only an
*absent* checkpoint means "start"). Interrupted saves are never candidates, except the complete
copy of a step whose re-save was killed between its two renames (the one the next save restores).
A step directory newer than the newest complete one whose ``COMMITTED`` marker is there but which
is not complete (truncated, a file missing or replaced, the marker damaged: rd's save never
publishes one) is a :class:`CheckpointError`, never skipped for an older checkpoint or for a fresh
start; one without a marker is a write that never finished and is skipped.

Cost: one directory listing plus a marker read per step directory; loading costs what
``load_checkpoint`` costs (the state is read and hashed once).

Only the public functions of ``store.py`` are used here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.checkpoint.load import load_checkpoint
from resumable_data.checkpoint.store import survey_checkpoints
from resumable_data.errors import ConfigError, describe
from resumable_data.labels import RecoveryLabel

__all__ = ["latest_checkpoint", "resume_or_start"]


def _root(directory: str | os.PathLike) -> Path:
    if not isinstance(directory, (str, os.PathLike)):
        raise ConfigError(
            describe(
                "directory",
                directory,
                "a path (str or os.PathLike) to a checkpoint directory",
                "pass the directory rd.save_checkpoint writes into, e.g. 'ckpt'",
            )
        )
    root = Path(directory)
    if root.exists() and not root.is_dir():
        raise ConfigError(
            describe(
                "directory",
                str(root),
                "a checkpoint directory, not a file",
                "pass the directory rd.save_checkpoint writes into",
            )
        )
    return root


def latest_checkpoint(directory: str | os.PathLike) -> Path | None:
    """The newest complete step directory under ``directory`` (``step-N`` with a valid
    ``COMMITTED`` marker; for a step whose re-save was killed between its two renames, the complete
    copy beside it, which the next save renames back), or ``None`` when there is none (or the
    directory does not exist)."""
    return survey_checkpoints(_root(directory))[0]


def resume_or_start(
    directory: str | os.PathLike,
    state: Any,
    *,
    label: RecoveryLabel | str = RecoveryLabel.FAITHFUL_CONTINUATION,
    allow_unpinned: bool = False,
    on_batch_change: Any = None,
) -> int:
    """Load the newest complete checkpoint of ``directory`` into ``state`` and return the step it
    was saved at; return 0 without touching ``state`` when there is no checkpoint yet.

    ``state`` is an :class:`~resumable_data.TrainingState` (or any object with ``state_dict()`` /
    ``load_state_dict()``); ``label`` is the recovery label of
    :func:`~resumable_data.load_checkpoint` (``faithful_continuation`` by default), as are
    ``allow_unpinned`` and ``on_batch_change``. Under ``label="data_change"`` the data stream
    continues from the saved cursor (an ``rd.Mixture`` per source, from each source's consumed
    position; a single source over a new dataset version at the same step and epoch: unpacked at the
    same fraction of the epoch, packed at the same in-epoch step of the new version's packing,
    :mod:`resumable_data.plan.rebase`) when the current loader can continue it (a packing change
    with it is an ``rd.ConfigError``), else restarts the stream at step 0 with a warning."""
    root = _root(directory)
    newest, damaged = survey_checkpoints(root)
    if damaged:  # never published incomplete by a save: loading an older one (or none) would lose steps unsaid
        name, why = next(reversed(damaged.items()))
        fallback = f"rd.load_checkpoint({str(newest)!r}, state)" if newest else "start afresh"
        raise CheckpointError(
            describe(
                "directory",
                str(root),
                f"complete checkpoints, but {sorted(damaged)} {'is' if len(damaged) == 1 else 'are'} newer than "
                f"{newest.name if newest else 'any complete one'} and not complete ({name}: {why})",
                f"restore {name} from a copy; or move it out of {root} (a save would delete it) and resume again "
                f"(or {fallback})",
            )
        )
    if newest is None:
        return 0
    return int(
        load_checkpoint(newest, state, label=label, allow_unpinned=allow_unpinned, on_batch_change=on_batch_change).step
    )
