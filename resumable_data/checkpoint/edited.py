"""A saved value that no save writes: the one error both validation passes raise for it.

The validation of a checkpoint before anything is restored (:mod:`.restore_check`) and of its
optimizer and scheduler states (:mod:`.optim_check`) refuse a value the save could not have
written with :func:`edited` (where, the value, what was expected, and the fix :data:`EDITED_FIX`),
and compare a saved value with the live object's by :func:`value_kind`. Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.errors import describe

__all__ = ["EDITED_FIX", "edited", "value_kind"]

#: The fix of a checkpoint value that no save writes (edited or damaged after the save).
EDITED_FIX = "the checkpoint was edited or damaged after it was saved: load another one"


def edited(where: str, value: Any, expected: str) -> CheckpointError:
    """A :class:`~.errors.CheckpointError` naming ``where`` the value is, the ``value`` found,
    what was ``expected``, and :data:`EDITED_FIX`."""
    return CheckpointError(describe(where, value, expected, EDITED_FIX))


def value_kind(v: Any) -> str:
    """The kind of a saved value as messages name it (``null``, ``bool``, ``number``, ``tensor``,
    ``list``, ``mapping``, else its type's name): values of one kind may stand for each other."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, torch.Tensor):
        return "tensor"
    if isinstance(v, (list, tuple)):
        return "list"
    if isinstance(v, Mapping):
        return "mapping"
    return type(v).__name__
