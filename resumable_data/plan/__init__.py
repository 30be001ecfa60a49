"""Pure index maths (numpy + xxhash; no torch, no pyarrow, no I/O, no environment reads).

Modules: :mod:`.permutation` (keyed bijections), :mod:`.order` (epoch orders), :mod:`.sharding`
(rank slices of a global batch), :mod:`.steps` (:class:`Plan`: step -> positions -> records), :mod:`.record_runs` (a run of
upcoming record ids served from one call),
:mod:`.batch_schedule` (global-batch schedules), :mod:`.sample_keys` (per-sample keys and
generators), :mod:`.packing` (sequence packing), :mod:`.reads` (the units coming steps read, for read-ahead).
"""

from resumable_data.plan.batch_schedule import BatchOrigin, BatchRamp, BatchSchedule, BatchSteps
from resumable_data.plan.order import Order, OrderSpec, WindowBlocks, epoch_records
from resumable_data.plan.packing import Overlong, Packing, PackMode
from resumable_data.plan.permutation import Permutation, permutation_key
from resumable_data.plan.sample_keys import numpy_generator, python_random, sample_key, sample_keys
from resumable_data.plan.sharding import Sharding, ShardingPolicy
from resumable_data.plan.steps import Plan, Tail
from resumable_data.plan.unit_window import HasReadUnits, ReadUnits

__all__ = [
    "BatchOrigin",
    "BatchRamp",
    "BatchSchedule",
    "BatchSteps",
    "HasReadUnits",
    "Order",
    "OrderSpec",
    "Overlong",
    "PackMode",
    "Packing",
    "Permutation",
    "Plan",
    "ReadUnits",
    "Sharding",
    "ShardingPolicy",
    "Tail",
    "WindowBlocks",
    "epoch_records",
    "numpy_generator",
    "permutation_key",
    "python_random",
    "sample_key",
    "sample_keys",
]
