"""Pure index maths (numpy + xxhash; no torch, no I/O): permutations, orders, sharding, keys."""

from resumable_data.plan.keys import numpy_generator, python_random, sample_key, sample_keys, torch_seed
from resumable_data.plan.packing import Overlong, Packing, PackMode
from resumable_data.plan.order import Order, OrderSpec, epoch_records
from resumable_data.plan.permutation import Permutation, permutation_key
from resumable_data.plan.sharding import Sharding, ShardingPolicy
from resumable_data.plan.stream import Plan, Tail

__all__ = [
    "Order",
    "OrderSpec",
    "Overlong",
    "PackMode",
    "Packing",
    "Permutation",
    "Plan",
    "Sharding",
    "ShardingPolicy",
    "Tail",
    "epoch_records",
    "numpy_generator",
    "permutation_key",
    "python_random",
    "sample_key",
    "sample_keys",
    "torch_seed",
]
