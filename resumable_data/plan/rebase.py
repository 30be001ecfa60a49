"""Rebasing a single source's cursor onto a new dataset version (a ``data_change`` resume).

Algorithm (unpacked, :func:`rebase_origin`). A run trained on version A (``saved``: ``N_A`` records, epoch length ``L_A``) resumes
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

Algorithm (packed, :func:`rebase_packed`). A packed stream's positions are packed sequences,
and epoch ``e``'s step ``k`` holds its in-epoch sequences ``[k*G, (k+1)*G)`` of the epoch's
packing index (:mod:`.packing`); an epoch's step count comes from that index, which only the
version's own documents give (version A's are gone after the change). The saved state holds the
epoch ``e`` and first step ``f`` of the committed step (``epoch_base``), so the resume's step
``s`` is in-epoch step ``k = s - f``. The rebased stream keeps the step number, the epoch and the
in-epoch step, hence the count of packed sequences (tokens) already delivered in the epoch:

    epoch_base = (e, f)        when k < S_B(e), version B's steps in epoch e
                 (e + 1, s)    otherwise (version B's epoch e is shorter: it ends at the resume)

Steps ``s, s+1, ...`` deliver version B's epoch ``e`` from its in-epoch step ``k`` (sequences
``[k*G, S_B(e)*G)`` of its index, the tail as the plan says), then epochs ``e+1, ...`` of B
whole; in the second case epoch ``e+1`` of B whole from step ``s``. The epoch grid (epoch, first
step) stays what the loader's ledger counts, as an ``rd.Mixture``'s packed rebase keeps it, so
the state needs no origin: a state written after the rebase is an ordinary state of version B.

Guarantee. Pure: the epoch base is a function of (saved epoch base, step, B's step count of
epoch ``e``), so every resume from the same checkpoint into the same version delivers the same
stream, on any worker count, and a later faithful resume continues it exactly. Mid-epoch, version
B's packing of epoch ``e`` is unrelated to version A's: its first ``k*G`` sequences are not
delivered in epoch ``e`` (their documents are missed there), and documents epoch ``e`` delivered
from version A may be delivered again in its rest (each about the fraction ``k*G`` of the
epoch's sequences); the sequences of version A's epoch ``e`` from ``s`` on are never delivered.
At an epoch boundary (``k = 0``) nothing is repeated or missed: epoch ``e`` of version B starts at
its first sequence.

Cost. O(1): a few integer operations (one :meth:`~.steps.Plan.step_start` of the saved plan);
the packed rule needs version B's packing index of epoch ``e`` (cached on disk), as any resume.
"""

from __future__ import annotations

from resumable_data.errors import ResumeError, UsageError, describe
from resumable_data.plan.batch_schedule import BatchOrigin
from resumable_data.plan.permutation import MAX_DOMAIN
from resumable_data.plan.steps import Plan, Tail

__all__ = ["rebase_origin", "rebase_packed"]


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


def rebase_packed(epoch_base: tuple[int, int], step: int, steps_in_epoch: int, num_records: int) -> tuple[int, int]:
    """The epoch base ``(epoch, first step)`` from which a packed stream over the new dataset
    version continues the saved stream at ``step`` (see the module docs).

    Args:
        epoch_base: the saved state's ``(epoch, first step)`` of its committed step.
        step: the first step the resume delivers (``>= epoch_base[1]``).
        steps_in_epoch: the new version's step count of that epoch (its packing index).
        num_records: the new version's document count (an epoch's documents are ``[e*n, (e+1)*n)``).

    Raises:
        rd.ResumeError: the rebased epoch's documents would reach past the position limit 2**62.
        rd.UsageError: ``step`` lies before the epoch's first step, or the epoch has no step.
    """
    epoch, first = epoch_base
    if step < first or steps_in_epoch < 1:
        raise UsageError(
            describe(
                "step",
                step,
                f">= the epoch's first step {first}, in an epoch with steps ({steps_in_epoch})",
                "pass the resume step and the new version's step count of the saved epoch",
            )
        )
    rebased = (epoch, first) if step - first < steps_in_epoch else (epoch + 1, step)
    if (rebased[0] + 1) * num_records > MAX_DOMAIN:
        raise ResumeError(
            describe(
                "state.epoch_base",
                list(epoch_base),
                f"an epoch whose documents over the new version ({num_records} an epoch) stay below 2**62",
                "resume with the saved dataset version",
            )
        )
    return rebased
