"""The torch layer: the drop-in DataLoader, the commit protocol, per-sample randomness."""

from resumable_data.loader.context import BatchContext, SampleContext, batch_context, sample_context
from resumable_data.loader.environment import sharding_from_environment  # before dataloader: see its TODO
from resumable_data.loader.dataloader import CounterView, DataLoader
from resumable_data.loader.state import CommitMode, Cursor, LoaderState, OnUncommitted
from resumable_data.loader.translate import PositionalSampler

__all__ = [
    "BatchContext",
    "CommitMode",
    "CounterView",
    "Cursor",
    "DataLoader",
    "LoaderState",
    "OnUncommitted",
    "PositionalSampler",
    "SampleContext",
    "batch_context",
    "sample_context",
    "sharding_from_environment",
]
