"""Rebasing a single source's cursor onto a new dataset version (a ``data_change`` resume).

Algorithm. A run trained on version A (``saved``: ``N_A`` records, epoch length ``L_A``) resumes
over version B (``current``: ``N_B`` records, epoch length ``L_B``) at step ``s`` (the first step
the resume delivers). The saved stream stood at position ``p = saved.step_start(s)``, i.e.
``epoch e, offset o = divmod(p, L_A)``. The rebased stream keeps the step number, the epoch and
the fraction of the epoch already passed:

    position(s) = e * L_B + f,   f = floor(o * L_B / L_A)

rounded down to a multiple of the global batch ``G_B`` under ``drop`` / ``wrap`` (epochs shaped
by the batch, cut into whole batches from their start). The result is a
:class:`~.batch_schedule.BatchOrigin` ``(s, position(s), first step of epoch e)``: steps ``s,
s+1, ...`` deliver the rest of epoch ``e`` of version B's order (offsets ``[f, L_B)``, in batches
of ``G_B``, the last one short under ``partial`` / ``pad``), then epochs ``e+1, e+2, ...`` of
version B whole, as :class:`~.steps.Plan` with that origin defines. A resume at an epoch
boundary (``o = 0``) starts epoch ``e`` of version B at its first record.

Guarantee. Pure: the origin is a function of (saved plan, step, current plan) alone, so every
resume from the same checkpoint into the same version delivers the same stream, on any worker
count; the loader state stores the origin (``batch_origin``), so a later faithful resume of a
state written after the rebase continues it exactly. Within epoch ``e`` version B's order is a
new permutation (its key includes the version hash), unrelated to version A's: records that
epoch ``e`` delivered before the resume may be delivered again in the rest of epoch ``e``, and
others not at all in it (about a fraction ``o / L_A`` of each, without a record-level mapping
between versions nothing tells them apart). At an epoch boundary nothing is repeated or missed:
epochs from ``e`` (``o = 0``) or ``e + 1`` on hold every record of version B exactly once
(``partial`` / ``continuous``; ``drop`` / ``wrap`` / ``pad`` shape them as usual).

Cost. O(1): a few integer operations (one :meth:`~.steps.Plan.step_start` of the saved plan).
"""

from __future__ import annotations

from resumable_data.errors import ResumeError, describe
from resumable_data.plan.batch_schedule import BatchOrigin
from resumable_data.plan.permutation import MAX_DOMAIN
from resumable_data.plan.steps import Plan, Tail

__all__ = ["rebase_origin"]


def rebase_origin(saved: Plan, step: int, current: Plan) -> BatchOrigin:
    """The :class:`BatchOrigin` at which ``current`` (the new dataset version's plan) continues
    ``saved``'s stream from ``step``: same step, same epoch, same fraction of the epoch (see the
    module docs).

    Args:
        saved: the plan the run was trained on (with its own origin, if it has one).
        step: the first step the resume delivers (``>= saved.origin.step`` when saved has an origin).
        current: the plan over the new version (its origin is ignored).

    Raises:
        rd.ResumeError: the rebased epoch would reach past the position limit 2**62.
        rd.UsageError: ``step`` lies before ``saved``'s origin.
    """
    epoch, offset = divmod(saved.step_start(step), saved.epoch_len)
    length = current.epoch_len
    if (epoch + 1) * length > MAX_DOMAIN:
        raise ResumeError(
            describe(
                "state.cursor",
                f"epoch {epoch} at step {step}",
                f"an epoch whose positions over the new version ({length} an epoch) stay below 2**62",
                "resume with the saved dataset version",
            )
        )
    fraction = offset * length // saved.epoch_len
    if current.tail in (Tail.DROP, Tail.WRAP):
        fraction -= fraction % current.global_batch
    return BatchOrigin(step, epoch * length + fraction, saved.epoch_first_step(epoch))
