"""Recovery labels: what kind of resume produced the outputs that follow it.

A reset is never reported as a continuation: every resume carries exactly one label, recorded in
the state and in outputs written afterwards.
"""

from __future__ import annotations

import enum

__all__ = ["RecoveryLabel"]


class RecoveryLabel(str, enum.Enum):
    """How a run relates to the checkpoint it resumed from."""

    #: Everything that shapes the next update matches: the run continues as if never stopped.
    FAITHFUL_CONTINUATION = "faithful_continuation"
    #: Same global stream on a new layout (another world size, same global batch).
    ELASTIC_RESHARD = "elastic_reshard"
    #: An intentional new experiment: parameters kept, optimizer and scheduler fresh.
    OPTIMIZER_RESET = "optimizer_reset"
    #: Weights only.
    WARM_START = "warm_start"
    #: A deliberate new dataset version.
    DATA_CHANGE = "data_change"
