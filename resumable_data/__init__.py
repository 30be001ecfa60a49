"""resumable_data: deterministic, resumable PyTorch data pipelines.

What the loader delivers at logical position ``p`` is a pure function of (dataset version hash,
seed, p, sharding policy), so the loader's state is a cursor of a few integers and resume is a
seek. See the README for the tour.

This module is a lazy facade (PEP 562): ``rd.X`` imports the one module that defines ``X`` on
first access and caches it here. So ``import resumable_data.plan`` costs numpy and xxhash only
(no torch, no pyarrow), ``import resumable_data.sources`` adds pyarrow but never torch, and
``import resumable_data`` alone loads nothing but this file. The layers, imports pointing
downward only (``tests/test_layers.py`` enforces it): ``plan`` -> ``sources`` -> ``loader`` (torch)
-> ``checkpoint`` -> the faces (``cli``, ``testing``, ``distributed``, ``instrument``, demos).
"""

from __future__ import annotations

import importlib
from typing import Any

from resumable_data._version import __version__ as __version__

# public name -> the module that defines it (grouped by layer, bottom first)
_EXPORTS: dict[str, str] = {
    # -- errors (shared) --
    "ConfigError": "resumable_data.errors",
    "ConfigTypeError": "resumable_data.errors",
    "DamagedShardError": "resumable_data.errors",
    "DatasetIntegrityError": "resumable_data.errors",
    "NotRegularFileError": "resumable_data.errors",
    "ResumableDataError": "resumable_data.errors",
    "ResumeError": "resumable_data.errors",
    "StoreUnavailableError": "resumable_data.errors",
    "UsageError": "resumable_data.errors",
    "WorkerError": "resumable_data.errors",
    "RecoveryLabel": "resumable_data.labels",
    # -- plan (pure index maths) --
    "Order": "resumable_data.plan",
    "OrderSpec": "resumable_data.plan",
    "Overlong": "resumable_data.plan",
    "BatchOrigin": "resumable_data.plan",
    "BatchRamp": "resumable_data.plan",
    "BatchSchedule": "resumable_data.plan",
    "BatchSteps": "resumable_data.plan",
    "Packing": "resumable_data.plan",
    "PackMode": "resumable_data.plan",
    "Permutation": "resumable_data.plan",
    "Plan": "resumable_data.plan",
    "Sharding": "resumable_data.plan",
    "ShardingPolicy": "resumable_data.plan",
    "Tail": "resumable_data.plan",
    "WindowBlocks": "resumable_data.plan",
    "WeightSchedule": "resumable_data.plan.mixture.weights",
    "sample_key": "resumable_data.plan",
    # -- sources (pinned Arrow shards; pyarrow, no torch) --
    "ArrowShards": "resumable_data.sources",
    "DatasetVersion": "resumable_data.sources",
    "HashMode": "resumable_data.sources",
    "Mixture": "resumable_data.sources.mixture",
    "PinSave": "resumable_data.sources",
    "ReadAhead": "resumable_data.sources",
    "ReadUnit": "resumable_data.sources",
    "RecordIdError": "resumable_data.sources",
    "Retries": "resumable_data.sources",
    "ShardInfo": "resumable_data.sources",
    "UnpinnedPolicy": "resumable_data.sources",
    "VerifyLevel": "resumable_data.sources",
    "pin": "resumable_data.sources",
    "prepare": "resumable_data.sources.prepare",
    "PrepareResult": "resumable_data.sources.prepare",
    "write_arrow_shards": "resumable_data.sources",
    # -- loader (torch) --
    "BatchContext": "resumable_data.loader",
    "CommitMode": "resumable_data.loader",
    "CounterView": "resumable_data.loader",
    "Cursor": "resumable_data.loader",
    "DataLoader": "resumable_data.loader",
    "LoaderState": "resumable_data.loader",
    "ResumableLoader": "resumable_data.loader",
    "OnBatchChange": "resumable_data.loader",
    "OnUncommitted": "resumable_data.loader",
    "PositionalSampler": "resumable_data.loader",
    "SampleContext": "resumable_data.loader",
    "SampleSeeding": "resumable_data.loader",
    "batch_context": "resumable_data.loader",
    "sample_context": "resumable_data.loader",
    "seed_globals": "resumable_data.loader",
    "sharding_from_environment": "resumable_data.loader",
    # -- checkpoint (training state) --
    "AccumulationPolicy": "resumable_data.checkpoint",
    "CheckpointError": "resumable_data.checkpoint",
    "CheckpointMeta": "resumable_data.checkpoint",
    "CompatibilityError": "resumable_data.checkpoint",
    "CompatibilityReport": "resumable_data.checkpoint",
    "Inventory": "resumable_data.checkpoint",
    "MetricLog": "resumable_data.checkpoint",
    "NewRankRNG": "resumable_data.checkpoint",
    "SchedulerConvention": "resumable_data.checkpoint",
    "Severity": "resumable_data.checkpoint",
    "latest_checkpoint": "resumable_data.checkpoint.resume",
    "list_checkpoints": "resumable_data.checkpoint.store",
    "resume_or_start": "resumable_data.checkpoint.resume",
    "TrainingState": "resumable_data.checkpoint",
    "check_compatible": "resumable_data.checkpoint",
    "load_checkpoint": "resumable_data.checkpoint",
    "save_checkpoint": "resumable_data.checkpoint",
    "scaler_step": "resumable_data.checkpoint",
}

# submodules reachable as attributes (``rd.testing.assert_resumes``, ``rd.sources.MANIFEST_NAME``),
# imported on first access; the first three are public names (``__all__``)
_SUBMODULES = frozenset({"distributed", "instrument", "testing"})
_MODULES = _SUBMODULES | {"checkpoint", "errors", "labels", "loader", "plan", "sources"}

__all__ = sorted([*_EXPORTS, *_SUBMODULES])


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        value: Any = importlib.import_module(f"{__name__}.{name}")
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_MODULES})
