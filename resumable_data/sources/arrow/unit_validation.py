"""Validation once: every zero-copy record batch of a map is validated before its first record is used.

Algorithm: one boolean per unit (``valid``): units decoded when read start valid (they are
validated at every decode, :mod:`...unit_reads`), the zero-copy batches of a map start not. A
read asks :meth:`UnitValidation.units` for the units it touches (or :meth:`UnitValidation.ensure`
for one): each one not yet valid is validated (:func:`~resumable_data.sources.validate.validate_batch`)
and marked. A count of the units left skips the check once all are valid; threads that validate
the same unit at once each count it, so when the count reaches 0 it is counted again from the
booleans. A joined validation (``rd.Mixture``'s view, :meth:`UnitValidation.joined`) starts from
what its sources validated and has the source holding a unit validate it (and mark it there).

Guarantee: no record of a zero-copy batch is used before its batch passed
``validate(full=True)``; a failing batch is a :class:`~resumable_data.DatasetIntegrityError`
naming its shard and batch, and stays not valid (the next read raises again). A batch is validated
once per process (once per source and its views), never once per read.

Cost: the first read of a batch validates it (see :mod:`..validate`: one pass over offsets and
string bytes); later reads cost one boolean mask per batch of ids until every unit is valid, then
nothing. No state to restore: a restored (unpickled) source validates again, in its own process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from resumable_data.sources.unit_index import Unit
from resumable_data.sources.validate import validate_batch

__all__ = ["UnitValidation"]


class UnitValidation:
    """Which units are validated (``valid``, one boolean per unit) and ``validate(k)``, which
    validates unit ``k`` or raises (see the module docstring)."""

    def __init__(self, valid: np.ndarray, validate: Callable[[int], None]) -> None:
        self.valid = valid
        self._validate = validate
        self._unvalidated = int((~valid).sum())
        self.all_valid = self._unvalidated == 0

    @classmethod
    def of_units(cls, units: Sequence[Unit], unit_index: list[int], rel: list[str]) -> UnitValidation:
        """The validation of a source's units: the zero-copy batches (``unit.batch``) start not valid,
        each validated as batch ``unit_index[k]`` of shard ``rel[unit.shard]``."""

        def validate(k: int) -> None:
            validate_batch(units[k].batch, rel[units[k].shard], unit_index[k])

        return cls(np.fromiter((u.batch is None for u in units), dtype=bool, count=len(units)), validate)

    @classmethod
    def joined(cls, members: Sequence[UnitValidation]) -> UnitValidation:
        """The validation of the units of ``members``, in order: what they validated holds (the same
        mapped batches), and the member holding a unit validates it (marking it there too)."""
        first = np.cumsum([0] + [len(m.valid) for m in members[:-1]], dtype=np.int64)

        def validate(k: int) -> None:
            s = int(np.searchsorted(first, k, side="right")) - 1
            members[s].ensure(k - int(first[s]))

        return cls(np.concatenate([m.valid for m in members]) if members else np.zeros(0, dtype=bool), validate)

    def units(self, unit: np.ndarray) -> None:
        """Validate every not-yet-validated unit in ``unit`` (before any of its values is used)."""
        if self.all_valid:
            return
        todo = unit[~self.valid[unit]]
        if not todo.size:
            return
        for k in np.unique(todo):
            self._one(int(k))

    def ensure(self, k: int) -> None:
        """Validate unit ``k``, a zero-copy batch of a map, unless it was already."""
        if not self.valid[k]:
            self._one(k)

    def _one(self, k: int) -> None:
        self._validate(k)
        self.valid[k] = True
        self._unvalidated -= 1
        if self._unvalidated <= 0:  # threads that validated one unit at once each counted it: count again
            self._unvalidated = int((~self.valid).sum())
            self.all_valid = self._unvalidated == 0
