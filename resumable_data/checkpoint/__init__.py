"""The checkpoint layer: the training-state inventory, metadata and compatibility contract,
atomic save/load (safetensors + JSON, never pickle), AMP step accounting and an idempotent
metric stream. See each module's docstring for its algorithm and guarantees."""

from resumable_data.checkpoint.amp import scaler_step, step_was_applied
from resumable_data.checkpoint.compat import (
    CONTRACT_VERSION,
    RULES,
    Category,
    CompatibilityReport,
    Difference,
    Severity,
    check_compatible,
)
from resumable_data.checkpoint.errors import CheckpointError, CompatibilityError
from resumable_data.checkpoint.inventory import Inventory, InventoryEntry
from resumable_data.checkpoint.load import LoadedCheckpoint, load_checkpoint
from resumable_data.checkpoint.meta import CheckpointMeta, SchedulerConvention, fingerprint
from resumable_data.checkpoint.metrics import MetricLog
from resumable_data.checkpoint.save import save_checkpoint
from resumable_data.checkpoint.state import AccumulationPolicy, NewRankRNG, TrainingState
from resumable_data.checkpoint.store import cleanup_incomplete, list_checkpoints, read_checkpoint

__all__ = [
    "CONTRACT_VERSION",
    "RULES",
    "AccumulationPolicy",
    "Category",
    "CheckpointError",
    "CheckpointMeta",
    "CompatibilityError",
    "CompatibilityReport",
    "Difference",
    "Inventory",
    "InventoryEntry",
    "LoadedCheckpoint",
    "MetricLog",
    "NewRankRNG",
    "SchedulerConvention",
    "Severity",
    "TrainingState",
    "check_compatible",
    "cleanup_incomplete",
    "fingerprint",
    "list_checkpoints",
    "load_checkpoint",
    "read_checkpoint",
    "save_checkpoint",
    "scaler_step",
    "step_was_applied",
]
