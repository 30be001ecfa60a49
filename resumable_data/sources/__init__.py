"""Sources: pinned Arrow shards (IPC memory-mapped, Parquet by row group), manifests, ``take``.

No torch here. Modules: :mod:`.files` (discovery, formats, streamed hashing), :mod:`.version`
(:class:`DatasetVersion`, manifest, verify), :mod:`.pin` (:func:`pin`), :mod:`.gather` (the
vectorized take engine), :mod:`.arrow_shards` (:class:`ArrowShards`), :mod:`.writer`
(:func:`write_arrow_shards`).
"""

from resumable_data.sources.arrow_shards import ArrowShards, RecordIdError, UnpinnedPolicy
from resumable_data.sources.files import MANIFEST_NAME
from resumable_data.sources.pin import pin
from resumable_data.sources.version import (
    DatasetVersion,
    HashMode,
    Selection,
    ShardInfo,
    VerifyLevel,
)
from resumable_data.sources.writer import ShardWriteFormat, write_arrow_shards

__all__ = [
    "MANIFEST_NAME",
    "ArrowShards",
    "DatasetVersion",
    "HashMode",
    "RecordIdError",
    "Selection",
    "ShardInfo",
    "ShardWriteFormat",
    "UnpinnedPolicy",
    "VerifyLevel",
    "pin",
    "write_arrow_shards",
]
