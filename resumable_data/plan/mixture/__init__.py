"""An ``rd.Mixture``'s stream as pure index maths: position ``p`` -> (source, that source's position).

Modules: :mod:`.weights` (weights and their schedule by step), :mod:`.runs` (a run of constant
weights: exact per-block counts in closed form), :mod:`.block` (a block's arrays, compiled),
:mod:`.cache` (blocks computed and cached), :mod:`.plan` (:class:`MixturePlan`: the stream, its
rebases and per-source progress), :mod:`.section` (the state section, parsed and typed) and
:mod:`.tokens` (per-source token counts). The public names are re-exported here; modules inside
the package import from the defining module.
"""

from resumable_data.plan.mixture.plan import MixturePlan, Rebase, SourceProgress, floor_sum, mixture_version
from resumable_data.plan.mixture.weights import StepPositions, WeightSchedule

__all__ = ["MixturePlan", "Rebase", "SourceProgress", "StepPositions", "WeightSchedule", "floor_sum", "mixture_version"]
