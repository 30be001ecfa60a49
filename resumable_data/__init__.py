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
    WorkerError,
)

# -- plan (pure index maths) --
from resumable_data.plan import (
    Order,
    OrderSpec,
    Overlong,
    Packing,
    PackMode,
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
# -- loader (torch) --
from resumable_data.labels import RecoveryLabel
from resumable_data.loader import (
    BatchContext,
    CommitMode,
    CounterView,
    Cursor,
    DataLoader,
    OnUncommitted,
    PositionalSampler,
    SampleContext,
    batch_context,
    sample_context,
)
# -- checkpoint (training state) --
from resumable_data import instrument
from resumable_data.checkpoint import (
    AccumulationPolicy,
    NewRankRNG,
    CheckpointError,
    CheckpointMeta,
    CompatibilityError,
    CompatibilityReport,
    Inventory,
    MetricLog,
    SchedulerConvention,
    Severity,
    TrainingState,
    check_compatible,
    load_checkpoint,
    save_checkpoint,
    scaler_step,
)
# -- faces --
from resumable_data import distributed, testing

__version__ = "0.1.0"

__all__ = [
    "AccumulationPolicy",
    "ArrowShards",
    "BatchContext",
    "CheckpointError",
    "CheckpointMeta",
    "CommitMode",
    "CompatibilityError",
    "CompatibilityReport",
    "ConfigError",
    "CounterView",
    "Cursor",
    "DataLoader",
    "DatasetIntegrityError",
    "DatasetVersion",
    "HashMode",
    "Inventory",
    "MetricLog",
    "NewRankRNG",
    "OnUncommitted",
    "Order",
    "OrderSpec",
    "Overlong",
    "PackMode",
    "Packing",
    "Permutation",
    "Plan",
    "PositionalSampler",
    "RecordIdError",
    "RecoveryLabel",
    "ResumableDataError",
    "ResumeError",
    "SampleContext",
    "SchedulerConvention",
    "Severity",
    "ShardInfo",
    "Sharding",
    "ShardingPolicy",
    "Tail",
    "TrainingState",
    "UnpinnedPolicy",
    "VerifyLevel",
    "WorkerError",
    "batch_context",
    "check_compatible",
    "distributed",
    "instrument",
    "load_checkpoint",
    "pin",
    "sample_context",
    "sample_key",
    "save_checkpoint",
    "scaler_step",
    "testing",
    "write_arrow_shards",
]

# -- resume helpers (issue 16): kept as one block so it merges with the lazy facade --
from resumable_data.checkpoint.resume import latest_checkpoint, resume_or_start  # noqa: E402
from resumable_data.checkpoint.store import list_checkpoints  # noqa: E402

__all__ += ["latest_checkpoint", "list_checkpoints", "resume_or_start"]
