"""``rd.load_checkpoint``: read a checkpoint folder and restore it into a training state.

Algorithm. :func:`~resumable_data.checkpoint.store.read_checkpoint` resolves the step (``latest``,
else the newest complete step), checks every file against its ``COMMITTED`` marker (sizes and
xxh3-128 hashes, regular files only, bounded reads; each file read once and parsed from the bytes
that were hashed; the safetensors format tag) and decodes the tree without unpickling; the
state's own ``load_state_dict`` then restores it. Guarantee: for an :class:`rd.TrainingState`
the restore is all or nothing (:mod:`~resumable_data.checkpoint.restore`); any other object is
snapshotted first (a module's tensors, gradients and modes; else its ``state_dict()`` and
attributes) and put back if its ``load_state_dict`` raises, whose error comes out as an rd
error. Cost: one read and hash of the checkpoint's files (the JSON files held in memory while
they are parsed; the tensors read straight into their own storage: about 1x the tensor file); for
an object other than a TrainingState, one copy of its state (the rollback snapshot).
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from resumable_data.checkpoint.compat import CompatibilityReport
from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.checkpoint.meta import CheckpointMeta
from resumable_data.checkpoint.store import read_checkpoint
from resumable_data.errors import ConfigError, ResumableDataError, describe
from resumable_data.labels import RecoveryLabel

__all__ = ["LoadedCheckpoint", "load_checkpoint"]


@dataclass(frozen=True)
class LoadedCheckpoint:
    """What :func:`load_checkpoint` restored."""

    path: Path
    step: int
    checkpoint_id: str
    label: RecoveryLabel
    meta: CheckpointMeta | None
    report: CompatibilityReport | None


def load_checkpoint(
    directory: str | os.PathLike,
    state: Any,
    *,
    label: RecoveryLabel | str = RecoveryLabel.FAITHFUL_CONTINUATION,
    step: int | None = None,
    allow_unpinned: bool = False,
    on_batch_change: Any = None,
) -> LoadedCheckpoint:
    """Restore ``state`` from ``directory`` (its ``latest``, or ``step``, or a step directory).

    All or nothing for a :class:`TrainingState`: the files are read and verified, the compatibility
    contract and every restored part are checked before anything changes, and a failure while
    applying rolls every object back (:mod:`~resumable_data.checkpoint.restore`). A refused
    difference raises :class:`CompatibilityError`, a damaged checkpoint :class:`CheckpointError`,
    a refused loader state :class:`ResumeError`; nothing else comes out. ``allow_unpinned=True``
    lets the loader resume over a dataset without a pinned version; ``on_batch_change="continue"``
    lets a loader built with another global batch continue at the committed sample (as
    ``loader.load_state_dict`` does; a :class:`TrainingState` only), labelled ``elastic_reshard``."""
    from resumable_data._schema import coerce_enum
    from resumable_data.checkpoint.state import TrainingState

    label = coerce_enum(label, RecoveryLabel, "label")
    if on_batch_change is not None and not isinstance(state, TrainingState):
        raise ConfigError(
            describe(
                "on_batch_change",
                on_batch_change,
                "None unless state is an rd.TrainingState (it restores the loader)",
                "restore into an rd.TrainingState(loader=...)",
            )
        )
    raw = read_checkpoint(directory, step)
    report = None
    if isinstance(state, TrainingState):
        report = state.load_state_dict(
            raw.tree, label=label, allow_unpinned=allow_unpinned, on_batch_change=on_batch_change
        )
        label = state.recovery_label
    else:
        report = _load_other(state, raw.tree, label)
    return LoadedCheckpoint(raw.path, raw.step, raw.checkpoint_id, label, raw.meta, report)


def _accepts_label(fn: Any) -> bool:
    """Whether ``fn`` takes a ``label=`` keyword (a parameter of that name, or ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: no label
        return False
    return any(
        p.kind is inspect.Parameter.VAR_KEYWORD
        or (p.name == "label" and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY))
        for p in params
    )


def _load_other(state: Any, tree: Any, label: RecoveryLabel) -> CompatibilityReport | None:
    """``state.load_state_dict(tree)`` (with ``label=`` where it takes one) for an object that is not
    a :class:`TrainingState`, all or nothing: a module's parameters, buffers, gradients and modes, or
    another object's ``state_dict()`` and attributes, are snapshotted first and put back if the
    load raises (``nn.Module.load_state_dict`` copies every matching tensor before it reports a
    mismatch). ``load_state_dict`` is called once (a ``TypeError`` raised inside it used to make a
    second call without ``label``)."""
    import torch

    from resumable_data.checkpoint.save import SavesState
    from resumable_data.checkpoint.undo import module_undo, stateful_undo

    if isinstance(state, torch.nn.Module):
        undo = module_undo(state)
    elif isinstance(state, SavesState):
        undo = stateful_undo(state)
    else:  # no state_dict(): its attributes (shallow) are what can be put back
        try:
            attrs: dict[str, Any] | None = dict(vars(state))
        except TypeError:  # no __dict__
            attrs = None

        def undo() -> None:
            if attrs is not None:
                vars(state).clear()
                vars(state).update(attrs)

    try:
        if _accepts_label(state.load_state_dict):
            result = state.load_state_dict(tree, label=label)
        else:
            result = state.load_state_dict(tree)
    except BaseException as e:
        undo()
        if isinstance(e, ResumableDataError) or not isinstance(e, Exception):
            raise
        raise CheckpointError(
            describe(
                "state",
                type(state).__name__,
                f"an object that accepts this checkpoint ({type(e).__name__}: {e}; nothing was changed)",
                "restore into the objects that were saved",
            )
        ) from e
    return result if isinstance(result, CompatibilityReport) else None
