"""The torch layer: the drop-in DataLoader, the commit protocol, per-sample randomness.

Names load lazily, so the torch-free modules of this layer (``config``, ``resolve``, ``order``, ``ledger``, ``state``,
``protocol``) can be imported and tested without importing torch."""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "BatchContext": "context",
    "SampleContext": "context",
    "batch_context": "context",
    "sample_context": "context",
    "seed_globals": "context",
    "DataLoader": "dataloader",
    "CounterView": "state",
    "CommitMode": "state",
    "Cursor": "state",
    "LoaderState": "state",
    "OnBatchChange": "state",
    "OnUncommitted": "state",
    "LoaderConfig": "config",
    "resolve_config": "resolve",
    "SampleSeeding": "seeding.sample_seeding",
    "ProgressLedger": "ledger",
    "ResumableLoader": "protocol",
    "PositionalSampler": "positional",
    "sharding_from_environment": "environment",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'resumable_data.loader' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"resumable_data.loader.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_NAMES))
