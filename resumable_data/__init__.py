"""resumable_data: deterministic, resumable PyTorch data pipelines.

What the loader delivers at logical position ``p`` is a pure function of (dataset version hash,
seed, p, sharding policy), so the loader's state is a cursor of a few integers and resume is a
seek. See the README for the tour.
"""

from resumable_data.errors import (
    ConfigError,
    DatasetIntegrityError,
    ResumableDataError,
    ResumeError,
)

# -- plan (pure index maths) --
from resumable_data.plan import (
    Order,
    OrderSpec,
    Permutation,
    Plan,
    Sharding,
    ShardingPolicy,
    Tail,
    sample_key,
)
# -- sources (pinned Arrow shards) --
from resumable_data.sources import (
    ArrowShards,
    DatasetVersion,
    HashMode,
    RecordIdError,
    ShardInfo,
    UnpinnedPolicy,
    VerifyLevel,
    pin,
    write_arrow_shards,
)

__version__ = "0.1.0"

__all__ = [
    "ArrowShards",
    "ConfigError",
    "DatasetIntegrityError",
    "DatasetVersion",
    "HashMode",
    "Order",
    "OrderSpec",
    "Permutation",
    "Plan",
    "RecordIdError",
    "ResumableDataError",
    "ResumeError",
    "ShardInfo",
    "Sharding",
    "ShardingPolicy",
    "Tail",
    "UnpinnedPolicy",
    "VerifyLevel",
    "pin",
    "sample_key",
    "write_arrow_shards",
]
