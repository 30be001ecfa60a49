"""Errors of the checkpoint layer, inside the package's :class:`~resumable_data.ResumableDataError` tree.

* :class:`CheckpointError`: a checkpoint cannot be written or read (missing, incomplete,
  corrupted, unsupported object); nothing in the live training objects was changed.
* :class:`CompatibilityError`: a checkpoint is readable but the recovery label does not allow
  one or more of its differences from the current run; raised before anything is restored, and
  its message lists every refused difference with saved value, current value and fix.
"""

from __future__ import annotations

from resumable_data.errors import ResumableDataError, ResumeError

__all__ = ["CheckpointError", "CompatibilityError"]


class CheckpointError(ResumableDataError):
    """A checkpoint cannot be written or read faithfully; nothing was changed."""


class CompatibilityError(ResumeError):
    """The recovery label does not allow a difference between the checkpoint and this run.

    ``report`` holds the full :class:`~resumable_data.checkpoint.CompatibilityReport`."""

    def __init__(self, message: str, report: object = None) -> None:
        super().__init__(message)
        self.report = report
